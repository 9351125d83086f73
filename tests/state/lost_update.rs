//! No lost update: 32 agents run read-modify-write loops over HTTP on one basket, each sending a
//! full configuration planned from the version it read. Whatever the store (memory, SQLite, two
//! servers sharing one SQLite file), the final basket equals the applied outcomes. With the
//! version check switched off, the same workload loses updates, which proves the check is what
//! keeps them.

use crate::basket_client;
use crate::common;

use mcp_tools::store::StoreConfig;
use mcp_tools::{MemoryStore, SqliteStore};

use basket_client::{Counts, remove_db, server, temp_db};
use common::TestServer;

const AGENTS: usize = 32;
/// Increments each agent must get applied.
const INCREMENTS: u64 = 3;

async fn workload(label: &str, urls: &[String]) -> (Counts, u64, u64) {
    basket_client::workload(label, urls, AGENTS, INCREMENTS).await
}

fn assert_no_lost_update(run: (Counts, u64, u64)) {
    basket_client::assert_no_lost_update(run, AGENTS, INCREMENTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_update_on_the_memory_store() {
    let server = TestServer::start(server(MemoryStore::default())).await;
    assert_no_lost_update(workload("memory", &[server.url()]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_update_on_sqlite() {
    let path = temp_db("one-server");
    let store = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let server = TestServer::start(server(store)).await;
    assert_no_lost_update(workload("sqlite", &[server.url()]).await);
    drop(server);
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_update_on_two_servers_sharing_one_sqlite_file() {
    let path = temp_db("two-servers");
    let first = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let second = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let one = TestServer::start(server(first)).await;
    let two = TestServer::start(server(second)).await;
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
    let server = TestServer::start(server(store)).await;
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
