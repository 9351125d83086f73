//! The client against other implementations of 2026-07-28 servers: the rmcp and flymcprust
//! peers of the peer benchmark (`benches/peers`), each with an `add` and an `echo` tool, over
//! HTTP and stdio. They build in a cargo workspace of their own, so the tests are ignored unless
//! asked for, with the folder of the built binaries named (`.ci/run` does this):
//!
//! ```sh
//! cargo build --release --locked --manifest-path benches/peers/Cargo.toml -p rmcp-peer -p flymcprust-peer
//! MCP_TOOLS_PEERS=benches/peers/target/release cargo test --test client interop -- --ignored
//! ```

use std::path::PathBuf;

use mcp_tools::client::{Client, ClientError, Harness, Outcome};
use serde_json::json;

use crate::common::examples::{Process, free_port};
use crate::common::within;

/// The peer binary `name`, or `None` (after saying so) when `MCP_TOOLS_PEERS` is not set; in CI
/// (`CI` set), a missing folder fails instead, so a skipped peer cannot hide a broken client.
fn peer(name: &str) -> Option<PathBuf> {
    let Some(folder) = std::env::var_os("MCP_TOOLS_PEERS") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "MCP_TOOLS_PEERS must name the peer servers' binaries in CI"
        );
        eprintln!("SKIPPED: set MCP_TOOLS_PEERS to the folder of the peer servers' binaries");
        return None;
    };
    let binary = PathBuf::from(folder).join(name);
    assert!(binary.exists(), "no {}", binary.display());
    Some(binary)
}

/// Starts a peer on HTTP and waits until it accepts connections.
async fn start_http(binary: &PathBuf) -> (Process, String) {
    let port = free_port();
    let process = std::process::Command::new(binary)
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    within("the peer to listen", async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    (Process(process), format!("http://127.0.0.1:{port}/mcp"))
}

/// What every peer must do with this client: discover, list, call both tools with typed
/// results and errors, and drive them through the harness, which changes nothing.
async fn exercise(client: Client, label: &str) {
    let discovery = client.discovery().unwrap();
    assert!(
        discovery
            .supported_versions
            .iter()
            .any(|v| v == "2026-07-28")
    );
    let tools = within("listing", client.list_tools()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
    assert!(
        names.contains(&"add") && names.contains(&"echo"),
        "{names:?}"
    );
    let sum = within("add", client.call_tool("add", json!({ "a": 2, "b": 3 })))
        .await
        .unwrap();
    assert_eq!(sum.structured_content, Some(json!({ "sum": 5 })));
    let echoed = within(
        "echo",
        client.call_tool("echo", json!({ "text": "héllo\nworld" })),
    )
    .await
    .unwrap();
    assert_eq!(echoed.text(), "héllo\nworld");
    let unknown = within("an unknown tool", client.call_tool("nope", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, ClientError::Rpc(_) | ClientError::Tool(_)),
        "{unknown}"
    );
    let wrong = within(
        "wrong arguments",
        client.call_tool("add", json!({ "a": "x" })),
    )
    .await;
    println!("{label}: wrong arguments give {wrong:?}");
    let harness = Harness::new(client);
    let outcome = within(
        "add through the harness",
        harness.call("add", json!({ "a": 2, "b": 3 })),
    )
    .await
    .unwrap();
    assert!(
        matches!(&outcome, Outcome::Plain(result) if result.structured_content == Some(json!({ "sum": 5 })))
    );
    println!(
        "{label}: {} serves {}; tools {names:?}; add(2, 3) = 5; echo round-trips; an unknown tool is {unknown}",
        discovery.server_name().unwrap_or("?"),
        discovery.supported_versions.join(", ")
    );
}

/// `exercise` against the peer `name` served over HTTP.
async fn over_http(name: &str) {
    let Some(binary) = peer(name) else {
        return;
    };
    let (_process, url) = start_http(&binary).await;
    let client = within("connecting", Client::builder().connect_http(&url))
        .await
        .unwrap();
    exercise(client, &format!("{name} (HTTP)")).await;
}

/// `exercise` against the peer `name` as a child process speaking stdio.
async fn over_stdio(name: &str) {
    let Some(binary) = peer(name) else {
        return;
    };
    let client = within(
        "starting the peer",
        Client::builder().connect_stdio(&binary, ["--stdio"]),
    )
    .await
    .unwrap();
    exercise(client, &format!("{name} (stdio)")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the peer servers' binaries (MCP_TOOLS_PEERS)"]
async fn rmcp_peer_over_http() {
    over_http("rmcp-peer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the peer servers' binaries (MCP_TOOLS_PEERS)"]
async fn rmcp_peer_over_stdio() {
    over_stdio("rmcp-peer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the peer servers' binaries (MCP_TOOLS_PEERS)"]
async fn flymcprust_peer_over_http() {
    over_http("flymcprust-peer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the peer servers' binaries (MCP_TOOLS_PEERS)"]
async fn flymcprust_peer_over_stdio() {
    over_stdio("flymcprust-peer").await;
}
