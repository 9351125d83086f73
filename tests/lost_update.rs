//! No lost update: 32 agents run read-modify-write loops over HTTP on one basket, each sending a
//! full configuration planned from the version it read. Whatever the store (memory, SQLite, two
//! servers sharing one SQLite file), the final basket equals the applied outcomes. With the
//! version check switched off, the same workload loses updates, which proves the check is what
//! keeps them.

#[path = "../examples/support/basket.rs"]
mod basket;
mod basket_client;
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mcp_tools::state::{MemoryStore, SqliteStore, Store, StoreConfig};
use serde_json::json;
use tokio::sync::Barrier;

use basket_client::{Agent, operation_id, outcome, server};
use common::TestServer;

const AGENTS: usize = 32;
/// Increments each agent must get applied.
const INCREMENTS: u64 = 3;
/// Attempts an agent may make before the test gives up on it.
const MAX_ATTEMPTS: u64 = 10_000;

#[derive(Debug, Default)]
struct Counts {
    applied: u64,
    stale_retries: u64,
    applied_versions: Vec<u64>,
}

/// Runs the workload against `urls` (agents spread over them); returns the counts, the final
/// memory and the final version.
async fn workload(label: &str, urls: &[String]) -> (Counts, u64, u64) {
    let agents: Vec<Agent> = {
        let mut agents = Vec::new();
        for url in urls {
            agents.push(Agent::connect(url, None).await);
        }
        agents
    };
    let handle = agents[0].create().await;
    let barrier = Arc::new(Barrier::new(AGENTS));
    let tasks: Vec<_> = (0..AGENTS)
        .map(|index| {
            let agent = agents[index % agents.len()].clone();
            let handle = handle.clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let mut counts = Counts::default();
                let mut attempts = 0;
                while counts.applied < INCREMENTS {
                    attempts += 1;
                    assert!(attempts <= MAX_ATTEMPTS, "agent {index} starved");
                    let (version, state) = agent.get(&handle).await;
                    let memory = state["memory_gib"].as_u64().unwrap();
                    let result = agent
                        .call(
                            "basket_replace_configuration",
                            json!({
                                "basket_id": handle,
                                "expected_version": version,
                                "operation_id": operation_id(&format!("agent{index}")),
                                "memory_gib": memory + 1,
                                "storage_gib": state["storage_gib"],
                            }),
                        )
                        .await;
                    match outcome(&result) {
                        "applied" => {
                            let applied = &result["structuredContent"];
                            assert_eq!(applied["state"]["memory_gib"], memory + 1);
                            counts.applied += 1;
                            counts
                                .applied_versions
                                .push(applied["version"].as_u64().unwrap());
                        }
                        "stale_view" => {
                            let stale = &result["structuredContent"];
                            assert_eq!(stale["expected_version"], version);
                            assert!(stale["current_version"].as_u64().unwrap() > version);
                            counts.stale_retries += 1;
                        }
                        other => panic!("unexpected outcome {other}: {result}"),
                    }
                }
                counts
            })
        })
        .collect();
    let mut total = Counts::default();
    for task in tasks {
        let counts = task.await.unwrap();
        total.applied += counts.applied;
        total.stale_retries += counts.stale_retries;
        total.applied_versions.extend(counts.applied_versions);
    }
    let (version, state) = agents[0].get(&handle).await;
    let memory = state["memory_gib"].as_u64().unwrap();
    println!(
        "{label}: {AGENTS} agents, {} applied, {} stale retries, final memory_gib {memory} (started at 16), final version {version}",
        total.applied, total.stale_retries
    );
    (total, memory, version)
}

fn assert_no_lost_update((counts, memory, version): (Counts, u64, u64)) {
    assert_eq!(counts.applied, AGENTS as u64 * INCREMENTS);
    assert_eq!(memory, 16 + counts.applied, "an update was lost");
    assert_eq!(version, 1 + counts.applied);
    let mut versions = counts.applied_versions;
    versions.sort_unstable();
    let expected: Vec<u64> = (2..=1 + counts.applied).collect();
    assert_eq!(
        versions, expected,
        "each applied outcome has its own version"
    );
}

fn temp_db(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!(
        "mcp-tools-{name}-{}-{nanos}.db",
        std::process::id()
    ))
}

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_update_on_the_memory_store() {
    let server = TestServer::start(server(Store::new(MemoryStore::default()))).await;
    assert_no_lost_update(workload("memory", &[server.url()]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_update_on_sqlite() {
    let path = temp_db("one-server");
    let store = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let server = TestServer::start(server(Store::new(store))).await;
    assert_no_lost_update(workload("sqlite", &[server.url()]).await);
    drop(server);
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_update_on_two_servers_sharing_one_sqlite_file() {
    let path = temp_db("two-servers");
    let first = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let second = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let one = TestServer::start(server(Store::new(first))).await;
    let two = TestServer::start(server(Store::new(second))).await;
    assert_no_lost_update(workload("sqlite, two servers", &[one.url(), two.url()]).await);
    drop((one, two));
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_version_check_the_same_workload_loses_updates() {
    let store = MemoryStore::new(StoreConfig {
        unchecked_versions_for_tests: true,
        ..StoreConfig::default()
    });
    let server = TestServer::start(server(Store::new(store))).await;
    let (counts, memory, _) = workload("memory, version check off", &[server.url()]).await;
    assert_eq!(counts.stale_retries, 0, "nothing is ever refused");
    assert_eq!(counts.applied, AGENTS as u64 * INCREMENTS);
    let lost = 16 + counts.applied - memory;
    println!(
        "version check off: {lost} of {} updates lost",
        counts.applied
    );
    assert!(
        lost > 0,
        "the workload should lose updates without the check"
    );
}
