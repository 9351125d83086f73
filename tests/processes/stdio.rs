//! The stdio transport: newline-delimited JSON-RPC over in-memory pipes against `serve_io`, the
//! quickstart example as a real child process, and every line the server writes checked against
//! the official schema.

use crate::common;

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use common::oauth::RESOURCE;
use common::tools::tool_set;
use common::{assert_conforms, within};
use mcp_tools::auth::{JwtVerifier, OAuth};
use mcp_tools::auth::{Principal, Unauthorized};
use mcp_tools::tools::{NoArgs, Tool, ToolInfo};
use mcp_tools::{Context, McpServer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

/// A client of `serve_io` over two in-memory pipes.
struct Pipe {
    input: Option<DuplexStream>,
    output: Lines<BufReader<DuplexStream>>,
    serving: JoinHandle<std::io::Result<()>>,
}

impl Pipe {
    fn start(server: McpServer) -> Pipe {
        // Small pipes, so a writer that ran ahead of the server would block rather than buffer.
        let (input, server_input) = tokio::io::duplex(1024);
        let (server_output, output) = tokio::io::duplex(1024);
        let serving =
            tokio::spawn(async move { server.serve_io(server_input, server_output).await });
        Pipe {
            input: Some(input),
            output: BufReader::new(output).lines(),
            serving,
        }
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        let input = self.input.as_mut().expect("the input is open");
        within("writing to the server's input", input.write_all(bytes))
            .await
            .unwrap();
    }

    async fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.send_raw(&line).await;
    }

    /// The next line the server wrote, checked against the official schema as what it is.
    async fn next(&mut self) -> Value {
        let line = within("a line from the server", self.output.next_line())
            .await
            .unwrap()
            .expect("the server wrote another line before its output ended");
        let message = parse_line(&line);
        conforms(&message);
        message
    }

    /// Closes the input, then collects every line written before the output ended and what
    /// `serve_io` returned.
    async fn end(mut self) -> (Vec<Value>, std::io::Result<()>) {
        drop(self.input.take());
        let mut rest = Vec::new();
        while let Some(line) = within("the rest of the output", self.output.next_line())
            .await
            .unwrap()
        {
            let message = parse_line(&line);
            conforms(&message);
            rest.push(message);
        }
        let served = within("serve_io to return", self.serving).await.unwrap();
        (rest, served)
    }
}

fn parse_line(line: &str) -> Value {
    assert!(
        !line.contains('\r'),
        "a line with a carriage return: {line:?}"
    );
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON message ({e}): {line:?}"))
}

/// Checks a written message against the official definition of its kind: a result, an error
/// or a server notification. Results of the 2025-11-25 era are checked by `common::assert_legacy_result`.
fn conforms(message: &Value) {
    assert_eq!(message["jsonrpc"], "2.0", "{message}");
    if message.get("error").is_some() {
        assert_conforms("JSONRPCErrorResponse", message);
    } else if message.get("result").is_some() {
        if message["result"].get("resultType").is_some() {
            assert_conforms("JSONRPCResultResponse", message);
        } else {
            common::assert_legacy_result(message);
        }
    } else {
        assert_conforms("JSONRPCNotification", message);
        assert_conforms("ServerNotification", message);
    }
}

fn request(id: Value, method: &str, mut params: Value) -> Value {
    params["_meta"] = common::meta();
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

fn call(id: Value, name: &str, arguments: Value) -> Value {
    request(
        id,
        "tools/call",
        json!({ "name": name, "arguments": arguments }),
    )
}

fn cancel(id: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": id, "reason": "no longer needed" } })
}

fn error_code(message: &Value) -> Option<i64> {
    message["error"]["code"].as_i64()
}

/// A tool that reports `steps` of progress and that it started, then waits to be released; it
/// reports being dropped before it was released.
struct Gate {
    steps: u32,
    started: mpsc::UnboundedSender<()>,
    release: Arc<Notify>,
    dropped: mpsc::UnboundedSender<()>,
}

/// The test's side of a [`Gate`].
struct GateHandles {
    started: mpsc::UnboundedReceiver<()>,
    release: Arc<Notify>,
    dropped: mpsc::UnboundedReceiver<()>,
}

impl GateHandles {
    async fn started(&mut self) {
        within("the gate tool to start", self.started.recv())
            .await
            .unwrap();
    }

    async fn dropped(&mut self) {
        within("the gate tool to be dropped", self.dropped.recv())
            .await
            .unwrap();
    }
}

fn new_gate() -> (Gate, GateHandles) {
    new_gate_with_steps(1)
}

fn new_gate_with_steps(steps: u32) -> (Gate, GateHandles) {
    let (started, started_rx) = mpsc::unbounded_channel();
    let (dropped, dropped_rx) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    (
        Gate {
            steps,
            started,
            release: Arc::clone(&release),
            dropped,
        },
        GateHandles {
            started: started_rx,
            release,
            dropped: dropped_rx,
        },
    )
}

struct DropSignal {
    dropped: mpsc::UnboundedSender<()>,
    finished: bool,
}

impl Drop for DropSignal {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.dropped.send(());
        }
    }
}

impl Tool for Gate {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("gate", "Waits until the test releases it.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> &'static str {
        let mut signal = DropSignal {
            dropped: self.dropped.clone(),
            finished: false,
        };
        for step in 1..=self.steps {
            cx.progress(f64::from(step), None, Some("waiting"));
        }
        let _ = self.started.send(());
        self.release.notified().await;
        signal.finished = true;
        "released"
    }
}

/// Reports three steps of progress, then answers.
struct Steps;

impl Tool for Steps {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("steps", "Reports three steps of progress.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> &'static str {
        for step in 1..=3 {
            cx.progress(f64::from(step), Some(3.0), Some("step"));
        }
        "done"
    }
}

/// Panics.
struct Boom;

impl Tool for Boom {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("boom", "Panics.")
    }
    async fn call(&self, _: NoArgs, _: Context) -> &'static str {
        panic!("the boom tool panics")
    }
}

/// Names the calling principal.
struct Who;

impl Tool for Who {
    type Args = NoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("who", "Names the caller.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> String {
        format!("caller {:?}", cx.principal().key())
    }
}

fn server_with(
    gate: Gate,
    build: impl FnOnce(mcp_tools::McpServerBuilder) -> mcp_tools::McpServerBuilder,
) -> McpServer {
    build(
        McpServer::builder("stdio-test", "1.0.0")
            .tools(tool_set(0).with(gate).with(Steps).with(Who).with(Boom)),
    )
    .build()
    .unwrap()
}

fn server(gate: Gate) -> McpServer {
    server_with(gate, |builder| builder)
}

fn text(message: &Value) -> &str {
    message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {message}"))
}

#[tokio::test]
async fn discover_list_and_call_are_each_answered_with_one_line() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    pipe.send(&request(json!(1), "server/discover", json!({})))
        .await;
    let discover = pipe.next().await;
    assert_conforms("DiscoverResultResponse", &discover);
    assert_eq!(discover["id"], 1);
    assert_eq!(discover["result"]["supportedVersions"][0], "2026-07-28");

    pipe.send(&request(json!("list"), "tools/list", json!({})))
        .await;
    let list = pipe.next().await;
    assert_conforms("ListToolsResultResponse", &list);
    assert_eq!(list["id"], "list");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["echo", "math/divide", "gate", "steps", "who", "boom"]
    );

    pipe.send(&call(json!(3), "echo", json!({ "text": "over\nstdio" })))
        .await;
    let echoed = pipe.next().await;
    assert_conforms("CallToolResultResponse", &echoed);
    assert_eq!(echoed["id"], 3);
    assert_eq!(text(&echoed), "over\nstdio");

    // An unknown tool is an error answer, and serving goes on.
    pipe.send(&call(json!(4), "nope", json!({}))).await;
    let unknown = pipe.next().await;
    assert_eq!(
        (unknown["id"].clone(), error_code(&unknown)),
        (json!(4), Some(-32602))
    );
    let (rest, served) = pipe.end().await;
    assert_eq!(rest, Vec::<Value>::new());
    served.unwrap();
}

#[tokio::test]
async fn progress_notifications_are_written_before_the_result() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    let mut steps = call(json!(1), "steps", json!({}));
    steps["params"]["_meta"]["progressToken"] = json!("p-1");
    pipe.send(&steps).await;
    for step in 1..=3 {
        let progress = pipe.next().await;
        assert_conforms("ProgressNotification", &progress);
        assert_eq!(progress["params"]["progressToken"], "p-1");
        assert_eq!(progress["params"]["progress"], json!(f64::from(step)));
        assert_eq!(progress["params"]["total"], json!(3.0));
    }
    let result = pipe.next().await;
    assert_conforms("CallToolResultResponse", &result);
    assert_eq!((result["id"].clone(), text(&result)), (json!(1), "done"));
    let (rest, served) = pipe.end().await;
    assert_eq!(rest, Vec::<Value>::new());
    served.unwrap();
}

#[tokio::test]
async fn a_slow_call_is_overtaken_by_a_list_sent_after_it() {
    let (gate, mut handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    pipe.send(&call(json!("slow"), "gate", json!({}))).await;
    handles.started().await;
    pipe.send(&request(json!("fast"), "tools/list", json!({})))
        .await;
    let list = pipe.next().await;
    assert_eq!(
        list["id"], "fast",
        "the list waited for the slow call: {list}"
    );
    assert_conforms("ListToolsResultResponse", &list);
    handles.release.notify_one();
    let slow = pipe.next().await;
    assert_conforms("CallToolResultResponse", &slow);
    assert_eq!(
        (slow["id"].clone(), text(&slow)),
        (json!("slow"), "released")
    );
    pipe.end().await.1.unwrap();
}

#[tokio::test]
async fn past_the_requests_in_flight_the_server_reads_no_more_input() {
    let (gate, mut handles) = new_gate();
    let mut pipe = Pipe::start(server_with(gate, |builder| {
        builder.max_in_flight_per_principal(4)
    }));
    for n in 0..4 {
        pipe.send(&call(json!(n), "gate", json!({}))).await;
        handles.started().await;
    }
    // Four requests wait at the gate: the server reads no more, so these lines stay in the
    // 1 KiB pipe and the writer, past it, waits.
    let mut more = Vec::new();
    for n in 4..64 {
        more.extend(serde_json::to_vec(&request(json!(n), "tools/list", json!({}))).unwrap());
        more.push(b'\n');
    }
    let input = pipe.input.as_mut().unwrap();
    let mut writing = std::pin::pin!(input.write_all(&more));
    // A bounded look for a write that must not finish while the four wait.
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(500), &mut writing)
            .await
            .is_err(),
        "the server kept reading past four requests in flight"
    );
    handles.release.notify_waiters();
    within("the rest of the input to be read", writing)
        .await
        .unwrap();
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..64 {
        answered.insert(pipe.next().await["id"].as_i64().unwrap());
    }
    assert_eq!(answered, (0..64).collect());
    pipe.end().await.1.unwrap();
}

#[tokio::test]
async fn a_cancelled_call_is_dropped_and_never_answered() {
    let (gate, mut handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    let mut slow = call(json!("slow"), "gate", json!({}));
    slow["params"]["_meta"]["progressToken"] = json!(7);
    pipe.send(&slow).await;
    handles.started().await;
    let progress = pipe.next().await;
    assert_conforms("ProgressNotification", &progress);
    pipe.send(&cancel(json!("slow"))).await;
    handles.dropped().await;
    // A release now finds no call to let go; a later request is answered, the cancelled one
    // never is.
    handles.release.notify_one();
    pipe.send(&call(json!(2), "echo", json!({ "text": "after" })))
        .await;
    let after = pipe.next().await;
    assert_eq!((after["id"].clone(), text(&after)), (json!(2), "after"));
    let (rest, served) = pipe.end().await;
    served.unwrap();
    assert_eq!(
        rest,
        Vec::<Value>::new(),
        "lines written after the cancellation"
    );
}

#[tokio::test]
async fn a_cancellation_of_an_unknown_or_finished_id_is_ignored() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    pipe.send(&call(json!(1), "echo", json!({ "text": "done" })))
        .await;
    assert_eq!(pipe.next().await["id"], 1);
    for id in [
        json!(1),
        json!(99),
        json!("never-sent"),
        json!({ "not": "an id" }),
    ] {
        pipe.send(&cancel(id)).await;
    }
    pipe.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled" }))
        .await;
    pipe.send(&call(json!(2), "echo", json!({ "text": "still here" })))
        .await;
    let answer = pipe.next().await;
    assert_eq!(
        (answer["id"].clone(), text(&answer)),
        (json!(2), "still here")
    );
    let (rest, served) = pipe.end().await;
    assert_eq!(rest, Vec::<Value>::new());
    served.unwrap();
}

#[tokio::test]
async fn a_panicking_tool_is_answered_with_an_internal_error_and_serving_goes_on() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    pipe.send(&call(json!("boom"), "boom", json!({}))).await;
    let failed = pipe.next().await;
    assert_eq!(
        (failed["id"].clone(), error_code(&failed)),
        (json!("boom"), Some(-32603))
    );
    pipe.send(&call(json!(2), "echo", json!({ "text": "after" })))
        .await;
    assert_eq!(text(&pipe.next().await), "after");
    pipe.end().await.1.unwrap();
}

#[tokio::test]
async fn a_malformed_line_gets_a_parse_error_and_serving_goes_on() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    pipe.send_raw(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\"\n")
        .await;
    let parse = pipe.next().await;
    assert_eq!(error_code(&parse), Some(-32700), "{parse}");
    assert!(parse.get("id").is_none(), "{parse}");
    pipe.send_raw(b"[{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"tools/list\"}]\n")
        .await;
    let batch = pipe.next().await;
    assert_eq!(error_code(&batch), Some(-32600), "{batch}");
    pipe.send(&json!({ "jsonrpc": "1.0", "id": 3, "method": "tools/list" }))
        .await;
    let version = pipe.next().await;
    assert_eq!(
        (version["id"].clone(), error_code(&version)),
        (json!(3), Some(-32600))
    );
    pipe.send(&request(json!(4), "server/discover", json!({})))
        .await;
    assert_conforms("DiscoverResultResponse", &pipe.next().await);
    pipe.end().await.1.unwrap();
}

const LIMIT: usize = 1024;

/// A request line of exactly `length` bytes, padded inside the JSON with spaces.
fn padded_request(id: i64, length: usize) -> Vec<u8> {
    let mut line = serde_json::to_vec(&call(json!(id), "echo", json!({ "text": "fits" }))).unwrap();
    assert!(line.len() < length);
    line.splice(1..1, std::iter::repeat_n(b' ', length - line.len()));
    assert_eq!(line.len(), length);
    line
}

#[tokio::test]
async fn a_line_over_the_limit_is_refused_before_it_ends_and_serving_goes_on() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server_with(gate, |b| b.body_limit(LIMIT)));
    // Ten times the limit, on one line. The refusal comes while the line is still being sent,
    // so the server cannot be holding it whole.
    let oversized = padded_request(1, 10 * LIMIT);
    pipe.send_raw(&oversized[..2 * LIMIT]).await;
    let refused = pipe.next().await;
    assert_eq!(error_code(&refused), Some(-32600), "{refused}");
    assert!(refused.get("id").is_none(), "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains(&LIMIT.to_string()), "{message}");
    pipe.send_raw(&oversized[2 * LIMIT..]).await;
    pipe.send_raw(b"\n").await;
    // The rest of that line was skipped, not read as messages of its own.
    pipe.send(&call(json!(2), "echo", json!({ "text": "next" })))
        .await;
    let next = pipe.next().await;
    assert_eq!((next["id"].clone(), text(&next)), (json!(2), "next"));
    // Exactly the limit is served; one byte more is not.
    let mut exact = padded_request(3, LIMIT);
    exact.push(b'\n');
    pipe.send_raw(&exact).await;
    assert_eq!(pipe.next().await["id"], 3);
    let mut over = padded_request(4, LIMIT + 1);
    over.push(b'\n');
    pipe.send_raw(&over).await;
    assert_eq!(error_code(&pipe.next().await), Some(-32600));
    let (rest, served) = pipe.end().await;
    assert_eq!(rest, Vec::<Value>::new());
    served.unwrap();
}

#[tokio::test]
async fn blank_lines_are_ignored_and_crlf_endings_accepted() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server_with(gate, |b| b.body_limit(LIMIT)));
    pipe.send_raw(b"\n   \r\n\t\n").await;
    // A line of exactly the limit, ended by `\r\n`: the `\r` is the ending, not the message.
    let mut line = padded_request(1, LIMIT);
    line.extend_from_slice(b"\r\n");
    pipe.send_raw(&line).await;
    let answer = pipe.next().await;
    assert_eq!((answer["id"].clone(), text(&answer)), (json!(1), "fits"));
    let (rest, served) = pipe.end().await;
    assert_eq!(rest, Vec::<Value>::new(), "blank lines were answered");
    served.unwrap();
}

#[tokio::test]
async fn a_second_request_with_the_id_of_one_in_flight_is_refused() {
    let (gate, mut handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    pipe.send(&call(json!(5), "gate", json!({}))).await;
    handles.started().await;
    pipe.send(&call(json!(5), "echo", json!({ "text": "twin" })))
        .await;
    let refused = pipe.next().await;
    assert_eq!(
        (refused["id"].clone(), error_code(&refused)),
        (json!(5), Some(-32600))
    );
    handles.release.notify_one();
    let first = pipe.next().await;
    assert_eq!((first["id"].clone(), text(&first)), (json!(5), "released"));
    // Once answered, the id may be used again.
    pipe.send(&call(json!(5), "echo", json!({ "text": "again" })))
        .await;
    assert_eq!(text(&pipe.next().await), "again");
    pipe.end().await.1.unwrap();
}

#[tokio::test]
async fn a_legacy_client_is_served_after_initialize() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server_with(gate, |b| b.instructions("Stdio test.")));
    pipe.send(
        &json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": { "name": "old", "version": "1" } } }),
    )
    .await;
    let initialized = pipe.next().await;
    assert_eq!(initialized["id"], 0, "{initialized}");
    assert_eq!(initialized["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(
        initialized["result"]["serverInfo"],
        json!({ "name": "stdio-test", "version": "1.0.0" })
    );
    assert_eq!(initialized["result"]["instructions"], "Stdio test.");
    pipe.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    pipe.send(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
        .await;
    // The notification was accepted quietly: the next line answers the list.
    let list = pipe.next().await;
    assert_eq!(list["id"], 1, "{list}");
    assert_eq!(list["result"]["tools"].as_array().unwrap().len(), 6);
    pipe.send(&json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "old" } } }))
        .await;
    let echoed = pipe.next().await;
    assert_eq!((echoed["id"].clone(), text(&echoed)), (json!(2), "old"));
    pipe.end().await.1.unwrap();
}

#[tokio::test]
async fn a_legacy_client_of_a_modern_only_server_is_told_the_versions_served() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server_with(gate, |b| b.legacy_era(false)));
    pipe.send(
        &json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": { "name": "old", "version": "1" } } }),
    )
    .await;
    let refused = pipe.next().await;
    assert_conforms("UnsupportedProtocolVersionError", &refused);
    assert_eq!(
        refused["error"]["data"],
        json!({ "supported": ["2026-07-28"], "requested": "2025-11-25" })
    );
    pipe.end().await.1.unwrap();
}

fn listen(id: Value, filter: Value) -> Value {
    request(
        id,
        "subscriptions/listen",
        json!({ "notifications": filter }),
    )
}

fn subscription(message: &Value) -> &Value {
    &message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
}

/// Opens a listen named `id` and reads its acknowledgement.
async fn open_listen(pipe: &mut Pipe, id: Value) {
    pipe.send(&listen(id.clone(), json!({ "toolsListChanged": true })))
        .await;
    let ack = pipe.next().await;
    assert_conforms("SubscriptionsAcknowledgedNotification", &ack);
    assert_eq!(subscription(&ack), &id, "{ack}");
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "toolsListChanged": true })
    );
}

/// Opens a listen on `pipe` as soon as the principal has a free slot, trying again while the
/// server refuses it for holding too many; its id.
async fn listen_once_a_slot_is_free(pipe: &mut Pipe, what: &str) -> Value {
    within(what, async {
        for attempt in 0..10_000 {
            let id = json!(format!("retry-{attempt}"));
            pipe.send(&listen(id.clone(), json!({ "toolsListChanged": true })))
                .await;
            let answer = pipe.next().await;
            if error_code(&answer) == Some(-32000) {
                assert_eq!(answer["id"], id);
                continue;
            }
            assert_conforms("SubscriptionsAcknowledgedNotification", &answer);
            assert_eq!(subscription(&answer), &id);
            return id;
        }
        panic!("no slot was freed: {what}");
    })
    .await
}

#[tokio::test]
async fn listen_notifications_name_their_subscription_and_stop_when_it_is_cancelled() {
    let (gate, _handles) = new_gate();
    let server = server_with(gate, |b| b.max_listens_per_principal(2));
    let mut pipe = Pipe::start(server.clone());
    open_listen(&mut pipe, json!("a")).await;
    open_listen(&mut pipe, json!(2)).await;

    server.notify_tools_changed();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let changed = pipe.next().await;
        assert_conforms("ToolListChangedNotification", &changed);
        seen.push(subscription(&changed).clone());
    }
    seen.sort_by_key(Value::to_string);
    assert_eq!(seen, [json!("a"), json!(2)]);

    pipe.send(&cancel(json!("a"))).await;
    // Torn down, not only silenced: its slot is free again, so another listen opens at the
    // cap. The slot frees when the dropped request is gone, which may take a moment after the
    // cancellation is read.
    let third =
        listen_once_a_slot_is_free(&mut pipe, "the cancelled listen's slot to be freed").await;

    server.notify_tools_changed();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let changed = pipe.next().await;
        assert_conforms("ToolListChangedNotification", &changed);
        seen.push(subscription(&changed).clone());
    }
    seen.sort_by_key(Value::to_string);
    let mut expected = vec![json!(2), third];
    expected.sort_by_key(Value::to_string);
    assert_eq!(seen, expected);
    pipe.send(&call(json!("after"), "echo", json!({ "text": "x" })))
        .await;
    assert_eq!(pipe.next().await["id"], "after");
    // The end of the input drops the open subscriptions without an answer.
    let (rest, served) = pipe.end().await;
    served.unwrap();
    assert_eq!(rest, Vec::<Value>::new());
}

#[tokio::test]
async fn a_subscription_the_server_closes_gets_its_result_then_a_cancellation() {
    let (gate, _handles) = new_gate();
    let server = server(gate);
    let mut pipe = Pipe::start(server.clone());
    open_listen(&mut pipe, json!("sub")).await;
    server.close_subscriptions();
    let result = pipe.next().await;
    assert_conforms("SubscriptionsListenResultResponse", &result);
    assert_eq!(result["id"], "sub");
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub"
    );
    let cancelled = pipe.next().await;
    assert_conforms("CancelledNotification", &cancelled);
    assert_eq!(cancelled["params"]["requestId"], "sub");
    let (rest, served) = pipe.end().await;
    assert_eq!(rest, Vec::<Value>::new());
    served.unwrap();
}

#[tokio::test]
async fn the_end_of_input_ends_serving_with_ok_once_calls_in_flight_are_answered() {
    let (gate, mut handles) = new_gate();
    let server = server_with(gate, |b| b.max_listens_per_principal(1));
    let mut pipe = Pipe::start(server.clone());
    open_listen(&mut pipe, json!("listen")).await;
    pipe.send(&call(json!(1), "gate", json!({}))).await;
    handles.started().await;
    drop(pipe.input.take());
    // The subscription is dropped as soon as the end of the input is read, which frees the
    // principal's only slot for another client of the same server: the call is let go only
    // once the first client's input has surely ended.
    let mut other = Pipe::start(server);
    listen_once_a_slot_is_free(&mut other, "the first client's subscription to be dropped").await;
    handles.release.notify_one();
    let (rest, served) = pipe.end().await;
    served.unwrap();
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(
        (rest[0]["id"].clone(), text(&rest[0])),
        (json!(1), "released")
    );
    other.end().await.1.unwrap();
}

#[tokio::test]
async fn notifications_queued_before_a_cancellation_are_not_written_after_it() {
    let (gate, mut handles) = new_gate_with_steps(100);
    let mut pipe = Pipe::start(server(gate));
    // An answer far larger than the output pipe: once its first bytes are seen, the server's
    // writer is stuck inside it until the test reads on, so whatever is queued after it has
    // not been written yet.
    let big = "x".repeat(64 * 1024);
    pipe.send(&call(json!(1), "echo", json!({ "text": big })))
        .await;
    let started = within(
        "the first bytes of the large answer",
        pipe.output.get_mut().fill_buf(),
    )
    .await
    .unwrap();
    assert!(started.starts_with(br#"{"jsonrpc":"2.0","id":1,"#));
    let mut chatty = call(json!("chatty"), "gate", json!({}));
    chatty["params"]["_meta"]["progressToken"] = json!("chatty");
    pipe.send(&chatty).await;
    handles.started().await;
    pipe.send(&cancel(json!("chatty"))).await;
    handles.dropped().await;
    pipe.send(&call(json!(2), "echo", json!({ "text": "after" })))
        .await;
    let first = pipe.next().await;
    assert_eq!(
        (first["id"].clone(), text(&first)),
        (json!(1), big.as_str())
    );
    // The hundred progress notifications were queued behind the large answer when the call
    // was cancelled: none of them is written.
    let after = pipe.next().await;
    assert_eq!((after["id"].clone(), text(&after)), (json!(2), "after"));
    let (rest, served) = pipe.end().await;
    assert_eq!(rest, Vec::<Value>::new());
    served.unwrap();
}

#[tokio::test]
async fn a_call_still_running_after_the_end_of_input_is_dropped_within_a_bound() {
    let (gate, mut handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    pipe.send(&call(json!(1), "gate", json!({}))).await;
    handles.started().await;
    let (rest, served) = pipe.end().await;
    served.unwrap();
    handles.dropped().await;
    assert_eq!(rest, Vec::<Value>::new(), "a dropped call was answered");
}

#[tokio::test]
async fn a_closed_output_ends_serving_with_an_error() {
    let (gate, _handles) = new_gate();
    let mut pipe = Pipe::start(server(gate));
    pipe.send(&request(json!(1), "server/discover", json!({})))
        .await;
    assert_eq!(pipe.next().await["id"], 1);
    let Pipe {
        mut input,
        output,
        serving,
    } = pipe;
    drop(output);
    let input = input.as_mut().unwrap();
    let mut line = serde_json::to_vec(&request(json!(2), "server/discover", json!({}))).unwrap();
    line.push(b'\n');
    within("writing a request", input.write_all(&line))
        .await
        .unwrap();
    let served = within("serve_io to fail", serving).await.unwrap();
    let error = served.expect_err("serving went on with its output closed");
    assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
}

#[tokio::test]
async fn an_oauth_resource_server_refuses_to_serve_stdio() {
    let issuer = "https://auth.example.com";
    let verifier = JwtVerifier::with_jwks(issuer, "https://auth.example.com/jwks.json").unwrap();
    let server = McpServer::builder("stdio-test", "1.0.0")
        .tools(tool_set(0))
        .oauth(OAuth::new(RESOURCE, verifier).authorization_server(issuer))
        .build()
        .unwrap();
    // An input that has ended: a server that did not refuse would return Ok at once.
    let served = within(
        "serve_io with OAuth",
        server.serve_io(tokio::io::empty(), tokio::io::sink()),
    )
    .await;
    let error = served.expect_err("an OAuth server served stdio");
    assert_eq!(error.kind(), std::io::ErrorKind::Unsupported);
    assert!(error.to_string().contains("OAuth"), "{error}");
}

#[tokio::test]
async fn the_authenticate_hook_judges_every_request_on_empty_headers() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let (gate, _handles) = new_gate();
    let server = server_with(gate, move |b| {
        b.authenticate(move |headers| {
            record.lock().unwrap().push(headers.len());
            Ok(Principal::subject("local-user"))
        })
    });
    let mut pipe = Pipe::start(server);
    for id in 1..=2 {
        pipe.send(&call(json!(id), "who", json!({}))).await;
        let answer = pipe.next().await;
        assert_eq!(text(&answer), "caller \"local-user\"");
    }
    assert_eq!(*seen.lock().unwrap(), [0, 0]);
    pipe.end().await.1.unwrap();

    let (gate, _handles) = new_gate();
    let refusing = server_with(gate, |b| {
        b.authenticate(|_| Err(Unauthorized::new("Bearer", "No credentials on stdio")))
    });
    let mut pipe = Pipe::start(refusing);
    pipe.send(&call(json!(1), "who", json!({}))).await;
    let refused = pipe.next().await;
    assert_eq!(
        (refused["id"].clone(), error_code(&refused)),
        (json!(1), Some(-32600))
    );
    assert_eq!(refused["error"]["message"], "No credentials on stdio");
    pipe.end().await.1.unwrap();
}

#[tokio::test]
async fn the_quickstart_example_serves_stdio_as_a_child_process_and_exits_when_stdin_closes() {
    let mut process = common::examples::Process(
        Command::new(common::examples::binary("quickstart"))
            .arg("--stdio")
            .env("RUST_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdin = process.0.stdin.take().unwrap();
    let stdout = process.0.stdout.take().unwrap();
    let mut stderr = process.0.stderr.take().unwrap();
    // The pipes are driven on a blocking thread; the process itself stays here, so a test that
    // fails kills it, which ends the thread's reads.
    let (lines, logs) = within("the quickstart process over stdio", async move {
        tokio::task::spawn_blocking(move || {
            let logs = std::thread::spawn(move || {
                let mut logs = String::new();
                stderr.read_to_string(&mut logs).unwrap();
                logs
            });
            let mut stdout = std::io::BufReader::new(stdout);
            let mut read_line = || {
                let mut line = String::new();
                stdout.read_line(&mut line).unwrap();
                line
            };
            let mut send = |message: &Value| {
                let mut line = serde_json::to_vec(message).unwrap();
                line.push(b'\n');
                stdin.write_all(&line).unwrap();
                stdin.flush().unwrap();
            };
            let mut lines = Vec::new();
            send(&request(json!(1), "server/discover", json!({})));
            lines.push(read_line());
            send(&call(json!(2), "add", json!({ "a": 2, "b": 40 })));
            lines.push(read_line());
            drop(stdin);
            let mut rest = String::new();
            stdout.read_to_string(&mut rest).unwrap();
            lines.extend(rest.split_inclusive('\n').map(str::to_owned));
            (lines, logs.join().unwrap())
        })
        .await
        .unwrap()
    })
    .await;
    // Its stdout and stderr have closed; the exit itself follows.
    let status = within("the quickstart process to exit", async {
        for _ in 0..10_000 {
            if let Some(status) = process.0.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("the quickstart process did not exit after closing its output");
    })
    .await;
    assert!(status.success(), "exit status {status}; stderr:\n{logs}");
    assert_eq!(
        lines.len(),
        2,
        "stdout carried more than the answers: {lines:?}"
    );
    let messages: Vec<Value> = lines
        .iter()
        .map(|line| parse_line(line.trim_end_matches('\n')))
        .collect();
    assert!(lines.iter().all(|line| line.ends_with('\n')), "{lines:?}");
    for message in &messages {
        conforms(message);
    }
    assert_conforms("DiscoverResultResponse", &messages[0]);
    assert_eq!(messages[0]["id"], 1);
    assert_eq!(messages[0]["result"]["supportedVersions"][0], "2026-07-28");
    assert_conforms("CallToolResultResponse", &messages[1]);
    assert_eq!(messages[1]["id"], 2);
    assert_eq!(
        messages[1]["result"]["structuredContent"],
        json!({ "sum": 42 })
    );
}
