//! What every result carries, in one place: `resultType`, the server's
//! `io.modelcontextprotocol/serverInfo` in `_meta`, and `ttlMs`/`cacheScope` on cacheable ones.
//! Every result the server sends, of either era and on any transport, is finished here.

use axum::body::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::meta_keys;

/// Who may cache a cacheable result: everyone, or only the requesting principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum CacheScope {
    /// Results do not depend on the caller.
    Public,
    /// Results may depend on the caller's authorization.
    Private,
}

/// The kind of a result, its `resultType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResultType {
    Complete,
    InputRequired,
    /// A `CreateTaskResult` of the Tasks extension.
    Task,
}

impl ResultType {
    fn as_str(self) -> &'static str {
        match self {
            ResultType::Complete => "complete",
            ResultType::InputRequired => "input_required",
            ResultType::Task => "task",
        }
    }
}

/// Finishes result bodies for one server.
pub(crate) struct Results {
    /// `{"io.modelcontextprotocol/serverInfo": {...}}`.
    meta: Map<String, Value>,
    /// The same, serialized once for the results written field by field.
    raw_meta: Box<RawValue>,
    ttl_ms: u64,
    scope: CacheScope,
}

impl Results {
    pub(crate) fn new(server_info: Value, ttl_ms: u64, scope: CacheScope) -> Results {
        let mut meta = Map::new();
        meta.insert(meta_keys::SERVER_INFO.into(), server_info);
        let raw_meta = serde_json::value::to_raw_value(&meta).expect("maps serialize");
        Results {
            meta,
            raw_meta,
            ttl_ms,
            scope,
        }
    }

    /// The server's implementation info, as `initialize` reports it.
    pub(crate) fn server_info(&self) -> &Value {
        &self.meta[meta_keys::SERVER_INFO]
    }

    /// `body` as a result of `kind`: its `resultType`, and its `_meta` with the server info added
    /// (keys the body already has in `_meta` are kept).
    pub(crate) fn finish(&self, kind: ResultType, mut body: Map<String, Value>) -> Value {
        body.insert("resultType".into(), json!(kind.as_str()));
        match body.get_mut("_meta") {
            Some(Value::Object(meta)) => {
                for (key, value) in &self.meta {
                    meta.entry(key.clone()).or_insert_with(|| value.clone());
                }
            }
            _ => {
                body.insert("_meta".into(), Value::Object(self.meta.clone()));
            }
        }
        Value::Object(body)
    }

    /// [`finish`](Results::finish), plus `ttlMs` and `cacheScope`.
    pub(crate) fn cacheable(&self, mut body: Map<String, Value>) -> Value {
        body.insert("ttlMs".into(), json!(self.ttl_ms));
        body.insert("cacheScope".into(), json!(self.scope));
        self.finish(ResultType::Complete, body)
    }

    /// A complete result, serialized.
    pub(crate) fn complete(&self, body: Map<String, Value>) -> Bytes {
        Bytes::from(super::json_text(&self.finish(ResultType::Complete, body)))
    }

    /// An `input_required` result, serialized.
    pub(crate) fn input_required(
        &self,
        request_state: String,
        input_requests: Map<String, Value>,
    ) -> Bytes {
        let mut body = Map::new();
        body.insert("requestState".into(), Value::String(request_state));
        if !input_requests.is_empty() {
            body.insert("inputRequests".into(), Value::Object(input_requests));
        }
        Bytes::from(super::json_text(
            &self.finish(ResultType::InputRequired, body),
        ))
    }

    /// A `CallToolResult`, written field by field (the hot path: no intermediate `Value`).
    /// `tool_meta` is the tool's own `_meta`, merged over the server info. `size_hint`: about
    /// how many bytes the content and structured content take, so the body is allocated once
    /// instead of doubling its way up.
    pub(crate) fn call_tool<S: Serialize + ?Sized>(
        &self,
        content: &impl Serialize,
        structured_content: Option<&S>,
        is_error: bool,
        tool_meta: Option<&Map<String, Value>>,
        size_hint: usize,
    ) -> Bytes {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a, C, S: ?Sized> {
            result_type: &'static str,
            content: &'a C,
            #[serde(skip_serializing_if = "Option::is_none")]
            structured_content: Option<&'a S>,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            is_error: bool,
            #[serde(rename = "_meta")]
            meta: &'a RawValue,
        }
        let merged;
        let meta: &RawValue = match tool_meta {
            None => &self.raw_meta,
            Some(tool_meta) => {
                let mut map = self.meta.clone();
                map.extend(tool_meta.iter().map(|(k, v)| (k.clone(), v.clone())));
                merged = serde_json::value::to_raw_value(&map).expect("maps serialize");
                &merged
            }
        };
        let wire = Wire {
            result_type: ResultType::Complete.as_str(),
            content,
            structured_content,
            is_error,
            meta,
        };
        // The envelope's own keys and punctuation take under 100 bytes.
        let mut body = Vec::with_capacity(size_hint + meta.get().len() + 100);
        serde_json::to_writer(&mut body, &wire).expect("tool results serialize");
        Bytes::from(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> Results {
        Results::new(
            json!({ "name": "s", "version": "1" }),
            60_000,
            CacheScope::Private,
        )
    }

    #[test]
    fn every_result_gets_its_type_and_the_server_info_and_keeps_its_own_meta() {
        let finished = results().finish(
            ResultType::Complete,
            json!({ "_meta": { "io.modelcontextprotocol/subscriptionId": 4 } })
                .as_object()
                .unwrap()
                .clone(),
        );
        assert_eq!(
            finished,
            json!({ "resultType": "complete", "_meta": {
                "io.modelcontextprotocol/subscriptionId": 4,
                "io.modelcontextprotocol/serverInfo": { "name": "s", "version": "1" } } })
        );
        let asked: Value =
            serde_json::from_slice(&results().input_required("sealed".into(), Map::new())).unwrap();
        assert_eq!(asked["resultType"], "input_required");
        assert_eq!(asked["requestState"], "sealed");
        assert!(asked.get("inputRequests").is_none());
        assert_eq!(
            asked["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "s"
        );
        let cached = results().cacheable(Map::new());
        assert_eq!(
            (cached["ttlMs"].clone(), cached["cacheScope"].clone()),
            (json!(60_000), json!("private"))
        );
    }
}
