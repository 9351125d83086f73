//! A tool that panics, over real HTTP on loopback: its caller gets a JSON-RPC internal error
//! answering its request, whether the answer is a plain one or a stream of progress, and the
//! server goes on serving.

use crate::common;

use mcp_tools::{McpServer, tool, tools};
use serde_json::{Value, json};

use common::{Call, TestServer};

/// Counts to `n`. A bug makes it panic at 13.
#[tool]
fn count(
    /// How far.
    n: u32,
) -> String {
    assert!(n != 13, "unlucky");
    (1..=n).map(|i| i.to_string()).collect::<Vec<_>>().join(" ")
}

fn server() -> McpServer {
    McpServer::builder("panics", "1.0.0")
        .tools(tools![count])
        .build()
        .unwrap()
}

fn assert_failed_unexpectedly(answer: &Value, call: &Call) {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["id"], call.body["id"], "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(
        answer["error"]["message"], "The request failed unexpectedly",
        "{answer}"
    );
}

#[tokio::test]
async fn a_panicking_tool_answers_an_internal_error() {
    let server = TestServer::start(server()).await;
    let call = Call::call_tool("count", json!({ "n": 13 }));
    let reply = call.send(&server).await;
    assert_eq!(reply.status, 200);
    assert_failed_unexpectedly(&reply.json(), &call);

    let counted = Call::call_tool("count", json!({ "n": 3 }))
        .send(&server)
        .await
        .result();
    assert_eq!(counted["content"][0]["text"], "1 2 3", "{counted}");
}

#[tokio::test]
async fn a_tool_panicking_in_a_stream_ends_it_with_an_internal_error() {
    let server = TestServer::start(server()).await;
    let call = Call::call_tool("count", json!({ "n": 13 })).meta("progressToken", json!("p-1"));
    let reply = call.send(&server).await;
    assert_eq!(reply.status, 200);
    assert!(reply.is_stream(), "{}", reply.json());
    let events = reply.events();
    assert_failed_unexpectedly(events.last().unwrap(), &call);

    let streamed = Call::call_tool("count", json!({ "n": 2 }))
        .meta("progressToken", json!("p-2"))
        .send(&server)
        .await;
    assert_eq!(streamed.json()["result"]["content"][0]["text"], "1 2");
}
