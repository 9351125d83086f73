//! The shape every answer must have, whatever was asked: a JSON-RPC error that is one, under the
//! HTTP status the protocol pins for its code; a result that is a result; a tool result whose
//! failure carries a stable `code`.

use serde_json::{Map, Value};

/// JSON-RPC and MCP error codes the server answers with.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_VERSION: i64 = -32022;
pub const TOO_MANY_REQUESTS: i64 = -32000;

/// Checks a JSON-RPC error response and returns its code. `id`: the id it must echo, when the
/// request's id could be read (`None`: the error must carry no id, or any id when `any_id`).
pub fn rpc_error(response: &Value, id: Option<&Value>) -> i64 {
    let object = response
        .as_object()
        .unwrap_or_else(|| panic!("an error response that is not an object: {response}"));
    assert_eq!(object.get("jsonrpc"), Some(&Value::from("2.0")), "{response}");
    assert!(!object.contains_key("result"), "an error with a result: {response}");
    for key in object.keys() {
        assert!(
            matches!(key.as_str(), "jsonrpc" | "id" | "error"),
            "an error response with member {key:?}: {response}"
        );
    }
    match (object.get("id"), id) {
        (None, None) => {}
        (Some(sent), Some(expected)) => assert_eq!(sent, expected, "the id echoed: {response}"),
        (Some(sent), None) => panic!("an error echoes id {sent} nobody could read: {response}"),
        (None, Some(expected)) => panic!("an error without the id {expected}: {response}"),
    }
    if let Some(id) = object.get("id") {
        assert!(id.is_string() || id.is_i64(), "an id that is neither: {response}");
    }
    let error = object
        .get("error")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("an error response without an error object: {response}"));
    for key in error.keys() {
        assert!(
            matches!(key.as_str(), "code" | "message" | "data"),
            "an error object with member {key:?}: {response}"
        );
    }
    assert!(
        error.get("message").is_some_and(Value::is_string),
        "an error without a message: {response}"
    );
    error
        .get("code")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("an error without an integer code: {response}"))
}

/// Whether `status` is one the protocol allows for an error of `code` (the README's "Protocol
/// behaviour" table). In-band errors travel with 200.
pub fn status_allowed(code: i64, status: u16) -> bool {
    match code {
        PARSE_ERROR => status == 400,
        // 400 for a malformed message; 403 for a refused Host/Origin, 405 for a method other
        // than POST, 408 for a body that never came, 413 for one too large, 415 for a wrong
        // Content-Type.
        INVALID_REQUEST => matches!(status, 400 | 403 | 405 | 408 | 413 | 415),
        // 400 for a malformed `params`/`_meta`; in-band for the method's own parameters.
        INVALID_PARAMS => matches!(status, 200 | 400),
        METHOD_NOT_FOUND => status == 404,
        HEADER_MISMATCH => status == 400,
        MISSING_CAPABILITY => status == 400,
        UNSUPPORTED_VERSION => status == 400,
        TOO_MANY_REQUESTS => status == 429,
        _ => false,
    }
}

/// Checks a JSON-RPC result response answering `id` and returns the result.
pub fn rpc_result<'a>(response: &'a Value, id: &Value) -> &'a Map<String, Value> {
    let object = response
        .as_object()
        .unwrap_or_else(|| panic!("a response that is not an object: {response}"));
    assert_eq!(object.get("jsonrpc"), Some(&Value::from("2.0")), "{response}");
    assert_eq!(object.get("id"), Some(id), "the id echoed: {response}");
    assert!(!object.contains_key("error"), "a result with an error: {response}");
    assert_eq!(object.len(), 3, "extra members: {response}");
    let result = object
        .get("result")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("a result that is not an object: {response}"));
    result
}

/// Checks the result of `tools/call` (2026-07-28): content blocks, `isError`, and for a failure a
/// `structuredContent` with a stable `code` and a message, the text saying the same. Returns the
/// code of a failure, `None` for a success.
pub fn call_result(result: &Map<String, Value>) -> Option<String> {
    let shown = || Value::Object(result.clone());
    let content = result
        .get("content")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("a tool result without content: {}", shown()));
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => assert!(
                block.get("text").is_some_and(Value::is_string),
                "a text block without text: {}",
                shown()
            ),
            Some(_) => {}
            None => panic!("a content block without a type: {}", shown()),
        }
    }
    let is_error = match result.get("isError") {
        None => false,
        Some(Value::Bool(flag)) => *flag,
        Some(other) => panic!("isError is {other}: {}", shown()),
    };
    if let Some(structured) = result.get("structuredContent") {
        assert!(structured.is_object(), "structuredContent not an object: {}", shown());
    }
    if !is_error {
        return None;
    }
    let structured = result
        .get("structuredContent")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("an error result without structuredContent: {}", shown()));
    // A stateful outcome says which it is; a replay carries the code of what it replays.
    let outcome = structured.get("outcome").and_then(Value::as_str);
    let coded = match outcome {
        Some("replayed") => structured.get("original").and_then(Value::as_object),
        _ => Some(structured),
    };
    let code = coded
        .and_then(|coded| coded.get("code"))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("an error result without a code: {}", shown()));
    assert!(!code.is_empty(), "an empty code: {}", shown());
    if outcome.is_none() || outcome == Some("rejected") {
        assert!(
            structured.get("message").is_some_and(Value::is_string),
            "an error result without a message: {}",
            shown()
        );
    }
    assert!(
        content
            .first()
            .and_then(|block| block.get("text"))
            .is_some_and(Value::is_string),
        "an error result without text: {}",
        shown()
    );
    Some(code.to_owned())
}
