//! What goes on the wire whatever the transport: the request object, the routing headers' values,
//! server-sent events, and the answer read back.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::error::{ClientError, RpcFailure};
use crate::protocol::meta_keys::PROTOCOL_VERSION_KEY;

/// Where the messages a server sends about a request go (progress, log messages).
pub(super) type Sink = Arc<dyn Fn(Value) + Send + Sync>;

/// The sink, replaceable while the client runs (a relay points it at its host), read for each
/// notification: few, next to requests.
pub(super) type SinkCell = Arc<RwLock<Sink>>;

/// One request, serialized, with what the HTTP transport mirrors in headers.
pub(super) struct Outgoing {
    /// The JSON-RPC id.
    pub(super) id: i64,
    /// The JSON-RPC method.
    pub(super) method: String,
    /// The protocol version the body's `_meta` claims (`MCP-Protocol-Version`).
    pub(super) version: String,
    /// The body field `Mcp-Name` mirrors, when the method names a target.
    pub(super) name: Option<String>,
    /// `Mcp-Param-*` headers: the header name and its value, already encoded.
    pub(super) params: Vec<(http::HeaderName, String)>,
    /// The whole JSON-RPC request.
    pub(super) body: Vec<u8>,
}

impl Outgoing {
    /// The request `{"jsonrpc": "2.0", "id", "method", "params"}`; `params` carries `_meta`.
    pub(super) fn new(id: i64, method: &str, params: &Map<String, Value>) -> Outgoing {
        #[derive(serde::Serialize)]
        struct Request<'a> {
            jsonrpc: &'static str,
            id: i64,
            method: &'a str,
            params: &'a Map<String, Value>,
        }
        let body = serde_json::to_vec(&Request {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })
        .expect("a JSON map serializes");
        let version = params
            .get("_meta")
            .and_then(|meta| meta.get(PROTOCOL_VERSION_KEY))
            .and_then(Value::as_str)
            .unwrap_or(crate::protocol::PROTOCOL_VERSION)
            .to_owned();
        let name = crate::protocol::headers::named_target(method)
            .and_then(|field| params.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Outgoing {
            id,
            method: method.to_owned(),
            version,
            name,
            params: Vec::new(),
            body,
        }
    }
}

/// A header value as the protocol sends text: as is when it is plain visible ASCII, otherwise
/// (non-ASCII, control characters, whitespace at either end, or text that looks like the
/// sentinel itself) as `=?base64?{Base64 of the UTF-8 bytes}?=`.
pub(super) fn header_value(text: &str) -> Cow<'_, str> {
    let visible = text.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = text.starts_with([' ', '\t']) || text.ends_with([' ', '\t']);
    let sentinel = text.starts_with("=?base64?") && text.ends_with("?=");
    if visible && !padded && !sentinel {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("=?base64?{}?=", STANDARD.encode(text)))
    }
}

/// The `Mcp-Param-*` value of an argument: strings as is (encoded when they must be), integers
/// as decimals, booleans as `true`/`false`; `None` for what is never mirrored (null, arrays,
/// objects).
pub(super) fn param_value(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(header_value(text).into_owned()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// A server-sent-event stream cut into its events' data, whatever the chunks it arrives in.
pub(super) struct SseParser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The data of the event being read, its lines joined with `\n`.
    data: String,
    /// Whether the event has a `data` field (an empty one included).
    has_data: bool,
    /// The most bytes one event may hold.
    limit: usize,
    /// Whether the last byte seen was a `\r`, which a `\n` may follow.
    after_cr: bool,
}

impl SseParser {
    pub(super) fn new(limit: usize) -> SseParser {
        SseParser {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            limit,
            after_cr: false,
        }
    }

    /// Feeds a chunk; the data of every event it completes is pushed to `events`.
    pub(super) fn push(
        &mut self,
        chunk: &[u8],
        events: &mut Vec<String>,
    ) -> Result<(), ClientError> {
        for &byte in chunk {
            let after_cr = std::mem::take(&mut self.after_cr);
            match byte {
                // `\r\n` ends one line, not two.
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_ended(&line, events)?;
                }
                _ => {
                    if self.line.len() + self.data.len() >= self.limit {
                        return Err(too_large(self.limit));
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(())
    }

    /// The end of the stream: an event whose blank line never came is delivered all the same.
    pub(super) fn finish(&mut self, events: &mut Vec<String>) -> Result<(), ClientError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_ended(&line, events)?;
        }
        self.line_ended(b"", events)
    }

    fn line_ended(&mut self, line: &[u8], events: &mut Vec<String>) -> Result<(), ClientError> {
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                events.push(data);
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            let value = std::str::from_utf8(value).map_err(|_| {
                ClientError::Protocol("a server-sent event is not UTF-8 text".into())
            })?;
            if self.data.len() + value.len() >= self.limit {
                return Err(too_large(self.limit));
            }
            self.data.push_str(value);
            self.data.push('\n');
            self.has_data = true;
        }
        Ok(())
    }
}

pub(super) fn too_large(limit: usize) -> ClientError {
    ClientError::Protocol(format!(
        "an answer is larger than the client accepts ({limit} bytes)"
    ))
}

/// What a message read back is.
pub(super) enum Incoming {
    /// The answer to the request with this id: its `result`, or its error.
    Response(Option<Value>, Result<Value, RpcFailure>),
    /// A notification: the whole message.
    Notification(Value),
    /// A request from the server, which this protocol revision never sends.
    Request,
}

/// Reads one JSON-RPC message.
pub(super) fn classify(message: Value) -> Result<Incoming, ClientError> {
    let Value::Object(mut object) = message else {
        return Err(ClientError::Protocol(
            "a message that is not a JSON-RPC object".into(),
        ));
    };
    if object.get("method").is_some_and(Value::is_string) {
        if object.get("id").is_some_and(|id| !id.is_null()) {
            return Ok(Incoming::Request);
        }
        return Ok(Incoming::Notification(Value::Object(object)));
    }
    let id = object.remove("id");
    if let Some(error) = object.remove("error") {
        return Ok(Incoming::Response(
            id,
            Err(RpcFailure::from_error(&error, None)),
        ));
    }
    match object.remove("result") {
        Some(result @ Value::Object(_)) => Ok(Incoming::Response(id, Ok(result))),
        Some(_) => Err(ClientError::Protocol(
            "a JSON-RPC result that is not an object".into(),
        )),
        None => Err(ClientError::Protocol(
            "a message that is neither a request, a notification nor a response".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<String> {
        let mut parser = SseParser::new(1 << 20);
        let mut events = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut events).unwrap();
        }
        parser.finish(&mut events).unwrap();
        events
    }

    #[test]
    fn events_are_cut_whatever_the_chunks() {
        let stream: &[u8] = b": keep-alive\n\nevent: message\ndata: {\"a\":1}\n\ndata: x\r\ndata: y\r\n\r\ndata:z\rdata\r\r";
        let whole = events(&[stream]);
        assert_eq!(whole, ["{\"a\":1}", "x\ny", "z\n"]);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytes), whole, "one byte at a time");
        let split: Vec<&[u8]> = stream.chunks(7).collect();
        assert_eq!(events(&split), whole);
        assert_eq!(events(&[b"data: last"]), ["last"], "an unterminated event");
        assert!(events(&[b"id: 3\nretry: 10\n\n"]).is_empty());
    }

    #[test]
    fn an_event_larger_than_the_limit_is_refused() {
        let mut parser = SseParser::new(16);
        let mut events = Vec::new();
        let refused = parser.push(b"data: 0123456789abcdef0123\n\n", &mut events);
        assert!(matches!(refused, Err(ClientError::Protocol(_))));
    }

    #[test]
    fn header_values_are_encoded_when_they_must_be() {
        assert_eq!(header_value("add"), "add");
        assert_eq!(header_value("a b"), "a b");
        assert_eq!(header_value(" add"), "=?base64?IGFkZA==?=");
        assert_eq!(header_value("café"), "=?base64?Y2Fmw6k=?=");
        assert_eq!(header_value("=?base64?x?="), "=?base64?PT9iYXNlNjQ/eD89?=");
        assert_eq!(header_value("line\nbreak"), "=?base64?bGluZQpicmVhaw==?=");
        assert_eq!(param_value(&serde_json::json!(42)).as_deref(), Some("42"));
        assert_eq!(
            param_value(&serde_json::json!(true)).as_deref(),
            Some("true")
        );
        assert_eq!(param_value(&serde_json::json!(null)), None);
        assert_eq!(param_value(&serde_json::json!([1])), None);
    }
}
