//! End-to-end tests of the protocol surface beyond tools: streams (progress, log messages,
//! cancellation), subscriptions, multi-round input, resources, prompts, completion, `Mcp-Param`
//! headers, and changing what the server offers at run time.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Call, TestServer, assert_conforms};
use mcp_tools::{
    CompletionTarget, Completions, Content, Context, InputRequired, LogLevel, McpServer, NoArgs,
    Prompt, PromptMessage, PromptSet, Resource, ResourceContents, ResourceSet, ResourceTemplate,
    RpcError, Tool, ToolInfo, ToolReply, ToolSet,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Reports progress three times, logging at two levels.
struct Steps;

impl Tool for Steps {
    type Args = NoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("steps", "Works in three steps.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> String {
        for step in 1..=3 {
            cx.progress(step as f64, Some(3.0), Some("working"));
            // Progress must strictly increase: a repeated value is dropped.
            cx.progress(step as f64, Some(3.0), None);
            cx.log(LogLevel::Info, format!("step {step}"));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cx.log(LogLevel::Error, "finished with a complaint");
        "done".into()
    }
}

/// Runs until cancelled, recording whether it was dropped or finished.
struct Endless {
    dropped: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Tool for Endless {
    type Args = NoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("endless", "Reports progress for ten seconds.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> String {
        let _guard = SetOnDrop(self.dropped.clone());
        for step in 0..100 {
            cx.progress(step as f64, None, None);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.finished.store(true, Ordering::SeqCst);
        "finished".into()
    }
}

#[derive(Deserialize, JsonSchema)]
struct CityArgs {
    city: String,
}

/// Asks the user to confirm, carrying the city through a sealed state.
struct Confirm;

impl Tool for Confirm {
    type Args = CityArgs;
    type Output = ToolReply<String>;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("confirm", "Books a trip after the user confirms.")
    }
    async fn call(&self, args: CityArgs, cx: Context) -> ToolReply<String> {
        let ok = cx
            .input_response("ok")
            .and_then(|r| r["content"]["ok"].as_bool());
        match (ok, cx.request_state()) {
            (Some(true), Some(state)) => {
                ToolReply::Complete(format!("Booked {} ({})", args.city, state["quote"]))
            }
            _ => ToolReply::InputRequired(
                InputRequired::new()
                    .elicit(
                        "ok",
                        format!("Book {}?", args.city),
                        json!({ "type": "object",
                        "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] }),
                    )
                    .state(json!({ "quote": 420 })),
            ),
        }
    }
}

/// Needs sampling.
struct Summarize;

impl Tool for Summarize {
    type Args = NoArgs;
    type Output = InputRequired;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("summarize", "Summarizes with the client's model.")
    }
    async fn call(&self, _: NoArgs, _cx: Context) -> InputRequired {
        InputRequired::new().sample("summary", json!({ "messages": [], "maxTokens": 10 }))
    }
}

#[derive(Deserialize, JsonSchema)]
struct RouteArgs {
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: Option<String>,
    #[schemars(extend("x-mcp-header" = "Shard"))]
    shard: Option<i64>,
}

struct Route;

impl Tool for Route {
    type Args = RouteArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("route", "Routes by region and shard.")
    }
    async fn call(&self, args: RouteArgs, _cx: Context) -> String {
        format!("{:?}/{:?}", args.region, args.shard)
    }
}

struct Extra;

impl Tool for Extra {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("extra", "Added while serving.")
    }
    async fn call(&self, _: NoArgs, _cx: Context) -> &'static str {
        "extra"
    }
}

struct Fixture {
    server: McpServer,
    dropped: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
}

fn fixture() -> Fixture {
    let dropped = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let tools = ToolSet::new()
        .with(Steps)
        .with(Endless {
            dropped: dropped.clone(),
            finished: finished.clone(),
        })
        .with(Confirm)
        .with(Summarize)
        .with(Route);
    let resources = ResourceSet::new()
        .with(Resource::text(
            "docs://readme",
            "Readme",
            "text/markdown",
            "# Hello",
        ))
        .with_template(
            ResourceTemplate::new(
                "docs://pages/{page}",
                "Pages",
                |uri, vars, _cx| async move {
                    Ok::<_, RpcError>(vec![ResourceContents::text(
                        uri,
                        "text/plain",
                        format!("page {}", vars["page"]),
                    )])
                },
            )
            .mime_type("text/plain"),
        );
    let prompts = PromptSet::new()
        .with(Prompt::new(
            "confirm",
            "A prompt named like a tool.",
            |_, _| async { Ok::<_, RpcError>(vec![PromptMessage::user(Content::text("confirm"))]) },
        ))
        .with(
            Prompt::new("greet", "Greets someone.", |args, _cx| async move {
                Ok::<_, RpcError>(vec![PromptMessage::user(Content::text(format!(
                    "Say hello to {}",
                    args["name"].as_str().unwrap_or_default()
                )))])
            })
            .argument("name", "Who to greet", true),
        );
    let completions = Completions::new().with(
        CompletionTarget::Prompt("greet".into()),
        "name",
        |value, _, _| {
            ["alice", "alex", "bob"]
                .into_iter()
                .filter(|n| n.starts_with(value))
                .map(str::to_owned)
                .collect()
        },
    );
    let server = McpServer::builder("surface", "1")
        .tools(tools)
        .resources(resources)
        .prompts(prompts)
        .completions(completions)
        .logging()
        .build()
        .unwrap();
    Fixture {
        server,
        dropped,
        finished,
    }
}

#[tokio::test]
async fn progress_and_log_messages_stream_before_the_result() {
    let server = TestServer::start(fixture().server).await;
    let call = Call::call_tool("steps", json!({})).meta("progressToken", json!("tok-1"));
    let call = call.meta("io.modelcontextprotocol/logLevel", json!("warning"));
    let reply = call.send(&server).await;
    assert!(reply.is_stream());
    assert_eq!(reply.headers["x-accel-buffering"], "no");
    let events = reply.events();
    let (result, notifications) = events.split_last().unwrap();
    assert_conforms("JSONRPCResultResponse", result);
    assert_eq!(result["result"]["content"][0]["text"], "done");
    let progress: Vec<f64> = notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .inspect(|n| {
            assert_conforms("ProgressNotification", n);
            assert_eq!(n["params"]["progressToken"], "tok-1");
        })
        .map(|n| n["params"]["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0]);
    let logs: Vec<&Value> = notifications
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .collect();
    assert_eq!(
        logs.len(),
        1,
        "only messages at or above the requested level: {logs:?}"
    );
    assert_conforms("LoggingMessageNotification", logs[0]);
    assert_eq!(logs[0]["params"]["level"], "error");

    // Without opting in, the same call is one JSON answer with no notifications.
    let plain = Call::call_tool("steps", json!({})).send(&server).await;
    assert!(!plain.is_stream());
    assert_eq!(plain.result()["content"][0]["text"], "done");
}

#[tokio::test]
async fn closing_the_stream_cancels_the_tool() {
    let fixture = fixture();
    let (dropped, finished) = (fixture.dropped.clone(), fixture.finished.clone());
    let server = TestServer::start(fixture.server).await;
    let call = Call::call_tool("endless", json!({})).meta("progressToken", json!(5));
    let mut request = common::client().post(server.url());
    for (name, value) in &call.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let mut response = request.json(&call.body).send().await.unwrap();
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
    drop(response);
    for _ in 0..50 {
        if dropped.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        dropped.load(Ordering::SeqCst),
        "the tool was not dropped when the client left"
    );
    assert!(!finished.load(Ordering::SeqCst));
}

/// Reads server-sent events from a live response.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn open(server: &TestServer, call: &Call) -> Events {
        let mut request = common::client().post(server.url());
        for (name, value) in &call.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.json(&call.body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// The next message, or `None` when the stream ends or nothing comes within `wait`.
    async fn next(&mut self, wait: Duration) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data:")) {
                    return Some(serde_json::from_str(data.trim()).unwrap());
                }
                continue;
            }
            match tokio::time::timeout(wait, self.response.chunk()).await {
                Ok(Ok(Some(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return None,
            }
        }
    }
}

fn listen(id: i64, filter: Value) -> Call {
    Call::new(
        "subscriptions/listen",
        json!(id),
        json!({ "notifications": filter }),
    )
}

#[tokio::test]
async fn subscriptions_follow_their_filter_and_end_with_a_result() {
    let server = fixture().server;
    let handle = server.clone();
    let live = TestServer::start(server).await;
    let wait = Duration::from_secs(2);

    let mut tools = Events::open(
        &live,
        &listen(
            41,
            json!({ "toolsListChanged": true, "resourceSubscriptions": ["docs://readme"] }),
        ),
    )
    .await;
    let ack = tools.next(wait).await.unwrap();
    assert_conforms("SubscriptionsAcknowledgedNotification", &ack);
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "toolsListChanged": true, "resourceSubscriptions": ["docs://readme"] })
    );

    let mut prompts = Events::open(
        &live,
        &listen(42, json!({ "promptsListChanged": true, "taskIds": ["x"] })),
    )
    .await;
    let ack = prompts.next(wait).await.unwrap();
    // Unsupported kinds are left out of the acknowledgement.
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "promptsListChanged": true })
    );

    handle.add_tool(Extra).unwrap();
    let changed = tools.next(wait).await.unwrap();
    assert_conforms("ToolListChangedNotification", &changed);
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    let listed = Call::new("tools/list", json!(1), json!({}))
        .send(&live)
        .await
        .result();
    assert!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "extra")
    );

    handle.notify_resource_updated("docs://readme/section");
    let updated = tools.next(wait).await.unwrap();
    assert_eq!(updated["method"], "notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], "docs://readme/section");

    handle.add_prompt(Prompt::new("more", "Another prompt.", |_, _| async {
        Ok::<_, RpcError>(Vec::<PromptMessage>::new())
    }));
    let changed = prompts.next(wait).await.unwrap();
    assert_eq!(changed["method"], "notifications/prompts/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        42
    );
    // The tool change never reached the prompts-only subscription.
    assert!(handle.remove_tool("extra"));
    assert_eq!(
        tools.next(wait).await.unwrap()["method"],
        "notifications/tools/list_changed"
    );

    handle.close_subscriptions();
    let last = prompts.next(wait).await.unwrap();
    assert_conforms("SubscriptionsListenResultResponse", &last);
    assert_eq!(last["id"], 42);
    assert_eq!(
        last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        42
    );
    assert!(
        prompts.next(Duration::from_millis(500)).await.is_none(),
        "the stream ends after the result"
    );
}

#[tokio::test]
async fn multi_round_input_is_sealed_and_bound_to_its_request() {
    let server = TestServer::start(fixture().server).await;
    let first = Call::call_tool("confirm", json!({ "city": "Lisbon" }))
        .capabilities(json!({ "elicitation": {} }))
        .send(&server)
        .await
        .json();
    assert_conforms("JSONRPCResultResponse", &first);
    let result = &first["result"];
    assert_conforms("InputRequiredResult", result);
    assert_eq!(result["resultType"], "input_required");
    assert_eq!(
        result["inputRequests"]["ok"]["method"],
        "elicitation/create"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();

    let retry = |city: &str, state: &str| {
        Call::call_tool("confirm", json!({ "city": city }))
            .capabilities(json!({ "elicitation": {} }))
            .body(|b| {
                b["params"]["inputResponses"] =
                    json!({ "ok": { "action": "accept", "content": { "ok": true } } });
                b["params"]["requestState"] = json!(state);
            })
    };
    let done = retry("Lisbon", &state).send(&server).await.result();
    assert_eq!(done["content"][0]["text"], "Booked Lisbon (420)");

    let tampered = retry("Lisbon", &format!("{state}-TAMPERED"))
        .send(&server)
        .await;
    assert_eq!(tampered.error_code(), Some(-32602));
    // The state is bound to the arguments it was issued for.
    let moved = retry("Porto", &state).send(&server).await;
    assert_eq!(moved.error_code(), Some(-32602), "{}", moved.text);

    // Nor to another method with the same name.
    let as_prompt = Call::new(
        "prompts/get",
        json!(8),
        json!({ "name": "confirm", "arguments": { "city": "Lisbon" } }),
    )
    .body(|b| b["params"]["requestState"] = json!(state))
    .send(&server)
    .await;
    assert_eq!(as_prompt.error_code(), Some(-32602), "{}", as_prompt.text);

    // Elicitation modes count: a client that declared only URL mode cannot be asked for a form.
    let url_only = Call::call_tool("confirm", json!({ "city": "Lisbon" }))
        .capabilities(json!({ "elicitation": { "url": {} } }))
        .send(&server)
        .await;
    assert_eq!(
        (url_only.status, url_only.error_code()),
        (400, Some(-32021)),
        "{}",
        url_only.text
    );
    assert_eq!(
        url_only.json()["error"]["data"],
        json!({ "requiredCapabilities": { "elicitation": {} } })
    );

    // Absent and empty arguments are the same call: a state sealed for one opens for the other.
    let first = Call::call_tool("summarize", json!({}))
        .capabilities(json!({ "sampling": {} }))
        .send(&server)
        .await
        .result();
    let again = Call::call_tool("summarize", json!({}))
        .capabilities(json!({ "sampling": {} }))
        .body(|b| {
            b["params"].as_object_mut().unwrap().remove("arguments");
            b["params"]["requestState"] = first["requestState"].clone();
        })
        .send(&server)
        .await
        .result();
    assert_eq!(again["resultType"], "input_required");

    // Asking for a capability the client did not declare is refused before anything runs.
    let refused = Call::call_tool("summarize", json!({})).send(&server).await;
    assert_eq!((refused.status, refused.error_code()), (400, Some(-32021)));
    assert_eq!(
        refused.json()["error"]["data"],
        json!({ "requiredCapabilities": { "sampling": {} } })
    );
    assert_conforms("MissingRequiredClientCapabilityError", &refused.json());
    let declared = Call::call_tool("summarize", json!({}))
        .capabilities(json!({ "sampling": {} }))
        .send(&server)
        .await
        .result();
    assert_eq!(declared["resultType"], "input_required");
}

#[tokio::test]
async fn resources_prompts_and_completion() {
    let server = TestServer::start(fixture().server).await;
    let discover = Call::discover().send(&server).await.result();
    assert_eq!(
        discover["capabilities"],
        json!({ "tools": { "listChanged": true }, "resources": { "subscribe": true, "listChanged": true },
            "prompts": { "listChanged": true }, "completions": {}, "logging": {} })
    );
    let listed = Call::new("resources/list", json!(1), json!({}))
        .send(&server)
        .await
        .json();
    assert_conforms("ListResourcesResultResponse", &listed);
    assert_eq!(listed["result"]["resources"][0]["uri"], "docs://readme");
    let templates = Call::new("resources/templates/list", json!(1), json!({}))
        .send(&server)
        .await
        .json();
    assert_conforms("ListResourceTemplatesResultResponse", &templates);

    let read = |uri: &str| {
        Call::new("resources/read", json!(2), json!({ "uri": uri })).header("mcp-name", uri)
    };
    let text = read("docs://readme").send(&server).await.json();
    assert_conforms("ReadResourceResultResponse", &text);
    assert_eq!(text["result"]["contents"][0]["text"], "# Hello");
    let page = read("docs://pages/7").send(&server).await.result();
    assert_eq!(page["contents"][0]["text"], "page \"7\"");
    let missing = read("docs://nothing").send(&server).await;
    assert_eq!(missing.error_code(), Some(-32602));
    assert_eq!(
        missing.json()["error"]["data"],
        json!({ "uri": "docs://nothing" })
    );
    let mismatch = read("docs://readme")
        .header("mcp-name", "docs://other")
        .send(&server)
        .await;
    assert_eq!(
        (mismatch.status, mismatch.error_code()),
        (400, Some(-32020))
    );

    let prompt = Call::new(
        "prompts/get",
        json!(3),
        json!({ "name": "greet", "arguments": { "name": "Ada" } }),
    )
    .send(&server)
    .await
    .json();
    assert_conforms("GetPromptResultResponse", &prompt);
    assert_eq!(
        prompt["result"]["messages"][0]["content"]["text"],
        "Say hello to Ada"
    );
    let incomplete = Call::new("prompts/get", json!(3), json!({ "name": "greet" }))
        .send(&server)
        .await;
    assert_eq!(incomplete.error_code(), Some(-32602));
    let unknown = Call::new("prompts/get", json!(3), json!({ "name": "nope" }))
        .send(&server)
        .await;
    assert_eq!(unknown.error_code(), Some(-32602));

    let completion = Call::new("completion/complete", json!(4), json!({
        "ref": { "type": "ref/prompt", "name": "greet" }, "argument": { "name": "name", "value": "al" } }))
        .send(&server)
        .await
        .json();
    assert_conforms("CompleteResultResponse", &completion);
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!(["alice", "alex"])
    );
}

#[tokio::test]
async fn mirrored_parameters_must_agree_with_their_headers() {
    let server = TestServer::start(fixture().server).await;
    let route = |args: Value| Call::call_tool("route", args);
    let ok = route(json!({ "region": "eu", "shard": 42 }))
        .header("mcp-param-region", "eu")
        .header("Mcp-Param-Shard", "42.0")
        .send(&server)
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let encoded = route(json!({ "region": "é" }))
        .header("mcp-param-region", "=?base64?w6k=?=")
        .send(&server)
        .await;
    assert_eq!(encoded.status, 200, "{}", encoded.text);
    let absent = route(json!({})).send(&server).await;
    assert_eq!(absent.status, 200);
    for (args, headers) in [
        (json!({ "region": "eu" }), vec![]),
        (json!({ "region": "eu" }), vec![("mcp-param-region", "us")]),
        (json!({ "shard": 1 }), vec![("mcp-param-shard", "2")]),
        (json!({}), vec![("mcp-param-region", "eu")]),
    ] {
        let mut call = route(args.clone());
        for (name, value) in headers {
            call = call.header(name, value);
        }
        let reply = call.send(&server).await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (400, Some(-32020)),
            "{args}: {}",
            reply.text
        );
    }
}

#[tokio::test]
async fn quiet_streams_get_keep_alive_comments() {
    let server = McpServer::builder("surface", "1")
        .tools(ToolSet::new().with(Extra))
        .keep_alive(Duration::from_millis(100))
        .build()
        .unwrap();
    let live = TestServer::start(server).await;
    let call = listen(7, json!({ "toolsListChanged": true }));
    let mut request = common::client().post(live.url());
    for (name, value) in &call.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let mut response = request.json(&call.body).send().await.unwrap();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while !seen.lines().any(|line| line.starts_with(':')) && tokio::time::Instant::now() < deadline
    {
        if let Ok(Ok(Some(chunk))) =
            tokio::time::timeout(Duration::from_millis(500), response.chunk()).await
        {
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
    assert!(
        seen.contains("notifications/subscriptions/acknowledged"),
        "{seen}"
    );
    assert!(
        seen.lines().any(|line| line.starts_with(':')),
        "no keep-alive comment: {seen:?}"
    );
    // No event carries an id: streams are not resumable.
    assert!(!seen.lines().any(|line| line.starts_with("id:")));
}
