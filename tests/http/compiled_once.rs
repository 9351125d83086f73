//! The request path never rebuilds what the server compiled when it was built: a tool's
//! definition (`info`) and its schemas are produced once, and the catalog (definitions,
//! argument validators, listing pages) once per offer, not once per request.

use crate::common;

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Call, TestServer, assert_conforms};
use mcp_tools::tools::{Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, McpServer};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::json;

static SCHEMAS_MADE: AtomicUsize = AtomicUsize::new(0);
static INFOS_MADE: AtomicUsize = AtomicUsize::new(0);

#[derive(Deserialize)]
struct CountedArgs {
    n: i64,
}

/// Counts every time its schema is generated.
impl JsonSchema for CountedArgs {
    fn schema_name() -> Cow<'static, str> {
        "CountedArgs".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        SCHEMAS_MADE.fetch_add(1, Ordering::SeqCst);
        json_schema!({
            "type": "object",
            "properties": { "n": { "type": "integer" } },
            "required": ["n"]
        })
    }
}

/// Counts every time its definition is asked for.
struct Counted;

impl Tool for Counted {
    type Args = CountedArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        INFOS_MADE.fetch_add(1, Ordering::SeqCst);
        ToolInfo::new("counted", "Doubles a number.")
    }
    async fn call(&self, args: CountedArgs, _cx: Context) -> String {
        (args.n * 2).to_string()
    }
}

#[tokio::test]
async fn serving_requests_does_not_rebuild_definitions_or_schemas() {
    let server = McpServer::builder("counted", "1")
        .tools(ToolSet::new().with(Counted))
        .build()
        .unwrap();
    let built = (
        INFOS_MADE.load(Ordering::SeqCst),
        SCHEMAS_MADE.load(Ordering::SeqCst),
    );
    assert!(built.0 >= 1 && built.1 >= 1, "built with {built:?}");
    assert_eq!(server.catalog_compilations_for_tests(), 1);
    let handle = server.clone();
    let live = TestServer::start(server).await;
    for n in 0..20 {
        let reply = Call::call_tool("counted", json!({ "n": n }))
            .send(&live)
            .await
            .json();
        assert_conforms("CallToolResultResponse", &reply);
        assert_eq!(reply["result"]["content"][0]["text"], (n * 2).to_string());
        // Refused arguments go through the compiled validator, not a new one.
        let refused = Call::call_tool("counted", json!({ "n": "x" }))
            .send(&live)
            .await
            .result();
        assert_eq!(refused["isError"], true);
        let listed = Call::new("tools/list", json!(1), json!({}))
            .send(&live)
            .await
            .json();
        assert_conforms("ListToolsResultResponse", &listed);
        let discovered = Call::discover().send(&live).await.json();
        assert_conforms("DiscoverResultResponse", &discovered);
    }
    assert_eq!(
        (
            INFOS_MADE.load(Ordering::SeqCst),
            SCHEMAS_MADE.load(Ordering::SeqCst)
        ),
        built,
        "requests rebuilt a definition or a schema"
    );
    assert_eq!(
        handle.catalog_compilations_for_tests(),
        1,
        "requests recompiled the catalog"
    );
    // A change of the offer is what compiles a new one.
    handle.add_tool(common::tools::Echo).unwrap();
    assert_eq!(handle.catalog_compilations_for_tests(), 2);
}
