//! The 2025-11-25 era on the same endpoint: clients that still begin with `initialize` are served
//! statelessly (no session id is minted, nothing is remembered between their requests).

use http::HeaderMap;
use serde_json::{Map, Value, json};

use crate::context::notify::LogLevel;
use crate::protocol::{RequestMeta, headers, meta_keys};

/// Earlier revisions served in the legacy era, newest first.
pub(crate) const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The `MCP-Protocol-Version` header, trimmed, when present and readable.
fn version_header(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(headers::PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Whether a request belongs to the legacy era.
///
/// A `_meta` protocol-version claim decides; without one, an `initialize`, a request without
/// `MCP-Protocol-Version`, or one naming an earlier revision is legacy. A request that names
/// 2026-07-28 in its header but has no `_meta` claim is a malformed modern request, not a
/// legacy one.
pub(crate) fn is_legacy(
    params: Option<&Map<String, Value>>,
    method: &str,
    headers: Option<&HeaderMap>,
) -> bool {
    let claim = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(meta_keys::PROTOCOL_VERSION));
    let header = headers.map(version_header);
    let header_is_legacy =
        |header: Option<&str>| header.is_none_or(|v| LEGACY_VERSIONS.contains(&v));
    if let Some(claim) = claim {
        // A legacy claim under a modern header is not legacy: it stays on the modern path, where
        // the header/body disagreement is refused, so it cannot skip the routing-header checks.
        return claim.as_str().is_some_and(|v| LEGACY_VERSIONS.contains(&v))
            && header.is_none_or(header_is_legacy);
    }
    match header {
        None => false,
        Some(header) => method == "initialize" || header_is_legacy(header),
    }
}

/// The version a legacy request asks for: its `initialize` parameter, `_meta` claim or header.
pub(crate) fn requested_version(
    params: Option<&Map<String, Value>>,
    headers: Option<&HeaderMap>,
) -> String {
    let from_params = params.and_then(|p| {
        p.get("protocolVersion")
            .or_else(|| {
                p.get("_meta")
                    .and_then(|m| m.get(meta_keys::PROTOCOL_VERSION))
            })
            .and_then(Value::as_str)
    });
    let from_header = headers.and_then(version_header);
    from_params.or(from_header).unwrap_or("unknown").to_owned()
}

/// The request metadata of a legacy request: no capabilities are declared per request in that
/// era, and log messages go out unless the client asked otherwise on this request (a level set
/// with `logging/setLevel` cannot be remembered without a session).
pub(crate) fn meta(params: &mut Map<String, Value>, headers: Option<&HeaderMap>) -> RequestMeta {
    let raw = match params.remove("_meta") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    let protocol_version = headers
        .and_then(version_header)
        .filter(|v| LEGACY_VERSIONS.contains(v))
        .unwrap_or(LEGACY_VERSIONS[0])
        .to_owned();
    RequestMeta {
        protocol_version,
        client_capabilities: Map::new(),
        client_info: None,
        progress_token: raw
            .get(meta_keys::PROGRESS_TOKEN)
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned(),
        log_level: Some(LogLevel::Debug),
        raw,
    }
}

/// The `initialize` answer: the client's version when served, else the newest legacy one.
pub(crate) fn initialize_result(
    params: &Map<String, Value>,
    capabilities: &Value,
    server_info: &Value,
    instructions: Option<&str>,
) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = requested
        .filter(|v| LEGACY_VERSIONS.contains(v))
        .unwrap_or(LEGACY_VERSIONS[0]);
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": server_info,
    });
    if let Some(instructions) = instructions {
        result["instructions"] = json!(instructions);
    }
    result
}
