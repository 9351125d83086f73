//! End-to-end tests of the stateless 2026-07-28 HTTP core, over real HTTP on loopback.

mod common;

use common::tools::tool_set;
use common::{Call, TestServer, assert_conforms, assert_matches_schema};
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
        row(
            "Mcp-Name bad base64 padding",
            echo().header("mcp-name", "=?base64?SGVsbG8?="),
            400,
            -32020,
            tool_id.clone(),
        ),
        row(
            "Mcp-Name bad base64 alphabet",
            echo().header("mcp-name", "=?base64?SGVs!!!bG8=?="),
            400,
            -32020,
            tool_id.clone(),
        ),
        row(
            "Mcp-Name with raw non-ASCII bytes",
            echo().header("mcp-name", "éc\u{e9}ho"),
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

async fn list_all(url_for_page: impl Fn(usize) -> String, page_size: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut page = 0;
    loop {
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
        page += 1;
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return names,
        }
    }
}

fn paged_server(key: &[u8]) -> McpServer {
    McpServer::builder("e2e", "1")
        .tools(tool_set(5))
        .page_size(2)
        .cursor_key(key.to_vec())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_listing_started_on_one_replica_continues_on_another() {
    let a = TestServer::start(paged_server(b"shared-secret")).await;
    let b = TestServer::start(paged_server(b"shared-secret")).await;
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
    let a = TestServer::start(paged_server(b"key-a")).await;
    let other = TestServer::start(paged_server(b"key-b")).await;
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
    let response = common::client()
        .get(format!("http://{}/healthz", server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "ok");
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
    use mcp_tools::{BuildError, ToolSet};
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
}

/// A tool that takes a while, to observe shutdown draining it.
struct Slow;

impl mcp_tools::Tool for Slow {
    type Args = mcp_tools::NoArgs;
    type Output = &'static str;
    fn info(&self) -> mcp_tools::ToolInfo {
        mcp_tools::ToolInfo::new("slow", "Answers after 300 ms.")
    }
    async fn call(&self, _: mcp_tools::NoArgs, _: mcp_tools::Context) -> &'static str {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        "done"
    }
}

#[tokio::test]
async fn graceful_shutdown_drains_in_flight_requests() {
    let server = McpServer::builder("e2e", "1")
        .tools(mcp_tools::ToolSet::new().with(Slow))
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
        async move { Call::call_tool("slow", json!({})).send_to(&url).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    let reply = call.await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.result()["content"][0]["text"], "done");
    serving.await.unwrap().unwrap();
    // Once drained, the listener is closed.
    assert!(common::client().post(&url).send().await.is_err());
}

/// Answers with the caller's principal.
struct WhoAmI;

impl mcp_tools::Tool for WhoAmI {
    type Args = mcp_tools::NoArgs;
    type Output = String;
    fn info(&self) -> mcp_tools::ToolInfo {
        mcp_tools::ToolInfo::new("whoami", "Names the caller.")
    }
    async fn call(&self, _: mcp_tools::NoArgs, cx: mcp_tools::Context) -> String {
        format!("{:?}", cx.principal())
    }
}

#[tokio::test]
async fn every_request_is_authenticated_when_a_check_is_configured() {
    let server = McpServer::builder("e2e", "1")
        .tools(mcp_tools::ToolSet::new().with(WhoAmI))
        .authenticate(|headers| {
            match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some(token) if token.starts_with("Bearer ") => {
                    Ok(mcp_tools::Principal::subject(&token["Bearer ".len()..]))
                }
                _ => Err(mcp_tools::Unauthorized::new(
                    r#"Bearer resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp""#,
                    "A bearer token is required",
                )),
            }
        })
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let refused = Call::call_tool("whoami", json!({})).send(&server).await;
    assert_eq!(refused.status, 401);
    assert!(
        refused.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer resource_metadata=")
    );
    let alice = Call::call_tool("whoami", json!({}))
        .header("authorization", "Bearer alice")
        .send(&server)
        .await;
    assert_eq!(alice.result()["content"][0]["text"], "Subject(\"alice\")");
}
