//! End-to-end tests of the stateless 2026-07-28 HTTP core, over real HTTP on loopback.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::tools::tool_set;
use common::{Call, Reply, TestServer, VERSION, assert_conforms, assert_matches_schema, within};
use mcp_tools::McpServer;
use serde_json::{Value, json};

const BODY_LIMIT: usize = 16 * 1024;
const ALL_VERSIONS: [&str; 4] = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];

fn server() -> McpServer {
    McpServer::builder("e2e", "1.2.3")
        .instructions("Test server.")
        .tools(tool_set(0))
        .body_limit(BODY_LIMIT)
        .build()
        .unwrap()
}

/// One row of the error matrix: the request, and the status and code it must get.
struct Row {
    label: &'static str,
    call: Call,
    status: u16,
    code: Option<i64>,
    /// The id the error must echo (`None`: no id member).
    echoed_id: Option<Value>,
}

fn row(label: &'static str, call: Call, status: u16, code: i64, id: Option<Value>) -> Row {
    Row {
        label,
        call,
        status,
        code: Some(code),
        echoed_id: id,
    }
}

fn matrix() -> Vec<Row> {
    let id = Some(json!(1));
    let tool_id = Some(json!(7));
    let echo = || Call::call_tool("echo", json!({ "text": "hi" }));
    let removed = |method: &'static str| Call::new(method, json!(1), json!({}));
    vec![
        row(
            "malformed JSON",
            Call::discover().raw("{\"jsonrpc\": \"2.0\", "),
            400,
            -32700,
            None,
        ),
        row(
            "batch array",
            Call::discover().raw(format!("[{}]", Call::discover().body)),
            400,
            -32600,
            None,
        ),
        row(
            "JSON that is not an object",
            Call::discover().raw("42"),
            400,
            -32600,
            None,
        ),
        row(
            "jsonrpc is not \"2.0\"",
            Call::discover().body(|b| b["jsonrpc"] = json!("1.0")),
            400,
            -32600,
            id.clone(),
        ),
        row(
            "null id",
            Call::discover().body(|b| b["id"] = Value::Null),
            400,
            -32600,
            None,
        ),
        row(
            "fractional id",
            Call::discover().body(|b| b["id"] = json!(1.5)),
            400,
            -32600,
            None,
        ),
        row(
            "method is not a string",
            Call::discover().body(|b| b["method"] = json!(3)),
            400,
            -32600,
            id.clone(),
        ),
        row(
            "a response object",
            Call::discover().raw(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            400,
            -32600,
            id.clone(),
        ),
        row(
            "Content-Type text/plain",
            Call::discover().header("content-type", "text/plain"),
            415,
            -32600,
            None,
        ),
        row(
            "Content-Type missing",
            Call::discover().without_header("content-type"),
            415,
            -32600,
            None,
        ),
        row(
            "body over the limit",
            echo().body(|b| b["params"]["arguments"]["text"] = json!("x".repeat(BODY_LIMIT))),
            413,
            -32600,
            None,
        ),
        row(
            "no params",
            Call::discover().body(|b| {
                b.as_object_mut().unwrap().remove("params");
            }),
            400,
            -32602,
            id.clone(),
        ),
        row(
            "params without _meta",
            Call::discover().body(|b| b["params"] = json!({})),
            400,
            -32602,
            id.clone(),
        ),
        row(
            "params not an object",
            Call::discover().body(|b| b["params"] = json!([1])),
            400,
            -32602,
            id.clone(),
        ),
        row(
            "_meta without protocolVersion",
            Call::discover().without_meta("io.modelcontextprotocol/protocolVersion"),
            400,
            -32602,
            id.clone(),
        ),
        row(
            "_meta without clientCapabilities",
            Call::discover().without_meta("io.modelcontextprotocol/clientCapabilities"),
            400,
            -32602,
            id.clone(),
        ),
        row(
            "clientCapabilities not an object",
            Call::discover().capabilities(json!("all")),
            400,
            -32602,
            id.clone(),
        ),
        row(
            "unknown logLevel",
            Call::discover().meta("io.modelcontextprotocol/logLevel", json!("loud")),
            400,
            -32602,
            id.clone(),
        ),
        row(
            "MCP-Protocol-Version missing",
            Call::discover().without_header("mcp-protocol-version"),
            400,
            -32020,
            id.clone(),
        ),
        row(
            "MCP-Protocol-Version differs from _meta",
            Call::discover().meta("io.modelcontextprotocol/protocolVersion", json!("v999.0.0")),
            400,
            -32020,
            id.clone(),
        ),
        row(
            "unsupported version (header and body)",
            Call::discover()
                .header("mcp-protocol-version", "v999.0.0")
                .meta("io.modelcontextprotocol/protocolVersion", json!("v999.0.0")),
            400,
            -32022,
            id.clone(),
        ),
        row(
            "Mcp-Method missing",
            Call::discover().without_header("mcp-method"),
            400,
            -32020,
            id.clone(),
        ),
        row(
            "Mcp-Method differs",
            Call::discover().header("mcp-method", "tools/list"),
            400,
            -32020,
            id.clone(),
        ),
        row(
            "Mcp-Method in other case",
            Call::discover().header("mcp-method", "SERVER/DISCOVER"),
            400,
            -32020,
            id.clone(),
        ),
        row(
            "Mcp-Name missing on tools/call",
            echo().without_header("mcp-name"),
            400,
            -32020,
            tool_id.clone(),
        ),
        row(
            "Mcp-Name differs",
            echo().header("mcp-name", "wrong_tool_name"),
            400,
            -32020,
            tool_id.clone(),
        ),
        // The two Base64 rows carry `echo`, the body's name, so only a strict decoder refuses
        // them: a lenient one would find a match. (Raw non-ASCII bytes need a target whose real
        // name is non-ASCII: `a_non_ascii_name_is_accepted_only_in_base64_form`.)
        row(
            "Mcp-Name base64 of the right name without its padding",
            echo().header("mcp-name", "=?base64?ZWNobw?="),
            400,
            -32020,
            tool_id.clone(),
        ),
        row(
            "Mcp-Name base64 of the right name with a character outside the alphabet",
            echo().header("mcp-name", "=?base64?ZWNo!bw==?="),
            400,
            -32020,
            tool_id.clone(),
        ),
        row(
            "initialize (removed)",
            removed("initialize"),
            404,
            -32601,
            id.clone(),
        ),
        row("ping (removed)", removed("ping"), 404, -32601, id.clone()),
        row(
            "logging/setLevel (removed)",
            removed("logging/setLevel"),
            404,
            -32601,
            id.clone(),
        ),
        row(
            "resources/subscribe (removed)",
            removed("resources/subscribe"),
            404,
            -32601,
            id.clone(),
        ),
        row(
            "resources/unsubscribe (removed)",
            removed("resources/unsubscribe"),
            404,
            -32601,
            id.clone(),
        ),
        row(
            "tasks/get (not served) without taskId",
            Call::new("tasks/get", json!(1), json!({})),
            404,
            -32601,
            id.clone(),
        ),
        row(
            "unknown/method",
            removed("unknown/method"),
            404,
            -32601,
            id.clone(),
        ),
        row(
            "prompts/list (not advertised)",
            removed("prompts/list"),
            404,
            -32601,
            id.clone(),
        ),
        row(
            "GET on the endpoint",
            Call::discover().http_method(reqwest::Method::GET),
            405,
            -32600,
            None,
        ),
        row(
            "DELETE on the endpoint",
            Call::discover().http_method(reqwest::Method::DELETE),
            405,
            -32600,
            None,
        ),
        row(
            "Host evil.example.com",
            Call::discover().header("host", "evil.example.com"),
            403,
            -32600,
            None,
        ),
        row(
            "Origin http://evil.example.com",
            Call::discover().header("origin", "http://evil.example.com"),
            403,
            -32600,
            None,
        ),
        row(
            "unknown tool",
            Call::call_tool("nope", json!({})),
            200,
            -32602,
            tool_id.clone(),
        ),
        row(
            "tools/call name not a string",
            echo().body(|b| b["params"]["name"] = json!(5)),
            200,
            -32602,
            tool_id.clone(),
        ),
        row(
            "tools/call arguments not an object",
            echo().body(|b| b["params"]["arguments"] = json!([1])),
            200,
            -32602,
            tool_id.clone(),
        ),
        row(
            "tools/list bogus cursor",
            Call::new("tools/list", json!(1), json!({ "cursor": "bogus" })),
            200,
            -32602,
            id.clone(),
        ),
        row(
            "tools/list cursor not a string",
            Call::new("tools/list", json!(1), json!({ "cursor": 3 })),
            200,
            -32602,
            id.clone(),
        ),
        row(
            "string id echoed",
            Call::discover()
                .body(|b| b["id"] = json!("abc"))
                .without_header("mcp-method"),
            400,
            -32020,
            Some(json!("abc")),
        ),
    ]
}

#[tokio::test]
async fn error_matrix() {
    let server = TestServer::start(server()).await;
    let mut table = vec![
        "| request | HTTP status | JSON-RPC code |".to_owned(),
        "|---|---|---|".to_owned(),
    ];
    for Row {
        label,
        call,
        status,
        code,
        echoed_id,
    } in matrix()
    {
        let reply = call.send(&server).await;
        assert_eq!(reply.status, status, "{label}: {}", reply.text);
        assert_eq!(
            reply
                .headers
                .get("content-type")
                .map(|v| v.to_str().unwrap()),
            Some("application/json"),
            "{label}"
        );
        let body = reply.json();
        assert_eq!(reply.error_code(), code, "{label}: {body}");
        assert_eq!(
            body.get("id").cloned(),
            echoed_id,
            "{label}: id not echoed: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{label}"
        );
        assert_conforms("JSONRPCErrorResponse", &body);
        if status == 405 {
            assert_eq!(reply.headers.get("allow").unwrap(), "POST", "{label}");
        }
        table.push(format!("| {label} | {status} | {} |", code.unwrap()));
    }
    println!("{}", table.join("\n"));
}

#[tokio::test]
async fn unsupported_version_names_what_is_supported() {
    let server = TestServer::start(server()).await;
    let reply = Call::discover()
        .header("mcp-protocol-version", "v999.0.0")
        .meta("io.modelcontextprotocol/protocolVersion", json!("v999.0.0"))
        .send(&server)
        .await;
    let body = reply.json();
    assert_eq!(
        body["error"]["data"],
        json!({ "supported": ALL_VERSIONS, "requested": "v999.0.0" })
    );
    assert_conforms("UnsupportedProtocolVersionError", &body);
    let discover = Call::discover().send(&server).await.result();
    for version in body["error"]["data"]["supported"].as_array().unwrap() {
        assert!(
            discover["supportedVersions"]
                .as_array()
                .unwrap()
                .contains(version)
        );
    }
}

#[tokio::test]
async fn accepted_variants_of_valid_requests() {
    let server = TestServer::start(server()).await;
    let echo = || Call::call_tool("echo", json!({ "text": "hi" }));
    let accepted = [
        (
            "no clientInfo",
            Call::discover().without_meta("io.modelcontextprotocol/clientInfo"),
        ),
        (
            "unknown _meta keys and a progressToken",
            Call::discover()
                .meta("com.example/trace", json!({"x": 1}))
                .meta("progressToken", json!("p-1")),
        ),
        (
            "lower-case header names",
            Call::discover()
                .without_header("mcp-method")
                .header("mcp-method", "server/discover"),
        ),
        (
            "upper-case header names",
            Call::discover()
                .without_header("mcp-method")
                .header("MCP-METHOD", "server/discover"),
        ),
        (
            "Mcp-Name with surrounding spaces",
            echo().header("mcp-name", "  echo  "),
        ),
        (
            "Mcp-Name as base64",
            echo().header("mcp-name", "=?base64?ZWNobw==?="),
        ),
        (
            "Mcp-Session-Id is ignored",
            Call::discover().header("mcp-session-id", "abc"),
        ),
        (
            "Last-Event-ID is ignored",
            Call::discover().header("last-event-id", "5"),
        ),
        (
            "Content-Type with charset",
            Call::discover().header("content-type", "application/json; charset=utf-8"),
        ),
        (
            "Host localhost",
            Call::discover().header("host", "localhost:1234"),
        ),
        ("Host [::1]", Call::discover().header("host", "[::1]:1234")),
        (
            "Origin localhost",
            Call::discover().header("origin", "http://localhost:3000"),
        ),
    ];
    for (label, call) in accepted {
        let reply = call.send(&server).await;
        assert_eq!(reply.status, 200, "{label}: {}", reply.text);
        assert!(reply.headers.get("mcp-session-id").is_none(), "{label}");
        let body = reply.json();
        assert!(body.get("result").is_some(), "{label}: {body}");
        assert_conforms("JSONRPCResultResponse", &body);
    }
}

#[tokio::test]
async fn notifications_get_202_without_body() {
    let server = TestServer::start(server()).await;
    let reply = Call::discover()
        .body(|b| {
            b.as_object_mut().unwrap().remove("id");
            b["method"] = json!("notifications/cancelled");
        })
        .header("mcp-method", "notifications/cancelled")
        .send(&server)
        .await;
    assert_eq!(reply.status, 202);
    assert_eq!(reply.text, "");
}

#[tokio::test]
async fn discover_advertises_versions_capabilities_and_server_info() {
    let server = TestServer::start(server()).await;
    let body = Call::discover().send(&server).await.json();
    assert_conforms("DiscoverResultResponse", &body);
    let result = &body["result"];
    assert_eq!(body["id"], json!(1));
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!(ALL_VERSIONS));
    assert_eq!(
        result["capabilities"],
        json!({ "tools": { "listChanged": true } })
    );
    assert_eq!(result["instructions"], "Test server.");
    assert_eq!(result["ttlMs"], 300_000);
    assert_eq!(result["cacheScope"], "public");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"],
        json!({ "name": "e2e", "version": "1.2.3" })
    );
}

#[tokio::test]
async fn a_server_without_tools_does_not_serve_tool_methods() {
    let bare = McpServer::builder("bare", "0").build().unwrap();
    let server = TestServer::start(bare).await;
    let discover = Call::discover().send(&server).await.result();
    assert_eq!(discover["capabilities"], json!({}));
    let reply = Call::new("tools/list", json!(1), json!({}))
        .send(&server)
        .await;
    assert_eq!((reply.status, reply.error_code()), (404, Some(-32601)));
}

/// More pages than any listing in these tests has: a server that keeps answering `nextCursor`
/// fails the test instead of hanging it.
const MAX_PAGES: usize = 100;

async fn list_all(url_for_page: impl Fn(usize) -> String, page_size: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let body = Call::new("tools/list", json!(page), params)
            .send_to(&url_for_page(page))
            .await
            .json();
        assert_conforms("ListToolsResultResponse", &body);
        let result = &body["result"];
        assert_eq!(result["cacheScope"], "public");
        assert!(result["ttlMs"].is_u64());
        let tools = result["tools"].as_array().unwrap();
        assert!(tools.len() <= page_size);
        names.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return names,
        }
    }
    panic!("the listing did not end within {MAX_PAGES} pages: {names:?}");
}

fn paged_server(key: &[u8]) -> McpServer {
    McpServer::builder("e2e", "1")
        .tools(tool_set(5))
        .page_size(2)
        .signing_key(key.to_vec())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_listing_started_on_one_replica_continues_on_another() {
    let a = TestServer::start(paged_server(b"shared-secret, padded to thirty-two bytes")).await;
    let b = TestServer::start(paged_server(b"shared-secret, padded to thirty-two bytes")).await;
    // Alternate replicas page by page: only the cursor carries the position.
    let names = list_all(|page| if page % 2 == 0 { a.url() } else { b.url() }, 2).await;
    let expected = [
        "echo",
        "math/divide",
        "tool_00",
        "tool_01",
        "tool_02",
        "tool_03",
        "tool_04",
    ];
    assert_eq!(names, expected);
}

#[tokio::test]
async fn cursors_signed_by_another_key_or_altered_are_refused() {
    let a = TestServer::start(paged_server(b"key-a, padded to thirty-two bytes")).await;
    let other = TestServer::start(paged_server(b"key-b, padded to thirty-two bytes")).await;
    let first = Call::new("tools/list", json!(1), json!({}))
        .send(&a)
        .await
        .result();
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    let foreign = Call::new("tools/list", json!(2), json!({ "cursor": cursor }))
        .send(&other)
        .await;
    assert_eq!((foreign.status, foreign.error_code()), (200, Some(-32602)));
    assert!(foreign.text.contains("Invalid cursor"), "{}", foreign.text);
    let mut tampered = cursor.into_bytes();
    tampered[2] = if tampered[2] == b'A' { b'B' } else { b'A' };
    let altered = Call::new(
        "tools/list",
        json!(3),
        json!({ "cursor": String::from_utf8(tampered).unwrap() }),
    )
    .send(&a)
    .await;
    assert_eq!(altered.error_code(), Some(-32602));
    let empty = Call::new("tools/list", json!(4), json!({ "cursor": "" }))
        .send(&a)
        .await;
    assert_eq!(empty.error_code(), Some(-32602));
}

#[tokio::test]
async fn tools_are_listed_with_schemas_and_annotations() {
    let server = TestServer::start(server()).await;
    let body = Call::new("tools/list", json!(1), json!({}))
        .send(&server)
        .await
        .json();
    assert_conforms("ListToolsResultResponse", &body);
    let tools = body["result"]["tools"].as_array().unwrap();
    assert!(body["result"].get("nextCursor").is_none());
    let echo = &tools[0];
    assert_eq!(echo["name"], "echo");
    assert_eq!(echo["annotations"], json!({ "readOnlyHint": true }));
    assert_eq!(echo["inputSchema"]["type"], "object");
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
    assert_eq!(
        echo["inputSchema"]["properties"]["text"]["description"],
        "Text to return."
    );
    assert!(echo.get("outputSchema").is_none());
    let divide = &tools[1];
    assert_eq!(divide["title"], "Divide");
    assert!(divide["outputSchema"].is_object());
}

#[tokio::test]
async fn tool_results_and_structured_output() {
    let server = TestServer::start(server()).await;
    let listing = Call::new("tools/list", json!(1), json!({}))
        .send(&server)
        .await
        .result();
    let output_schema = listing["tools"][1]["outputSchema"].clone();

    let body = Call::call_tool("echo", json!({ "text": "héllo" }))
        .send(&server)
        .await
        .json();
    assert_conforms("CallToolResultResponse", &body);
    assert_eq!(body["id"], 7);
    assert_eq!(
        body["result"]["content"],
        json!([{ "type": "text", "text": "héllo" }])
    );
    assert!(body["result"].get("isError").is_none());
    assert_eq!(
        body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "e2e"
    );

    let body = Call::call_tool("math/divide", json!({ "a": 17, "b": 5 }))
        .send(&server)
        .await
        .json();
    assert_conforms("CallToolResultResponse", &body);
    let result = &body["result"];
    assert_eq!(
        result["structuredContent"],
        json!({ "quotient": 3, "remainder": 2 })
    );
    let mirror: Value =
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(mirror, result["structuredContent"]);
    assert_matches_schema(&output_schema, &result["structuredContent"]);

    // A handler error is an isError result with a stable code, still matching the schema.
    let body = Call::call_tool("math/divide", json!({ "a": 1, "b": 0 }))
        .send(&server)
        .await
        .json();
    assert_conforms("CallToolResultResponse", &body);
    let result = &body["result"];
    assert_eq!(result["isError"], true);
    assert_eq!(result["structuredContent"]["code"], "DIVISION_BY_ZERO");
    assert_eq!(result["content"][0]["text"], "b must not be zero");
    assert_matches_schema(&output_schema, &result["structuredContent"]);
}

#[tokio::test]
async fn invalid_arguments_come_back_as_tool_errors_naming_the_field() {
    let server = TestServer::start(server()).await;
    let listing = Call::new("tools/list", json!(1), json!({}))
        .send(&server)
        .await
        .result();
    let output_schema = listing["tools"][1]["outputSchema"].clone();
    let cases = [
        (json!({ "a": "ten", "b": 2 }), "/a"),
        (json!({ "a": 10 }), "b"),
        (json!({ "a": 1, "b": 2, "note": 5 }), "/note"),
    ];
    for (arguments, needle) in cases {
        let reply = Call::call_tool("math/divide", arguments.clone())
            .send(&server)
            .await;
        assert_eq!(reply.status, 200);
        let body = reply.json();
        assert_conforms("CallToolResultResponse", &body);
        let result = &body["result"];
        assert_eq!(result["isError"], true, "{arguments}");
        assert_eq!(result["structuredContent"]["code"], "INVALID_ARGUMENTS");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(needle), "{arguments}: {text}");
        assert_matches_schema(&output_schema, &result["structuredContent"]);
    }
    // Missing `arguments` is the same as `{}`.
    let body = Call::call_tool("echo", json!({}))
        .body(|b| {
            b["params"].as_object_mut().unwrap().remove("arguments");
        })
        .send(&server)
        .await
        .json();
    assert_eq!(body["result"]["isError"], true);
    assert!(
        body["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("text")
    );
}

#[tokio::test]
async fn healthz_is_plain_and_separate() {
    let server = TestServer::start(server()).await;
    let health = server.healthz().await;
    assert_eq!((health.status, health.text.as_str()), (200, "ok"));
}

#[tokio::test]
async fn the_router_nests_under_any_path() {
    let app = axum::Router::new().nest("/api/v1", server().router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let reply = Call::discover()
        .send_to(&format!("http://{addr}/api/v1/mcp"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

#[tokio::test]
async fn allowed_hosts_replace_the_loopback_default() {
    let server = McpServer::builder("e2e", "1")
        .allowed_hosts(["mcp.example.com"])
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let ok = Call::discover()
        .header("host", "mcp.example.com")
        .send(&server)
        .await;
    assert_eq!(ok.status, 200);
    let refused = Call::discover().send(&server).await;
    assert_eq!(refused.status, 403);
}

#[test]
fn invalid_configurations_are_refused_with_a_reason() {
    use mcp_tools::BuildError;
    use mcp_tools::tools::ToolSet;
    let duplicate = McpServer::builder("x", "1")
        .tools(
            ToolSet::new()
                .with(common::tools::Echo)
                .with(common::tools::Echo),
        )
        .build();
    assert!(matches!(duplicate, Err(BuildError::DuplicateTool(name)) if name == "echo"));
    let bad_name = McpServer::builder("x", "1")
        .tools(ToolSet::new().with(common::tools::Named("has space")))
        .build();
    assert!(
        matches!(bad_name, Err(BuildError::InvalidToolName(_))),
        "{:?}",
        bad_name.err()
    );
    assert!(matches!(
        McpServer::builder("x", "1").page_size(0).build(),
        Err(BuildError::InvalidSetting(_))
    ));
    assert!(matches!(
        McpServer::builder("x", "1").max_connections(0).build(),
        Err(BuildError::InvalidSetting(_))
    ));
    assert!(matches!(
        McpServer::builder("x", "1")
            .header_read_timeout(std::time::Duration::ZERO)
            .build(),
        Err(BuildError::InvalidSetting(_))
    ));
}

/// A tool that says when it has started and then holds its call until the test releases it, so
/// the test knows a request is in flight without guessing how long anything takes.
struct Held {
    started: tokio::sync::mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Notify>,
}

impl mcp_tools::tools::Tool for Held {
    type Args = mcp_tools::tools::NoArgs;
    type Output = &'static str;
    fn info(&self) -> mcp_tools::tools::ToolInfo {
        mcp_tools::tools::ToolInfo::new("held", "Answers once the test releases it.")
    }
    async fn call(&self, _: mcp_tools::tools::NoArgs, _: mcp_tools::Context) -> &'static str {
        let _ = self.started.send(());
        self.release.notified().await;
        "done"
    }
}

/// A server on a loopback port whose `held` tool has a call in flight: sent, and started.
struct InFlight {
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    call: tokio::task::JoinHandle<Result<Reply, reqwest::Error>>,
    release: Arc<tokio::sync::Notify>,
}

async fn held_call_in_flight(builder: mcp_tools::McpServerBuilder) -> InFlight {
    let (started, mut has_started) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let server = builder
        .tools(mcp_tools::tools::ToolSet::new().with(Held {
            started,
            release: release.clone(),
        }))
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_listener(listener, async {
        let _ = stopped.await;
    }));
    let call = tokio::spawn({
        let url = url.clone();
        async move { Call::call_tool("held", json!({})).try_send_to(&url).await }
    });
    within("the held tool to start", has_started.recv())
        .await
        .expect("the tool signals its start");
    InFlight {
        url,
        stop,
        serving,
        call,
        release,
    }
}

#[tokio::test]
async fn graceful_shutdown_drains_in_flight_requests() {
    let InFlight {
        url,
        stop,
        serving,
        call,
        release,
    } = held_call_in_flight(McpServer::builder("e2e", "1")).await;
    stop.send(()).unwrap();
    assert!(!serving.is_finished(), "the server stopped at once");
    // Shutdown has taken effect once new connections are turned away; until then a probe is
    // simply served.
    within("new connections to be refused after shutdown", async {
        for _ in 0..1000 {
            let probe = common::client().post(&url).send().await;
            if probe.is_err() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the server kept accepting connections after shutdown was requested");
    })
    .await;
    assert!(
        !serving.is_finished(),
        "the server finished while a call was still in flight"
    );
    assert!(!call.is_finished(), "the held call was answered early");
    release.notify_one();
    let reply = within("the held call to be answered", call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    assert_conforms("CallToolResultResponse", &body);
    assert_eq!(body["result"]["content"][0]["text"], "done");
    within("the server to finish draining", serving)
        .await
        .unwrap()
        .unwrap();
    // Once drained, the listener is closed.
    let after = within(
        "a request after the drain",
        common::client().post(&url).send(),
    )
    .await;
    assert!(after.is_err(), "served after the drain: {after:?}");
}

/// A call that never ends cannot hold a shutdown past the drain timeout: its connection is
/// closed, its caller sees the connection end, and the server returns. Zero closes it at once.
#[tokio::test]
async fn a_call_outliving_the_drain_timeout_is_cut_off_and_the_server_stops() {
    for drain in [Duration::from_millis(200), Duration::ZERO] {
        // The call is never released.
        let in_flight =
            held_call_in_flight(McpServer::builder("e2e", "1").drain_timeout(drain)).await;
        let (stop, serving, call) = (in_flight.stop, in_flight.serving, in_flight.call);
        stop.send(()).unwrap();
        // Far below the default drain (20 s): a server that ignored the setting would not stop
        // in time.
        common::within_for(
            Duration::from_secs(5),
            "the server to stop once the drain times out",
            serving,
        )
        .await
        .unwrap()
        .unwrap();
        let cut = within("the held call's connection to close", call)
            .await
            .unwrap();
        assert!(
            cut.is_err(),
            "a call cut off by a {drain:?} drain was answered: {cut:?}"
        );
    }
}

/// A drain timeout too long to add to the clock means no bound: the shutdown waits for the call
/// and answers it, rather than failing.
#[tokio::test]
async fn an_unbounded_drain_timeout_waits_for_the_call() {
    let in_flight =
        held_call_in_flight(McpServer::builder("e2e", "1").drain_timeout(Duration::MAX)).await;
    in_flight.stop.send(()).unwrap();
    assert!(
        !in_flight.serving.is_finished(),
        "the server stopped with a call in flight"
    );
    in_flight.release.notify_one();
    let reply = within("the held call to be answered", in_flight.call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text);
    within("the server to finish draining", in_flight.serving)
        .await
        .unwrap()
        .unwrap();
}

/// Answers with the caller's principal, counting its runs.
struct WhoAmI {
    runs: Arc<AtomicUsize>,
}

impl mcp_tools::tools::Tool for WhoAmI {
    type Args = mcp_tools::tools::NoArgs;
    type Output = String;
    fn info(&self) -> mcp_tools::tools::ToolInfo {
        mcp_tools::tools::ToolInfo::new("whoami", "Names the caller.")
    }
    async fn call(&self, _: mcp_tools::tools::NoArgs, cx: mcp_tools::Context) -> String {
        self.runs.fetch_add(1, Ordering::SeqCst);
        format!("{:?}", cx.principal())
    }
}

/// The check the authentication tests configure: `alice` is served, `reader` is known but lacks
/// the scope, anyone else is asked for a token.
fn authenticated_server(runs: Arc<AtomicUsize>) -> McpServer {
    McpServer::builder("e2e", "1")
        .tools(mcp_tools::tools::ToolSet::new().with(WhoAmI { runs }))
        .body_limit(1024)
        .authenticate(
            |headers| match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some("Bearer reader") => Err(mcp_tools::auth::Unauthorized::insufficient_scope(
                    SCOPE_CHALLENGE,
                    "The token lacks the mcp:tools scope",
                )),
                Some(token) if token.starts_with("Bearer ") => Ok(
                    mcp_tools::auth::Principal::subject(&token["Bearer ".len()..]),
                ),
                _ => Err(mcp_tools::auth::Unauthorized::new(
                    TOKEN_CHALLENGE,
                    "A bearer token is required",
                )),
            },
        )
        .build()
        .unwrap()
}

const TOKEN_CHALLENGE: &str =
    r#"Bearer resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp""#;
const SCOPE_CHALLENGE: &str = r#"Bearer error="insufficient_scope", scope="mcp:tools""#;

/// Asserts `reply` is an authentication refusal with `status`, `challenge` and `message`.
fn assert_refused(label: &str, reply: &common::Reply, status: u16, challenge: &str, message: &str) {
    assert_eq!(reply.status, status, "{label}: {}", reply.text);
    assert_eq!(
        reply
            .headers
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap()),
        Some(challenge),
        "{label}"
    );
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_eq!(body["error"]["code"], -32600, "{label}: {body}");
    assert_eq!(body["error"]["message"], message, "{label}");
}

#[tokio::test]
async fn every_request_is_authenticated_when_a_check_is_configured() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = TestServer::start(authenticated_server(runs.clone())).await;
    let requests = [
        ("server/discover", Call::discover()),
        ("tools/list", Call::new("tools/list", json!(1), json!({}))),
        ("tools/call", Call::call_tool("whoami", json!({}))),
    ];
    for (label, call) in &requests {
        let refused = call.send(&server).await;
        assert_refused(
            label,
            &refused,
            401,
            TOKEN_CHALLENGE,
            "A bearer token is required",
        );
        let served = call
            .clone()
            .header("authorization", "Bearer alice")
            .send(&server)
            .await;
        assert_eq!(served.status, 200, "{label}: {}", served.text);
        assert_conforms("JSONRPCResultResponse", &served.json());
    }
    // Only the authenticated call ran the tool, and it saw the caller.
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let alice = Call::call_tool("whoami", json!({}))
        .header("authorization", "Bearer alice")
        .send(&server)
        .await
        .json();
    assert_conforms("CallToolResultResponse", &alice);
    assert_eq!(alice["result"]["content"][0]["text"], "Subject(\"alice\")");
    // Health checks come from load balancers without credentials: `/healthz` is not
    // authenticated.
    let health = server.healthz().await;
    assert_eq!((health.status, health.text.as_str()), (200, "ok"));
    assert!(health.headers.get("www-authenticate").is_none());
}

#[tokio::test]
async fn credentials_without_the_scope_are_refused_with_403_and_a_challenge() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = TestServer::start(authenticated_server(runs.clone())).await;
    let reply = Call::call_tool("whoami", json!({}))
        .header("authorization", "Bearer reader")
        .send(&server)
        .await;
    assert_refused(
        "insufficient scope",
        &reply,
        403,
        SCOPE_CHALLENGE,
        "The token lacks the mcp:tools scope",
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the refused call ran");
}

#[tokio::test]
async fn authentication_is_checked_after_the_host_and_before_the_content() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = TestServer::start(authenticated_server(runs.clone())).await;
    let refused = [
        (
            "wrong Content-Type and a malformed body",
            Call::call_tool("whoami", json!({}))
                .header("content-type", "text/plain")
                .raw("{\"jsonrpc\": "),
        ),
        (
            "a body over the limit",
            Call::call_tool("whoami", json!({})).raw(vec![b' '; 4096]),
        ),
        ("a batch", Call::call_tool("whoami", json!({})).raw("[]")),
    ];
    for (label, call) in refused {
        let reply = call.send(&server).await;
        assert_refused(
            label,
            &reply,
            401,
            TOKEN_CHALLENGE,
            "A bearer token is required",
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a refused request ran the tool"
    );
    // A foreign Host is refused before credentials are asked for, and so is a GET.
    let foreign = Call::discover()
        .header("host", "evil.example.com")
        .send(&server)
        .await;
    assert_eq!(foreign.status, 403, "{}", foreign.text);
    assert!(foreign.headers.get("www-authenticate").is_none());
    assert_conforms("JSONRPCErrorResponse", &foreign.json());
    let get = Call::discover()
        .http_method(reqwest::Method::GET)
        .send(&server)
        .await;
    assert_eq!(get.status, 405, "{}", get.text);
    assert!(get.headers.get("www-authenticate").is_none());
    assert_conforms("JSONRPCErrorResponse", &get.json());
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct RegionArgs {
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

/// A tool whose `region` argument is mirrored in `Mcp-Param-Region`.
struct Regional;

impl mcp_tools::tools::Tool for Regional {
    type Args = RegionArgs;
    type Output = String;
    fn info(&self) -> mcp_tools::tools::ToolInfo {
        mcp_tools::tools::ToolInfo::new("regional", "Answers with its region.")
    }
    async fn call(&self, args: RegionArgs, _: mcp_tools::Context) -> String {
        args.region
    }
}

#[tokio::test]
async fn a_routing_header_sent_twice_is_refused_even_with_the_same_value() {
    let server = McpServer::builder("e2e", "1")
        .tools(tool_set(0).with(Regional))
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let regional = Call::call_tool("regional", json!({ "region": "eu-west" }))
        .header("mcp-param-region", "eu-west");
    let cases = [
        (Call::discover(), "MCP-Protocol-Version", VERSION, json!(1)),
        (Call::discover(), "Mcp-Method", "server/discover", json!(1)),
        (
            Call::call_tool("echo", json!({ "text": "hi" })),
            "Mcp-Name",
            "echo",
            json!(7),
        ),
        (regional, "Mcp-Param-Region", "eu-west", json!(7)),
    ];
    for (call, header, value, id) in cases {
        // Sent once, the same request is served: the repetition is the only defect.
        let once = call.send(&server).await;
        assert_eq!(once.status, 200, "{header} once: {}", once.text);
        assert_conforms("JSONRPCResultResponse", &once.json());

        let twice = call.also_header(header, value).send(&server).await;
        assert_eq!(twice.status, 400, "{header} twice: {}", twice.text);
        let body = twice.json();
        assert_conforms("JSONRPCErrorResponse", &body);
        assert_conforms("HeaderMismatchError", &body);
        assert_eq!(body["error"]["code"], -32020, "{header}: {body}");
        assert_eq!(body["id"], id, "{header}: id not echoed: {body}");
        let message = body["error"]["message"].as_str().unwrap().to_lowercase();
        assert!(
            message.contains(&header.to_lowercase()),
            "{header}: the message does not name the header: {message}"
        );
    }
}

#[tokio::test]
async fn a_non_ascii_name_is_accepted_only_in_base64_form() {
    let prompts = mcp_tools::prompts::PromptSet::new().with(mcp_tools::prompts::Prompt::new(
        "café",
        "Names the café.",
        |_, _| async {
            Ok::<_, mcp_tools::protocol::RpcError>(vec![mcp_tools::prompts::PromptMessage::user(
                mcp_tools::tools::Content::text("Welcome to the café"),
            )])
        },
    ));
    let server = McpServer::builder("e2e", "1")
        .prompts(prompts)
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let get = Call::new("prompts/get", json!(3), json!({ "name": "café" }));

    // Raw UTF-8 bytes of the right name: HTTP header values are visible ASCII.
    let raw = get.clone().header("mcp-name", "café").send(&server).await;
    assert_eq!(raw.status, 400, "{}", raw.text);
    let body = raw.json();
    assert_conforms("HeaderMismatchError", &body);
    assert_eq!(body["id"], 3);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mcp-name"),
        "{body}"
    );

    let encoded = get
        .header("mcp-name", "=?base64?Y2Fmw6k=?=")
        .send(&server)
        .await;
    assert_eq!(encoded.status, 200, "{}", encoded.text);
    let body = encoded.json();
    assert_conforms("GetPromptResultResponse", &body);
    assert_eq!(
        body["result"]["messages"][0]["content"]["text"],
        "Welcome to the café"
    );
}

/// How a raw request frames its body.
#[derive(Clone, Copy, Debug)]
enum Framing {
    /// `Content-Length`, as most clients send it.
    Declared,
    /// `Transfer-Encoding: chunked` in chunks of this many bytes, with no length announced.
    Chunked(usize),
    /// `Content-Length` of this many bytes, none of which are sent.
    Announced(u64),
}

/// Sends `call`'s headers with `body` over a fresh connection, written by hand so the framing
/// is exactly `framing`. The body is written while the answer is read: a server may answer (and
/// close) before it has read everything.
async fn post_framed(server: &TestServer, call: &Call, body: Vec<u8>, framing: Framing) -> Reply {
    use std::io::{Read, Write};
    let addr = server.addr;
    let mut head = format!("POST /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (name, value) in &call.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let wire = match framing {
        Framing::Declared => {
            head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            let mut wire = head.into_bytes();
            wire.extend_from_slice(&body);
            wire
        }
        Framing::Chunked(size) => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            let mut wire = head.into_bytes();
            for chunk in body.chunks(size) {
                wire.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                wire.extend_from_slice(chunk);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            wire
        }
        Framing::Announced(length) => {
            head.push_str(&format!("content-length: {length}\r\n\r\n"));
            head.into_bytes()
        }
    };
    let exchange = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(common::STEP)).unwrap();
        stream.set_write_timeout(Some(common::STEP)).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let writing = std::thread::spawn(move || {
            // An early answer closes the connection: a failed write is then expected.
            let _ = writer.write_all(&wire);
        });
        let mut received = Vec::new();
        let mut buffer = [0; 64 * 1024];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
                // A reset after the whole answer arrived ends the exchange like a close.
                Err(_) if !received.is_empty() => break,
                Err(error) => panic!("no answer: {error}"),
            }
        }
        let _ = stream.shutdown(std::net::Shutdown::Both);
        writing.join().unwrap();
        received
    });
    let received = within(&format!("a {framing:?} POST"), exchange)
        .await
        .unwrap();
    parse_response(&received)
}

/// Reads a whole HTTP/1.1 response with a `Content-Length` body.
fn parse_response(received: &[u8]) -> Reply {
    let end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {:?}", String::from_utf8_lossy(received)));
    let head = std::str::from_utf8(&received[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let mut headers = reqwest::header::HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        headers.append(
            reqwest::header::HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
            reqwest::header::HeaderValue::from_str(value.trim()).unwrap(),
        );
    }
    let length: usize = headers["content-length"].to_str().unwrap().parse().unwrap();
    let body = &received[end + 4..];
    assert_eq!(body.len(), length, "a truncated response body");
    Reply {
        status,
        headers,
        text: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// A valid `echo` call padded with trailing spaces (still the same JSON) to exactly `size` bytes.
fn padded_echo(size: usize) -> (Call, Vec<u8>) {
    let call = Call::call_tool("echo", json!({ "text": "padded" }));
    let mut body = serde_json::to_vec(&call.body).unwrap();
    assert!(body.len() <= size);
    body.resize(size, b' ');
    (call, body)
}

fn assert_too_large(label: &str, reply: &Reply) {
    assert_eq!(reply.status, 413, "{label}: {}", reply.text);
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_eq!(body["error"]["code"], -32600, "{label}: {body}");
    assert!(
        body.get("id").is_none(),
        "{label}: a refused body is never parsed, so there is no id to echo: {body}"
    );
}

fn assert_echoed(label: &str, reply: &Reply) {
    assert_eq!(reply.status, 200, "{label}: {}", reply.text);
    let body = reply.json();
    assert_conforms("CallToolResultResponse", &body);
    assert_eq!(body["result"]["content"][0]["text"], "padded", "{label}");
}

#[tokio::test]
async fn a_body_of_exactly_the_limit_is_served_and_one_byte_more_is_refused() {
    let server = TestServer::start(server()).await;
    for framing in [Framing::Declared, Framing::Chunked(1000)] {
        let (call, body) = padded_echo(BODY_LIMIT);
        let reply = post_framed(&server, &call, body, framing).await;
        assert_echoed(&format!("{framing:?}, exactly the limit"), &reply);

        let (call, body) = padded_echo(BODY_LIMIT + 1);
        let reply = post_framed(&server, &call, body, framing).await;
        assert_too_large(&format!("{framing:?}, one byte over"), &reply);
    }
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_refused_without_a_declared_length() {
    let server = TestServer::start(server()).await;
    // Several chunks, each well under the limit, that add up to twice the limit.
    let (call, body) = padded_echo(2 * BODY_LIMIT);
    let reply = post_framed(&server, &call, body, Framing::Chunked(BODY_LIMIT / 4)).await;
    assert_too_large("chunked, twice the limit", &reply);
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_before_the_body_is_sent() {
    let server = TestServer::start(server()).await;
    // Waiting for a gigabyte that never comes would time the request out: only the declared
    // length can answer it.
    let call = Call::call_tool("echo", json!({ "text": "padded" }));
    let reply = post_framed(&server, &call, Vec::new(), Framing::Announced(1 << 30)).await;
    assert_too_large("a gigabyte announced", &reply);
}

#[tokio::test]
async fn the_default_body_limit_is_4_mib() {
    // The number the README states, written out rather than read from the crate.
    const README_LIMIT: usize = 4 * 1024 * 1024;
    assert_eq!(mcp_tools::server::DEFAULT_BODY_LIMIT, README_LIMIT);
    let server = McpServer::builder("e2e", "1")
        .tools(tool_set(0))
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    for framing in [Framing::Declared, Framing::Chunked(256 * 1024)] {
        let (call, body) = padded_echo(README_LIMIT);
        let reply = post_framed(&server, &call, body, framing).await;
        assert_echoed(&format!("{framing:?}, 4 MiB"), &reply);

        let (call, body) = padded_echo(README_LIMIT + 1);
        let reply = post_framed(&server, &call, body, framing).await;
        assert_too_large(&format!("{framing:?}, 4 MiB + 1"), &reply);
    }
}
