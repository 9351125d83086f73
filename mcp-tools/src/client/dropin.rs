//! The drop-in harness: stdio to an MCP host, the harness's client to the server. Requests pass
//! through as they are, except that stateful tools are shown to the host with the arguments the
//! harness supplies made optional, and their calls get those arguments and are sent again with
//! them when an answer is lost. A host of an earlier revision gets its handshake answered here.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};

use super::api::tool_result;
use super::catalog::{self, ListedTool, StateRules};
use super::error::ClientError;
use super::harness::{Harness, Outcome, Prepared};
use super::records::{load_records, save_records};
use crate::protocol::codes;
use crate::protocol::framework::{STATE_META_KEY, VALIDATOR_META_KEY};
use crate::protocol::meta_keys::{
    CLIENT_CAPABILITIES, CLIENT_INFO, LOG_LEVEL, PROTOCOL_VERSION_KEY,
};
use crate::sync::lock;

/// The longest line a host may send.
const LINE_LIMIT: usize = 32 << 20;

/// How many calls waiting for their host's input (an `input_required` round) are remembered.
const ROUNDS_KEPT: usize = 256;

/// How many `input_required` rounds the harness answers for a host of an earlier revision.
const MAX_ROUNDS: usize = 16;

/// How long requests still running when the host closes its end may take to finish.
const DRAIN: Duration = Duration::from_secs(5);

/// What the harness supplied to a call that came back `input_required`: the host sends the
/// same call again with its answers and the `requestState`, and it must reach the server with
/// the same arguments, or the server's state would not open.
struct Round {
    /// The arguments as the host sent them.
    host_arguments: Value,
    /// The arguments as sent to the server.
    sent_arguments: Value,
    /// The validator the harness sent in `_meta`, if it did.
    validator: Option<Value>,
}

/// The state of one host's relay.
struct Relay {
    harness: Harness,
    /// Where the records are kept, when they are.
    records: Option<PathBuf>,
    // One save at a time (they write one file); each critical section is one whole save.
    saving: Mutex<()>,
    // Each critical section inserts, removes or reads one round: consistent after a panic.
    rounds: Mutex<(HashMap<String, Round>, VecDeque<String>)>,
    /// Lines for the host.
    out: mpsc::UnboundedSender<Vec<u8>>,
    // Set by a host of an earlier revision's `initialize`; replaced whole: consistent after a
    // panic.
    session: Mutex<Option<Session>>,
    // The host's answers awaited, by the id of the request the harness sent it; one insert or
    // remove per critical section.
    asked: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    next_ask: AtomicU64,
}

/// What a host of an earlier revision (2025-11-25 and before) declared in its `initialize`:
/// the harness answers the handshake itself and puts this in the `_meta` of each request it
/// relays, as 2026-07-28 asks.
#[derive(Clone)]
struct Session {
    capabilities: Value,
    client_info: Option<Value>,
    log_level: Option<Value>,
}

/// The protocol versions of the handshake the harness answers for hosts of earlier revisions,
/// newest first.
const EARLIER_REVISIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

impl Harness {
    /// Serves an MCP host on this process's standard input and output: see
    /// [`serve_io`](Self::serve_io).
    pub async fn serve_stdio(&self, records: Option<PathBuf>) -> Result<(), ClientError> {
        self.serve_io(tokio::io::stdin(), tokio::io::stdout(), records)
            .await
    }

    /// Serves an MCP host that speaks newline-delimited JSON-RPC on `reader` and `writer` (a
    /// host that runs this process as its stdio server), relaying its requests to the
    /// harness's server:
    ///
    /// - `tools/list` shows each stateful tool with the arguments the harness supplies
    ///   (`operation_id`, `expected_version`) optional, their descriptions saying so;
    /// - `tools/call` of a stateful tool gets them as [`call_with`](Self::call_with) supplies
    ///   them, from what this host was shown, and is sent again with them when its answer is
    ///   lost; the host gets the server's answer as it is (a retried change answers
    ///   `replayed`);
    /// - everything else passes through, progress and log notifications included, and a
    ///   host's `notifications/cancelled` cancels its request upstream;
    /// - a host of an earlier revision (2025-11-25 and before, which opens with `initialize`)
    ///   is answered in its revision: the handshake from what the server said when the harness
    ///   connected, its requests relayed with the capabilities it declared in `_meta`, results
    ///   without the members only 2026-07-28 has, and a tool's requests for input asked of it
    ///   as requests of its revision (`elicitation/create`), the call then sent again with its
    ///   answers.
    ///
    /// With `records`, what the host was shown is kept in that file ([`save_records`]) after
    /// every answer about a resource, and read back when serving starts: a host restarted with
    /// the same file goes on from what it was shown. Serving ends when the host closes its
    /// end; it fails at once on a records file that cannot be read or holds another server's
    /// records.
    pub async fn serve_io<R, W>(
        &self,
        reader: R,
        writer: W,
        records: Option<PathBuf>,
    ) -> Result<(), ClientError>
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        if let Some(path) = &records
            && path.exists()
        {
            for record in load_records(path)? {
                self.remember(record)?;
            }
        }
        let (out, lines) = mpsc::unbounded_channel::<Vec<u8>>();
        let notifications = out.clone();
        self.client().set_sink(Arc::new(move |message: Value| {
            let _ = notifications.send(line(&message));
        }));
        let relay = Arc::new(Relay {
            harness: self.clone(),
            records,
            saving: Mutex::new(()),
            rounds: Mutex::new((HashMap::new(), VecDeque::new())),
            out,
            session: Mutex::new(None),
            asked: Mutex::new(HashMap::new()),
            next_ask: AtomicU64::new(1),
        });
        let writing = tokio::spawn(write_lines(writer, lines));
        let read = relay.read_requests(reader).await;
        // The writer ends once every sender is gone: the relay's, and the client's sink.
        self.client().set_sink(Arc::new(|_| {}));
        drop(relay);
        let _ = writing.await;
        read
    }
}

impl Relay {
    async fn read_requests<R: AsyncRead + Unpin + Send>(
        self: &Arc<Self>,
        reader: R,
    ) -> Result<(), ClientError> {
        let mut reader = BufReader::new(reader);
        let mut running: JoinSet<()> = JoinSet::new();
        let mut by_id: HashMap<String, AbortHandle> = HashMap::new();
        let mut buffer = Vec::new();
        loop {
            buffer.clear();
            let read = (&mut reader)
                .take(LINE_LIMIT as u64 + 1)
                .read_until(b'\n', &mut buffer)
                .await
                .map_err(|error| ClientError::Local(format!("reading from the host: {error}")))?;
            if read == 0 {
                break;
            }
            while running.try_join_next().is_some() {}
            by_id.retain(|_, task| !task.is_finished());
            if buffer.len() > LINE_LIMIT && !buffer.ends_with(b"\n") {
                self.send(&error_response(
                    Value::Null,
                    i64::from(codes::INVALID_REQUEST),
                    &format!("A line longer than {LINE_LIMIT} bytes"),
                ));
                skip_line(&mut reader).await?;
                continue;
            }
            let text = buffer.trim_ascii();
            if text.is_empty() {
                continue;
            }
            let message: Value = match serde_json::from_slice(text) {
                Ok(message) => message,
                Err(error) => {
                    self.send(&error_response(
                        Value::Null,
                        i64::from(codes::PARSE_ERROR),
                        &format!("Not JSON: {error}"),
                    ));
                    continue;
                }
            };
            let method = message.get("method").and_then(Value::as_str);
            let id = message.get("id").filter(|id| !id.is_null()).cloned();
            match (method, id) {
                (Some(method), Some(id)) => {
                    let params = match message.get("params") {
                        Some(Value::Object(params)) => params.clone(),
                        None | Some(Value::Null) => Map::new(),
                        Some(_) => {
                            self.send(&error_response(
                                id,
                                i64::from(codes::INVALID_PARAMS),
                                "params must be an object",
                            ));
                            continue;
                        }
                    };
                    let relay = Arc::clone(self);
                    let method = method.to_owned();
                    let key = id.to_string();
                    let task = running.spawn(async move { relay.answer(id, method, params).await });
                    by_id.insert(key, task);
                }
                (Some("notifications/cancelled"), None) => {
                    let key = message["params"]["requestId"].to_string();
                    if let Some(task) = by_id.remove(&key) {
                        task.abort();
                    }
                }
                // The host's answer to a request of the harness (an elicitation a host of an
                // earlier revision is asked for).
                (None, Some(id)) => {
                    if let Some(waiting) = lock(&self.asked).remove(&id.to_string()) {
                        let _ = waiting.send(message);
                    }
                }
                // Other notifications: ignored.
                _ => {}
            }
        }
        // The host closed its end: requests still running may finish for a while.
        let drained = tokio::time::timeout(DRAIN, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            running.abort_all();
        }
        Ok(())
    }

    fn send(&self, message: &Value) {
        let _ = self.out.send(line(message));
    }

    /// Answers one request of the host.
    async fn answer(&self, id: Value, method: String, mut params: Map<String, Value>) {
        let modern = params
            .get("_meta")
            .and_then(|meta| meta.get(PROTOCOL_VERSION_KEY))
            .is_some();
        if !modern {
            match method.as_str() {
                "initialize" => return self.reply(&id, self.initialize(&params), false),
                "ping" => return self.reply(&id, Ok(Map::new()), false),
                "logging/setLevel" => {
                    if let Some(session) = lock(&self.session).as_mut() {
                        session.log_level = params.get("level").cloned();
                    }
                    return self.reply(&id, Ok(Map::new()), false);
                }
                _ => self.modernize(&mut params),
            }
        }
        let answer = match method.as_str() {
            "tools/list" => self.list(params).await,
            "tools/call" => self.call(params, !modern).await,
            "subscriptions/listen" if modern => return self.listen(id, params).await,
            _ => self.harness.client().send(&method, params).await,
        };
        self.reply(&id, answer, modern);
    }

    /// Sends the host the answer to its request `id`; a host of an earlier revision gets
    /// the result without what only 2026-07-28 results carry.
    fn reply(&self, id: &Value, answer: Result<Map<String, Value>, ClientError>, modern: bool) {
        let message = match answer {
            Ok(mut result) => {
                if !modern {
                    for key in ["resultType", "ttlMs", "cacheScope"] {
                        result.remove(key);
                    }
                }
                json!({ "jsonrpc": "2.0", "id": id, "result": result })
            }
            Err(error) => {
                let mut message = json!({ "jsonrpc": "2.0", "id": id });
                message["error"] = error_object(&error);
                message
            }
        };
        self.send(&message);
    }

    /// The handshake of a host of an earlier revision, answered here from what the server
    /// said when the harness connected.
    fn initialize(&self, params: &Map<String, Value>) -> Result<Map<String, Value>, ClientError> {
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = asked
            .filter(|asked| EARLIER_REVISIONS.contains(asked))
            .unwrap_or(EARLIER_REVISIONS[0]);
        *lock(&self.session) = Some(Session {
            capabilities: params
                .get("capabilities")
                .filter(|capabilities| capabilities.is_object())
                .cloned()
                .unwrap_or_else(|| json!({})),
            client_info: params.get("clientInfo").cloned(),
            log_level: None,
        });
        let discovery = self.harness.client().discovery();
        let mut capabilities = discovery
            .as_ref()
            .map(|discovery| discovery.capabilities.clone())
            .unwrap_or_default();
        // Extensions are negotiated per request in 2026-07-28; the handshake has none.
        capabilities.remove("extensions");
        let mut result = Map::new();
        result.insert("protocolVersion".into(), json!(version));
        result.insert("capabilities".into(), Value::Object(capabilities));
        let server_info = discovery
            .as_ref()
            .and_then(|discovery| discovery.server_info.clone())
            .unwrap_or_else(
                || json!({ "name": "mcp-tools harness", "version": env!("CARGO_PKG_VERSION") }),
            );
        result.insert("serverInfo".into(), server_info);
        if let Some(instructions) = discovery.and_then(|discovery| discovery.instructions) {
            result.insert("instructions".into(), Value::String(instructions));
        }
        Ok(result)
    }

    /// The `_meta` 2026-07-28 asks of a request of a host of an earlier revision: what it
    /// declared in its handshake.
    fn modernize(&self, params: &mut Map<String, Value>) {
        let session = lock(&self.session).clone();
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(meta) = meta else {
            return;
        };
        meta.insert(
            PROTOCOL_VERSION_KEY.into(),
            json!(crate::protocol::PROTOCOL_VERSION),
        );
        let Some(session) = session else {
            return;
        };
        meta.insert(CLIENT_CAPABILITIES.into(), session.capabilities);
        if let Some(info) = session.client_info {
            meta.insert(CLIENT_INFO.into(), info);
        }
        if let Some(level) = session.log_level {
            meta.insert(LOG_LEVEL.into(), level);
        }
    }

    /// Asks a host of an earlier revision what a tool's `inputRequests` ask, as requests of
    /// its revision (`elicitation/create`, `sampling/createMessage`, `roots/list`), and returns
    /// its answers as `inputResponses`.
    async fn ask_host(
        &self,
        requests: &Map<String, Value>,
    ) -> Result<Map<String, Value>, ClientError> {
        let mut responses = Map::new();
        for (key, request) in requests {
            let id = format!("harness-{}", self.next_ask.fetch_add(1, Ordering::Relaxed));
            let (answer, answered) = oneshot::channel();
            lock(&self.asked).insert(Value::String(id.clone()).to_string(), answer);
            let mut message = json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": request["method"],
                "params": request.get("params").cloned().unwrap_or_else(|| json!({})),
            });
            if message["method"].as_str().is_none() {
                message["method"] = json!("elicitation/create");
            }
            self.send(&message);
            let answer = answered.await.map_err(|_| {
                ClientError::InputRequired(format!("the host did not answer {key}"))
            })?;
            match (answer.get("result"), answer.get("error")) {
                (Some(result), _) => {
                    responses.insert(key.clone(), result.clone());
                }
                (None, Some(error)) => {
                    return Err(ClientError::InputRequired(format!(
                        "the host refused {key}: {}",
                        error["message"].as_str().unwrap_or("(no message)")
                    )));
                }
                (None, None) => {
                    return Err(ClientError::InputRequired(format!(
                        "the host answered {key} with neither a result nor an error"
                    )));
                }
            }
        }
        Ok(responses)
    }

    /// `tools/list`, page by page as the host asks: the stateful tools shown with what the
    /// harness supplies made optional. A whole listing in one page is kept as the harness's
    /// own.
    async fn list(&self, params: Map<String, Value>) -> Result<Map<String, Value>, ClientError> {
        let first_page = !params.contains_key("cursor");
        let mut result = self.harness.client().send("tools/list", params).await?;
        if first_page && !result.contains_key("nextCursor") {
            let page = catalog::page(&result)?;
            self.harness
                .client()
                .inner
                .catalog
                .store(page.tools, Some(Duration::from_millis(page.ttl_ms)));
        }
        if let Some(Value::Array(tools)) = result.get_mut("tools") {
            for tool in tools {
                offer(tool);
            }
        }
        Ok(result)
    }

    /// `tools/call`, one round: the harness's arguments supplied, sent again while its answer
    /// is lost, what it shows remembered.
    async fn call(
        &self,
        params: Map<String, Value>,
        earlier: bool,
    ) -> Result<Map<String, Value>, ClientError> {
        let client = self.harness.client();
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let tool = self.harness.listed(&name).await?;
        let host_arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
        let prepared = match self.continued(&params) {
            Some(params) => {
                let rules = tool.as_ref().and_then(ListedTool::state_rules).cloned();
                let handle = handle_of(&params, rules.as_ref());
                Prepared {
                    retry_safe: rules.is_some(),
                    params,
                    rules,
                    handle,
                }
            }
            None => self.harness.prepare(tool.as_ref(), params)?,
        };
        let mut prepared = prepared;
        let policy = self.harness.inner.retry;
        let mut attempt = 0;
        let mut rounds = 0;
        loop {
            attempt += 1;
            let last = attempt >= policy.attempts;
            match client.send("tools/call", prepared.params.clone()).await {
                Ok(mut result) => {
                    match result.get("resultType").and_then(Value::as_str) {
                        // A host of an earlier revision is asked, and the call sent again
                        // with its answers, the same arguments and the server's state.
                        Some("input_required") if earlier => {
                            rounds += 1;
                            if rounds > MAX_ROUNDS {
                                return Err(ClientError::InputRequired(format!(
                                    "{name} asked for input {MAX_ROUNDS} times in a row"
                                )));
                            }
                            let requests = match result.remove("inputRequests") {
                                Some(Value::Object(requests)) => requests,
                                _ => Map::new(),
                            };
                            let responses = self.ask_host(&requests).await?;
                            prepared.params.remove("inputResponses");
                            prepared.params.remove("requestState");
                            if !responses.is_empty() {
                                prepared
                                    .params
                                    .insert("inputResponses".into(), Value::Object(responses));
                            }
                            if let Some(state) = result.remove("requestState") {
                                prepared.params.insert("requestState".into(), state);
                            }
                            attempt = 0;
                            continue;
                        }
                        Some("input_required") => {
                            self.keep_round(&result, &prepared, host_arguments.clone());
                            return Ok(result);
                        }
                        Some("task") => return Ok(result),
                        _ => {}
                    }
                    let outcome = match tool_result(result.clone()) {
                        Ok(parsed) => Outcome::read(parsed, prepared.rules.is_some()),
                        Err(_) => return Ok(result),
                    };
                    if prepared.retry_safe && !last && outcome.retry_later() {
                        tokio::time::sleep(policy.pause(attempt, None)).await;
                        continue;
                    }
                    if prepared.rules.is_some() {
                        self.harness.observe(&prepared, &outcome);
                        self.save();
                    }
                    return Ok(result);
                }
                Err(error) if prepared.retry_safe && !last && error.is_retryable() => {
                    tracing::info!(%error, tool = name, "the answer was lost; sending the same call again");
                    tokio::time::sleep(policy.pause(attempt, error.retry_after())).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// For the host's next round of a call that came back `input_required`: what was sent.
    fn keep_round(&self, result: &Map<String, Value>, prepared: &Prepared, host_arguments: Value) {
        let Some(Value::String(state)) = result.get("requestState") else {
            return;
        };
        if prepared.rules.is_none() {
            return;
        }
        let round = Round {
            host_arguments,
            sent_arguments: prepared
                .params
                .get("arguments")
                .cloned()
                .unwrap_or(Value::Null),
            validator: prepared
                .params
                .get("_meta")
                .and_then(|meta| meta.get(VALIDATOR_META_KEY))
                .cloned(),
        };
        let mut rounds = lock(&self.rounds);
        let (kept, order) = &mut *rounds;
        if kept.insert(state.clone(), round).is_none() {
            order.push_back(state.clone());
        }
        while order.len() > ROUNDS_KEPT {
            if let Some(oldest) = order.pop_front() {
                kept.remove(&oldest);
            }
        }
    }

    /// The params of the host's next round of a call the harness prepared: its arguments as
    /// they were sent the first time.
    fn continued(&self, params: &Map<String, Value>) -> Option<Map<String, Value>> {
        let Some(Value::String(state)) = params.get("requestState") else {
            return None;
        };
        let rounds = lock(&self.rounds);
        let round = rounds.0.get(state)?;
        let host_arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
        if host_arguments != round.host_arguments {
            return None;
        }
        let mut params = params.clone();
        params.insert("arguments".into(), round.sent_arguments.clone());
        if let Some(validator) = &round.validator {
            let meta = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert(VALIDATOR_META_KEY.into(), validator.clone());
            }
        }
        Some(params)
    }

    /// Writes what the host was shown to the records file, when there is one.
    fn save(&self) {
        let Some(path) = &self.records else {
            return;
        };
        let _one_at_a_time = lock(&self.saving);
        if let Err(error) = save_records(path, &self.harness.records()) {
            tracing::warn!(%error, "the resumption records could not be saved");
        }
    }

    /// `subscriptions/listen`: the stream relayed as it comes, its subscription id the host's
    /// request id, until either side ends it.
    async fn listen(&self, id: Value, params: Map<String, Value>) {
        let client = self.harness.client();
        let out = match client.outgoing("subscriptions/listen", params) {
            Ok(out) => out,
            Err(error) => {
                let mut message = json!({ "jsonrpc": "2.0", "id": id });
                message["error"] = error_object(&error);
                return self.send(&message);
            }
        };
        let (sender, mut messages) = mpsc::channel(64);
        let inner = Arc::clone(&client.inner);
        let streaming = tokio::spawn(async move { inner.transport.stream(&out, sender).await });
        let _stop = AbortOnDrop(streaming.abort_handle());
        while let Some(message) = messages.recv().await {
            let mut message = match message {
                Ok(message) => message,
                Err(error) => {
                    let mut message = json!({ "jsonrpc": "2.0", "id": id });
                    message["error"] = error_object(&error);
                    return self.send(&message);
                }
            };
            let response = message.get("method").is_none();
            if response {
                message["id"] = id.clone();
            } else if let Some(Value::Object(meta)) = message
                .get_mut("params")
                .and_then(|params| params.get_mut("_meta"))
                && meta.contains_key("io.modelcontextprotocol/subscriptionId")
            {
                meta.insert("io.modelcontextprotocol/subscriptionId".into(), id.clone());
            }
            if message["method"] == "notifications/cancelled" {
                message["params"]["requestId"] = id.clone();
            }
            self.send(&message);
            if response {
                return;
            }
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The handle a call names, by the tool's rules.
fn handle_of(params: &Map<String, Value>, rules: Option<&StateRules>) -> Option<String> {
    let name = rules?.handle_argument()?;
    params
        .get("arguments")?
        .get(name)?
        .as_str()
        .map(str::to_owned)
}

/// A stateful tool as the host sees it: the arguments the harness supplies are optional, and
/// their descriptions say so.
fn offer(tool: &mut Value) {
    let Some(rules) = tool
        .get("_meta")
        .and_then(|meta| meta.get(STATE_META_KEY))
        .cloned()
    else {
        return;
    };
    let kind = rules["resource"].as_str().unwrap_or("resource").to_owned();
    let supplied = [
        (
            rules["idempotency"].as_str(),
            "Optional: leave it out. The harness between you and the server sends a new unique id \
             for this change, and the same one again if it has to resend the change after a lost \
             answer, so it is applied once. Send one only to retry a change yourself."
                .to_owned(),
        ),
        (
            rules["precondition"].as_str(),
            format!(
                "Optional: leave it out. The harness between you and the server sends the version \
                 of the {kind} that the last result you were shown about it had, so if the {kind} \
                 changed since, nothing is applied and the result is `stale_view` with what \
                 changed. Send it only to base this change on another version."
            ),
        ),
    ];
    let Some(schema) = tool.get_mut("inputSchema").and_then(Value::as_object_mut) else {
        return;
    };
    for (argument, description) in supplied {
        let Some(argument) = argument else {
            continue;
        };
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|name| name != argument);
        }
        if let Some(Value::Object(property)) = schema
            .get_mut("properties")
            .and_then(|properties| properties.get_mut(argument))
        {
            property.insert("description".into(), Value::String(description));
        }
    }
}

/// The JSON-RPC error the host gets for a failure.
fn error_object(error: &ClientError) -> Value {
    match error {
        ClientError::Rpc(failure) => failure.to_error_object(),
        ClientError::InvalidRequest(message) => {
            json!({ "code": codes::INVALID_PARAMS, "message": message })
        }
        other => json!({
            "code": codes::INTERNAL_ERROR,
            "message": format!("The harness got no answer from the server: {other}"),
        }),
    }
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

fn line(message: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("JSON serializes");
    line.push(b'\n');
    line
}

/// Skips the rest of a line too long to keep.
async fn skip_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> Result<(), ClientError> {
    loop {
        let buffer = reader
            .fill_buf()
            .await
            .map_err(|error| ClientError::Local(format!("reading from the host: {error}")))?;
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(());
            }
            None => {
                let all = buffer.len();
                reader.consume(all);
            }
        }
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    while let Some(line) = lines.recv().await {
        let written = async {
            writer.write_all(&line).await?;
            writer.flush().await
        };
        if written.await.is_err() {
            return;
        }
    }
}
