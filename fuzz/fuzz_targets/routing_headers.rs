//! The routing headers against the body, through the HTTP router in-process: `MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name` and the `Mcp-Param-*` headers of a tool that mirrors four arguments
//! (one nested), each header absent, mirrored (plain, in `=?base64?...?=`, padded, a number
//! spelled another way), sent twice, or arbitrary bytes; of either era.
//!
//! A reference model of the rules (`protocol/headers.rs`, `protocol/param_headers.rs`,
//! `protocol/era.rs`) says from the request whether every header the server checks agrees with
//! the body. Asserts:
//! - never a 5xx nor a `-32603`; every error a well-formed JSON-RPC error under its status;
//! - a call the server ran (any `tools/call` result) had every checked header agree with the
//!   body, as the model reads them: what an intermediary routed on is what ran;
//! - a well-formed call (a served version, a known tool, arguments an object) is answered
//!   `-32020` exactly when a header disagrees, and otherwise with a tool result;
//! - what the tool received is what the body said.

#![no_main]

use std::sync::LazyLock;

use arbitrary::{Result, Unstructured};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderName;
use libfuzzer_sys::fuzz_target;
use mcp_tools_fuzz::answer::{self, call_result, rpc_error, status_allowed};
use mcp_tools_fuzz::json;
use mcp_tools_fuzz::routed::{self, MIRRORED, lookup, mirror, mirror_value};
use serde_json::{Map, Value, json};

static ROUTER: LazyLock<axum::Router> = LazyLock::new(|| routed::server().router());

const MODERN: &str = "2026-07-28";
const LEGACY: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
const WORDS: &[&str] = &[
    "eu-west", "us-east", "b", "", " ", "zone a", "=?base64?ZXU=?=", "ünïcödé", "42", "true",
    "routed", "echo", "tools/call",
];

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(case) = Case::arbitrary(&mut u) {
        case.run();
    }
});

/// How one header is sent.
#[derive(Debug, Clone)]
enum Plan {
    Absent,
    /// The body's value, as a client writes it.
    Mirror,
    /// The body's value in the `=?base64?...?=` form, even when it is plain ASCII.
    Base64,
    /// The body's value with spaces and tabs around it.
    Padded(String, String),
    /// The body's value, sent twice.
    Twice,
    /// Another spelling of the body's value: a number as another decimal, a string's case
    /// changed, a boolean capitalised.
    Respelled(u8),
    /// The body's value with a byte appended.
    Appended(u8),
    /// Arbitrary bytes.
    Raw(Vec<u8>),
    /// Arbitrary text, Base64-encoded (valid or not).
    Encoded(Vec<u8>, bool),
}

impl Plan {
    fn arbitrary(u: &mut Unstructured<'_>) -> Result<Plan> {
        Ok(match u.int_in_range(0..=15)? {
            0..=5 => Plan::Mirror,
            6 => Plan::Absent,
            7 => Plan::Base64,
            8 => Plan::Padded(pad(u)?, pad(u)?),
            9 => Plan::Twice,
            10 | 11 => Plan::Respelled(u.arbitrary()?),
            12 => Plan::Appended(u.arbitrary()?),
            13 => Plan::Raw(u.arbitrary()?),
            _ => Plan::Encoded(u.arbitrary()?, u.arbitrary()?),
        })
    }

    /// The values sent for a header whose body value is `text` (`None`: the body has none).
    fn values(&self, text: Option<&str>) -> Vec<Vec<u8>> {
        let body = text.unwrap_or("");
        match self {
            Plan::Absent => vec![],
            Plan::Mirror if text.is_none() => vec![],
            Plan::Mirror => vec![mirror(body)],
            Plan::Base64 => vec![format!("=?base64?{}?=", STANDARD.encode(body)).into_bytes()],
            Plan::Padded(before, after) => {
                let mut value = before.clone().into_bytes();
                value.extend(mirror(body));
                value.extend(after.as_bytes());
                vec![value]
            }
            Plan::Twice => vec![mirror(body), mirror(body)],
            Plan::Respelled(how) => vec![respell(body, *how).into_bytes()],
            Plan::Appended(byte) => {
                let mut value = mirror(body);
                value.push(*byte);
                vec![value]
            }
            Plan::Raw(bytes) => vec![bytes.clone()],
            Plan::Encoded(bytes, valid) => {
                let mut encoded = STANDARD.encode(bytes);
                if !valid {
                    encoded.push('=');
                }
                vec![format!("=?base64?{encoded}?=").into_bytes()]
            }
        }
    }
}

fn pad(u: &mut Unstructured<'_>) -> Result<String> {
    let len = u.int_in_range(0..=2)?;
    let mut pad = String::new();
    for _ in 0..len {
        pad.push(if u.arbitrary()? { ' ' } else { '\t' });
    }
    Ok(pad)
}

/// Another spelling of `text`: equal decimals, unequal ones, other cases.
fn respell(text: &str, how: u8) -> String {
    let number = text.parse::<f64>().is_ok() && !text.is_empty();
    if number {
        let (sign, digits) = match text.strip_prefix('-') {
            Some(rest) => ("-", rest),
            None => ("", text),
        };
        return match how % 10 {
            0 => format!("{text}.0"),
            1 => format!("{text}e0"),
            2 => format!("{text}E+0"),
            3 => format!("{sign}0{digits}"),
            4 => format!("+{text}"),
            5 => format!("{text}."),
            6 => format!("{text}0e-1"),
            7 => format!("{sign}{digits}00e-2"),
            8 => format!("{text}1"),
            _ => format!("{sign}{digits}e1"),
        };
    }
    match how % 4 {
        0 => text.to_uppercase(),
        1 => text.to_lowercase(),
        2 => {
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect(),
                None => "x".to_owned(),
            }
        }
        _ => format!("{text}\u{0}"),
    }
}

/// Which routing headers a request sends, and what it sends for each.
#[derive(Debug)]
struct Case {
    claim: Option<Value>,
    version_header: Plan,
    /// The header value of `MCP-Protocol-Version` when it does not mirror the claim.
    version_text: Option<String>,
    method: String,
    method_header: Plan,
    name: Value,
    name_header: Plan,
    arguments: Option<Value>,
    params: [Plan; 4],
    /// An unrelated `Mcp-Param-*` header, which nothing checks.
    unrelated: Option<Vec<u8>>,
}

impl Case {
    fn arbitrary(u: &mut Unstructured<'_>) -> Result<Case> {
        let claim = match u.int_in_range(0..=7)? {
            0..=3 => Some(json!(MODERN)),
            4 => Some(json!(*u.choose(&LEGACY)?)),
            5 => None,
            6 => Some(json::value(u, 1, &[], &[MODERN, "2025-11-25", "2099-01-01"])?),
            _ => Some(json!(json::string(u, &[MODERN, "2025-11-25", " 2026-07-28"])?)),
        };
        let version_header = Plan::arbitrary(u)?;
        let version_text = match u.int_in_range(0..=3)? {
            0 => Some(json::string(u, &[MODERN, "2025-11-25", "2025-06-18", "2099-01-01"])?),
            _ => None,
        };
        let method = match u.int_in_range(0..=9)? {
            0..=6 => "tools/call".to_owned(),
            7 => (*u.choose(&["tools/list", "prompts/get", "server/discover", "initialize"])?)
                .to_owned(),
            _ => json::string(u, &["tools/call", "Tools/call", "tools/call "])?,
        };
        let method_header = Plan::arbitrary(u)?;
        let name = match u.int_in_range(0..=9)? {
            0..=6 => json!("routed"),
            7 => json!("echo"),
            8 => json!(json::string(u, &["routed", "Routed", "routed "])?),
            _ => json::value(u, 1, &[], &["routed"])?,
        };
        let name_header = Plan::arbitrary(u)?;
        let arguments = match u.int_in_range(0..=9)? {
            0..=6 => Some(routed_arguments(u)?),
            7 => Some(json!({ "text": json::string(u, WORDS)? })),
            8 => None,
            _ => Some(json::value(u, 3, &["region", "count", "dry_run", "placement", "zone"], WORDS)?),
        };
        let params = [
            Plan::arbitrary(u)?,
            Plan::arbitrary(u)?,
            Plan::arbitrary(u)?,
            Plan::arbitrary(u)?,
        ];
        let unrelated = if u.ratio(1, 8)? { Some(u.arbitrary()?) } else { None };
        Ok(Case {
            claim,
            version_header,
            version_text,
            method,
            method_header,
            name,
            name_header,
            arguments,
            params,
            unrelated,
        })
    }

    fn run(self) {
        let mut meta = Map::new();
        if let Some(claim) = &self.claim {
            meta.insert("io.modelcontextprotocol/protocolVersion".into(), claim.clone());
        }
        meta.insert("io.modelcontextprotocol/clientCapabilities".into(), json!({}));
        let mut params = Map::new();
        params.insert("_meta".into(), Value::Object(meta));
        params.insert("name".into(), self.name.clone());
        if let Some(arguments) = &self.arguments {
            params.insert("arguments".into(), arguments.clone());
        }
        let body = json!({ "jsonrpc": "2.0", "id": 7, "method": self.method, "params": params });

        // The headers, each as the plan says.
        let mut headers: Vec<(HeaderName, Vec<Vec<u8>>)> = Vec::new();
        let claim_text = self.claim.as_ref().and_then(Value::as_str);
        let version_body = self.version_text.as_deref().or(claim_text);
        headers.push((
            HeaderName::from_static("mcp-protocol-version"),
            self.version_header.values(version_body),
        ));
        headers.push((
            HeaderName::from_static("mcp-method"),
            self.method_header.values(Some(&self.method)),
        ));
        headers.push((
            HeaderName::from_static("mcp-name"),
            self.name_header.values(self.name.as_str()),
        ));
        let arguments = self.arguments.clone().unwrap_or(Value::Null);
        for ((header, path), plan) in MIRRORED.iter().zip(&self.params) {
            let text = lookup(&arguments, path).and_then(mirror_value);
            headers.push((HeaderName::from_static(header), plan.values(text.as_deref())));
        }
        if let Some(unrelated) = &self.unrelated {
            headers.push((HeaderName::from_static("mcp-param-other"), vec![unrelated.clone()]));
        }
        // Only values an HTTP client can send are sent; the model reads what was sent.
        let sent: Vec<(HeaderName, Vec<Vec<u8>>)> = headers
            .into_iter()
            .map(|(name, values)| {
                let values = values
                    .into_iter()
                    .filter(|value| http::HeaderValue::from_bytes(value).is_ok())
                    .collect();
                (name, values)
            })
            .collect();
        let read = |name: &str| -> Read {
            let values = &sent.iter().find(|(n, _)| n.as_str() == name).unwrap().1;
            read_header(values)
        };
        let flat: Vec<(HeaderName, Vec<u8>)> = sent
            .iter()
            .flat_map(|(name, values)| values.iter().map(|v| (name.clone(), v.clone())))
            .collect();

        // The model: the era, then every check the server makes of a `tools/call`.
        let first_version = sent[0].1.first().and_then(|v| {
            http::HeaderValue::from_bytes(v)
                .ok()
                .and_then(|v| v.to_str().ok().map(|s| s.trim().to_owned()))
        });
        let header_is_legacy = first_version
            .as_deref()
            .is_none_or(|v| LEGACY.contains(&v));
        let legacy = match &self.claim {
            Some(claim) => claim.as_str().is_some_and(|v| LEGACY.contains(&v)) && header_is_legacy,
            None => self.method == "initialize" || header_is_legacy,
        };
        let required = !legacy;
        let mut agree = true;
        if !legacy {
            agree &= equals(&read("mcp-protocol-version"), claim_text, true);
        }
        agree &= equals(&read("mcp-method"), Some(&self.method), required);
        if self.method == "tools/call" {
            if let Some(name) = self.name.as_str() {
                agree &= equals(&read("mcp-name"), Some(name), required);
            }
            // Arguments left out or `null` are none: every mirror must then be absent.
            let checked = match &arguments {
                Value::Null => Some(json!({})),
                Value::Object(_) => Some(arguments.clone()),
                _ => None,
            };
            if let (true, Some(checked)) = (self.name == json!("routed"), checked) {
                for (header, path) in MIRRORED {
                    let value = lookup(&checked, path);
                    agree &= param_agrees(&read(header), value, required);
                }
            }
        }
        // A call every check but the headers' passes.
        let well_formed = self.method == "tools/call"
            && (legacy || claim_text == Some(MODERN))
            && matches!(self.name.as_str(), Some("routed" | "echo"))
            && matches!(self.arguments, None | Some(Value::Object(_)));

        let request = mcp_tools_fuzz::http::request(&flat, serde_json::to_vec(&body).unwrap());
        let answer =
            mcp_tools_fuzz::block_on(mcp_tools_fuzz::http::send(&ROUTER, request, true));
        let status = answer.status.as_u16();
        assert!(status < 500, "HTTP {status} for {self:?}");
        let message = answer.message.expect("an answer without a message");
        let id = json!(7);
        if message.get("error").is_some() {
            let code = rpc_error(&message, Some(&id));
            assert_ne!(code, answer::INTERNAL_ERROR, "{message}");
            if !answer.streamed {
                assert!(status_allowed(code, status), "HTTP {status} for {message}");
            }
            if well_formed {
                assert_eq!(
                    code == answer::HEADER_MISMATCH,
                    !agree,
                    "a well-formed call answered {message}, the model says the headers {} (legacy: {legacy}) for {self:?}, sent {flat:?}",
                    if agree { "agree" } else { "disagree" }
                );
                if agree {
                    panic!("a well-formed call with agreeing headers refused: {message} for {self:?}");
                }
            }
            return;
        }
        assert_eq!(status, 200, "{message}");
        let result = answer::rpc_result(&message, &id);
        if self.method != "tools/call" {
            return;
        }
        assert!(
            agree,
            "a call ran although its headers disagree with the body (legacy: {legacy}): {message} for {self:?}, sent {flat:?}"
        );
        let failed = call_result(result);
        if self.name == json!("routed") && failed.is_none() {
            let text = result["content"][0]["text"].as_str().unwrap();
            let received: Value = serde_json::from_str(text).unwrap();
            for (_, path) in MIRRORED {
                let sent = lookup(&arguments, path).filter(|v| !v.is_null());
                let got = lookup(&received, path).filter(|v| !v.is_null());
                assert_eq!(sent, got, "the tool received {received} for {arguments}");
            }
        }
    }
}

fn routed_arguments(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut arguments = Map::new();
    let mut slot = |u: &mut Unstructured<'_>, key: &str, good: Value| -> Result<()> {
        match u.int_in_range(0..=9)? {
            0..=6 => {
                arguments.insert(key.to_owned(), good);
            }
            7 => {}
            8 => {
                arguments.insert(key.to_owned(), Value::Null);
            }
            _ => {
                arguments.insert(key.to_owned(), json::value(u, 1, &["zone"], WORDS)?);
            }
        }
        Ok(())
    };
    let region = json!(json::string(u, WORDS)?);
    slot(u, "region", region)?;
    let count = json::number(u)?;
    slot(u, "count", count)?;
    let dry_run = json!(u.arbitrary::<bool>()?);
    slot(u, "dry_run", dry_run)?;
    let zone = if u.arbitrary()? { json!(json::string(u, WORDS)?) } else { Value::Null };
    let placement = json!({ "zone": zone, "rack": 4 });
    slot(u, "placement", placement)?;
    if u.ratio(1, 6)? {
        arguments.insert("note".into(), json!(json::string(u, WORDS)?));
    }
    if u.ratio(1, 12)? {
        arguments.insert("extra".into(), json!(1));
    }
    Ok(Value::Object(arguments))
}

/// A header as the rules read it.
#[derive(Debug)]
enum Read {
    Absent,
    /// Sent twice, not visible ASCII, or a `=?base64?...?=` that does not decode to UTF-8.
    Unreadable,
    Text(String),
}

fn read_header(values: &[Vec<u8>]) -> Read {
    match values {
        [] => Read::Absent,
        [value] => {
            // Visible ASCII, spaces and tabs.
            if !value.iter().all(|&b| (0x20..0x7f).contains(&b) || b == b'\t') {
                return Read::Unreadable;
            }
            let text = std::str::from_utf8(value).unwrap();
            let text = text.trim_matches(|c| c == ' ' || c == '\t');
            match text
                .strip_prefix("=?base64?")
                .and_then(|rest| rest.strip_suffix("?="))
            {
                Some(encoded) => match STANDARD.decode(encoded).ok().map(String::from_utf8) {
                    Some(Ok(decoded)) => Read::Text(decoded),
                    _ => Read::Unreadable,
                },
                None => Read::Text(text.to_owned()),
            }
        }
        _ => Read::Unreadable,
    }
}

/// Whether a header that must equal `expected` does; `required`: whether it may be absent.
fn equals(read: &Read, expected: Option<&str>, required: bool) -> bool {
    match read {
        Read::Absent => !required,
        Read::Unreadable => false,
        Read::Text(text) => Some(text.as_str()) == expected,
    }
}

/// Whether an `Mcp-Param-*` header agrees with the argument `value`.
fn param_agrees(read: &Read, value: Option<&Value>, required: bool) -> bool {
    let value = value.filter(|v| !v.is_null());
    match (read, value) {
        (Read::Unreadable, _) => false,
        (Read::Absent, None) => true,
        (Read::Absent, Some(_)) => !required,
        (Read::Text(_), None) => false,
        (Read::Text(text), Some(value)) => match value {
            Value::String(s) => text == s,
            Value::Bool(b) => text == if *b { "true" } else { "false" },
            Value::Number(n) => match (decimal(text), decimal(&n.to_string())) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            },
            _ => false,
        },
    }
}

/// A JSON number as `(negative, significant digits, exponent)`, its value exactly; `None` when
/// the text is not a JSON number, or its exponent is not a 64-bit integer.
fn decimal(text: &str) -> Option<(bool, String, i128)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let negative = bytes.first() == Some(&b'-');
    if negative {
        i += 1;
    }
    let int_start = i;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    let integer = &text[int_start..i];
    if integer.is_empty() || (integer.len() > 1 && integer.starts_with('0')) {
        return None;
    }
    let mut fraction = "";
    if i < bytes.len() && bytes[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        fraction = &text[start..i];
        if fraction.is_empty() {
            return None;
        }
    }
    let mut exponent: i128 = 0;
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let rest = &text[i + 1..];
        let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        exponent = i128::from(rest.parse::<i64>().ok()?);
        i = text.len();
    }
    if i != text.len() {
        return None;
    }
    let all = format!("{integer}{fraction}");
    let significant = all.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return Some((false, "0".to_owned(), 0));
    }
    let dropped = (significant.len() - trimmed.len()) as i128;
    Some((negative, trimmed.to_owned(), exponent - fraction.len() as i128 + dropped))
}
