//! The 2025-11-25 era on the same endpoint: clients that still begin with `initialize` are served
//! statelessly (no session id is minted, nothing is remembered between their requests).

use std::borrow::Cow;

use http::HeaderMap;
use serde_json::{Map, Value};

use crate::protocol::{headers, meta_keys};

/// Earlier revisions served in the legacy era, newest first.
pub(crate) const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The `MCP-Protocol-Version` header as the era decision reads it: leniently, since deciding the
/// era classifies a request and refuses nothing (the modern path checks the header strictly).
pub(crate) fn version_header(headers: &HeaderMap) -> Option<Cow<'_, str>> {
    headers::classifying_text(headers, &headers::PROTOCOL_VERSION_HEADER_NAME).map(Cow::Borrowed)
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
        .and_then(|m| m.get(meta_keys::PROTOCOL_VERSION_KEY));
    let header = headers.map(version_header);
    let header = header.as_ref().map(Option::as_deref);
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
                    .and_then(|m| m.get(meta_keys::PROTOCOL_VERSION_KEY))
            })
            .and_then(Value::as_str)
    });
    match from_params {
        Some(version) => version.to_owned(),
        None => headers
            .and_then(version_header)
            .map_or_else(|| "unknown".to_owned(), Cow::into_owned),
    }
}
