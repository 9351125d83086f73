//! Requests through `McpServer::router()` in-process (`tower::ServiceExt::oneshot`): the whole
//! HTTP request path, without a socket.

use axum::Router;
use axum::body::Body;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    /// The JSON-RPC message: the body, or the last event of an event stream.
    pub message: Option<Value>,
    /// The notifications an event stream carried before it.
    pub notifications: Vec<Value>,
    /// Whether the answer was an event stream.
    pub streamed: bool,
    /// The raw body, for messages.
    pub body: Vec<u8>,
}

/// A POST to `/mcp` with `headers` (name, raw value bytes; a header that is not a valid header
/// value is left out, as no HTTP client could send it) and `body`. `Host` and `Content-Type` are
/// set unless `headers` sets them.
pub fn request(headers: &[(HeaderName, Vec<u8>)], body: Vec<u8>) -> Request<Body> {
    let mut request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .body(Body::from(body))
        .expect("a request");
    let map = request.headers_mut();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            map.append(name.clone(), value);
        }
    }
    if !map.contains_key(http::header::HOST) {
        map.insert(http::header::HOST, HeaderValue::from_static("localhost"));
    }
    if !map.contains_key(http::header::CONTENT_TYPE) {
        map.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    request
}

/// Sends `request` and reads the whole answer. An event stream is read to its end, which every
/// stream but `subscriptions/listen` reaches; `open_streams` says whether to read those at all
/// (`false`: only the status and headers are checked, and the stream is dropped).
pub async fn send(router: &Router, request: Request<Body>, read_streams: bool) -> Answer {
    let response = router
        .clone()
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let streamed = content_type.starts_with("text/event-stream");
    if streamed && !read_streams {
        return Answer {
            status,
            message: None,
            notifications: Vec::new(),
            streamed,
            body: Vec::new(),
        };
    }
    let body = response
        .into_body()
        .collect()
        .await
        .expect("an in-process body reads")
        .to_bytes()
        .to_vec();
    if streamed {
        let text = String::from_utf8(body.clone()).expect("an event stream is UTF-8");
        let mut messages: Vec<Value> = Vec::new();
        for event in text.split("\n\n") {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|data| data.strip_prefix(' ').unwrap_or(data))
                .collect();
            if data.is_empty() {
                continue;
            }
            let joined = data.join("\n");
            let message = serde_json::from_str(&joined)
                .unwrap_or_else(|e| panic!("an event that is not JSON ({e}): {joined:?}"));
            messages.push(message);
        }
        let message = messages.pop();
        assert!(message.is_some(), "an event stream without a final message");
        return Answer {
            status,
            message,
            notifications: messages,
            streamed,
            body,
        };
    }
    let message = if body.is_empty() {
        None
    } else {
        assert!(
            content_type.starts_with("application/json"),
            "a body of type {content_type:?}: {:?}",
            String::from_utf8_lossy(&body)
        );
        Some(serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "a JSON body that is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&body)
            )
        }))
    };
    Answer {
        status,
        message,
        notifications: Vec::new(),
        streamed,
        body,
    }
}
