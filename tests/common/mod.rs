//! Shared harness of the end-to-end tests: real servers on loopback ports, a raw HTTP client, and
//! validation against the official 2026-07-28 schema.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use mcp_tools::McpServer;
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub mod children;
pub mod events;
pub mod examples;
pub mod oauth;
pub mod payments;
pub mod tasks;
pub mod tools;

pub const VERSION: &str = "2026-07-28";

/// How long any single step of a test may take before the test fails instead of hanging.
pub const STEP: Duration = Duration::from_secs(30);

/// Awaits `future`, failing the test with `what` if it takes longer than [`STEP`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    within_for(STEP, what, future).await
}

/// Awaits `future`, failing the test with `what` if it takes longer than `limit`.
pub async fn within_for<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// A server listening on an ephemeral loopback port, shut down when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
}

impl TestServer {
    pub async fn start(server: McpServer) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            server
                .serve_listener(listener, async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        TestServer {
            addr,
            shutdown: Some(tx),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// What the ledger records of an `applied` outcome (its `structuredContent`), as a replay shows it
/// in `original`: a summary without the state.
pub fn recorded_applied(applied: &Value) -> Value {
    let mut summary = json!({
        "outcome": "applied",
        "handle": applied["handle"],
        "version": applied["version"],
        "result": applied["result"],
    });
    if let Some(from) = applied.get("rebased_from") {
        summary["rebased_from"] = from.clone();
    }
    summary
}

/// A client for the servers on loopback. Plain HTTP only: an empty root store spares it the
/// system certificates, whose loading would cost more than the requests it sends.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only(std::iter::empty())
        .build()
        .unwrap()
}

impl TestServer {
    /// `GET /healthz` without credentials, as a load balancer sends it.
    pub async fn healthz(&self) -> Reply {
        let url = format!("http://{}/healthz", self.addr);
        within(&format!("GET {url}"), async {
            Reply::from(client().get(&url).send().await.unwrap()).await
        })
        .await
    }
}

/// The `_meta` every valid request carries.
pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "e2e-tests", "version": "1.0.0" }
    })
}

/// A complete, valid request: body plus the headers the protocol requires.
#[derive(Clone, Debug)]
pub struct Call {
    pub body: Value,
    pub headers: Vec<(String, String)>,
    pub raw_body: Option<Vec<u8>>,
    pub http_method: reqwest::Method,
}

impl Call {
    pub fn new(method: &str, id: Value, mut params: Value) -> Call {
        params["_meta"] = meta();
        let mut headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            (
                "accept".to_owned(),
                "application/json, text/event-stream".to_owned(),
            ),
            ("mcp-protocol-version".to_owned(), VERSION.to_owned()),
            ("mcp-method".to_owned(), method.to_owned()),
        ];
        if let Some(name) = params.get("name").and_then(Value::as_str) {
            headers.push(("mcp-name".to_owned(), name.to_owned()));
        }
        Call {
            body: json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }),
            headers,
            raw_body: None,
            http_method: reqwest::Method::POST,
        }
    }

    pub fn discover() -> Call {
        Call::new("server/discover", json!(1), json!({}))
    }

    pub fn call_tool(name: &str, arguments: Value) -> Call {
        Call::new(
            "tools/call",
            json!(7),
            json!({ "name": name, "arguments": arguments }),
        )
    }

    /// Sets (or replaces) a header.
    pub fn header(mut self, name: &str, value: &str) -> Call {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Adds another copy of a header, keeping the ones already set.
    pub fn also_header(mut self, name: &str, value: &str) -> Call {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn without_header(mut self, name: &str) -> Call {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    /// Sets a `_meta` key.
    pub fn meta(self, key: &str, value: Value) -> Call {
        self.body(|b| b["params"]["_meta"][key] = value)
    }

    /// Removes a `_meta` key.
    pub fn without_meta(self, key: &str) -> Call {
        self.body(|b| {
            b["params"]["_meta"].as_object_mut().unwrap().remove(key);
        })
    }

    /// Declares these client capabilities.
    pub fn capabilities(self, capabilities: Value) -> Call {
        self.meta("io.modelcontextprotocol/clientCapabilities", capabilities)
    }

    pub fn body(mut self, edit: impl FnOnce(&mut Value)) -> Call {
        edit(&mut self.body);
        self
    }

    pub fn raw(mut self, bytes: impl Into<Vec<u8>>) -> Call {
        self.raw_body = Some(bytes.into());
        self
    }

    pub fn http_method(mut self, method: reqwest::Method) -> Call {
        self.http_method = method;
        self
    }

    pub async fn send(&self, server: &TestServer) -> Reply {
        self.send_to(&server.url()).await
    }

    pub async fn send_to(&self, url: &str) -> Reply {
        self.try_send_to(url).await.unwrap()
    }

    /// Sends the request; a transport failure (the server is gone, the connection dropped) is
    /// an `Err`, for tests that fail over to another server.
    pub async fn try_send_to(&self, url: &str) -> Result<Reply, reqwest::Error> {
        let mut request = client().request(self.http_method.clone(), url);
        for (name, value) in &self.headers {
            // From bytes, so tests can send obs-text (non-ASCII) values a server must refuse.
            let value = reqwest::header::HeaderValue::from_bytes(value.as_bytes()).unwrap();
            request = request.header(name.as_str(), value);
        }
        let body = self
            .raw_body
            .clone()
            .unwrap_or_else(|| serde_json::to_vec(&self.body).unwrap());
        let method = self.body["method"].as_str().unwrap_or("?").to_owned();
        within(&format!("{method} to {url}"), async move {
            let response = request.body(body).send().await?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let text = response.text().await?;
            Ok(Reply {
                status,
                headers,
                text,
            })
        })
        .await
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    /// Reads `response` whole.
    pub async fn from(response: reqwest::Response) -> Reply {
        Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            text: response.text().await.unwrap(),
        }
    }

    /// Whether the answer is a server-sent-event stream.
    pub fn is_stream(&self) -> bool {
        self.headers
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"))
    }

    /// Every JSON-RPC message of a stream, in order (one `data:` line each).
    pub fn events(&self) -> Vec<Value> {
        assert!(self.is_stream(), "not a stream: {:?}", self.text);
        self.text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| serde_json::from_str(data.trim()).unwrap())
            .collect()
    }

    /// The JSON-RPC response: the body, or the last message of a stream.
    pub fn json(&self) -> Value {
        if self.is_stream() {
            return self
                .events()
                .pop()
                .expect("a stream ends with the response");
        }
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    pub fn result(&self) -> Value {
        let json = self.json();
        assert!(json.get("error").is_none(), "unexpected error: {json}");
        json["result"].clone()
    }

    pub fn error_code(&self) -> Option<i64> {
        self.json()["error"]["code"].as_i64()
    }
}

/// The official 2026-07-28 schema, vendored under `tests/schema/`.
pub fn official_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let text = include_str!("../schema/mcp-2026-07-28.schema.json");
        serde_json::from_str(text).unwrap()
    })
}

/// A compiled JSON Schema 2020-12 validator.
pub fn compile(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(schema)
        .unwrap()
}

/// Whether `instance` is valid, the violations naming `what` it was checked as: for oracles that
/// report a failure with the case that caused it rather than panic.
pub fn conforms(
    validator: &jsonschema::Validator,
    what: &str,
    instance: &Value,
) -> Result<(), String> {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what} violated: {}\n{instance}",
            errors.join("; ")
        ))
    }
}

/// Asserts `instance` is valid, naming `what` it was checked as.
pub fn check(validator: &jsonschema::Validator, what: &str, instance: &Value) {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} violated:\n{}\n{instance:#}",
        errors.join("\n")
    );
}

/// A validator of one definition of the official schema.
pub fn official(definition: &str) -> jsonschema::Validator {
    let schema = official_schema();
    assert!(
        schema["$defs"].get(definition).is_some(),
        "no definition {definition}"
    );
    compile(&json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": schema["$defs"],
        "$ref": format!("#/$defs/{definition}"),
    }))
}

/// Asserts `instance` is a valid `definition` of the official schema. Each validator is compiled
/// once per test binary: compiling one takes longer than a request, and floods of requests check
/// Asserts `body` is a JSON-RPC result response. Legacy results follow the earlier revisions'
/// schemas (no `resultType` on `initialize` or `ping`), which are not vendored, so only the
/// envelope is checked against the official definitions.
pub fn assert_legacy_result(body: &Value) {
    let envelope = compile(&json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": official_schema()["$defs"],
        "type": "object",
        "required": ["jsonrpc", "id", "result"],
        "properties": {
            "jsonrpc": { "const": "2.0" },
            "id": { "$ref": "#/$defs/RequestId" },
            "result": { "type": "object" }
        },
        "not": { "required": ["error"] }
    }));
    check(&envelope, "a JSON-RPC result response", body);
}

/// every reply.
pub fn assert_conforms(definition: &str, instance: &Value) {
    static VALIDATORS: Mutex<BTreeMap<String, Arc<jsonschema::Validator>>> =
        Mutex::new(BTreeMap::new());
    let validator = Arc::clone(
        VALIDATORS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(definition.to_owned())
            .or_insert_with(|| Arc::new(official(definition))),
    );
    check(&validator, definition, instance);
}

/// Asserts `instance` conforms to a tool's published output schema.
pub fn assert_matches_schema(schema: &Value, instance: &Value) {
    check(&compile(schema), "the output schema", instance);
}

/// Returns `Err(format!(message))` from the enclosing function unless `condition` holds: the
/// `assert!` of oracles that return what went wrong.
#[macro_export]
macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(format!($($message)+));
        }
    };
}

/// The runtime of a property-based test: its cases run synchronously, each blocking on the
/// requests it sends to a server that serves on two worker threads meanwhile.
pub fn fuzz_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The number of cases a property-based test runs: `var` from the environment, or `default`.
pub fn fuzz_cases(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The signing key of the tests' servers: one for every replica and restart, as a deployment
/// has, since servers on a durable store do not build without one.
pub const SIGNING_KEY: &[u8] = b"the end-to-end tests' signing key, shared by every replica";
