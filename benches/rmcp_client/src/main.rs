//! rmcp's client making the calls `benches/client_overhead.rs` makes with `mcp_tools::client`:
//! `add` on the quickstart over 2026-07-28 (`server/discover`, no `initialize`), sequential and
//! from 32 concurrent callers on one client, after the same warm-up; CPU time of this process
//! (user + system, all threads, `/proc/self/stat`) and wall time per call, printed in the same
//! format.
//!
//! usage: rmcp-client-overhead QUICKSTART_URL [CALLS]

use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::json;

/// This process's user + system CPU time (Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux /proc");
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // The kernel's USER_HZ, 100 on Linux.
    Duration::from_millis(ticks * 10)
}

async fn measure(case: &str, calls: u64, run: impl std::future::Future<Output = ()>) {
    let (wall, cpu) = (Instant::now(), cpu_time());
    run.await;
    let (wall, cpu) = (wall.elapsed(), cpu_time() - cpu);
    let per = |total: Duration| total.as_secs_f64() * 1e6 / calls as f64;
    println!(
        "{:<28} {:>8} calls  {:>8.1} µs wall/call  {:>8.1} µs CPU/call",
        case,
        calls,
        per(wall),
        per(cpu)
    );
}

fn add() -> CallToolRequestParams {
    let arguments = json!({ "a": 2, "b": 3 }).as_object().unwrap().clone();
    CallToolRequestParams::new("add").with_arguments(arguments)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(url) = args.first() else {
        eprintln!("usage: rmcp-client-overhead QUICKSTART_URL [CALLS]");
        std::process::exit(2);
    };
    let calls: u64 = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client =
        ().serve_with_lifecycle(transport, lifecycle)
            .await
            .unwrap_or_else(|error| {
                eprintln!("{url}: {error}");
                std::process::exit(1);
            });
    let peer = client.peer().clone();
    for _ in 0..1000 {
        peer.call_tool(add()).await.unwrap();
    }
    measure("rmcp add, sequential", calls, async {
        for _ in 0..calls {
            let sum = peer.call_tool(add()).await.unwrap();
            assert_eq!(sum.structured_content, Some(json!({ "sum": 5 })));
        }
    })
    .await;
    measure("rmcp add, 32 concurrent", calls, async {
        let tasks: Vec<_> = (0..32)
            .map(|task| {
                let peer = peer.clone();
                let share = calls / 32 + u64::from(task < calls % 32);
                tokio::spawn(async move {
                    for _ in 0..share {
                        peer.call_tool(add()).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await;
    let _ = client.cancel().await;
}
