//! Every result carries `resultType` and the server's `io.modelcontextprotocol/serverInfo`
//! `_meta`: whatever the method, an `input_required` round, the final result of a subscription,
//! and the legacy era's `initialize`. The legacy era's empty results stay exactly `{}`, which
//! the clients of that era require.

use crate::common;

use common::{Call, TestServer, assert_conforms, within};
use mcp_tools::completion::{CompletionTarget, Completions};
use mcp_tools::prompts::{Prompt, PromptMessage, PromptSet};
use mcp_tools::protocol::RpcError;
use mcp_tools::resources::{Resource, ResourceSet};
use mcp_tools::tools::{InputRequired, NoArgs, Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, McpServer};
use serde_json::{Value, json};

/// Asks the user something.
struct Ask;

impl Tool for Ask {
    type Args = NoArgs;
    type Output = InputRequired;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("ask", "Asks the user.")
    }
    async fn call(&self, _: NoArgs, _cx: Context) -> InputRequired {
        InputRequired::new().elicit("ok", "Well?", json!({ "type": "object", "properties": {} }))
    }
}

fn server() -> McpServer {
    McpServer::builder("info-server", "4.5.6")
        .tools(ToolSet::new().with(Ask).with(common::tools::Echo))
        .resources(ResourceSet::new().with(Resource::text("docs://a", "A", "text/plain", "a")))
        .prompts(
            PromptSet::new().with(Prompt::new("p", "A prompt.", |_, _| async {
                Ok::<_, RpcError>(Vec::<PromptMessage>::new())
            })),
        )
        .completions(Completions::new().with(
            CompletionTarget::Prompt("p".into()),
            "x",
            |_, _, _| vec!["y".into()],
        ))
        .build()
        .unwrap()
}

fn assert_carries_server_info(what: &str, result: &Value) {
    assert!(result["resultType"].is_string(), "{what}: {result}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"],
        json!({ "name": "info-server", "version": "4.5.6" }),
        "{what}: {result}"
    );
}

#[tokio::test]
async fn every_result_carries_the_server_info() {
    let live = TestServer::start(server()).await;
    let calls = [
        ("server/discover", Call::discover()),
        ("tools/list", Call::new("tools/list", json!(1), json!({}))),
        (
            "tools/call",
            Call::call_tool("echo", json!({ "text": "hi" })),
        ),
        (
            "tools/call asking for input",
            Call::call_tool("ask", json!({})).capabilities(json!({ "elicitation": {} })),
        ),
        (
            "resources/read",
            Call::new("resources/read", json!(2), json!({ "uri": "docs://a" }))
                .header("mcp-name", "docs://a"),
        ),
        (
            "resources/list",
            Call::new("resources/list", json!(3), json!({})),
        ),
        (
            "prompts/get",
            Call::new("prompts/get", json!(4), json!({ "name": "p" })),
        ),
        (
            "completion/complete",
            Call::new(
                "completion/complete",
                json!(5),
                json!({ "ref": { "type": "ref/prompt", "name": "p" },
                    "argument": { "name": "x", "value": "" } }),
            ),
        ),
    ];
    for (what, call) in calls {
        let reply = call.send(&live).await.json();
        assert_conforms("JSONRPCResultResponse", &reply);
        assert_carries_server_info(what, &reply["result"]);
    }
}

#[tokio::test]
async fn the_final_result_of_a_subscription_carries_the_server_info() {
    let server = server();
    let handle = server.clone();
    let live = TestServer::start(server).await;
    let call = Call::new(
        "subscriptions/listen",
        json!(9),
        json!({ "notifications": { "toolsListChanged": true } }),
    );
    let mut request = common::client().post(live.url());
    for (name, value) in &call.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let mut response = within("the listen stream", request.json(&call.body).send())
        .await
        .unwrap();
    let mut text = String::new();
    // Read the acknowledgement, then close the subscription and read to the end.
    while !text.contains("acknowledged") {
        let chunk = within("the acknowledgement", response.chunk())
            .await
            .unwrap();
        text.push_str(&String::from_utf8_lossy(
            &chunk.expect("the stream ended early"),
        ));
    }
    handle.close_subscriptions();
    while let Some(chunk) = within("the end of the stream", response.chunk())
        .await
        .unwrap()
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let last: Value = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).unwrap())
        .next_back()
        .unwrap();
    assert_conforms("SubscriptionsListenResultResponse", &last);
    assert_eq!(
        last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        9
    );
    assert_carries_server_info("the final listen result", &last["result"]);
}

#[tokio::test]
async fn legacy_initialize_carries_the_server_info_and_an_empty_result_stays_empty() {
    let live = TestServer::start(server()).await;
    for (method, params) in [
        (
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": { "name": "old", "version": "1" } }),
        ),
        ("ping", json!({})),
    ] {
        let reply = Call::new(method, json!(1), params)
            .without_header("mcp-method")
            .header("mcp-protocol-version", "2025-11-25")
            .body(|b| {
                b["params"].as_object_mut().unwrap().remove("_meta");
            })
            .send(&live)
            .await;
        assert_eq!(reply.status, 200, "{method}: {}", reply.text);
        if method == "ping" {
            assert_eq!(reply.json()["result"], json!({}));
        } else {
            assert_carries_server_info(method, &reply.json()["result"]);
        }
    }
}
