//! Against a server that publishes no concurrency rules (the quickstart), the harness is a plain
//! client and changes nothing: the same listing, the same results, no arguments added, and no
//! call sent twice, since nothing says it is safe to.

use mcp_tools::client::{ClientError, Outcome};
use mcp_tools::tools::ToolSet;
use mcp_tools::{McpServer, tool, tools};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{TestServer, within};
use crate::dropin::Host;
use crate::support::{self, ExampleServer, FaultProxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_is_a_plain_client_of_a_server_without_rules() {
    let server = ExampleServer::start("quickstart", &[]).await;
    let proxy =
        FaultProxy::start(vec![format!("127.0.0.1:{}", server.port).parse().unwrap()]).await;
    let harness = support::harness(&proxy.url()).await;
    let direct = support::client(&server.url).await;

    let outcome = support::call(&harness, "add", json!({ "a": 20, "b": 22 })).await;
    let Outcome::Plain(result) = outcome else {
        panic!("a tool without rules answers plainly: {outcome:?}");
    };
    let plain = within("add", direct.call_tool("add", json!({ "a": 20, "b": 22 })))
        .await
        .unwrap();
    assert_eq!(result, plain);
    let sent = proxy.seen_of("tools/call", Some("add"));
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].text.contains(r#""arguments":{"a":20,"b":22}"#),
        "{}",
        sent[0].text
    );
    assert!(!sent[0].text.contains("operation_id"));
    assert!(!sent[0].text.contains("io.github.mcp-tools/validator"));
    assert!(harness.records().is_empty(), "nothing to remember");

    // A lost answer is the caller's to handle: nothing says the call may be sent again.
    proxy.lose_answers(1);
    let lost = support::call_err(&harness, "echo", json!({ "text": "once" })).await;
    assert!(matches!(lost, ClientError::Transport(_)), "{lost}");
    assert_eq!(
        proxy.seen_of("tools/call", Some("echo")).len(),
        1,
        "sent once"
    );
}

/// Through the drop-in harness, a host sees exactly what the server lists and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drop_in_harness_passes_a_server_without_rules_through() {
    let server = ExampleServer::start("quickstart", &[]).await;
    let direct = support::client(&server.url).await;
    let mut host = Host::start(&server.url, None).await;
    let listed = host.request("tools/list", json!({})).await;
    let upstream = within(
        "the upstream listing",
        direct.request("tools/list", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(listed["result"], upstream, "the listing, unchanged");
    let through = host.call("add", json!({ "a": 1, "b": 2 })).await;
    let upstream = within(
        "the upstream call",
        direct.request(
            "tools/call",
            json!({ "name": "add", "arguments": { "a": 1, "b": 2 } }),
        ),
    )
    .await
    .unwrap();
    assert_eq!(through, upstream, "the result, unchanged");
    let who = host.call("whoami", json!({})).await;
    assert_eq!(
        who["content"][0]["text"], "test-host, speaking MCP 2026-07-28",
        "the host's own _meta reaches the server"
    );
    host.close().await;
}

static SENT: AtomicUsize = AtomicUsize::new(0);

/// Counts its calls.
#[tool]
fn counted() -> usize {
    SENT.fetch_add(1, Ordering::SeqCst) + 1
}

/// A tool without rules whose answer is lost runs once: the harness does not send it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_without_rules_is_never_sent_twice() {
    let tools: ToolSet = tools![counted];
    let server = McpServer::builder("counting", "1.0.0")
        .tools(tools)
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let proxy = FaultProxy::start(vec![server.addr]).await;
    let harness = support::harness(&proxy.url()).await;
    proxy.lose_answers(1);
    let lost = support::call_err(&harness, "counted", json!({})).await;
    assert!(lost.is_retryable(), "{lost}");
    assert_eq!(SENT.load(Ordering::SeqCst), 1, "run once, not retried");
}
