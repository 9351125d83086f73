//! A hand-written tool may return the store's outcomes as they are: their output schema is
//! published and every result matches it.

use crate::common;

use common::{Call, TestServer, assert_conforms, assert_matches_schema};
use mcp_tools::MemoryStore;
use mcp_tools::auth::Principal;
use mcp_tools::store::{
    CreateRequest, Entity, Fingerprint, MutationOutcome, ReadOutcome, ReadRequest, Store,
};
use mcp_tools::tools::{NoArgs, Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, McpServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "counter", prefix = "ctr")]
struct Counter {
    count: u64,
}

/// Creates a counter by calling the store itself.
struct CreateCounter(MemoryStore);

impl Tool for CreateCounter {
    type Args = NoArgs;
    type Output = MutationOutcome;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("counter_create", "Creates a counter.")
    }
    async fn call(&self, _: NoArgs, _cx: Context) -> MutationOutcome {
        let request = CreateRequest::typed(Principal::Anonymous, &Counter { count: 1 })
            .unwrap()
            .operation("op", Fingerprint::of_call("counter_create", &json!({})));
        self.0.create(request).await.unwrap()
    }
}

#[derive(Deserialize, JsonSchema)]
struct ReadArgs {
    /// The counter.
    handle: String,
}

/// Reads a counter by calling the store itself.
struct ReadCounter(MemoryStore);

impl Tool for ReadCounter {
    type Args = ReadArgs;
    type Output = ReadOutcome;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("counter_get", "Reads a counter.").read_only()
    }
    async fn call(&self, args: ReadArgs, _cx: Context) -> ReadOutcome {
        let request = ReadRequest::new(Counter::kind(), Principal::Anonymous, args.handle);
        self.0.read(request).await.unwrap()
    }
}

#[tokio::test]
async fn a_hand_written_tool_returns_outcomes_under_their_published_schema() {
    let store = MemoryStore::default();
    let server = McpServer::builder("counters", "1")
        .tools(
            ToolSet::new()
                .with(CreateCounter(store.clone()))
                .with(ReadCounter(store)),
        )
        .build()
        .unwrap();
    let live = TestServer::start(server).await;
    let listed = Call::new("tools/list", json!(1), json!({}))
        .send(&live)
        .await
        .json();
    assert_conforms("ListToolsResultResponse", &listed);
    let schema_of = |name: &str| -> Value {
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["outputSchema"]
            .clone()
    };
    let created = Call::call_tool("counter_create", json!({}))
        .send(&live)
        .await
        .json();
    assert_conforms("CallToolResultResponse", &created);
    let outcome = &created["result"]["structuredContent"];
    assert_eq!(outcome["outcome"], "applied", "{created}");
    assert_matches_schema(&schema_of("counter_create"), outcome);

    let handle = outcome["handle"].as_str().unwrap();
    let read = Call::call_tool("counter_get", json!({ "handle": handle }))
        .send(&live)
        .await
        .json();
    let current = &read["result"]["structuredContent"];
    assert_eq!(current["outcome"], "current", "{read}");
    assert_eq!(current["state"]["count"], 1);
    assert_matches_schema(&schema_of("counter_get"), current);
    let unknown = Call::call_tool("counter_get", json!({ "handle": "ctr_nope" }))
        .send(&live)
        .await
        .json();
    assert_eq!(unknown["result"]["isError"], true);
    assert_matches_schema(
        &schema_of("counter_get"),
        &unknown["result"]["structuredContent"],
    );
}
