//! End-to-end tests of the protocol surface beyond tools: streams (progress, log messages,
//! cancellation), subscriptions, multi-round input, resources, prompts, completion, `Mcp-Param`
//! headers, and changing what the server offers at run time.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::events::Events;
use common::{Call, TestServer, assert_conforms, within};
use mcp_tools::completion::{CompletionTarget, Completions};
use mcp_tools::prompts::{Prompt, PromptMessage, PromptSet};
use mcp_tools::protocol::{LogLevel, RpcError};
use mcp_tools::resources::{Resource, ResourceContents, ResourceSet, ResourceTemplate};
use mcp_tools::tools::{Content, InputRequired, NoArgs, Tool, ToolInfo, ToolReply, ToolSet};
use mcp_tools::{Context, McpServer};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

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
            tokio::task::yield_now().await;
        }
        cx.log(LogLevel::Error, "finished with a complaint");
        "done".into()
    }
}

/// Reports progress once, then waits for a release that never comes: only cancellation ends it.
struct Endless {
    dropped: Arc<Notify>,
    finished: Arc<AtomicBool>,
}

/// Signals when the tool's future is dropped, whether it finished or was cancelled.
struct NotifyOnDrop(Arc<Notify>);

impl Drop for NotifyOnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

impl Tool for Endless {
    type Args = NoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("endless", "Reports progress, then runs until cancelled.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> String {
        let _guard = NotifyOnDrop(self.dropped.clone());
        cx.progress(0.0, None, None);
        std::future::pending::<()>().await;
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
    dropped: Arc<Notify>,
    finished: Arc<AtomicBool>,
}

fn fixture() -> Fixture {
    let dropped = Arc::new(Notify::new());
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
    let mut events = Events::open(&server.url(), &call).await;
    let progress = events.next().await;
    assert_conforms("ProgressNotification", &progress);
    drop(events);
    // The tool can only end by being dropped: it waits for a release nobody sends. So its drop
    // guard firing proves the call was cancelled, and a server that kept running it times out.
    within(
        "the tool's future to be dropped after the client closed the stream",
        dropped.notified(),
    )
    .await;
    assert!(!finished.load(Ordering::SeqCst));
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

    let mut tools = Events::open(
        &live.url(),
        &listen(
            41,
            json!({ "toolsListChanged": true, "resourceSubscriptions": ["docs://readme"] }),
        ),
    )
    .await;
    let ack = tools.next().await;
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
        &live.url(),
        &listen(42, json!({ "promptsListChanged": true, "taskIds": ["x"] })),
    )
    .await;
    let ack = prompts.next().await;
    // Unsupported kinds are left out of the acknowledgement.
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "promptsListChanged": true })
    );

    handle.add_tool(Extra).unwrap();
    let changed = tools.next().await;
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
    let updated = tools.next().await;
    assert_eq!(updated["method"], "notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], "docs://readme/section");

    handle.add_prompt(Prompt::new("more", "Another prompt.", |_, _| async {
        Ok::<_, RpcError>(Vec::<PromptMessage>::new())
    }));
    let changed = prompts.next().await;
    assert_eq!(changed["method"], "notifications/prompts/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        42
    );
    // The tool change never reached the prompts-only subscription.
    assert!(handle.remove_tool("extra"));
    assert_eq!(
        tools.next().await["method"],
        "notifications/tools/list_changed"
    );

    handle.close_subscriptions();
    let last = prompts.next().await;
    assert_conforms("SubscriptionsListenResultResponse", &last);
    assert_eq!(last["id"], 42);
    assert_eq!(
        last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        42
    );
    // The stream ends after the result.
    prompts.end().await;
}

#[tokio::test]
async fn shutting_down_a_served_server_ends_open_subscriptions_and_returns() {
    let server = fixture().server;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_listener(listener, async {
        let _ = stopped.await;
    }));
    let mut events = Events::open(&url, &listen(9, json!({ "toolsListChanged": true }))).await;
    let ack = events.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");

    stop.send(()).unwrap();
    // A subscription never ends by itself, so the server drains only if shutdown closes it.
    let last = events.next().await;
    assert_conforms("SubscriptionsListenResultResponse", &last);
    assert_eq!(last["id"], 9);
    events.end().await;
    within("serve_listener to return once draining is done", serving)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_subscription_that_fell_behind_is_resent_everything_it_follows() {
    let server = fixture().server;
    let handle = server.clone();
    let live = TestServer::start(server).await;
    // More resources than a stream buffers, so the catch-up cannot fit in the buffer at once.
    let uris: Vec<String> = (0..300).map(|i| format!("docs://many/{i}")).collect();
    let mut events = Events::open(
        &live.url(),
        &listen(
            5,
            json!({ "toolsListChanged": true, "resourceSubscriptions": uris }),
        ),
    )
    .await;
    assert_eq!(
        events.next().await["method"],
        "notifications/subscriptions/acknowledged"
    );

    // This test runs on one thread: nothing else runs until the next await, so the tool change
    // is pushed out of the change feed by the flood of unrelated updates before the
    // subscription sees any of it. Only the catch-up after falling behind can deliver it.
    handle.add_tool(Extra).unwrap();
    for _ in 0..1_000 {
        handle.notify_resource_updated("docs://unrelated");
    }

    let mut tools_changed = false;
    let mut updated = std::collections::BTreeSet::new();
    while !(tools_changed && updated.len() == uris.len()) {
        let message = events.next().await;
        assert_eq!(
            message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            5
        );
        match message["method"].as_str().unwrap() {
            "notifications/tools/list_changed" => {
                assert_conforms("ToolListChangedNotification", &message);
                tools_changed = true;
            }
            "notifications/resources/updated" => {
                assert_conforms("ResourceUpdatedNotification", &message);
                let uri = message["params"]["uri"].as_str().unwrap().to_owned();
                assert!(uris.contains(&uri), "not subscribed: {uri}");
                updated.insert(uri);
            }
            other => panic!("unexpected notification {other}: {message}"),
        }
    }
    handle.close_subscriptions();
    assert_conforms("SubscriptionsListenResultResponse", &events.next().await);
    events.end().await;
}

#[tokio::test]
async fn resources_added_and_removed_while_serving_notify_their_listeners() {
    let server = fixture().server;
    let handle = server.clone();
    let live = TestServer::start(server).await;
    let mut events = Events::open(
        &live.url(),
        &listen(6, json!({ "resourcesListChanged": true })),
    )
    .await;
    let ack = events.next().await;
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "resourcesListChanged": true })
    );
    let listed_uris = || async {
        let listed = Call::new("resources/list", json!(1), json!({}))
            .send(&live)
            .await
            .json();
        assert_conforms("ListResourcesResultResponse", &listed);
        listed["result"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["uri"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };

    handle.add_resource(Resource::text(
        "docs://changelog",
        "Changelog",
        "text/markdown",
        "# Changes",
    ));
    let changed = events.next().await;
    assert_conforms("ResourceListChangedNotification", &changed);
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        6
    );
    assert!(listed_uris().await.contains(&"docs://changelog".to_owned()));
    let read = Call::new(
        "resources/read",
        json!(2),
        json!({ "uri": "docs://changelog" }),
    )
    .header("mcp-name", "docs://changelog")
    .send(&live)
    .await
    .json();
    assert_conforms("ReadResourceResultResponse", &read);
    assert_eq!(read["result"]["contents"][0]["text"], "# Changes");

    assert!(handle.remove_resource("docs://changelog"));
    assert!(!handle.remove_resource("docs://changelog"), "already gone");
    let changed = events.next().await;
    assert_eq!(changed["method"], "notifications/resources/list_changed");
    assert!(!listed_uris().await.contains(&"docs://changelog".to_owned()));

    handle.close_subscriptions();
    assert_conforms("SubscriptionsListenResultResponse", &events.next().await);
    events.end().await;
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
    for (shard, header) in [("9007199254740993", "9007199254740993"), ("42", "4.2e1")] {
        let arguments: Value = serde_json::from_str(&format!(r#"{{ "shard": {shard} }}"#)).unwrap();
        let exact = route(arguments)
            .header("mcp-param-shard", header)
            .send(&server)
            .await;
        assert_eq!(exact.status, 200, "{shard} / {header}: {}", exact.text);
    }
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
        // One `f64`, two integers: compared as numbers, exactly.
        (
            serde_json::from_str::<Value>(r#"{ "shard": 9007199254740993 }"#).unwrap(),
            vec![("mcp-param-shard", "9007199254740992")],
        ),
        (json!({ "shard": 42 }), vec![("mcp-param-shard", "42.5")]),
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

/// A client of an earlier revision sends no mirror of an argument, and is served without one;
/// but a mirror it does send must agree with the body, as a current client's must, so a gateway
/// that routes or authorizes on `Mcp-Param-Region` sees the region that runs.
#[tokio::test]
async fn a_legacy_request_is_held_to_the_mirrors_it_sends() {
    let server = TestServer::start(fixture().server).await;
    let legacy = |args: Value| {
        Call::call_tool("route", args)
            .without_header("mcp-protocol-version")
            .without_meta("io.modelcontextprotocol/protocolVersion")
    };
    let unmirrored = legacy(json!({ "region": "us-east-1" })).send(&server).await;
    assert_eq!(unmirrored.status, 200, "{}", unmirrored.text);
    let agreeing = legacy(json!({ "region": "us-east-1" }))
        .header("mcp-param-region", "us-east-1")
        .send(&server)
        .await;
    assert_eq!(agreeing.status, 200, "{}", agreeing.text);
    for (args, header) in [
        (json!({ "region": "us-east-1" }), "eu-west-1"),
        (json!({}), "eu-west-1"),
    ] {
        let reply = legacy(args.clone())
            .header("mcp-param-region", header)
            .send(&server)
            .await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (400, Some(-32020)),
            "{args} with Mcp-Param-Region {header}: {}",
            reply.text
        );
    }
}

/// Clients drop a tool whose mirrored property does not have one `type` string, and an `Option`
/// argument's schema says `["string", "null"]`: `tools/list` publishes the single type (with
/// the safe integer range), while the server still takes an explicit `null` as no value.
#[tokio::test]
async fn mirrored_parameters_are_published_in_the_shape_clients_accept() {
    let server = TestServer::start(fixture().server).await;
    let listed = Call::new("tools/list", json!(1), json!({}))
        .send(&server)
        .await
        .result();
    let route = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "route")
        .expect("route is listed");
    let properties = &route["inputSchema"]["properties"];
    assert_eq!(properties["region"]["type"], "string", "{properties}");
    assert_eq!(properties["shard"]["type"], "integer", "{properties}");
    assert_eq!(
        properties["shard"]["minimum"],
        json!(-9_007_199_254_740_991_i64)
    );
    assert_eq!(
        properties["shard"]["maximum"],
        json!(9_007_199_254_740_991_i64)
    );
    assert!(
        route["inputSchema"]["required"]
            .as_array()
            .is_none_or(|required| required.is_empty()),
        "both stay optional: {route}"
    );
    for (name, property) in properties.as_object().unwrap() {
        if property.get("x-mcp-header").is_some() {
            assert!(
                matches!(
                    property["type"].as_str(),
                    Some("string" | "integer" | "boolean")
                ),
                "{name}: {property}"
            );
        }
    }

    for arguments in [
        json!({ "region": null }),
        json!({ "region": null, "shard": null }),
    ] {
        let reply = Call::call_tool("route", arguments.clone())
            .send(&server)
            .await;
        assert_eq!(reply.status, 200, "{arguments}: {}", reply.text);
        assert_eq!(
            reply.result()["content"][0]["text"],
            "None/None",
            "{arguments}: {}",
            reply.text
        );
    }
}

/// Open `subscriptions/listen` streams are capped per principal: one more is a real HTTP 429
/// before any stream opens, another principal is not affected, and closing a stream frees its
/// slot.
#[tokio::test]
async fn listen_streams_are_capped_per_principal() {
    let server = McpServer::builder("surface", "1")
        .tools(ToolSet::new().with(Extra))
        .max_listens_per_principal(2)
        .authenticate(common::tools::bearer_subject)
        .build()
        .unwrap();
    let live = TestServer::start(server).await;
    let as_who = |who: &str, id: i64| {
        listen(id, json!({ "toolsListChanged": true }))
            .header("authorization", &format!("Bearer {who}"))
    };
    let mut open = Vec::new();
    for id in 1..=2 {
        let mut events = Events::open(&live.url(), &as_who("alice", id)).await;
        let acknowledged = events.next().await;
        assert_eq!(
            acknowledged["method"],
            "notifications/subscriptions/acknowledged"
        );
        open.push(events);
    }
    let refused = as_who("alice", 3).send(&live).await;
    assert_eq!(
        (refused.status, refused.error_code()),
        (429, Some(-32000)),
        "{}",
        refused.text
    );
    let body = refused.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_eq!(body["error"]["data"]["limit"], 2);
    let mut bob = Events::open(&live.url(), &as_who("bob", 4)).await;
    assert_eq!(
        bob.next().await["method"],
        "notifications/subscriptions/acknowledged"
    );
    // Closing one of Alice's streams frees a slot, once the server has seen it go.
    drop(open.pop());
    within("a freed listen slot", async {
        loop {
            let reply = as_who("alice", 5).header("accept", "application/json, text/event-stream");
            let mut request = common::client().post(live.url());
            for (name, value) in &reply.headers {
                request = request.header(name.as_str(), value.as_str());
            }
            let response = request.json(&reply.body).send().await.unwrap();
            if response.status() == 200 {
                return;
            }
            assert_eq!(response.status(), 429);
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn quiet_streams_get_keep_alive_comments() {
    let server = McpServer::builder("surface", "1")
        .tools(ToolSet::new().with(Extra))
        .keep_alive(Duration::from_millis(100))
        .build()
        .unwrap();
    let live = TestServer::start(server).await;
    let mut events =
        Events::open(&live.url(), &listen(7, json!({ "toolsListChanged": true }))).await;
    // A comment is no event, so `next()` would skip it: read the raw stream instead.
    within("a keep-alive comment on the quiet stream", async {
        while !events.buffer.lines().any(|line| line.starts_with(':')) {
            assert!(
                events.read_chunk().await,
                "the stream ended before a keep-alive comment: {:?}",
                events.buffer
            );
        }
    })
    .await;
    let seen = &events.buffer;
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
