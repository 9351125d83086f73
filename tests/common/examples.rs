//! The example binaries as their users run them: real processes, found where `cargo test` built
//! them, killed when a test ends however it ends.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

/// The sources each example is built from, to refuse a binary older than them.
fn sources(example: &str) -> &'static [&'static str] {
    match example {
        "basket" => &["examples/basket.rs", "examples/support/basket.rs"],
        "quickstart" => &["examples/quickstart.rs"],
        other => panic!("no sources listed for the example {other}"),
    }
}

/// The example binary `cargo test` built next to this test's own. `cargo test --test NAME`
/// alone does not rebuild examples, so a binary older than the example's sources fails the test
/// rather than testing code that is no longer there.
pub fn binary(example: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let binary = deps
        .parent()
        .and_then(|deps| deps.parent())
        .map(|debug| debug.join("examples").join(example))
        .filter(|path| path.exists())
        .unwrap_or_else(|| panic!("cargo test builds the {example} example next to the tests"));
    let modified = |path: &Path| std::fs::metadata(path).unwrap().modified().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for source in sources(example) {
        assert!(
            modified(&binary) >= modified(&root.join(source)),
            "{} is older than {source}: run `cargo build --example {example}` or the whole `cargo test`",
            binary.display()
        );
    }
    binary
}

/// A server process, killed when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `GET /healthz` on `port` answers 200.
pub async fn healthy(port: u16) {
    let health = format!("http://127.0.0.1:{port}/healthz");
    super::within("the server to answer /healthz", async {
        loop {
            if let Ok(reply) = super::client().get(&health).send().await
                && reply.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}
