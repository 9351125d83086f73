//! A step over two baskets, end to end: sixteen agents move notes back and forth between the
//! same two baskets through `basket_move_note`, spread over two replicas of one store (two
//! servers on one memory store, two processes on one SQLite file, two processes on one
//! PostgreSQL schema). Every round all agents plan from what they read, then move at once:
//! every note ends in exactly one basket, every refused move is a `stale_view` naming a basket
//! that moved, and no call waits for ever.

use std::sync::Arc;

use serde_json::json;

use mcp_tools::store::StoreConfig;
use mcp_tools::{MemoryStore, SqliteStore};

use crate::basket_client::{Agent, operation_id, remove_db, server, temp_db};
use crate::common::{TestServer, children, within, within_for};
use crate::effects::{CHILD_DB, CHILD_TEST};
use crate::pg;

const AGENTS: usize = 16;
const ROUNDS: usize = 6;
const NOTES: usize = 20;

/// Every note of a basket and its version, read page by page.
async fn notes(agent: &Agent, basket: &str) -> (u64, Vec<(u64, String)>) {
    let mut notes = Vec::new();
    let mut arguments = json!({ "basket_id": basket });
    loop {
        let read = agent.call("basket_get", arguments.clone()).await;
        let outcome = &read["structuredContent"];
        assert_eq!(outcome["outcome"], "current", "{read}");
        // A basket without notes shows none.
        let items = outcome["state"]["notes"]["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for item in &items {
            notes.push((
                item["id"].as_u64().unwrap(),
                item["value"].as_str().unwrap().to_owned(),
            ));
        }
        match outcome["state"]["notes"]["next_cursor"].as_str() {
            Some(cursor) => arguments["items_cursor"] = json!(cursor),
            None => return (outcome["version"].as_u64().unwrap(), notes),
        }
    }
}

/// The moves over `urls` (two replicas): `(applied, stale_view)` counts.
async fn moves(urls: &[String], label: &str) -> (u64, u64) {
    let setup = Agent::connect(&urls[0], None).await;
    let (a, b) = (setup.create().await, setup.create().await);
    for n in 0..NOTES {
        let add = json!({ "basket_id": a, "text": format!("note {n}"), "operation_id": operation_id("note") });
        let added = setup.call("basket_add_note", add).await;
        assert_eq!(added["structuredContent"]["outcome"], "applied", "{added}");
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(AGENTS));
    let mut agents = Vec::new();
    for index in 0..AGENTS {
        let agent = Agent::connect(&urls[index % urls.len()], None).await;
        let (a, b, barrier) = (a.clone(), b.clone(), Arc::clone(&barrier));
        agents.push(tokio::spawn(async move {
            let (mut applied, mut stale) = (0, 0);
            for round in 0..ROUNDS {
                let (from, to) = if (index + round) % 2 == 0 {
                    (&a, &b)
                } else {
                    (&b, &a)
                };
                let (from_version, from_notes) = notes(&agent, from).await;
                let (to_version, _) = notes(&agent, to).await;
                barrier.wait().await;
                let Some((note_id, _)) = from_notes.get(index % from_notes.len().max(1)).cloned()
                else {
                    continue;
                };
                let arguments = json!({
                    "from_basket_id": from, "from_basket_expected_version": from_version,
                    "to_basket_id": to, "to_basket_expected_version": to_version,
                    "note_id": note_id, "operation_id": operation_id("move"),
                });
                let result = within("a move", agent.call("basket_move_note", arguments)).await;
                let outcome = &result["structuredContent"];
                match outcome["outcome"].as_str() {
                    Some("applied") => applied += 1,
                    Some("stale_view") => {
                        let moved = outcome["moved"].as_array().unwrap();
                        assert!(!moved.is_empty(), "{result}");
                        for basket in moved {
                            let handle = basket["handle"].as_str().unwrap();
                            assert!(handle == a || handle == b, "{result}");
                            assert!(
                                basket["current_version"].as_u64()
                                    > basket["expected_version"].as_u64(),
                                "{result}"
                            );
                            assert!(basket["resumption"]["validator"].is_string(), "{result}");
                        }
                        assert_eq!(result["isError"], true);
                        stale += 1;
                    }
                    _ => panic!("agent {index}: {result}"),
                }
            }
            (applied, stale)
        }));
    }
    let (mut applied, mut stale) = (0, 0);
    for agent in agents {
        let (a, s) = within_for(std::time::Duration::from_secs(300), "an agent", agent)
            .await
            .unwrap();
        applied += a;
        stale += s;
    }
    let mut all: Vec<String> = notes(&setup, &a)
        .await
        .1
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    all.extend(notes(&setup, &b).await.1.into_iter().map(|(_, text)| text));
    all.sort();
    let mut expected: Vec<String> = (0..NOTES).map(|n| format!("note {n}")).collect();
    expected.sort();
    assert_eq!(all, expected, "{label}: every note in exactly one basket");
    println!(
        "{label}: {AGENTS} agents x {ROUNDS} rounds on two replicas: {applied} moves applied, \
         {stale} refused as stale_view naming the basket that moved, {NOTES} notes conserved"
    );
    assert!(
        applied > 0 && stale > 0,
        "{applied} applied, {stale} stale: nothing raced"
    );
    (applied, stale)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moves_between_two_baskets_on_two_servers_sharing_a_memory_store_conserve_notes() {
    let store = Arc::new(MemoryStore::default());
    let first = TestServer::start(server(Arc::clone(&store))).await;
    let second = TestServer::start(server(store)).await;
    moves(&[first.url(), second.url()], "memory, two servers").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moves_between_two_baskets_on_two_sqlite_processes_conserve_notes() {
    let path = temp_db("steps-moves");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    let env = [(CHILD_DB, path.display().to_string())];
    let replicas = children::start(CHILD_TEST, &env, 2);
    let urls: Vec<String> = replicas.iter().map(|child| child.url.clone()).collect();
    moves(&urls, "sqlite, two processes").await;
    drop(replicas);
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moves_between_two_baskets_on_two_postgres_replicas_conserve_notes() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    drop(schema.connect(StoreConfig::default()).await);
    let env = children::postgres_env(&schema.url, &schema.name);
    let replicas = children::start(CHILD_TEST, &env, 2);
    let urls: Vec<String> = replicas.iter().map(|child| child.url.clone()).collect();
    moves(&urls, "postgres, two replicas").await;
}

/// The step's contract over HTTP, one case at a time: versions by number or by validator, a
/// replay, and every bad input a typed refusal that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_takes_validators_replays_and_refuses_bad_input_with_typed_errors() {
    let server = TestServer::start(server(MemoryStore::default())).await;
    let agent = Agent::connect(&server.url(), None).await;
    let (a, b) = (agent.create().await, agent.create().await);
    let add =
        json!({ "basket_id": a, "text": "keep the receipt", "operation_id": operation_id("note") });
    agent.call("basket_add_note", add).await;
    let read = agent.call("basket_get", json!({ "basket_id": a })).await;
    let validator = read["structuredContent"]["resumption"]["validator"].clone();
    assert!(validator.is_string(), "{read}");
    let move_with = |from_version: serde_json::Value, note_id: u64, operation: &str| {
        json!({
            "from_basket_id": a, "from_basket_expected_version": from_version,
            "to_basket_id": b, "to_basket_expected_version": 1,
            "note_id": note_id, "operation_id": operation,
        })
    };
    let code = |result: &serde_json::Value| result["structuredContent"]["code"].clone();

    // A note that does not exist: refused with the tool's code, nothing moved.
    let missing = agent
        .call(
            "basket_move_note",
            move_with(validator.clone(), 9, &operation_id("missing")),
        )
        .await;
    assert_eq!(code(&missing), "NO_SUCH_NOTE", "{missing}");
    assert_eq!(missing["isError"], true);
    // A validator of another basket, or a made-up one.
    let foreign = agent.call("basket_get", json!({ "basket_id": b })).await;
    let foreign = foreign["structuredContent"]["resumption"]["validator"].clone();
    let wrong = agent
        .call(
            "basket_move_note",
            move_with(foreign, 1, &operation_id("wrong")),
        )
        .await;
    assert_eq!(code(&wrong), "INVALID_VALIDATOR", "{wrong}");
    // The same basket twice.
    let twice = json!({
        "from_basket_id": a, "from_basket_expected_version": 2,
        "to_basket_id": a, "to_basket_expected_version": 2,
        "note_id": 1, "operation_id": operation_id("twice"),
    });
    let twice = agent.call("basket_move_note", twice).await;
    assert_eq!(code(&twice), "INVALID_ARGUMENTS", "{twice}");
    let (version, _) = agent.get(&a).await;
    assert_eq!(version, 2, "nothing moved");

    // By validator: applied, both baskets at their new versions, with validators to go on.
    let operation = operation_id("move");
    let moved = agent
        .call(
            "basket_move_note",
            move_with(validator.clone(), 1, &operation),
        )
        .await;
    let outcome = &moved["structuredContent"];
    assert_eq!(outcome["outcome"], "applied", "{moved}");
    assert_eq!(outcome["resources"][0]["version"], 3);
    assert_eq!(outcome["resources"][1]["version"], 2);
    assert_eq!(outcome["result"]["note_id"], 1);
    assert!(outcome["resources"][1]["resumption"]["validator"].is_string());
    // The same request again (the validator or its number): replayed, nothing moves twice.
    let again = agent
        .call("basket_move_note", move_with(json!(2), 1, &operation))
        .await;
    assert_eq!(again["structuredContent"]["outcome"], "replayed", "{again}");
    assert_eq!(
        again["structuredContent"]["current"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(agent.get(&b).await.0, 2);

    // A checked-out basket refuses, and says which.
    let checkout =
        json!({ "basket_id": b, "expected_version": 2, "operation_id": operation_id("checkout") });
    agent.call("basket_checkout", checkout).await;
    let back = json!({
        "from_basket_id": b, "from_basket_expected_version": 3,
        "to_basket_id": a, "to_basket_expected_version": 3,
        "note_id": 1, "operation_id": operation_id("back"),
    });
    let refused = agent.call("basket_move_note", back).await;
    assert_eq!(code(&refused), "TERMINAL", "{refused}");
    assert_eq!(
        refused["structuredContent"]["details"]["handle"],
        b.as_str()
    );
}
