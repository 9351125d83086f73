//! The client: how to reach a server, and the requests of revision 2026-07-28 with their
//! answers typed.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use super::catalog::{self, Catalog, ListedTool};
use super::error::{ClientError, RpcFailure, ToolFailure, TransportErrorKind};
use super::http::Http;
use super::result::{Discovery, Notification, Task, ToolResult};
use super::stdio::Stdio;
use super::wire::{self, Outgoing, Sink, SinkCell};
use crate::protocol::meta_keys::{
    CLIENT_CAPABILITIES, CLIENT_INFO, LOG_LEVEL, PROGRESS_TOKEN, PROTOCOL_VERSION_KEY,
};
use crate::protocol::{LogLevel, PROTOCOL_VERSION, codes};
use crate::store::tasks::record::TaskStatus;
use crate::sync::{lock, read, write};

/// The extension id of tasks, declared in a request's client capabilities to take one.
pub(super) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The most bytes one answer may hold unless the builder says otherwise.
const DEFAULT_LIMIT: usize = 32 << 20;

/// How long a request may wait for its answer unless the builder says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How many `input_required` rounds one call may take.
const MAX_ROUNDS: usize = 16;

/// How often to poll a task that does not say.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
/// The bounds on the interval a task asks for.
const MIN_POLL: Duration = Duration::from_millis(10);
const MAX_POLL: Duration = Duration::from_secs(10);

/// What answers a tool's requests for input: it gets the `inputRequests` map (key to
/// `{"method", "params"}`) and returns the `inputResponses` map (key to the result of each).
type InputFn = Arc<
    dyn Fn(
            Map<String, Value>,
        ) -> Pin<Box<dyn Future<Output = Result<Map<String, Value>, ClientError>> + Send>>
        + Send
        + Sync,
>;

/// A client of one MCP 2026-07-28 server, over HTTP or stdio. Cheap to clone: clones share the
/// connection, the tool listing and the settings.
///
/// Every request carries the protocol version and the client's capabilities in `_meta` (and on
/// HTTP the routing headers `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and the
/// `Mcp-Param-*` headers a tool declares); nothing depends on an earlier request.
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) transport: Transport,
    capabilities: Map<String, Value>,
    client_info: Value,
    timeout: Option<Duration>,
    next_id: AtomicI64,
    pub(super) catalog: Catalog,
    // Replaced whole: consistent after a panic.
    discovery: Mutex<Option<Discovery>>,
    pub(super) on_input: Option<InputFn>,
    sink: SinkCell,
}

pub(super) enum Transport {
    Http(Http),
    Stdio(Stdio),
}

impl Transport {
    async fn send(&self, out: &Outgoing, sink: &SinkCell) -> Result<Value, ClientError> {
        match self {
            Transport::Http(http) => {
                let deliver = |message: Value| {
                    let sink = Arc::clone(&read(sink));
                    sink(message);
                };
                http.send(out, &deliver).await
            }
            Transport::Stdio(stdio) => stdio.send(out).await,
        }
    }

    pub(super) async fn stream(
        &self,
        out: &Outgoing,
        messages: tokio::sync::mpsc::Sender<Result<Value, ClientError>>,
    ) {
        match self {
            Transport::Http(http) => http.stream(out, messages).await,
            Transport::Stdio(stdio) => stdio.stream(out, messages).await,
        }
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Client")
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint())
            .finish_non_exhaustive()
    }
}

/// Settings of a [`Client`], then the connection.
///
/// ```no_run
/// # async fn run() -> Result<(), mcp_tools::client::ClientError> {
/// use mcp_tools::client::Client;
/// use serde_json::json;
///
/// let client = Client::builder()
///     .client_info("my-agent", "1.0.0")
///     .connect_http("http://127.0.0.1:8080/mcp")
///     .await?;
/// let sum = client.call_tool("add", json!({ "a": 20, "b": 22 })).await?;
/// assert_eq!(sum.structured_content, Some(json!({ "sum": 42 })));
/// # Ok(()) }
/// ```
pub struct ClientBuilder {
    name: String,
    version: String,
    capabilities: Value,
    headers: Vec<(String, String)>,
    env: Vec<(OsString, OsString)>,
    timeout: Option<Duration>,
    limit: usize,
    on_input: Option<InputFn>,
    sink: Option<Sink>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("client_info", &(&self.name, &self.version))
            .field("capabilities", &self.capabilities)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            name: "mcp-tools-client".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities: json!({}),
            headers: Vec::new(),
            env: Vec::new(),
            timeout: Some(DEFAULT_TIMEOUT),
            limit: DEFAULT_LIMIT,
            on_input: None,
            sink: None,
        }
    }
}

impl ClientBuilder {
    /// The name and version the client reports in `_meta` (`clientInfo`).
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.name = name.into();
        self.version = version.into();
        self
    }

    /// The capabilities declared on every request (a `ClientCapabilities` object, `{}` by
    /// default), e.g. `{"elicitation": {}}` with an [`on_input`](Self::on_input) handler.
    pub fn capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Sends `Authorization: Bearer <token>` on every HTTP request.
    pub fn bearer_token(self, token: impl AsRef<str>) -> Self {
        let value = format!("Bearer {}", token.as_ref());
        self.header("authorization", value)
    }

    /// A header every HTTP request carries.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// How long a request may wait for its answer (120 s by default; `None` waits as long as
    /// the connection lasts). A request that times out is cancelled: its connection or stream
    /// is closed, on stdio the server is sent `notifications/cancelled`.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most bytes one answer (one message of a stream) may hold, 32 MiB by default.
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.limit = bytes.max(1024);
        self
    }

    /// Receives the notifications the server sends about requests: progress (for calls made
    /// with [`ToolCall::progress`]) and log messages (with [`ToolCall::log_level`]).
    pub fn on_notification(
        mut self,
        callback: impl Fn(Notification) + Send + Sync + 'static,
    ) -> Self {
        self.sink = Some(Arc::new(move |message: Value| {
            callback(Notification::from_message(message));
        }));
        self
    }

    /// Answers a tool's requests for input (`input_required`: elicitation, sampling, roots):
    /// `handler` gets the `inputRequests` map, key to `{"method", "params"}`, and returns the
    /// `inputResponses` map, key to the answer (an `ElicitResult` such as
    /// `{"action": "accept", "content": {...}}`, a `CreateMessageResult`, a `ListRootsResult`).
    /// Declare what it can answer with [`capabilities`](Self::capabilities). Without a handler,
    /// a call that needs input fails with [`ClientError::InputRequired`].
    pub fn on_input<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Map<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Map<String, Value>, ClientError>> + Send + 'static,
    {
        self.on_input = Some(Arc::new(move |requests| Box::pin(handler(requests))));
        self
    }

    /// Connects to the MCP endpoint at `url` and asks it what it serves (`server/discover`):
    /// a server that does not serve 2026-07-28 is [`ClientError::Unsupported`].
    pub async fn connect_http(self, url: &str) -> Result<Client, ClientError> {
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ClientError::InvalidRequest(format!("{name:?} is not a header name"))
            })?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                ClientError::InvalidRequest(format!("the value of {name} is not a header value"))
            })?;
            headers.append(name, value);
        }
        let http = Http::new(url, headers, self.limit)?;
        let sink = self.sink_cell();
        self.connect(Transport::Http(http), sink).await
    }

    /// An environment variable of the server process (stdio), besides the client's own
    /// environment, which it inherits.
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((name.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Starts the server `program` with `args` as a child process and speaks to it over its
    /// standard input and output (its standard error is the client's), then asks it what it
    /// serves. The process is killed when the last clone of the client is dropped.
    pub async fn connect_stdio<I, S>(
        self,
        program: impl AsRef<OsStr>,
        args: I,
    ) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let sink = self.sink_cell();
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let stdio = Stdio::spawn(command, Arc::clone(&sink), self.limit)?;
        self.connect(Transport::Stdio(stdio), sink).await
    }

    fn sink_cell(&self) -> SinkCell {
        let sink = self.sink.clone().unwrap_or_else(|| Arc::new(|_| {}));
        Arc::new(RwLock::new(sink))
    }

    async fn connect(self, transport: Transport, sink: SinkCell) -> Result<Client, ClientError> {
        let Value::Object(capabilities) = self.capabilities else {
            return Err(ClientError::InvalidRequest(
                "the client capabilities must be a JSON object".into(),
            ));
        };
        let client = Client {
            inner: Arc::new(Inner {
                transport,
                capabilities,
                client_info: json!({ "name": self.name, "version": self.version }),
                timeout: self.timeout,
                next_id: AtomicI64::new(1),
                catalog: Catalog::new(),
                discovery: Mutex::new(None),
                on_input: self.on_input,
                sink,
            }),
        };
        client.check_revision().await?;
        Ok(client)
    }
}

/// A tool call with its options.
#[derive(Debug, Clone)]
pub struct ToolCall {
    name: String,
    arguments: Value,
    meta: Map<String, Value>,
    progress: bool,
    log_level: Option<LogLevel>,
    task: bool,
}

impl ToolCall {
    /// Calls `name` with `arguments` (a JSON object).
    pub fn new(name: impl Into<String>, arguments: Value) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments,
            meta: Map::new(),
            progress: false,
            log_level: None,
            task: false,
        }
    }

    /// Adds a `_meta` entry to the request.
    pub fn meta(mut self, key: impl Into<String>, value: Value) -> ToolCall {
        self.meta.insert(key.into(), value);
        self
    }

    /// Asks for progress notifications (a progress token is made for the call); they go to the
    /// client's [`on_notification`](ClientBuilder::on_notification) callback.
    pub fn progress(mut self) -> ToolCall {
        self.progress = true;
        self
    }

    /// Asks for log messages at `level` and above, for this call only.
    pub fn log_level(mut self, level: LogLevel) -> ToolCall {
        self.log_level = Some(level);
        self
    }

    /// Declares the Tasks extension for this call: the server may answer with a task, which
    /// [`Client::call`] polls to its end ([`Client::submit`] returns it instead).
    pub fn task(mut self) -> ToolCall {
        self.task = true;
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The arguments.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }
}

/// What a tool call started: a result at once, or a task to poll.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Submitted {
    /// The tool answered.
    Done(ToolResult),
    /// The tool runs as a task: poll it with [`Client::wait_task`] (keep its id to poll it
    /// again after a restart).
    Task(Task),
}

impl Client {
    /// Settings, then the connection.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The endpoint: the URL, or the server's command.
    pub fn endpoint(&self) -> &str {
        match &self.inner.transport {
            Transport::Http(http) => http.url(),
            Transport::Stdio(stdio) => stdio.command(),
        }
    }

    /// What the server said it serves when the client connected, or when it last asked.
    pub fn discovery(&self) -> Option<Discovery> {
        lock(&self.inner.discovery).clone()
    }

    /// Asks the server what it serves (`server/discover`).
    pub async fn discover(&self) -> Result<Discovery, ClientError> {
        let result = self.send("server/discover", Map::new()).await?;
        let discovery = Discovery::from_map(&result).map_err(ClientError::Protocol)?;
        *lock(&self.inner.discovery) = Some(discovery.clone());
        Ok(discovery)
    }

    /// `server/discover`, refusing a server that does not serve this revision. A server that
    /// refuses the version (`-32022`) but names it among those it supports is asked once more:
    /// a client retries with a supported version, and this one is the only one it speaks.
    async fn check_revision(&self) -> Result<(), ClientError> {
        match self.discover_revision().await {
            Err(ClientError::Unsupported { supported, .. })
                if supported.iter().any(|v| v == PROTOCOL_VERSION) =>
            {
                self.discover_revision().await
            }
            checked => checked,
        }
    }

    /// One `server/discover`: `Ok` when the server serves this revision.
    async fn discover_revision(&self) -> Result<(), ClientError> {
        let refused = |reason: String, supported: Vec<String>| {
            Err(ClientError::Unsupported { reason, supported })
        };
        match self.discover().await {
            Ok(discovery)
                if discovery
                    .supported_versions
                    .iter()
                    .any(|v| v == PROTOCOL_VERSION) =>
            {
                Ok(())
            }
            Ok(discovery) => refused(
                format!("it serves {}", discovery.supported_versions.join(", ")),
                discovery.supported_versions,
            ),
            Err(ClientError::Rpc(failure))
                if failure.code == i64::from(codes::UNSUPPORTED_PROTOCOL_VERSION) =>
            {
                let supported = failure
                    .data
                    .as_ref()
                    .and_then(|data| data.get("supported"))
                    .and_then(Value::as_array)
                    .map(|versions| {
                        versions
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                refused(format!("it refused the version ({failure})"), supported)
            }
            Err(ClientError::Rpc(failure)) if is_pre_revision(&failure) => refused(
                format!("it does not know server/discover ({failure})"),
                Vec::new(),
            ),
            Err(ClientError::Http { status, body, .. })
                if matches!(status, 400 | 404 | 405 | 406 | 415) =>
            {
                refused(
                    format!(
                        "it answered server/discover with HTTP {status} without a JSON-RPC error: {body}"
                    ),
                    Vec::new(),
                )
            }
            Err(error) => Err(error),
        }
    }

    /// The server's tools, every page of `tools/list`, kept for as long as the server's
    /// `ttlMs` says (not at all with `0`). A tool whose `x-mcp-header` declarations a client
    /// cannot honour is left out, as the protocol asks. The listing is kept by this client (and
    /// its clones) alone, which send one set of credentials: a `cacheScope: "private"` listing
    /// is never reused in another authorization context, and pages that disagree on
    /// `cacheScope` are a [`ClientError::Protocol`].
    pub async fn list_tools(&self) -> Result<Arc<[ListedTool]>, ClientError> {
        if let Some(fresh) = self.inner.catalog.fresh() {
            return Ok(fresh);
        }
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = HashSet::new();
        let mut ttl = u64::MAX;
        let mut scope: Option<String> = None;
        for _ in 0..catalog::MAX_PAGES {
            let mut params = Map::new();
            if let Some(cursor) = &cursor {
                params.insert("cursor".into(), Value::String(cursor.clone()));
            }
            let out = self.outgoing("tools/list", params)?;
            let result = self.exchange(&out).await?;
            let catalog::Page {
                tools: page,
                next_cursor: next,
                ttl_ms: page_ttl,
                cache_scope: page_scope,
            } = catalog::page(&result)?;
            tools.extend(page);
            ttl = ttl.min(page_ttl);
            if scope.is_some() && page_scope.is_some() && scope != page_scope {
                return Err(ClientError::Protocol(
                    "the pages of one tools/list differ in cacheScope".into(),
                ));
            }
            scope = scope.or(page_scope);
            match next {
                None => {
                    return Ok(self
                        .inner
                        .catalog
                        .store(tools, Some(Duration::from_millis(ttl))));
                }
                Some(next) => {
                    if !seen.insert(next.clone()) {
                        return Err(ClientError::Protocol(format!(
                            "tools/list gave the cursor {next:?} twice"
                        )));
                    }
                    cursor = Some(next);
                }
            }
        }
        Err(ClientError::Protocol(format!(
            "tools/list did not end within {} pages",
            catalog::MAX_PAGES
        )))
    }

    /// One tool of the listing (listing again when the last one is stale).
    pub async fn tool(&self, name: &str) -> Result<Option<ListedTool>, ClientError> {
        if let Some(fresh) = self.inner.catalog.fresh_tool(name) {
            return Ok(fresh);
        }
        let tools = self.list_tools().await?;
        Ok(tools.iter().find(|tool| tool.name() == name).cloned())
    }

    /// Calls a tool and returns its result; a result with `isError: true` is
    /// [`ClientError::Tool`], with its code, recovery and details.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<ToolResult, ClientError> {
        let result = self.call(ToolCall::new(name, arguments)).await?;
        if result.is_error {
            return Err(ClientError::Tool(Box::new(ToolFailure::from_result(
                name, result,
            ))));
        }
        Ok(result)
    }

    /// Calls a tool: answers its requests for input with the client's
    /// [`on_input`](ClientBuilder::on_input) handler and polls a task to its end. A result
    /// with `isError: true` is returned as it is.
    pub async fn call(&self, call: ToolCall) -> Result<ToolResult, ClientError> {
        match self.submit(call).await? {
            Submitted::Done(result) => Ok(result),
            Submitted::Task(task) => self.wait_task(&task.task_id).await,
        }
    }

    /// Calls a tool, answering its requests for input, and returns what it started: its
    /// result, or a task.
    pub async fn submit(&self, call: ToolCall) -> Result<Submitted, ClientError> {
        let params = self.call_params(call)?;
        self.submit_params(params).await
    }

    /// [`submit`](Self::submit) of the params of a `tools/call`.
    pub(super) async fn submit_params(
        &self,
        mut params: Map<String, Value>,
    ) -> Result<Submitted, ClientError> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        for _ in 0..MAX_ROUNDS {
            let mut result = self.send("tools/call", params.clone()).await?;
            match result.get("resultType").and_then(Value::as_str) {
                Some("input_required") => {
                    let requests = match result.remove("inputRequests") {
                        Some(Value::Object(requests)) => requests,
                        _ => Map::new(),
                    };
                    let responses = self.answer(requests).await?;
                    params.remove("inputResponses");
                    params.remove("requestState");
                    if !responses.is_empty() {
                        params.insert("inputResponses".into(), Value::Object(responses));
                    }
                    if let Some(state) = result.remove("requestState") {
                        params.insert("requestState".into(), state);
                    }
                }
                Some("task") => return task(&result).map(Submitted::Task),
                _ => return tool_result(result).map(Submitted::Done),
            }
        }
        Err(ClientError::InputRequired(format!(
            "{name} asked for input {MAX_ROUNDS} times in a row"
        )))
    }

    /// The params of a `tools/call`.
    pub(super) fn call_params(&self, call: ToolCall) -> Result<Map<String, Value>, ClientError> {
        let ToolCall {
            name,
            arguments,
            mut meta,
            progress,
            log_level,
            task,
        } = call;
        let arguments = match arguments {
            Value::Object(arguments) => arguments,
            Value::Null => Map::new(),
            other => {
                return Err(ClientError::InvalidRequest(format!(
                    "the arguments of {name} must be a JSON object, not {other}"
                )));
            }
        };
        if progress {
            let token = format!("progress-{}", self.next_id());
            meta.insert(PROGRESS_TOKEN.into(), Value::String(token));
        }
        if let Some(level) = log_level {
            meta.insert(LOG_LEVEL.into(), Value::String(level.as_str().into()));
        }
        if task {
            meta.insert(CLIENT_CAPABILITIES.into(), Value::Object(self.with_tasks()));
        }
        let mut params = Map::new();
        params.insert("name".into(), Value::String(name));
        params.insert("arguments".into(), Value::Object(arguments));
        params.insert("_meta".into(), Value::Object(meta));
        Ok(params)
    }

    /// The client's capabilities with the Tasks extension declared.
    pub(super) fn with_tasks(&self) -> Map<String, Value> {
        let mut capabilities = self.inner.capabilities.clone();
        let extensions = capabilities
            .entry("extensions")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(extensions) = extensions {
            extensions.insert(TASKS_EXTENSION.into(), json!({}));
        }
        capabilities
    }

    /// Asks the input handler for the answers to `requests`.
    pub(super) async fn answer(
        &self,
        requests: Map<String, Value>,
    ) -> Result<Map<String, Value>, ClientError> {
        if requests.is_empty() {
            return Ok(Map::new());
        }
        match &self.inner.on_input {
            Some(handler) => handler(requests).await,
            None => {
                let asked: Vec<String> = requests
                    .iter()
                    .map(|(key, request)| {
                        format!("{key} ({})", request["method"].as_str().unwrap_or("?"))
                    })
                    .collect();
                Err(ClientError::InputRequired(format!(
                    "no input handler to answer {}",
                    asked.join(", ")
                )))
            }
        }
    }

    /// Sends any request: `params` (an object, or null) get the `_meta` every request carries
    /// (keys already in `params._meta` are kept). Returns the result object.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let params = match params {
            Value::Object(params) => params,
            Value::Null => Map::new(),
            other => {
                return Err(ClientError::InvalidRequest(format!(
                    "the params of {method} must be a JSON object, not {other}"
                )));
            }
        };
        self.send(method, params).await.map(Value::Object)
    }

    /// Sends the server's notifications to `sink` from now on.
    pub(super) fn set_sink(&self, sink: Sink) {
        *write(&self.inner.sink) = sink;
    }

    pub(super) fn inner_timeout(&self) -> Option<Duration> {
        self.inner.timeout
    }

    pub(super) fn next_id(&self) -> i64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds the `_meta` every request carries; keys the caller set are kept.
    pub(super) fn fill_meta(&self, params: &mut Map<String, Value>) -> Result<(), ClientError> {
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(meta) = meta else {
            return Err(ClientError::InvalidRequest(
                "_meta must be a JSON object".into(),
            ));
        };
        if !meta.contains_key(PROTOCOL_VERSION_KEY) {
            meta.insert(
                PROTOCOL_VERSION_KEY.into(),
                Value::String(PROTOCOL_VERSION.into()),
            );
        }
        if !meta.contains_key(CLIENT_CAPABILITIES) {
            meta.insert(
                CLIENT_CAPABILITIES.into(),
                Value::Object(self.inner.capabilities.clone()),
            );
        }
        if !meta.contains_key(CLIENT_INFO) {
            meta.insert(CLIENT_INFO.into(), self.inner.client_info.clone());
        }
        Ok(())
    }

    /// The request as it goes out: `_meta` filled, and for a tool call the `Mcp-Param-*`
    /// headers of the tool as last listed.
    pub(super) fn outgoing(
        &self,
        method: &str,
        mut params: Map<String, Value>,
    ) -> Result<Outgoing, ClientError> {
        self.fill_meta(&mut params)?;
        let mut out = Outgoing::new(self.next_id(), method, &params);
        if method == "tools/call"
            && let Some(tool) = out
                .name
                .as_deref()
                .and_then(|name| self.inner.catalog.known(name))
            && let Some(Value::Object(arguments)) = params.get("arguments")
        {
            for declaration in tool.params() {
                if let Some(value) = declaration.argument(arguments).and_then(wire::param_value) {
                    out.params.push((declaration.header().clone(), value));
                }
            }
        }
        Ok(out)
    }

    /// Sends one request and returns its result object. A tool call the server refuses for its
    /// `Mcp-Param-*` headers (`-32020`) is sent once more after listing the tools again, when
    /// the listing changes what it declares: the server executed nothing.
    pub(super) async fn send(
        &self,
        method: &str,
        params: Map<String, Value>,
    ) -> Result<Map<String, Value>, ClientError> {
        let out = self.outgoing(method, params)?;
        match self.exchange(&out).await {
            Err(ClientError::Rpc(failure))
                if failure.code == i64::from(codes::HEADER_MISMATCH) && method == "tools/call" =>
            {
                let before = out.params.clone();
                // The params as sent, read back from the body (a rare path: no copy is kept).
                let Ok(Value::Object(mut request)) = serde_json::from_slice::<Value>(&out.body)
                else {
                    return Err(ClientError::Rpc(failure));
                };
                let Some(Value::Object(params)) = request.remove("params") else {
                    return Err(ClientError::Rpc(failure));
                };
                self.inner.catalog.invalidate();
                self.list_tools().await?;
                let again = self.outgoing(method, params)?;
                if again.params == before {
                    return Err(ClientError::Rpc(failure));
                }
                self.exchange(&again).await
            }
            answer => answer,
        }
    }

    /// One round trip, within the client's timeout.
    async fn exchange(&self, out: &Outgoing) -> Result<Map<String, Value>, ClientError> {
        let sending = self.inner.transport.send(out, &self.inner.sink);
        let answer = match self.inner.timeout {
            Some(limit) => tokio::time::timeout(limit, sending)
                .await
                .unwrap_or_else(|_| {
                    Err(ClientError::transport(
                        TransportErrorKind::Timeout,
                        format!("{} after {limit:?}", out.method),
                    ))
                }),
            None => sending.await,
        }?;
        match answer {
            Value::Object(result) => Ok(result),
            _ => Err(ClientError::Protocol(
                "a result that is not an object".into(),
            )),
        }
    }
}

impl Client {
    /// `params` of a tasks method: the task id, and the Tasks extension declared.
    fn task_params(&self, task_id: &str) -> Map<String, Value> {
        let mut meta = Map::new();
        meta.insert(CLIENT_CAPABILITIES.into(), Value::Object(self.with_tasks()));
        let mut params = Map::new();
        params.insert("taskId".into(), Value::String(task_id.to_owned()));
        params.insert("_meta".into(), Value::Object(meta));
        params
    }

    /// The task now (`tasks/get`).
    pub async fn get_task(&self, task_id: &str) -> Result<Task, ClientError> {
        let result = self.send("tasks/get", self.task_params(task_id)).await?;
        task(&result)
    }

    /// Sends answers to a task's requests for input (`tasks/update`).
    pub async fn update_task(
        &self,
        task_id: &str,
        responses: Map<String, Value>,
    ) -> Result<(), ClientError> {
        let mut params = self.task_params(task_id);
        params.insert("inputResponses".into(), Value::Object(responses));
        self.send("tasks/update", params).await.map(drop)
    }

    /// Asks the server to cancel a task (`tasks/cancel`); it may still end otherwise.
    pub async fn cancel_task(&self, task_id: &str) -> Result<(), ClientError> {
        self.send("tasks/cancel", self.task_params(task_id))
            .await
            .map(drop)
    }

    /// Polls a task until it ends, as often as it asks (`pollIntervalMs`), answering its
    /// requests for input with the client's input handler. Returns the tool's result; a task
    /// that failed or was cancelled is [`ClientError::Task`].
    pub async fn wait_task(&self, task_id: &str) -> Result<ToolResult, ClientError> {
        let mut answered: HashSet<String> = HashSet::new();
        loop {
            let task = self.get_task(task_id).await?;
            match task.status {
                TaskStatus::Completed => {
                    let Some(Value::Object(result)) = task.result else {
                        return Err(ClientError::Protocol(format!(
                            "task {task_id} completed without a result"
                        )));
                    };
                    return tool_result(result);
                }
                TaskStatus::Failed | TaskStatus::Cancelled => {
                    let message = task
                        .error
                        .as_ref()
                        .and_then(|error| error["message"].as_str())
                        .map(str::to_owned)
                        .or(task.status_message)
                        .unwrap_or_default();
                    return Err(ClientError::Task {
                        task_id: task.task_id,
                        status: task.status,
                        message,
                    });
                }
                _ => {}
            }
            // Keys are never reused over a task's life: each request is answered once.
            let open: Map<String, Value> = task
                .input_requests
                .into_iter()
                .filter(|(key, _)| !answered.contains(key))
                .collect();
            if !open.is_empty() {
                let keys: Vec<String> = open.keys().cloned().collect();
                let responses = self.answer(open).await?;
                self.update_task(task_id, responses).await?;
                answered.extend(keys);
                continue;
            }
            let interval = task
                .poll_interval_ms
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_POLL)
                .clamp(MIN_POLL, MAX_POLL);
            tokio::time::sleep(interval).await;
        }
    }
}

/// Reads a `CallToolResult`.
pub(super) fn tool_result(result: Map<String, Value>) -> Result<ToolResult, ClientError> {
    ToolResult::from_map(result).map_err(ClientError::Protocol)
}

/// Reads a task.
pub(super) fn task(result: &Map<String, Value>) -> Result<Task, ClientError> {
    Task::from_map(result).map_err(ClientError::Protocol)
}

/// Whether an error to `server/discover` is one a server of an earlier revision gives: it does
/// not know the method, or refuses a request without its session or handshake.
fn is_pre_revision(failure: &RpcFailure) -> bool {
    let code = failure.code;
    let too_many = failure.status == Some(429);
    code == i64::from(codes::METHOD_NOT_FOUND)
        || code == i64::from(codes::INVALID_REQUEST)
        || ((-32019..=-32000).contains(&code) && !too_many)
}
