use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::RpcError;

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
        let value: Value = serde_json::from_slice(body).map_err(|e| RpcError::parse_error(&e))?;
        Self::from_value(value)
    }

    /// Checks a parsed JSON value for the envelope rules.
    pub fn from_value(value: Value) -> Result<Envelope, RpcError> {
        let mut object = match value {
            Value::Object(object) => object,
            Value::Array(_) => {
                return Err(RpcError::invalid_request(
                    "Batch requests are not supported: send one JSON-RPC message per POST",
                ));
            }
            _ => {
                return Err(RpcError::invalid_request(
                    "The body must be a JSON-RPC request object",
                ));
            }
        };
        // Read the id first so every later error can echo it.
        let id = match object.remove("id") {
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
        match object.get("jsonrpc") {
            Some(Value::String(v)) if v == "2.0" => {}
            _ => return fail("The `jsonrpc` member must be the string \"2.0\""),
        }
        if object.contains_key("result") || object.contains_key("error") {
            return fail("Servers do not accept JSON-RPC responses on this endpoint");
        }
        let method = match object.remove("method") {
            Some(Value::String(method)) => method,
            Some(_) => return fail("The `method` member must be a string"),
            None => return fail("The request has no `method` member"),
        };
        let params = match object.remove("params") {
            None => None,
            Some(Value::Object(params)) => Some(params),
            Some(_) => {
                return Err(RpcError::invalid_meta("`params` must be an object").with_id(id));
            }
        };
        Ok(Envelope { id, method, params })
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
