//! Clients of revision 2025-11-25 on the same endpoint, served statelessly.

mod common;

use common::{TestServer, tools::tool_set};
use mcp_tools::McpServer;
use serde_json::{Value, json};

fn server(legacy: bool) -> McpServer {
    McpServer::builder("e2e", "1")
        .instructions("Legacy-era test.")
        .tools(tool_set(0))
        .logging()
        .legacy_era(legacy)
        .build()
        .unwrap()
}

async fn post(server: &TestServer, headers: &[(&str, &str)], body: Value) -> common::Reply {
    let mut call = common::Call::discover()
        .without_header("mcp-protocol-version")
        .without_header("mcp-method");
    for (name, value) in headers {
        call = call.header(name, value);
    }
    call.raw(serde_json::to_vec(&body).unwrap())
        .send(server)
        .await
}

#[tokio::test]
async fn an_initialize_handshake_is_served_without_a_session() {
    let server = TestServer::start(server(true)).await;
    let reply = post(&server, &[], json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } })).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.headers.get("mcp-session-id").is_none());
    let body = reply.json();
    assert_eq!(body["id"], 0);
    let result = &body["result"];
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(
        result["serverInfo"],
        json!({ "name": "e2e", "version": "1" })
    );
    assert_eq!(result["instructions"], "Legacy-era test.");
    assert!(result["capabilities"]["tools"].is_object());

    // An unknown earlier version is answered with the newest one served.
    let older = post(&server, &[], json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } })).await;
    assert_eq!(older.result()["protocolVersion"], "2025-11-25");

    let initialized = post(
        &server,
        &[("mcp-protocol-version", "2025-11-25")],
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    assert_eq!(initialized.status, 202);

    let v = [("mcp-protocol-version", "2025-11-25")];
    for method in ["ping", "logging/setLevel"] {
        let params = if method == "ping" {
            json!({})
        } else {
            json!({ "level": "info" })
        };
        let reply = post(
            &server,
            &v,
            json!({ "jsonrpc": "2.0", "id": 2, "method": method, "params": params }),
        )
        .await;
        assert_eq!(reply.result(), json!({}), "{method}");
    }
    let listed = post(
        &server,
        &v,
        json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list" }),
    )
    .await
    .result();
    assert_eq!(listed["tools"][0]["name"], "echo");
    let called = post(
        &server,
        &v,
        json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "still here" } } }),
    )
    .await
    .result();
    assert_eq!(called["content"][0]["text"], "still here");
    // server/discover belongs to the new era only.
    let discover = post(
        &server,
        &v,
        json!({ "jsonrpc": "2.0", "id": 5, "method": "server/discover", "params": {} }),
    )
    .await;
    assert_eq!(
        (discover.status, discover.error_code()),
        (404, Some(-32601))
    );
}

#[tokio::test]
async fn a_modern_only_server_names_its_versions_to_legacy_clients() {
    let server = TestServer::start(server(false)).await;
    let reply = post(&server, &[], json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } })).await;
    assert_eq!((reply.status, reply.error_code()), (400, Some(-32022)));
    assert_eq!(
        reply.json()["error"]["data"],
        json!({ "supported": ["2026-07-28"], "requested": "2025-11-25" })
    );
    let discover = common::Call::discover().send(&server).await.result();
    assert_eq!(discover["supportedVersions"], json!(["2026-07-28"]));
}

#[tokio::test]
async fn a_modern_request_is_never_taken_for_a_legacy_one() {
    let server = TestServer::start(server(true)).await;
    // The 2026-07-28 header without a `_meta` claim is a malformed modern request.
    let reply = common::Call::discover()
        .body(|b| b["params"] = json!({}))
        .send(&server)
        .await;
    assert_eq!((reply.status, reply.error_code()), (400, Some(-32602)));
    // A legacy claim under a modern header cannot skip the routing-header checks.
    let reply = common::Call::call_tool("echo", json!({ "text": "x" }))
        .meta(
            "io.modelcontextprotocol/protocolVersion",
            json!("2025-11-25"),
        )
        .header("mcp-name", "something-else")
        .send(&server)
        .await;
    assert_eq!(
        (reply.status, reply.error_code()),
        (400, Some(-32020)),
        "{}",
        reply.text
    );
    // A modern `initialize` is a removed method.
    let reply = common::Call::new("initialize", json!(9), json!({}))
        .send(&server)
        .await;
    assert_eq!((reply.status, reply.error_code()), (404, Some(-32601)));
}
