//! A client of the basket server for the end-to-end tests: every call goes over real HTTP, and
//! every response is checked against the official schema and the tool's published output schema.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use mcp_tools::McpServer;
use mcp_tools::effects::DeliveryPolicy;
use mcp_tools::store::Store;
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
pub fn server(store: impl Store) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set())
        .store(store)
        .signing_key(crate::common::SIGNING_KEY)
        .build()
        .unwrap()
}

/// The basket server with `store`, callers named by `Authorization: Bearer <name>`.
pub fn authenticated_server(store: impl Store) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set())
        .store(store)
        .signing_key(crate::common::SIGNING_KEY)
        .authenticate(crate::common::tools::bearer_subject)
        .build()
        .unwrap()
}

/// A fresh operation id, long enough for an anonymous caller (22 URL-safe characters or more).
pub fn operation_id(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{tag}-{:022}", NEXT.fetch_add(1, Ordering::Relaxed))
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
        self.call_with_meta(tool, arguments, &[]).await
    }

    /// [`Agent::call`] with these extra `_meta` entries in the request.
    pub async fn call_with_meta(
        &self,
        tool: &str,
        arguments: Value,
        meta: &[(&str, Value)],
    ) -> Value {
        let mut call = Call::call_tool(tool, arguments);
        for (key, value) in meta {
            call = call.meta(key, value.clone());
        }
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

    /// [`Agent::call`] until the store answers something other than `STORE_UNAVAILABLE`: the
    /// same arguments each time (so the same operation id), as the contract says, at most
    /// `tries` times and `pause` apart, each call bounded by a test step. Returns the answer and
    /// how many `STORE_UNAVAILABLE` came before it.
    pub async fn call_until_available(
        &self,
        tool: &str,
        arguments: &Value,
        tries: u64,
        pause: std::time::Duration,
    ) -> (Value, u64) {
        for unavailable in 0..tries {
            let result = crate::common::within(
                &format!("{tool} on {}", self.url),
                self.call(tool, arguments.clone()),
            )
            .await;
            if !store_unavailable(&result) {
                return (result, unavailable);
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        panic!(
            "{tool} on {}: STORE_UNAVAILABLE {tries} times in a row",
            self.url
        );
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

    /// Every note of a basket, read page by page through `items_cursor`, oldest first.
    pub async fn all_notes(&self, handle: &str) -> Vec<String> {
        let mut notes = Vec::new();
        let mut arguments = json!({ "basket_id": handle });
        loop {
            let result = self.call("basket_get", arguments.clone()).await;
            let state = &result["structuredContent"]["state"];
            assert_eq!(outcome(&result), "current", "{result}");
            notes.extend(notes_of(state));
            match state["notes"]["next_cursor"].as_str() {
                Some(cursor) => arguments["items_cursor"] = json!(cursor),
                None => return notes,
            }
        }
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

/// The notes a read of a basket shows (`notes.items[].value`: its first page), oldest first.
pub fn notes_of(state: &Value) -> Vec<String> {
    state["notes"]["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| item["value"].as_str().expect("a note is text").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a result is the store's retryable `STORE_UNAVAILABLE`.
pub fn store_unavailable(result: &Value) -> bool {
    result["isError"] == true && result["structuredContent"]["code"] == "STORE_UNAVAILABLE"
}

/// The outcome of a result (`applied`, `stale_view`, `rejected`, `replayed`, `current`).
pub fn outcome(result: &Value) -> &str {
    result["structuredContent"]["outcome"]
        .as_str()
        .unwrap_or_else(|| panic!("a result without an outcome: {result}"))
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

/// A fresh SQLite file name in the temporary directory (remove it with [`remove_db`]).
pub fn temp_db(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!(
        "mcp-tools-{name}-{}-{nanos}.db",
        std::process::id()
    ))
}

/// Removes a SQLite file with its WAL and shared-memory files.
pub fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

/// What a read-modify-write workload got applied.
#[derive(Debug, Default)]
pub struct Counts {
    /// The basket the workload changed.
    pub handle: String,
    pub applied: u64,
    pub stale_retries: u64,
    pub applied_versions: Vec<u64>,
}

/// Attempts an agent of [`workload`] may make before the test gives up on it.
const MAX_ATTEMPTS: u64 = 10_000;

/// `agents` read-modify-write loops on one new basket, spread over `urls`: each reads the basket,
/// sends a full configuration with one more GiB of memory planned from the version it read, and
/// retries on `stale_view` until `increments` of its changes are applied. Returns the counts, the
/// final memory and the final version.
pub async fn workload(
    label: &str,
    urls: &[String],
    agents: usize,
    increments: u64,
) -> (Counts, u64, u64) {
    let connected: Vec<Agent> = {
        let mut connected = Vec::new();
        for url in urls {
            connected.push(Agent::connect(url, None).await);
        }
        connected
    };
    let handle = connected[0].create().await;
    let barrier = Arc::new(tokio::sync::Barrier::new(agents));
    let tasks: Vec<_> = (0..agents)
        .map(|index| {
            let agent = connected[index % connected.len()].clone();
            let handle = handle.clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let mut counts = Counts::default();
                let mut attempts = 0;
                while counts.applied < increments {
                    attempts += 1;
                    assert!(attempts <= MAX_ATTEMPTS, "agent {index} starved");
                    let (version, state) = agent.get(&handle).await;
                    let memory = state["memory_gib"].as_u64().unwrap();
                    let result = agent
                        .call(
                            "basket_replace_configuration",
                            json!({
                                "basket_id": handle,
                                "expected_version": version,
                                "operation_id": operation_id(&format!("agent{index}")),
                                "memory_gib": memory + 1,
                                "storage_gib": state["storage_gib"],
                            }),
                        )
                        .await;
                    match outcome(&result) {
                        "applied" => {
                            let applied = &result["structuredContent"];
                            assert_eq!(applied["state"]["memory_gib"], memory + 1);
                            counts.applied += 1;
                            counts
                                .applied_versions
                                .push(applied["version"].as_u64().unwrap());
                        }
                        "stale_view" => {
                            let stale = &result["structuredContent"];
                            assert_eq!(stale["expected_version"], version);
                            assert!(stale["current_version"].as_u64().unwrap() > version);
                            counts.stale_retries += 1;
                        }
                        other => panic!("unexpected outcome {other}: {result}"),
                    }
                }
                counts
            })
        })
        .collect();
    let mut total = Counts {
        handle: handle.clone(),
        ..Counts::default()
    };
    for task in tasks {
        let counts = crate::common::within("a workload agent", task)
            .await
            .unwrap();
        total.applied += counts.applied;
        total.stale_retries += counts.stale_retries;
        total.applied_versions.extend(counts.applied_versions);
    }
    let (version, state) = connected[0].get(&handle).await;
    let memory = state["memory_gib"].as_u64().unwrap();
    println!(
        "{label}: {agents} agents, {} applied, {} stale retries, final memory_gib {memory} (started at 16), final version {version}",
        total.applied, total.stale_retries
    );
    (total, memory, version)
}

/// Asserts a [`workload`] of `agents` agents with `increments` each lost nothing: the final memory
/// counts every applied change, and the applied versions are exactly 2, 3, ... with no gap and
/// no version given twice.
pub fn assert_no_lost_update(
    (counts, memory, version): (Counts, u64, u64),
    agents: usize,
    increments: u64,
) {
    assert_eq!(counts.applied, agents as u64 * increments);
    assert_eq!(memory, 16 + counts.applied, "an update was lost");
    assert_eq!(version, 1 + counts.applied);
    let mut versions = counts.applied_versions;
    versions.sort_unstable();
    let expected: Vec<u64> = (2..=1 + counts.applied).collect();
    assert_eq!(
        versions, expected,
        "each applied outcome has its own version"
    );
}

/// `on_every_store!(case, ...)`: for each `async fn case(store: impl Store)` of the test file, a
/// test `in_memory::case` on a `MemoryStore` and a test `in_sqlite::case` on a fresh SQLite file.
#[macro_export]
macro_rules! on_every_store {
    ($($case:ident),* $(,)?) => {
        mod in_memory {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(::mcp_tools::MemoryStore::default()).await;
                }
            )*
        }
        mod in_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let path = $crate::basket_client::temp_db(stringify!($case));
                    let store = ::mcp_tools::SqliteStore::open(
                        &path,
                        ::mcp_tools::store::StoreConfig::default(),
                    )
                    .unwrap();
                    super::$case(store).await;
                    $crate::basket_client::remove_db(&path);
                }
            )*
        }
    };
}

/// A change applied by the server at `first` whose answer the caller never saw (`kill` then
/// ends that server), sent again with the same operation id to the server at `second`: it must
/// answer `replayed` with the recorded outcome, and the basket must hold the change once.
pub async fn a_retry_elsewhere_replays(first: &str, second: &str, kill: impl FnOnce()) {
    let first = Agent::connect(first, None).await;
    let handle = first.create().await;
    let change = json!({
        "basket_id": handle,
        "expected_version": 1,
        "operation_id": operation_id("before-the-kill"),
        "memory_gib": 24,
        "storage_gib": 256,
    });
    // The answer is treated as lost: the caller only knows it sent the request.
    let applied = first
        .call("basket_replace_configuration", change.clone())
        .await;
    assert_eq!(applied["structuredContent"]["outcome"], "applied");
    kill();

    let second = Agent::connect(second, None).await;
    let retried = second.call("basket_replace_configuration", change).await;
    let outcome = &retried["structuredContent"];
    assert_eq!(outcome["outcome"], "replayed", "{retried}");
    assert_eq!(
        outcome["original"],
        crate::common::recorded_applied(&applied["structuredContent"])
    );
    let (version, state) = second.get(&handle).await;
    assert_eq!((version, state["memory_gib"].as_u64()), (2, Some(24)));
}

/// The `basket_replace_configuration` arguments that add one GiB of memory to the basket a
/// `basket_get` result shows, based on the version it shows, under a fresh operation id tagged
/// `tag`.
pub fn one_more_gib(read: &Value, handle: &str, tag: &str) -> Value {
    let basket = &read["structuredContent"];
    json!({
        "basket_id": handle,
        "expected_version": basket["version"].as_u64().unwrap(),
        "operation_id": operation_id(tag),
        "memory_gib": basket["state"]["memory_gib"].as_u64().unwrap() + 1,
        "storage_gib": basket["state"]["storage_gib"],
    })
}

/// What a change settled as: the version it applied (`None` for `stale_view`), and whether the
/// answer was a replay, whose recorded outcome is read in its place (the server that applied
/// it died before answering). Any other answer fails the test.
pub fn settled(result: &Value) -> (Option<u64>, bool) {
    let mut outcome = &result["structuredContent"];
    let replayed = outcome["outcome"] == "replayed";
    if replayed {
        outcome = &outcome["original"];
    }
    match outcome["outcome"].as_str() {
        Some("applied") => (Some(outcome["version"].as_u64().unwrap()), replayed),
        Some("stale_view") => (None, replayed),
        _ => panic!("unexpected answer: {result}"),
    }
}

/// Set in a child's environment: how many attempts a charge gets (default 8).
pub const CHILD_ATTEMPTS: &str = "MCP_TOOLS_TEST_EFFECT_ATTEMPTS";

/// The basket server, delivering charges to `BASKET_PAYMENT_URL` fast: an attempt may take
/// 500 ms, a dead replica's lease lapses after 1.5 s, retries come 100 to 400 ms apart.
pub fn paying_server<S: Store>(store: S) -> McpServer {
    let attempts = std::env::var(CHILD_ATTEMPTS)
        .ok()
        .and_then(|attempts| attempts.parse().ok())
        .unwrap_or(8);
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set())
        .store(store)
        .signing_key(crate::common::SIGNING_KEY)
        .delivery_policy(
            DeliveryPolicy::default()
                .timeout(Duration::from_millis(500))
                .lease(Duration::from_millis(1500))
                .first_retry(Duration::from_millis(100))
                .max_retry(Duration::from_millis(400))
                .poll_interval(Duration::from_millis(100))
                .max_attempts(attempts),
        )
        .build()
        .unwrap()
}

/// Checks out `handle` at `version` with a new operation id: the arguments, to resend.
pub fn checkout_arguments(handle: &str, version: u64) -> Value {
    json!({
        "basket_id": handle,
        "expected_version": version,
        "operation_id": operation_id("checkout"),
    })
}

/// The effects a read of `handle` reports.
pub async fn effects_of(agent: &Agent, handle: &str) -> Vec<Value> {
    let read = agent
        .call("basket_get", json!({ "basket_id": handle }))
        .await;
    read["structuredContent"]["effects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Reads `handle` until its one effect is settled (`delivered` or `failed`); returns it.
pub async fn settled_effect(agent: &Agent, handle: &str) -> Value {
    crate::common::within_for(Duration::from_secs(60), "the charge to be settled", async {
        loop {
            let effects = effects_of(agent, handle).await;
            assert_eq!(effects.len(), 1, "{effects:?}");
            if effects[0]["state"] != "pending" {
                return effects[0].clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// The one effect an applied checkout names: its key.
pub fn charge_key(result: &Value) -> String {
    let outcome = &result["structuredContent"];
    assert_eq!(outcome["outcome"], "applied", "{result}");
    let effects = outcome["effects"].as_array().unwrap();
    assert_eq!(effects.len(), 1, "{result}");
    assert_eq!(effects[0]["kind"], "charge");
    effects[0]["key"].as_str().unwrap().to_owned()
}
