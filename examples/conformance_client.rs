//! `mcp_tools::client` as the official conformance suite's client under test: the suite starts
//! a scenario's server, runs this with the server's URL as the last argument and the scenario's
//! name in `MCP_CONFORMANCE_SCENARIO` (what the calls should be, when the scenario says, in
//! `MCP_CONFORMANCE_CONTEXT`), and checks what arrived. `.ci/conformance` runs every client
//! scenario of 2026-07-28 that does not need an OAuth client:
//!
//! ```sh
//! cargo build --example conformance_client
//! npx @modelcontextprotocol/conformance client --scenario tools_call \
//!     --command target/debug/examples/conformance_client
//! ```
//!
//! Each scenario gets what a host using the client would do: connect (`server/discover`), list
//! the tools, call them, answer a tool's requests for input; the client does the protocol's
//! part (per-request `_meta`, the routing and `Mcp-Param-*` headers, `requestState`, tools
//! whose header declarations it cannot honour left out). Exits with 1 and says why when a
//! step fails.

use std::process::ExitCode;

use mcp_tools::client::{Client, ClientError, ListedTool};
use serde_json::{Map, Value, json};

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: conformance_client URL (MCP_CONFORMANCE_SCENARIO names the scenario)");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|context| serde_json::from_str(&context).ok())
        .unwrap_or(Value::Null);
    match run(&url, &scenario, &context).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{scenario}: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str, scenario: &str, context: &Value) -> Result<(), ClientError> {
    let client = Client::builder()
        .client_info("mcp-tools-conformance-client", env!("CARGO_PKG_VERSION"))
        .capabilities(json!({ "elicitation": {} }))
        .on_input(|requests: Map<String, Value>| async move { Ok(answer(&requests)) })
        .connect_http(url)
        .await?;
    let tools = client.list_tools().await?;
    println!(
        "{scenario}: listed {:?}",
        tools.iter().map(ListedTool::name).collect::<Vec<_>>()
    );
    match scenario {
        // The calls are the scenario's: its context names them.
        "http-custom-headers" => {
            let calls = context["toolCalls"].as_array().cloned().unwrap_or_default();
            for call in calls {
                let name = call["name"].as_str().unwrap_or_default();
                call_tool(&client, name, call["arguments"].clone()).await?;
            }
        }
        // The focal tool's input schema, sent back verbatim as the echo tool's argument.
        "json-schema-2020-12-preservation" => {
            let focal = tools
                .iter()
                .find(|tool| tool.name() != "json_schema_echo")
                .ok_or_else(|| ClientError::Protocol("no tool besides the echo tool".into()))?;
            let schema = focal.input_schema().clone();
            call_tool(&client, "json_schema_echo", json!({ "schema": schema })).await?;
        }
        // The server answers tools/list alone: what is checked is that listing a schema with a
        // network `$ref` fetched nothing.
        "json-schema-ref-no-deref" => {}
        // Every kind of request that names a target, each with its Mcp-Name.
        "http-standard-headers" => {
            for tool in tools.iter() {
                call_tool(&client, tool.name(), arguments(tool.input_schema())).await?;
            }
            let resources = client.request("resources/list", json!({})).await?;
            for resource in resources["resources"].as_array().into_iter().flatten() {
                let read = json!({ "uri": resource["uri"] });
                client.request("resources/read", read).await?;
            }
            let prompts = client.request("prompts/list", json!({})).await?;
            for prompt in prompts["prompts"].as_array().into_iter().flatten() {
                let get = json!({ "name": prompt["name"] });
                client.request("prompts/get", get).await?;
            }
        }
        // Any other scenario: every tool the client keeps, called with arguments its schema
        // asks for (the tools a client must leave out are not among them).
        _ => {
            for tool in tools.iter() {
                call_tool(&client, tool.name(), arguments(tool.input_schema())).await?;
            }
        }
    }
    Ok(())
}

/// Calls `name`; a tool's own error (`isError`) is an answer too, and is printed.
async fn call_tool(client: &Client, name: &str, arguments: Value) -> Result<(), ClientError> {
    match client.call_tool(name, arguments).await {
        Ok(result) => println!("{name}: {}", result.text()),
        Err(ClientError::Tool(failure)) => println!("{name}: error result: {}", failure.message),
        Err(error) => return Err(error),
    }
    Ok(())
}

/// Arguments a schema asks for: each required property with a value of its type (numbers 5
/// and 3, as the suite's reference client sends `add_numbers`).
fn arguments(schema: &Value) -> Value {
    let mut arguments = Map::new();
    let properties = schema["properties"].as_object();
    let required = schema["required"].as_array().into_iter().flatten();
    for (index, name) in required.filter_map(Value::as_str).enumerate() {
        let property = properties.and_then(|properties| properties.get(name));
        let value = match property.and_then(|property| property["type"].as_str()) {
            Some("number" | "integer") => json!(if index == 0 { 5 } else { 3 }),
            Some("boolean") => json!(true),
            Some("object") => json!({}),
            Some("array") => json!([]),
            Some("null") => Value::Null,
            _ => json!("conformance"),
        };
        arguments.insert(name.to_owned(), value);
    }
    Value::Object(arguments)
}

/// Answers for a tool's requests for input: every form accepted with a value for each of its
/// fields, roots as none, a sampling request with a fixed text.
fn answer(requests: &Map<String, Value>) -> Map<String, Value> {
    requests
        .iter()
        .map(|(key, request)| {
            let answer = match request["method"].as_str() {
                Some("elicitation/create") => {
                    let schema = &request["params"]["requestedSchema"];
                    let mut content = Map::new();
                    for (name, field) in schema["properties"].as_object().into_iter().flatten() {
                        let value = match field["type"].as_str() {
                            Some("boolean") => json!(true),
                            Some("number" | "integer") => json!(1),
                            _ => json!("conformance"),
                        };
                        content
                            .insert(name.clone(), field.get("default").cloned().unwrap_or(value));
                    }
                    json!({ "action": "accept", "content": content })
                }
                Some("roots/list") => json!({ "roots": [] }),
                Some("sampling/createMessage") => json!({
                    "role": "assistant",
                    "content": { "type": "text", "text": "conformance" },
                    "model": "none",
                }),
                _ => json!({}),
            };
            (key.clone(), answer)
        })
        .collect()
}
