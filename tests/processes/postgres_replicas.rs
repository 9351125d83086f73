//! The multi-host promise on PostgreSQL: basket server processes on one database, called over
//! real HTTP. The test binary starts copies of itself as the replicas (each with its own pool
//! and its own process), so nothing but the database is shared, as across hosts.

use crate::basket_client;
use crate::common;
use crate::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcp_tools::store::{PostgresOptions, StoreConfig};
use serde_json::{Value, json};

use basket_client::{Agent, operation_id, server};
use common::children::{self, Child};

const CHILD_TEST: &str = concat!(
    module_path!(),
    "::a_child_process_serves_the_basket_from_the_database_it_is_given"
);

/// The body of a child process; does nothing unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the multi-host tests"]
fn a_child_process_serves_the_basket_from_the_database_it_is_given() {
    // 32 agents racing on one basket record every `stale_view` they get: more than the default
    // share of 10,000 records one basket may hold.
    let config = StoreConfig {
        ledger_quota: 1_000_000,
        ..StoreConfig::default()
    };
    children::serve_postgres(server, config, PostgresOptions::default());
}

/// `count` replicas on the schema of this test.
fn replicas(schema: &pg::Schema, count: usize) -> Vec<Child> {
    children::start(
        CHILD_TEST,
        &children::postgres_env(&schema.url, &schema.name),
        count,
    )
}

async fn connect_all(children: &[Child]) -> Vec<Agent> {
    let mut agents = Vec::new();
    for child in children {
        agents.push(Agent::connect(&child.url, None).await);
    }
    agents
}

/// What a call answered, read without assuming success.
enum Answer {
    /// A `CallToolResult`.
    Result(Value),
    /// The replica is gone or dropped the connection.
    Gone,
}

async fn call(url: &str, tool: &str, arguments: &Value) -> Answer {
    let sent = common::within(
        "a tool call",
        common::Call::call_tool(tool, arguments.clone()).try_send_to(url),
    )
    .await;
    match sent {
        Ok(reply) => {
            assert_eq!(reply.status, 200, "{tool}: {}", reply.text);
            let json = reply.json();
            common::assert_conforms("CallToolResultResponse", &json);
            Answer::Result(json["result"].clone())
        }
        Err(_) => Answer::Gone,
    }
}

/// 32 agents, 20 increments each, every call sent to the next replica in turn (a client behind a
/// round-robin balancer): each reads, plans one more GiB from the version it read, and retries
/// on `stale_view`; a `STORE_UNAVAILABLE` (a lock or pool wait past the store's timeout on a
/// loaded machine) is retried as the contract says, with the same arguments and operation id,
/// and counted. Nothing acknowledged is lost; versions are contiguous.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_agents_round_robin_over_three_replicas_lose_nothing() {
    // Every await below is under this bound, besides each step's own.
    common::within_for(Duration::from_secs(600), "the whole test", async {
        const AGENTS: usize = 32;
        const INCREMENTS: u64 = 20;
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let children = replicas(&schema, 3);
        let agents = Arc::new(connect_all(&children).await);
        let handle = agents[0].create().await;
        let stale = Arc::new(AtomicU64::new(0));
        let unavailable = Arc::new(AtomicU64::new(0));
        let replays = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..AGENTS)
            .map(|index| {
                let (agents, handle) = (Arc::clone(&agents), handle.clone());
                let (stale, unavailable, replays) =
                    (Arc::clone(&stale), Arc::clone(&unavailable), Arc::clone(&replays));
                tokio::spawn(async move {
                    let mut turn = index;
                    let mut send = async |tool: &str, arguments: &Value| {
                        turn += 1;
                        let agent = &agents[turn % agents.len()];
                        let (result, waited) =
                            agent.call_until_available(tool, arguments, 100, Duration::ZERO).await;
                        unavailable.fetch_add(waited, Ordering::Relaxed);
                        result
                    };
                    let mut versions = Vec::new();
                    let mut attempts = 0;
                    while (versions.len() as u64) < INCREMENTS {
                        attempts += 1;
                        assert!(attempts < 20_000, "agent {index} starved");
                        let read = send("basket_get", &json!({ "basket_id": handle })).await;
                        assert_eq!(basket_client::outcome(&read), "current", "{read}");
                        let change =
                            basket_client::one_more_gib(&read, &handle, &format!("rr{index}"));
                        let result = send("basket_replace_configuration", &change).await;
                        let (applied, replayed) = basket_client::settled(&result);
                        if replayed {
                            replays.fetch_add(1, Ordering::Relaxed);
                        }
                        match applied {
                            Some(version) => versions.push(version),
                            None => {
                                stale.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    versions
                })
            })
            .collect();
        let mut versions = Vec::new();
        for task in tasks {
            let applied = common::within_for(
                Duration::from_secs(300),
                "a round-robin agent",
                task,
            )
            .await
            .unwrap();
            versions.extend(applied);
        }
        let applied = versions.len() as u64;
        println!(
            "three replicas, round robin: {AGENTS} agents, {applied} applied, {} stale_view retries, {} STORE_UNAVAILABLE answers retried, {} answered replayed",
            stale.load(Ordering::Relaxed),
            unavailable.load(Ordering::Relaxed),
            replays.load(Ordering::Relaxed),
        );
        assert_eq!(applied, AGENTS as u64 * INCREMENTS);
        versions.sort_unstable();
        assert_eq!(versions, (2..=1 + applied).collect::<Vec<_>>());
        for agent in agents.iter() {
            let (version, state) = agent.get(&handle).await;
            assert_eq!(version, 1 + applied, "{}", agent.url);
            assert_eq!(
                state["memory_gib"].as_u64(),
                Some(16 + applied),
                "{}",
                agent.url
            );
        }
    })
    .await;
}

/// 500 calls at once with one operation id, spread over three replicas: one application, and
/// every other call answers `replayed` (a `STORE_UNAVAILABLE` under pool pressure is allowed
/// only if its retry then answers `replayed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_calls_with_one_operation_id_over_three_replicas_apply_once() {
    // Every await below is under this bound, besides each step's own.
    common::within_for(Duration::from_secs(600), "the whole test", async {
        const CALLS: usize = 500;
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let children = replicas(&schema, 3);
        let agents = connect_all(&children).await;
        let handle = agents[0].create().await;
        let arguments = json!({
            "basket_id": handle,
            "operation_id": operation_id("storm"),
            "text": "exactly once",
        });
        let barrier = Arc::new(tokio::sync::Barrier::new(CALLS));
        let tasks: Vec<_> = (0..CALLS)
            .map(|index| {
                let (agent, arguments, barrier) = (
                    agents[index % agents.len()].clone(),
                    arguments.clone(),
                    Arc::clone(&barrier),
                );
                tokio::spawn(async move {
                    barrier.wait().await;
                    let (result, unavailable) = agent
                        .call_until_available("basket_add_note", &arguments, 50, Duration::ZERO)
                        .await;
                    (
                        basket_client::outcome(&result).to_owned(),
                        unavailable,
                        result,
                    )
                })
            })
            .collect();
        let (mut applied, mut replayed, mut unavailable) = (0, 0, 0);
        for task in tasks {
            let (outcome, retries, result) = common::within("a storm call", task).await.unwrap();
            unavailable += retries;
            match outcome.as_str() {
                "applied" => applied += 1,
                "replayed" => {
                    assert_eq!(
                        result["structuredContent"]["original"]["outcome"],
                        "applied"
                    );
                    replayed += 1;
                }
                other => panic!("unexpected outcome {other}: {result}"),
            }
        }
        println!(
            "one operation id, {CALLS} calls over three replicas: {applied} applied, {replayed} replayed, {unavailable} STORE_UNAVAILABLE answers retried"
        );
        assert_eq!((applied, replayed), (1, CALLS - 1));
        let (version, state) = agents[1].get(&handle).await;
        assert_eq!(version, 2);
        assert_eq!(
            state["notes"]["items"],
            json!([{ "id": 1, "version": 2, "value": "exactly once" }])
        );
    })
    .await;
}

/// One replica killed with SIGKILL in the middle of a workload; each call that failed is sent
/// again, with the same arguments, to another replica. Nothing acknowledged is lost, nothing is
/// applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_workload_loses_nothing_and_applies_nothing_twice() {
    // Every await below is under this bound, besides each step's own.
    common::within_for(Duration::from_secs(600), "the whole test", async {
        const AGENTS: usize = 8;
        const EACH: usize = 5;
        const KILL_AFTER: u64 = 12;
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let mut children = replicas(&schema, 3);
        let urls: Vec<String> = children.iter().map(|child| child.url.clone()).collect();
        let handle = Agent::connect(&urls[1], None).await.create().await;
        let acknowledged = Arc::new(AtomicU64::new(0));
        let failovers = Arc::new(AtomicU64::new(0));
        let replays = Arc::new(AtomicU64::new(0));
        let halfway = Arc::new(tokio::sync::Notify::new());
        let agents: Vec<_> = (0..AGENTS)
            .map(|index| {
                let (urls, handle) = (urls.clone(), handle.clone());
                let (acknowledged, halfway) = (Arc::clone(&acknowledged), Arc::clone(&halfway));
                let (failovers, replays) = (Arc::clone(&failovers), Arc::clone(&replays));
                tokio::spawn(async move {
                    // Round robin over the replicas, skipping one that went away.
                    let mut turn = index;
                    let mut gone = [false; 3];
                    let mut send = async |tool: &str, arguments: &Value| loop {
                        turn += 1;
                        let replica = turn % urls.len();
                        if gone[replica] {
                            continue;
                        }
                        match call(&urls[replica], tool, arguments).await {
                            Answer::Result(result) => return result,
                            Answer::Gone => {
                                gone[replica] = true;
                                failovers.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    };
                    let mut versions = Vec::new();
                    let mut attempts = 0;
                    while versions.len() < EACH {
                        attempts += 1;
                        assert!(attempts < 10_000, "agent {index} starved");
                        let read = send("basket_get", &json!({ "basket_id": handle })).await;
                        let change =
                            basket_client::one_more_gib(&read, &handle, &format!("killed{index}"));
                        let result = send("basket_replace_configuration", &change).await;
                        // A replay: the dead replica committed the change but its answer was lost.
                        let (applied, replayed) = basket_client::settled(&result);
                        if replayed {
                            replays.fetch_add(1, Ordering::SeqCst);
                        }
                        if let Some(version) = applied {
                            versions.push(version);
                            if acknowledged.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER {
                                halfway.notify_one();
                            }
                        }
                    }
                    versions
                })
            })
            .collect();
        common::within("the workload to get halfway", halfway.notified()).await;
        children[0].kill();
        let mut versions = Vec::new();
        for agent in agents {
            versions.extend(common::within("an agent", agent).await.unwrap());
        }
        let applied = versions.len() as u64;
        println!(
            "kill -9 of one of three replicas: {applied} applied, {} calls failed over, {} answered replayed",
            failovers.load(Ordering::SeqCst),
            replays.load(Ordering::SeqCst)
        );
        assert_eq!(applied, (AGENTS * EACH) as u64);
        versions.sort_unstable();
        assert_eq!(versions, (2..=1 + applied).collect::<Vec<_>>());
        let survivor = Agent::connect(&urls[2], None).await;
        let (version, state) = survivor.get(&handle).await;
        assert_eq!(version, 1 + applied);
        assert_eq!(
            state["memory_gib"].as_u64(),
            Some(16 + applied),
            "an acknowledged change was lost or applied twice"
        );
    })
    .await;
}

/// A change applied on one replica whose answer never reached the caller (the replica was then
/// killed), retried with the same operation id on another replica: the ledger answers
/// `replayed` with the recorded outcome, and nothing is applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_another_replica_after_the_first_was_killed_replays_its_commit() {
    // Every await below is under this bound, besides each step's own.
    common::within_for(Duration::from_secs(600), "the whole test", async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let mut children = replicas(&schema, 2);
        let urls: Vec<String> = children.iter().map(|child| child.url.clone()).collect();
        basket_client::a_retry_elsewhere_replays(&urls[0], &urls[1], || children[0].kill()).await;
    })
    .await;
}
