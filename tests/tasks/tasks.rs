//! The Tasks extension over real HTTP, on servers in this process: the task lifecycle, input
//! through the context, cancellation dropping the tool's future, the limits, the refusals, and
//! two servers sharing one store as replicas.

use crate::common;
use crate::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcp_tools::MemoryStore;
use mcp_tools::auth::{Principal, Unauthorized};
use mcp_tools::store::{
    Claim, ClaimedEffect, CreateRequest, EffectStatus, MutationOutcome, MutationRequest, Outbox,
    PostgresOptions, PruneReport, ReadOutcome, ReadRequest, Settlement, Store, StoreConfig,
    StoreError, StoreFuture, Transition,
};
use mcp_tools::store::{StepOutcome, StepRequest, StepTransition};
use mcp_tools::tasks::{
    TASKS_EXTENSION, TaskChange, TaskInsert, TaskOptions, TaskRecord, TaskStore,
};
use mcp_tools::tools::{InputRequired, ToolReply};
use mcp_tools::{Context, McpServer, McpServerBuilder, ToolError};
use mcp_tools::{tool, tools};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use common::{Call, TestServer, tasks, within};

const POLL: Duration = Duration::from_millis(50);

/// What the tools of these tests share with the test: a gate they wait on, and word of their
/// futures being dropped.
#[derive(Clone)]
struct Probe {
    gate: Arc<Notify>,
    dropped: mpsc::UnboundedSender<&'static str>,
    runs: Arc<AtomicUsize>,
}

/// Sends its name when dropped: the tool's future was dropped with it.
struct DropSignal(&'static str, mpsc::UnboundedSender<&'static str>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

/// Waits for the test to open the gate, then answers
#[tool(task = optional)]
async fn gated(label: String, cx: &Context) -> String {
    let probe = cx.state::<Probe>().unwrap().clone();
    probe.runs.fetch_add(1, Ordering::SeqCst);
    let _signal = DropSignal("gated", probe.dropped.clone());
    probe.gate.notified().await;
    format!("opened for {label}")
}

/// Waits for the gate; retries with the same operation id get the same task
#[tool(task = optional)]
async fn keyed(operation_id: String, n: u32, cx: &Context) -> String {
    let probe = cx.state::<Probe>().unwrap().clone();
    probe.runs.fetch_add(1, Ordering::SeqCst);
    probe.gate.notified().await;
    format!("{operation_id}: {n}")
}

/// Answers at once, even for a client that takes tasks
#[tool(task = optional)]
fn instant() -> String {
    "at once".into()
}

/// Only runs as a task
#[tool(task = required)]
async fn only_task(cx: &Context) -> String {
    cx.state::<Probe>().unwrap().gate.notified().await;
    "done".into()
}

/// Asks for a colour through its context, then reports it
#[tool(task = optional)]
async fn ask_colour(cx: &Context) -> Result<String, ToolError> {
    let schema = json!({ "type": "object", "properties": { "colour": { "type": "string" } } });
    let answers = cx
        .ask(InputRequired::new().elicit("colour", "Which colour?", schema))
        .await?;
    Ok(format!(
        "colour {}",
        answers["colour"]["content"]["colour"]
            .as_str()
            .unwrap_or("?")
    ))
}

/// Asks for a colour twice through its context, under the same key
#[tool(task = optional)]
async fn ask_twice(cx: &Context) -> Result<String, ToolError> {
    let schema = json!({ "type": "object", "properties": { "colour": { "type": "string" } } });
    let mut colours = Vec::new();
    for question in ["First colour?", "Second colour?"] {
        let answers = cx
            .ask(InputRequired::new().elicit("colour", question, schema.clone()))
            .await?;
        colours.push(
            answers["colour"]["content"]["colour"]
                .as_str()
                .unwrap_or("?")
                .to_owned(),
        );
    }
    Ok(colours.join(" then "))
}

/// Asks for a name in a multi-round call first, then works as a task
#[tool(task = optional)]
async fn rounds_then_task(cx: &Context) -> ToolReply<String> {
    let Some(name) = cx
        .input_response("name")
        .and_then(|answer| answer["content"]["name"].as_str())
        .map(str::to_owned)
    else {
        let schema = json!({ "type": "object", "properties": { "name": { "type": "string" } } });
        return ToolReply::InputRequired(InputRequired::new().elicit("name", "Name?", schema));
    };
    cx.state::<Probe>().unwrap().gate.notified().await;
    ToolReply::Complete(format!("hello {name}"))
}

/// Asks for input with a form schema of nested objects `levels` deep
#[tool(task = optional)]
async fn ask_nested(levels: usize, cx: &Context) -> Result<String, ToolError> {
    let schema = (0..levels).fold(json!("leaf"), |inner, _| json!({ "a": inner }));
    cx.ask(InputRequired::new().elicit("deep", "Deep?", schema))
        .await?;
    Ok("answered".into())
}

/// Panics once the gate opens
#[tool(task = optional)]
async fn panics(cx: &Context) -> String {
    cx.state::<Probe>().unwrap().gate.notified().await;
    panic!("on purpose");
}

struct Harness {
    probe: Probe,
    dropped: mpsc::UnboundedReceiver<&'static str>,
}

fn harness() -> Harness {
    let (dropped, receiver) = mpsc::unbounded_channel();
    Harness {
        probe: Probe {
            gate: Arc::new(Notify::new()),
            dropped,
            runs: Arc::new(AtomicUsize::new(0)),
        },
        dropped: receiver,
    }
}

fn server_with(probe: &Probe, store: Arc<MemoryStore>, options: TaskOptions) -> McpServer {
    server_on(
        probe,
        store,
        options.poll_interval(POLL).lease(Duration::from_secs(10)),
    )
}

/// The tools of these tests on `store`, with `options` as they are.
fn server_on(probe: &Probe, store: impl Store, options: TaskOptions) -> McpServer {
    builder_on(probe, store, options).build().unwrap()
}

/// [`server_on`], still to be built.
fn builder_on(probe: &Probe, store: impl Store, options: TaskOptions) -> McpServerBuilder {
    McpServer::builder("tasks", "1")
        .tools(tools![
            gated,
            keyed,
            instant,
            only_task,
            ask_colour,
            ask_twice,
            rounds_then_task,
            ask_nested,
            panics
        ])
        .state(probe.clone())
        .store(store)
        .signing_key(crate::common::SIGNING_KEY)
        .task_options(options)
        .authenticate(
            |headers| match headers.get("authorization").map(|value| value.as_bytes()) {
                Some(b"Bearer alice") => Ok(Principal::subject("alice")),
                Some(b"Bearer bob") => Ok(Principal::subject("bob")),
                _ => Err(Unauthorized::new("Bearer", "A bearer token is required")),
            },
        )
}

async fn start(probe: &Probe) -> TestServer {
    start_with(probe, TaskOptions::default()).await
}

/// A server of its own store with `options`.
async fn start_with(probe: &Probe, options: TaskOptions) -> TestServer {
    TestServer::start(server_with(
        probe,
        Arc::new(MemoryStore::default()),
        options,
    ))
    .await
}

/// Every request of these tests is alice's unless it says otherwise.
fn as_alice(call: Call) -> Call {
    call.header("authorization", "Bearer alice")
}

fn takes_tasks(call: Call) -> Call {
    as_alice(call.capabilities(tasks::taking_tasks()))
}

fn tool_call(name: &str, arguments: Value) -> Call {
    as_alice(tasks::tool_call(name, arguments))
}

fn task_call(method: &str, id: &str, extra: Value) -> Call {
    as_alice(tasks::method_call(method, id, extra))
}

async fn created(server: &TestServer, name: &str, arguments: Value) -> String {
    let reply = within("a tools/call", tool_call(name, arguments).send(server)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let result = reply.result();
    assert_eq!(result["resultType"], "task", "{result}");
    result["taskId"].as_str().unwrap().to_owned()
}

async fn get(server: &TestServer, id: &str) -> Value {
    let reply = within(
        "tasks/get",
        task_call("tasks/get", id, json!({})).send(server),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.result()
}

/// Polls `tasks/get` until the status is `status`.
async fn until(server: &TestServer, id: &str, status: &str) -> Value {
    tasks::until_status(status, POLL, || get(server, id)).await
}

/// The key of the one input request a task read as `input_required` waits on.
fn only_request_key(waiting: &Value) -> String {
    let requests = waiting["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{waiting}");
    requests.keys().next().unwrap().clone()
}

/// Answers the colour question under `key` with `colour`.
async fn answer_colour(server: &TestServer, id: &str, key: &str, colour: &str) {
    let answer = json!({ key: { "action": "accept", "content": { "colour": colour } } });
    let ack = task_call("tasks/update", id, json!({ "inputResponses": answer }))
        .send(server)
        .await;
    assert_eq!(ack.result()["resultType"], "complete", "{}", ack.text);
}

#[tokio::test]
async fn a_task_is_created_durably_runs_in_the_background_and_inlines_its_result() {
    let h = harness();
    let server = start(&h.probe).await;
    let id = created(&server, "gated", json!({ "label": "x" })).await;
    assert!(id.starts_with("tsk_") && id.len() == 36, "{id}");
    let working = get(&server, &id).await;
    assert_eq!(working["status"], "working");
    assert_eq!(working["resultType"], "complete");
    assert!(working.get("result").is_none(), "{working}");
    h.probe.gate.notify_one();
    let done = until(&server, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "opened for x");
    assert!(done["result"].get("resultType").is_none(), "{done}");
    let ack = task_call("tasks/cancel", &id, json!({}))
        .send(&server)
        .await;
    assert_eq!(
        ack.result(),
        json!({ "resultType": "complete", "_meta": ack.result()["_meta"] })
    );
    assert_eq!(
        get(&server, &id).await["status"],
        "completed",
        "a finished task stays finished"
    );
}

#[tokio::test]
async fn a_task_is_readable_for_its_ttl_and_unknown_after_it() {
    let h = harness();
    let ttl = Duration::from_secs(2);
    let server = start_with(&h.probe, TaskOptions::default().ttl(ttl)).await;
    let id = created(&server, "gated", json!({ "label": "brief" })).await;
    h.probe.gate.notify_one();
    let done = until(&server, &id, "completed").await;
    assert_eq!(done["ttlMs"], 2_000);
    let expired = within("the task to expire", async {
        loop {
            let reply = task_call("tasks/get", &id, json!({})).send(&server).await;
            if reply.error_code().is_some() {
                return reply;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    assert_eq!(expired.error_code(), Some(-32602), "{}", expired.text);
}

#[tokio::test]
async fn a_tool_that_needs_no_wait_answers_as_a_plain_call() {
    let h = harness();
    let server = start(&h.probe).await;
    let reply = tool_call("instant", json!({})).send(&server).await;
    let result = reply.result();
    assert_eq!(result["resultType"], "complete");
    assert!(result.get("taskId").is_none());
    assert_eq!(result["content"][0]["text"], "at once");
}

#[tokio::test]
async fn cancelling_drops_the_tools_future_and_every_later_read_says_cancelled() {
    let mut h = harness();
    let server = start(&h.probe).await;
    let id = created(&server, "gated", json!({ "label": "c" })).await;
    let ack = task_call("tasks/cancel", &id, json!({}))
        .send(&server)
        .await;
    assert_eq!(ack.result()["resultType"], "complete");
    assert!(ack.result().get("status").is_none());
    let dropped = within("the tool's future to be dropped", h.dropped.recv()).await;
    assert_eq!(dropped, Some("gated"));
    let task = get(&server, &id).await;
    assert_eq!(task["status"], "cancelled");
    assert!(task.get("result").is_none() && task.get("error").is_none());
}

#[tokio::test]
async fn context_input_parks_the_task_and_an_update_resumes_it() {
    let h = harness();
    let server = start(&h.probe).await;
    let id = created(&server, "ask_colour", json!({})).await;
    let waiting = until(&server, &id, "input_required").await;
    let requests = waiting["inputRequests"].as_object().unwrap().clone();
    assert_eq!(requests.len(), 1, "{waiting}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    // Answers to keys that are not outstanding are ignored.
    let stray = task_call(
        "tasks/update",
        &id,
        json!({ "inputResponses": { "nope": { "action": "accept" } } }),
    )
    .send(&server)
    .await;
    assert_eq!(stray.result()["resultType"], "complete");
    assert_eq!(get(&server, &id).await["status"], "input_required");
    answer_colour(&server, &id, key, "teal").await;
    let done = until(&server, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "colour teal");
}

#[tokio::test]
async fn multi_round_input_comes_before_the_task_is_made() {
    let h = harness();
    let server = start(&h.probe).await;
    let first = tool_call("rounds_then_task", json!({}))
        .send(&server)
        .await
        .result();
    assert_eq!(first["resultType"], "input_required");
    assert!(first.get("taskId").is_none());
    let retry = tool_call("rounds_then_task", json!({})).body(|body| {
        body["params"]["inputResponses"] =
            json!({ "name": { "action": "accept", "content": { "name": "Ada" } } });
        body["params"]["requestState"] = first["requestState"].clone();
    });
    let second = retry.send(&server).await.result();
    assert_eq!(second["resultType"], "task", "{second}");
    assert!(second.get("requestState").is_none());
    h.probe.gate.notify_one();
    let id = second["taskId"].as_str().unwrap();
    let done = until(&server, id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "hello Ada");
}

/// Asserts that `answer` (a failed task, or a JSON-RPC answer) carries the error `code` with a
/// message that mentions `mentioning`.
fn assert_error(answer: &Value, code: i64, mentioning: &str) {
    assert_eq!(answer["error"]["code"], code, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(mentioning), "{answer}");
}

/// An input request a task keeps nests at most 124 levels: the elicitation wraps its schema
/// in two (the request, its params), and `tasks/get` carries the request four levels down, so
/// its message stays within the 127 levels a JSON parser such as this client's reads. A deeper
/// one fails the task with an error that says why, and the task stays readable.
#[tokio::test]
async fn input_requests_past_the_nesting_bound_fail_the_task() {
    let h = harness();
    let server = start(&h.probe).await;
    let at_bound = created(&server, "ask_nested", json!({ "levels": 122 })).await;
    let waiting = until(&server, &at_bound, "input_required").await;
    assert!(only_request_key(&waiting).ends_with(".deep"), "{waiting}");
    let past = created(&server, "ask_nested", json!({ "levels": 123 })).await;
    let failed = until(&server, &past, "failed").await;
    assert_error(&failed, -32603, "more than 124 levels deep");
}

#[tokio::test]
async fn a_panicking_tool_fails_its_task_with_a_protocol_error() {
    let h = harness();
    let server = start(&h.probe).await;
    let id = created(&server, "panics", json!({})).await;
    h.probe.gate.notify_one();
    let failed = until(&server, &id, "failed").await;
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert!(failed.get("result").is_none());
}

#[tokio::test]
async fn a_retry_with_the_same_operation_id_gets_the_same_task_and_runs_nothing_twice() {
    let h = harness();
    let server = start(&h.probe).await;
    let arguments = json!({ "operation_id": "op-7f3a9c1e2b", "n": 1 });
    let first = created(&server, "keyed", arguments.clone()).await;
    let again = created(&server, "keyed", arguments).await;
    assert_eq!(first, again);
    assert_eq!(h.probe.runs.load(Ordering::SeqCst), 1);
    let reused = tool_call("keyed", json!({ "operation_id": "op-7f3a9c1e2b", "n": 2 }))
        .send(&server)
        .await
        .result();
    assert_eq!(reused["isError"], true, "{reused}");
    assert_eq!(reused["structuredContent"]["code"], "OPERATION_ID_REUSED");
    h.probe.gate.notify_one();
    until(&server, &first, "completed").await;
}

#[tokio::test]
async fn a_retry_during_a_signing_key_roll_finds_the_task_made_under_the_old_key() {
    let h = harness();
    let store = Arc::new(MemoryStore::default());
    let options = || TaskOptions::default().poll_interval(POLL);
    let old_key = crate::common::SIGNING_KEY;
    let new_key = b"the key the replicas roll to, thirty-two bytes or more".as_slice();
    let before = TestServer::start(server_on(&h.probe, Arc::clone(&store), options())).await;
    let arguments = json!({ "operation_id": "op-5d1c0e9a7b", "n": 1 });
    let first = created(&before, "keyed", arguments.clone()).await;

    // The replicas now sign with the new key and still accept the old one.
    let hour_from_now = std::time::SystemTime::now() + Duration::from_secs(3600);
    let rolled = TestServer::start(
        builder_on(&h.probe, Arc::clone(&store), options())
            .signing_key(new_key)
            .accept_signing_key(old_key, hour_from_now)
            .build()
            .unwrap(),
    )
    .await;
    let retried = created(&rolled, "keyed", arguments.clone()).await;
    assert_eq!(
        retried, first,
        "the retry found the task made under the old key"
    );
    assert_eq!(h.probe.runs.load(Ordering::SeqCst), 1, "the tool ran once");

    // Other arguments under the same operation id are refused there too.
    let reused = tool_call("keyed", json!({ "operation_id": "op-5d1c0e9a7b", "n": 2 }))
        .send(&rolled)
        .await
        .result();
    assert_eq!(
        reused["structuredContent"]["code"], "OPERATION_ID_REUSED",
        "{reused}"
    );
    h.probe.gate.notify_one();
    until(&rolled, &first, "completed").await;
}

#[tokio::test]
async fn anonymous_callers_must_send_an_unguessable_operation_id_to_make_a_task() {
    let h = harness();
    let anonymous = TestServer::start(
        McpServer::builder("tasks", "1")
            .tools(tools![keyed])
            .state(h.probe.clone())
            .task_options(TaskOptions::default().poll_interval(POLL))
            .build()
            .unwrap(),
    )
    .await;
    // Anyone could send `op-1` and be handed the task another anonymous caller made with it.
    let guessable = within(
        "a call with a guessable operation id",
        tasks::tool_call("keyed", json!({ "operation_id": "op-1", "n": 1 })).send(&anonymous),
    )
    .await
    .result();
    assert_eq!(guessable["isError"], true, "{guessable}");
    assert_eq!(
        guessable["structuredContent"]["code"], "GUESSABLE_OPERATION_ID",
        "{guessable}"
    );
    assert_eq!(
        guessable["structuredContent"]["recovery"], "new_operation_id",
        "{guessable}"
    );
    assert_eq!(h.probe.runs.load(Ordering::SeqCst), 0, "nothing ran");

    let unguessable = json!({ "operation_id": "6f1d2c3b-8a4e-4f7a-9c0b-1e2d3f4a5b6c", "n": 1 });
    let reply = within(
        "a call with a UUID",
        tasks::tool_call("keyed", unguessable).send(&anonymous),
    )
    .await
    .result();
    assert_eq!(reply["resultType"], "task", "{reply}");
    h.probe.gate.notify_one();
}

#[tokio::test]
async fn running_tasks_are_capped_per_principal_with_a_retryable_refusal() {
    let h = harness();
    let server = start_with(
        &h.probe,
        TaskOptions::default().max_running_per_principal(1),
    )
    .await;
    let id = created(&server, "gated", json!({ "label": "1" })).await;
    let refused = tool_call("gated", json!({ "label": "2" }))
        .send(&server)
        .await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.error_code(), Some(-32000));
    // Another principal is not held back by alice's tasks.
    let bob = tool_call("gated", json!({ "label": "3" }))
        .header("authorization", "Bearer bob")
        .send(&server)
        .await;
    assert_eq!(bob.result()["resultType"], "task");
    h.probe.gate.notify_waiters();
    until(&server, &id, "completed").await;
    let call = tool_call("gated", json!({ "label": "4" }));
    tasks::until_accepted(&server.url(), &call, POLL).await;
    h.probe.gate.notify_waiters();
}

#[tokio::test]
async fn running_tasks_are_capped_per_replica_for_every_principal() {
    let h = harness();
    let server = start_with(&h.probe, TaskOptions::default().max_running(1)).await;
    let id = created(&server, "gated", json!({ "label": "1" })).await;
    let bob = tool_call("gated", json!({ "label": "2" }))
        .header("authorization", "Bearer bob")
        .send(&server)
        .await;
    assert_eq!(
        (bob.status, bob.error_code()),
        (429, Some(-32000)),
        "{}",
        bob.text
    );
    assert!(
        bob.text.contains("running tasks on this server"),
        "{}",
        bob.text
    );
    h.probe.gate.notify_one();
    until(&server, &id, "completed").await;
    // The ended task gives its place back, to anyone.
    let call = tool_call("gated", json!({ "label": "3" })).header("authorization", "Bearer bob");
    tasks::until_accepted(&server.url(), &call, POLL).await;
    h.probe.gate.notify_one();
}

#[tokio::test]
async fn following_tasks_on_a_listen_stream_needs_the_extension() {
    let h = harness();
    let server = start(&h.probe).await;
    let id = created(&server, "gated", json!({ "label": "listened" })).await;
    let listen = Call::new(
        "subscriptions/listen",
        json!(12),
        json!({ "notifications": { "taskIds": [id] } }),
    )
    .header("authorization", "Bearer alice");
    // Both refusals come before a stream opens, as one JSON answer.
    let refused = listen.send_to(&server.url()).await;
    assert_eq!(
        (refused.status, refused.error_code()),
        (400, Some(-32021)),
        "{}",
        refused.text
    );
    assert_eq!(refused.headers["content-type"], "application/json");

    let malformed = takes_tasks(Call::new(
        "subscriptions/listen",
        json!(13),
        json!({ "notifications": { "taskIds": id } }),
    ));
    let refused = malformed.send_to(&server.url()).await;
    assert_eq!(refused.status, 200, "{}", refused.text);
    assert_error(&refused.json(), -32602, "taskIds");

    let mut events = common::events::Events::open(&server.url(), &takes_tasks(listen)).await;
    let acknowledged = events.next().await;
    assert_eq!(
        acknowledged["params"]["notifications"]["taskIds"],
        json!([id])
    );
    h.probe.gate.notify_one();
    let heard = events.next().await;
    assert_eq!(heard["method"], "notifications/tasks", "{heard}");
    assert_eq!(heard["params"]["status"], "completed", "{heard}");
    assert_eq!(
        heard["params"]["result"]["content"][0]["text"],
        "opened for listened"
    );
}

#[tokio::test]
async fn the_extension_is_advertised_and_required_for_task_methods_and_task_only_tools() {
    let h = harness();
    let server = start(&h.probe).await;
    let discover = Call::discover()
        .header("authorization", "Bearer alice")
        .send(&server)
        .await
        .result();
    assert_eq!(
        discover["capabilities"]["extensions"],
        json!({ TASKS_EXTENSION: {} })
    );
    assert!(discover["capabilities"].get("tasks").is_none());
    let listed = Call::new("tools/list", json!(1), json!({}))
        .header("authorization", "Bearer alice")
        .send(&server)
        .await
        .result();
    assert!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|tool| tool.get("execution").is_none()),
        "no taskSupport is published: {listed}"
    );

    let plain = |call: Call| call.header("authorization", "Bearer alice");
    let required = plain(Call::call_tool("only_task", json!({})))
        .send(&server)
        .await;
    assert_eq!(required.status, 400);
    assert_eq!(required.error_code(), Some(-32021));
    assert_eq!(
        required.json()["error"]["data"]["requiredCapabilities"],
        json!({ "extensions": { TASKS_EXTENSION: {} } })
    );
    let optional = plain(Call::call_tool("gated", json!({ "label": "sync" }))).body(|body| {
        // A legacy `task` hint is no opt-in.
        body["params"]["task"] = json!({ "ttl": 60000 });
    });
    let reply = within("a synchronous call", async {
        let sent = tokio::spawn({
            let url = server.url();
            async move { optional.send_to(&url).await }
        });
        // The tool runs in the request: open its gate once it waits.
        while h.probe.runs.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(POLL).await;
        }
        h.probe.gate.notify_one();
        sent.await.unwrap()
    })
    .await;
    let result = reply.result();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["content"][0]["text"], "opened for sync");

    let id = created(&server, "gated", json!({ "label": "y" })).await;
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let refused = plain(
            Call::new(
                method,
                json!(4),
                json!({ "taskId": id, "inputResponses": {} }),
            )
            .header("mcp-name", &id),
        )
        .send(&server)
        .await;
        assert_eq!(
            refused.error_code(),
            Some(-32021),
            "{method}: {}",
            refused.text
        );
    }
    h.probe.gate.notify_one();
}

#[tokio::test]
async fn bad_task_requests_get_typed_errors_and_nobody_reads_anothers_task() {
    let h = harness();
    let server = start(&h.probe).await;
    let id = created(&server, "gated", json!({ "label": "mine" })).await;
    let bob = task_call("tasks/get", &id, json!({}))
        .header("authorization", "Bearer bob")
        .send(&server)
        .await;
    let unknown = task_call(
        "tasks/get",
        "tsk_00000000000000000000000000000000",
        json!({}),
    )
    .send(&server)
    .await;
    for reply in [&bob, &unknown] {
        assert_eq!(reply.error_code(), Some(-32602), "{}", reply.text);
    }
    assert!(bob.text.contains("Unknown task"), "{}", bob.text);
    let mismatched = task_call("tasks/get", &id, json!({}))
        .header("mcp-name", "tsk_other")
        .send(&server)
        .await;
    assert_eq!(
        (mismatched.status, mismatched.error_code()),
        (400, Some(-32020))
    );
    let not_a_string = takes_tasks(Call::new("tasks/get", json!(5), json!({ "taskId": 7 })))
        .send(&server)
        .await;
    assert_eq!(
        not_a_string.error_code(),
        Some(-32602),
        "{}",
        not_a_string.text
    );
    let no_responses = task_call("tasks/update", &id, json!({}))
        .send(&server)
        .await;
    assert_eq!(no_responses.error_code(), Some(-32602));
    assert!(
        no_responses.text.contains("inputResponses"),
        "{}",
        no_responses.text
    );
    for removed in ["tasks/result", "tasks/list"] {
        let reply = takes_tasks(Call::new(removed, json!(6), json!({ "taskId": id })))
            .header("mcp-name", &id)
            .send(&server)
            .await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (404, Some(-32601)),
            "{removed}"
        );
    }
    h.probe.gate.notify_one();
}

#[tokio::test]
async fn servers_sharing_a_store_answer_for_each_others_tasks_and_a_shutdown_fails_its_own() {
    let h = harness();
    let store = Arc::new(MemoryStore::default());
    let a = TestServer::start(server_with(
        &h.probe,
        Arc::clone(&store),
        TaskOptions::default(),
    ))
    .await;
    let b = TestServer::start(server_with(
        &h.probe,
        Arc::clone(&store),
        TaskOptions::default(),
    ))
    .await;
    let id = created(&a, "ask_colour", json!({})).await;
    let key = only_request_key(&until(&b, &id, "input_required").await);
    answer_colour(&b, &id, &key, "red").await;
    let done = until(&a, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "colour red");

    let running = created(&a, "gated", json!({ "label": "shutdown" })).await;
    drop(a);
    let failed = until(&b, &running, "failed").await;
    tasks::assert_shut_down(&failed);
}

#[tokio::test]
async fn a_server_that_is_shutting_down_takes_no_new_task_and_still_answers_the_rest() {
    let h = harness();
    let handle = server_with(
        &h.probe,
        Arc::new(MemoryStore::default()),
        TaskOptions::default(),
    );
    let server = TestServer::start(handle.clone()).await;
    let running = created(&server, "gated", json!({ "label": "before" })).await;

    // What `serve` does when its shutdown signal comes, while connections still drain.
    handle.close_subscriptions();
    let refused = within(
        "a task call during the shutdown",
        tool_call("gated", json!({ "label": "after" })).send(&server),
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(refused.error_code(), Some(-32603), "{}", refused.text);
    assert!(refused.text.contains("shutting down"), "{}", refused.text);

    let failed = until(&server, &running, "failed").await;
    tasks::assert_shut_down(&failed);
    // A call that is no task still runs: only new tasks would outlive the process.
    let plain = within(
        "a plain call during the shutdown",
        as_alice(Call::call_tool("instant", json!({}))).send(&server),
    )
    .await;
    assert_eq!(plain.status, 200, "{}", plain.text);
    assert_eq!(plain.result()["content"][0]["text"], "at once");
    assert_eq!(
        h.probe.runs.load(Ordering::SeqCst),
        1,
        "the refused call never ran"
    );
}

#[tokio::test]
async fn a_principals_running_count_goes_down_one_ended_task_at_a_time() {
    let h = harness();
    let server = start_with(
        &h.probe,
        TaskOptions::default().max_running_per_principal(2),
    )
    .await;
    let ids = [
        created(&server, "gated", json!({ "label": "1" })).await,
        created(&server, "gated", json!({ "label": "2" })).await,
    ];
    // Both tools wait on the gate; let exactly one of them finish.
    h.probe.gate.notify_one();
    within("one of the two tasks to complete", async {
        loop {
            for id in &ids {
                if get(&server, id).await["status"] == "completed" {
                    return;
                }
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    // One place is free, and only one: the other task still counts.
    let call = tool_call("gated", json!({ "label": "3" }));
    let third = tasks::until_accepted(&server.url(), &call, POLL).await;
    assert_eq!(third.result()["resultType"], "task", "{}", third.text);
    let fourth = tool_call("gated", json!({ "label": "4" }))
        .send(&server)
        .await;
    assert_eq!(fourth.status, 429, "{}", fourth.text);
    assert!(
        fourth.text.contains("running tasks for this caller"),
        "{}",
        fourth.text
    );
    h.probe.gate.notify_waiters();
}

/// A server on PostgreSQL in `schema`, its store giving up on a call after `store_timeout`,
/// running the `gated` tool as task; the task's id once its tool runs.
async fn gated_on_postgres(
    schema: &pg::Schema,
    probe: &Probe,
    store_timeout: Duration,
    options: TaskOptions,
    label: &str,
) -> (TestServer, String) {
    let store = schema
        .connect_with(
            StoreConfig::default(),
            PostgresOptions {
                timeout: store_timeout,
                ..schema.options()
            },
        )
        .await;
    let server = TestServer::start(server_on(probe, store, options)).await;
    let id = created(&server, "gated", json!({ "label": label })).await;
    until(&server, &id, "working").await;
    (server, id)
}

/// Locks the task table of `schema` from `holder` until the returned transaction ends: every
/// task read and write waits.
async fn lock_tasks<'c>(
    holder: &'c mut tokio_postgres::Client,
    schema: &pg::Schema,
) -> tokio_postgres::Transaction<'c> {
    let lock = holder.transaction().await.unwrap();
    within(
        "the lock on the task table",
        lock.batch_execute(&format!(
            "LOCK TABLE \"{}\".mcp_tasks IN ACCESS EXCLUSIVE MODE",
            schema.name
        )),
    )
    .await
    .unwrap();
    lock
}

/// A store that stops answering stops the tool before the lease the worker last saw can end:
/// the lease then lapses and the task reads `failed`, and nothing of the tool runs past it.
/// Real PostgreSQL, whose task table another session locks; the store's own timeout is longer
/// than the lease, so only the worker's bound on its heartbeat can stop the tool in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_stops_answering_stops_the_tool_before_its_lease_ends() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    const LEASE: Duration = Duration::from_secs(3);
    let mut h = harness();
    // The worker stops the tool a poll before the lease's end: half a second of slack here.
    let options = TaskOptions::default()
        .poll_interval(Duration::from_millis(500))
        .lease(LEASE);
    let (server, id) = gated_on_postgres(
        &schema,
        &h.probe,
        Duration::from_secs(20),
        options,
        "locked out",
    )
    .await;
    let mut holder = schema.client().await;
    let lock = lock_tasks(&mut holder, &schema).await;
    // No renewal commits after this: the lease the worker saw ends by `LEASE` from now.
    let locked_at = Instant::now();
    let dropped = within("the tool's future to be dropped", h.dropped.recv()).await;
    let stopped_after = locked_at.elapsed();
    assert_eq!(dropped, Some("gated"));
    assert!(
        stopped_after < LEASE,
        "the tool ran {stopped_after:?} after the store stopped answering, past the {LEASE:?} lease"
    );
    within("the unlock", lock.rollback()).await.unwrap();

    let failed = until(&server, &id, "failed").await;
    assert!(
        failed["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("lease")),
        "{failed}"
    );
    assert_eq!(h.probe.runs.load(Ordering::SeqCst), 1);
}

/// A cancel and an answer reach the worker of a task on this replica at once, not at its next
/// poll: here the next poll is ten minutes away.
#[tokio::test]
async fn a_cancel_and_an_answer_reach_the_worker_at_once_not_at_its_next_poll() {
    let mut h = harness();
    let options = TaskOptions::default()
        .poll_interval(Duration::from_secs(600))
        .lease(Duration::from_secs(1800));
    let server = TestServer::start(server_on(
        &h.probe,
        Arc::new(MemoryStore::default()),
        options,
    ))
    .await;

    let asking = created(&server, "ask_colour", json!({})).await;
    let key = only_request_key(&until(&server, &asking, "input_required").await);
    answer_colour(&server, &asking, &key, "green").await;
    let done = until(&server, &asking, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "colour green");

    let gated = created(&server, "gated", json!({ "label": "cancelled" })).await;
    until(&server, &gated, "working").await;
    task_call("tasks/cancel", &gated, json!({}))
        .send(&server)
        .await
        .result();
    let dropped = within("the tool's future to be dropped", h.dropped.recv()).await;
    assert_eq!(dropped, Some("gated"));
}

/// The records of tasks past their time to live leave the store, not only the answers.
#[tokio::test]
async fn expired_tasks_are_purged_from_the_store() {
    let h = harness();
    let store = Arc::new(MemoryStore::default());
    let options = TaskOptions::default()
        .ttl(Duration::from_secs(2))
        .purge_interval(Duration::from_millis(100))
        .poll_interval(POLL)
        .lease(Duration::from_secs(10));
    let server = TestServer::start(server_on(&h.probe, Arc::clone(&store), options)).await;
    let id = created(&server, "gated", json!({ "label": "purged" })).await;
    task_call("tasks/cancel", &id, json!({}))
        .send(&server)
        .await
        .result();
    assert!(
        store.load_task(&id).await.unwrap().is_some(),
        "stored while it lives"
    );
    within("the expired task's record to be purged", async {
        while store.load_task(&id).await.unwrap().is_some() {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    let gone = within(
        "tasks/get of a purged task",
        task_call("tasks/get", &id, json!({})).send(&server),
    )
    .await;
    assert_eq!(gone.error_code(), Some(-32602), "{}", gone.text);
}

/// The memory store, counting the task reads and writes made on it, and failing them at once
/// while `failing` is set (as a store whose backend refuses every call would).
struct Counting {
    store: MemoryStore,
    loads: AtomicUsize,
    updates: AtomicUsize,
    failing: AtomicBool,
}

impl Counting {
    fn new() -> Self {
        Counting {
            store: MemoryStore::default(),
            loads: AtomicUsize::new(0),
            updates: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
        }
    }

    fn refused<T: Send + 'static>(&self) -> Option<StoreFuture<'static, T>> {
        self.failing.load(Ordering::SeqCst).then(|| {
            Box::pin(std::future::ready(Err(StoreError::Backend(
                "the backend refuses every call".into(),
            )))) as StoreFuture<'static, T>
        })
    }
}

impl Store for Counting {
    fn create<'a>(&'a self, request: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome> {
        self.store.create(request)
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        self.store.read(request)
    }

    fn mutate(
        &self,
        request: MutationRequest,
        transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome> {
        self.store.mutate(request, transition)
    }

    fn mutate_step(
        &self,
        request: StepRequest,
        transition: StepTransition,
    ) -> StoreFuture<'_, StepOutcome> {
        self.store.mutate_step(request, transition)
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        self.store.prune()
    }
}

impl Outbox for Counting {
    fn claim_effects(&self, claim: Claim) -> StoreFuture<'_, Vec<ClaimedEffect>> {
        self.store.claim_effects(claim)
    }

    fn settle_effect<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        settlement: Settlement,
    ) -> StoreFuture<'a, bool> {
        self.store.settle_effect(key, owner, settlement)
    }

    fn effect_statuses<'a>(
        &'a self,
        handle: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<EffectStatus>> {
        self.store.effect_statuses(handle, limit)
    }

    fn outbox_signal(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.store.outbox_signal()
    }
}

impl TaskStore for Counting {
    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsert> {
        self.store.insert_task(task)
    }

    fn load_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        self.refused().unwrap_or_else(|| self.store.load_task(id))
    }

    fn update_task<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        self.updates.fetch_add(1, Ordering::SeqCst);
        self.refused()
            .unwrap_or_else(|| self.store.update_task(id, change))
    }

    fn purge_tasks(&self, now_ms: u64) -> StoreFuture<'_, u64> {
        self.store.purge_tasks(now_ms)
    }
}

/// A worker reads its task at every poll but writes its lease only when less than half a lease
/// and a poll are left: about twice per lease, not once per poll.
#[tokio::test]
async fn a_worker_reads_every_poll_and_renews_its_lease_about_twice_per_lease() {
    let h = harness();
    let store = Arc::new(Counting::new());
    // 40 polls per lease: a lease written at every poll would show 40 times the writes.
    let options = TaskOptions::default()
        .poll_interval(Duration::from_millis(25))
        .lease(Duration::from_secs(1));
    let server = TestServer::start(server_on(&h.probe, Arc::clone(&store), options)).await;
    let id = created(&server, "gated", json!({ "label": "renewed" })).await;
    let (loads, updates) = (
        store.loads.load(Ordering::SeqCst),
        store.updates.load(Ordering::SeqCst),
    );
    // Two leases' worth of polls, counted by the store (the test reads nothing meanwhile).
    within("80 polls of the worker", async {
        while store.loads.load(Ordering::SeqCst) < loads + 80 {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
    let renewals = store.updates.load(Ordering::SeqCst) - updates;
    assert!(
        (1..=6).contains(&renewals),
        "{renewals} lease writes over 80 polls of a 1 s lease"
    );
    h.probe.gate.notify_one();
    let done = until(&server, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "opened for renewed");
}

/// A heartbeat that fails while the lease has time left is retried at the next poll: a store
/// that is back before the lease ends leaves the tool running to its end. Real PostgreSQL,
/// whose task table another session locks until the worker's heartbeat has failed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_for_less_than_a_lease_leaves_the_tool_running() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let h = harness();
    let options = TaskOptions::default()
        .poll_interval(Duration::from_millis(200))
        .lease(Duration::from_secs(20));
    let (server, id) = gated_on_postgres(
        &schema,
        &h.probe,
        Duration::from_millis(300),
        options,
        "outlasted",
    )
    .await;
    let mut holder = schema.client().await;
    let lock = lock_tasks(&mut holder, &schema).await;
    // Two different heartbeats seen waiting for the lock: the first one failed (the store's
    // 300 ms lock timeout) and the worker tried again.
    let watcher = schema.client().await;
    let table = format!("%{}%mcp_tasks%", schema.name);
    let mut seen = std::collections::HashSet::new();
    within("two heartbeats waiting for the lock", async {
        while seen.len() < 2 {
            for row in watcher
                .query(
                    "SELECT pid::text || '@' || query_start::text FROM pg_stat_activity
                     WHERE wait_event_type = 'Lock' AND query LIKE $1",
                    &[&table],
                )
                .await
                .unwrap()
            {
                seen.insert(row.get::<_, String>(0));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    within("the unlock", lock.rollback()).await.unwrap();

    h.probe.gate.notify_one();
    let done = until(&server, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "opened for outlasted");
}

/// A store that fails every heartbeat at once (rather than hanging) is retried while the lease
/// has time left, and the tool is stopped a poll before the lease it last saw ends.
#[tokio::test]
async fn a_store_failing_at_once_stops_the_tool_before_its_lease_ends() {
    const LEASE: Duration = Duration::from_secs(2);
    let mut h = harness();
    let store = Arc::new(Counting::new());
    let options = TaskOptions::default()
        .poll_interval(Duration::from_millis(250))
        .lease(LEASE);
    let server = TestServer::start(server_on(&h.probe, Arc::clone(&store), options)).await;
    created(&server, "gated", json!({ "label": "refused" })).await;
    let loads = store.loads.load(Ordering::SeqCst);
    store.failing.store(true, Ordering::SeqCst);
    // No renewal succeeds after this: the lease the worker saw ends by `LEASE` from now.
    let failing_since = Instant::now();
    let dropped = within("the tool's future to be dropped", h.dropped.recv()).await;
    let stopped_after = failing_since.elapsed();
    assert_eq!(dropped, Some("gated"));
    assert!(
        stopped_after < LEASE,
        "the tool ran {stopped_after:?} past the failures"
    );
    assert!(
        store.loads.load(Ordering::SeqCst) > loads + 1,
        "the failing heartbeat was retried before the tool was stopped"
    );
}

/// Each ask of a task gets keys never used before in it: a second question under the tool's
/// same key waits for its own answer, and the first answer is not taken for it.
#[tokio::test]
async fn a_second_ask_under_the_same_key_waits_for_its_own_answer() {
    let h = harness();
    let server = start(&h.probe).await;
    let id = created(&server, "ask_twice", json!({})).await;
    let mut keys = Vec::new();
    for colour in ["red", "blue"] {
        // A task still showing the last round's question counts as not waiting yet.
        let asked = &keys;
        let waiting = tasks::until_status("input_required", POLL, || {
            let (server, id) = (&server, &id);
            async move {
                let task = get(server, id).await;
                let fresh = task["inputRequests"]
                    .as_object()
                    .is_some_and(|requests| requests.keys().all(|key| !asked.contains(key)));
                if fresh {
                    task
                } else {
                    json!({ "status": "answered" })
                }
            }
        })
        .await;
        let key = only_request_key(&waiting);
        answer_colour(&server, &id, &key, colour).await;
        keys.push(key);
    }
    let done = until(&server, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "red then blue");
    assert_ne!(keys[0], keys[1]);
}
