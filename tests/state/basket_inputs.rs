//! Bad input to the basket's stateful tools over real HTTP: malformed and foreign handles, bad
//! `expected_version` and `operation_id` values, missing required arguments. Each gets its exact
//! answer (a tool error, never a protocol error or a 500), and none changes the basket, whatever
//! the store. Every response is checked against the official schema and the tool's published
//! output schema.

use crate::basket;
use crate::basket_client;
use crate::common;

use std::collections::{BTreeSet, HashMap};

use mcp_tools::store::{Entity, Store, StoreConfig};
use mcp_tools::{McpServer, tool, tools};
use mcp_tools::{MemoryStore, SqliteStore};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use basket_client::{Agent, operation_id, outcome, remove_db, temp_db};
use common::{TestServer, compile};

/// A second kind of resource on the same server and store, so a handle can be well formed,
/// exist, and still not be a basket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "voucher", prefix = "vch")]
struct Voucher {
    /// The amount, in cents.
    amount: u32,
}

/// Creates a voucher.
#[tool(creates = Voucher)]
fn voucher_create(
    /// The amount, in cents.
    amount: u32,
) -> Voucher {
    Voucher { amount }
}

/// Reads a voucher.
#[tool(reads = Voucher)]
fn voucher_get(voucher: &Voucher) -> Voucher {
    voucher.clone()
}

fn server(store: impl Store) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set().merge(tools![voucher_create, voucher_get]))
        .store(store)
        .signing_key(crate::common::SIGNING_KEY)
        .build()
        .unwrap()
}

/// What a call must answer.
#[derive(Debug)]
enum Expect {
    /// `INVALID_ARGUMENTS` from the input schema, with exactly these violation paths; the message
    /// at the first one contains the text.
    Schema(&'static [&'static str], &'static str),
    /// The same from decoding, for arguments the published input schema accepts.
    Decoding(&'static [&'static str], &'static str),
    /// `rejected` with this code and recovery (none for the tool's own codes).
    Rejected(&'static str, Option<&'static str>),
}

fn check(label: &str, result: &Value, expect: &Expect) {
    assert_eq!(result["isError"], true, "{label}: {result}");
    let answer = &result["structuredContent"];
    match expect {
        Expect::Schema(paths, text) | Expect::Decoding(paths, text) => {
            assert_eq!(answer["code"], "INVALID_ARGUMENTS", "{label}: {result}");
            assert!(answer.get("outcome").is_none(), "{label}: {result}");
            let violations = answer["details"]["violations"]
                .as_array()
                .unwrap_or_else(|| panic!("{label}: no violations: {result}"));
            let found: BTreeSet<&str> = violations
                .iter()
                .map(|violation| violation["path"].as_str().unwrap())
                .collect();
            let expected: BTreeSet<&str> = paths.iter().copied().collect();
            assert_eq!(found, expected, "{label}: {result}");
            assert_eq!(violations.len(), paths.len(), "{label}: {result}");
            let first = violations
                .iter()
                .find(|violation| violation["path"] == paths[0])
                .unwrap();
            let message = first["message"].as_str().unwrap();
            assert!(
                message.contains(text),
                "{label}: {message:?} lacks {text:?}"
            );
        }
        Expect::Rejected(code, recovery) => {
            assert_eq!(outcome(result), "rejected", "{label}: {result}");
            assert_eq!(answer["code"], *code, "{label}: {result}");
            let found = answer.get("recovery").and_then(Value::as_str);
            assert_eq!(found, *recovery, "{label}: {result}");
        }
    }
}

/// The answer every handle that is not one of the caller's baskets gets.
fn not_found() -> Expect {
    Expect::Rejected("NOT_FOUND", Some("stop"))
}

async fn bad_inputs_leave_the_basket_unchanged(store: impl Store) {
    let server = TestServer::start(server(store)).await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    let upgraded = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 1, "operation_id": operation_id("up"), "memory_gib": 32}),
        )
        .await;
    assert_eq!(outcome(&upgraded), "applied", "{upgraded}");
    let before = agent.get(&handle).await;
    assert_eq!(before.0, 2);
    let voucher = agent
        .call(
            "voucher_create",
            json!({"operation_id": operation_id("voucher"), "amount": 500}),
        )
        .await;
    let voucher = voucher["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(voucher.starts_with("vch_"), "{voucher}");
    let random = handle.strip_prefix("bsk_").unwrap();
    let unknown = format!("bsk_{}", "A".repeat(random.len()));

    let mutation = |basket_id: &str| json!({"basket_id": basket_id, "expected_version": 2, "operation_id": operation_id("bad"), "memory_gib": 64});
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut arguments = mutation(&handle);
        edit(&mut arguments);
        arguments
    };
    let cases: Vec<(&str, &str, Value, Expect)> = vec![
        // Handles that are not the caller's basket all read like an unknown one.
        (
            "malformed handle",
            "basket_get",
            json!({"basket_id": "garbage"}),
            not_found(),
        ),
        (
            "empty handle",
            "basket_get",
            json!({"basket_id": ""}),
            not_found(),
        ),
        (
            "prefix only",
            "basket_get",
            json!({"basket_id": "bsk_"}),
            not_found(),
        ),
        (
            "unknown handle",
            "basket_get",
            json!({"basket_id": unknown}),
            not_found(),
        ),
        (
            "a voucher's handle",
            "basket_get",
            json!({"basket_id": voucher}),
            not_found(),
        ),
        (
            "the basket's random part with another prefix",
            "basket_get",
            json!({"basket_id": format!("vch_{random}")}),
            not_found(),
        ),
        (
            "a handle of quotes and SQL",
            "basket_get",
            json!({"basket_id": "bsk_' OR '1'='1"}),
            not_found(),
        ),
        (
            "a very long handle",
            "basket_get",
            json!({"basket_id": format!("bsk_{}", "x".repeat(10_000))}),
            not_found(),
        ),
        (
            "the basket's handle as a voucher",
            "voucher_get",
            json!({"voucher_id": handle}),
            not_found(),
        ),
        (
            "a handle that is not a string",
            "basket_get",
            json!({"basket_id": 42}),
            Expect::Schema(&["/basket_id"], "string"),
        ),
        (
            "mutation, malformed handle",
            "basket_upgrade_memory",
            mutation("garbage"),
            not_found(),
        ),
        (
            "mutation, unknown handle",
            "basket_upgrade_memory",
            mutation(&unknown),
            not_found(),
        ),
        (
            "mutation, a voucher's handle",
            "basket_upgrade_memory",
            mutation(&voucher),
            not_found(),
        ),
        (
            "mutation, another prefix",
            "basket_upgrade_memory",
            mutation(&format!("vch_{random}")),
            not_found(),
        ),
        (
            "checkout, a voucher's handle",
            "basket_checkout",
            json!({"basket_id": voucher, "expected_version": 1, "operation_id": operation_id("co")}),
            not_found(),
        ),
        // expected_version: an integer >= 1.
        (
            "expected_version 0",
            "basket_upgrade_memory",
            with(&|a| a["expected_version"] = json!(0)),
            Expect::Schema(&["/expected_version"], "minimum of 1"),
        ),
        (
            "expected_version \"2\", a string that is no validator",
            "basket_upgrade_memory",
            with(&|a| a["expected_version"] = json!("2")),
            Expect::Rejected("INVALID_VALIDATOR", Some("refresh_and_replan")),
        ),
        (
            "expected_version 1.5",
            "basket_upgrade_memory",
            with(&|a| a["expected_version"] = json!(1.5)),
            Expect::Schema(&["/expected_version"], "integer"),
        ),
        (
            "expected_version -1",
            "basket_upgrade_memory",
            with(&|a| a["expected_version"] = json!(-1)),
            Expect::Schema(&["/expected_version"], "minimum of 1"),
        ),
        (
            "expected_version 2.5e15, a whole number far beyond any version",
            "basket_upgrade_memory",
            with(&|a| a["expected_version"] = json!(2.5e15)),
            Expect::Rejected("FUTURE_VERSION", Some("refresh_and_replan")),
        ),
        (
            "expected_version 2^63 - 1, the largest every store holds",
            "basket_upgrade_memory",
            with(&|a| a["expected_version"] = json!(i64::MAX)),
            Expect::Rejected("FUTURE_VERSION", Some("refresh_and_replan")),
        ),
        (
            "expected_version 2^63, past what every store holds",
            "basket_upgrade_memory",
            with(&|a| a["expected_version"] = json!(1u64 << 63)),
            Expect::Schema(&["/expected_version"], "maximum of 9223372036854775807"),
        ),
        (
            "basis_version 2^64 - 1",
            "basket_get",
            json!({"basket_id": handle, "basis_version": u64::MAX}),
            Expect::Schema(&["/basis_version"], "maximum of 9223372036854775807"),
        ),
        (
            "basis_version 2^63 - 1, from the future",
            "basket_get",
            json!({"basket_id": handle, "basis_version": i64::MAX}),
            Expect::Rejected("FUTURE_VERSION", Some("refresh_and_replan")),
        ),
        (
            "expected_version null, which is no version",
            "basket_upgrade_memory",
            with(&|a| a["expected_version"] = Value::Null),
            Expect::Schema(&["/expected_version"], "null"),
        ),
        (
            "expected_version missing",
            "basket_upgrade_memory",
            with(&|a| {
                a.as_object_mut().unwrap().remove("expected_version");
            }),
            Expect::Decoding(&["/"], "expected_version"),
        ),
        (
            "expected_version on a tool that takes none",
            "basket_add_note",
            json!({"basket_id": handle, "expected_version": 2, "operation_id": operation_id("note"), "text": "x"}),
            Expect::Schema(&["/"], "expected_version"),
        ),
        // operation_id: a string of 1 to 200 characters, required by every mutation.
        (
            "empty operation_id",
            "basket_upgrade_memory",
            with(&|a| a["operation_id"] = json!("")),
            Expect::Schema(&["/operation_id"], "shorter than 1"),
        ),
        (
            "operation_id of 201 characters",
            "basket_upgrade_memory",
            with(&|a| a["operation_id"] = json!("o".repeat(201))),
            Expect::Schema(&["/operation_id"], "longer than 200"),
        ),
        (
            "operation_id not a string",
            "basket_upgrade_memory",
            with(&|a| a["operation_id"] = json!(7)),
            Expect::Schema(&["/operation_id"], "string"),
        ),
        (
            "mutation without operation_id",
            "basket_upgrade_memory",
            with(&|a| {
                a.as_object_mut().unwrap().remove("operation_id");
            }),
            Expect::Schema(&["/"], "operation_id"),
        ),
        (
            "note without operation_id",
            "basket_add_note",
            json!({"basket_id": handle, "text": "x"}),
            Expect::Schema(&["/"], "operation_id"),
        ),
        (
            "checkout without operation_id",
            "basket_checkout",
            json!({"basket_id": handle, "expected_version": 2}),
            Expect::Schema(&["/"], "operation_id"),
        ),
        (
            "create without operation_id",
            "basket_create",
            json!({"model": "Laptop 13"}),
            Expect::Schema(&["/"], "operation_id"),
        ),
        // The tool's own arguments.
        (
            "memory_gib past u32, which the schema bounds",
            "basket_upgrade_memory",
            with(&|a| a["memory_gib"] = json!(5_000_000_000u64)),
            Expect::Schema(&["/memory_gib"], "maximum of 4294967295"),
        ),
        (
            "memory_gib 0, refused by the tool",
            "basket_upgrade_memory",
            with(&|a| a["memory_gib"] = json!(0)),
            Expect::Rejected("INVALID_SIZE", Some("fix_the_arguments")),
        ),
        (
            "an argument the tool does not have",
            "basket_upgrade_memory",
            with(&|a| a["colour"] = json!("red")),
            Expect::Schema(&["/"], "colour"),
        ),
        (
            "every field wrong at once",
            "basket_replace_configuration",
            json!({"basket_id": 7, "expected_version": 0, "operation_id": "", "memory_gib": "a", "storage_gib": -1}),
            Expect::Schema(
                &[
                    "/basket_id",
                    "/expected_version",
                    "/operation_id",
                    "/memory_gib",
                    "/storage_gib",
                ],
                "string",
            ),
        ),
    ];
    let schemas = input_schemas(&server).await;
    for (label, tool, arguments, expect) in &cases {
        // Which layer answers is part of the contract: the published schema accepts exactly
        // what reaches the tool or the decoder.
        let accepted = compile(&schemas[*tool]).is_valid(arguments);
        let schema_refuses = matches!(expect, Expect::Schema(..));
        assert_eq!(
            accepted, !schema_refuses,
            "{label}: the schema on {arguments}"
        );
        let result = agent.call(tool, arguments.clone()).await;
        check(label, &result, expect);
        assert_eq!(
            agent.get(&handle).await,
            before,
            "{label} changed the basket"
        );
    }
    let read = agent
        .call("voucher_get", json!({"voucher_id": voucher}))
        .await;
    assert_eq!(outcome(&read), "current", "{read}");
    assert_eq!(read["structuredContent"]["state"], json!({"amount": 500}));

    // A refused argument never reaches the ledger: its operation id stays free for the real
    // change. A NOT_FOUND does: a retry replays it, and the id cannot be reused on the basket.
    let probe = with(&|a| {
        a["operation_id"] = json!("probe");
        a["memory_gib"] = json!(5_000_000_000u64);
    });
    check(
        "probe",
        &agent.call("basket_upgrade_memory", probe).await,
        &Expect::Schema(&["/memory_gib"], "maximum of 4294967295"),
    );
    let missed = json!({"basket_id": unknown, "expected_version": 2, "operation_id": "missed-000000000000000", "memory_gib": 64});
    let first = agent.call("basket_upgrade_memory", missed.clone()).await;
    check("missed", &first, &not_found());
    // A guessed handle is never recorded: the retry is judged again, with the same answer.
    let retry = agent.call("basket_upgrade_memory", missed).await;
    check("missed again", &retry, &not_found());
    // So the id is still free for a real change.
    let applied = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 2, "operation_id": "missed-000000000000000", "memory_gib": 64}),
        )
        .await;
    assert_eq!(outcome(&applied), "applied", "{applied}");
    let (version, state) = agent.get(&handle).await;
    assert_eq!((version, &state["memory_gib"]), (3, &json!(64)));
}

/// The published input schema of every tool, by name.
async fn input_schemas(server: &TestServer) -> HashMap<String, Value> {
    let reply = common::Call::new("tools/list", json!(1), json!({}))
        .send(server)
        .await;
    reply.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            (
                tool["name"].as_str().unwrap().to_owned(),
                tool["inputSchema"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn bad_inputs_get_their_exact_answer_and_leave_the_basket_unchanged_in_memory() {
    bad_inputs_leave_the_basket_unchanged(MemoryStore::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_get_their_exact_answer_and_leave_the_basket_unchanged_in_sqlite() {
    let path = temp_db("bad-inputs");
    let store = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    bad_inputs_leave_the_basket_unchanged(store).await;
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_get_their_exact_answer_and_leave_the_basket_unchanged_in_postgres() {
    let Some(schema) = crate::pg::Schema::new() else {
        return;
    };
    bad_inputs_leave_the_basket_unchanged(schema.connect(StoreConfig::default()).await).await;
}

/// A version the basket never had was not read: its own code, with a "read first" recovery, and
/// nothing applied.
#[tokio::test]
async fn an_expected_version_from_the_future_asks_to_read_first() {
    let server = TestServer::start(server(MemoryStore::default())).await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    let before = agent.get(&handle).await;
    let result = agent
        .call(
            "basket_upgrade_memory",
            json!({"basket_id": handle, "expected_version": 9, "operation_id": operation_id("f"), "memory_gib": 32}),
        )
        .await;
    assert_eq!(outcome(&result), "rejected", "{result}");
    assert_eq!(result["isError"], true);
    let rejected = &result["structuredContent"];
    assert_eq!(rejected["code"], "FUTURE_VERSION");
    assert_eq!(rejected["recovery"], "refresh_and_replan");
    assert_eq!(rejected["details"], json!({ "current_version": 1 }));
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("never was at version 9") && text.contains("Read the basket first"),
        "{text}"
    );
    assert_eq!(agent.get(&handle).await, before);
}
