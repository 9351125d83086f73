//! A `#[tool]` over real HTTP on loopback: a wrong argument type comes back as a tool error
//! (`isError: true`) naming the field, not as a protocol error.

use mcp_tools::{McpServer, tool, tools};
use serde_json::{Value, json};

/// Repeats a word.
#[tool]
fn repeat(
    /// The word to repeat.
    word: String,
    /// How many times.
    times: u32,
) -> String {
    word.repeat(times as usize)
}

#[tokio::test]
async fn wrong_argument_type_is_a_tool_error_with_the_field_path() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = McpServer::builder("macro-http", "0.0.0")
        .tools(tools![repeat])
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_listener(listener, async {
        let _ = stopped.await;
    }));

    let call = |arguments: Value| {
        let body = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "repeat",
                "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}
                }
            }
        });
        async move {
            let response = reqwest::Client::new()
                .post(format!("http://{address}/mcp"))
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream")
                .header("MCP-Protocol-Version", "2026-07-28")
                .header("Mcp-Method", "tools/call")
                .header("Mcp-Name", "repeat")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success(), "{}", response.status());
            response.json::<Value>().await.unwrap()
        }
    };

    let ok = call(json!({"word": "ab", "times": 2})).await;
    assert_eq!(ok["result"]["content"][0]["text"], "abab", "{ok}");

    let wrong = call(json!({"word": "ab", "times": "two"})).await;
    let result = &wrong["result"];
    assert_eq!(result["isError"], true, "{wrong}");
    assert_eq!(result["structuredContent"]["code"], "INVALID_ARGUMENTS");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/times"), "{text}");

    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}
