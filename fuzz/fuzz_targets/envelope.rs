//! Arbitrary bytes as a request body: the JSON-RPC envelope, then `_meta`, then the whole HTTP
//! request path with routing headers that mirror the body.
//!
//! Asserts:
//! - `Envelope::parse` (which reads the members straight into their slots) and
//!   `Envelope::from_value` (of the parsed `Value`) agree on every input, and both follow the
//!   envelope rules as a reference model states them: `-32700` exactly when the body is not
//!   JSON; `-32600` for a batch, a non-object, a bad id (no id echoed), a wrong `jsonrpc`, a
//!   response, a method that is not a string (id echoed); `-32602` for `params` that are not an
//!   object; all under HTTP 400.
//! - `RequestMeta::take_from` accepts exactly the `_meta` the rules allow, takes it out of the
//!   params, and its accessors read back what was sent.
//! - Over HTTP: never a 5xx nor a `-32603` (a panic in the request path); a notification gets a
//!   202 without body; a request gets a JSON-RPC answer echoing its id, an error under the
//!   status its code pins, and never `-32020` when every routing header mirrors the body.

#![no_main]

use std::sync::LazyLock;

use http::HeaderName;
use libfuzzer_sys::fuzz_target;
use mcp_tools::McpServer;
use mcp_tools::protocol::meta_keys;
use mcp_tools::protocol::{Envelope, RequestId, RequestMeta, RpcError};
use mcp_tools_fuzz::answer::{self, rpc_error, status_allowed};
use mcp_tools_fuzz::routed::{self, MIRRORED, lookup, mirror, mirror_value};
use serde_json::{Map, Value, json};

static SERVER: LazyLock<(McpServer, axum::Router)> = LazyLock::new(|| {
    let server = routed::server();
    let router = server.router();
    (server, router)
});

fuzz_target!(|data: &[u8]| {
    let parsed = Envelope::parse(data);
    let value = serde_json::from_slice::<Value>(data);
    let value = match value {
        Err(_) => {
            let error = parsed.expect_err("a body that is not JSON parsed");
            assert_eq!(error.code(), -32700, "{}", error.message());
            assert_eq!(error.status(), 400);
            assert_eq!(error.id(), None);
            check_error_response(&error);
            return;
        }
        Ok(value) => value,
    };
    let twin = Envelope::from_value(value.clone());
    let expected = model(&value);
    match (&parsed, &twin, &expected) {
        (Ok(a), Ok(b), Ok((id, method, params))) => {
            for envelope in [a, b] {
                assert_eq!(envelope.id.as_ref(), id.as_ref());
                assert_eq!(&envelope.method, method);
                assert_eq!(envelope.params.as_ref(), params.as_ref());
            }
        }
        (Err(a), Err(b), Err((code, id))) => {
            for error in [a, b] {
                assert_eq!(i64::from(error.code()), *code, "{}", error.message());
                assert_eq!(error.id(), id.as_ref(), "{}", error.message());
                assert_eq!(error.status(), 400);
                check_error_response(error);
            }
            assert_eq!(a.message(), b.message());
        }
        _ => panic!(
            "parse: {:?}, from_value: {:?}, model: {:?} for {value}",
            parsed.as_ref().map(|e| &e.method).map_err(RpcError::message),
            twin.as_ref().map(|e| &e.method).map_err(RpcError::message),
            expected
        ),
    }
    let Ok(envelope) = parsed else { return };
    check_meta(envelope.params.clone());
    over_http(data, &envelope);
});

fn check_error_response(error: &RpcError) {
    let id = error.id().map(|id| serde_json::to_value(id).unwrap());
    let code = rpc_error(&error.to_response(), id.as_ref());
    assert!(status_allowed(code, error.status().as_u16()), "{code} {}", error.status());
}

type Model = Result<(Option<RequestId>, String, Option<Map<String, Value>>), (i64, Option<RequestId>)>;

/// The envelope rules, read from the parsed value in the order they are checked.
fn model(value: &Value) -> Model {
    let Value::Object(object) = value else {
        return Err((answer::INVALID_REQUEST, None));
    };
    let id = match object.get("id") {
        None => None,
        Some(Value::String(s)) => Some(RequestId::String(s.clone())),
        Some(Value::Number(n)) if n.is_i64() => Some(RequestId::Number(n.as_i64().unwrap())),
        Some(_) => return Err((answer::INVALID_REQUEST, None)),
    };
    if object.get("jsonrpc") != Some(&Value::from("2.0"))
        || object.contains_key("result")
        || object.contains_key("error")
    {
        return Err((answer::INVALID_REQUEST, id));
    }
    let Some(Value::String(method)) = object.get("method") else {
        return Err((answer::INVALID_REQUEST, id));
    };
    let params = match object.get("params") {
        None => None,
        Some(Value::Object(params)) => Some(params.clone()),
        Some(_) => return Err((answer::INVALID_PARAMS, id)),
    };
    Ok((id, method.clone(), params))
}

const LOG_LEVELS: [&str; 8] = [
    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency",
];

/// `_meta` is accepted exactly when the rules allow it, and read back as sent.
fn check_meta(params: Option<Map<String, Value>>) {
    let original = params.clone();
    let mut params = params;
    let taken = RequestMeta::take_from(params.as_mut());
    let meta = original.as_ref().and_then(|p| p.get("_meta"));
    let allowed = match meta {
        Some(Value::Object(meta)) => {
            meta.get(meta_keys::PROTOCOL_VERSION_KEY).is_some_and(Value::is_string)
                && meta.get(meta_keys::CLIENT_CAPABILITIES).is_some_and(Value::is_object)
                && meta.get(meta_keys::CLIENT_INFO).is_none_or(|info| {
                    info.as_object()
                        .and_then(|info| info.get("name"))
                        .is_some_and(Value::is_string)
                })
                && meta.get(meta_keys::PROGRESS_TOKEN).is_none_or(|token| {
                    token.is_string() || token.is_i64() || token.is_u64()
                })
                && meta.get(meta_keys::LOG_LEVEL).is_none_or(|level| {
                    level.as_str().is_some_and(|level| LOG_LEVELS.contains(&level))
                })
        }
        _ => false,
    };
    match taken {
        Ok(read) => {
            assert!(allowed, "accepted _meta {meta:?}");
            let meta = meta.and_then(Value::as_object).unwrap();
            let params = params.unwrap();
            assert!(!params.contains_key("_meta"), "`_meta` left in the params");
            let mut rest = original.clone().unwrap();
            rest.remove("_meta");
            assert_eq!(params, rest, "the other params changed");
            assert_eq!(read.raw(), meta);
            assert_eq!(
                Some(read.protocol_version()),
                meta[meta_keys::PROTOCOL_VERSION_KEY].as_str()
            );
            assert_eq!(
                Some(read.client_capabilities()),
                meta[meta_keys::CLIENT_CAPABILITIES].as_object()
            );
            assert_eq!(read.client_info(), meta.get(meta_keys::CLIENT_INFO));
            assert_eq!(read.progress_token(), meta.get(meta_keys::PROGRESS_TOKEN));
            assert_eq!(
                read.log_level().map(|level| level.as_str()),
                meta.get(meta_keys::LOG_LEVEL).and_then(Value::as_str)
            );
        }
        Err(error) => {
            assert!(!allowed, "refused _meta {meta:?}: {}", error.message());
            assert_eq!(error.code(), -32602);
            assert_eq!(error.status(), 400);
        }
    }
}

/// The body over HTTP, with every routing header mirroring it.
fn over_http(body: &[u8], envelope: &Envelope) {
    let params = envelope.params.as_ref();
    let meta_version = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(meta_keys::PROTOCOL_VERSION_KEY))
        .and_then(Value::as_str);
    let mut headers: Vec<(HeaderName, Vec<u8>)> = Vec::new();
    headers.push((
        HeaderName::from_static("mcp-protocol-version"),
        mirror(meta_version.unwrap_or("2026-07-28")),
    ));
    headers.push((HeaderName::from_static("mcp-method"), mirror(&envelope.method)));
    let target = match envelope.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(name) = target.and_then(|field| params?.get(field)?.as_str()) {
        headers.push((HeaderName::from_static("mcp-name"), mirror(name)));
    }
    // Every argument of `routed` a header mirrors, when it can be mirrored.
    let mut mirrored_all = true;
    if envelope.method == "tools/call"
        && params.and_then(|p| p.get("name")) == Some(&json!("routed"))
    {
        let arguments = params.and_then(|p| p.get("arguments")).cloned().unwrap_or(Value::Null);
        for (header, path) in MIRRORED {
            match lookup(&arguments, path) {
                None | Some(Value::Null) => {}
                Some(value) => match mirror_value(value) {
                    Some(text) => headers.push((HeaderName::from_static(header), mirror(&text))),
                    None => mirrored_all = false,
                },
            }
        }
        // A `placement` that is not an object has no zone to mirror.
        if lookup(&arguments, &["placement"]).is_some_and(|p| !p.is_object() && !p.is_null()) {
            mirrored_all = false;
        }
    }
    let (_, router) = &*SERVER;
    let request = mcp_tools_fuzz::http::request(&headers, body.to_vec());
    // `subscriptions/listen` streams until the client leaves: only its status is read.
    let read_streams = envelope.method != "subscriptions/listen";
    let answer = mcp_tools_fuzz::block_on(mcp_tools_fuzz::http::send(router, request, read_streams));
    let status = answer.status.as_u16();
    assert!(status < 500, "HTTP {status} for {:?}", String::from_utf8_lossy(body));
    let Some(id) = &envelope.id else {
        assert_eq!(status, 202, "a notification answered {status}");
        assert!(answer.body.is_empty(), "a notification answered with a body");
        return;
    };
    let id = serde_json::to_value(id).unwrap();
    if answer.streamed && !read_streams {
        assert_eq!(status, 200);
        return;
    }
    let message = answer.message.expect("a request answered without a message");
    if message.get("error").is_some() {
        let code = rpc_error(&message, Some(&id));
        assert_ne!(code, answer::INTERNAL_ERROR, "the request path failed: {message}");
        if answer.streamed {
            assert_eq!(status, 200, "{message}");
        } else {
            assert!(status_allowed(code, status), "HTTP {status} for {message}");
        }
        if mirrored_all {
            assert_ne!(code, answer::HEADER_MISMATCH, "mirrored headers refused: {message}");
        }
    } else {
        assert_eq!(status, 200, "{message}");
        answer::rpc_result(&message, &id);
    }
}
