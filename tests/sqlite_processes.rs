//! Separate server processes on one SQLite file: the test binary starts copies of itself, each
//! serving the basket on its own loopback port from the same file, and runs the lost-update
//! workload across them. Only real processes exercise SQLite's file locking between processes
//! (two stores in one process share nothing of it but the file, yet run in one address space).

#[path = "../examples/support/basket.rs"]
mod basket;
mod basket_client;
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use mcp_tools::state::{SqliteOptions, SqliteStore, Store, StoreConfig, Synchronous};

use basket_client::{Agent, assert_no_lost_update, remove_db, server, temp_db, workload};

/// Set in a child's environment: the SQLite file to serve.
const CHILD_DB: &str = "MCP_TOOLS_TEST_CHILD_DB";
/// Set in a child's environment: `full` or `normal`.
const CHILD_SYNCHRONOUS: &str = "MCP_TOOLS_TEST_CHILD_SYNCHRONOUS";
/// What a child prints, followed by its address, once it accepts connections.
const READY: &str = "basket child serving on ";
const CHILD_TEST: &str = "a_child_process_serves_the_basket_from_the_file_it_is_given";

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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let options = SqliteOptions {
            synchronous,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(&path, StoreConfig::default(), options).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut stdout = std::io::stdout();
        writeln!(stdout, "\n{READY}{}", listener.local_addr().unwrap()).unwrap();
        stdout.flush().unwrap();
        // The parent holds the other end of stdin: when it closes it, or dies, the child stops.
        let parent_gone = async {
            let _ = tokio::task::spawn_blocking(|| {
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
            })
            .await;
        };
        server(Store::new(store))
            .serve_listener(listener, parent_gone)
            .await
            .unwrap();
    });
}

/// A child server process, killed when dropped (a failing test included).
struct Child {
    process: std::process::Child,
    url: String,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Starts `count` children serving `path`, all at once, and waits until each one listens.
fn start_children(path: &Path, synchronous: &str, count: usize) -> Vec<Child> {
    let mut children = Vec::new();
    let mut ready = Vec::new();
    for _ in 0..count {
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([CHILD_TEST, "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_DB, path)
            .env(CHILD_SYNCHRONOUS, synchronous)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = process.stdout.take().unwrap();
        children.push(Child {
            process,
            url: String::new(),
        });
        let (address, told) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref() {
                let Ok(line) = line else { break };
                // libtest may have started the line with the test's name.
                if let Some((_, addr)) = line.split_once(READY) {
                    let _ = address.send(addr.to_owned());
                    break;
                }
            }
            // Keep reading so the child never blocks on a full pipe.
            for _ in lines {}
        });
        ready.push(told);
    }
    for (child, told) in children.iter_mut().zip(ready) {
        let addr = told
            .recv_timeout(common::STEP)
            .expect("a child process did not start serving");
        child.url = format!("http://{addr}/mcp");
    }
    children
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
