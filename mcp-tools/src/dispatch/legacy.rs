//! The 2025-11-25 era's own methods and metadata, served statelessly: `initialize` is answered
//! without minting a session, and nothing is remembered between requests.

use http::HeaderMap;
use serde_json::{Map, Value, json};

use crate::protocol::era::{LEGACY_VERSIONS, version_header};
use crate::protocol::{LogLevel, RequestMeta};

/// The request metadata of a legacy request: no capabilities are declared per request in that
/// era, and log messages go out unless the client asked otherwise on this request (a level set
/// with `logging/setLevel` cannot be remembered without a session).
pub(crate) fn meta(params: &mut Map<String, Value>, headers: Option<&HeaderMap>) -> RequestMeta {
    let raw = match params.remove("_meta") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    let header = headers.and_then(version_header);
    let protocol_version = LEGACY_VERSIONS
        .iter()
        .copied()
        .find(|known| header.as_deref() == Some(*known))
        .unwrap_or(LEGACY_VERSIONS[0]);
    RequestMeta::legacy(protocol_version, Some(LogLevel::Debug), raw)
}

/// The `initialize` answer: the client's version when served, else the newest legacy one.
pub(crate) fn initialize_result(
    params: &Map<String, Value>,
    capabilities: &Value,
    server_info: &Value,
    instructions: Option<&str>,
) -> Map<String, Value> {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = requested
        .filter(|v| LEGACY_VERSIONS.contains(v))
        .unwrap_or(LEGACY_VERSIONS[0]);
    let mut result = Map::new();
    result.insert("protocolVersion".into(), json!(version));
    result.insert("capabilities".into(), capabilities.clone());
    result.insert("serverInfo".into(), server_info.clone());
    if let Some(instructions) = instructions {
        result.insert("instructions".into(), json!(instructions));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy request keeps the version its header names when that is a legacy one, and the
    /// newest legacy version otherwise.
    #[test]
    fn the_version_comes_from_the_header() {
        let version = |header: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(header) = header {
                headers.insert("mcp-protocol-version", header.parse().unwrap());
            }
            meta(&mut Map::new(), Some(&headers))
                .protocol_version()
                .to_owned()
        };
        assert_eq!(version(Some("2025-06-18")), "2025-06-18");
        assert_eq!(version(Some("2025-03-26")), "2025-03-26");
        assert_eq!(version(Some("2099-01-01")), LEGACY_VERSIONS[0]);
        assert_eq!(version(None), LEGACY_VERSIONS[0]);
        assert_eq!(
            meta(&mut Map::new(), None).protocol_version(),
            LEGACY_VERSIONS[0]
        );
    }
}
