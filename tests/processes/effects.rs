//! The checkout's charge through the outbox, end to end: basket servers as real processes (on one
//! SQLite file, or on one PostgreSQL schema) deliver each checkout's `charge` effect to a payment
//! stub over HTTP, a real server in this test that charges once per `Idempotency-Key` and counts
//! every request. Through a failing and a slow payment service, a replica killed with SIGKILL
//! while the service holds its request, and a declined card: every applied checkout is charged
//! exactly once, under one key; refused and replayed checkouts are charged nothing; and
//! `basket_get` shows each delivery ending `delivered` or `failed`.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use mcp_tools::SqliteStore;
use mcp_tools::store::{PostgresOptions, StoreConfig};

use crate::basket_client::{
    Agent, CHILD_ATTEMPTS, charge_key, checkout_arguments, effects_of, operation_id, paying_server,
    remove_db, settled_effect, temp_db,
};
use crate::common::payments::{Answer, PaymentStub};
use crate::common::{children, within};
use crate::pg;

pub(crate) const CHILD_TEST: &str = concat!(module_path!(), "::a_child_process_delivers_charges");
/// Set in a child's environment: the SQLite file to serve (otherwise the PostgreSQL schema).
pub(crate) const CHILD_DB: &str = "MCP_TOOLS_TEST_EFFECTS_DB";

/// The body of a child process; does nothing unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the effect tests"]
fn a_child_process_delivers_charges() {
    if let Ok(path) = std::env::var(CHILD_DB) {
        children::run(async move {
            let store = SqliteStore::open(&path, StoreConfig::default()).unwrap();
            children::serve(paying_server(store)).await;
        });
        return;
    }
    let options = PostgresOptions {
        timeout: Duration::from_secs(3),
        ..PostgresOptions::default()
    };
    children::serve_postgres(paying_server, StoreConfig::default(), options);
}

/// Starts `count` children on the SQLite file `path`, paying at `stub`.
fn sqlite_children(
    path: &std::path::Path,
    stub: &PaymentStub,
    count: usize,
    attempts: u32,
) -> Vec<children::Child> {
    let env = [
        (CHILD_DB, path.display().to_string()),
        ("BASKET_PAYMENT_URL", stub.url.clone()),
        (CHILD_ATTEMPTS, attempts.to_string()),
    ];
    children::start(CHILD_TEST, &env, count)
}

/// Starts `count` children on the PostgreSQL `schema`, paying at `stub`.
fn postgres_children(
    schema: &pg::Schema,
    stub: &PaymentStub,
    count: usize,
) -> Vec<children::Child> {
    let [url, name] = children::postgres_env(&schema.url, &schema.name);
    let env = [
        url,
        name,
        ("BASKET_PAYMENT_URL", stub.url.clone()),
        (CHILD_ATTEMPTS, "8".to_owned()),
    ];
    children::start(CHILD_TEST, &env, count)
}

/// Five baskets on two server processes sharing a SQLite file; the payment service fails twice,
/// then answers one request too late, then works. Four checkouts apply (one of them sent twice),
/// one is refused as stale: four charges, one per key, none for the refused one, however many
/// requests the failures took.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkouts_are_charged_once_per_key_through_failures_and_timeouts() {
    let path = temp_db("effects-failures");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    let stub = PaymentStub::start(&[Answer::Unavailable, Answer::Unavailable, Answer::Slow]).await;
    let replicas = sqlite_children(&path, &stub, 2, 8);
    let agents = [
        Agent::connect(&replicas[0].url, None).await,
        Agent::connect(&replicas[1].url, None).await,
    ];
    let mut baskets = Vec::new();
    for _ in 0..5 {
        baskets.push(agents[0].create().await);
    }
    // The fifth basket changes after its checkout was planned: that checkout is refused.
    let upgrade = json!({
        "basket_id": baskets[4], "expected_version": 1, "memory_gib": 32,
        "operation_id": operation_id("upgrade"),
    });
    let upgraded = agents[1].call("basket_upgrade_memory", upgrade).await;
    assert_eq!(
        upgraded["structuredContent"]["outcome"], "applied",
        "{upgraded}"
    );

    let mut keys = HashMap::new();
    let mut prices = HashMap::new();
    for (index, basket) in baskets.iter().take(4).enumerate() {
        let arguments = checkout_arguments(basket, 1);
        let result = agents[index % 2]
            .call("basket_checkout", arguments.clone())
            .await;
        let key = charge_key(&result);
        prices.insert(
            key.clone(),
            result["structuredContent"]["result"]["price_eur"]
                .as_u64()
                .unwrap(),
        );
        if index == 1 {
            // Sent again to the other process: a replay, which names the same charge.
            let again = agents[0].call("basket_checkout", arguments).await;
            let replayed = &again["structuredContent"];
            assert_eq!(replayed["outcome"], "replayed", "{again}");
            assert_eq!(replayed["original"]["effects"][0]["key"], key.as_str());
            assert_eq!(replayed["effects"][0]["key"], key.as_str(), "{again}");
        }
        keys.insert(basket.clone(), key);
    }
    let stale = agents[0]
        .call("basket_checkout", checkout_arguments(&baskets[4], 1))
        .await;
    assert_eq!(
        stale["structuredContent"]["outcome"], "stale_view",
        "{stale}"
    );

    let mut attempts = 0;
    for (basket, key) in &keys {
        let effect = settled_effect(&agents[1], basket).await;
        assert_eq!(effect["state"], "delivered", "{effect}");
        assert_eq!(effect["key"], key.as_str());
        assert!(effect["result"]["charge"].is_string(), "{effect}");
        attempts += effect["attempts"].as_u64().unwrap();
    }
    assert!(
        effects_of(&agents[0], &baskets[4]).await.is_empty(),
        "a refused checkout emits nothing"
    );
    let charges = stub.charges();
    let charged: std::collections::HashSet<&String> = charges.keys().collect();
    let expected: std::collections::HashSet<&String> = keys.values().collect();
    assert_eq!(
        charged, expected,
        "one charge per applied checkout, no other"
    );
    for (key, (_, amount)) in &charges {
        assert_eq!(*amount, prices[key], "the charge is the receipt's price");
    }
    let requests: u32 = keys.values().map(|key| stub.requests(key)).sum();
    println!(
        "charges through failures: {} checkouts applied, {} charged, {requests} requests, \
         {attempts} attempts",
        keys.len(),
        charges.len()
    );
    // Two 503s and one answer too late, each retried with the same key.
    assert!(requests >= 7, "{requests} requests");
    assert_eq!(u64::from(requests), attempts);
    drop(replicas);
    remove_db(&path);
}

/// The payment service charges, then holds the request; the replica delivering it is killed
/// with SIGKILL. A replica started afterwards takes the effect over once the dead one's lease
/// lapses and delivers it again under the same key: one charge, two requests.
async fn a_replica_killed_mid_delivery(
    start: impl Fn() -> Vec<children::Child>,
    stub: &PaymentStub,
) {
    let mut first = start();
    let agent = Agent::connect(&first[0].url, None).await;
    let basket = agent.create().await;
    let result = agent
        .call("basket_checkout", checkout_arguments(&basket, 1))
        .await;
    let key = charge_key(&result);
    within(
        "the payment service to hold the charge",
        stub.hung.notified(),
    )
    .await;
    first[0].kill();

    let second = start();
    let agent = Agent::connect(&second[0].url, None).await;
    let effect = settled_effect(&agent, &basket).await;
    assert_eq!(effect["state"], "delivered", "{effect}");
    assert_eq!(effect["attempts"], 2, "{effect}");
    let charges = stub.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(effect["result"]["charge"], charges[&key].0.as_str());
    assert_eq!(stub.requests(&key), 2);
    println!("kill -9 mid-delivery: 1 checkout, 1 charge, 2 requests under one key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sqlite_process_killed_mid_delivery_leaves_the_charge_to_the_next_under_the_same_key() {
    let path = temp_db("effects-kill");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    let stub = PaymentStub::start(&[Answer::Hang]).await;
    a_replica_killed_mid_delivery(|| sqlite_children(&path, &stub, 1, 8), &stub).await;
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_replica_killed_mid_delivery_leaves_the_charge_to_the_next_under_the_same_key() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    drop(schema.connect(StoreConfig::default()).await);
    let stub = PaymentStub::start(&[Answer::Hang]).await;
    a_replica_killed_mid_delivery(|| postgres_children(&schema, &stub, 1), &stub).await;
}

/// A declined card fails the charge at once; a service that never comes back fails it after the
/// last attempt. Both show in `basket_get` with the error, and nothing was charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn declined_and_unreachable_charges_end_failed_with_their_error() {
    let path = temp_db("effects-failed");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    let stub = PaymentStub::start(&[Answer::Declined]).await;
    let replicas = sqlite_children(&path, &stub, 1, 3);
    let agent = Agent::connect(&replicas[0].url, None).await;

    let declined = agent.create().await;
    let key = charge_key(
        &agent
            .call("basket_checkout", checkout_arguments(&declined, 1))
            .await,
    );
    let effect = settled_effect(&agent, &declined).await;
    assert_eq!(effect["state"], "failed", "{effect}");
    assert_eq!(effect["attempts"], 1, "a permanent failure is not retried");
    assert!(
        effect["error"].as_str().unwrap().contains("402"),
        "{effect}"
    );
    assert_eq!(stub.requests(&key), 1);

    stub.otherwise(Answer::Unavailable);
    let unreachable = agent.create().await;
    let key = charge_key(
        &agent
            .call("basket_checkout", checkout_arguments(&unreachable, 1))
            .await,
    );
    let effect = settled_effect(&agent, &unreachable).await;
    assert_eq!(effect["state"], "failed", "{effect}");
    assert_eq!(effect["attempts"], 3);
    let error = effect["error"].as_str().unwrap();
    assert!(
        error.contains("503") && error.contains("after 3 attempts"),
        "{error}"
    );
    assert_eq!(stub.requests(&key), 3);
    assert!(stub.charges().is_empty(), "nothing was charged");
    drop(replicas);
    remove_db(&path);
}
