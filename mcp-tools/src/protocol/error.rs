use http::StatusCode;
use serde_json::{Value, json};

use crate::protocol::{RequestId, codes};

/// A JSON-RPC error answer, with the HTTP status it travels under.
///
/// Errors found before dispatch (envelope, `_meta`, headers, version) use the 4xx statuses the
/// protocol pins; errors raised while serving a valid request (an unknown tool, a bad cursor)
/// travel in-band with HTTP 200, as the reference implementations do.
#[derive(Debug, Clone, thiserror::Error)]
#[error("JSON-RPC error {code}: {message}")]
pub struct RpcError {
    code: i32,
    message: String,
    data: Option<Value>,
    status: StatusCode,
    id: Option<RequestId>,
    /// Response headers beyond the status, which few errors carry: boxed, so the error stays
    /// small on every `Result` of the request path.
    headers: Option<Box<ErrorHeaders>>,
}

#[derive(Debug, Clone, Default)]
struct ErrorHeaders {
    retry_after: Option<std::time::Duration>,
    /// A `WWW-Authenticate` challenge, for refusals of the caller's credentials.
    challenge: Option<String>,
}

impl RpcError {
    /// An error with any code, answered with HTTP 200.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
            status: StatusCode::OK,
            id: None,
            headers: None,
        }
    }

    /// `-32700`: the body is not JSON (HTTP 400).
    pub fn parse_error(cause: &serde_json::Error) -> Self {
        Self::new(
            codes::PARSE_ERROR,
            format!("The body is not valid JSON: {cause}"),
        )
        .with_status(StatusCode::BAD_REQUEST)
    }

    /// `-32600`: not a single valid request or notification (HTTP 400).
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_REQUEST, message).with_status(StatusCode::BAD_REQUEST)
    }

    /// `-32602` for a request whose `params`/`_meta` envelope is malformed (HTTP 400).
    pub fn invalid_meta(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message).with_status(StatusCode::BAD_REQUEST)
    }

    /// `-32602`: the method's parameters are wrong (an unknown tool, a bad cursor), in-band.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    /// `-32601`: the method is unknown, removed, or behind a capability not advertised (HTTP 404).
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
        .with_status(StatusCode::NOT_FOUND)
    }

    /// `-32020`: a routing header is missing, malformed or disagrees with the body (HTTP 400).
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::new(codes::HEADER_MISMATCH, message).with_status(StatusCode::BAD_REQUEST)
    }

    /// `-32000`: the caller already holds `limit` open `subscriptions/listen` streams (HTTP 429).
    pub fn too_many_subscriptions(limit: usize) -> Self {
        Self::new(
            codes::TOO_MANY_REQUESTS,
            format!(
                "This caller already holds {limit} open subscriptions/listen streams, the most it may; close one before opening another"
            ),
        )
        .with_data(json!({ "limit": limit }))
        .with_status(StatusCode::TOO_MANY_REQUESTS)
    }

    /// `-32000`: the caller has `limit` requests in flight already, the most it may (HTTP 429,
    /// `Retry-After`).
    pub(crate) fn too_many_in_flight(limit: usize) -> Self {
        Self::new(
            codes::TOO_MANY_REQUESTS,
            format!(
                "This caller already has {limit} requests in flight, the most it may; retry once one has been answered"
            ),
        )
        .with_data(json!({ "limit": limit }))
        .with_status(StatusCode::TOO_MANY_REQUESTS)
        .with_retry_after(std::time::Duration::from_secs(1))
    }

    /// `-32600` with HTTP 408: the request's body did not arrive within `timeout`.
    pub(crate) fn body_timeout(timeout: std::time::Duration) -> Self {
        Self::new(
            codes::INVALID_REQUEST,
            format!(
                "The request body did not arrive within {} ms; send it at once after the headers",
                timeout.as_millis()
            ),
        )
        .with_status(StatusCode::REQUEST_TIMEOUT)
    }

    /// `-32603` with HTTP 503: the server buffers as many request bytes as it may right now.
    pub(crate) fn body_budget_spent() -> Self {
        Self::new(
            codes::INTERNAL_ERROR,
            "The server is receiving as many request bytes as it may at once; retry shortly",
        )
        .with_status(StatusCode::SERVICE_UNAVAILABLE)
        .with_retry_after(std::time::Duration::from_secs(1))
    }

    /// `-32000`: the caller made more `what` than its rate allows (HTTP 429, `Retry-After`).
    pub fn rate_limited(what: &str, wait: std::time::Duration) -> Self {
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        Self::new(
            codes::TOO_MANY_REQUESTS,
            format!("Too many {what}: retry in {seconds} s"),
        )
        .with_data(json!({ "retryAfterSeconds": seconds }))
        .with_status(StatusCode::TOO_MANY_REQUESTS)
        .with_retry_after(std::time::Duration::from_secs(seconds))
    }

    /// Asks the caller to wait `wait` before retrying (`Retry-After`, in whole seconds).
    pub(crate) fn with_retry_after(mut self, wait: std::time::Duration) -> Self {
        self.headers.get_or_insert_default().retry_after = Some(wait);
        self
    }

    /// Attaches a `WWW-Authenticate` challenge.
    pub(crate) fn with_challenge(mut self, challenge: String) -> Self {
        self.headers.get_or_insert_default().challenge = Some(challenge);
        self
    }

    /// The `WWW-Authenticate` challenge of a refusal of the caller's credentials.
    pub fn challenge(&self) -> Option<&str> {
        self.headers.as_ref()?.challenge.as_deref()
    }

    /// How long the caller should wait before retrying, when the error says (`Retry-After`).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.headers.as_ref()?.retry_after
    }

    /// `-32021`: the request needs client capabilities it did not declare (HTTP 400).
    ///
    /// `required` is a `ClientCapabilities` object such as `{"sampling": {}}`.
    pub fn missing_capability(required: Value) -> Self {
        Self::new(
            codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "The request needs client capabilities it did not declare",
        )
        .with_data(json!({ "requiredCapabilities": required }))
        .with_status(StatusCode::BAD_REQUEST)
    }

    /// `-32022`: the protocol version is not served here (HTTP 400).
    pub fn unsupported_version(requested: &str, supported: &[&str]) -> Self {
        Self::new(
            codes::UNSUPPORTED_PROTOCOL_VERSION,
            format!(
                "Unsupported protocol version {requested:?}; this server speaks {}",
                supported.join(", ")
            ),
        )
        .with_data(json!({ "supported": supported, "requested": requested }))
        .with_status(StatusCode::BAD_REQUEST)
    }

    /// `-32603`: an unexpected failure, in-band.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, message)
    }

    /// Attaches `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Sets the HTTP status the error travels under.
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// Sets the request id the error answers.
    pub fn with_id(mut self, id: Option<RequestId>) -> Self {
        self.id = id;
        self
    }

    /// The JSON-RPC error code.
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `data` member, if any.
    pub fn data(&self) -> Option<&Value> {
        self.data.as_ref()
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The id of the request this error answers, if it could be read.
    pub fn id(&self) -> Option<&RequestId> {
        self.id.as_ref()
    }

    /// The JSON-RPC `error` object.
    pub fn to_error_object(&self) -> Value {
        let mut object = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            object["data"] = data.clone();
        }
        object
    }

    /// The complete JSON-RPC error response.
    ///
    /// When the id could not be read (a parse error, a batch) the `id` member is omitted, as the
    /// 2026-07-28 schema defines it: optional, and never null.
    pub fn to_response(&self) -> Value {
        let mut response = json!({ "jsonrpc": "2.0", "error": self.to_error_object() });
        if let Some(id) = &self.id {
            response["id"] = json!(id);
        }
        response
    }
}
