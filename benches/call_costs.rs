//! Deterministic costs of one call, which do not move with the machine's load: heap
//! allocations (blocks and bytes) per `tools/call`, and on SQLite the log frames a mutation
//! appends.
//!
//! ```text
//! cargo bench --bench call_costs                 # every case, 1,000 measured calls each
//! CALLS=5000 cargo bench --bench call_costs
//! ```
//!
//! Each case sends complete MCP requests (headers and `_meta` as a client sends them) to the
//! server's router as a tower service, in process, on a current-thread runtime; what the
//! allocator hands out between the request and the last byte of its answer is counted, on
//! every thread (the SQLite store's writer thread included). The connection's own work (hyper's
//! parsing and writing) is not in it: `benches/instructions.sh` counts that over HTTP.
//!
//! Cases, each after 200 unmeasured calls:
//! - `add`: the quickstart's stateless `add`, the baseline.
//! - `basket_get` on the memory and the SQLite store.
//! - `basket_upgrade_memory` on both: a versioned mutation with a fresh operation id and the
//!   version the previous call made, each answer checked `applied`.
//! - `basket_add_note` on both: an append to the basket's notes, a `Collection` (each note a
//!   row of its own), without a version, with a fresh operation id, checked `applied` with the
//!   next note id.
//!
//! For SQLite it also prints the log frames (pages) one upgrade and one note append, read from the size of
//! the write-ahead log (the store's checkpoint thread stays idle below its threshold, so the log
//! only grows during the measurement).
//!
//! Any answer other than the expected one makes the bench exit 1.

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use http_body_util::BodyExt;
use mcp_tools::store::StoreConfig;
use mcp_tools::{McpServer, MemoryStore, SqliteStore, ToolError, tool, tools};
use serde::Serialize;
use serde_json::{Value, json};
use tower::ServiceExt;

#[path = "../examples/support/basket.rs"]
mod basket;

/// The system allocator, counting blocks and bytes handed out.
struct Counting;

static BLOCKS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call goes to `System` unchanged; the counters are arithmetic on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `layout` is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A move to a larger block costs as an allocation does.
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: `block` came from this allocator with `layout`.
        unsafe { System.realloc(block, layout, new_size) }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from this allocator with `layout`.
        unsafe { System.dealloc(block, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn counted() -> (u64, u64) {
    (
        BLOCKS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    )
}

/// The quickstart's answer.
#[derive(Serialize, schemars::JsonSchema)]
struct Sum {
    sum: i64,
}

/// Adds two integers.
#[tool(read_only)]
fn add(a: i64, b: i64) -> Result<Sum, ToolError> {
    a.checked_add(b)
        .map(|sum| Sum { sum })
        .ok_or_else(|| ToolError::new("OVERFLOW", "the sum does not fit"))
}

fn server(store: impl mcp_tools::store::Store) -> McpServer {
    McpServer::builder("costs", "1")
        .tools(tools![add].merge(basket::tool_set()))
        .store(store)
        .signing_key(b"a fixed key, so that runs compare".to_vec())
        .build()
        .expect("the bench's server builds")
}

fn request(id: u64, tool: &str, arguments: Value) -> http::Request<Body> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    });
    http::Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

/// Sends `request` and returns the answer's `structuredContent`, or why it is not one.
async fn send(router: &axum::Router, request: http::Request<Body>) -> Result<Value, String> {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let answer: Value = serde_json::from_slice(&bytes)
        .map_err(|error| format!("HTTP {status}, not JSON ({error})"))?;
    match &answer["result"]["structuredContent"] {
        Value::Null => Err(format!("HTTP {status}: {answer}")),
        content => Ok(content.clone()),
    }
}

struct Costs {
    blocks: f64,
    bytes: f64,
}

/// Runs `make(n)` for 200 unmeasured calls, then `calls` counted ones, checking each answer.
async fn measure(
    router: &axum::Router,
    calls: u64,
    mut make: impl FnMut(u64) -> http::Request<Body>,
    check: impl Fn(u64, &Value) -> bool,
) -> Result<Costs, String> {
    let mut n = 0;
    let mut one = async |n: u64, counting: &mut (u64, u64)| -> Result<(), String> {
        let request = make(n);
        let before = counted();
        let content = send(router, request).await;
        let after = counted();
        counting.0 += after.0 - before.0;
        counting.1 += after.1 - before.1;
        let content = content?;
        if check(n, &content) {
            Ok(())
        } else {
            Err(format!("call {n}: unexpected answer {content}"))
        }
    };
    let mut ignored = (0, 0);
    for _ in 0..200 {
        one(n, &mut ignored).await?;
        n += 1;
    }
    let mut counting = (0, 0);
    for _ in 0..calls {
        one(n, &mut counting).await?;
        n += 1;
    }
    Ok(Costs {
        blocks: counting.0 as f64 / calls as f64,
        bytes: counting.1 as f64 / calls as f64,
    })
}

/// A new basket's handle.
async fn created(router: &axum::Router) -> Result<String, String> {
    static CREATED: AtomicU64 = AtomicU64::new(0);
    let n = CREATED.fetch_add(1, Ordering::Relaxed);
    let arguments = json!({ "operation_id": format!("costs-create-{n:020}") });
    let content = send(router, request(0, "basket_create", arguments)).await?;
    content["handle"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no handle in {content}"))
}

fn upgrade(handle: &str, n: u64) -> http::Request<Body> {
    let version = n + 1;
    request(
        n,
        "basket_upgrade_memory",
        json!({
            "basket_id": handle,
            "expected_version": version,
            "memory_gib": 16 + version,
            "operation_id": format!("costs-{handle}-{version:020}"),
        }),
    )
}

fn note(handle: &str, n: u64) -> http::Request<Body> {
    request(
        n,
        "basket_add_note",
        json!({
            "basket_id": handle,
            "text": format!("note {n}"),
            "operation_id": format!("costs-note-{handle}-{n:020}"),
        }),
    )
}

fn noted(n: u64, content: &Value) -> bool {
    content["outcome"] == "applied" && content["result"]["note_id"] == n + 1
}

fn applied(n: u64, content: &Value) -> bool {
    content["outcome"] == "applied" && content["version"] == n + 2
}

/// Frames in the write-ahead log at `path`: a 32-byte header, then frames of a 24-byte header
/// and one page.
fn frames_in_log(path: &std::path::Path, page: u64) -> u64 {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    size.saturating_sub(32) / (24 + page)
}

async fn run(calls: u64) -> Result<(), String> {
    let mut rows = Vec::new();

    let memory = server(MemoryStore::default()).router();
    let add_costs = measure(
        &memory,
        calls,
        |n| request(n, "add", json!({ "a": n, "b": 3 })),
        |n, content| content["sum"] == n + 3,
    )
    .await?;
    rows.push(("add", "-", add_costs));

    let handle = created(&memory).await?;
    let get = measure(
        &memory,
        calls,
        |n| request(n, "basket_get", json!({ "basket_id": handle })),
        |_, content| content["outcome"] == "current",
    )
    .await?;
    rows.push(("basket_get", "memory", get));
    let handle = created(&memory).await?;
    let upgrades = measure(&memory, calls, |n| upgrade(&handle, n), applied).await?;
    rows.push(("basket_upgrade_memory", "memory", upgrades));
    let handle = created(&memory).await?;
    let notes = measure(&memory, calls, |n| note(&handle, n), noted).await?;
    rows.push(("basket_add_note", "memory", notes));

    let folder = tempfile::tempdir().map_err(|error| error.to_string())?;
    let path = folder.path().join("costs.db");
    let store = SqliteStore::open(&path, StoreConfig::default()).map_err(|e| e.to_string())?;
    let sqlite = server(store).router();
    let handle = created(&sqlite).await?;
    let get = measure(
        &sqlite,
        calls,
        |n| request(n, "basket_get", json!({ "basket_id": handle })),
        |_, content| content["outcome"] == "current",
    )
    .await?;
    rows.push(("basket_get", "SQLite", get));

    // The log's frames over a short run the checkpoint thread leaves alone.
    let log = folder.path().join("costs.db-wal");
    let handle = created(&sqlite).await?;
    let page = 4096;
    let framed_calls = 100;
    let before = frames_in_log(&log, page);
    for n in 0..framed_calls {
        let content = send(&sqlite, upgrade(&handle, n)).await?;
        if !applied(n, &content) {
            return Err(format!("upgrade {n}: {content}"));
        }
    }
    let frames = (frames_in_log(&log, page) - before) as f64 / framed_calls as f64;
    let handle = created(&sqlite).await?;
    let before = frames_in_log(&log, page);
    for n in 0..framed_calls {
        let content = send(&sqlite, note(&handle, n)).await?;
        if !noted(n, &content) {
            return Err(format!("note {n}: {content}"));
        }
    }
    let note_frames = (frames_in_log(&log, page) - before) as f64 / framed_calls as f64;
    let handle = created(&sqlite).await?;
    let upgrades = measure(&sqlite, calls, |n| upgrade(&handle, n), applied).await?;
    rows.push(("basket_upgrade_memory", "SQLite", upgrades));
    let handle = created(&sqlite).await?;
    let notes = measure(&sqlite, calls, |n| note(&handle, n), noted).await?;
    rows.push(("basket_add_note", "SQLite", notes));

    println!("| call | store | allocations per call | x add | bytes allocated per call |");
    println!("|---|---|---:|---:|---:|");
    let baseline = rows[0].2.blocks;
    for (call, store, costs) in &rows {
        println!(
            "| {call} | {store} | {:.1} | {:.2}x | {:.0} |",
            costs.blocks,
            costs.blocks / baseline,
            costs.bytes
        );
    }
    println!();
    println!("SQLite: {frames:.2} log frames (4 KiB pages) appended per `basket_upgrade_memory`");
    println!("SQLite: {note_frames:.2} log frames appended per `basket_add_note`");
    Ok(())
}

fn main() -> ExitCode {
    let calls = std::env::var("CALLS")
        .ok()
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(1000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    match runtime.block_on(run(calls)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("call_costs: {error}");
            ExitCode::FAILURE
        }
    }
}
