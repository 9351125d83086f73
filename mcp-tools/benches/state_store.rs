//! Versioned mutation throughput of each store against the raw equivalent on the same engine.
//!
//! `cargo bench -p mcp-tools --bench state_store`
//!
//! - memory: `MemoryStore::mutate` (ledger lookup and record, fingerprint, version check, history)
//!   against a `Mutex<HashMap>` update that checks and bumps a version;
//! - SQLite: `SqliteStore::mutate` (the same boundary in one `BEGIN IMMEDIATE` transaction on a
//!   blocking thread) against a bare `UPDATE ... WHERE id = ? AND version = ?` in its own
//!   transaction, both in WAL mode with the same `synchronous` setting.
//!
//! Criterion measures each case; afterwards a second pass runs raw and versioned alternately in
//! the same process and prints the throughput ratios.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Criterion;
use mcp_tools::Principal;
use mcp_tools::state::{
    CreateRequest, Fingerprint, ManualClock, MemoryStore, MutationOutcome, MutationRequest,
    ResourceKind, SqliteOptions, SqliteStore, StateStore, StoreConfig, Synchronous, Transition,
};
use rusqlite::{Connection, TransactionBehavior, params};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

const COUNTER: ResourceKind = ResourceKind::new("counter", "ctr");

fn initial() -> Value {
    json!({ "name": "bench", "count": 0, "tags": ["a", "b"] })
}

fn increment(state: &mut Value) {
    let count = state["count"].as_u64().unwrap_or(0);
    state["count"] = json!(count + 1);
}

/// The store's config for benchmarks: a manual clock that moves 1 ms per operation, so ledger
/// records expire after about a thousand operations and the automatic sweep keeps the ledger small.
fn config(clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        ledger_retention: Duration::from_secs(1),
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    }
}

/// One versioned mutation after another on one resource, each with a fresh operation id.
struct Versioned<S> {
    store: S,
    clock: ManualClock,
    handle: String,
    version: u64,
    next_id: u64,
}

impl<S: StateStore> Versioned<S> {
    fn new(runtime: &Runtime, store: S, clock: ManualClock) -> Self {
        let request = CreateRequest {
            kind: COUNTER,
            principal: Principal::subject("bench"),
            state: initial(),
        };
        let handle = runtime.block_on(store.create(request)).unwrap().handle;
        Versioned {
            store,
            clock,
            handle,
            version: 1,
            next_id: 0,
        }
    }

    fn step(&mut self, runtime: &Runtime) {
        self.next_id += 1;
        self.clock.advance(Duration::from_millis(1));
        let operation_id = format!("op-{}", self.next_id);
        let arguments = json!({
            "counter_id": self.handle,
            "expected_version": self.version,
            "operation_id": operation_id,
        });
        let request = MutationRequest::new(COUNTER, Principal::subject("bench"), &self.handle)
            .expect_version(self.version)
            .operation(operation_id, Fingerprint::of_call("increment", &arguments));
        let transition = Transition::new(|state| {
            increment(state);
            Ok(Value::Null)
        });
        match runtime
            .block_on(self.store.mutate(request, transition))
            .unwrap()
        {
            MutationOutcome::Applied(applied) => self.version = black_box(applied.version),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The raw in-memory equivalent: a locked map update with a version check.
struct RawMemory {
    map: Mutex<HashMap<String, (u64, Value)>>,
    version: u64,
}

impl RawMemory {
    fn new() -> Self {
        let map = HashMap::from([("ctr_raw".to_owned(), (1, initial()))]);
        RawMemory {
            map: Mutex::new(map),
            version: 1,
        }
    }

    fn step(&mut self) {
        let mut map = self.map.lock().unwrap();
        let (version, state) = map.get_mut("ctr_raw").unwrap();
        assert_eq!(*version, self.version);
        increment(state);
        *version += 1;
        self.version = black_box(*version);
    }
}

/// The raw SQLite equivalent: a bare conditional `UPDATE` in its own transaction.
struct RawSqlite {
    connection: Connection,
    state: Value,
    version: i64,
}

impl RawSqlite {
    fn new(path: &std::path::Path, synchronous: Synchronous) -> Self {
        let connection = Connection::open(path).unwrap();
        connection.busy_timeout(Duration::from_secs(10)).unwrap();
        let _: String = connection
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .unwrap();
        let synchronous = match synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        connection
            .pragma_update(None, "synchronous", synchronous)
            .unwrap();
        connection
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS raw (id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL) STRICT;
                 DELETE FROM raw;",
            )
            .unwrap();
        connection
            .execute(
                "INSERT INTO raw (id, version, state) VALUES ('ctr_raw', 1, ?1)",
                [initial().to_string()],
            )
            .unwrap();
        RawSqlite {
            connection,
            state: initial(),
            version: 1,
        }
    }

    fn step(&mut self) {
        increment(&mut self.state);
        let txn = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        let updated = txn
            .prepare_cached("UPDATE raw SET state = ?1, version = version + 1 WHERE id = 'ctr_raw' AND version = ?2")
            .unwrap()
            .execute(params![self.state.to_string(), self.version])
            .unwrap();
        assert_eq!(updated, 1);
        txn.commit().unwrap();
        self.version += 1;
    }
}

fn sqlite_store(
    runtime: &Runtime,
    dir: &std::path::Path,
    synchronous: Synchronous,
) -> Versioned<SqliteStore> {
    let clock = ManualClock::at_millis(0);
    let options = SqliteOptions {
        synchronous,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(dir.join("store.db"), config(&clock), options).unwrap();
    Versioned::new(runtime, store, clock)
}

fn memory_store(runtime: &Runtime) -> Versioned<MemoryStore> {
    let clock = ManualClock::at_millis(0);
    Versioned::new(runtime, MemoryStore::new(config(&clock)), clock)
}

fn criterion_pass(c: &mut Criterion, runtime: &Runtime, dir: &std::path::Path) {
    let mut group = c.benchmark_group("memory");
    let mut raw = RawMemory::new();
    group.bench_function("raw_locked_map_update", |b| b.iter(|| raw.step()));
    let mut versioned = memory_store(runtime);
    group.bench_function("versioned_mutate", |b| b.iter(|| versioned.step(runtime)));
    group.finish();

    let mut group = c.benchmark_group("sqlite_synchronous_normal");
    let mut raw = RawSqlite::new(&dir.join("raw.db"), Synchronous::Normal);
    group.bench_function("raw_conditional_update", |b| b.iter(|| raw.step()));
    let mut versioned = sqlite_store(runtime, dir, Synchronous::Normal);
    group.bench_function("versioned_mutate", |b| b.iter(|| versioned.step(runtime)));
    group.finish();
}

/// Operations per second of `step` over `window`.
fn throughput(window: Duration, mut step: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut ops = 0u64;
    while start.elapsed() < window {
        for _ in 0..64 {
            step();
        }
        ops += 64;
    }
    ops as f64 / start.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// Raw and versioned alternately, `ROUNDS` windows each; prints medians and the ratio.
fn compare(label: &str, mut raw: impl FnMut(), mut versioned: impl FnMut()) {
    const ROUNDS: usize = 5;
    const WINDOW: Duration = Duration::from_millis(600);
    let (mut raws, mut versioneds) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        raws.push(throughput(WINDOW, &mut raw));
        versioneds.push(throughput(WINDOW, &mut versioned));
    }
    let (raw, versioned) = (median(raws), median(versioneds));
    println!(
        "{label:<28} raw {raw:>12.0} ops/s   versioned {versioned:>10.0} ops/s   raw/versioned {:>6.2}x   versioned/raw {:>5.1}%",
        raw / versioned,
        100.0 * versioned / raw
    );
}

fn ratio_pass(runtime: &Runtime, dir: &std::path::Path) {
    println!("\nSame-run ratios (median of 5 alternating 0.6 s windows, one writer):");
    let mut raw = RawMemory::new();
    let mut versioned = memory_store(runtime);
    compare("memory", || raw.step(), || versioned.step(runtime));
    for (synchronous, name) in [
        (Synchronous::Normal, "sqlite synchronous=NORMAL"),
        (Synchronous::Full, "sqlite synchronous=FULL"),
    ] {
        let sub = dir.join(name.replace([' ', '='], "_"));
        std::fs::create_dir_all(&sub).unwrap();
        let mut raw = RawSqlite::new(&sub.join("raw.db"), synchronous);
        let mut versioned = sqlite_store(runtime, &sub, synchronous);
        compare(name, || raw.step(), || versioned.step(runtime));
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    criterion_pass(&mut criterion, &runtime, dir.path());
    criterion.final_summary();
    ratio_pass(&runtime, dir.path());
}
