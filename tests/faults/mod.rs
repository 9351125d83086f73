//! The exactly-once contract under faults: agents doing read-modify-write on baskets over real
//! HTTP, through replicas whose answers or database connections fail, retrying each change
//! under its operation id until it is settled. The run's history is checked for
//! linearizability, and the final baskets against what was acknowledged.

#![allow(dead_code)]

pub mod history;
pub mod proxy;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::basket_client::operation_id;
use crate::common::Call;
use history::{History, Op, Ret};

/// The shape of a run.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub agents: usize,
    pub baskets: usize,
    /// Logical operations per agent (a read-modify-write is two: the read and the change).
    pub operations: usize,
    /// The chance that an agent whose call failed gives up on it and carries on as a new
    /// client, leaving the change unacknowledged: it may have been applied, at most once.
    pub abandon: f64,
}

/// What a run did, for the test's assertions and its log line.
#[derive(Debug, Default)]
pub struct Report {
    pub operations: usize,
    pub applied: u64,
    pub stale: u64,
    /// Changes answered `replayed`: a retry found the change already made.
    pub replayed: u64,
    /// Calls that failed (transport, `STORE_UNAVAILABLE`, still in progress) and were retried.
    pub retries: u64,
    /// Changes never acknowledged: their clients gave up.
    pub abandoned: u64,
    /// Notes acknowledged as applied, and those never acknowledged, by basket.
    pub notes_applied: HashMap<String, Vec<String>>,
    pub notes_abandoned: HashMap<String, Vec<String>>,
    pub handles: Vec<String>,
}

/// A call's answer as an agent sees it.
enum Answer {
    /// A `CallToolResult` that settles the call.
    Settled(Value),
    /// Anything an agent retries: no answer, a dropped connection, a 5xx, `STORE_UNAVAILABLE`,
    /// `OPERATION_IN_PROGRESS`.
    Retry(String),
}

/// One `tools/call`, bounded, failures returned rather than asserted.
async fn call(url: &str, tool: &str, arguments: &Value) -> Answer {
    let sent = tokio::time::timeout(
        Duration::from_secs(20),
        Call::call_tool(tool, arguments.clone()).try_send_to(url),
    )
    .await;
    let reply = match sent {
        Err(_) => return Answer::Retry("no answer within 20 s".into()),
        Ok(Err(error)) => return Answer::Retry(format!("transport: {error}")),
        Ok(Ok(reply)) => reply,
    };
    if reply.status != 200 {
        return Answer::Retry(format!("HTTP {}: {}", reply.status, reply.text));
    }
    let Ok(body) = serde_json::from_str::<Value>(&reply.text) else {
        return Answer::Retry(format!("not JSON: {}", reply.text));
    };
    let result = body["result"].clone();
    assert!(
        result.is_object(),
        "{tool}: a JSON-RPC error is never the answer to a well-formed call: {body}"
    );
    let code = &result["structuredContent"]["code"];
    if code == "STORE_UNAVAILABLE" || code == "OPERATION_IN_PROGRESS" {
        return Answer::Retry(code.to_string());
    }
    Answer::Settled(result)
}

/// The replicas an agent's calls go to, in turn: a retry goes to the next one, as through a
/// load balancer.
struct Route {
    urls: Arc<Vec<String>>,
    next: usize,
}

impl Route {
    fn url(&mut self) -> String {
        self.next += 1;
        self.urls[self.next % self.urls.len()].clone()
    }
}

/// A uniform draw in [0, 1) from `state` (SplitMix64).
fn draw(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Counters the agents share.
#[derive(Default)]
struct Tally {
    applied: AtomicU64,
    stale: AtomicU64,
    replayed: AtomicU64,
    retries: AtomicU64,
    abandoned: AtomicU64,
}

/// How long a call may keep failing before the test gives up on it: past the longest a
/// claim of an abandoned create holds retries off (30 s by default).
const SETTLE_WITHIN: Duration = Duration::from_secs(60);

/// Sends `arguments` until the call settles; `None` if the agent gave up after a failure.
async fn settle(
    route: &mut Route,
    tool: &str,
    arguments: &Value,
    abandon: f64,
    random: &mut u64,
    tally: &Tally,
) -> Option<Value> {
    let started = std::time::Instant::now();
    let mut last = String::new();
    while started.elapsed() < SETTLE_WITHIN {
        match call(&route.url(), tool, arguments).await {
            Answer::Settled(result) => return Some(result),
            Answer::Retry(why) => {
                last = why;
                tally.retries.fetch_add(1, Ordering::Relaxed);
                if draw(random) < abandon {
                    return None;
                }
                // A client's pause between retries, not a wait for anything.
                tokio::time::sleep(Duration::from_millis(2 + (draw(random) * 8.0) as u64)).await;
            }
        }
    }
    panic!("{tool}: failed for {SETTLE_WITHIN:?}, the last time with {last}");
}

/// What a change settled as.
fn settled_change(result: &Value) -> (Ret, bool) {
    let mut outcome = &result["structuredContent"];
    let replayed = outcome["outcome"] == "replayed";
    if replayed {
        outcome = &outcome["original"];
    }
    let ret = match outcome["outcome"].as_str() {
        Some("applied") => Ret::Applied {
            version: outcome["version"].as_u64().unwrap(),
        },
        Some("stale_view") => Ret::Stale {
            current: outcome["current_version"].as_u64().unwrap(),
        },
        _ => panic!("a change settled as neither applied nor stale_view: {result}"),
    };
    (ret, replayed)
}

/// One agent: its route over the replicas, its draws, and the client it is in the history
/// (a new one each time it gives up on a call).
struct Agent {
    route: Route,
    random: u64,
    client: u64,
    clients: Arc<AtomicU64>,
    basket: usize,
    abandon: f64,
    history: Arc<History>,
    tally: Arc<Tally>,
}

impl Agent {
    /// Reads the basket `handle` until it answers: its version and state.
    async fn read(&mut self, handle: &str) -> (u64, Value) {
        self.history.invoke(self.client, self.basket, Op::Read);
        let arguments = json!({ "basket_id": handle });
        // A read changes nothing: giving up on one is not worth a new client.
        let read = settle(
            &mut self.route,
            "basket_get",
            &arguments,
            0.0,
            &mut self.random,
            &self.tally,
        )
        .await
        .unwrap();
        let outcome = &read["structuredContent"];
        assert_eq!(outcome["outcome"], "current", "{read}");
        let state = outcome["state"].clone();
        let version = outcome["version"].as_u64().unwrap();
        let ret = Ret::Read {
            version,
            memory_gib: state["memory_gib"].as_u64().unwrap(),
            notes: state["notes"]["len"].as_u64().unwrap(),
        };
        self.history.complete(self.client, self.basket, ret);
        (version, state)
    }

    /// Sends the change `op` as `tool` with `arguments` until it settles, recording it; `None`
    /// if the agent gave up on it, and then carries on as a new client.
    async fn change(&mut self, op: Op, tool: &str, arguments: &Value) -> Option<Ret> {
        self.history.invoke(self.client, self.basket, op);
        let settled = settle(
            &mut self.route,
            tool,
            arguments,
            self.abandon,
            &mut self.random,
            &self.tally,
        )
        .await;
        let Some(result) = settled else {
            self.tally.abandoned.fetch_add(1, Ordering::Relaxed);
            self.client = self.clients.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let (ret, replayed) = settled_change(&result);
        if replayed {
            self.tally.replayed.fetch_add(1, Ordering::Relaxed);
        }
        let counter = match ret {
            Ret::Applied { .. } => &self.tally.applied,
            _ => &self.tally.stale,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.history.complete(self.client, self.basket, ret.clone());
        Some(ret)
    }
}

/// Runs `workload` against the replicas at `urls` (each agent starts at its own), recording
/// the history in `history`.
pub async fn run(urls: &[String], workload: Workload, history: Arc<History>, seed: u64) -> Report {
    let urls = Arc::new(urls.to_vec());
    let mut setup = Route {
        urls: Arc::clone(&urls),
        next: 0,
    };
    let mut random = seed;
    let tally = Arc::new(Tally::default());
    let mut handles = Vec::new();
    for _ in 0..workload.baskets {
        let arguments = json!({ "operation_id": operation_id("fault-create") });
        let created = settle(
            &mut setup,
            "basket_create",
            &arguments,
            0.0,
            &mut random,
            &tally,
        )
        .await
        .unwrap();
        let mut outcome = &created["structuredContent"];
        if outcome["outcome"] == "replayed" {
            outcome = &outcome["original"];
        }
        let handle = outcome["handle"].as_str();
        handles.push(handle.unwrap_or_else(|| panic!("{created}")).to_owned());
    }
    let clients = Arc::new(AtomicU64::new(0));
    let agents: Vec<_> = (0..workload.agents)
        .map(|index| {
            let basket = index % workload.baskets;
            let mut agent = Agent {
                route: Route {
                    urls: Arc::clone(&urls),
                    next: index,
                },
                random: seed ^ (index as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93),
                client: clients.fetch_add(1, Ordering::Relaxed),
                clients: Arc::clone(&clients),
                basket,
                abandon: workload.abandon,
                history: Arc::clone(&history),
                tally: Arc::clone(&tally),
            };
            let handle = handles[basket].clone();
            tokio::spawn(async move {
                let (mut notes_applied, mut notes_abandoned) = (Vec::new(), Vec::new());
                let mut done = 0;
                while done < workload.operations {
                    if done % 4 == 3 {
                        done += 1;
                        let text = operation_id(&format!("note-{index}"));
                        let arguments = json!({ "basket_id": handle, "text": text,
                                                "operation_id": operation_id("note") });
                        match agent.change(Op::Note, "basket_add_note", &arguments).await {
                            Some(ret) => {
                                assert!(matches!(ret, Ret::Applied { .. }), "a note applies");
                                notes_applied.push(text);
                            }
                            None => notes_abandoned.push(text),
                        }
                        continue;
                    }
                    done += 2;
                    let (version, state) = agent.read(&handle).await;
                    let memory_gib = state["memory_gib"].as_u64().unwrap() + 1;
                    let arguments = json!({
                        "basket_id": handle,
                        "expected_version": version,
                        "operation_id": operation_id(&format!("fault-{index}")),
                        "memory_gib": memory_gib,
                        "storage_gib": state["storage_gib"],
                    });
                    let op = Op::Replace {
                        expected: version,
                        memory_gib,
                    };
                    agent
                        .change(op, "basket_replace_configuration", &arguments)
                        .await;
                }
                (basket, notes_applied, notes_abandoned)
            })
        })
        .collect();
    let mut report = Report {
        handles: handles.clone(),
        ..Report::default()
    };
    for agent in agents {
        let (basket, applied, abandoned) =
            crate::common::within_for(Duration::from_secs(300), "a fault-test agent", agent)
                .await
                .unwrap();
        report
            .notes_applied
            .entry(handles[basket].clone())
            .or_default()
            .extend(applied);
        report
            .notes_abandoned
            .entry(handles[basket].clone())
            .or_default()
            .extend(abandoned);
    }
    report.operations = history.operations();
    report.applied = tally.applied.load(Ordering::Relaxed);
    report.stale = tally.stale.load(Ordering::Relaxed);
    report.replayed = tally.replayed.load(Ordering::Relaxed);
    report.retries = tally.retries.load(Ordering::Relaxed);
    report.abandoned = tally.abandoned.load(Ordering::Relaxed);
    report
}

/// Checks a run once its faults are off: the history is linearizable; in each basket every
/// acknowledged note is there exactly once and every abandoned one at most once; each applied
/// change moved the version by one and either the memory or the notes by one; and the
/// acknowledged changes are all there, the abandoned ones at most once each. Returns the
/// checker's verdict, for the log.
pub async fn assert_exactly_once(url: &str, report: &Report, history: &History) -> String {
    let verdict = history
        .check()
        .unwrap_or_else(|refusal| panic!("{refusal}"));
    let mut applied_seen = 0;
    for handle in &report.handles {
        // The basket, and its notes page by page.
        let mut arguments = json!({ "basket_id": handle });
        let mut notes: Vec<String> = Vec::new();
        let (version, memory) = loop {
            let read = match call(url, "basket_get", &arguments).await {
                Answer::Settled(read) => read,
                Answer::Retry(why) => panic!("the final read failed with the faults off: {why}"),
            };
            let basket = &read["structuredContent"];
            let page = &basket["state"]["notes"];
            notes.extend(
                page["items"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice)
                    .iter()
                    .map(|note| note["value"].as_str().unwrap().to_owned()),
            );
            match page["next_cursor"].as_str() {
                Some(cursor) => arguments["items_cursor"] = json!(cursor),
                None => {
                    break (
                        basket["version"].as_u64().unwrap(),
                        basket["state"]["memory_gib"].as_u64().unwrap(),
                    );
                }
            }
        };
        let count = |text: &str| notes.iter().filter(|note| **note == text).count();
        let acknowledged = &report.notes_applied[handle];
        for text in acknowledged {
            assert_eq!(count(text), 1, "acknowledged note {text} in {handle}");
        }
        let abandoned = report
            .notes_abandoned
            .get(handle)
            .map_or(&[][..], Vec::as_slice);
        for text in abandoned {
            assert!(
                count(text) <= 1,
                "abandoned note {text} applied twice in {handle}"
            );
        }
        assert!(
            notes
                .iter()
                .all(|note| acknowledged.iter().chain(abandoned).any(|t| t == note)),
            "a note nobody sent in {handle}: {notes:?}"
        );
        // Every applied change is one version: a memory upgrade or a note, never both, never
        // twice.
        assert_eq!(
            version - 1,
            (memory - 16) + notes.len() as u64,
            "basket {handle}: version {version}, memory {memory}, {} notes",
            notes.len()
        );
        applied_seen += version - 1;
    }
    assert!(
        (report.applied..=report.applied + report.abandoned).contains(&applied_seen),
        "{applied_seen} changes in the baskets, {} acknowledged and {} abandoned",
        report.applied,
        report.abandoned
    );
    format!(
        "linearizable ({} baskets, {} operations, {} never answered); {applied_seen} changes in the \
         baskets for {} acknowledged and {} abandoned",
        verdict.baskets, verdict.operations, verdict.unanswered, report.applied, report.abandoned
    )
}

/// A seed for the run: `MCP_TOOLS_FAULT_SEED` to replay one, else the clock's.
pub fn seed() -> u64 {
    std::env::var("MCP_TOOLS_FAULT_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}
