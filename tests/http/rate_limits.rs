//! Rate limits over real HTTP: past the rate a tool call, task request or listen is refused before
//! it runs with HTTP 429, `-32000` and `Retry-After`, per principal (all of them) and per
//! principal and tool.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::tools::Bump;
use common::{Call, TestServer, assert_conforms};
use mcp_tools::McpServer;
use serde_json::json;

fn server(
    bumps: &Arc<AtomicUsize>,
    limit: impl FnOnce(mcp_tools::McpServerBuilder) -> mcp_tools::McpServerBuilder,
) -> McpServer {
    limit(
        McpServer::builder("limits", "1")
            .tools(common::tools::tool_set(0).with(Bump(Arc::clone(bumps))))
            .authenticate(common::tools::bearer_subject),
    )
    .build()
    .unwrap()
}

fn call(who: &str, tool: &str) -> Call {
    let arguments = if tool == "echo" {
        json!({ "text": "hi" })
    } else {
        json!({})
    };
    Call::call_tool(tool, arguments).header("authorization", &format!("Bearer {who}"))
}

fn assert_limited(label: &str, reply: &common::Reply) {
    assert_eq!(
        (reply.status, reply.error_code()),
        (429, Some(-32000)),
        "{label}: {}",
        reply.text
    );
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    let retry: u64 = reply.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{label}: Retry-After {retry}");
    assert_eq!(body["error"]["data"]["retryAfterSeconds"], retry, "{label}");
}

#[tokio::test]
async fn a_principal_past_its_rate_is_refused_until_it_refills() {
    let bumps = Arc::new(AtomicUsize::new(0));
    let live =
        TestServer::start(server(&bumps, |b| b.rate_limit(3, Duration::from_secs(60)))).await;
    for tool in ["echo", "bump", "echo"] {
        let reply = call("alice", tool).send(&live).await;
        assert_eq!(reply.status, 200, "{tool}: {}", reply.text);
    }
    assert_limited("a fourth call", &call("alice", "bump").send(&live).await);
    assert_eq!(
        bumps.load(Ordering::SeqCst),
        1,
        "the refused call did not run"
    );
    // Another principal has an allowance of its own; listing is not a tool call.
    assert_eq!(call("bob", "bump").send(&live).await.status, 200);
    let listed = Call::new("tools/list", json!(1), json!({}))
        .header("authorization", "Bearer alice")
        .send(&live)
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
}

#[tokio::test]
async fn a_tool_with_a_rate_of_its_own_is_limited_alone() {
    let bumps = Arc::new(AtomicUsize::new(0));
    let live = TestServer::start(server(&bumps, |b| {
        b.tool_rate_limit("bump", 1, Duration::from_secs(60))
    }))
    .await;
    assert_eq!(call("alice", "bump").send(&live).await.status, 200);
    assert_limited("a second bump", &call("alice", "bump").send(&live).await);
    assert_eq!(bumps.load(Ordering::SeqCst), 1);
    for _ in 0..5 {
        assert_eq!(
            call("alice", "echo").send(&live).await.status,
            200,
            "echo has no limit"
        );
    }
    assert_eq!(call("bob", "bump").send(&live).await.status, 200);
    assert!(matches!(
        McpServer::builder("x", "1")
            .rate_limit(0, Duration::from_secs(1))
            .build(),
        Err(mcp_tools::BuildError::InvalidSetting(_))
    ));
}

/// A tool that may run as a task, so the server takes the Tasks extension's requests.
#[mcp_tools::tool(task = optional)]
async fn later() -> String {
    "later".into()
}

/// A server with a task tool, rate limited as `limit` says.
fn tasks_server(
    limit: impl FnOnce(mcp_tools::McpServerBuilder) -> mcp_tools::McpServerBuilder,
) -> McpServer {
    limit(
        McpServer::builder("limits", "1")
            .tools(mcp_tools::tools![later])
            .authenticate(common::tools::bearer_subject),
    )
    .build()
    .unwrap()
}

#[tokio::test]
async fn task_reads_and_listens_count_against_the_principals_rate() {
    let live = TestServer::start(tasks_server(|b| b.rate_limit(3, Duration::from_secs(60)))).await;
    let as_carol = |call: Call| call.header("authorization", "Bearer carol");
    // Each reads the store, answered or not: an unknown task is still a lookup.
    for _ in 0..3 {
        let reply = as_carol(common::tasks::method_call(
            "tasks/get",
            "tsk_unknown",
            json!({}),
        ))
        .send(&live)
        .await;
        assert_eq!(reply.error_code(), Some(-32602), "{}", reply.text);
    }
    let reply = as_carol(common::tasks::method_call(
        "tasks/get",
        "tsk_unknown",
        json!({}),
    ))
    .send(&live)
    .await;
    assert_limited("the fourth tasks/get", &reply);
    let listen = as_carol(Call::new(
        "subscriptions/listen",
        json!(5),
        json!({ "notifications": { "toolsListChanged": true } }),
    ))
    .send(&live)
    .await;
    assert_limited("a listen past the rate", &listen);
    // Another principal's allowance is its own.
    let reply = common::tasks::method_call("tasks/get", "tsk_unknown", json!({}))
        .header("authorization", "Bearer dave")
        .send(&live)
        .await;
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.text);
}

#[tokio::test]
async fn one_listen_follows_at_most_64_tasks() {
    let live = TestServer::start(tasks_server(|b| b)).await;
    let ids: Vec<String> = (0..65).map(|n| format!("tsk_{n:032x}")).collect();
    let reply = Call::new(
        "subscriptions/listen",
        json!(6),
        json!({ "notifications": { "taskIds": ids } }),
    )
    .capabilities(common::tasks::taking_tasks())
    .header("authorization", "Bearer erin")
    .send(&live)
    .await;
    // Refused before a stream opens: one JSON answer.
    assert_eq!(
        (reply.status, reply.error_code()),
        (200, Some(-32602)),
        "{}",
        reply.text
    );
    assert_eq!(reply.headers["content-type"], "application/json");
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("at most 64"), "{message}");
}
