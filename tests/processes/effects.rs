//! The checkout's charge through the outbox, end to end: basket servers as real processes (on one
//! SQLite file, or on one PostgreSQL schema) deliver each checkout's `charge` effect to a payment
//! stub over HTTP, a real server in this test that charges once per `Idempotency-Key` and counts
//! every request. Through a failing and a slow payment service, a replica killed with SIGKILL
//! while the service holds its request, and a declined card: every applied checkout is charged
//! exactly once, under one key; refused and replayed checkouts are charged nothing; and
//! `basket_get` shows each delivery ending `delivered` or `failed`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use mcp_tools::effects::DeliveryPolicy;
use mcp_tools::store::{PostgresOptions, Store, StoreConfig};
use mcp_tools::{McpServer, SqliteStore};

use crate::basket;
use crate::basket_client::{Agent, operation_id, remove_db, temp_db};
use crate::common::{self, children, within, within_for};
use crate::pg;

const CHILD_TEST: &str = concat!(module_path!(), "::a_child_process_delivers_charges");
/// Set in a child's environment: the SQLite file to serve (otherwise the PostgreSQL schema).
const CHILD_DB: &str = "MCP_TOOLS_TEST_EFFECTS_DB";
/// Set in a child's environment: how many attempts a charge gets.
const CHILD_ATTEMPTS: &str = "MCP_TOOLS_TEST_EFFECT_ATTEMPTS";

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

/// The basket server, delivering charges to `BASKET_PAYMENT_URL` fast: an attempt may take
/// 500 ms, a dead replica's lease lapses after 1.5 s, retries come 100 to 400 ms apart.
fn paying_server<S: Store>(store: S) -> McpServer {
    let attempts = std::env::var(CHILD_ATTEMPTS)
        .ok()
        .and_then(|attempts| attempts.parse().ok())
        .unwrap_or(8);
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set())
        .store(store)
        .signing_key(common::SIGNING_KEY)
        .delivery_policy(
            DeliveryPolicy::default()
                .timeout(Duration::from_millis(500))
                .lease(Duration::from_millis(1500))
                .first_retry(Duration::from_millis(100))
                .max_retry(Duration::from_millis(400))
                .poll_interval(Duration::from_millis(100))
                .max_attempts(attempts),
        )
        .build()
        .unwrap()
}

/// How the payment stub answers a request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// Charges the card (once per key; a repeated key gets the first charge back).
    Charge,
    /// 503, nothing charged.
    Unavailable,
    /// 402, card declined, nothing charged.
    Declined,
    /// Charges, then holds the request open and never answers.
    Hang,
    /// Charges, then answers after a second (past the server's 500 ms timeout).
    Slow,
}

#[derive(Default)]
struct Ledger {
    /// The charge of each key: its id and amount.
    charges: HashMap<String, (String, u64)>,
    /// Every request, by key.
    requests: HashMap<String, u32>,
    /// How the next requests are answered, in order; then `otherwise`.
    script: VecDeque<Answer>,
    otherwise: Option<Answer>,
}

/// A payment service: `POST /charges` with an `Idempotency-Key`.
struct PaymentStub {
    ledger: Mutex<Ledger>,
    /// A request was answered `Hang`.
    hung: tokio::sync::Notify,
    url: String,
}

impl PaymentStub {
    async fn start(script: &[Answer]) -> Arc<PaymentStub> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stub = Arc::new(PaymentStub {
            ledger: Mutex::new(Ledger {
                script: script.iter().copied().collect(),
                ..Ledger::default()
            }),
            hung: tokio::sync::Notify::new(),
            url: format!("http://{}/charges", listener.local_addr().unwrap()),
        });
        let app = axum::Router::new()
            .route("/charges", post(charge))
            .with_state(Arc::clone(&stub));
        tokio::spawn(async move { axum::serve(listener, app).await });
        stub
    }

    fn otherwise(&self, answer: Answer) {
        self.ledger.lock().unwrap().otherwise = Some(answer);
    }

    fn charges(&self) -> HashMap<String, (String, u64)> {
        self.ledger.lock().unwrap().charges.clone()
    }

    fn requests(&self, key: &str) -> u32 {
        self.ledger
            .lock()
            .unwrap()
            .requests
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

/// A JSON body.
fn json_body(body: Value) -> String {
    body.to_string()
}

async fn charge(
    State(stub): State<Arc<PaymentStub>>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|key| key.to_str().ok())
        .map(str::to_owned)
    else {
        return (
            StatusCode::BAD_REQUEST,
            json_body(json!({ "error": "no Idempotency-Key" })),
        );
    };
    let amount = body["amount_eur"].as_u64().unwrap_or(0);
    let (answer, charged) = {
        let mut ledger = stub.ledger.lock().unwrap();
        *ledger.requests.entry(key.clone()).or_default() += 1;
        let answer = ledger
            .script
            .pop_front()
            .or(ledger.otherwise)
            .unwrap_or(Answer::Charge);
        let charged = match answer {
            Answer::Unavailable | Answer::Declined => None,
            _ => {
                let next = format!("ch_{}", ledger.charges.len() + 1);
                let (id, _) = ledger
                    .charges
                    .entry(key.clone())
                    .or_insert((next, amount))
                    .clone();
                Some(id)
            }
        };
        (answer, charged)
    };
    match answer {
        Answer::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            json_body(json!({ "error": "try later" })),
        ),
        Answer::Declined => (
            StatusCode::PAYMENT_REQUIRED,
            json_body(json!({ "error": "card declined" })),
        ),
        Answer::Hang => {
            stub.hung.notify_one();
            std::future::pending().await
        }
        Answer::Slow => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            (StatusCode::OK, json_body(json!({ "charge": charged })))
        }
        Answer::Charge => (StatusCode::OK, json_body(json!({ "charge": charged }))),
    }
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

/// Checks out `handle` at `version` with a new operation id: the arguments, to resend.
fn checkout_arguments(handle: &str, version: u64) -> Value {
    json!({
        "basket_id": handle,
        "expected_version": version,
        "operation_id": operation_id("checkout"),
    })
}

/// The effects a read of `handle` reports.
async fn effects_of(agent: &Agent, handle: &str) -> Vec<Value> {
    let read = agent
        .call("basket_get", json!({ "basket_id": handle }))
        .await;
    read["structuredContent"]["effects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Reads `handle` until its one effect is settled (`delivered` or `failed`); returns it.
async fn settled_effect(agent: &Agent, handle: &str) -> Value {
    within_for(Duration::from_secs(60), "the charge to be settled", async {
        loop {
            let effects = effects_of(agent, handle).await;
            assert_eq!(effects.len(), 1, "{effects:?}");
            if effects[0]["state"] != "pending" {
                return effects[0].clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// The one effect an applied checkout names: its key.
fn charge_key(result: &Value) -> String {
    let outcome = &result["structuredContent"];
    assert_eq!(outcome["outcome"], "applied", "{result}");
    let effects = outcome["effects"].as_array().unwrap();
    assert_eq!(effects.len(), 1, "{result}");
    assert_eq!(effects[0]["kind"], "charge");
    effects[0]["key"].as_str().unwrap().to_owned()
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
