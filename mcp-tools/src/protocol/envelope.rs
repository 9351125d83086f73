use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::protocol::error::RpcError;

/// A JSON-RPC request id: a string or an integer, never null.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// One incoming JSON-RPC message, checked for the envelope rules but not yet for MCP's.
#[derive(Debug)]
pub struct Envelope {
    /// `None` for a notification.
    pub id: Option<RequestId>,
    /// The JSON-RPC method.
    pub method: String,
    /// `params`, when present (MCP requires it on every request; that is checked later so the
    /// error can echo the id).
    pub params: Option<Map<String, Value>>,
}

impl Envelope {
    /// Parses a body into a single request or notification.
    ///
    /// A body that is not JSON is a parse error; anything that is JSON but not one request or
    /// notification object (a batch, a response, a wrong `jsonrpc`, a null or fractional id) is an
    /// invalid request. The id is echoed in the error whenever it could be read.
    pub fn parse(body: &[u8]) -> Result<Envelope, RpcError> {
        // The members are read straight into their slots: the request object itself is never
        // built as a map only to be taken apart again. Every value is still parsed in full, so
        // what counts as JSON (and as too deep) is exactly what `Value` accepts.
        match serde_json::from_slice(body).map_err(|e| RpcError::parse_error(&e))? {
            Body::Object(members) => members.check(),
            Body::Array => Err(batch_refused()),
            Body::Other => Err(not_an_object()),
        }
    }

    /// Checks a parsed JSON value for the envelope rules.
    pub fn from_value(value: Value) -> Result<Envelope, RpcError> {
        let mut object = match value {
            Value::Object(object) => object,
            Value::Array(_) => return Err(batch_refused()),
            _ => return Err(not_an_object()),
        };
        Members {
            response: object.contains_key("result") || object.contains_key("error"),
            id: object.remove("id"),
            jsonrpc: object.remove("jsonrpc"),
            method: object.remove("method"),
            params: object.remove("params"),
        }
        .check()
    }
}

fn batch_refused() -> RpcError {
    RpcError::invalid_request(
        "Batch requests are not supported: send one JSON-RPC message per POST",
    )
}

fn not_an_object() -> RpcError {
    RpcError::invalid_request("The body must be a JSON-RPC request object")
}

/// The members of a request object the envelope rules look at; for a repeated member the last
/// one counts, as it does in a parsed `Value`.
#[derive(Default)]
struct Members {
    id: Option<Value>,
    jsonrpc: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    /// Whether the object has a `result` or an `error` member.
    response: bool,
}

impl Members {
    fn check(self) -> Result<Envelope, RpcError> {
        // Read the id first so every later error can echo it.
        let id = match self.id {
            None => None,
            Some(Value::String(s)) => Some(RequestId::String(s)),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(n) => Some(RequestId::Number(n)),
                None => {
                    return Err(RpcError::invalid_request(
                        "The request id must be a string or an integer",
                    ));
                }
            },
            Some(Value::Null) => {
                return Err(RpcError::invalid_request("The request id must not be null"));
            }
            Some(_) => {
                return Err(RpcError::invalid_request(
                    "The request id must be a string or an integer",
                ));
            }
        };
        let fail = |message: &str| Err(RpcError::invalid_request(message).with_id(id.clone()));
        match &self.jsonrpc {
            Some(Value::String(v)) if v == "2.0" => {}
            _ => return fail("The `jsonrpc` member must be the string \"2.0\""),
        }
        if self.response {
            return fail("Servers do not accept JSON-RPC responses on this endpoint");
        }
        let method = match self.method {
            Some(Value::String(method)) => method,
            Some(_) => return fail("The `method` member must be a string"),
            None => return fail("The request has no `method` member"),
        };
        let params = match self.params {
            None => None,
            Some(Value::Object(params)) => Some(params),
            Some(_) => {
                return Err(RpcError::invalid_meta("`params` must be an object").with_id(id));
            }
        };
        Ok(Envelope { id, method, params })
    }
}

/// A body as the envelope rules see it.
enum Body {
    Object(Members),
    Array,
    Other,
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Body, D::Error> {
        deserializer.deserialize_any(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Body;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
        let mut members = Members::default();
        while let Some(key) = map.next_key::<Key>()? {
            let value = map.next_value::<Value>()?;
            match key {
                Key::Id => members.id = Some(value),
                Key::Jsonrpc => members.jsonrpc = Some(value),
                Key::Method => members.method = Some(value),
                Key::Params => members.params = Some(value),
                Key::Response => members.response = true,
                Key::Other => {}
            }
        }
        Ok(Body::Object(members))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Body, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        Ok(Body::Array)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Body, E> {
        Ok(Body::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Body, E> {
        Ok(Body::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Body, E> {
        Ok(Body::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Body, E> {
        Ok(Body::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Body, E> {
        Ok(Body::Other)
    }

    fn visit_unit<E>(self) -> Result<Body, E> {
        Ok(Body::Other)
    }
}

/// A member name of the request object.
enum Key {
    Id,
    Jsonrpc,
    Method,
    Params,
    Response,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, key: &str) -> Result<Key, E> {
        Ok(match key {
            "id" => Key::Id,
            "jsonrpc" => Key::Jsonrpc,
            "method" => Key::Method,
            "params" => Key::Params,
            "result" | "error" => Key::Response,
            _ => Key::Other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_batch_is_refused_as_a_batch() {
        let error = Envelope::from_value(json!([
            { "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} }
        ]))
        .unwrap_err();
        assert_eq!(error.code(), -32600);
        assert!(error.message().starts_with("Batch"), "{}", error.message());
    }

    #[test]
    fn a_message_with_a_result_or_an_error_is_refused_even_when_it_names_a_method() {
        for member in ["result", "error"] {
            let mut message =
                json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} });
            message[member] = json!({});
            let error = Envelope::from_value(message).unwrap_err();
            assert_eq!(error.code(), -32600, "{member}");
            assert_eq!(error.id(), Some(&RequestId::Number(1)), "{member}");
        }
    }
}
