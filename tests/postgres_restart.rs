//! The database restarted under load: while it is down every call answers the typed, retryable
//! `STORE_UNAVAILABLE` (never an HTTP 500, never a JSON-RPC error, never a hang), the replicas
//! reconnect on their own, and the workload then completes with nothing lost or applied twice.
//!
//! A test binary of its own: restarting the database would break any other test running beside
//! it.

#[path = "../examples/support/basket.rs"]
mod basket;
mod basket_client;
mod common;
#[path = "../mcp-tools/tests/pg/mod.rs"]
mod pg;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcp_tools::store::{PostgresOptions, StoreConfig};
use serde_json::{Value, json};

use basket_client::{Agent, operation_id, server};
use common::children;

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

/// [`Agent::call_until_available`], paced while the database is down.
async fn until_available(agent: &Agent, tool: &str, arguments: &Value) -> (Value, u64) {
    agent
        .call_until_available(tool, arguments, 2_000, Duration::from_millis(20))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_restart_mid_workload_answers_store_unavailable_and_loses_nothing() {
    // Every await below is under this bound, besides each step's own.
    common::within_for(std::time::Duration::from_secs(600), "the whole test", async {
        const AGENTS: usize = 8;
        const EACH: usize = 8;
        const RESTART_AFTER: u64 = 16;
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let env = children::postgres_env(&schema.url, &schema.name);
        let replicas = children::start(CHILD_TEST, &env, 2);
        let mut clients = Vec::new();
        for replica in &replicas {
            clients.push(Agent::connect(&replica.url, None).await);
        }
        let (created, _) = until_available(
            &clients[0],
            "basket_create",
            &json!({ "operation_id": operation_id("create") }),
        )
        .await;
        let handle = created["structuredContent"]["handle"]
            .as_str()
            .unwrap()
            .to_owned();
        let acknowledged = Arc::new(AtomicU64::new(0));
        let unavailable = Arc::new(AtomicU64::new(0));
        let replays = Arc::new(AtomicU64::new(0));
        let halfway = Arc::new(tokio::sync::Notify::new());
        let agents: Vec<_> = (0..AGENTS)
            .map(|index| {
                let (clients, handle, halfway) =
                    (clients.clone(), handle.clone(), Arc::clone(&halfway));
                let (acknowledged, unavailable, replays) = (
                    Arc::clone(&acknowledged),
                    Arc::clone(&unavailable),
                    Arc::clone(&replays),
                );
                tokio::spawn(async move {
                    let mut versions = Vec::new();
                    let mut turn = index;
                    while versions.len() < EACH {
                        turn += 1;
                        let client = &clients[turn % clients.len()];
                        let (read, waited) =
                            until_available(client, "basket_get", &json!({ "basket_id": handle }))
                                .await;
                        unavailable.fetch_add(waited, Ordering::Relaxed);
                        let change =
                            basket_client::one_more_gib(&read, &handle, &format!("restart{index}"));
                        // The same request, same operation id, until the store answers.
                        let (result, waited) =
                            until_available(client, "basket_replace_configuration", &change).await;
                        unavailable.fetch_add(waited, Ordering::Relaxed);
                        let (applied, replayed) = basket_client::settled(&result);
                        if replayed {
                            replays.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Some(version) = applied {
                            versions.push(version);
                            if acknowledged.fetch_add(1, Ordering::SeqCst) + 1 == RESTART_AFTER {
                                halfway.notify_one();
                            }
                        }
                    }
                    versions
                })
            })
            .collect();
        common::within("the workload to get halfway", halfway.notified()).await;
        common::within(
            "the database to restart",
            tokio::task::spawn_blocking(restart_database),
        )
        .await
        .unwrap();
        let mut versions = Vec::new();
        for agent in agents {
            versions.extend(
                common::within_for(Duration::from_secs(120), "an agent", agent)
                    .await
                    .unwrap(),
            );
        }
        let applied = versions.len() as u64;
        println!(
            "database restarted mid-workload: {applied} applied, {} STORE_UNAVAILABLE answers retried, {} answered replayed",
            unavailable.load(Ordering::Relaxed),
            replays.load(Ordering::Relaxed)
        );
        assert!(
            unavailable.load(Ordering::Relaxed) > 0,
            "no call met the restart: the test proved nothing"
        );
        assert_eq!(applied, (AGENTS * EACH) as u64);
        versions.sort_unstable();
        assert_eq!(versions, (2..=1 + applied).collect::<Vec<_>>());
        for client in &clients {
            let (read, _) =
                until_available(client, "basket_get", &json!({ "basket_id": handle })).await;
            let basket = &read["structuredContent"];
            assert_eq!(basket["version"].as_u64(), Some(1 + applied));
            assert_eq!(basket["state"]["memory_gib"].as_u64(), Some(16 + applied));
        }
    })
    .await;
}
