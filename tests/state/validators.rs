//! Preconditions other than a copied number, over real HTTP on the basket example, on both
//! stores. Opaque validators: every `current` and `applied` outcome carries one; a mutation
//! accepts it in place of `expected_version`, as the argument or through `_meta`, with exactly
//! the semantics of the number; forged, truncated, foreign and malformed ones are refused and
//! change nothing. Revalidation: a read given a basis version (or validator) says what changed
//! since, without a write.

use crate::basket;
use crate::basket_client;
use crate::common;
use crate::on_every_store;

use mcp_tools::McpServer;
use mcp_tools::protocol::framework::VALIDATOR_META_KEY;
use mcp_tools::store::{Store, StoreConfig};
use mcp_tools::{MemoryStore, SqliteStore};
use serde_json::{Value, json};

use basket_client::{Agent, operation_id, outcome, remove_db, temp_db};
use common::TestServer;

fn keyed_server(store: impl Store, key: &[u8]) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set())
        .store(store)
        .signing_key(key.to_vec())
        .build()
        .unwrap()
}

/// Reads a basket: `(version, validator)`.
async fn read(agent: &Agent, handle: &str) -> (u64, String) {
    let result = agent
        .call("basket_get", json!({ "basket_id": handle }))
        .await;
    let resumption = &result["structuredContent"]["resumption"];
    (
        resumption["basis_version"].as_u64().unwrap(),
        resumption["validator"]
            .as_str()
            .unwrap_or_else(|| panic!("a read without a validator: {result}"))
            .to_owned(),
    )
}

fn upgrade(handle: &str, expected: Value, memory_gib: u32) -> Value {
    json!({
        "basket_id": handle,
        "expected_version": expected,
        "operation_id": operation_id("up"),
        "memory_gib": memory_gib,
    })
}

fn without_expected_version(mut arguments: Value) -> Value {
    arguments
        .as_object_mut()
        .unwrap()
        .remove("expected_version");
    arguments
}

fn code(result: &Value) -> &str {
    result["structuredContent"]["code"].as_str().unwrap_or("")
}

async fn validators_stand_for_their_version(store: impl Store) {
    let server = TestServer::start(keyed_server(
        store,
        b"replica-key, padded to thirty-two bytes",
    ))
    .await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    let other = agent.create().await;
    let (version, validator) = read(&agent, &handle).await;
    assert_eq!(version, 1);

    // A validator from a read is accepted by the next mutation.
    let first = upgrade(&handle, json!(validator), 32);
    let applied = agent.call("basket_upgrade_memory", first.clone()).await;
    assert_eq!(outcome(&applied), "applied", "{applied}");
    let next = applied["structuredContent"]["resumption"]["validator"]
        .as_str()
        .expect("an applied outcome carries the validator of its version")
        .to_owned();
    assert_ne!(next, validator);
    assert_eq!(read(&agent, &handle).await, (2, next.clone()));

    // Its replay shows the current version with that version's validator, ready for the next
    // change.
    let replayed = agent.call("basket_upgrade_memory", first).await;
    assert_eq!(outcome(&replayed), "replayed", "{replayed}");
    assert_eq!(
        replayed["structuredContent"]["current"]["resumption"]["validator"],
        next.as_str(),
        "{replayed}"
    );

    // The old validator is now stale: the same answer as the old number, delta included.
    let stale = agent
        .call(
            "basket_upgrade_memory",
            upgrade(&handle, json!(validator), 64),
        )
        .await;
    assert_eq!(outcome(&stale), "stale_view", "{stale}");
    let view = &stale["structuredContent"];
    assert_eq!(view["expected_version"], 1);
    assert_eq!(view["current_version"], 2);
    assert_eq!(
        view["delta"],
        json!([{"path": "/memory_gib", "before": 16, "after": 32}])
    );
    assert_eq!(view["resumption"]["validator"], next.as_str());

    // Refused, and nothing changed: another basket's, one cut short, one altered, one made up.
    let (_, foreign) = read(&agent, &other).await;
    let mut altered = next.clone().into_bytes();
    altered[3] = if altered[3] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for (label, bad) in [
        ("another basket's", foreign),
        ("cut short", next[..next.len() - 1].to_owned()),
        ("altered", altered),
        ("made up", "v2-trust-me".to_owned()),
    ] {
        let refused = agent
            .call("basket_upgrade_memory", upgrade(&handle, json!(bad), 64))
            .await;
        assert_eq!(outcome(&refused), "rejected", "{label}: {refused}");
        assert_eq!(code(&refused), "INVALID_VALIDATOR", "{label}: {refused}");
        assert_eq!(
            refused["structuredContent"]["recovery"], "refresh_and_replan",
            "{label}"
        );
        assert_eq!(refused["isError"], true);
    }
    assert_eq!(read(&agent, &handle).await.0, 2, "nothing was applied");

    // A replica with another key issued none of these.
    let elsewhere = TestServer::start(keyed_server(
        MemoryStore::default(),
        b"another-key, padded to thirty-two bytes",
    ))
    .await;
    let stranger = Agent::connect(&elsewhere.url(), None).await;
    let theirs = stranger.create().await;
    let (_, their_validator) = read(&stranger, &theirs).await;
    let refused = agent
        .call(
            "basket_upgrade_memory",
            upgrade(&handle, json!(their_validator), 64),
        )
        .await;
    assert_eq!(code(&refused), "INVALID_VALIDATOR", "{refused}");
}

async fn the_meta_route_is_the_argument(store: impl Store) {
    let server = TestServer::start(keyed_server(
        store,
        b"replica-key, padded to thirty-two bytes",
    ))
    .await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    let (_, validator) = read(&agent, &handle).await;

    // A harness passes the validator in `_meta`; the model sent no version at all.
    let arguments = without_expected_version(upgrade(&handle, json!(0), 32));
    let applied = agent
        .call_with_meta(
            "basket_upgrade_memory",
            arguments.clone(),
            &[(VALIDATOR_META_KEY, json!(validator))],
        )
        .await;
    assert_eq!(outcome(&applied), "applied", "{applied}");

    // The same request again: the record answers, whichever form names the version.
    let retried = agent
        .call_with_meta(
            "basket_upgrade_memory",
            arguments.clone(),
            &[(VALIDATOR_META_KEY, json!(validator))],
        )
        .await;
    assert_eq!(outcome(&retried), "replayed", "{retried}");
    let mut as_number = arguments.clone();
    as_number["expected_version"] = json!(1);
    let retried = agent.call("basket_upgrade_memory", as_number).await;
    assert_eq!(outcome(&retried), "replayed", "{retried}");

    // Stale through `_meta` is stale as an argument.
    let stale = agent
        .call_with_meta(
            "basket_upgrade_memory",
            without_expected_version(upgrade(&handle, json!(0), 64)),
            &[(VALIDATOR_META_KEY, json!(validator))],
        )
        .await;
    assert_eq!(outcome(&stale), "stale_view", "{stale}");

    // The argument and `_meta` may both be sent only when they agree.
    let (current, fresh) = read(&agent, &handle).await;
    let disagree = agent
        .call_with_meta(
            "basket_upgrade_memory",
            upgrade(&handle, json!(current - 1), 64),
            &[(VALIDATOR_META_KEY, json!(fresh))],
        )
        .await;
    assert_eq!(code(&disagree), "INVALID_ARGUMENTS", "{disagree}");
    let text = disagree["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("send one of them"), "{text}");
    let agree = agent
        .call_with_meta(
            "basket_upgrade_memory",
            upgrade(&handle, json!(current), 64),
            &[(VALIDATOR_META_KEY, json!(fresh))],
        )
        .await;
    assert_eq!(outcome(&agree), "applied", "{agree}");

    // A `_meta` value that is not a string, and no precondition at all.
    let malformed = agent
        .call_with_meta(
            "basket_upgrade_memory",
            without_expected_version(upgrade(&handle, json!(0), 128)),
            &[(VALIDATOR_META_KEY, json!(3))],
        )
        .await;
    assert_eq!(code(&malformed), "INVALID_ARGUMENTS", "{malformed}");
    let missing = agent
        .call(
            "basket_upgrade_memory",
            without_expected_version(upgrade(&handle, json!(0), 128)),
        )
        .await;
    assert_eq!(code(&missing), "INVALID_ARGUMENTS", "{missing}");
    assert_eq!(
        missing["structuredContent"]["details"]["violations"][0]["message"],
        "\"expected_version\" is a required property"
    );
    assert_eq!(
        read(&agent, &handle).await.0,
        3,
        "only the agreeing change applied"
    );
}

async fn a_read_says_what_changed_since_a_basis(store: impl Store) {
    let server = TestServer::start(keyed_server(
        store,
        b"replica-key, padded to thirty-two bytes",
    ))
    .await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    let (_, first) = read(&agent, &handle).await;
    let note = json!({"basket_id": handle, "operation_id": operation_id("note"), "text": "rush"});
    assert_eq!(
        outcome(&agent.call("basket_add_note", note).await),
        "applied"
    );
    let upgraded = agent
        .call("basket_upgrade_memory", upgrade(&handle, json!(2), 32))
        .await;
    assert_eq!(outcome(&upgraded), "applied", "{upgraded}");

    let since = |basis: Value| {
        let agent = agent.clone();
        let handle = handle.clone();
        async move {
            agent
                .call(
                    "basket_get",
                    json!({ "basket_id": handle, "basis_version": basis }),
                )
                .await
        }
    };
    // From version 1: the delta of the view, as a stale write would have shown it.
    for basis in [json!(1), json!(first)] {
        let result = since(basis.clone()).await;
        assert_eq!(outcome(&result), "current", "{result}");
        let changes = &result["structuredContent"]["changes"];
        assert_eq!(changes["since_version"], 1, "{basis}: {result}");
        assert_eq!(changes["delta_available"], true);
        let paths: Vec<&str> = changes["delta"]
            .as_array()
            .unwrap()
            .iter()
            .map(|change| change["path"].as_str().unwrap())
            .collect();
        // The view's changes, then each item that changed: the note, with its id.
        assert_eq!(
            paths,
            ["/memory_gib", "/note_count", "/notes/items/1"],
            "{result}"
        );
        assert_eq!(
            changes["delta"][2]["after"],
            json!({ "id": 1, "version": 2, "value": "rush" })
        );
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("Changed since version 1: /memory_gib"),
            "{text}"
        );
    }
    // From the current version: nothing changed, and the worker can carry on quietly.
    let quiet = since(json!(3)).await;
    assert_eq!(quiet["structuredContent"]["changes"]["delta"], json!([]));
    assert_eq!(
        quiet["structuredContent"]["changes"]["delta_available"],
        true
    );
    let text = quiet["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("Nothing it shows changed since version 3"),
        "{text}"
    );
    // Without a basis, no `changes` at all.
    let plain = agent
        .call("basket_get", json!({ "basket_id": handle }))
        .await;
    assert!(
        plain["structuredContent"].get("changes").is_none(),
        "{plain}"
    );

    // A basis the basket never reached, and a validator that is not one.
    let ahead = since(json!(4)).await;
    assert_eq!(code(&ahead), "FUTURE_VERSION", "{ahead}");
    let forged = since(json!("bm90LWEtdmFsaWRhdG9y")).await;
    assert_eq!(code(&forged), "INVALID_VALIDATOR", "{forged}");
    let (_, other_validator) = read(&agent, &agent.create().await).await;
    let foreign = since(json!(other_validator)).await;
    assert_eq!(code(&foreign), "INVALID_VALIDATOR", "{foreign}");
}

/// Once a basis's history is pruned the read says so rather than guess.
async fn a_pruned_basis_has_no_delta(store: impl Store) {
    let server = TestServer::start(keyed_server(
        store,
        b"replica-key, padded to thirty-two bytes",
    ))
    .await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    for version in 1..=3u32 {
        let applied = agent
            .call(
                "basket_upgrade_memory",
                upgrade(&handle, json!(version), 16 + version),
            )
            .await;
        assert_eq!(outcome(&applied), "applied", "{applied}");
    }
    let result = agent
        .call(
            "basket_get",
            json!({ "basket_id": handle, "basis_version": 1 }),
        )
        .await;
    let changes = &result["structuredContent"]["changes"];
    assert_eq!(changes["delta_available"], false, "{result}");
    assert_eq!(changes["delta"], json!([]));
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("no longer kept"), "{text}");
    let kept = agent
        .call(
            "basket_get",
            json!({ "basket_id": handle, "basis_version": 3 }),
        )
        .await;
    assert_eq!(
        kept["structuredContent"]["changes"]["delta"],
        json!([{"path": "/memory_gib", "before": 18, "after": 19}])
    );
}

/// Replicas rolling their key: a validator the old key sealed still opens on a replica that signs
/// with the new key and accepts the old one, and no longer once that acceptance ended.
#[tokio::test]
async fn a_rolled_key_still_opens_what_the_old_one_sealed() {
    let store = std::sync::Arc::new(MemoryStore::default());
    let replica = |key: &[u8], accepted: Option<std::time::SystemTime>| {
        let mut builder = McpServer::builder("basket", "0.0.0")
            .tools(basket::tool_set())
            .store(std::sync::Arc::clone(&store))
            .signing_key(key.to_vec());
        if let Some(until) = accepted {
            builder =
                builder.accept_signing_key(b"key-one, padded to thirty-two bytes".to_vec(), until);
        }
        builder.build().unwrap()
    };
    let old = TestServer::start(replica(b"key-one, padded to thirty-two bytes", None)).await;
    let agent = Agent::connect(&old.url(), None).await;
    let handle = agent.create().await;
    let (_, sealed_by_old) = read(&agent, &handle).await;
    let in_an_hour = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    for (label, accepted, expect) in [
        ("without the old key", None, "rejected"),
        ("after the old key's time", Some(past), "rejected"),
        ("with the old key accepted", Some(in_an_hour), "applied"),
    ] {
        let rolled =
            TestServer::start(replica(b"key-two, padded to thirty-two bytes", accepted)).await;
        let agent = Agent::connect(&rolled.url(), None).await;
        let result = agent
            .call(
                "basket_upgrade_memory",
                upgrade(&handle, json!(sealed_by_old), 32),
            )
            .await;
        assert_eq!(outcome(&result), expect, "{label}: {result}");
        if expect == "rejected" {
            assert_eq!(code(&result), "INVALID_VALIDATOR", "{label}");
        }
    }
    assert!(matches!(
        McpServer::builder("x", "1")
            .accept_signing_key(b"short".to_vec(), in_an_hour)
            .build(),
        Err(mcp_tools::BuildError::WeakSigningKey(5))
    ));
}

/// The version arguments' bad values get their exact answer; a whole number written as a float
/// is that number, as JSON Schema counts it.
#[tokio::test]
async fn version_arguments_refuse_what_is_no_version() {
    let server = TestServer::start(keyed_server(
        MemoryStore::default(),
        b"replica-key, padded to thirty-two bytes",
    ))
    .await;
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    for (label, basis, violation) in [
        ("zero", json!(0), "minimum"),
        ("negative", json!(-1), "minimum"),
        ("a fraction", json!(1.5), "is not of types"),
        ("null", Value::Null, "is not of types"),
        ("an empty string", json!(""), "shorter"),
        ("an object", json!({"version": 1}), "is not of types"),
    ] {
        for (tool, arguments) in [
            (
                "basket_get",
                json!({"basket_id": handle, "basis_version": basis}),
            ),
            ("basket_upgrade_memory", upgrade(&handle, basis.clone(), 32)),
        ] {
            let refused = agent.call(tool, arguments).await;
            assert_eq!(
                code(&refused),
                "INVALID_ARGUMENTS",
                "{label} to {tool}: {refused}"
            );
            let message = refused["structuredContent"]["details"]["violations"][0]["message"]
                .as_str()
                .unwrap();
            assert!(message.contains(violation), "{label} to {tool}: {message}");
        }
    }
    assert_eq!(read(&agent, &handle).await.0, 1, "nothing applied");
    let as_float = agent
        .call("basket_upgrade_memory", upgrade(&handle, json!(1.0), 32))
        .await;
    assert_eq!(outcome(&as_float), "applied", "{as_float}");
    let since = agent
        .call(
            "basket_get",
            json!({"basket_id": handle, "basis_version": 2.0}),
        )
        .await;
    assert_eq!(
        since["structuredContent"]["changes"]["since_version"], 2,
        "{since}"
    );
}

fn short_history() -> StoreConfig {
    StoreConfig {
        history_limit: 2,
        ..StoreConfig::default()
    }
}

#[tokio::test]
async fn a_pruned_basis_has_no_delta_in_memory() {
    a_pruned_basis_has_no_delta(MemoryStore::new(short_history())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_basis_has_no_delta_in_sqlite() {
    let path = temp_db("revalidate-pruned");
    a_pruned_basis_has_no_delta(SqliteStore::open(&path, short_history()).unwrap()).await;
    remove_db(&path);
}

on_every_store!(
    validators_stand_for_their_version,
    the_meta_route_is_the_argument,
    a_read_says_what_changed_since_a_basis,
);
