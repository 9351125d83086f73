//! The soak, outside CI (`.ci/soak`, 30 minutes by default): three basket replicas on one
//! PostgreSQL schema under mixed load (reads, versioned changes, notes, creates, tasks and
//! listens), each replica's resident memory and open file descriptors, the database
//! connections and the ledger, resources and tasks sampled every minute. After warm-up
//! (the first third) each must stay flat: the ledger and the tasks are bounded by their
//! retention, the rest by nothing growing.

use crate::basket;
use crate::basket_client::operation_id;
use crate::common;
use crate::faults::proxy::rewrite_postgres_url;
use crate::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcp_tools::McpServer;
use mcp_tools::store::{PostgresOptions, StoreConfig};
use mcp_tools::tasks::TaskOptions;
use serde_json::{Value, json};

use common::children::{self, Child};
use common::{Call, tasks};

const CHILD_TEST: &str = concat!(
    module_path!(),
    "::a_child_process_serves_the_basket_for_the_soak"
);

/// How long ledger records and tasks are kept (`MCP_TOOLS_SOAK_RETENTION_SECONDS`, default 120):
/// short, so that a half-hour run passes many retentions and shows whether the sweeps keep up.
fn retention() -> Duration {
    Duration::from_secs(setting("MCP_TOOLS_SOAK_RETENTION_SECONDS", 120))
}

/// A number from the environment (children inherit it), or `default`.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn server(store: mcp_tools::PostgresStore) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set_with_quote())
        .store(store)
        .signing_key(common::SIGNING_KEY)
        .task_options(
            TaskOptions::default()
                .ttl(retention())
                .purge_interval(Duration::from_secs(20)),
        )
        .build()
        .unwrap()
}

/// The body of a child process; does nothing unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the soak"]
fn a_child_process_serves_the_basket_for_the_soak() {
    let config = StoreConfig {
        ledger_retention: retention(),
        ..StoreConfig::default()
    };
    let options = PostgresOptions {
        sweep_interval: Duration::from_secs(20),
        ..PostgresOptions::default()
    };
    children::serve_postgres(server, config, options);
}

/// One sample.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// Seconds since the load started.
    at: u64,
    requests: u64,
    /// Resident memory of each replica, in KiB.
    rss_kib: [u64; 3],
    fds: [u64; 3],
    connections: u64,
    ledger: u64,
    resources: u64,
    tasks: u64,
}

/// A `/proc/<pid>/status` field in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64
}

/// A call's result, or `None` when it did not settle (the soak counts, it does not retry).
async fn result(url: &str, call: &Call) -> Option<Value> {
    let reply = tokio::time::timeout(Duration::from_secs(30), call.try_send_to(url))
        .await
        .ok()?
        .ok()?;
    (reply.status == 200).then(|| reply.json()["result"].clone())
}

/// One agent's endless mix, over `urls` in turn.
async fn agent(index: usize, urls: Arc<Vec<String>>, done: Arc<AtomicU64>, failed: Arc<AtomicU64>) {
    let url = |turn: usize| urls[turn % urls.len()].clone();
    let create = Call::call_tool(
        "basket_create",
        json!({ "operation_id": operation_id("soak") }),
    );
    let mut basket = loop {
        if let Some(created) = result(&url(index), &create).await
            && let Some(handle) = created["structuredContent"]["handle"].as_str()
        {
            break handle.to_owned();
        }
    };
    for turn in index.. {
        let url = url(turn);
        let ok = match turn % 20 {
            // A new basket, now and then: the agent moves to it.
            0 => {
                let create = Call::call_tool(
                    "basket_create",
                    json!({ "operation_id": operation_id("soak") }),
                );
                match result(&url, &create).await {
                    Some(created) => match created["structuredContent"]["handle"].as_str() {
                        Some(handle) => {
                            basket = handle.to_owned();
                            true
                        }
                        None => false,
                    },
                    None => false,
                }
            }
            // A task: a short quote, polled to its end, followed on a listen stream meanwhile.
            1 | 11 => {
                let quote = tasks::tool_call(
                    "basket_quote",
                    json!({ "basket_id": basket, "seconds": 0.2 }),
                );
                match result(&url, &quote).await {
                    Some(created) if created["resultType"] == "task" => {
                        let id = created["taskId"].as_str().unwrap().to_owned();
                        if turn % 20 == 11 {
                            let listen = Call::new(
                                "subscriptions/listen",
                                json!(1),
                                json!({ "notifications": { "taskIds": [id] } }),
                            )
                            .capabilities(tasks::taking_tasks());
                            let mut events = common::events::Events::open(&url, &listen).await;
                            common::within("a listen's acknowledgement", events.next()).await;
                        }
                        let poll = tasks::method_call("tasks/get", &id, json!({}));
                        let mut ended = false;
                        for _ in 0..100 {
                            match result(&url, &poll).await {
                                Some(task) if task["status"] == "completed" => {
                                    ended = true;
                                    break;
                                }
                                Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                                None => break,
                            }
                        }
                        ended
                    }
                    _ => false,
                }
            }
            // A note, under an operation id.
            5 | 15 => {
                let note = Call::call_tool(
                    "basket_add_note",
                    json!({ "basket_id": basket, "text": format!("note {turn}"),
                            "operation_id": operation_id("soak-note") }),
                );
                result(&url, &note).await.is_some()
            }
            // Reads, and read-modify-writes planned from them.
            _ => {
                let read = Call::call_tool("basket_get", json!({ "basket_id": basket }));
                match result(&url, &read).await {
                    Some(read) if turn % 2 == 0 => {
                        let outcome = &read["structuredContent"];
                        let memory = outcome["state"]["memory_gib"].as_u64().unwrap_or(16);
                        let change = Call::call_tool(
                            "basket_replace_configuration",
                            json!({ "basket_id": basket,
                                    "expected_version": outcome["version"],
                                    "operation_id": operation_id("soak-change"),
                                    "memory_gib": memory + 1,
                                    "storage_gib": outcome["state"]["storage_gib"] }),
                        );
                        result(&url, &change).await.is_some()
                    }
                    Some(_) => true,
                    None => false,
                }
            }
        };
        done.fetch_add(1, Ordering::Relaxed);
        if !ok {
            failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a 30-minute soak, outside CI: .ci/soak"]
async fn three_replicas_under_mixed_load_stay_flat() {
    let minutes = setting("MCP_TOOLS_SOAK_MINUTES", 30);
    let sample_every = Duration::from_secs(setting("MCP_TOOLS_SOAK_SAMPLE_SECONDS", 60));
    let agents = setting("MCP_TOOLS_SOAK_AGENTS", 12) as usize;
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    drop(schema.connect(StoreConfig::default()).await);
    let application = format!("soak_{}", schema.name);
    let url = rewrite_postgres_url(&schema.url, None, &application);
    let replicas: Vec<Child> =
        children::start(CHILD_TEST, &children::postgres_env(&url, &schema.name), 3);
    let urls = Arc::new(
        replicas
            .iter()
            .map(|child| child.url.clone())
            .collect::<Vec<_>>(),
    );
    let (done, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let workers: Vec<_> = (0..agents)
        .map(|index| {
            tokio::spawn(agent(
                index,
                Arc::clone(&urls),
                Arc::clone(&done),
                Arc::clone(&failed),
            ))
        })
        .collect();
    // The sampler's own connection: a database restart during the soak ends it, and the
    // sampler connects again rather than end the soak.
    let admin = tokio::sync::Mutex::new(schema.client().await);
    let count = |table: &str| format!("SELECT count(*) FROM {}.mcp_{table}", schema.name);
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut every = tokio::time::interval(sample_every);
    every.tick().await;
    for _ in 1..=minutes * 60 / sample_every.as_secs().max(1) {
        every.tick().await;
        let pids: Vec<u32> = replicas.iter().map(|child| child.pid().unwrap()).collect();
        let one = |query: String| {
            let (admin, schema) = (&admin, &schema);
            async move {
                let mut admin = admin.lock().await;
                if admin.is_closed() {
                    *admin = schema.client().await;
                }
                match admin.query_one(&query, &[]).await {
                    Ok(row) => row.get::<_, i64>(0) as u64,
                    Err(error) if error.is_closed() => {
                        *admin = schema.client().await;
                        let row = admin.query_one(&query, &[]).await.unwrap();
                        row.get::<_, i64>(0) as u64
                    }
                    Err(error) => panic!("{query}: {error}"),
                }
            }
        };
        let sample = Sample {
            at: started.elapsed().as_secs(),
            requests: done.load(Ordering::Relaxed),
            rss_kib: [0, 1, 2].map(|n| resident_kib(pids[n])),
            fds: [0, 1, 2].map(|n| open_fds(pids[n])),
            connections: one(format!(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application}'"
            ))
            .await,
            ledger: one(count("ledger")).await,
            resources: one(count("resources")).await,
            tasks: one(count("tasks")).await,
        };
        println!("{sample:?}");
        samples.push(sample);
    }
    for worker in &workers {
        worker.abort();
    }
    let elapsed = started.elapsed();
    println!(
        "\n{} requests in {elapsed:.0?} ({:.0}/s), {} did not settle\n",
        done.load(Ordering::Relaxed),
        done.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        failed.load(Ordering::Relaxed)
    );
    println!(
        "| at | requests | RSS MiB (3 replicas) | open fds | DB connections | ledger rows | resources | tasks |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for s in &samples {
        println!(
            "| {}:{:02} | {} | {} / {} / {} | {} / {} / {} | {} | {} | {} | {} |",
            s.at / 60,
            s.at % 60,
            s.requests,
            s.rss_kib[0] / 1024,
            s.rss_kib[1] / 1024,
            s.rss_kib[2] / 1024,
            s.fds[0],
            s.fds[1],
            s.fds[2],
            s.connections,
            s.ledger,
            s.resources,
            s.tasks
        );
    }
    // Flat after warm-up: nothing past the first third grows beyond what the warm-up reached,
    // give or take noise.
    let warm = samples.len() / 3;
    let (warm_up, rest) = samples.split_at(warm.max(1));
    let peak =
        |pick: &dyn Fn(&Sample) -> u64, of: &[Sample]| of.iter().map(pick).max().unwrap_or(0);
    for replica in 0..3 {
        let before = peak(&|s| s.rss_kib[replica], warm_up);
        let after = peak(&|s| s.rss_kib[replica], rest);
        assert!(
            after <= before + before / 4 + 8 * 1024,
            "replica {replica}'s memory grew: {before} KiB at warm-up, {after} KiB after"
        );
        let (before, after) = (
            peak(&|s| s.fds[replica], warm_up),
            peak(&|s| s.fds[replica], rest),
        );
        assert!(
            after <= before + 16,
            "replica {replica}'s descriptors grew: {before} to {after}"
        );
    }
    for (what, pick) in [
        (
            "database connections",
            &(|s: &Sample| s.connections) as &dyn Fn(&Sample) -> u64,
        ),
        ("ledger rows", &|s: &Sample| s.ledger),
        ("tasks", &|s: &Sample| s.tasks),
    ] {
        let (before, after) = (peak(pick, warm_up), peak(pick, rest));
        assert!(
            after <= before + before / 2 + 16,
            "{what} grew: {before} at warm-up, {after} after"
        );
    }
}
