//! The client speaks 2026-07-28 to this project's example servers, as processes over HTTP and
//! over stdio, and to servers built here: discovery, listing page by page within the server's
//! cache lifetime, typed results and errors, `Mcp-Param-*` headers, streamed progress and log
//! messages, requests for input, tasks and subscriptions.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tools::client::{
    Client, ClientError, ListenEvent, Notification, Submitted, SubscriptionFilter, ToolCall,
    TransportErrorKind,
};
use mcp_tools::protocol::LogLevel;
use mcp_tools::tasks::TaskStatus;
use mcp_tools::{McpServer, MemoryStore};
use serde_json::{Map, Value, json};

use crate::basket;
use crate::common::{TestServer, within};
use crate::support::{self, ExampleServer, FaultProxy, example};

/// A client of `url` that records the notifications it receives and answers every request for
/// input by accepting it with a name, a color and a confirmation.
async fn answering_client(url: &str) -> (Client, Arc<Mutex<Vec<Notification>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&received);
    let client = Client::builder()
        .client_info("client-tests", "1.0.0")
        .capabilities(json!({ "elicitation": {} }))
        .on_notification(move |notification| sink.lock().unwrap().push(notification))
        .on_input(|requests: Map<String, Value>| async move {
            Ok(requests
                .into_iter()
                .map(|(key, _)| {
                    let content =
                        json!({ "name": "Ada", "color": "green", "confirm": true, "ok": true });
                    (key, json!({ "action": "accept", "content": content }))
                })
                .collect())
        })
        .connect_http(url);
    let client = within("connecting", client).await.unwrap();
    (client, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_and_errors_are_typed() {
    let server = ExampleServer::start("conformance", &[]).await;
    let client = support::client(&server.url).await;
    let discovery = client.discovery().expect("discovered when connecting");
    assert!(
        discovery
            .supported_versions
            .iter()
            .any(|v| v == "2026-07-28")
    );
    assert_eq!(discovery.server_name(), Some("mcp-conformance-test-server"));
    assert!(discovery.capabilities.contains_key("tools"));

    let text = within(
        "a text tool",
        client.call_tool("test_simple_text", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(text.text(), "This is a simple text response for testing.");
    assert!(!text.is_error);
    let mixed = within(
        "a mixed tool",
        client.call_tool("test_multiple_content_types", json!({})),
    )
    .await
    .unwrap();
    let kinds: Vec<&str> = mixed
        .content
        .iter()
        .map(|block| block["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["text", "image", "resource"]);

    match within(
        "an error tool",
        client.call_tool("test_error_handling", json!({})),
    )
    .await
    {
        Err(ClientError::Tool(failure)) => {
            assert_eq!(failure.tool, "test_error_handling");
            assert_eq!(failure.code, None, "a plain error result carries no code");
            assert!(failure.message.contains("intentionally"), "{failure}");
            assert!(failure.result.is_error);
        }
        other => panic!("expected a tool error, got {other:?}"),
    }
    let unknown = within(
        "an unknown tool",
        client.call_tool("no_such_tool", json!({})),
    )
    .await
    .unwrap_err();
    assert_eq!(unknown.rpc_code(), Some(-32602), "{unknown}");
    let refused = within(
        "arguments that are not an object",
        client.call_tool("test_simple_text", json!([1, 2])),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, ClientError::InvalidRequest(_)),
        "{refused}"
    );
}

/// A tool whose argument is mirrored in `Mcp-Param-Region`: the client sends the header (Base64
/// for text that is not plain ASCII), and a client that had not listed the tools yet lists them
/// when the server refuses the call for the missing header, then sends it once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_are_mirrored_in_the_headers_the_tool_declares() {
    let server = ExampleServer::start("conformance", &[]).await;
    let proxy =
        FaultProxy::start(vec![format!("127.0.0.1:{}", server.port).parse().unwrap()]).await;
    let client = support::client(&proxy.url()).await;
    let first = within(
        "a call before any listing",
        client.call_tool("test_custom_headers", json!({ "region": "eu-west-1" })),
    )
    .await
    .unwrap();
    assert_eq!(first.text(), "Region: eu-west-1");
    let calls = proxy.seen_of("tools/call", Some("test_custom_headers"));
    assert_eq!(
        calls.len(),
        2,
        "refused once for the header, then sent with it"
    );
    assert!(
        !calls[0]
            .text
            .to_ascii_lowercase()
            .contains("mcp-param-region")
    );
    assert!(
        calls[1]
            .text
            .to_ascii_lowercase()
            .contains("mcp-param-region: eu-west-1")
    );
    assert_eq!(proxy.seen_of("tools/list", None).len(), 1);

    let zurich = within(
        "a region that is not ASCII",
        client.call_tool("test_custom_headers", json!({ "region": "Zürich" })),
    )
    .await
    .unwrap();
    assert_eq!(zurich.text(), "Region: Zürich");
    let last = proxy.seen_of("tools/call", None).pop().unwrap();
    assert!(
        last.text.contains("=?base64?WsO8cmljaA==?="),
        "the header is sent as Base64: {}",
        last.text
    );
    assert_eq!(
        proxy.seen_of("tools/call", None).len(),
        3,
        "no refusal this time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_progress_and_log_messages_reach_the_callback() {
    let server = ExampleServer::start("conformance", &[]).await;
    let (client, received) = answering_client(&server.url).await;
    let result = within(
        "a tool with progress",
        client.call(ToolCall::new("test_tool_with_progress", json!({})).progress()),
    )
    .await
    .unwrap();
    let token = result.text();
    let progress: Vec<(f64, Value)> = received
        .lock()
        .unwrap()
        .drain(..)
        .filter_map(|notification| match notification {
            Notification::Progress {
                token, progress, ..
            } => Some((progress, token)),
            _ => None,
        })
        .collect();
    assert_eq!(
        progress.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        [0.0, 50.0, 100.0]
    );
    assert!(progress.iter().all(|(_, sent)| sent == &json!(token)));

    within(
        "a tool that logs",
        client.call(ToolCall::new("test_tool_with_logging", json!({})).log_level(LogLevel::Info)),
    )
    .await
    .unwrap();
    let logs: Vec<Value> = received
        .lock()
        .unwrap()
        .drain(..)
        .filter_map(|notification| match notification {
            Notification::Log {
                level: LogLevel::Info,
                data,
                ..
            } => Some(data),
            _ => None,
        })
        .collect();
    assert_eq!(logs.len(), 3, "{logs:?}");

    within(
        "a tool that logs, unasked",
        client.call(ToolCall::new("test_logging_tool", json!({}))),
    )
    .await
    .unwrap();
    assert!(
        received.lock().unwrap().is_empty(),
        "no log messages unasked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_input_go_to_the_handler_round_after_round() {
    let server = ExampleServer::start("conformance", &[]).await;
    let (client, _) = answering_client(&server.url).await;
    let hello = within(
        "an elicitation",
        client.call_tool("test_input_required_result_elicitation", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(hello.text(), "Hello, Ada!");
    let rounds = within(
        "two rounds",
        client.call_tool("test_input_required_result_multi_round", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(rounds.text(), "Ada likes green");

    // Declared, but no handler to answer.
    let unanswering = within(
        "connecting",
        Client::builder()
            .capabilities(json!({ "elicitation": {} }))
            .connect_http(&server.url),
    )
    .await
    .unwrap();
    let unanswered = within(
        "an elicitation without a handler",
        unanswering.call_tool("test_input_required_result_elicitation", json!({})),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(unanswered, ClientError::InputRequired(ref why) if why.contains("user_name")),
        "{unanswered}"
    );
    // Not declared: the server refuses to ask.
    let undeclared = support::client(&server.url).await;
    let refused = within(
        "an elicitation the client did not declare",
        undeclared.call_tool("test_input_required_result_elicitation", json!({})),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.rpc_code(), Some(-32021), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_polled_to_their_end() {
    let server = ExampleServer::start("conformance", &[]).await;
    let (client, _) = answering_client(&server.url).await;
    let started = within(
        "a task",
        client.submit(ToolCall::new("slow_compute", json!({ "seconds": 0.3 })).task()),
    )
    .await
    .unwrap();
    let Submitted::Task(task) = started else {
        panic!("a client that takes tasks gets one: {started:?}");
    };
    assert_eq!(task.status, TaskStatus::Working);
    let done = within("the task's end", client.wait_task(&task.task_id))
        .await
        .unwrap();
    assert_eq!(done.text(), "Computed a result in 0.3 s");

    let confirmed = within(
        "a task that asks for input",
        client.call(ToolCall::new("confirm_delete", json!({ "filename": "a.txt" })).task()),
    )
    .await
    .unwrap();
    assert_eq!(confirmed.text(), "Deleted a.txt");

    let failed = within(
        "a task whose tool fails",
        client.call(ToolCall::new("failing_job", json!({})).task()),
    )
    .await
    .unwrap();
    assert!(
        failed.is_error,
        "a tool error completes the task: {failed:?}"
    );
    assert_eq!(failed.structured_content.unwrap()["code"], "JOB_FAILED");

    let broken = within(
        "a task that fails",
        client.call(ToolCall::new("protocol_error_job", json!({})).task()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            broken,
            ClientError::Task {
                status: TaskStatus::Failed,
                ..
            }
        ),
        "{broken}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_hears_of_changes_and_the_listing_is_read_again() {
    let server = ExampleServer::start("conformance", &[]).await;
    let proxy =
        FaultProxy::start(vec![format!("127.0.0.1:{}", server.port).parse().unwrap()]).await;
    let client = support::client(&proxy.url()).await;
    within("listing", client.list_tools()).await.unwrap();
    within("listing again", client.list_tools()).await.unwrap();
    assert_eq!(
        proxy.seen_of("tools/list", None).len(),
        1,
        "kept while fresh"
    );

    let mut subscription = within(
        "subscribing",
        client.listen(SubscriptionFilter::new().tools().prompts()),
    )
    .await
    .unwrap();
    assert_eq!(subscription.acknowledged()["toolsListChanged"], true);
    within(
        "a change",
        client.call_tool("test_trigger_tool_change", json!({})),
    )
    .await
    .unwrap();
    let event = within("the notification", subscription.next()).await;
    assert!(
        matches!(event, Some(Ok(ListenEvent::ToolsListChanged))),
        "{event:?}"
    );
    within("listing after the change", client.list_tools())
        .await
        .unwrap();
    assert_eq!(proxy.seen_of("tools/list", None).len(), 2, "read again");
    drop(subscription);
}

/// The listing is read page by page and kept as long as the server's `ttlMs` says: not at all
/// with 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_is_read_page_by_page_and_kept_as_long_as_the_server_says() {
    for (ttl, kept) in [(Duration::from_secs(60), true), (Duration::ZERO, false)] {
        let server = McpServer::builder("pages", "1.0.0")
            .tools(basket::tool_set())
            .store(MemoryStore::default())
            .page_size(2)
            .list_ttl(ttl)
            .build()
            .unwrap();
        let server = TestServer::start(server).await;
        let proxy = FaultProxy::start(vec![server.addr]).await;
        let client = support::client(&proxy.url()).await;
        let tools = within("listing", client.list_tools()).await.unwrap();
        let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
        assert_eq!(names.len(), 10, "{names:?}");
        assert_eq!(
            proxy.seen_of("tools/list", None).len(),
            5,
            "five pages of two"
        );
        within("listing again", client.list_tools()).await.unwrap();
        let pages = proxy.seen_of("tools/list", None).len();
        assert_eq!(pages, if kept { 5 } else { 10 }, "ttl {ttl:?}");
        let rules = tools
            .iter()
            .find(|tool| tool.name() == "basket_upgrade_memory")
            .and_then(|tool| tool.state_rules())
            .expect("published rules");
        assert_eq!(rules.resource(), "basket");
        assert!(rules.mutates());
        assert_eq!(rules.handle_argument(), Some("basket_id"));
        assert_eq!(rules.precondition_argument(), Some("expected_version"));
        assert_eq!(rules.idempotency_argument(), Some("operation_id"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_the_server_is_a_child_process() {
    let quickstart = example("quickstart");
    let client = within(
        "starting the quickstart",
        Client::builder()
            .client_info("client-tests", "1.0.0")
            .connect_stdio(&quickstart, ["--stdio"]),
    )
    .await
    .unwrap();
    assert_eq!(
        client.discovery().unwrap().server_name(),
        Some("quickstart")
    );
    let sum = within("add", client.call_tool("add", json!({ "a": 20, "b": 22 })))
        .await
        .unwrap();
    assert_eq!(sum.structured_content, Some(json!({ "sum": 42 })));
    let echoed = within(
        "echo",
        client.call_tool("echo", json!({ "text": "line one\nline two" })),
    )
    .await
    .unwrap();
    assert_eq!(echoed.text(), "line one\nline two");
    let who = within("whoami", client.call_tool("whoami", json!({})))
        .await
        .unwrap();
    assert_eq!(who.text(), "client-tests, speaking MCP 2026-07-28");
    let overflow = within(
        "an overflow",
        client.call_tool("add", json!({ "a": i64::MAX, "b": 1 })),
    )
    .await
    .unwrap_err();
    match overflow {
        ClientError::Tool(failure) => assert_eq!(failure.code.as_deref(), Some("OVERFLOW")),
        other => panic!("{other}"),
    }
    // Concurrent requests over one pipe, each matched to its answer.
    let calls: Vec<_> = (0..16)
        .map(|a| {
            let client = client.clone();
            tokio::spawn(async move {
                let sum = client.call_tool("add", json!({ "a": a, "b": 1000 })).await;
                sum.unwrap().structured_content.unwrap()["sum"]
                    .as_i64()
                    .unwrap()
            })
        })
        .collect();
    let mut sums = Vec::new();
    for call in calls {
        sums.push(within("a concurrent call", call).await.unwrap());
    }
    assert_eq!(sums, (1000..1016).collect::<Vec<i64>>());
}

/// Over stdio a request the client gives up on is cancelled (`notifications/cancelled`) and
/// the pipe goes on serving; tasks are polled over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_tasks_are_polled_and_timeouts_are_typed() {
    let basket = example("basket");
    let client = within(
        "starting the basket server",
        Client::builder()
            .timeout(Some(Duration::from_millis(300)))
            .connect_stdio(&basket, ["--memory", "--stdio"]),
    )
    .await
    .unwrap();
    let harness = mcp_tools::client::Harness::new(client.clone());
    let mcp_tools::client::Outcome::Applied(created) =
        support::call(&harness, "basket_create", json!({})).await
    else {
        panic!("not created");
    };
    let slow = within(
        "a quote that takes longer than the timeout",
        client.call(ToolCall::new(
            "basket_quote",
            json!({ "basket_id": created.handle, "seconds": 30 }),
        )),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&slow, ClientError::Transport(error) if error.kind == TransportErrorKind::Timeout),
        "{slow}"
    );
    let quick = within(
        "a quote as a task, polled over the pipe",
        client.call(
            ToolCall::new(
                "basket_quote",
                json!({ "basket_id": created.handle, "seconds": 0 }),
            )
            .task(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(quick.structured_content.unwrap()["outcome"], "current");
}

const STDIO_CHILD: &str = concat!(module_path!(), "::a_child_process_serves_stdio");
const STDIO_CHILD_ENV: &str = "MCP_TOOLS_TEST_STDIO_CHILD";

/// Set once a `wait_forever` call is dropped.
fn cancelled() -> &'static tokio::sync::watch::Sender<bool> {
    static CANCELLED: std::sync::OnceLock<tokio::sync::watch::Sender<bool>> =
        std::sync::OnceLock::new();
    CANCELLED.get_or_init(|| tokio::sync::watch::channel(false).0)
}

struct OnDrop;

impl Drop for OnDrop {
    fn drop(&mut self) {
        cancelled().send_replace(true);
    }
}

/// Waits until it is cancelled.
#[mcp_tools::tool]
async fn wait_forever() -> String {
    let _dropped = OnDrop;
    std::future::pending::<()>().await;
    String::new()
}

/// Whether a `wait_forever` call was cancelled, waiting up to ten seconds for it.
#[mcp_tools::tool]
async fn was_cancelled() -> bool {
    let mut seen = cancelled().subscribe();
    tokio::time::timeout(
        Duration::from_secs(10),
        seen.wait_for(|cancelled| *cancelled),
    )
    .await
    .is_ok()
}

/// The body of a stdio server process: does nothing unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the stdio tests"]
fn a_child_process_serves_stdio() {
    if std::env::var_os(STDIO_CHILD_ENV).is_none() {
        return;
    }
    let server = McpServer::builder("stdio-child", "1.0.0")
        .tools(mcp_tools::tools![wait_forever, was_cancelled])
        .build()
        .unwrap();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { server.serve_stdio().await.unwrap() });
}

/// A request the client gives up on over stdio is cancelled in the server
/// (`notifications/cancelled`), and the pipe goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_a_request_given_up_on_is_cancelled_in_the_server() {
    let (_, test) = STDIO_CHILD.split_once("::").unwrap();
    let client = within(
        "starting a stdio server",
        Client::builder()
            .timeout(Some(Duration::from_secs(2)))
            .env(STDIO_CHILD_ENV, "1")
            .connect_stdio(
                std::env::current_exe().unwrap(),
                // Quiet: the test harness writes nothing on the line the server answers on.
                [
                    test,
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "-q",
                    "--test-threads",
                    "1",
                ],
            ),
    )
    .await
    .unwrap();
    let given_up = within(
        "a call that never ends",
        client.call_tool("wait_forever", json!({})),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&given_up, ClientError::Transport(error) if error.kind == TransportErrorKind::Timeout),
        "{given_up}"
    );
    let cancelled = within("asking", client.call_tool("was_cancelled", json!({})))
        .await
        .unwrap();
    assert_eq!(cancelled.text(), "true", "the server dropped the call");
}
