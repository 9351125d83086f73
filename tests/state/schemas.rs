//! The examples' contracts, committed in `examples/contracts/` and kept current here (rewrite
//! them with `MCP_TOOLS_UPDATE_CONTRACTS=1 cargo test --test state -- schemas::`), and the Markdown page
//! `docs` prints (review it with `cargo insta review`, or `INSTA_UPDATE=always`).

use crate::basket;
use crate::common;
#[path = "../../examples/quickstart.rs"]
#[allow(dead_code)]
mod quickstart;

use mcp_tools::McpServer;
use mcp_tools::contract::Contract;
use mcp_tools::testing::assert_contract;
use serde_json::Value;

fn quickstart_server() -> McpServer {
    McpServer::builder("quickstart", "0.0.0")
        .tools(quickstart::tool_set())
        .build()
        .unwrap()
}

fn basket_server() -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set_with_quote())
        .store(mcp_tools::MemoryStore::default())
        .build()
        .unwrap()
}

fn committed(name: &str) -> String {
    format!(
        "{}/examples/contracts/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn the_quickstart_contract_is_the_committed_one() {
    assert_contract(&quickstart_server(), committed("quickstart"));
}

#[test]
fn the_basket_contract_is_the_committed_one() {
    assert_contract(&basket_server(), committed("basket"));
}

/// Every `format` a schema carries is one JSON Schema 2020-12 defines, so no client's
/// validator warns about it; integer ranges are bounds instead.
#[test]
fn published_schemas_carry_only_standard_formats() {
    fn formats<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
        match value {
            Value::Object(members) => {
                if let Some(Value::String(format)) = members.get("format") {
                    found.push(format);
                }
                members.values().for_each(|value| formats(value, found));
            }
            Value::Array(items) => items.iter().for_each(|value| formats(value, found)),
            _ => {}
        }
    }
    for contract in [quickstart_server().contract(), basket_server().contract()] {
        let mut found = Vec::new();
        for tool in contract.tools() {
            formats(tool, &mut found);
        }
        assert!(found.is_empty(), "non-standard formats: {found:?}");
    }
    let contract = basket_server().contract();
    let create = contract
        .tools()
        .iter()
        .find(|tool| tool["name"] == "basket_upgrade_memory")
        .unwrap();
    let memory = &create["inputSchema"]["properties"]["memory_gib"];
    assert_eq!(memory["minimum"], 0, "{memory}");
    assert_eq!(memory["maximum"], u32::MAX, "{memory}");
}

#[test]
fn quickstart_markdown() {
    insta::assert_snapshot!("quickstart_docs", quickstart::tool_set().markdown());
}

#[test]
fn every_published_schema_is_valid_2020_12() {
    let meta = jsonschema::draft202012::meta::validator();
    let contracts = [quickstart_server().contract(), basket_server().contract()];
    for tool in contracts.iter().flat_map(Contract::tools) {
        for key in ["inputSchema", "outputSchema"] {
            let Some(schema) = tool.get(key) else {
                continue;
            };
            assert!(
                meta.is_valid(schema),
                "{}.{key} is not a valid 2020-12 schema: {schema}",
                tool["name"]
            );
            jsonschema::draft202012::new(schema).expect("compiles");
        }
        assert_eq!(tool["inputSchema"]["type"], Value::from("object"));
    }
}

#[tokio::test]
async fn quickstart_outputs_match_their_schemas() {
    use mcp_tools::testing::TestClient;
    let server = quickstart_server();
    let client = TestClient::new(server.clone());
    let contract = server.contract();
    let add = &contract.tools()[0];
    let validator = jsonschema::draft202012::new(&add["outputSchema"]).unwrap();
    for arguments in [
        serde_json::json!({"a": 2, "b": 3}),
        serde_json::json!({"a": i64::MAX, "b": 1}),
    ] {
        let what = format!("tools/call add {arguments} in process");
        let result = common::within(&what, client.call_tool("add", arguments))
            .await
            .unwrap();
        assert!(validator.is_valid(&result["structuredContent"]), "{result}");
    }
}
