//! The database restarted under load: three replicas, 32 agents doing read-modify-write. While it
//! is down every call answers the typed, retryable `STORE_UNAVAILABLE` (never an HTTP 500, never
//! a JSON-RPC error, never a hang), the replicas reconnect on their own, and the workload then
//! completes with a linearizable history and nothing lost or applied twice.
//!
//! And a checkout's charge through the outbox: the payment service is down, the database
//! restarts while the charge is being retried, and it is charged once when the service comes
//! back.
//!
//! A test binary of its own: restarting the database would break any other test running beside
//! it. Its two tests take turns ([`RESTARTS`]).

#[path = "../examples/support/basket.rs"]
mod basket;
mod basket_client;
mod common;
mod faults;
#[path = "../mcp-tools/tests/pg/mod.rs"]
mod pg;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use mcp_tools::store::{PostgresOptions, StoreConfig};

use basket_client::server;
use common::children;
use common::payments::{Answer, PaymentStub};
use faults::history::History;

const CHILD_TEST: &str = concat!(
    module_path!(),
    "::a_child_process_serves_the_basket_through_restarts"
);

const PAYING_CHILD_TEST: &str = concat!(
    module_path!(),
    "::a_child_process_delivers_charges_through_restarts"
);

/// One restart at a time: the tests of this binary run one after the other.
static RESTARTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The body of a child process that delivers charges; does nothing unless a parent test
/// started it.
#[test]
#[ignore = "runs only as a child process of the restart test"]
fn a_child_process_delivers_charges_through_restarts() {
    let options = PostgresOptions {
        timeout: Duration::from_secs(3),
        ..PostgresOptions::default()
    };
    children::serve_postgres(
        basket_client::paying_server,
        StoreConfig::default(),
        options,
    );
}

/// The body of a child process; does nothing unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the restart test"]
fn a_child_process_serves_the_basket_through_restarts() {
    let options = PostgresOptions {
        timeout: Duration::from_secs(3),
        ..PostgresOptions::default()
    };
    children::serve_postgres(server, StoreConfig::default(), options);
}

/// Restarts the test cluster (`.ci/postgres` exports where it is) as its owner.
fn restart_database() {
    let (Ok(bin), Ok(data)) = (
        std::env::var("MCP_TOOLS_POSTGRES_BIN"),
        std::env::var("MCP_TOOLS_POSTGRES_DATA"),
    ) else {
        panic!(
            "restarting needs MCP_TOOLS_POSTGRES_BIN and MCP_TOOLS_POSTGRES_DATA (.ci/postgres)"
        );
    };
    let log = format!("{data}/../restart.log");
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(format!("{bin}/pg_ctl"))
        .args([
            "-D", &data, "-l", &log, "-m", "fast", "-w", "-t", "60", "restart",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("pg_ctl runs");
    assert!(status.success(), "pg_ctl restart failed: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_restart_mid_workload_answers_store_unavailable_and_loses_nothing() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let _turn = RESTARTS.lock().await;
    // The tables exist before the replicas race to make them.
    drop(schema.connect(StoreConfig::default()).await);
    let env = children::postgres_env(&schema.url, &schema.name);
    let replicas = children::start(CHILD_TEST, &env, 3);
    let urls: Vec<String> = replicas.iter().map(|child| child.url.clone()).collect();
    let history = Arc::new(History::default());
    let seed = faults::seed();
    let workload = faults::Workload {
        agents: 32,
        baskets: 8,
        operations: 12,
        abandon: 0.1,
    };
    // A third of the way in, the database restarts under the running workload.
    let restart = async {
        common::within("a third of the workload", history.reached(128)).await;
        common::within(
            "the database to restart",
            tokio::task::spawn_blocking(restart_database),
        )
        .await
        .unwrap();
    };
    let (report, ()) = common::within_for(Duration::from_secs(600), "the workload", async {
        tokio::join!(
            faults::run(&urls, workload, Arc::clone(&history), seed),
            restart
        )
    })
    .await;
    let verdict = faults::assert_exactly_once(&urls[0], &report, &history).await;
    println!(
        "database restarted mid-workload (seed {seed}): {} operations, {} applied, {} stale_view, \
         {} replayed, {} calls retried; {verdict}",
        report.operations, report.applied, report.stale, report.replayed, report.retries
    );
    assert!(
        report.retries > 0,
        "no call met the restart: the test proved nothing"
    );
}

/// The payment service is down; a checkout's charge is being retried when the database restarts.
/// Delivery carries on once it is back (claims and settlements in between fail and are tried
/// again), and the charge is made once, when the service returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_charge_pending_through_a_database_restart_is_charged_once() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let _turn = RESTARTS.lock().await;
    drop(schema.connect(StoreConfig::default()).await);
    let stub = PaymentStub::start(&[]).await;
    stub.otherwise(Answer::Unavailable);
    let [url, name] = children::postgres_env(&schema.url, &schema.name);
    let env = [
        url,
        name,
        ("BASKET_PAYMENT_URL", stub.url.clone()),
        // Enough attempts to outlast the restart: retries come at most 400 ms apart.
        (basket_client::CHILD_ATTEMPTS, "200".to_owned()),
    ];
    let replica = children::start(PAYING_CHILD_TEST, &env, 1);
    let agent = basket_client::Agent::connect(&replica[0].url, None).await;
    let basket = agent.create().await;
    let checkout = agent
        .call(
            "basket_checkout",
            basket_client::checkout_arguments(&basket, 1),
        )
        .await;
    let key = basket_client::charge_key(&checkout);
    common::within("the charge to be retried", async {
        while stub.requests(&key) < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    common::within(
        "the database to restart",
        tokio::task::spawn_blocking(restart_database),
    )
    .await
    .unwrap();
    let before = stub.requests(&key);
    stub.otherwise(Answer::Charge);
    // Reads may answer STORE_UNAVAILABLE until the replica reconnects.
    let effect = common::within_for(
        Duration::from_secs(60),
        "the charge to be delivered",
        async {
            loop {
                let (read, _) = agent
                    .call_until_available(
                        "basket_get",
                        &serde_json::json!({ "basket_id": basket }),
                        600,
                        Duration::from_millis(50),
                    )
                    .await;
                let effects = read["structuredContent"]["effects"].clone();
                if effects[0]["state"] == "delivered" {
                    return effects[0].clone();
                }
                assert_eq!(effects[0]["state"], "pending", "{effects}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    let charges = stub.charges();
    let requests = stub.requests(&key);
    println!(
        "charge through a database restart: 1 checkout, {} charged, {requests} requests \
         ({before} before the service came back), {} attempts",
        charges.len(),
        effect["attempts"]
    );
    assert_eq!(charges.len(), 1);
    assert_eq!(effect["result"]["charge"], charges[&key].0.as_str());
    assert_eq!(effect["key"], key.as_str());
}
