//! The request ladder over real HTTP, rung by rung: a method is served only while the server
//! offers the capability behind it, methods removed in 2026-07-28 stay removed whatever the server
//! offers, legacy-era clients keep the answers of their revision, `Mcp-Name` is checked for task
//! methods too, a sealed `requestState` opens only for the kind of target that sealed it, and the
//! body limit is inclusive.

use crate::common;

use common::tools::tool_set;
use common::{Call, TestServer, assert_conforms, within};
use mcp_tools::completion::{CompletionTarget, Completions};
use mcp_tools::prompts::{Prompt, PromptMessage, PromptSet};
use mcp_tools::protocol::RpcError;
use mcp_tools::resources::{Resource, ResourceContents, ResourceSet, ResourceTemplate};
use mcp_tools::tools::{Content, InputRequired, NoArgs, Tool, ToolInfo, ToolReply, ToolSet};
use mcp_tools::{Context, McpServer};
use serde_json::{Value, json};

const README: &str = "docs://readme";

fn prompts() -> PromptSet {
    PromptSet::new().with(Prompt::new("greet", "Greets someone.", |_, _| async {
        Ok::<_, RpcError>(vec![PromptMessage::user(Content::text("Hello"))])
    }))
}

fn resources() -> ResourceSet {
    ResourceSet::new().with(Resource::text(README, "Readme", "text/markdown", "# Hello"))
}

fn tools_only() -> McpServer {
    McpServer::builder("ladder", "1")
        .tools(tool_set(0))
        .build()
        .unwrap()
}

fn prompts_only() -> McpServer {
    McpServer::builder("ladder", "1")
        .prompts(prompts())
        .build()
        .unwrap()
}

fn resources_only() -> McpServer {
    McpServer::builder("ladder", "1")
        .resources(resources())
        .build()
        .unwrap()
}

/// Offers resources and logging, the capabilities behind the methods 2026-07-28 removed.
fn resources_and_logging(legacy_era: bool) -> McpServer {
    McpServer::builder("ladder", "1")
        .resources(resources())
        .logging()
        .legacy_era(legacy_era)
        .build()
        .unwrap()
}

/// Asserts `reply` is a 404 `-32601` for request `id`, valid against the official schema.
fn assert_not_found(label: &str, reply: &common::Reply, id: i64) -> Value {
    assert_eq!(
        (reply.status, reply.error_code()),
        (404, Some(-32601)),
        "{label}: {}",
        reply.text
    );
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_conforms("MethodNotFoundError", &body["error"]);
    assert_eq!(body["id"], id, "{label}: id not echoed: {body}");
    body
}

/// The first event of a stream the server keeps open, read without waiting for its end.
async fn first_event(server: &TestServer, call: &Call) -> Value {
    let mut request = common::client().post(server.url());
    for (name, value) in &call.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let body = serde_json::to_vec(&call.body).unwrap();
    within("the first event of subscriptions/listen", async move {
        let mut response = request.body(body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream"),
            "{:?}",
            response.headers()
        );
        let mut buffer = String::new();
        loop {
            if let Some(line) = buffer.lines().find_map(|line| line.strip_prefix("data:")) {
                return serde_json::from_str(line.trim()).unwrap();
            }
            let chunk = response.chunk().await.unwrap().expect("the stream ended");
            buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await
}

fn listen(filter: Value) -> Call {
    Call::new(
        "subscriptions/listen",
        json!(9),
        json!({ "notifications": filter }),
    )
}

#[tokio::test]
async fn a_method_behind_a_capability_the_server_does_not_offer_is_not_found() {
    let tools = TestServer::start(tools_only()).await;
    let cases = [
        Call::new("resources/list", json!(1), json!({})),
        Call::new("resources/templates/list", json!(1), json!({})),
        Call::new("resources/read", json!(1), json!({ "uri": README })).header("mcp-name", README),
        Call::new("prompts/list", json!(1), json!({})),
        Call::new("prompts/get", json!(1), json!({ "name": "greet" })),
        Call::new(
            "completion/complete",
            json!(1),
            json!({ "ref": { "type": "ref/prompt", "name": "greet" },
                    "argument": { "name": "name", "value": "a" } }),
        ),
    ];
    for call in cases {
        let method = call.body["method"].as_str().unwrap().to_owned();
        let reply = call.send(&tools).await;
        assert_not_found(&format!("{method} without it"), &reply, 1);
    }

    let prompts = TestServer::start(prompts_only()).await;
    let call = Call::call_tool("echo", json!({ "text": "hi" }));
    assert_not_found("tools/call without tools", &call.send(&prompts).await, 7);

    // Nothing to be notified of: no tools, resources or prompts.
    let empty = McpServer::builder("ladder", "1").build().unwrap();
    let empty = TestServer::start(empty).await;
    let call = listen(json!({ "toolsListChanged": true }));
    assert_not_found("subscriptions/listen", &call.send(&empty).await, 9);
}

#[tokio::test]
async fn a_server_offering_prompts_lists_them() {
    let server = TestServer::start(prompts_only()).await;
    let reply = Call::new("prompts/list", json!(2), json!({}))
        .send(&server)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    assert_conforms("JSONRPCResultResponse", &body);
    assert_conforms("ListPromptsResult", &body["result"]);
    assert_eq!(body["result"]["prompts"][0]["name"], "greet");
}

#[tokio::test]
async fn a_server_offering_any_one_of_tools_resources_or_prompts_accepts_a_subscription() {
    let offers = [
        ("tools", tools_only(), json!({ "toolsListChanged": true })),
        (
            "resources",
            resources_only(),
            json!({ "resourcesListChanged": true }),
        ),
        (
            "prompts",
            prompts_only(),
            json!({ "promptsListChanged": true }),
        ),
    ];
    for (offer, server, filter) in offers {
        let server = TestServer::start(server).await;
        let ack = first_event(&server, &listen(filter.clone())).await;
        assert_conforms("SubscriptionsAcknowledgedNotification", &ack);
        assert_eq!(ack["params"]["notifications"], filter, "{offer}: {ack}");
    }
}

#[tokio::test]
async fn methods_removed_in_this_revision_stay_removed_when_the_server_offers_their_capability() {
    let server = TestServer::start(resources_and_logging(true)).await;
    let cases = [
        ("logging/setLevel", json!({ "level": "info" })),
        ("resources/subscribe", json!({ "uri": README })),
        ("resources/unsubscribe", json!({ "uri": README })),
        ("ping", json!({})),
    ];
    for (method, params) in cases {
        let reply = Call::new(method, json!(3), params).send(&server).await;
        let body = assert_not_found(method, &reply, 3);
        // The reason tells a client of an earlier revision what changed.
        let reason = body["error"]["data"]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("Removed in protocol revision 2026-07-28"),
            "{method}: {body}"
        );
    }
}

#[tokio::test]
async fn an_unknown_method_is_not_found_without_a_removal_reason() {
    let server = TestServer::start(resources_and_logging(false)).await;
    let reply = Call::new("resources/frobnicate", json!(4), json!({}))
        .send(&server)
        .await;
    let body = assert_not_found("resources/frobnicate", &reply, 4);
    assert!(body["error"].get("data").is_none(), "{body}");
}

#[tokio::test]
async fn a_legacy_client_subscribes_to_resources_and_gets_an_empty_result() {
    let server = TestServer::start(resources_and_logging(true)).await;
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let body =
            json!({ "jsonrpc": "2.0", "id": 5, "method": method, "params": { "uri": README } });
        let reply = Call::discover()
            .without_header("mcp-method")
            .header("mcp-protocol-version", "2025-11-25")
            .raw(serde_json::to_vec(&body).unwrap())
            .send(&server)
            .await;
        assert_eq!(reply.status, 200, "{method}: {}", reply.text);
        let answer = reply.json();
        common::assert_legacy_result(&answer);
        assert_eq!(answer["id"], 5);
        assert_eq!(answer["result"], json!({}), "{method}");
    }
}

/// Asks the client for a name before answering.
struct AskName;

impl Tool for AskName {
    type Args = NoArgs;
    type Output = ToolReply<String>;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("ask_name", "Asks for a name, then greets it.")
    }
    async fn call(&self, _: NoArgs, _cx: Context) -> ToolReply<String> {
        ToolReply::InputRequired(InputRequired::new().elicit(
            "name",
            "Your name?",
            json!({ "type": "object", "properties": { "name": { "type": "string" } } }),
        ))
    }
}

#[tokio::test]
async fn a_legacy_client_gets_an_error_result_from_a_tool_that_needs_input() {
    let server = McpServer::builder("ladder", "1")
        .tools(tool_set(0).with(AskName))
        .legacy_era(true)
        .build()
        .unwrap();
    let server = TestServer::start(server).await;

    // A 2026-07-28 client that can answer is asked.
    let modern = Call::call_tool("ask_name", json!({}))
        .capabilities(json!({ "elicitation": {} }))
        .send(&server)
        .await;
    let body = modern.json();
    assert_conforms("JSONRPCResultResponse", &body);
    assert_conforms("InputRequiredResult", &body["result"]);
    assert_eq!(body["result"]["resultType"], "input_required", "{body}");

    // Without a session, a 2025-11-25 client cannot be asked: the call ends in an error result.
    let request = json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": { "name": "ask_name", "arguments": {} } });
    let reply = Call::discover()
        .without_header("mcp-method")
        .header("mcp-protocol-version", "2025-11-25")
        .raw(serde_json::to_vec(&request).unwrap())
        .send(&server)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    common::assert_legacy_result(&body);
    let result = &body["result"];
    assert_eq!(result["isError"], true, "{body}");
    assert_eq!(
        result["structuredContent"]["code"], "INPUT_REQUIRED",
        "{body}"
    );
    assert!(result.get("inputRequests").is_none(), "{body}");
}

#[tokio::test]
async fn completion_serves_resource_templates_and_refuses_an_unknown_prompt() {
    let template = ResourceTemplate::new("docs://pages/{page}", "Pages", |uri, _, _| async move {
        Ok::<_, RpcError>(vec![ResourceContents::text(uri, "text/plain", "page")])
    });
    let completions = Completions::new()
        .with(
            CompletionTarget::Prompt("greet".into()),
            "name",
            |_, _, _| vec!["alice".to_owned()],
        )
        .with(
            CompletionTarget::ResourceTemplate("docs://pages/{page}".into()),
            "page",
            |value, _, _| {
                ["intro", "index", "usage"]
                    .into_iter()
                    .filter(|page| page.starts_with(value))
                    .map(str::to_owned)
                    .collect()
            },
        );
    let server = McpServer::builder("ladder", "1")
        .prompts(prompts())
        .resources(ResourceSet::new().with_template(template))
        .completions(completions)
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let complete = |reference: Value, argument: &str, value: &str| {
        Call::new(
            "completion/complete",
            json!(8),
            json!({ "ref": reference, "argument": { "name": argument, "value": value } }),
        )
    };

    let pages = complete(
        json!({ "type": "ref/resource", "uri": "docs://pages/{page}" }),
        "page",
        "in",
    )
    .send(&server)
    .await;
    assert_eq!(pages.status, 200, "{}", pages.text);
    let body = pages.json();
    assert_conforms("JSONRPCResultResponse", &body);
    assert_conforms("CompleteResult", &body["result"]);
    assert_eq!(
        body["result"]["completion"]["values"],
        json!(["intro", "index"])
    );

    let unknown = complete(json!({ "type": "ref/prompt", "name": "nope" }), "name", "a")
        .send(&server)
        .await;
    assert_eq!(unknown.error_code(), Some(-32602), "{}", unknown.text);
    let body = unknown.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_eq!(body["error"]["message"], "Unknown prompt: nope");
}

#[tokio::test]
async fn a_task_method_names_its_task_in_mcp_name_before_it_is_found_unserved() {
    let server = TestServer::start(tools_only()).await;
    let get = Call::new("tasks/get", json!(10), json!({ "taskId": "task-1" }));
    let missing = get.clone().send(&server).await;
    assert_eq!(
        (missing.status, missing.error_code()),
        (400, Some(-32020)),
        "{}",
        missing.text
    );
    let body = missing.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_conforms("HeaderMismatchError", &body);
    assert_eq!(body["id"], 10);
    let named = get.header("mcp-name", "task-1").send(&server).await;
    assert_not_found("tasks/get", &named, 10);
}

/// Answers once a retry carries the state it sealed; until then asks only for that retry.
struct Resumes(&'static str);

impl Tool for Resumes {
    type Args = NoArgs;
    type Output = ToolReply<String>;
    fn info(&self) -> ToolInfo {
        ToolInfo::new(self.0, "Resumes from its sealed state.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> ToolReply<String> {
        match cx.request_state() {
            Some(state) => ToolReply::Complete(format!("resumed at {state}")),
            None => ToolReply::InputRequired(InputRequired::new().state(json!({ "round": 2 }))),
        }
    }
}

/// A tool, a prompt and a resource all called `readme`.
fn namesakes() -> McpServer {
    let prompt = Prompt::new("readme", "Resumes from its sealed state.", |_, _| async {
        Ok::<_, RpcError>(InputRequired::new().state(json!({ "round": 2 })))
    });
    McpServer::builder("ladder", "1")
        .tools(ToolSet::new().with(Resumes("readme")))
        .prompts(PromptSet::new().with(prompt))
        .resources(ResourceSet::new().with(Resource::text(
            "readme",
            "Readme",
            "text/plain",
            "# Readme",
        )))
        .build()
        .unwrap()
}

/// The sealed state of an `input_required` answer.
fn sealed_state(reply: &common::Reply) -> Value {
    let body = reply.json();
    assert_conforms("JSONRPCResultResponse", &body);
    assert_conforms("InputRequiredResult", &body["result"]);
    body["result"]["requestState"].clone()
}

#[tokio::test]
async fn a_request_state_opens_only_for_the_kind_of_target_that_sealed_it() {
    let server = TestServer::start(namesakes()).await;
    let tool = || Call::call_tool("readme", json!({}));
    let prompt = || Call::new("prompts/get", json!(11), json!({ "name": "readme" }));
    let resource = || {
        Call::new("resources/read", json!(12), json!({ "uri": "readme" }))
            .header("mcp-name", "readme")
    };
    let tool_state = sealed_state(&tool().send(&server).await);
    let prompt_state = sealed_state(&prompt().send(&server).await);

    let resumed = tool()
        .body(|b| b["params"]["requestState"] = tool_state.clone())
        .send(&server)
        .await;
    assert_conforms("JSONRPCResultResponse", &resumed.json());
    assert_eq!(
        resumed.result()["content"][0]["text"],
        r#"resumed at {"round":2}"#
    );

    let crossings = [
        ("the tool's state on the prompt", prompt(), &tool_state),
        ("the tool's state on the resource", resource(), &tool_state),
        ("the prompt's state on the tool", tool(), &prompt_state),
        (
            "the prompt's state on the resource",
            resource(),
            &prompt_state,
        ),
    ];
    for (label, call, state) in crossings {
        let reply = call
            .body(|b| b["params"]["requestState"] = state.clone())
            .send(&server)
            .await;
        assert_eq!(reply.error_code(), Some(-32602), "{label}: {}", reply.text);
        let body = reply.json();
        assert_conforms("JSONRPCErrorResponse", &body);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("Invalid requestState: it belongs to another request"),
            "{label}: {message}"
        );
    }
}

#[tokio::test]
async fn a_retry_with_null_arguments_opens_a_state_sealed_for_empty_ones() {
    let server = TestServer::start(namesakes()).await;
    let first = Call::call_tool("readme", json!({})).send(&server).await;
    let state = sealed_state(&first);
    // `null` arguments are `{}` for the call, so they are for the binding too.
    let retry = Call::call_tool("readme", Value::Null)
        .body(|b| b["params"]["requestState"] = state)
        .send(&server)
        .await;
    let body = retry.json();
    assert_conforms("JSONRPCResultResponse", &body);
    assert_eq!(
        body["result"]["content"][0]["text"], r#"resumed at {"round":2}"#,
        "{body}"
    );
}

#[tokio::test]
async fn a_body_of_exactly_the_limit_is_served_and_one_byte_more_is_too_large() {
    const LIMIT: usize = 4096;
    let server = McpServer::builder("ladder", "1")
        .tools(tool_set(0))
        .body_limit(LIMIT)
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let call = Call::call_tool("echo", json!({ "text": "fits" }));
    // Trailing whitespace keeps the JSON valid while the body grows to the size wanted.
    let padded = |size: usize| {
        let mut body = serde_json::to_vec(&call.body).unwrap();
        assert!(body.len() < size);
        body.resize(size, b' ');
        body
    };

    let exact = call.clone().raw(padded(LIMIT)).send(&server).await;
    assert_eq!(exact.status, 200, "{}", exact.text);
    let body = exact.json();
    assert_conforms("JSONRPCResultResponse", &body);
    assert_eq!(body["result"]["content"][0]["text"], "fits");

    let over = call.clone().raw(padded(LIMIT + 1)).send(&server).await;
    assert_eq!(
        (over.status, over.error_code()),
        (413, Some(-32600)),
        "{}",
        over.text
    );
    assert_conforms("JSONRPCErrorResponse", &over.json());
}
