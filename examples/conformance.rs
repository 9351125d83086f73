//! A server exposing every fixture of the official MCP conformance suite, with the strings its
//! reference server uses. CI runs the suite against it:
//!
//! ```sh
//! cargo run --example conformance -- --bind 127.0.0.1:3001
//! ```

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mcp_tools::completion::{CompletionTarget, Completions};
use mcp_tools::prompts::{GetPromptResult, Prompt, PromptMessage, PromptSet};
use mcp_tools::protocol::{LogLevel, RpcError};
use mcp_tools::resources::{Resource, ResourceContents, ResourceSet, ResourceTemplate};
use mcp_tools::tools::{
    CallToolResult, Content, InputRequired, Tool, ToolInfo, ToolReply, ToolSet,
};
use mcp_tools::{Context, McpServer, tool, tools};
use schemars::{JsonSchema, SchemaGenerator};
use serde::Deserialize;
use serde_json::{Value, json};

/// A 1×1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A minimal WAV file.
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

fn png() -> Content {
    Content::Image {
        data: PNG.into(),
        mime_type: "image/png".into(),
    }
}

/// Tests simple text content response
#[tool]
fn test_simple_text() -> String {
    "This is a simple text response for testing.".into()
}

/// Tests image content response
#[tool]
fn test_image_content() -> Content {
    png()
}

/// Tests audio content response
#[tool]
fn test_audio_content() -> Content {
    Content::Audio {
        data: WAV.into(),
        mime_type: "audio/wav".into(),
    }
}

/// Tests embedded resource content response
#[tool]
fn test_embedded_resource() -> Content {
    Content::Resource {
        resource: json!({ "uri": "test://embedded-resource", "mimeType": "text/plain",
            "text": "This is an embedded resource content." }),
    }
}

/// Tests response with multiple content types (text, image, resource)
#[tool]
fn test_multiple_content_types() -> Vec<Content> {
    vec![
        Content::text("Multiple content types test:"),
        png(),
        Content::Resource {
            resource: json!({ "uri": "test://mixed-content-resource", "mimeType": "application/json",
                "text": json!({ "test": "data", "value": 123 }).to_string() }),
        },
    ]
}

/// Tests tool that emits log messages during execution
#[tool]
async fn test_tool_with_logging(cx: &Context) -> String {
    for (i, message) in [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        cx.log(LogLevel::Info, message);
    }
    "Tool with logging executed successfully".into()
}

/// Emits a log message; clients that did not ask for log messages must not receive it
#[tool]
fn test_logging_tool(cx: &Context) -> String {
    cx.log(LogLevel::Info, "Logging tool was called");
    "Logged one message".into()
}

/// Tests tool that reports progress notifications
#[tool]
async fn test_tool_with_progress(cx: &Context) -> String {
    for step in [0.0, 50.0, 100.0] {
        if step > 0.0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        cx.progress(
            step,
            Some(100.0),
            Some(&format!("Completed step {step} of 100")),
        );
    }
    match cx.meta().progress_token() {
        Some(Value::String(token)) => token.clone(),
        Some(token) => token.to_string(),
        None => "0".into(),
    }
}

/// Tests error response handling
#[tool]
fn test_error_handling() -> CallToolResult {
    CallToolResult::text("This tool intentionally returns an error for testing").into_error()
}

/// Needs the client's sampling capability: without it the call is refused with -32021
#[tool]
fn test_missing_capability(cx: &Context) -> ToolReply<String> {
    match cx.input_response("completion") {
        Some(answer) => ToolReply::Complete(format!("The model answered: {}", answer["content"]["text"])),
        None => ToolReply::InputRequired(InputRequired::new().sample(
            "completion",
            json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": "Say hello" } }], "maxTokens": 20 }),
        )),
    }
}

/// Asks the user for input at once, through an input_required result (never a request on the stream)
#[tool]
fn test_streaming_elicitation(cx: &Context) -> ToolReply<String> {
    match accepted(cx, "confirmation") {
        Some(content) => ToolReply::Complete(format!("Confirmed: {content}")),
        None => ToolReply::InputRequired(InputRequired::new().elicit(
            "confirmation",
            "Do you want to continue?",
            json!({ "type": "object", "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] }),
        )),
    }
}

/// Announces a tool-list change to subscribers
#[tool]
fn test_trigger_tool_change(cx: &Context) -> String {
    cx.server().notify_tools_changed();
    "Tool list change announced".into()
}

/// Announces a prompt-list change to subscribers
#[tool]
fn test_trigger_prompt_change(cx: &Context) -> String {
    cx.server().notify_prompts_changed();
    "Prompt list change announced".into()
}

/// The accepted content of the answer to `key`, if the client answered it with `accept`.
fn accepted<'a>(cx: &'a Context, key: &str) -> Option<&'a Value> {
    let response = cx.input_response(key)?;
    (response.get("action")? == "accept")
        .then(|| response.get("content"))
        .flatten()
}

fn ask_name(key: &str, message: &str) -> InputRequired {
    InputRequired::new().elicit(
        key,
        message,
        json!({ "type": "object", "properties": { "name": { "type": "string" } }, "required": ["name"] }),
    )
}

/// Asks for the user's name (elicitation), then greets them
#[tool]
fn test_input_required_result_elicitation(cx: &Context) -> ToolReply<String> {
    match accepted(cx, "user_name")
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
    {
        Some(name) => ToolReply::Complete(format!("Hello, {name}!")),
        None => ToolReply::InputRequired(ask_name("user_name", "What is your name?")),
    }
}

fn capital_question() -> Value {
    json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": "What is the capital of France?" } }],
        "maxTokens": 100 })
}

/// Asks the client's model a question (sampling), then reports the answer
#[tool]
fn test_input_required_result_sampling(cx: &Context) -> ToolReply<String> {
    match cx
        .input_response("capital_question")
        .and_then(|r| r["content"]["text"].as_str())
    {
        Some(answer) => ToolReply::Complete(format!("The model answered: {answer}")),
        None => ToolReply::InputRequired(
            InputRequired::new().sample("capital_question", capital_question()),
        ),
    }
}

/// Asks for the client's roots, then lists them
#[tool]
fn test_input_required_result_list_roots(cx: &Context) -> ToolReply<String> {
    match cx
        .input_response("client_roots")
        .and_then(|r| r["roots"].as_array())
    {
        Some(roots) => {
            let uris: Vec<&str> = roots.iter().filter_map(|r| r["uri"].as_str()).collect();
            ToolReply::Complete(format!("Client roots: {}", uris.join(", ")))
        }
        None => ToolReply::InputRequired(InputRequired::new().list_roots("client_roots")),
    }
}

fn ask_confirm() -> InputRequired {
    InputRequired::new().elicit(
        "confirm",
        "Please confirm",
        json!({ "type": "object", "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] }),
    )
}

/// Carries state across rounds in a sealed requestState
#[tool]
fn test_input_required_result_request_state(cx: &Context) -> ToolReply<String> {
    let confirmed = accepted(cx, "confirm").is_some();
    match cx.request_state() {
        Some(state) if confirmed && state["step"] == "confirm" => {
            ToolReply::Complete("state-ok: confirmed".into())
        }
        _ => ToolReply::InputRequired(ask_confirm().state(json!({ "step": "confirm" }))),
    }
}

/// Asks for a name, a sampled greeting and the roots in one round
#[tool]
fn test_input_required_result_multiple_inputs(cx: &Context) -> ToolReply<String> {
    let name = accepted(cx, "user_name").and_then(|c| c["name"].as_str());
    let greeting = cx
        .input_response("greeting")
        .and_then(|r| r["content"]["text"].as_str());
    let roots = cx
        .input_response("client_roots")
        .and_then(|r| r["roots"].as_array());
    match (name, greeting, roots, cx.request_state()) {
        (Some(name), Some(greeting), Some(roots), Some(_)) => {
            ToolReply::Complete(format!("{greeting} {name} ({} roots)", roots.len()))
        }
        _ => ToolReply::InputRequired(
            ask_name("user_name", "What is your name?")
                .sample(
                    "greeting",
                    json!({ "messages": [{ "role": "user", "content": { "type": "text",
                    "text": "Generate a greeting" } }], "maxTokens": 50 }),
                )
                .list_roots("client_roots")
                .state(json!({ "round": 1 })),
        ),
    }
}

/// Asks two questions in two rounds, then answers
#[tool]
fn test_input_required_result_multi_round(cx: &Context) -> ToolReply<String> {
    let round = cx.request_state().and_then(|s| s["round"].as_u64());
    match round {
        Some(1) => match accepted(cx, "step1").and_then(|c| c["name"].as_str()) {
            Some(name) => ToolReply::InputRequired(
                InputRequired::new()
                    .elicit(
                        "step2",
                        "Step 2: What is your favorite color?",
                        json!({ "type": "object",
                        "properties": { "color": { "type": "string" } }, "required": ["color"] }),
                    )
                    .state(json!({ "round": 2, "name": name })),
            ),
            None => ToolReply::InputRequired(
                ask_name("step1", "Step 1: What is your name?").state(json!({ "round": 1 })),
            ),
        },
        Some(2) => {
            let name = cx
                .request_state()
                .and_then(|s| s["name"].as_str())
                .unwrap_or_default()
                .to_owned();
            match accepted(cx, "step2").and_then(|c| c["color"].as_str()) {
                Some(color) => ToolReply::Complete(format!("{name} likes {color}")),
                None => ToolReply::InputRequired(
                    InputRequired::new()
                        .elicit("step2", "Step 2: What is your favorite color?", json!({ "type": "object",
                            "properties": { "color": { "type": "string" } }, "required": ["color"] }))
                        .state(json!({ "round": 2, "name": name })),
                ),
            }
        }
        _ => ToolReply::InputRequired(
            ask_name("step1", "Step 1: What is your name?").state(json!({ "round": 1 })),
        ),
    }
}

/// Refuses a requestState that was altered
#[tool]
fn test_input_required_result_tampered_state(cx: &Context) -> ToolReply<String> {
    match (cx.request_state(), accepted(cx, "confirm")) {
        (Some(_), Some(_)) => ToolReply::Complete("state-ok: untampered".into()),
        _ => ToolReply::InputRequired(ask_confirm().state(json!({ "step": "confirm" }))),
    }
}

/// Asks only for what the client declared: sampling and/or elicitation
#[tool]
fn test_input_required_result_capabilities(cx: &Context) -> ToolReply<String> {
    if let Some(answer) = cx
        .input_response("question")
        .and_then(|r| r["content"]["text"].as_str())
    {
        return ToolReply::Complete(format!("The model answered: {answer}"));
    }
    if let Some(name) = accepted(cx, "user_name").and_then(|c| c["name"].as_str()) {
        return ToolReply::Complete(format!("Hello, {name}!"));
    }
    let declared = cx.client_capabilities();
    let mut input = InputRequired::new();
    if declared.contains_key("sampling") || !declared.contains_key("elicitation") {
        // Without either capability this asks for sampling, which the runtime refuses with -32021.
        input = input.sample("question", capital_question());
    }
    if declared.contains_key("elicitation") {
        input = ask_name("user_name", "What is your name?");
    }
    ToolReply::InputRequired(input)
}

/// A tool whose input schema uses JSON Schema 2020-12 keywords, published verbatim.
struct JsonSchemaTool;

impl Tool for JsonSchemaTool {
    type Args = Value;
    type Output = String;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
        )
    }

    fn input_schema(&self, _generator: &mut SchemaGenerator) -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": { "address": { "$anchor": "addressDef", "type": "object",
                "properties": { "street": { "type": "string" }, "city": { "type": "string" } } } },
            "properties": {
                "name": { "type": "string" },
                "address": { "$ref": "#/$defs/address" },
                "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                "phone": { "type": "string" },
                "email": { "type": "string" }
            },
            "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
            "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
            "then": { "required": ["phone"] },
            "else": { "required": ["email"] },
            "additionalProperties": false
        })
    }

    async fn call(&self, args: Value, _cx: Context) -> String {
        format!("Received: {args}")
    }
}

#[derive(Deserialize, JsonSchema)]
struct RegionArgs {
    /// The region to route to; mirrored in the `Mcp-Param-Region` header.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

/// A tool whose `region` argument intermediaries can route on.
struct CustomHeaders;

impl Tool for CustomHeaders {
    type Args = RegionArgs;
    type Output = String;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "test_custom_headers",
            "Routes by region; the region is mirrored in the Mcp-Param-Region header",
        )
    }

    async fn call(&self, args: RegionArgs, _cx: Context) -> String {
        format!("Region: {}", args.region)
    }
}

// The Tasks extension's fixtures.

/// Greets someone by name
#[tool]
fn greet(name: String) -> String {
    format!("Hello, {name}!")
}

/// Waits `seconds`, then reports; a task when the client takes tasks
#[tool(task = optional)]
async fn slow_compute(seconds: Option<f64>, label: Option<String>) -> String {
    let seconds = seconds.unwrap_or(1.0).clamp(0.0, 3600.0);
    if seconds > 0.0 {
        tokio::time::sleep(std::time::Duration::from_secs_f64(seconds)).await;
    }
    format!(
        "Computed {} in {seconds} s",
        label.as_deref().unwrap_or("a result")
    )
}

/// Fails with a tool error after about a second; only runs as a task
#[tool(task = required)]
async fn failing_job() -> Result<String, mcp_tools::ToolError> {
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    Err(mcp_tools::ToolError::new(
        "JOB_FAILED",
        "The job failed, as this fixture always does",
    ))
}

/// Panics after a moment, which ends its task in a protocol error
#[tool(task = optional)]
async fn protocol_error_job() -> String {
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    panic!("protocol_error_job fails on purpose");
}

fn confirm_schema() -> Value {
    json!({ "type": "object", "properties": { "confirm": { "type": "boolean" } }, "required": ["confirm"] })
}

/// Asks the user to confirm a deletion while running as a task
#[tool(task = optional)]
async fn confirm_delete(filename: String, cx: &Context) -> Result<String, mcp_tools::ToolError> {
    let answers = cx
        .ask(InputRequired::new().elicit(
            "confirm",
            format!("Delete {filename}?"),
            confirm_schema(),
        ))
        .await?;
    let confirmed = answers["confirm"]["action"] == "accept"
        && answers["confirm"]["content"]["confirm"] == true;
    Ok(if confirmed {
        format!("Deleted {filename}")
    } else {
        format!("Kept {filename}")
    })
}

/// Asks two questions at once while running as a task
#[tool(task = optional)]
async fn multi_input(cx: &Context) -> Result<String, mcp_tools::ToolError> {
    let name_schema = json!({ "type": "object", "properties": { "name": { "type": "string" } }, "required": ["name"] });
    let answers = cx
        .ask(
            InputRequired::new()
                .elicit("name", "What is your name?", name_schema)
                .elicit("confirm", "Shall I go on?", confirm_schema()),
        )
        .await?;
    let name = answers["name"]["content"]["name"].as_str().unwrap_or("?");
    Ok(format!("Answered by {name}"))
}

/// Asks for a user name in a multi-round call, then greets them in a task
#[tool(task = required)]
async fn test_tool_with_task(cx: &Context) -> ToolReply<String> {
    let Some(name) = accepted(cx, "user_name")
        .and_then(|content| content["name"].as_str())
        .map(str::to_owned)
    else {
        return ToolReply::InputRequired(ask_name("user_name", "What is your name?"));
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    ToolReply::Complete(format!("Hello, {name}, from a task"))
}

fn tool_set() -> ToolSet {
    tools![
        test_simple_text,
        test_image_content,
        test_audio_content,
        test_embedded_resource,
        test_multiple_content_types,
        test_tool_with_logging,
        test_logging_tool,
        test_tool_with_progress,
        test_error_handling,
        test_missing_capability,
        test_streaming_elicitation,
        test_trigger_tool_change,
        test_trigger_prompt_change,
        test_input_required_result_elicitation,
        test_input_required_result_sampling,
        test_input_required_result_list_roots,
        test_input_required_result_request_state,
        test_input_required_result_multiple_inputs,
        test_input_required_result_multi_round,
        test_input_required_result_tampered_state,
        test_input_required_result_capabilities,
        greet,
        slow_compute,
        failing_job,
        protocol_error_job,
        confirm_delete,
        multi_input,
        test_tool_with_task,
    ]
    .with(JsonSchemaTool)
    .with(CustomHeaders)
}

fn resources() -> ResourceSet {
    let png = STANDARD.decode(PNG).expect("the fixture image is base64");
    ResourceSet::new()
        .with(
            Resource::text("test://static-text", "Static Text Resource", "text/plain",
                "This is the content of the static text resource.")
            .description("A static text resource for testing"),
        )
        .with(
            Resource::blob("test://static-binary", "Static Binary Resource", "image/png", &png)
                .description("A static binary resource (image) for testing"),
        )
        .with(
            Resource::text("test://watched-resource", "Watched Resource", "text/plain", "Watched resource content")
                .description("A resource that can be subscribed to"),
        )
        .with_template(
            ResourceTemplate::new("test://template/{id}/data", "Template Resource", |uri, vars, _cx| async move {
                let id = vars["id"].as_str().unwrap_or_default().to_owned();
                let text = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") }).to_string();
                Ok::<_, RpcError>(vec![ResourceContents::text(uri, "application/json", text)])
            })
            .description("A resource template with parameter substitution")
            .mime_type("application/json"),
        )
}

fn prompts() -> PromptSet {
    PromptSet::new()
        .with(Prompt::new("test_simple_prompt", "A simple prompt without arguments", |_args, _cx| async {
            Ok::<_, RpcError>(vec![PromptMessage::user(Content::text("This is a simple prompt for testing."))])
        }))
        .with(
            Prompt::new("test_prompt_with_arguments", "A prompt with required arguments", |args, _cx| async move {
                let text = format!(
                    "Prompt with arguments: arg1='{}', arg2='{}'",
                    args["arg1"].as_str().unwrap_or_default(),
                    args["arg2"].as_str().unwrap_or_default()
                );
                Ok::<_, RpcError>(vec![PromptMessage::user(Content::text(text))])
            })
            .argument("arg1", "First test argument", true)
            .argument("arg2", "Second test argument", true),
        )
        .with(
            Prompt::new(
                "test_prompt_with_embedded_resource",
                "A prompt that includes an embedded resource",
                |args, _cx| async move {
                    let uri = args["resourceUri"].as_str().unwrap_or_default().to_owned();
                    Ok::<_, RpcError>(vec![
                        PromptMessage::user(Content::Resource {
                            resource: json!({ "uri": uri, "mimeType": "text/plain",
                                "text": "Embedded resource content for testing." }),
                        }),
                        PromptMessage::user(Content::text("Please process the embedded resource above.")),
                    ])
                },
            )
            .argument("resourceUri", "URI of the resource to embed", true),
        )
        .with(Prompt::new("test_prompt_with_image", "A prompt that includes an image", |_args, _cx| async {
            Ok::<_, RpcError>(vec![
                PromptMessage::user(png()),
                PromptMessage::user(Content::text("Please analyze the image above.")),
            ])
        }))
        .with(Prompt::new(
            "test_input_required_result_prompt",
            "A prompt that asks the user for context before rendering",
            |_args, cx| async move {
                let context = accepted(&cx, "user_context").and_then(|c| c["context"].as_str()).map(str::to_owned);
                Ok::<_, RpcError>(match context {
                    Some(context) => ToolReply::Complete(GetPromptResult::from(vec![PromptMessage::user(
                        Content::text(format!("Use this context: {context}")),
                    )])),
                    None => ToolReply::InputRequired(InputRequired::new().elicit(
                        "user_context",
                        "What context should the prompt use?",
                        json!({ "type": "object", "properties": { "context": { "type": "string" } }, "required": ["context"] }),
                    )),
                })
            },
        ))
}

fn completions() -> Completions {
    Completions::new().with(
        CompletionTarget::Prompt("test_prompt_with_arguments".into()),
        "arg1",
        |value, _context, _cx| {
            ["paris", "park", "party", "test", "testing"]
                .into_iter()
                .filter(|candidate| candidate.starts_with(value))
                .map(str::to_owned)
                .collect()
        },
    )
}

fn bind_address() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|pair| pair[0] == "--bind")
        .map(|pair| pair[1].clone())
        .unwrap_or_else(|| "127.0.0.1:3001".into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    McpServer::builder("mcp-conformance-test-server", "1.0.0")
        .tools(tool_set())
        .resources(resources())
        .prompts(prompts())
        .completions(completions())
        .logging()
        .build()?
        .serve(bind_address())
        .await?;
    Ok(())
}
