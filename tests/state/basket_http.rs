//! The basket's versioned tools over real HTTP: the seed's schedule, replays, operation-id reuse,
//! one transition for a burst of identical requests, expiry, the terminal lifecycle, principals
//! and pruned history. Every result is checked against the official schema and the tool's
//! published output schema.

use crate::basket;
use crate::basket_client;
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use mcp_tools::store::{ManualClock, Store, StoreConfig};
use mcp_tools::{MemoryStore, SqliteStore};
use serde_json::{Value, json};

use basket_client::{Agent, authenticated_server, operation_id, outcome, server, show};
use common::TestServer;

async fn memory_server() -> (TestServer, Agent) {
    let server = TestServer::start(server(MemoryStore::default())).await;
    let agent = Agent::connect(&server.url(), None).await;
    (server, agent)
}

#[tokio::test]
async fn tools_publish_the_added_arguments_and_derived_hints() {
    let (server, _) = memory_server().await;
    let reply = common::Call::new("tools/list", json!(1), json!({}))
        .send(&server)
        .await;
    let tools = reply.result()["tools"].as_array().unwrap().clone();
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();

    let upgrade = tool("basket_upgrade_memory");
    let input = &upgrade["inputSchema"];
    for (property, hint) in [
        ("basket_id", "bsk_"),
        ("expected_version", "basis_version"),
        ("operation_id", "same id"),
    ] {
        let description = input["properties"][property]["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{property} undescribed: {input}"));
        assert!(description.contains(hint), "{property}: {description}");
    }
    // A version number or the validator of a result; required at call time unless `_meta`
    // carries the validator, so the schema cannot require it.
    let expected = &input["properties"]["expected_version"];
    assert_eq!(expected["type"], json!(["integer", "string"]));
    assert_eq!(expected["minimum"], 1);
    let required: Vec<&str> = input["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for property in ["basket_id", "operation_id", "memory_gib"] {
        assert!(required.contains(&property), "{required:?}");
    }
    assert!(!required.contains(&"expected_version"), "{required:?}");
    assert_eq!(upgrade["annotations"]["idempotentHint"], true);
    let output = upgrade["outputSchema"].to_string();
    for branch in ["applied", "stale_view", "rejected", "replayed"] {
        assert!(output.contains(&format!("\"{branch}\"")), "{output}");
    }

    assert_eq!(tool("basket_get")["annotations"]["readOnlyHint"], true);
    let get = tool("basket_get");
    let cursor = &get["inputSchema"]["properties"]["items_cursor"];
    assert!(
        cursor["description"]
            .as_str()
            .unwrap()
            .contains("next_cursor"),
        "{get}"
    );
    // Each change says which rule it follows.
    for (name, rule) in [
        ("basket_add_note", "commutes"),
        ("basket_edit_note", "per_item"),
        ("basket_remove_note", "per_item"),
        ("basket_upgrade_memory", "versioned"),
        ("basket_checkout", "versioned"),
    ] {
        let state = &tool(name)["_meta"]["io.github.mcp-tools/state"];
        assert_eq!(state["concurrency"], rule, "{name}: {state}");
        assert_eq!(state["collections"], json!(["notes"]), "{name}");
    }
    let note = tool("basket_add_note");
    let properties = note["inputSchema"]["properties"].as_object().unwrap();
    assert!(!properties.contains_key("expected_version"), "{note}");
    assert!(properties.contains_key("operation_id"));
    let create = tool("basket_create");
    let properties = create["inputSchema"]["properties"].as_object().unwrap();
    assert!(!properties.contains_key("basket_id"), "{create}");
    assert!(!properties.contains_key("expected_version"), "{create}");
    let description = properties["operation_id"]["description"].as_str().unwrap();
    assert!(
        description.contains("same id") && description.contains("same handle"),
        "{description}"
    );
    assert_eq!(properties["operation_id"]["minLength"], 1);
    assert_eq!(create["inputSchema"]["required"], json!(["operation_id"]));
    assert_eq!(create["annotations"]["idempotentHint"], true);
}

/// Each stateful tool publishes its own outcome union (the basket's view in `state`, its result
/// type, exactly its codes) and its concurrency contract; the docs render both.
#[tokio::test]
async fn each_tool_publishes_its_own_outcomes_and_contract() {
    let (_server, agent) = memory_server().await;
    let reply = common::Call::new("tools/list", json!(1), json!({}))
        .send_to(&agent.url)
        .await;
    let tools = reply.result()["tools"].as_array().unwrap().clone();
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    let codes = |schema: &Value| -> Vec<String> {
        schema["$defs"]["Rejected"]["properties"]["code"]["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|code| code["const"].as_str().unwrap_or("<open>").to_owned())
            .collect()
    };

    let upgrade = tool("basket_upgrade_memory");
    let schema = &upgrade["outputSchema"];
    let defs = &schema["$defs"];
    assert_eq!(
        defs["Applied"]["properties"]["state"]["$ref"],
        "#/$defs/BasketView"
    );
    assert_eq!(defs["Applied"]["properties"]["result"]["type"], "integer");
    assert_eq!(
        defs["StaleView"]["properties"]["current_state"]["$ref"],
        "#/$defs/BasketView"
    );
    assert!(defs["BasketView"]["properties"]["note_count"].is_object());
    let declared = codes(schema);
    for code in [
        "NOT_AN_UPGRADE",
        "INVALID_SIZE",
        "NOT_FOUND",
        "FUTURE_VERSION",
    ] {
        assert!(declared.contains(&code.to_owned()), "{code}: {declared:?}");
    }
    assert!(
        !declared.contains(&"<open>".to_owned()),
        "a closed set: {declared:?}"
    );
    let described = schema["$defs"]["Rejected"]["properties"]["code"]["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|code| code["const"] == "NOT_AN_UPGRADE")
        .unwrap()["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        described.starts_with("The size asked for is not larger")
            && described.ends_with("Recovery: refresh_and_replan."),
        "{described}"
    );
    // The schema tells a well-typed outcome from a mistyped one.
    let validator = common::compile(schema);
    let resumption = json!({"handle": "bsk_a", "basis_version": 2, "lifecycle": "active"});
    let view = json!({"model": "Laptop 14", "memory_gib": 32, "storage_gib": 512,
        "note_count": 0, "checked_out": false});
    let applied = json!({"outcome": "applied", "handle": "bsk_a", "version": 2, "state": view,
        "result": 32, "resumption": resumption});
    assert!(validator.is_valid(&applied), "{applied}");
    let mut whole_basket = applied.clone();
    whole_basket["state"] = json!({"model": "Laptop 14", "memory_gib": 32, "storage_gib": 512,
        "notes": {"len": 0, "next_id": 1}, "checked_out": false});
    assert!(!validator.is_valid(&whole_basket), "the state is the view");
    let mut text_result = applied.clone();
    text_result["result"] = json!("32");
    assert!(
        !validator.is_valid(&text_result),
        "the result is the function's type"
    );
    let made_up = json!({"outcome": "rejected", "code": "MADE_UP", "message": "m"});
    assert!(!validator.is_valid(&made_up), "only declared codes");

    // The read's state is the whole basket; the add-note result is a count and it cannot fail.
    let get = tool("basket_get");
    assert_eq!(
        get["outputSchema"]["$defs"]["Snapshot"]["properties"]["state"]["$ref"],
        "#/$defs/Basket"
    );
    let note = tool("basket_add_note");
    assert!(!codes(&note["outputSchema"]).contains(&"NOT_AN_UPGRADE".to_owned()));

    // The concurrency contract.
    let contract = |name: &str| tool(name)["_meta"]["io.github.mcp-tools/state"].clone();
    let memory = contract("basket_upgrade_memory");
    assert_eq!(memory["resource"], "basket");
    assert_eq!(memory["tool"], "mutates");
    assert_eq!(memory["handle"], "basket_id");
    assert_eq!(memory["conflict"], "reject");
    assert_eq!(memory["precondition"], "expected_version");
    assert_eq!(memory["idempotency"], "operation_id");
    assert_eq!(memory["codes_open"], false);
    let not_an_upgrade = memory["codes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|code| code["code"] == "NOT_AN_UPGRADE")
        .unwrap()
        .clone();
    assert_eq!(not_an_upgrade["recovery"], "refresh_and_replan");
    assert!(
        not_an_upgrade["description"]
            .as_str()
            .unwrap()
            .starts_with("The size asked for is not larger"),
        "{not_an_upgrade}"
    );
    let storage = contract("basket_upgrade_storage");
    assert_eq!(storage["conflict"], "rebase");
    assert_eq!(storage["touches"], json!(["storage_gib"]));
    let checkout = contract("basket_checkout");
    assert_eq!(checkout["conflict"], "reconfirm");
    assert_eq!(checkout["terminal"], true);
    assert_eq!(
        tool("basket_checkout")["annotations"]["destructiveHint"],
        true
    );
    assert!(
        tool("basket_upgrade_memory")["annotations"]
            .get("destructiveHint")
            .is_none()
    );
    assert_eq!(contract("basket_add_note")["precondition"], Value::Null);
    // A function that cannot fail declares no codes of its own: the set is closed.
    assert_eq!(contract("basket_add_note")["codes_open"], false);
    assert!(!codes(&note["outputSchema"]).contains(&"<open>".to_owned()));
    let create = contract("basket_create");
    assert_eq!(create["tool"], "creates");
    assert!(create.get("handle").is_none());
    assert_eq!(contract("basket_get")["tool"], "reads");
    // Each kind of tool lists the framework codes it can answer, and only those.
    let listed = |name: &str| -> Vec<(String, Value)> {
        contract(name)["codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|code| {
                (
                    code["code"].as_str().unwrap().to_owned(),
                    code["recovery"].clone(),
                )
            })
            .collect()
    };
    let has = |name: &str, code: &str| listed(name).iter().any(|(listed, _)| listed == code);
    assert!(has("basket_create", "OPERATION_IN_PROGRESS") && !has("basket_create", "LEDGER_FULL"));
    assert!(
        has("basket_upgrade_memory", "LEDGER_FULL")
            && !has("basket_upgrade_memory", "OPERATION_IN_PROGRESS")
    );
    assert!(
        has("basket_create", "TRANSITION_PANICKED") && !has("basket_get", "TRANSITION_PANICKED")
    );
    assert!(
        has("basket_get", "OUTPUT_NOT_SERIALIZABLE")
            && !has("basket_upgrade_memory", "OUTPUT_NOT_SERIALIZABLE")
    );
    assert!(has("basket_get", "FUTURE_VERSION") && !has("basket_create", "FUTURE_VERSION"));
    assert!(
        has("basket_checkout", "NOT_CONFIRMED") && !has("basket_upgrade_memory", "NOT_CONFIRMED")
    );
    let stale_recovery = |name: &str| {
        listed(name)
            .into_iter()
            .find(|(code, _)| code == "STALE_VIEW")
            .unwrap()
            .1
    };
    assert_eq!(stale_recovery("basket_checkout"), "reconfirm");
    assert_eq!(
        stale_recovery("basket_upgrade_memory"),
        "refresh_and_replan"
    );

    let docs = basket::tool_set().markdown();
    assert!(
        docs.contains(
            "| `NOT_AN_UPGRADE` | `refresh_and_replan` | The size asked for is not larger"
        ),
        "{docs}"
    );
    assert!(docs.contains(
        "Mutates a `basket`; handle argument `basket_id`; on conflict `reconfirm`; terminal"
    ));
}

/// Anonymous callers share one ledger, so a model-chosen id like `create-1` would replay one
/// caller's create, handle included, to another: such ids are refused before anything runs or is
/// recorded. Authenticated callers each have their own ledger and may use any id.
#[tokio::test]
async fn anonymous_callers_must_send_unguessable_operation_ids() {
    let (_server, agent) = memory_server().await;
    let handle = agent.create().await;
    let description = {
        let reply = common::Call::new("tools/list", json!(1), json!({}))
            .send_to(&agent.url)
            .await;
        let tools = reply.result()["tools"].clone();
        tools[0]["inputSchema"]["properties"]["operation_id"]["description"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(description.contains("UUID"), "{description}");
    for (tool, arguments) in [
        ("basket_create", json!({"operation_id": "create-1"})),
        (
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "up-1", "memory_gib": 32}),
        ),
        (
            "basket_add_note",
            json!({"basket_id": handle, "operation_id": "AAAAAAAAAAAAAAAAAAAAA", "text": "x"}),
        ),
    ] {
        // Twice: a second caller sending the same body is refused just the same.
        for _ in 0..2 {
            let refused = agent.call(tool, arguments.clone()).await;
            assert_eq!(outcome(&refused), "rejected", "{tool}: {refused}");
            assert_eq!(
                refused["structuredContent"]["code"],
                "GUESSABLE_OPERATION_ID"
            );
            assert_eq!(refused["structuredContent"]["recovery"], "new_operation_id");
            let text = refused["content"][0]["text"].as_str().unwrap();
            assert!(text.contains("UUID"), "{text}");
        }
    }
    assert_eq!(agent.get(&handle).await.0, 1, "nothing applied");
    let uuid = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 1,
                   "operation_id": "3f2c8a4e-9b1d-4c6f-8e2a-7d5b0c1e9f43", "memory_gib": 32}),
        )
        .await;
    assert_eq!(outcome(&uuid), "applied", "{uuid}");

    let server = TestServer::start(authenticated_server(MemoryStore::default())).await;
    let alice = Agent::connect(&server.url(), Some("alice")).await;
    let bob = Agent::connect(&server.url(), Some("bob")).await;
    let created = alice
        .call("basket_create", json!({"operation_id": "create-1"}))
        .await;
    assert_eq!(outcome(&created), "applied", "{created}");
    // Bob's `create-1` is his own: a new basket, never Alice's outcome or handle.
    let his = bob
        .call("basket_create", json!({"operation_id": "create-1"}))
        .await;
    assert_eq!(outcome(&his), "applied", "{his}");
    assert_ne!(
        his["structuredContent"]["handle"],
        created["structuredContent"]["handle"]
    );
}

#[tokio::test]
async fn the_seeds_schedule_refuses_the_stale_snapshot_and_keeps_both_upgrades() {
    let (_server, agent) = memory_server().await;
    let handle = agent.create().await;
    let (a_version, a_state) = agent.get(&handle).await;
    let (b_version, b_state) = agent.get(&handle).await;
    assert_eq!((a_version, b_version), (1, 1));
    assert_eq!(
        (&a_state["memory_gib"], &b_state["storage_gib"]),
        (&json!(16), &json!(512))
    );

    let a = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "a-1-000000000000000000", "memory_gib": 32}),
        )
        .await;
    assert_eq!(outcome(&a), "applied", "{a}");
    assert_eq!(a["structuredContent"]["version"], 2);

    // B's full snapshot, planned from version 1, would restore 16 GiB of memory.
    let b = agent
        .call(
            "basket_replace_configuration",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "b-1-000000000000000000",
                   "memory_gib": b_state["memory_gib"], "storage_gib": 1024}),
        )
        .await;
    assert_eq!(outcome(&b), "stale_view", "{b}");
    assert_eq!(b["isError"], true);
    let stale = &b["structuredContent"];
    assert_eq!(stale["code"], "STALE_VIEW");
    assert_eq!(stale["expected_version"], 1);
    assert_eq!(stale["current_version"], 2);
    assert_eq!(stale["recovery"], "refresh_and_replan");
    assert_eq!(stale["delta_available"], true);
    assert_eq!(
        stale["delta"],
        json!([{"path": "/memory_gib", "before": 16, "after": 32}])
    );
    assert_eq!(stale["current_state"]["memory_gib"], 32);

    // B refreshes and replans with a new operation id.
    let (version, state) = agent.get(&handle).await;
    assert_eq!(version, 2);
    let b = agent
        .call(
            "basket_replace_configuration",
            json!({"basket_id": handle, "expected_version": version, "operation_id": "b-2-000000000000000000",
                   "memory_gib": state["memory_gib"], "storage_gib": 1024}),
        )
        .await;
    assert_eq!(outcome(&b), "applied", "{b}");
    let (version, state) = agent.get(&handle).await;
    assert_eq!(version, 3);
    assert_eq!(
        (&state["memory_gib"], &state["storage_gib"]),
        (&json!(32), &json!(1024))
    );
}

#[tokio::test]
async fn a_storage_upgrade_from_an_old_view_rebases_over_a_memory_change() {
    let (_server, agent) = memory_server().await;
    let handle = agent.create().await;
    let a = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "a-00000000000000000000", "memory_gib": 32}),
        )
        .await;
    assert_eq!(outcome(&a), "applied");
    let b = agent
        .call(
            "basket_upgrade_storage",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "b-00000000000000000000", "storage_gib": 1024}),
        )
        .await;
    assert_eq!(outcome(&b), "applied", "{b}");
    assert_eq!(b["structuredContent"]["rebased_from"], 1);
    assert_eq!(b["structuredContent"]["version"], 3);
    assert_eq!(b["structuredContent"]["result"], 1024);
    assert_eq!(b["structuredContent"]["state"]["memory_gib"], 32);

    // A second storage change planned from version 1 touches what changed since: refused.
    let c = agent
        .call(
            "basket_upgrade_storage",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "c-00000000000000000000", "storage_gib": 2048}),
        )
        .await;
    assert_eq!(outcome(&c), "stale_view", "{c}");
    let paths: Vec<&Value> = c["structuredContent"]["delta"]
        .as_array()
        .unwrap()
        .iter()
        .map(|change| &change["path"])
        .collect();
    assert!(paths.contains(&&json!("/storage_gib")), "{paths:?}");
}

#[tokio::test]
async fn a_retry_after_a_lost_response_replays_and_a_changed_payload_is_refused() {
    let (_server, agent) = memory_server().await;
    let handle = agent.create().await;
    let arguments = json!({"basket_id": handle, "expected_version": 1, "operation_id": "lost-1-000000000000000", "memory_gib": 32});
    let first = agent.call("basket_upgrade_memory", arguments.clone()).await;
    assert_eq!(outcome(&first), "applied");
    // The response was lost; meanwhile someone else changes the basket.
    let note = agent
        .call(
            "basket_add_note",
            json!({"basket_id": handle, "operation_id": "note-1-000000000000000", "text": "gift wrap"}),
        )
        .await;
    assert_eq!(outcome(&note), "applied");

    // The retry, arguments in another key order: expected_version 1 is stale now, but the
    // recorded outcome comes back first.
    let retry = agent
        .call(
            "basket_upgrade_memory",
            json!({"memory_gib": 32, "operation_id": "lost-1-000000000000000", "expected_version": 1, "basket_id": handle}),
        )
        .await;
    show("retry", "basket_upgrade_memory", &arguments, &retry);
    assert_eq!(outcome(&retry), "replayed", "{retry}");
    assert_ne!(retry["isError"], true);
    let replayed = &retry["structuredContent"];
    assert_eq!(replayed["operation_id"], "lost-1-000000000000000");
    assert_eq!(
        replayed["original"],
        common::recorded_applied(&first["structuredContent"])
    );
    // The replay also says where the basket is now: still version 3, with the view.
    assert_eq!(replayed["current"]["version"], 3);
    assert_eq!(replayed["current"]["state"]["memory_gib"], 32);
    let (version, state) = agent.get(&handle).await;
    assert_eq!((version, &state["memory_gib"]), (3, &json!(32)));

    let reused = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 3, "operation_id": "lost-1-000000000000000", "memory_gib": 64}),
        )
        .await;
    assert_eq!(outcome(&reused), "rejected", "{reused}");
    assert_eq!(reused["isError"], true);
    assert_eq!(reused["structuredContent"]["code"], "OPERATION_ID_REUSED");
    assert_eq!(agent.get(&handle).await.0, 3);
}

#[tokio::test]
async fn a_create_retried_after_a_lost_response_replays_the_same_basket() {
    let store = MemoryStore::default();
    let server = TestServer::start(server(store.clone())).await;
    let agent = Agent::connect(&server.url(), None).await;
    let arguments = json!({"operation_id": "create-lost-1-00000000", "model": "Laptop 16"});
    let first = agent.call("basket_create", arguments.clone()).await;
    assert_eq!(outcome(&first), "applied", "{first}");
    let handle = first["structuredContent"]["handle"].as_str().unwrap();
    assert_eq!(store.resource_count_for_tests(), 1);

    // The response never reached the client, which retries with the same id and arguments (in
    // another key order).
    let retry = agent
        .call(
            "basket_create",
            json!({"model": "Laptop 16", "operation_id": "create-lost-1-00000000"}),
        )
        .await;
    show("retry", "basket_create", &arguments, &retry);
    assert_eq!(outcome(&retry), "replayed", "{retry}");
    assert_ne!(retry["isError"], true);
    let replayed = &retry["structuredContent"];
    assert_eq!(replayed["operation_id"], "create-lost-1-00000000");
    assert_eq!(replayed["original"]["handle"], handle);
    assert_eq!(replayed["original"]["version"], 1);
    assert_eq!(
        replayed["original"],
        common::recorded_applied(&first["structuredContent"])
    );
    assert_eq!(store.resource_count_for_tests(), 1);
    let (version, state) = agent.get(handle).await;
    assert_eq!((version, &state["model"]), (1, &json!("Laptop 16")));

    // The same id for another basket is refused, and nothing is created.
    let reused = agent
        .call(
            "basket_create",
            json!({"operation_id": "create-lost-1-00000000", "model": "Laptop 13"}),
        )
        .await;
    assert_eq!(outcome(&reused), "rejected", "{reused}");
    assert_eq!(reused["isError"], true);
    assert_eq!(reused["structuredContent"]["code"], "OPERATION_ID_REUSED");
    assert_eq!(store.resource_count_for_tests(), 1);

    // The id is required: a create without one is refused before anything is stored.
    let missing = common::Call::call_tool("basket_create", json!({"model": "Laptop 13"}))
        .send(&server)
        .await;
    assert!(
        missing.text.contains("operation_id"),
        "missing operation_id accepted: {}",
        missing.text
    );
    assert_eq!(store.resource_count_for_tests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_creates_with_one_operation_id_make_one_basket() {
    let store = MemoryStore::default();
    let server = TestServer::start(server(store.clone())).await;
    let agent = Agent::connect(&server.url(), None).await;
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let agent = agent.clone();
            tokio::spawn(async move {
                agent
                    .call(
                        "basket_create",
                        json!({"operation_id": "create-burst-000000000"}),
                    )
                    .await
            })
        })
        .collect();
    let mut applied = Vec::new();
    let mut replayed = Vec::new();
    let mut in_progress = 0;
    for (index, call) in calls.into_iter().enumerate() {
        let result = common::within(&format!("concurrent create {index}"), call)
            .await
            .unwrap();
        match outcome(&result) {
            "applied" => applied.push(common::recorded_applied(&result["structuredContent"])),
            "replayed" => replayed.push(result["structuredContent"]["original"].clone()),
            // Arrived while the first was making its basket: nothing was made for it, and a
            // retry once the first is done replays it (below).
            "rejected" if result["structuredContent"]["code"] == "OPERATION_IN_PROGRESS" => {
                in_progress += 1
            }
            other => panic!("unexpected outcome {other}: {result}"),
        }
    }
    for _ in 0..in_progress {
        let retry = agent
            .call(
                "basket_create",
                json!({"operation_id": "create-burst-000000000"}),
            )
            .await;
        assert_eq!(outcome(&retry), "replayed", "{retry}");
        replayed.push(retry["structuredContent"]["original"].clone());
    }
    let baskets = store.resource_count_for_tests();
    println!(
        "50 concurrent creates with one operation_id: {} applied, {} replayed ({in_progress} of \
         them retried after OPERATION_IN_PROGRESS), {baskets} baskets",
        applied.len(),
        replayed.len()
    );
    assert_eq!(baskets, 1);
    assert_eq!((applied.len(), replayed.len()), (1, 49));
    for original in &replayed {
        assert_eq!(original, &applied[0]);
    }
    let handle = applied[0]["handle"].as_str().unwrap();
    assert_eq!(agent.get(handle).await.0, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_requests_with_one_operation_id_apply_once() {
    let (_server, agent) = memory_server().await;
    let handle = agent.create().await;
    let arguments = json!({"basket_id": handle, "expected_version": 1, "operation_id": "burst-0000000000000000", "memory_gib": 64});
    let calls: Vec<_> = (0..200)
        .map(|_| {
            let agent = agent.clone();
            let arguments = arguments.clone();
            tokio::spawn(async move { agent.call("basket_upgrade_memory", arguments).await })
        })
        .collect();
    let mut applied = Vec::new();
    let mut replayed = 0;
    for (index, call) in calls.into_iter().enumerate() {
        let result = common::within(&format!("concurrent upgrade {index}"), call)
            .await
            .unwrap();
        match outcome(&result) {
            "applied" => applied.push(result["structuredContent"].clone()),
            "replayed" => {
                assert_eq!(
                    result["structuredContent"]["original"]["outcome"],
                    "applied"
                );
                assert_eq!(result["structuredContent"]["original"]["version"], 2);
                replayed += 1;
            }
            other => panic!("unexpected outcome {other}: {result}"),
        }
    }
    println!(
        "200 concurrent requests with one operation_id: {} applied, {replayed} replayed",
        applied.len()
    );
    assert_eq!(applied.len(), 1);
    assert_eq!(replayed, 199);
    assert_eq!(agent.get(&handle).await.0, 2);
}

#[tokio::test]
async fn an_expired_basket_answers_expired() {
    let clock = ManualClock::at_millis(1_785_231_000_000);
    let store = MemoryStore::new(StoreConfig {
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    });
    let server = TestServer::start(server(store)).await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    let created = agent.call("basket_get", json!({"basket_id": handle})).await;
    assert_eq!(
        created["structuredContent"]["resumption"]["expires_at"],
        "2026-07-29T09:30:00.000Z"
    );
    clock.advance(Duration::from_secs(24 * 60 * 60 + 1));

    let read = agent.call("basket_get", json!({"basket_id": handle})).await;
    assert_eq!(outcome(&read), "rejected", "{read}");
    assert_eq!(read["structuredContent"]["code"], "EXPIRED");
    let write = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "late-00000000000000000", "memory_gib": 32}),
        )
        .await;
    assert_eq!(write["structuredContent"]["code"], "EXPIRED", "{write}");
    assert_eq!(write["structuredContent"]["recovery"], "create_new");
}

#[tokio::test]
async fn checkout_asks_for_reconfirmation_then_the_basket_is_terminal() {
    let (_server, agent) = memory_server().await;
    let handle = agent.create().await;
    agent
        .call(
            "basket_add_note",
            json!({"basket_id": handle, "operation_id": "n-00000000000000000000", "text": "blue"}),
        )
        .await;
    let stale = agent
        .call(
            "basket_checkout",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "co-1-00000000000000000"}),
        )
        .await;
    assert_eq!(outcome(&stale), "stale_view", "{stale}");
    assert_eq!(stale["structuredContent"]["recovery"], "reconfirm");

    let done = agent
        .call(
            "basket_checkout",
            json!({"basket_id": handle, "expected_version": 2, "operation_id": "co-2-00000000000000000"}),
        )
        .await;
    assert_eq!(outcome(&done), "applied", "{done}");
    assert_eq!(
        done["structuredContent"]["resumption"]["lifecycle"],
        "terminal"
    );
    assert!(
        done["structuredContent"]["result"]["ordered"]
            .as_str()
            .unwrap()
            .contains("16 GiB memory")
    );

    let after = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 3, "operation_id": "up-0000000000000000000", "memory_gib": 32}),
        )
        .await;
    assert_eq!(after["structuredContent"]["code"], "TERMINAL", "{after}");
    assert_eq!(after["structuredContent"]["recovery"], "stop");
    // Still readable.
    let (version, state) = agent.get(&handle).await;
    assert_eq!((version, &state["checked_out"]), (3, &json!(true)));
}

#[tokio::test]
async fn another_principals_basket_is_not_found_like_an_unknown_one() {
    let server = TestServer::start(authenticated_server(MemoryStore::default())).await;
    let alice = Agent::connect(&server.url(), Some("alice")).await;
    let bob = Agent::connect(&server.url(), Some("bob")).await;
    let handle = alice.create().await;

    let theirs = bob.call("basket_get", json!({"basket_id": handle})).await;
    let unknown = bob
        .call(
            "basket_get",
            json!({"basket_id": "bsk_AAAAAAAAAAAAAAAAAAAAAAAAAAA"}),
        )
        .await;
    assert_eq!(theirs["structuredContent"]["code"], "NOT_FOUND", "{theirs}");
    assert_eq!(theirs, unknown);

    let write = bob
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "x-00000000000000000000", "memory_gib": 32}),
        )
        .await;
    assert_eq!(write["structuredContent"]["code"], "NOT_FOUND", "{write}");
    assert_eq!(alice.get(&handle).await.1["memory_gib"], 16);
}

#[tokio::test]
async fn a_stale_view_past_the_kept_history_has_no_delta() {
    let store = MemoryStore::new(StoreConfig {
        history_limit: 2,
        ..StoreConfig::default()
    });
    let server = TestServer::start(server(store)).await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    for text in ["a", "b", "c"] {
        let note = agent
            .call(
                "basket_add_note",
                json!({"basket_id": handle, "operation_id": operation_id("note"), "text": text}),
            )
            .await;
        assert_eq!(outcome(&note), "applied");
    }
    let recent = agent
        .call(
            "basket_replace_configuration",
            json!({"basket_id": handle, "expected_version": 3, "operation_id": "r1-0000000000000000000", "memory_gib": 32, "storage_gib": 512}),
        )
        .await;
    assert_eq!(
        recent["structuredContent"]["delta_available"], true,
        "{recent}"
    );
    let old = agent
        .call(
            "basket_replace_configuration",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "r2-0000000000000000000", "memory_gib": 32, "storage_gib": 512}),
        )
        .await;
    assert_eq!(outcome(&old), "stale_view", "{old}");
    assert_eq!(old["structuredContent"]["delta_available"], false);
    assert_eq!(old["structuredContent"]["delta"], json!([]));
    assert_eq!(old["structuredContent"]["current_version"], 4);
}

#[tokio::test]
async fn a_domain_error_is_a_rejection_with_its_code() {
    let (_server, agent) = memory_server().await;
    let handle = agent.create().await;
    let down = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": "d-00000000000000000000", "memory_gib": 8}),
        )
        .await;
    assert_eq!(outcome(&down), "rejected", "{down}");
    assert_eq!(down["structuredContent"]["code"], "NOT_AN_UPGRADE");
    assert_eq!(down["structuredContent"]["recovery"], "refresh_and_replan");
    // The model reads the hint in the text as well.
    let text = down["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("memory is already 16 GiB; an upgrade must be larger.")
            && text.contains("Read the resource again"),
        "{text}"
    );
    assert_eq!(agent.get(&handle).await.0, 1);
}

/// A basket server over `store` keeping enough history that every concurrent change planned
/// from an older version gets its delta.
async fn long_history_server(
    store: impl FnOnce(StoreConfig) -> std::sync::Arc<dyn Store>,
) -> (TestServer, Agent) {
    let server = TestServer::start(server(store(StoreConfig {
        history_limit: 10_000,
        ..StoreConfig::default()
    })))
    .await;
    let agent = Agent::connect(&server.url(), None).await;
    (server, agent)
}

/// What one agent of the rebase workload got acknowledged.
#[derive(Default)]
struct Acknowledged {
    storage: u64,
    memory: u64,
    notes: Vec<String>,
    versions: Vec<u64>,
}

const STORAGE_AGENTS: usize = 4;
const MEMORY_AGENTS: usize = 3;
const NOTE_AGENTS: usize = 2;
/// Changes each storage and memory agent must get applied; notes each note agent adds.
const CHANGES: u64 = 3;
const RACE_ATTEMPTS: u64 = 2_000;

/// A storage agent: reads, adds a note of its own (so the basket always moved on), then upgrades
/// the storage from the version it read. Nothing but another storage change may refuse it.
async fn storage_agent(agent: Agent, handle: String, index: usize) -> Acknowledged {
    let mut acknowledged = Acknowledged::default();
    let mut attempts = 0;
    while acknowledged.storage < CHANGES {
        attempts += 1;
        assert!(attempts <= RACE_ATTEMPTS, "storage agent {index} starved");
        let (version, state) = agent.get(&handle).await;
        let text = format!("storage agent {index}, attempt {attempts}");
        let note = agent
            .call(
                "basket_add_note",
                json!({"basket_id": handle, "operation_id": operation_id("s-note"), "text": text}),
            )
            .await;
        assert_eq!(outcome(&note), "applied", "{note}");
        acknowledged.notes.push(text);
        acknowledged
            .versions
            .push(note["structuredContent"]["version"].as_u64().unwrap());
        let storage = state["storage_gib"].as_u64().unwrap() + 1;
        let result = agent
            .call(
                "basket_upgrade_storage",
                json!({"basket_id": handle, "expected_version": version,
                       "operation_id": operation_id("storage"), "storage_gib": storage}),
            )
            .await;
        let answer = &result["structuredContent"];
        match outcome(&result) {
            "applied" => {
                assert_eq!(answer["rebased_from"], version, "{result}");
                assert_eq!(answer["result"], storage);
                assert_eq!(answer["state"]["storage_gib"], storage);
                acknowledged.storage += 1;
                acknowledged
                    .versions
                    .push(answer["version"].as_u64().unwrap());
            }
            "stale_view" => {
                let touched: Vec<&Value> = answer["delta"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|change| &change["path"])
                    .collect();
                assert!(
                    touched.contains(&&json!("/storage_gib")),
                    "refused without a storage change in between: {result}"
                );
            }
            other => panic!("unexpected outcome {other}: {result}"),
        }
    }
    acknowledged
}

/// A memory agent: read-modify-write of the memory, retried on `stale_view`.
async fn memory_agent(agent: Agent, handle: String, index: usize) -> Acknowledged {
    let mut acknowledged = Acknowledged::default();
    let mut attempts = 0;
    while acknowledged.memory < CHANGES {
        attempts += 1;
        assert!(attempts <= RACE_ATTEMPTS, "memory agent {index} starved");
        let (version, state) = agent.get(&handle).await;
        let memory = state["memory_gib"].as_u64().unwrap() + 1;
        let result = agent
            .call(
                "basket_upgrade_memory",
                json!({"basket_id": handle, "expected_version": version,
                       "operation_id": operation_id("memory"), "memory_gib": memory}),
            )
            .await;
        match outcome(&result) {
            "applied" => {
                acknowledged.memory += 1;
                acknowledged
                    .versions
                    .push(result["structuredContent"]["version"].as_u64().unwrap());
            }
            "stale_view" => {}
            other => panic!("unexpected outcome {other}: {result}"),
        }
    }
    acknowledged
}

/// A note agent: appends notes, which need no version.
async fn note_agent(agent: Agent, handle: String, index: usize) -> Acknowledged {
    let mut acknowledged = Acknowledged::default();
    for n in 0..CHANGES * 2 {
        let text = format!("note agent {index}, note {n}");
        let note = agent
            .call(
                "basket_add_note",
                json!({"basket_id": handle, "operation_id": operation_id("n-note"), "text": text}),
            )
            .await;
        assert_eq!(outcome(&note), "applied", "{note}");
        acknowledged.notes.push(text);
        acknowledged
            .versions
            .push(note["structuredContent"]["version"].as_u64().unwrap());
    }
    acknowledged
}

async fn concurrent_rebases_keep_every_acknowledged_change(
    store: impl FnOnce(StoreConfig) -> std::sync::Arc<dyn Store>,
) {
    let (_server, agent) = long_history_server(store).await;
    let handle = agent.create().await;
    let mut tasks = Vec::new();
    for index in 0..STORAGE_AGENTS {
        tasks.push(tokio::spawn(storage_agent(
            agent.clone(),
            handle.clone(),
            index,
        )));
    }
    for index in 0..MEMORY_AGENTS {
        tasks.push(tokio::spawn(memory_agent(
            agent.clone(),
            handle.clone(),
            index,
        )));
    }
    for index in 0..NOTE_AGENTS {
        tasks.push(tokio::spawn(note_agent(
            agent.clone(),
            handle.clone(),
            index,
        )));
    }
    let mut total = Acknowledged::default();
    for task in tasks {
        let acknowledged = common::within("a rebase workload agent", task)
            .await
            .unwrap();
        total.storage += acknowledged.storage;
        total.memory += acknowledged.memory;
        total.notes.extend(acknowledged.notes);
        total.versions.extend(acknowledged.versions);
    }
    let (version, state) = agent.get(&handle).await;
    println!(
        "concurrent rebases: {} storage upgrades (each rebased), {} memory upgrades, {} notes, final version {version}",
        total.storage,
        total.memory,
        total.notes.len()
    );
    assert_eq!(total.storage, STORAGE_AGENTS as u64 * CHANGES);
    assert_eq!(
        state["storage_gib"],
        512 + total.storage,
        "a storage upgrade was lost"
    );
    assert_eq!(
        state["memory_gib"],
        16 + total.memory,
        "a memory upgrade was lost"
    );
    let mut kept = agent.all_notes(&handle).await;
    kept.sort();
    total.notes.sort();
    assert_eq!(
        kept, total.notes,
        "an acknowledged note was lost or doubled"
    );
    total.versions.sort_unstable();
    let expected: Vec<u64> = (2..=version).collect();
    assert_eq!(
        total.versions, expected,
        "each applied change has its own version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_rebases_keep_every_acknowledged_change_in_memory() {
    concurrent_rebases_keep_every_acknowledged_change(|config| {
        std::sync::Arc::new(MemoryStore::new(config))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_rebases_keep_every_acknowledged_change_in_sqlite() {
    let path = basket_client::temp_db("rebase-race");
    concurrent_rebases_keep_every_acknowledged_change(|config| {
        std::sync::Arc::new(SqliteStore::open(&path, config).unwrap())
    })
    .await;
    basket_client::remove_db(&path);
}

/// One round of the race: ten requests with one operation id spawned at once on a new basket,
/// half of them with one payload (memory 32), half with another (memory 64), so that several
/// reach the store's boundary together. Returns the memory of the winner.
async fn one_operation_id_two_payloads(agent: &Agent, round: usize) -> u64 {
    let handle = agent.create().await;
    let id = format!("race-{round:022}");
    let payloads = [32, 64, 32, 64, 32, 64, 32, 64, 32, 64];
    let barrier = Arc::new(tokio::sync::Barrier::new(payloads.len()));
    let calls: Vec<_> = payloads
        .iter()
        .map(|&memory| {
            let agent = agent.clone();
            let barrier = Arc::clone(&barrier);
            let arguments = json!({"basket_id": handle, "expected_version": 1,
                                   "operation_id": id, "memory_gib": memory});
            tokio::spawn(async move {
                barrier.wait().await;
                (memory, agent.call("basket_upgrade_memory", arguments).await)
            })
        })
        .collect();
    let mut results = Vec::new();
    for call in calls {
        results.push(common::within("a racing request", call).await.unwrap());
    }
    let winners: Vec<&(u64, Value)> = results
        .iter()
        .filter(|(_, result)| outcome(result) == "applied")
        .collect();
    assert_eq!(winners.len(), 1, "round {round}: {results:#?}");
    let (winner, applied) = winners[0];
    let original = common::recorded_applied(&applied["structuredContent"]);
    assert_eq!(original["version"], 2);
    for (memory, result) in &results {
        if std::ptr::eq(result, applied) {
            continue;
        }
        let answer = &result["structuredContent"];
        if memory == winner {
            assert_eq!(outcome(result), "replayed", "round {round}: {result}");
            assert_eq!(answer["original"], original, "round {round}");
        } else {
            assert_eq!(outcome(result), "rejected", "round {round}: {result}");
            assert_eq!(answer["code"], "OPERATION_ID_REUSED", "round {round}");
        }
    }
    let (version, state) = agent.get(&handle).await;
    assert_eq!(version, 2, "round {round}: exactly one change applied");
    assert_eq!(
        state["memory_gib"], *winner,
        "round {round}: the winner's change"
    );
    *winner
}

async fn one_operation_id_raced_with_two_payloads(agent: &Agent, rounds: usize, label: &str) {
    let mut won = [0, 0];
    for round in 0..rounds {
        match one_operation_id_two_payloads(agent, round).await {
            32 => won[0] += 1,
            _ => won[1] += 1,
        }
    }
    println!(
        "{label}: {rounds} rounds of one operation id with two payloads: memory 32 won {}, memory 64 won {}",
        won[0], won[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_operation_id_raced_with_two_payloads_applies_exactly_the_winner_in_memory() {
    let (_server, agent) = memory_server().await;
    one_operation_id_raced_with_two_payloads(&agent, 40, "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_operation_id_raced_with_two_payloads_applies_exactly_the_winner_in_sqlite() {
    let path = basket_client::temp_db("payload-race");
    let store = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let server = TestServer::start(server(store)).await;
    let agent = Agent::connect(&server.url(), None).await;
    one_operation_id_raced_with_two_payloads(&agent, 20, "sqlite").await;
    drop(server);
    basket_client::remove_db(&path);
}

/// Notes over real HTTP: 120 appends without a version, read page by page through
/// `items_cursor`, edited and removed per note (a change of another note or of the memory since
/// the caller's version is no conflict, a change of that note is), and cursors that are not
/// this basket's refused with a message that says what to send.
async fn notes_are_a_collection(store: impl Store) {
    let server = TestServer::start(server(store)).await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    let other = agent.create().await;
    for n in 1..=120u64 {
        let note = json!({ "basket_id": handle, "operation_id": operation_id("note"), "text": format!("note {n}") });
        let added = agent.call("basket_add_note", note).await;
        assert_eq!(outcome(&added), "applied", "{added}");
        assert_eq!(
            added["structuredContent"]["result"],
            json!({ "note_id": n, "note_count": n })
        );
    }
    // Three pages: 50, 50, 20, then no cursor.
    let mut arguments = json!({ "basket_id": handle });
    let mut pages = Vec::new();
    loop {
        let read = agent.call("basket_get", arguments.clone()).await;
        assert_eq!(outcome(&read), "current", "{read}");
        let notes = read["structuredContent"]["state"]["notes"].clone();
        assert_eq!(notes["len"], 120);
        pages.push(notes["items"].as_array().unwrap().len());
        match notes["next_cursor"].as_str() {
            Some(cursor) => arguments["items_cursor"] = json!(cursor),
            None => break,
        }
    }
    assert_eq!(pages, [50, 50, 20]);
    assert_eq!(agent.all_notes(&handle).await.len(), 120);

    let seen = 121;
    let edit = |note_id: u64, text: &str, version: u64| {
        json!({ "basket_id": handle, "expected_version": version, "note_id": note_id,
                "text": text, "operation_id": operation_id("edit") })
    };
    let first = agent.call("basket_edit_note", edit(7, "seven", seen)).await;
    assert_eq!(outcome(&first), "applied", "{first}");
    let upgrade = json!({ "basket_id": handle, "expected_version": 122, "memory_gib": 32,
                          "operation_id": operation_id("memory") });
    assert_eq!(
        outcome(&agent.call("basket_upgrade_memory", upgrade).await),
        "applied"
    );
    // Note 8, from the same old version: other changes since do not block it.
    let second = agent.call("basket_edit_note", edit(8, "eight", seen)).await;
    assert_eq!(outcome(&second), "applied", "{second}");
    assert_eq!(second["structuredContent"]["rebased_from"], seen);
    // Note 7 again, from that version: that note moved.
    let stale = agent
        .call("basket_edit_note", edit(7, "seven?", seen))
        .await;
    assert_eq!(outcome(&stale), "stale_view", "{stale}");
    let delta = &stale["structuredContent"]["delta"];
    assert_eq!(
        *delta,
        json!([{ "path": "/notes/items/7", "after": { "id": 7, "version": 122, "value": "seven" } }])
    );
    // Removed, then gone for an edit planned after the removal.
    let remove = json!({ "basket_id": handle, "expected_version": 124, "note_id": 9,
                         "operation_id": operation_id("remove") });
    let removed = agent.call("basket_remove_note", remove).await;
    assert_eq!(removed["structuredContent"]["result"], 119, "{removed}");
    for missing in [9, 0, 121, u64::MAX] {
        let gone = agent
            .call("basket_edit_note", edit(missing, "nine", 125))
            .await;
        assert_eq!(
            gone["structuredContent"]["code"], "NO_SUCH_NOTE",
            "{missing}: {gone}"
        );
    }
    let notes = agent.all_notes(&handle).await;
    assert_eq!(notes.len(), 119);
    assert_eq!(&notes[6..8], ["seven", "eight"]);

    // Cursors: of another basket, altered, or sent to a basket read for the first time.
    let read = agent
        .call("basket_get", json!({ "basket_id": handle }))
        .await;
    let cursor = read["structuredContent"]["state"]["notes"]["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut altered = cursor.clone();
    altered.replace_range(0..1, if cursor.starts_with('A') { "B" } else { "A" });
    for (basket, cursor) in [
        (&other, cursor.clone()),
        (&handle, altered),
        (&handle, "x".into()),
    ] {
        let refused = agent
            .call(
                "basket_get",
                json!({ "basket_id": basket, "items_cursor": cursor }),
            )
            .await;
        assert_eq!(refused["isError"], true, "{refused}");
        assert_eq!(refused["structuredContent"]["code"], "INVALID_ARGUMENTS");
        let message = refused["structuredContent"]["message"].as_str().unwrap();
        assert!(message.contains("next_cursor"), "{message}");
    }
}

#[tokio::test]
async fn notes_are_a_collection_in_memory() {
    notes_are_a_collection(MemoryStore::default()).await;
}

#[tokio::test]
async fn notes_are_a_collection_in_sqlite() {
    let path = basket_client::temp_db("notes-collection");
    notes_are_a_collection(SqliteStore::open(&path, StoreConfig::default()).unwrap()).await;
    basket_client::remove_db(&path);
}
