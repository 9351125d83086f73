use serde_json::{Map, Value};

use super::meta_keys;
use crate::protocol::error::RpcError;

/// The per-request `_meta` every 2026-07-28 request must carry, checked once and kept whole:
/// the accessors read the checked keys from it.
#[derive(Debug, Clone, Default)]
pub struct RequestMeta {
    /// The version of a request of the 2025-11-25 era, which carries it in a header and
    /// declares no capabilities or implementation per request; `None` for a 2026-07-28 request,
    /// whose version, capabilities and implementation are read from `_meta`.
    legacy_version: Option<&'static str>,
    log_level: Option<LogLevel>,
    raw: Map<String, Value>,
}

/// The capabilities of a request that declares none.
static NO_CAPABILITIES: std::sync::LazyLock<Map<String, Value>> =
    std::sync::LazyLock::new(Map::new);

impl RequestMeta {
    /// Takes `_meta` out of `params` and checks its required keys.
    ///
    /// Missing or malformed required keys make the request malformed (`-32602`, HTTP 400).
    pub fn take_from(params: Option<&mut Map<String, Value>>) -> Result<RequestMeta, RpcError> {
        let Some(params) = params else {
            return Err(RpcError::invalid_meta(
                "The request has no `params`: every request must carry `params._meta` with the protocol version and client capabilities",
            ));
        };
        let raw = match params.remove("_meta") {
            Some(Value::Object(meta)) => meta,
            Some(_) => return Err(RpcError::invalid_meta("`params._meta` must be an object")),
            None => {
                return Err(RpcError::invalid_meta(format!(
                    "`params._meta` is missing: it must carry `{}` and `{}`",
                    meta_keys::PROTOCOL_VERSION_KEY,
                    meta_keys::CLIENT_CAPABILITIES
                )));
            }
        };
        match raw.get(meta_keys::PROTOCOL_VERSION_KEY) {
            Some(Value::String(_)) => {}
            Some(_) => {
                return Err(RpcError::invalid_meta(format!(
                    "`_meta[\"{}\"]` must be a string",
                    meta_keys::PROTOCOL_VERSION_KEY
                )));
            }
            None => {
                return Err(RpcError::invalid_meta(format!(
                    "`_meta[\"{}\"]` is required",
                    meta_keys::PROTOCOL_VERSION_KEY
                )));
            }
        }
        match raw.get(meta_keys::CLIENT_CAPABILITIES) {
            Some(Value::Object(_)) => {}
            Some(_) => {
                return Err(RpcError::invalid_meta(format!(
                    "`_meta[\"{}\"]` must be an object",
                    meta_keys::CLIENT_CAPABILITIES
                )));
            }
            None => {
                return Err(RpcError::invalid_meta(format!(
                    "`_meta[\"{}\"]` is required (send {{}} when the client has no optional capabilities)",
                    meta_keys::CLIENT_CAPABILITIES
                )));
            }
        }
        match raw.get(meta_keys::CLIENT_INFO) {
            None => {}
            Some(Value::Object(fields)) if fields.get("name").is_some_and(Value::is_string) => {}
            Some(_) => {
                return Err(RpcError::invalid_meta(format!(
                    "`_meta[\"{}\"]` must be an object with a string `name`",
                    meta_keys::CLIENT_INFO
                )));
            }
        }
        // The token is echoed in every progress notification, where it must be a string or an
        // integer: a fractional one would make those notifications invalid.
        if raw
            .get(meta_keys::PROGRESS_TOKEN)
            .is_some_and(|token| !is_progress_token(token))
        {
            return Err(RpcError::invalid_meta(
                "`_meta.progressToken` must be a string or an integer",
            ));
        }
        let log_level = match raw.get(meta_keys::LOG_LEVEL) {
            None => None,
            Some(Value::String(level)) if LogLevel::parse(level).is_some() => {
                LogLevel::parse(level)
            }
            Some(_) => {
                return Err(RpcError::invalid_meta(format!(
                    "`_meta[\"{}\"]` must be one of {}",
                    meta_keys::LOG_LEVEL,
                    LogLevel::NAMES.join(", ")
                )));
            }
        };
        Ok(RequestMeta {
            legacy_version: None,
            log_level,
            raw,
        })
    }

    /// The `_meta` of a request of the 2025-11-25 era, which declares no capabilities and no
    /// implementation per request: `protocol_version` comes from elsewhere (a header), and an
    /// invalid progress token is ignored rather than refused.
    pub(crate) fn legacy(
        protocol_version: &'static str,
        log_level: Option<LogLevel>,
        raw: Map<String, Value>,
    ) -> RequestMeta {
        RequestMeta {
            legacy_version: Some(protocol_version),
            log_level,
            raw,
        }
    }

    /// The protocol version the request claims.
    pub fn protocol_version(&self) -> &str {
        match self.legacy_version {
            Some(version) => version,
            None => self
                .raw
                .get(meta_keys::PROTOCOL_VERSION_KEY)
                .and_then(Value::as_str)
                .unwrap_or_default(),
        }
    }

    /// Whether the client's capabilities and implementation come from `_meta`.
    fn declared(&self) -> bool {
        self.legacy_version.is_none()
    }

    /// What the client can do, for this request only.
    pub fn client_capabilities(&self) -> &Map<String, Value> {
        match self.raw.get(meta_keys::CLIENT_CAPABILITIES) {
            Some(Value::Object(capabilities)) if self.declared() => capabilities,
            _ => &NO_CAPABILITIES,
        }
    }

    /// The self-reported client implementation, if sent.
    pub fn client_info(&self) -> Option<&Value> {
        self.raw
            .get(meta_keys::CLIENT_INFO)
            .filter(|_| self.declared())
    }

    /// The progress token, if the client opted in to progress.
    pub fn progress_token(&self) -> Option<&Value> {
        self.raw
            .get(meta_keys::PROGRESS_TOKEN)
            .filter(|token| is_progress_token(token))
    }

    /// The log level, if the client opted in to log messages.
    pub fn log_level(&self) -> Option<LogLevel> {
        self.log_level
    }

    /// The whole `_meta` object, including keys this runtime does not interpret.
    pub fn raw(&self) -> &Map<String, Value> {
        &self.raw
    }
}

fn is_progress_token(token: &Value) -> bool {
    token.is_string() || token.is_i64() || token.is_u64()
}

/// Severity of a log message, lowest first (RFC 5424 order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Notice.
    Notice,
    /// Warning.
    Warning,
    /// Error.
    Error,
    /// Critical.
    Critical,
    /// Alert.
    Alert,
    /// Emergency.
    Emergency,
}

impl LogLevel {
    pub(crate) const NAMES: [&'static str; 8] = [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<LogLevel> {
        const ALL: [LogLevel; 8] = [
            LogLevel::Debug,
            LogLevel::Info,
            LogLevel::Notice,
            LogLevel::Warning,
            LogLevel::Error,
            LogLevel::Critical,
            LogLevel::Alert,
            LogLevel::Emergency,
        ];
        Self::NAMES.iter().position(|n| *n == name).map(|i| ALL[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta_with_client_info(info: Value) -> Map<String, Value> {
        let meta = json!({
            meta_keys::PROTOCOL_VERSION_KEY: "2026-07-28",
            meta_keys::CLIENT_CAPABILITIES: {},
            meta_keys::CLIENT_INFO: info,
        });
        json!({ "_meta": meta }).as_object().unwrap().clone()
    }

    #[test]
    fn client_info_must_be_an_object_with_a_string_name() {
        let info = json!({ "name": "client", "version": "1.0.0" });
        let meta = RequestMeta::take_from(Some(&mut meta_with_client_info(info.clone()))).unwrap();
        assert_eq!(meta.client_info(), Some(&info));
        for bad in [
            json!({}),
            json!({ "version": "1.0.0" }),
            json!({ "name": 7 }),
            json!("client"),
        ] {
            let error =
                RequestMeta::take_from(Some(&mut meta_with_client_info(bad.clone()))).unwrap_err();
            assert_eq!(error.code(), -32602, "{bad}");
            assert!(error.message().contains(meta_keys::CLIENT_INFO), "{bad}");
        }
    }

    /// A request of the 2025-11-25 era declares no capabilities and no implementation per
    /// request, whatever its `_meta` carries, and an invalid progress token is ignored there.
    #[test]
    fn a_legacy_request_declares_nothing_per_request() {
        let raw = json!({
            meta_keys::CLIENT_CAPABILITIES: { "elicitation": {} },
            meta_keys::CLIENT_INFO: { "name": "client" },
            meta_keys::PROGRESS_TOKEN: 1.5,
            "x-custom": true,
        })
        .as_object()
        .unwrap()
        .clone();
        let meta = RequestMeta::legacy("2025-11-25", Some(LogLevel::Debug), raw.clone());
        assert_eq!(meta.protocol_version(), "2025-11-25");
        assert!(meta.client_capabilities().is_empty());
        assert_eq!(meta.client_info(), None);
        assert_eq!(meta.progress_token(), None);
        assert_eq!(meta.log_level(), Some(LogLevel::Debug));
        assert_eq!(meta.raw(), &raw);

        let mut with_token = raw;
        with_token.insert(meta_keys::PROGRESS_TOKEN.into(), json!("p-1"));
        let meta = RequestMeta::legacy("2025-11-25", None, with_token);
        assert_eq!(meta.progress_token(), Some(&json!("p-1")));
    }

    /// A current request's accessors read what its `_meta` declared.
    #[test]
    fn a_current_request_reads_its_meta() {
        let mut params = json!({ "_meta": {
            meta_keys::PROTOCOL_VERSION_KEY: "2026-07-28",
            meta_keys::CLIENT_CAPABILITIES: { "elicitation": {} },
            meta_keys::LOG_LEVEL: "warning",
        } })
        .as_object()
        .unwrap()
        .clone();
        let meta = RequestMeta::take_from(Some(&mut params)).unwrap();
        assert!(params.is_empty(), "`_meta` is taken out of the params");
        assert_eq!(meta.protocol_version(), "2026-07-28");
        assert!(meta.client_capabilities().contains_key("elicitation"));
        assert_eq!(meta.client_info(), None);
        assert_eq!(meta.progress_token(), None);
        assert_eq!(meta.log_level(), Some(LogLevel::Warning));
        assert_eq!(meta.raw().len(), 3);
    }

    #[test]
    fn a_progress_token_is_a_string_or_any_integer() {
        let with_token = |token: Value| {
            let mut params = json!({ "_meta": {
                meta_keys::PROTOCOL_VERSION_KEY: "2026-07-28",
                meta_keys::CLIENT_CAPABILITIES: {},
                meta_keys::PROGRESS_TOKEN: token,
            } })
            .as_object()
            .unwrap()
            .clone();
            RequestMeta::take_from(Some(&mut params))
        };
        for token in [json!("p-1"), json!(7), json!(-7), json!(u64::MAX)] {
            let meta = with_token(token.clone()).unwrap();
            assert_eq!(meta.progress_token(), Some(&token));
        }
        for token in [json!(1.5), json!(true), json!(null), json!({})] {
            let error = with_token(token.clone()).unwrap_err();
            assert_eq!(error.code(), -32602, "{token}");
        }
    }
}
