//! A client of the basket server for the end-to-end tests: every call goes over real HTTP, and
//! every response is checked against the official schema and the tool's published output schema.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mcp_tools::McpServer;
use mcp_tools::state::Store;
use serde_json::{Value, json};

use std::sync::OnceLock;

use crate::basket;
use crate::common::{Call, assert_conforms, check, compile, official};

/// The official schema's `CallToolResultResponse`, compiled once (the workloads make thousands
/// of calls).
fn call_tool_result_response() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| official("CallToolResultResponse"))
}

/// The basket server with `store`, anonymous callers.
pub fn server(store: Store) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set())
        .state(store)
        .build()
        .unwrap()
}

/// The basket server with `store`, callers named by `Authorization: Bearer <name>`.
pub fn authenticated_server(store: Store) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set())
        .state(store)
        .authenticate(
            |headers| match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some(token) if token.starts_with("Bearer ") => {
                    Ok(mcp_tools::Principal::subject(&token["Bearer ".len()..]))
                }
                _ => Err(mcp_tools::Unauthorized::new(
                    "Bearer",
                    "A bearer token is required",
                )),
            },
        )
        .build()
        .unwrap()
}

/// A fresh operation id.
pub fn operation_id(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{tag}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One caller of one server.
#[derive(Clone)]
pub struct Agent {
    pub url: String,
    pub token: Option<String>,
    output_schemas: Arc<HashMap<String, Value>>,
    output_validators: Arc<HashMap<String, jsonschema::Validator>>,
}

impl Agent {
    /// Lists the tools (validating the list) and keeps their output schemas.
    pub async fn connect(url: &str, token: Option<&str>) -> Agent {
        let mut call = Call::new("tools/list", json!(1), json!({}));
        if let Some(token) = token {
            call = call.header("authorization", &format!("Bearer {token}"));
        }
        let reply = call.send_to(url).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let json = reply.json();
        assert_conforms("ListToolsResultResponse", &json);
        let mut output_schemas = HashMap::new();
        let mut output_validators = HashMap::new();
        for tool in json["result"]["tools"].as_array().unwrap() {
            let name = tool["name"].as_str().unwrap().to_owned();
            output_validators.insert(name.clone(), compile(&tool["outputSchema"]));
            output_schemas.insert(name, tool["outputSchema"].clone());
        }
        Agent {
            url: url.to_owned(),
            token: token.map(str::to_owned),
            output_schemas: Arc::new(output_schemas),
            output_validators: Arc::new(output_validators),
        }
    }

    /// The published definition's output schema of `tool`.
    pub fn output_schema(&self, tool: &str) -> &Value {
        &self.output_schemas[tool]
    }

    /// Calls a tool; returns the `CallToolResult`, checked against both schemas.
    pub async fn call(&self, tool: &str, arguments: Value) -> Value {
        let mut call = Call::call_tool(tool, arguments);
        if let Some(token) = &self.token {
            call = call.header("authorization", &format!("Bearer {token}"));
        }
        let reply = call.send_to(&self.url).await;
        assert_eq!(reply.status, 200, "{tool}: {}", reply.text);
        let json = reply.json();
        check(call_tool_result_response(), "CallToolResultResponse", &json);
        let result = json["result"].clone();
        let structured = &result["structuredContent"];
        assert!(
            structured.is_object(),
            "{tool}: no structuredContent: {result}"
        );
        check(
            &self.output_validators[tool],
            &format!("the output schema of {tool}"),
            structured,
        );
        result
    }

    /// Creates a basket with a fresh operation id; returns its handle.
    pub async fn create(&self) -> String {
        let result = self
            .call(
                "basket_create",
                json!({ "operation_id": operation_id("create") }),
            )
            .await;
        let outcome = &result["structuredContent"];
        assert_eq!(outcome["outcome"], "applied", "{result}");
        assert_eq!(outcome["version"], 1);
        outcome["handle"].as_str().unwrap().to_owned()
    }

    /// Reads a basket: `(version, state)`.
    pub async fn get(&self, handle: &str) -> (u64, Value) {
        let result = self
            .call("basket_get", json!({ "basket_id": handle }))
            .await;
        let outcome = &result["structuredContent"];
        assert_eq!(outcome["outcome"], "current", "{result}");
        assert_eq!(outcome["resumption"]["basis_version"], outcome["version"]);
        (
            outcome["version"].as_u64().unwrap(),
            outcome["state"].clone(),
        )
    }
}

/// The outcome of a result (`applied`, `stale_view`, `rejected`, `replayed`, `current`).
pub fn outcome(result: &Value) -> &str {
    result["structuredContent"]["outcome"].as_str().unwrap()
}

/// Prints a call and its outcome, for the test log.
pub fn show(who: &str, tool: &str, arguments: &Value, result: &Value) {
    println!(
        "{who}: {tool} {arguments}\n    -> {} (isError: {})\n    {}",
        outcome(result),
        result["isError"],
        result["content"][0]["text"].as_str().unwrap_or("")
    );
}
