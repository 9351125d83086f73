//! The practical floor of the peer benchmark: a bare axum 0.8 handler that does what any MCP
//! server must do for the benchmark's requests and nothing more. It reads the body, parses it as
//! a `serde_json::Value`, and answers `tools/call` (`add`, `echo`, `stats`, the fillers) and
//! `tools/list` with the same JSON-RPC results the frameworks write; `tools/list` is serialized
//! once at start-up, as the frameworks do. No header, protocol-version, `_meta` or schema
//! checks. With `--jwks`, the `peers-jwt` middleware checks the bearer token first.
//!
//! Usage: axum-floor --bind 127.0.0.1:PORT [--tools N] [--jwks FILE]

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use peers_common::{
    AUDIENCE, FILLER_ARG_DESCRIPTION, ISSUER, Options, filler_description, filler_name,
};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Serialize)]
struct Text<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallResult<'a, S: Serialize> {
    result_type: &'static str,
    content: [Text<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    structured_content: Option<S>,
    is_error: bool,
}

#[derive(Serialize)]
struct Success<'a, R: Serialize> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: R,
}

#[derive(Serialize)]
struct Sum {
    sum: i64,
}

#[derive(Serialize)]
struct Stats {
    count: u64,
    sum: i64,
    min: i64,
    max: i64,
    mean: f64,
}

/// The parts of an answer that never change.
struct Floor {
    /// `{"tools":[...]}`, serialized once.
    tools_list: Vec<u8>,
    fillers: usize,
}

/// A JSON-RPC answer to one message, or `None` for a notification.
fn answer(floor: &Floor, body: &[u8]) -> Option<(StatusCode, Vec<u8>)> {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Some(failure(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            -32700,
            "Parse error",
        ));
    };
    let id = request.get("id")?;
    let params = request.get("params");
    match request.get("method").and_then(Value::as_str) {
        Some("tools/list") => {
            let mut out = Vec::with_capacity(floor.tools_list.len() + 48);
            out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
            serde_json::to_writer(&mut out, id).expect("an id serializes");
            out.extend_from_slice(br#","result":"#);
            out.extend_from_slice(&floor.tools_list);
            out.push(b'}');
            Some((StatusCode::OK, out))
        }
        Some("tools/call") => {
            let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
            let arguments = params.and_then(|p| p.get("arguments"));
            Some(call(floor, id, name.unwrap_or_default(), arguments))
        }
        _ => Some(failure(StatusCode::OK, id, -32601, "Method not found")),
    }
}

fn call(floor: &Floor, id: &Value, name: &str, arguments: Option<&Value>) -> (StatusCode, Vec<u8>) {
    let arg = |key: &str| arguments.and_then(|a| a.get(key));
    let text_arg = || arg("text").and_then(Value::as_str);
    match name {
        "add" => {
            let (Some(a), Some(b)) = (
                arg("a").and_then(Value::as_i64),
                arg("b").and_then(Value::as_i64),
            ) else {
                return failure(StatusCode::OK, id, -32602, "Invalid params");
            };
            let Some(sum) = a.checked_add(b) else {
                return failure(StatusCode::OK, id, -32602, "integer overflow");
            };
            let sum = Sum { sum };
            let text = serde_json::to_string(&sum).expect("a sum serializes");
            success(id, &text, Some(sum))
        }
        "stats" => {
            let Some(values) = arg("values")
                .and_then(Value::as_array)
                .and_then(|v| v.iter().map(Value::as_i64).collect::<Option<Vec<i64>>>())
            else {
                return failure(StatusCode::OK, id, -32602, "Invalid params");
            };
            let Some(stats) = stats(&values) else {
                return failure(StatusCode::OK, id, -32602, "values must not be empty");
            };
            let text = serde_json::to_string(&stats).expect("stats serialize");
            success(id, &text, Some(stats))
        }
        "echo" => match text_arg() {
            Some(text) => success::<Sum>(id, text, None),
            None => failure(StatusCode::OK, id, -32602, "Invalid params"),
        },
        filler if is_filler(floor, filler) => match text_arg() {
            Some(text) => success::<Sum>(id, text, None),
            None => failure(StatusCode::OK, id, -32602, "Invalid params"),
        },
        _ => failure(StatusCode::OK, id, -32602, "Unknown tool"),
    }
}

fn is_filler(floor: &Floor, name: &str) -> bool {
    name.strip_prefix("filler_")
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n < floor.fillers && filler_name(n) == name)
}

fn stats(values: &[i64]) -> Option<Stats> {
    let min = *values.iter().min()?;
    let max = *values.iter().max()?;
    let sum = values.iter().try_fold(0i64, |s, v| s.checked_add(*v))?;
    Some(Stats {
        count: values.len() as u64,
        sum,
        min,
        max,
        mean: sum as f64 / values.len() as f64,
    })
}

fn success<S: Serialize>(id: &Value, text: &str, structured: Option<S>) -> (StatusCode, Vec<u8>) {
    let body = serde_json::to_vec(&Success {
        jsonrpc: "2.0",
        id,
        result: CallResult {
            result_type: "complete",
            content: [Text { kind: "text", text }],
            structured_content: structured,
            is_error: false,
        },
    })
    .expect("a result serializes");
    (StatusCode::OK, body)
}

fn failure(status: StatusCode, id: &Value, code: i64, message: &str) -> (StatusCode, Vec<u8>) {
    let body = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message }
    }))
    .expect("an error serializes");
    (status, body)
}

/// The `tools/list` result: the same names, descriptions and schemas as the frameworks publish.
fn tools_list(fillers: usize) -> Vec<u8> {
    let mut tools = vec![
        json!({
            "name": "add",
            "description": "Adds two integers.",
            "inputSchema": {"type": "object", "properties": {
                "a": {"type": "integer", "description": "The first addend."},
                "b": {"type": "integer", "description": "The second addend."}},
                "required": ["a", "b"]},
            "outputSchema": {"type": "object", "properties": {"sum": {"type": "integer"}},
                "required": ["sum"]},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "echo",
            "description": "Returns the given text unchanged.",
            "inputSchema": {"type": "object", "properties": {
                "text": {"type": "string", "description": "The text to send back."}},
                "required": ["text"]},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "stats",
            "description": "Count, sum, minimum, maximum and mean of a list of integers.",
            "inputSchema": {"type": "object", "properties": {
                "values": {"type": "array", "items": {"type": "integer"},
                    "description": "The integers, at least one."}},
                "required": ["values"]},
            "outputSchema": {"type": "object", "properties": {
                "count": {"type": "integer", "minimum": 0}, "sum": {"type": "integer"},
                "min": {"type": "integer"}, "max": {"type": "integer"}, "mean": {"type": "number"}},
                "required": ["count", "sum", "min", "max", "mean"]},
            "annotations": {"readOnlyHint": true}
        }),
    ];
    for i in 0..fillers {
        tools.push(json!({
            "name": filler_name(i),
            "description": filler_description(i),
            "inputSchema": {"type": "object", "properties": {
                "text": {"type": "string", "description": FILLER_ARG_DESCRIPTION}},
                "required": ["text"]},
            "annotations": {"readOnlyHint": true}
        }));
    }
    serde_json::to_vec(&json!({ "tools": tools })).expect("the tool list serializes")
}

async fn mcp(State(floor): State<Arc<Floor>>, body: Bytes) -> Response {
    match answer(&floor, &body) {
        Some((status, body)) => {
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        None => StatusCode::ACCEPTED.into_response(),
    }
}

fn main() -> std::io::Result<()> {
    let options = Options::from_args("axum-floor");
    let floor = Arc::new(Floor {
        tools_list: tools_list(options.fillers),
        fillers: options.fillers,
    });
    if options.stdio {
        eprintln!("axum-floor serves HTTP only: the stdio scenarios compare the MCP servers");
        std::process::exit(2);
    }
    let mut app = Router::new().route("/mcp", post(mcp)).with_state(floor);
    if let Some(jwks) = &options.jwks {
        let verifier = peers_jwt::Verifier::new(jwks, ISSUER, AUDIENCE)
            .map_err(|e| std::io::Error::other(format!("--jwks: {e}")))?;
        app = app.layer(axum::middleware::from_fn_with_state(
            Arc::new(verifier),
            peers_jwt::require_bearer,
        ));
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(options.bind).await?;
            eprintln!(
                "axum-floor listening on http://{}/mcp",
                listener.local_addr()?
            );
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
        })
}
