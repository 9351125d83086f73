//! Separate server processes on one SQLite file: the test binary starts copies of itself, each
//! serving the basket on its own loopback port from the same file, and runs the lost-update
//! workload across them. Only real processes exercise SQLite's file locking between processes
//! (two stores in one process share nothing of it but the file, yet run in one address space).

use crate::basket_client;
use crate::common;

use std::path::Path;

use serde_json::json;

use mcp_tools::SqliteStore;
use mcp_tools::store::{SqliteOptions, StoreConfig, Synchronous};

use basket_client::{Agent, assert_no_lost_update, remove_db, server, temp_db, workload};
use common::children::Child;

/// Set in a child's environment: the SQLite file to serve.
const CHILD_DB: &str = "MCP_TOOLS_TEST_CHILD_DB";
/// Set in a child's environment: `full` or `normal`.
const CHILD_SYNCHRONOUS: &str = "MCP_TOOLS_TEST_CHILD_SYNCHRONOUS";
const CHILD_TEST: &str = concat!(
    module_path!(),
    "::a_child_process_serves_the_basket_from_the_file_it_is_given"
);

const AGENTS: usize = 24;
const INCREMENTS: u64 = 3;

/// The body of a child process; does nothing unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the multi-process tests"]
fn a_child_process_serves_the_basket_from_the_file_it_is_given() {
    let Ok(path) = std::env::var(CHILD_DB) else {
        return;
    };
    let synchronous = match std::env::var(CHILD_SYNCHRONOUS).as_deref() {
        Ok("full") => Synchronous::Full,
        _ => Synchronous::Normal,
    };
    common::children::run(async move {
        let options = SqliteOptions {
            synchronous,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(&path, StoreConfig::default(), options).unwrap();
        common::children::serve(server(store)).await;
    });
}

/// Starts `count` children serving `path`, all at once, and waits until each one listens.
fn start_children(path: &Path, synchronous: &str, count: usize) -> Vec<Child> {
    let env = [
        (CHILD_DB, path.display().to_string()),
        (CHILD_SYNCHRONOUS, synchronous.to_owned()),
    ];
    common::children::start(CHILD_TEST, &env, count)
}

/// Where the children start from.
enum File {
    /// A file the parent created, as the first server of a deployment would.
    Created,
    /// No file yet: the children create it together.
    Absent,
}

/// The workload across `count` child processes, then every process must read the same basket.
async fn no_lost_update_across_processes(label: &str, synchronous: &str, count: usize, file: File) {
    let path = temp_db(&format!("processes-{synchronous}"));
    if let File::Created = file {
        drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    }
    let children = start_children(&path, synchronous, count);
    let urls: Vec<String> = children.iter().map(|child| child.url.clone()).collect();
    let run = workload(label, &urls, AGENTS, INCREMENTS).await;
    let handle = run.0.handle.clone();
    let (version, memory) = (run.2, run.1);
    assert_no_lost_update(run, AGENTS, INCREMENTS);
    for url in &urls {
        let agent = Agent::connect(url, None).await;
        let (seen, state) = agent.get(&handle).await;
        assert_eq!(
            (seen, state["memory_gib"].as_u64()),
            (version, Some(memory)),
            "{url}"
        );
    }
    drop(children);
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_update_across_three_server_processes_on_one_sqlite_file() {
    no_lost_update_across_processes("sqlite, three processes", "normal", 3, File::Created).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_update_across_two_server_processes_syncing_every_commit_on_a_new_file() {
    let label = "sqlite, two processes, synchronous=FULL, a new file";
    no_lost_update_across_processes(label, "full", 2, File::Absent).await;
}

/// What a call to a server that may die answered.
enum Answer {
    /// The `CallToolResult`.
    Result(serde_json::Value),
    /// The transport failed: the server is gone or dropped the connection.
    Gone,
}

async fn call(url: &str, tool: &str, arguments: &serde_json::Value) -> Answer {
    match common::Call::call_tool(tool, arguments.clone())
        .try_send_to(url)
        .await
    {
        Ok(reply) => {
            assert_eq!(reply.status, 200, "{tool}: {}", reply.text);
            let json = reply.json();
            common::assert_conforms("CallToolResultResponse", &json);
            Answer::Result(json["result"].clone())
        }
        Err(_) => Answer::Gone,
    }
}

/// Calls `tool` on the first server still up, resending the same request (same operation id)
/// to the next one when a server dies under it.
async fn call_failing_over(
    urls: &[String],
    current: &mut usize,
    tool: &str,
    arguments: &serde_json::Value,
) -> serde_json::Value {
    loop {
        match call(&urls[*current], tool, arguments).await {
            Answer::Result(result) => return result,
            Answer::Gone => {
                assert!(*current + 1 < urls.len(), "every server is gone");
                FAILOVERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                *current += 1;
            }
        }
    }
}

static FAILOVERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static REPLAYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_mid_workload_loses_nothing_and_applies_nothing_twice() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    const KILL_AFTER: u64 = 12;
    let path = temp_db("processes-kill");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    let mut children = start_children(&path, "normal", 2);
    let urls: Vec<String> = children.iter().map(|child| child.url.clone()).collect();
    let handle = Agent::connect(&urls[1], None).await.create().await;
    let acknowledged = Arc::new(AtomicU64::new(0));
    let halfway = Arc::new(tokio::sync::Notify::new());

    let agents: Vec<_> = (0..8)
        .map(|index| {
            let (urls, handle) = (urls.clone(), handle.clone());
            let (acknowledged, halfway) = (Arc::clone(&acknowledged), Arc::clone(&halfway));
            tokio::spawn(async move {
                // Every agent starts on the server that is going to die.
                let mut current = 0;
                let mut versions = Vec::new();
                let mut attempts = 0;
                while versions.len() < 4 {
                    attempts += 1;
                    assert!(attempts < 10_000, "agent {index} starved");
                    let read = json!({ "basket_id": handle });
                    let basket = call_failing_over(&urls, &mut current, "basket_get", &read).await;
                    let change =
                        basket_client::one_more_gib(&basket, &handle, &format!("killed{index}"));
                    let result = call_failing_over(
                        &urls,
                        &mut current,
                        "basket_replace_configuration",
                        &change,
                    )
                    .await;
                    // A replay: the dead server committed the request but its answer was lost.
                    let (applied, replayed) = basket_client::settled(&result);
                    if replayed {
                        REPLAYS.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(version) = applied {
                        versions.push(version);
                        if acknowledged.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER {
                            halfway.notify_one();
                        }
                    }
                }
                versions
            })
        })
        .collect();

    common::within("the workload to get halfway", halfway.notified()).await;
    // SIGKILL: no shutdown, no draining, whatever was in flight is cut off.
    children[0].kill();

    let mut versions = Vec::new();
    for agent in agents {
        versions.extend(common::within("an agent", agent).await.unwrap());
    }
    let survivor = Agent::connect(&urls[1], None).await;
    let (version, state) = survivor.get(&handle).await;
    let applied = versions.len() as u64;
    let (failovers, replays) = (
        FAILOVERS.load(Ordering::SeqCst),
        REPLAYS.load(Ordering::SeqCst),
    );
    println!(
        "kill -9 mid-workload: {applied} applied, {failovers} calls failed over, {replays} answered replayed"
    );
    assert!(failovers > 0, "no call was in flight on the killed server");
    assert_eq!(applied, 8 * 4);
    assert_eq!(
        state["memory_gib"].as_u64(),
        Some(16 + applied),
        "an acknowledged change was lost or applied twice"
    );
    assert_eq!(version, 1 + applied);
    versions.sort_unstable();
    assert_eq!(versions, (2..=1 + applied).collect::<Vec<_>>());
    drop(children);
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_another_process_after_the_first_was_killed_replays_its_commit() {
    let path = temp_db("processes-replay");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    let mut children = start_children(&path, "normal", 2);
    let urls: Vec<String> = children.iter().map(|child| child.url.clone()).collect();
    basket_client::a_retry_elsewhere_replays(&urls[0], &urls[1], || children[0].kill()).await;
    drop(children);
    remove_db(&path);
}
