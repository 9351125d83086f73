//! Clients of revision 2025-11-25 on the same endpoint, served statelessly.

use crate::common;

use common::tools::{Bump, tool_set};
use common::{TestServer, assert_conforms};
use mcp_tools::tools::{NoArgs, Tool, ToolInfo};
use mcp_tools::{Context, McpServer};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

/// Answers with the protocol version the request was served in.
struct Version;

impl Tool for Version {
    type Args = NoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("version", "Names the protocol version of the request.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> String {
        cx.protocol_version().to_owned()
    }
}

/// How many times `bump` ran, across the tests of this file.
static BUMPS: LazyLock<Arc<AtomicUsize>> = LazyLock::new(Default::default);

fn server(legacy: bool) -> McpServer {
    McpServer::builder("e2e", "1")
        .instructions("Legacy-era test.")
        .tools(tool_set(0).with(Version).with(Bump(Arc::clone(&BUMPS))))
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

/// Asserts `reply` is a 400 `-32022` naming `requested` and only the 2026-07-28 revision.
fn assert_unsupported(label: &str, reply: &common::Reply, requested: &str) {
    assert_eq!(
        (reply.status, reply.error_code()),
        (400, Some(-32022)),
        "{label}: {}",
        reply.text
    );
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_conforms("UnsupportedProtocolVersionError", &body);
    assert_eq!(
        body["error"]["data"],
        json!({ "supported": ["2026-07-28"], "requested": requested }),
        "{label}"
    );
}

fn call(id: i64, name: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": name, "arguments": {} } })
}

#[tokio::test]
async fn an_initialize_handshake_is_served_without_a_session() {
    let server = TestServer::start(server(true)).await;
    let reply = post(&server, &[], json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } })).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.headers.get("mcp-session-id").is_none());
    let body = reply.json();
    common::assert_legacy_result(&body);
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
    common::assert_legacy_result(&older.json());
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
        common::assert_legacy_result(&reply.json());
        // Exactly the empty object: clients of that era refuse any member.
        assert_eq!(reply.result(), json!({}), "{method}");
    }
    let listed = post(
        &server,
        &v,
        json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list" }),
    )
    .await
    .json();
    common::assert_legacy_result(&listed);
    assert_eq!(listed["result"]["tools"][0]["name"], "echo");
    let called = post(
        &server,
        &v,
        json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "still here" } } }),
    )
    .await
    .json();
    common::assert_legacy_result(&called);
    assert_eq!(called["result"]["content"][0]["text"], "still here");
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
    assert_conforms("JSONRPCErrorResponse", &discover.json());
}

#[tokio::test]
async fn a_modern_only_server_names_its_versions_to_legacy_clients() {
    let server = TestServer::start(server(false)).await;
    let reply = post(&server, &[], json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } })).await;
    assert_unsupported("initialize", &reply, "2025-11-25");
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
    assert_conforms("JSONRPCErrorResponse", &reply.json());
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
    assert_conforms("HeaderMismatchError", &reply.json());
    // A modern `initialize` is a removed method.
    let reply = common::Call::new("initialize", json!(9), json!({}))
        .send(&server)
        .await;
    assert_eq!((reply.status, reply.error_code()), (404, Some(-32601)));
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_conforms("MethodNotFoundError", &body["error"]);
}

#[tokio::test]
async fn a_request_with_neither_a_version_header_nor_meta_is_served_as_legacy() {
    let server = TestServer::start(server(true)).await;
    let listed = post(
        &server,
        &[],
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let body = listed.json();
    common::assert_legacy_result(&body);
    assert_eq!(body["result"]["tools"][0]["name"], "echo");
    // Served in the newest earlier revision, since the request names none.
    let called = post(&server, &[], call(2, "version")).await.json();
    common::assert_legacy_result(&called);
    assert_eq!(called["result"]["content"][0]["text"], "2025-11-25");
}

/// A legacy request needs no routing headers, but those it carries must name what runs: an
/// intermediary that routed or authorized on `Mcp-Name: version` must not see `bump` run.
#[tokio::test]
async fn routing_headers_a_legacy_request_carries_must_agree_with_its_body() {
    let server = TestServer::start(server(true)).await;
    let before = BUMPS.load(Ordering::SeqCst);
    for (label, headers) in [
        (
            "Mcp-Name of another tool",
            vec![("mcp-method", "tools/call"), ("mcp-name", "version")],
        ),
        (
            "Mcp-Method of another method",
            vec![("mcp-method", "tools/list")],
        ),
        ("Mcp-Name alone", vec![("mcp-name", "version")]),
    ] {
        let reply = post(&server, &headers, call(3, "bump")).await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (400, Some(-32020)),
            "{label}: {}",
            reply.text
        );
        assert_conforms("JSONRPCErrorResponse", &reply.json());
    }
    assert_eq!(BUMPS.load(Ordering::SeqCst), before, "nothing ran");
    let agreeing = post(
        &server,
        &[("mcp-method", "tools/call"), ("mcp-name", "bump")],
        call(4, "bump"),
    )
    .await;
    assert_eq!(agreeing.status, 200, "{}", agreeing.text);
    common::assert_legacy_result(&agreeing.json());
    assert_eq!(BUMPS.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn a_2025_06_18_client_is_answered_in_its_own_version() {
    let server = TestServer::start(server(true)).await;
    let initialized = post(&server, &[], json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } }))
    .await
    .json();
    common::assert_legacy_result(&initialized);
    assert_eq!(initialized["result"]["protocolVersion"], "2025-06-18");
    for version in ["2025-06-18", "2025-03-26"] {
        let reply = post(
            &server,
            &[("mcp-protocol-version", version)],
            call(1, "version"),
        )
        .await;
        assert_eq!(reply.status, 200, "{version}: {}", reply.text);
        let body = reply.json();
        common::assert_legacy_result(&body);
        assert_eq!(body["result"]["content"][0]["text"], version);
    }
}

#[tokio::test]
async fn a_modern_only_server_refuses_every_legacy_request_with_the_versions_it_serves() {
    let server = TestServer::start(server(false)).await;
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    let reply = post(
        &server,
        &[("mcp-protocol-version", "2025-11-25")],
        list.clone(),
    )
    .await;
    assert_unsupported("tools/list under a 2025-11-25 header", &reply, "2025-11-25");
    assert_eq!(reply.json()["id"], 1);
    let reply = post(&server, &[], list).await;
    assert_unsupported("tools/list naming no version", &reply, "unknown");
    let claimed = post(
        &server,
        &[],
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {
            "_meta": { "io.modelcontextprotocol/protocolVersion": "2025-06-18" } } }),
    )
    .await;
    assert_unsupported("a 2025-06-18 _meta claim", &claimed, "2025-06-18");
    // `initialize` names its version in its params, over any header.
    let init = post(&server, &[("mcp-protocol-version", "2025-11-25")], json!({ "jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } })).await;
    assert_unsupported("initialize for 2025-06-18", &init, "2025-06-18");
    // The modern era is still served.
    let served = common::Call::new("tools/list", json!(4), json!({}))
        .send(&server)
        .await
        .json();
    assert_conforms("ListToolsResultResponse", &served);
}

#[tokio::test]
async fn the_era_is_decided_by_the_meta_claim_then_by_the_header() {
    let server = TestServer::start(server(true)).await;
    let claim = |version: Value| {
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "version", "arguments": {},
            "_meta": { "io.modelcontextprotocol/protocolVersion": version,
                "io.modelcontextprotocol/clientCapabilities": {} } } })
    };
    // A legacy claim, alone or under a legacy header, is legacy.
    for headers in [vec![], vec![("mcp-protocol-version", "2025-06-18")]] {
        let reply = post(&server, &headers, claim(json!("2025-06-18"))).await;
        assert_eq!(reply.status, 200, "{headers:?}: {}", reply.text);
        common::assert_legacy_result(&reply.json());
    }
    // A modern claim under a legacy header stays modern, where the two disagree.
    let reply = post(
        &server,
        &[("mcp-protocol-version", "2025-11-25")],
        claim(json!("2026-07-28")),
    )
    .await;
    assert_eq!(
        (reply.status, reply.error_code()),
        (400, Some(-32020)),
        "{}",
        reply.text
    );
    assert_conforms("HeaderMismatchError", &reply.json());
    // A claim that is not a version string is a malformed modern request.
    let reply = post(&server, &[], claim(json!(5))).await;
    assert_eq!(
        (reply.status, reply.error_code()),
        (400, Some(-32602)),
        "{}",
        reply.text
    );
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_conforms("InvalidParamsError", &body["error"]);
    // Without a claim, `initialize` is legacy whatever the header says.
    let reply = post(&server, &[("mcp-protocol-version", "2026-07-28")], json!({ "jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } })).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    common::assert_legacy_result(&body);
    assert_eq!(body["result"]["protocolVersion"], "2025-06-18");
    // Without a claim, a header naming no served revision is a malformed modern request.
    let reply = post(
        &server,
        &[("mcp-protocol-version", "2024-11-05")],
        json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list" }),
    )
    .await;
    assert_eq!(
        (reply.status, reply.error_code()),
        (400, Some(-32602)),
        "{}",
        reply.text
    );
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_conforms("InvalidParamsError", &body["error"]);
    // The legacy era needs no routing headers, but one that is sent must agree with the body.
    let reply = post(
        &server,
        &[
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-name", "something-else"),
        ],
        call(4, "version"),
    )
    .await;
    assert_eq!(
        (reply.status, reply.error_code()),
        (400, Some(-32020)),
        "{}",
        reply.text
    );
    assert_conforms("JSONRPCErrorResponse", &reply.json());
}
