//! The database restarted under load: three replicas, 32 agents doing read-modify-write. While it
//! is down every call answers the typed, retryable `STORE_UNAVAILABLE` (never an HTTP 500, never
//! a JSON-RPC error, never a hang), the replicas reconnect on their own, and the workload then
//! completes with a linearizable history and nothing lost or applied twice.
//!
//! A test binary of its own: restarting the database would break any other test running beside
//! it.

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
use faults::history::History;

const CHILD_TEST: &str = concat!(
    module_path!(),
    "::a_child_process_serves_the_basket_through_restarts"
);

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
