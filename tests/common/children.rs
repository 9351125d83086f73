//! Server processes for the multi-process tests: the test binary starts copies of itself, each
//! running one ignored "child" test that serves the basket on a loopback port it prints.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;

/// What a child prints, followed by its address, once it accepts connections.
const READY: &str = "basket child serving on ";

/// A child server process, killed when dropped (a failing test included).
pub struct Child {
    /// `None` once killed.
    process: Option<std::process::Child>,
    pub url: String,
}

impl Child {
    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(std::process::Child::id)
    }

    /// SIGKILL: no shutdown, no draining. Returns once the process is gone.
    pub fn kill(&mut self) {
        let mut process = self.process.take().expect("a child is killed once");
        process.kill().unwrap();
        let pid = process.id();
        assert!(
            reaped(process),
            "timed out after {:?}: child process {pid} to exit after SIGKILL",
            super::STEP
        );
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let pid = process.id();
            // A second panic while a failed test unwinds would abort the whole binary.
            if !reaped(process) && !std::thread::panicking() {
                panic!(
                    "timed out after {:?}: child process {pid} to exit after SIGKILL",
                    super::STEP
                );
            }
        }
    }
}

/// Waits for `process` to exit, for at most a test step: `wait` has no timeout of its own, so
/// it runs on a thread of its own, left behind if the process never exits.
fn reaped(mut process: std::process::Child) -> bool {
    let (exited, exit) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = exited.send(process.wait());
    });
    exit.recv_timeout(super::STEP).is_ok()
}

/// Starts `count` children running the ignored test `child_test` with `env`, all at once, and
/// waits until each one listens. `child_test` is the test's path as `module_path!()` spells it,
/// `concat!(module_path!(), "::name")`, so it stays right wherever the test's module sits.
pub fn start(child_test: &str, env: &[(&str, String)], count: usize) -> Vec<Child> {
    // libtest names a test by its path without the crate's name; with `--exact` the child runs
    // that one test and no other.
    let (_, child_test) = child_test
        .split_once("::")
        .unwrap_or_else(|| panic!("not a test's path: {child_test}"));
    let mut children = Vec::new();
    let mut ready = Vec::new();
    for _ in 0..count {
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([child_test, "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = process.stdout.take().unwrap();
        children.push(Child {
            process: Some(process),
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
        let pid = child.process.as_ref().unwrap().id();
        let addr = match told.recv_timeout(super::STEP) {
            Ok(addr) => addr,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "timed out after {:?}: child process {pid} to print the address it serves on",
                super::STEP
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("child process {pid} closed its stdout without serving")
            }
        };
        child.url = format!("http://{addr}/mcp");
    }
    children
}

/// The body of a child: serves `server` on a loopback port, says where, and stops when the
/// parent closes its stdin or dies.
pub async fn serve(server: mcp_tools::McpServer) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut stdout = std::io::stdout();
    writeln!(stdout, "\n{READY}{}", listener.local_addr().unwrap()).unwrap();
    stdout.flush().unwrap();
    let parent_gone = async {
        let _ = tokio::task::spawn_blocking(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        })
        .await;
    };
    server.serve_listener(listener, parent_gone).await.unwrap();
}

/// Runs a child's body on a runtime of its own, as a server process would.
pub fn run(body: impl std::future::Future<Output = ()>) {
    // Warnings (a store failure's cause, say) go to the inherited stderr, into the test's log.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .try_init();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(body);
}

/// Set in a PostgreSQL child's environment: the database URL and the schema to serve from.
const POSTGRES_URL: &str = "MCP_TOOLS_TEST_CHILD_POSTGRES";
const POSTGRES_SCHEMA: &str = "MCP_TOOLS_TEST_CHILD_SCHEMA";

/// The environment that tells a child which database and schema to serve from.
pub fn postgres_env(url: &str, schema: &str) -> [(&'static str, String); 2] {
    [
        (POSTGRES_URL, url.to_owned()),
        (POSTGRES_SCHEMA, schema.to_owned()),
    ]
}

/// In a child: the database URL and schema its parent gave it; `None` when no parent did.
fn postgres_target() -> Option<(String, String)> {
    Some((
        std::env::var(POSTGRES_URL).ok()?,
        std::env::var(POSTGRES_SCHEMA).ok()?,
    ))
}

/// The body of a PostgreSQL child: serves the server `make` builds on a store in the database
/// and schema its parent gave it (`options` with that schema); does nothing unless a parent
/// started it.
pub fn serve_postgres(
    make: fn(mcp_tools::PostgresStore) -> mcp_tools::McpServer,
    config: mcp_tools::store::StoreConfig,
    options: mcp_tools::store::PostgresOptions,
) {
    let Some((url, schema)) = postgres_target() else {
        return;
    };
    run(async move {
        let options = mcp_tools::store::PostgresOptions { schema, ..options };
        let store = mcp_tools::PostgresStore::connect_with(&url, config, options)
            .await
            .unwrap();
        serve(make(store)).await;
    });
}
