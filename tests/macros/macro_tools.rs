//! The `#[tool]` attribute, observed through the in-process client.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::within;
use mcp_tools::testing::TestClient;
use mcp_tools::tools::{Content, ToolSet};
use mcp_tools::{Context, McpServer, State, ToolError, tool, toolbox, tools};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

/// Adds two integers.
///
/// The second paragraph is kept: models read the whole description.
#[tool(read_only, idempotent, title = "Add")]
fn add(
    /// The first addend.
    a: i64,
    /// The second addend.
    #[arg(default = 10)]
    b: i64,
) -> Sum {
    Sum { sum: a + b }
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    /// `a + b`.
    sum: i64,
}

/// Returns the text, optionally repeated.
#[tool]
async fn echo(
    #[arg(rename = "message", description = "The text to send back.")] text: String,
    times: Option<u32>,
) -> String {
    text.repeat(times.unwrap_or(1) as usize)
}

#[derive(Debug, mcp_tools::IntoToolError)]
enum DivideError {
    #[code = "DIVISION_BY_ZERO"]
    ByZero,
    Overflow {
        numerator: i64,
    },
}

impl std::fmt::Display for DivideError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DivideError::ByZero => write!(f, "cannot divide by zero; pass a non-zero divisor"),
            DivideError::Overflow { numerator } => write!(f, "{numerator} / -1 overflows"),
        }
    }
}

#[derive(Serialize, JsonSchema)]
struct Quotient {
    quotient: i64,
    remainder: i64,
}

/// Divides two integers.
#[tool(name = "math.divide")]
fn divide(numerator: i64, divisor: i64) -> Result<Quotient, DivideError> {
    if divisor == 0 {
        return Err(DivideError::ByZero);
    }
    let quotient = numerator
        .checked_div(divisor)
        .ok_or(DivideError::Overflow { numerator })?;
    Ok(Quotient {
        quotient,
        remainder: numerator % divisor,
    })
}

/// Fails or greets, as plain text.
#[tool(description = "Greets someone by name.")]
fn greet(name: String) -> Result<String, ToolError> {
    if name.is_empty() {
        return Err(ToolError::new("EMPTY_NAME", "name must not be empty"));
    }
    Ok(format!("Hello, {name}!"))
}

#[derive(Clone)]
struct Counter(Arc<AtomicU64>);

/// Counts calls, in shared state.
#[tool]
fn count(counter: State<Counter>, cx: &Context, step: u64) -> Vec<Content> {
    let total = counter.0.0.fetch_add(step, Ordering::SeqCst) + step;
    vec![
        Content::text(total.to_string()),
        Content::text(cx.method().to_owned()),
    ]
}

/// Lists the given tags, deduplicated.
#[tool(destructive = false)]
fn tags(r#type: Vec<String>, _cx: Context) -> Tags {
    let mut tags = r#type;
    tags.sort();
    tags.dedup();
    Tags { tags }
}

#[derive(Serialize, JsonSchema)]
struct Tags {
    tags: Vec<String>,
}

struct Notes {
    notes: std::sync::Mutex<Vec<String>>,
}

#[toolbox]
impl Notes {
    /// Stores a note.
    #[tool(name = "notes.add")]
    fn add_note(&self, text: String) -> String {
        let mut notes = self.notes.lock().unwrap();
        notes.push(text);
        format!("{} notes", notes.len())
    }

    /// Lists every note.
    #[tool(name = "notes.list", read_only)]
    async fn list(&self) -> NoteList {
        NoteList {
            notes: self.notes.lock().unwrap().clone(),
        }
    }

    /// Says which version of the notes this is.
    #[tool(name = "notes.version")]
    fn version() -> &'static str {
        "1"
    }

    fn not_a_tool(&self) -> usize {
        self.notes.lock().unwrap().len()
    }
}

#[derive(Serialize, JsonSchema)]
struct NoteList {
    notes: Vec<String>,
}

fn server(tools: ToolSet) -> TestClient {
    let server = McpServer::builder("macro-test", "0.0.0")
        .state(Counter(Arc::new(AtomicU64::new(0))))
        .tools(tools)
        .build()
        .expect("server builds");
    TestClient::new(server)
}

fn client() -> TestClient {
    server(tools![add, echo, divide, greet, count, tags])
}

/// Every published definition.
async fn list_tools(client: &TestClient) -> Vec<Value> {
    within("tools/list in process", client.list_tools())
        .await
        .unwrap()
}

/// The `CallToolResult` of `name` (check `isError` for tool-level failures).
async fn call_tool(client: &TestClient, name: &str, arguments: Value) -> Value {
    within(
        &format!("tools/call {name} in process"),
        client.call_tool(name, arguments),
    )
    .await
    .unwrap()
}

async fn definition(client: &TestClient, name: &str) -> Value {
    list_tools(client)
        .await
        .into_iter()
        .find(|tool| tool["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

/// Checks `result.structuredContent` against the published output schema.
async fn assert_matches_output_schema(client: &TestClient, name: &str, result: &Value) {
    let tool = definition(client, name).await;
    let schema = &tool["outputSchema"];
    let validator = jsonschema::draft202012::new(schema).expect("valid 2020-12 output schema");
    let structured = &result["structuredContent"];
    assert!(
        validator.is_valid(structured),
        "{structured} does not match {schema}"
    );
}

#[test]
fn functions_stay_callable() {
    assert_eq!(add(1, 2).sum, 3);
    assert!(divide(1, 0).is_err());
    let _tool: add = add::tool();
}

#[tokio::test]
async fn schema_comes_from_parameters_and_docs() {
    let client = client();
    let add = definition(&client, "add").await;
    assert_eq!(
        add["description"],
        "Adds two integers.\n\nThe second paragraph is kept: models read the whole description."
    );
    assert_eq!(add["title"], "Add");
    assert_eq!(
        add["annotations"],
        json!({"readOnlyHint": true, "idempotentHint": true})
    );
    let input = &add["inputSchema"];
    assert_eq!(input["type"], "object");
    assert_eq!(input["required"], json!(["a"]));
    assert_eq!(input["properties"]["a"]["description"], "The first addend.");
    assert_eq!(input["properties"]["b"]["default"], 10);
    assert_eq!(input["additionalProperties"], false);
    assert!(input.get("title").is_none());
    assert!(add["outputSchema"].is_object());

    let echo = definition(&client, "echo").await;
    let input = &echo["inputSchema"];
    assert_eq!(input["required"], json!(["message"]));
    assert_eq!(
        input["properties"]["message"]["description"],
        "The text to send back."
    );
    assert!(input["properties"].get("times").is_some());
    assert!(echo.get("outputSchema").is_none(), "text has no schema");

    let count = definition(&client, "count").await;
    assert_eq!(
        count["inputSchema"]["properties"],
        json!({"step": {"type": "integer", "minimum": 0, "maximum": u64::MAX}})
    );
    let tags = definition(&client, "tags").await;
    assert!(tags["inputSchema"]["properties"].get("type").is_some());
    assert_eq!(tags["annotations"], json!({"destructiveHint": false}));
}

#[tokio::test]
async fn calls_sync_and_async_with_defaults_renames_and_options() {
    let client = client();
    let result = call_tool(&client, "add", json!({"a": 1})).await;
    assert_eq!(result["structuredContent"], json!({"sum": 11}));
    assert_eq!(result["content"][0]["text"], r#"{"sum":11}"#);
    assert_matches_output_schema(&client, "add", &result).await;

    let result = call_tool(&client, "echo", json!({"message": "ab", "times": 2})).await;
    assert_eq!(result["content"][0]["text"], "abab");
    assert!(result.get("structuredContent").is_none());
    let result = call_tool(&client, "echo", json!({"message": "ab"})).await;
    assert_eq!(result["content"][0]["text"], "ab");

    let result = call_tool(&client, "tags", json!({"type": ["b", "a", "b"]})).await;
    assert_eq!(result["structuredContent"], json!({"tags": ["a", "b"]}));
    assert_matches_output_schema(&client, "tags", &result).await;
}

#[tokio::test]
async fn results_map_errors_to_codes() {
    let client = client();
    let ok = call_tool(
        &client,
        "math.divide",
        json!({"numerator": 7, "divisor": 2}),
    )
    .await;
    assert_eq!(
        ok["structuredContent"],
        json!({"quotient": 3, "remainder": 1})
    );
    assert_matches_output_schema(&client, "math.divide", &ok).await;

    let err = call_tool(
        &client,
        "math.divide",
        json!({"numerator": 7, "divisor": 0}),
    )
    .await;
    assert_eq!(err["isError"], true);
    assert_eq!(err["structuredContent"]["code"], "DIVISION_BY_ZERO");
    assert_matches_output_schema(&client, "math.divide", &err).await;

    let err = call_tool(
        &client,
        "math.divide",
        json!({"numerator": i64::MIN, "divisor": -1}),
    )
    .await;
    assert_eq!(err["structuredContent"]["code"], "OVERFLOW");

    let err = call_tool(&client, "greet", json!({"name": ""})).await;
    assert_eq!(err["isError"], true);
    assert_eq!(err["structuredContent"]["code"], "EMPTY_NAME");
    let ok = call_tool(&client, "greet", json!({"name": "Ada"})).await;
    assert_eq!(ok["content"][0]["text"], "Hello, Ada!");
}

#[tokio::test]
async fn wrong_arguments_are_tool_errors() {
    let client = client();
    let err = call_tool(&client, "add", json!({"a": "one"})).await;
    assert_eq!(err["isError"], true);
    assert_eq!(err["structuredContent"]["code"], "INVALID_ARGUMENTS");
    assert!(err["content"][0]["text"].as_str().unwrap().contains("/a"));
    let err = call_tool(&client, "add", json!({"a": 1, "c": 2})).await;
    assert_eq!(err["isError"], true);
}

#[tokio::test]
async fn context_and_state_are_injected() {
    let client = client();
    let first = call_tool(&client, "count", json!({"step": 2})).await;
    assert_eq!(first["content"][0]["text"], "2");
    assert_eq!(first["content"][1]["text"], "tools/call");
    let second = call_tool(&client, "count", json!({"step": 3})).await;
    assert_eq!(second["content"][0]["text"], "5");
}

#[tokio::test]
async fn missing_state_is_a_tool_error_naming_the_type() {
    let server = McpServer::builder("no-state", "0.0.0")
        .tools(tools![count])
        .build()
        .unwrap();
    let client = TestClient::new(server);
    let err = call_tool(&client, "count", json!({"step": 1})).await;
    assert_eq!(err["isError"], true);
    assert_eq!(
        err["structuredContent"]["code"],
        mcp_tools::protocol::framework::code::MISSING_STATE
    );
    assert!(
        err["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Counter"),
        "{err}"
    );
}

#[tokio::test]
async fn toolbox_methods_share_the_server_struct() {
    let notes = Arc::new(Notes {
        notes: Default::default(),
    });
    let client = server(Arc::clone(&notes).tool_set().merge(tools![add]));
    let names: Vec<Value> = list_tools(&client)
        .await
        .into_iter()
        .map(|tool| tool["name"].clone())
        .collect();
    assert_eq!(
        names,
        json!(["notes.add", "notes.list", "notes.version", "add"])
            .as_array()
            .unwrap()
            .clone()
    );
    call_tool(&client, "notes.add", json!({"text": "one"})).await;
    let list = call_tool(&client, "notes.list", json!({})).await;
    assert_eq!(list["structuredContent"], json!({"notes": ["one"]}));
    assert_matches_output_schema(&client, "notes.list", &list).await;
    let version = call_tool(&client, "notes.version", json!({})).await;
    assert_eq!(version["content"][0]["text"], "1");
    assert_eq!(notes.not_a_tool(), 1);
}

/// A resource for the `creates` opt-out below.
#[derive(Clone, Serialize, serde::Deserialize, JsonSchema, mcp_tools::store::Entity)]
#[entity(prefix = "tkt")]
struct Ticket {
    title: String,
}

/// Opens a ticket; every call opens a new one.
#[tool(creates = Ticket, operation_id = false)]
fn ticket_open(title: String) -> Ticket {
    Ticket { title }
}

/// Opens a ticket, once per operation id.
#[tool(creates = Ticket)]
fn ticket_open_once(title: String) -> Ticket {
    Ticket { title }
}

#[tokio::test]
async fn creates_take_an_operation_id_unless_they_opt_out() {
    use mcp_tools::MemoryStore;
    let store = MemoryStore::default();
    let server = McpServer::builder("tickets", "0.0.0")
        .tools(tools![ticket_open, ticket_open_once])
        .store(store.clone())
        .build()
        .unwrap();
    let client = TestClient::new(server);

    let once = definition(&client, "ticket_open_once").await;
    assert_eq!(
        once["inputSchema"]["required"],
        json!(["operation_id", "title"])
    );
    assert_eq!(once["annotations"]["idempotentHint"], true);
    let arguments = json!({"operation_id": "t-1-000000000000000000", "title": "printer"});
    let first = call_tool(&client, "ticket_open_once", arguments.clone()).await;
    let again = call_tool(&client, "ticket_open_once", arguments).await;
    assert_matches_output_schema(&client, "ticket_open_once", &again).await;
    assert_eq!(first["structuredContent"]["outcome"], "applied");
    assert_eq!(again["structuredContent"]["outcome"], "replayed");
    assert_eq!(
        again["structuredContent"]["original"]["handle"],
        first["structuredContent"]["handle"]
    );
    assert_eq!(store.resource_count_for_tests(), 1);

    let open = definition(&client, "ticket_open").await;
    assert!(
        open["inputSchema"]["properties"]
            .get("operation_id")
            .is_none(),
        "{open}"
    );
    assert!(
        open["annotations"].get("idempotentHint").is_none(),
        "{open}"
    );
    let unknown = call_tool(
        &client,
        "ticket_open",
        json!({"operation_id": "t-2-000000000000000000", "title": "x"}),
    )
    .await;
    assert_eq!(unknown["isError"], true, "{unknown}");
    for _ in 0..2 {
        let made = call_tool(&client, "ticket_open", json!({"title": "printer"})).await;
        assert_eq!(made["structuredContent"]["outcome"], "applied", "{made}");
    }
    assert_eq!(store.resource_count_for_tests(), 3);
}
