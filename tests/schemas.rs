//! Snapshots of the documentation the examples print with `--print-schemas` and `--print-docs`.
//! Review changes with `cargo insta review` (or `INSTA_UPDATE=always`), then commit the snapshots.

mod common;
#[path = "../examples/quickstart.rs"]
#[allow(dead_code)]
mod quickstart;

use serde_json::Value;

#[test]
fn quickstart_schema_document() {
    let document = quickstart::tool_set().schema_document();
    insta::assert_json_snapshot!("quickstart_schemas", document);
}

#[test]
fn quickstart_markdown() {
    insta::assert_snapshot!("quickstart_docs", quickstart::tool_set().markdown());
}

#[test]
fn quickstart_schemas_are_valid_2020_12() {
    let document = quickstart::tool_set().schema_document();
    let meta = jsonschema::draft202012::meta::validator();
    for tool in document["tools"].as_array().unwrap() {
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
    let server = mcp_tools::McpServer::builder("quickstart", "0.0.0")
        .tools(quickstart::tool_set())
        .build()
        .unwrap();
    let client = TestClient::new(server);
    let document = quickstart::tool_set().schema_document();
    let add = &document["tools"][0];
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
