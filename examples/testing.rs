//! Testing your tools: a `#[tool]` function called as the plain function it still is, and a
//! server called in-process with typed outcomes, no sockets.
//!
//! `cargo test --example testing` runs the tests below; `cargo run --example testing` serves the
//! tools. Needs nothing beyond the default features.

use mcp_tools::store::Entity;
use mcp_tools::{McpServer, MemoryStore, tool, tools};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A counter several agents may bump.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "counter", prefix = "ctr")]
struct Counter {
    /// How many times it was bumped.
    count: u64,
}

/// Opens a counter at zero.
#[tool(creates = Counter)]
fn counter_open() -> Counter {
    Counter { count: 0 }
}

/// Adds `by` to a counter and returns the new count.
#[tool(mutates = Counter)]
fn counter_bump(counter: &mut Counter, by: u64) -> u64 {
    counter.count += by;
    counter.count
}

fn server() -> McpServer {
    McpServer::builder("counters", "1.0.0")
        .tools(tools![counter_open, counter_bump])
        .store(MemoryStore::default())
        .build()
        .expect("the counters' tools are valid")
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    server().serve("127.0.0.1:8080").await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mcp_tools::store::MutationOutcome;
    use mcp_tools::testing::TestClient;
    use serde_json::json;

    use super::*;

    /// The function is still a function: its logic is tested without any server.
    #[test]
    fn a_bump_adds_to_the_count() {
        let mut counter = Counter { count: 2 };
        assert_eq!(counter_bump(&mut counter, 3), 5);
        assert_eq!(counter, Counter { count: 5 });
    }

    /// The contract: a change planned on an old version is refused with what changed, and a
    /// retry with the same operation id replays instead of bumping twice.
    #[tokio::test]
    async fn a_stale_bump_is_refused_and_a_retry_replays() {
        let client = TestClient::new(server());
        let call = async {
            let opened = client
                .mutate(
                    "counter_open",
                    json!({ "operation_id": client.operation_id() }),
                )
                .await
                .unwrap();
            let counter = opened.committed_handle().unwrap().to_owned();
            let bump = json!({
                "counter_id": counter, "expected_version": 1, "by": 1,
                "operation_id": client.operation_id(),
            });
            let first = client.mutate("counter_bump", bump.clone()).await.unwrap();
            assert!(matches!(first, MutationOutcome::Applied(ref applied) if applied.version == 2));
            let retry = client.mutate("counter_bump", bump).await.unwrap();
            assert!(matches!(retry, MutationOutcome::Replayed(_)), "{retry:?}");
            let stale = json!({
                "counter_id": counter, "expected_version": 1, "by": 5,
                "operation_id": client.operation_id(),
            });
            let refused = client.mutate("counter_bump", stale).await.unwrap();
            let MutationOutcome::StaleView(stale) = refused else {
                panic!("expected stale_view, got {refused:?}");
            };
            assert_eq!((stale.expected_version, stale.current_version), (1, 2));
            assert_eq!(stale.current_state["count"], 1);
        };
        tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("in-process calls answer at once");
    }
}
