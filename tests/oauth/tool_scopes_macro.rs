//! `#[tool(scopes = [...])]`, observed in the definitions `tools/list` shows.

use crate::common;

use std::sync::Arc;

use common::{assert_conforms, within};
use mcp_tools::testing::TestClient;
use mcp_tools::tools::ToolSet;
use mcp_tools::{McpServer, tool, toolbox, tools};
use serde_json::{Value, json};

const SCOPES: &str = "io.github.mcp-tools/scopes";

/// Reads a basket.
#[tool(read_only, scopes = ["basket:read", "audit"])]
fn read_basket(id: String) -> String {
    id
}

/// Answers `pong`.
#[tool]
fn ping() -> &'static str {
    "pong"
}

struct Baskets;

#[toolbox]
impl Baskets {
    /// Empties a basket.
    #[tool(name = "baskets.empty", scopes = ["basket:write"])]
    fn empty(&self, id: String) -> String {
        id
    }
}

fn tool_set() -> ToolSet {
    tools![read_basket, ping].merge(Arc::new(Baskets).tool_set())
}

/// The definition of `name` among `definitions`, checked against the official `Tool` schema.
fn definition(definitions: &Value, name: &str) -> Value {
    let definition = definitions
        .as_array()
        .expect("the definitions are an array")
        .iter()
        .find(|tool| tool["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {definitions:#}"))
        .clone();
    assert_conforms("Tool", &definition);
    definition
}

#[test]
fn a_tool_with_scopes_publishes_them_sorted_in_its_meta() {
    let read = definition(&tool_set().definitions(), "read_basket");
    assert_eq!(
        read["_meta"][SCOPES],
        json!(["audit", "basket:read"]),
        "{read:#}"
    );
    assert_eq!(
        read["annotations"]["readOnlyHint"], true,
        "the other keys of the attribute still apply: {read:#}"
    );
}

#[test]
fn a_toolbox_method_with_scopes_publishes_them_in_its_meta() {
    let empty = definition(&tool_set().definitions(), "baskets.empty");
    assert_eq!(empty["_meta"][SCOPES], json!(["basket:write"]), "{empty:#}");
}

#[test]
fn a_tool_without_scopes_has_no_scopes_in_its_meta() {
    let ping = definition(&tool_set().definitions(), "ping");
    assert!(
        ping.get("_meta")
            .is_none_or(|meta| meta.get(SCOPES).is_none()),
        "{ping:#}"
    );
}

#[tokio::test]
async fn a_server_accepts_the_scopes_of_macro_tools_and_lists_them() {
    let server = McpServer::builder("scopes-test", "0.0.0")
        .tools(tool_set())
        .build()
        .expect("the scopes the macro accepted are valid scope tokens");
    let client = TestClient::new(server);
    let listed = within("tools/list in process", client.list_tools())
        .await
        .expect("tools/list succeeds");
    let listed = Value::Array(listed);
    assert_eq!(
        definition(&listed, "read_basket")["_meta"][SCOPES],
        json!(["audit", "basket:read"])
    );
    assert_eq!(
        definition(&listed, "baskets.empty")["_meta"][SCOPES],
        json!(["basket:write"])
    );
}
