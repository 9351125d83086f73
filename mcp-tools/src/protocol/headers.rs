//! HTTP headers that mirror parts of the body so intermediaries can route without parsing it,
//! and the checks of the routing headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) against the
//! body, so a load balancer routing on headers and the server executing the body agree.

/// Must equal the body's protocol version.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// Must equal the JSON-RPC method.
pub const METHOD_HEADER: &str = "mcp-method";
/// Must equal `params.name` (or `params.uri`) where the method names a target.
pub const NAME_HEADER: &str = "mcp-name";

use std::borrow::Cow;
use std::fmt::Display;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;
use http::header::{AsHeaderName, HeaderName};

use crate::protocol::error::RpcError;

/// The routing headers as parsed names: a lookup by a `&str` parses and lowercases the name on
/// every request, one by a [`HeaderName`] only hashes it.
pub(crate) static PROTOCOL_VERSION_HEADER_NAME: HeaderName =
    HeaderName::from_static(PROTOCOL_VERSION_HEADER);
pub(crate) static METHOD_HEADER_NAME: HeaderName = HeaderName::from_static(METHOD_HEADER);
pub(crate) static NAME_HEADER_NAME: HeaderName = HeaderName::from_static(NAME_HEADER);

const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";

/// Reads a header as text: trimmed, and decoded when it uses the `=?base64?...?=` form.
///
/// `Ok(None)` when the header is absent; an error when it is present but unreadable. A plain
/// value is borrowed from the map: every request reads several of these.
pub(crate) fn header_text<'h>(
    headers: &'h HeaderMap,
    name: impl AsHeaderName + Display + Copy,
) -> Result<Option<Cow<'h, str>>, RpcError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        // Intermediaries may route on another copy than the one checked here.
        return Err(RpcError::header_mismatch(format!(
            "Header {name} appears more than once: send it once"
        )));
    }
    let text = value.to_str().map_err(|_| {
        RpcError::header_mismatch(format!(
            "Header {name} contains characters that are not visible ASCII; send non-ASCII values as =?base64?...?="
        ))
    })?;
    let text = text.trim_matches([' ', '\t']);
    match text
        .strip_prefix(SENTINEL_PREFIX)
        .and_then(|rest| rest.strip_suffix(SENTINEL_SUFFIX))
    {
        Some(encoded) => {
            let bytes = STANDARD.decode(encoded).map_err(|_| {
                RpcError::header_mismatch(format!("Header {name} has an invalid Base64 value"))
            })?;
            let decoded = String::from_utf8(bytes).map_err(|_| {
                RpcError::header_mismatch(format!("Header {name} does not decode to UTF-8 text"))
            })?;
            Ok(Some(Cow::Owned(decoded)))
        }
        None => Ok(Some(Cow::Borrowed(text))),
    }
}

/// The first value of a header, trimmed, when it is visible ASCII: for classifying a request (its
/// era) without refusing it. Checks that refuse use [`header_text`].
pub(crate) fn classifying_text<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
}

/// Whether a routing header must be sent, or only agree when it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// Revision 2026-07-28: the header must be there.
    Required,
    /// Earlier revisions send none, but one that is sent must still agree: an intermediary
    /// that routes or authorizes on it must see what runs.
    IfSent,
}

/// Requires `name` to equal `expected` (the body's value); whether it may be absent is
/// `presence`.
pub(crate) fn require_equal(
    headers: &HeaderMap,
    name: &HeaderName,
    display: &str,
    expected: &str,
    presence: Presence,
) -> Result<(), RpcError> {
    match header_text(headers, name)? {
        None if presence == Presence::IfSent => Ok(()),
        None => Err(RpcError::header_mismatch(format!(
            "Missing required header {display}: it must equal {expected:?} from the body"
        ))),
        Some(actual) if actual == expected => Ok(()),
        Some(actual) => Err(RpcError::header_mismatch(format!(
            "Header mismatch: {display} header value {actual:?} does not match body value {expected:?}"
        ))),
    }
}

/// The body field `Mcp-Name` must mirror, for methods that name a target.
pub(crate) fn named_target(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-name", HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn decodes_the_base64_sentinel_and_trims() {
        assert_eq!(
            header_text(&with("=?base64?SGVsbG8=?="), "mcp-name")
                .unwrap()
                .unwrap(),
            "Hello"
        );
        assert_eq!(
            header_text(&with("  foo "), "mcp-name").unwrap().unwrap(),
            "foo"
        );
        for literal in ["SGVsbG8=", "=?base64?SGVsbG8=", "=?BASE64?SGVsbG8=?="] {
            assert_eq!(
                header_text(&with(literal), "mcp-name").unwrap().unwrap(),
                literal
            );
        }
        for bad in ["=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?="] {
            assert_eq!(
                header_text(&with(bad), "mcp-name").unwrap_err().code(),
                -32020
            );
        }
        assert_eq!(header_text(&HeaderMap::new(), "mcp-name").unwrap(), None);
    }
}
