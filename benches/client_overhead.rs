//! What the client costs the process that calls: CPU time of this process per call, and wall
//! time per call, over loopback against servers running in their own processes.
//!
//! usage: benches/client_overhead.sh (builds and starts the servers, runs this and the other
//! clients), or by hand:
//!
//! ```sh
//! cargo bench --bench client_overhead -- QUICKSTART_URL BASKET_URL [CALLS]
//! ```
//!
//! Cases, each `CALLS` calls (default 20,000) after a warm-up:
//!
//! - `client add, sequential`: `Client::call_tool("add")` one after the other;
//! - `client add, 32 concurrent`: the same from 32 tasks on one client;
//! - `harness add, sequential`: `Harness::call("add")`: a tool without rules, called as it is;
//! - `client note, sequential`: `basket_add_note` with an operation id the caller makes (a UUID,
//!   as the harness makes one), read as JSON;
//! - `harness note, sequential`: `Harness::call("basket_add_note")` without one: the id minted,
//!   the answer read as an `Outcome` and its basis remembered.
//!
//! CPU time is the process's user and system time (`/proc/self/stat`, all threads), so the
//! servers' work is not in it.

use std::time::{Duration, Instant};

use mcp_tools::client::{Client, Harness, Outcome};
use serde_json::{Value, json};

/// This process's user + system CPU time (Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux /proc");
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // The kernel's USER_HZ, 100 on Linux.
    Duration::from_millis(ticks * 10)
}

struct Measured {
    case: &'static str,
    calls: u64,
    wall: Duration,
    cpu: Duration,
}

impl Measured {
    fn print(&self) {
        let per = |total: Duration| total.as_secs_f64() * 1e6 / self.calls as f64;
        println!(
            "{:<28} {:>8} calls  {:>8.1} µs wall/call  {:>8.1} µs CPU/call",
            self.case,
            self.calls,
            per(self.wall),
            per(self.cpu)
        );
    }
}

async fn measure(
    case: &'static str,
    calls: u64,
    run: impl std::future::Future<Output = ()>,
) -> Measured {
    let (wall, cpu) = (Instant::now(), cpu_time());
    run.await;
    let measured = Measured {
        case,
        calls,
        wall: wall.elapsed(),
        cpu: cpu_time() - cpu,
    };
    measured.print();
    measured
}

fn uuid() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

async fn connect(url: &str) -> Client {
    Client::builder()
        .client_info("client-overhead", "1.0.0")
        .connect_http(url)
        .await
        .unwrap_or_else(|error| panic!("{url}: {error}"))
}

/// A new basket on the basket server; each takes at most 1,000 notes here, well within the
/// records one basket's ledger keeps.
async fn basket(harness: &Harness) -> String {
    match harness.call("basket_create", json!({})).await.unwrap() {
        Outcome::Applied(applied) => applied.handle,
        other => panic!("basket_create: {other:?}"),
    }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; the URLs and the count are the other arguments.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (Some(quickstart), Some(basket_url)) = (args.first(), args.get(1)) else {
        eprintln!(
            "usage: cargo bench --bench client_overhead -- QUICKSTART_URL BASKET_URL [CALLS]"
        );
        eprintln!("(benches/client_overhead.sh starts the servers and runs every client)");
        return;
    };
    let calls: u64 = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let client = connect(quickstart).await;
    let add = json!({ "a": 2, "b": 3 });
    for _ in 0..1000 {
        client.call_tool("add", add.clone()).await.unwrap();
    }
    measure("client add, sequential", calls, async {
        for _ in 0..calls {
            let sum = client.call_tool("add", add.clone()).await.unwrap();
            assert_eq!(sum.structured_content, Some(json!({ "sum": 5 })));
        }
    })
    .await;
    measure("client add, 32 concurrent", calls, async {
        let tasks: Vec<_> = (0..32)
            .map(|task| {
                let client = client.clone();
                let add = add.clone();
                let share = calls / 32 + u64::from(task < calls % 32);
                tokio::spawn(async move {
                    for _ in 0..share {
                        client.call_tool("add", add.clone()).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await;
    let harness = Harness::new(connect(quickstart).await);
    measure("harness add, sequential", calls, async {
        for _ in 0..calls {
            let outcome = harness.call("add", add.clone()).await.unwrap();
            assert!(matches!(outcome, Outcome::Plain(_)));
        }
    })
    .await;

    let client = connect(basket_url).await;
    let harness = Harness::new(connect(basket_url).await);
    let notes = calls.min(10_000);
    measure("client note, sequential", notes, async {
        let mut handle = basket(&harness).await;
        for call in 0..notes {
            if call % 1000 == 999 {
                handle = basket(&harness).await;
            }
            let note = json!({ "basket_id": handle, "text": "n", "operation_id": uuid() });
            let result = client.call_tool("basket_add_note", note).await.unwrap();
            let outcome: Value = result.structured().unwrap();
            assert_eq!(outcome["outcome"], "applied");
        }
    })
    .await;
    measure("harness note, sequential", notes, async {
        let mut handle = basket(&harness).await;
        for call in 0..notes {
            if call % 1000 == 999 {
                handle = basket(&harness).await;
            }
            let note = json!({ "basket_id": handle, "text": "n" });
            let outcome = harness.call("basket_add_note", note).await.unwrap();
            assert!(matches!(outcome, Outcome::Applied(_)), "{outcome:?}");
        }
    })
    .await;
}
