//! Cost of one versioned mutation against the raw conditional write a caller would do without the
//! framework, on the same engine, measured side by side in one run.
//!
//! ```text
//! cargo bench -p mcp-tools --bench state_store                  # criterion, then the ratios
//! STATE_BENCH_RATIOS_ONLY=1 cargo bench -p mcp-tools --bench state_store   # the ratios only
//! STATE_BENCH_RATIOS_ONLY=1 STATE_BENCH_ONLY=memory cargo bench ...         # the cases named so
//! ```
//!
//! (`STATE_BENCH_ONLY` is a prefix of the case names: `memory`, `sqlite`,
//! `sqlite synchronous=NORMAL`, `sqlite synchronous=FULL`, `postgres`.) The `postgres` case runs
//! with the `postgres` feature when `MCP_TOOLS_POSTGRES_URL` names a database (`.ci/postgres`
//! starts one), in a schema of its own that it drops at the end, and prints the server's `fsync`
//! and `synchronous_commit` settings next to its figures.
//!
//! Every case changes the same JSON state (`{"name", "count", "tags"}`: `count += 1`) on one
//! resource, one writer, each change based on the version the previous one produced.
//!
//! - **versioned** (`Store::mutate` through the public API, awaited on a tokio runtime): the
//!   caller builds the tool arguments and their fingerprint and sends a fresh operation id with the
//!   expected version; the store runs the full boundary: operation-id ledger lookup, ownership,
//!   kind, lifecycle and expiry checks, version comparison, the transition on a copy of the
//!   state, the new version with its lifecycle and expiry, the history entry (pruned to the
//!   history limit) and the ledger record of the outcome. SQLite does all of it in one
//!   `BEGIN IMMEDIATE` transaction on a blocking thread.
//! - **raw memory**: under one lock on a map keyed by handle, load the JSON state and its
//!   version, check the expected version, apply the change to a copy, write it back, bump the
//!   version. No ledger, no history, no ownership, lifecycle or expiry.
//! - **raw SQLite**: on a connection with the store's settings (busy timeout, WAL, the same
//!   `synchronous`), one `BEGIN IMMEDIATE` transaction: `SELECT body, version` by handle, parse,
//!   apply the change, serialize, `UPDATE ... SET body = ?, version = version + 1 WHERE handle = ?
//!   AND version = ?`, `COMMIT`; cached prepared statements; on the calling thread. Its commits
//!   checkpoint as SQLite does by default (inside the commit past 1,000 pages), where the
//!   store's checkpoints run on a thread of their own; so does the floor's.
//! - **raw PostgreSQL**: what a careful user hand-writes with tokio-postgres: `SELECT state,
//!   version` by id, parse, apply the change, serialize, `UPDATE ... SET state = $1, version =
//!   version + 1 WHERE id = $2 AND version = $3` (each statement its own transaction), prepared
//!   statements, one connection.
//!
//! - **floor** (`state_store/floor.rs`): the raw write plus what the versioned contract must
//!   persist with it, hand-written for this one change in the same transaction or under the same
//!   lock: the caller's fingerprint of its arguments, a ledger lookup and record of the operation
//!   id, an undo entry for the version (the oldest dropped past the history limit), and on
//!   PostgreSQL the advisory locks that keep a retry from running its change twice. It knows the
//!   shape of this state, so it pays for nothing generic; it is a lower bound for stores that
//!   keep undo entries and ledger records as rows of their own, as the three stores here do.
//!
//! The ratio pass runs raw, floor and versioned windows in rounds in the same process
//! (`STATE_BENCH_ROUNDS` rounds, 5 by default; each round starts with the next of the three) and
//! prints the median time per operation of each and the medians of the ratios within a round:
//! `versioned/raw`, the cost of a versioned mutation in raw writes (a figure to watch between
//! changes to a store, not a target: what counts is measured over HTTP and in deterministic
//! costs, see BENCHMARKS.md); `floor/raw`, what the contract costs at least in this layout; `versioned/floor`,
//! what the store adds to that. PostgreSQL's figures swing with its WAL flushes; more rounds
//! steady them. The criterion pass measures the same cases for memory and SQLite.
//!
//! All PostgreSQL clients speak plain TCP to the server (the store's URL gets
//! `sslmode=disable`, the raw client has no TLS), so the ratio compares the two ways of writing,
//! not TLS against none.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "state_store/floor.rs"]
mod floor;

use criterion::Criterion;
use mcp_tools::auth::Principal;
use mcp_tools::store::{
    CreateRequest, EntityKind, Fingerprint, ManualClock, MutationOutcome, MutationRequest,
    SqliteOptions, Store, StoreConfig, Synchronous, Transition,
};
use mcp_tools::{MemoryStore, SqliteStore};
use rusqlite::{Connection, TransactionBehavior, params};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

const COUNTER: EntityKind = EntityKind::new("counter", "ctr");

/// The handle of the raw and floor cases' one counter.
const HANDLE: &str = "ctr_0123456789abcdefghijklmnopq";

/// How far the store's manual clock moves per operation.
const TICK: Duration = Duration::from_millis(1);

/// The store's ledger retention in the bench: about a thousand operations at [`TICK`], so the
/// automatic sweep keeps the ledger small.
const LEDGER_RETENTION: Duration = Duration::from_secs(1);

/// `value`'s JSON text, serialized into a buffer as the stores write theirs.
fn text(value: &Value) -> String {
    serde_json::to_string(value).unwrap()
}

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
        ledger_retention: LEDGER_RETENTION,
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    }
}

/// One versioned mutation after another on one resource, each with a fresh operation id.
pub(crate) struct Versioned<S> {
    store: S,
    clock: ManualClock,
    handle: String,
    version: u64,
    next_id: u64,
}

impl<S: Store> Versioned<S> {
    fn new(runtime: &Runtime, store: S, clock: ManualClock) -> Self {
        let request = CreateRequest::new(COUNTER, Principal::subject("bench"), initial());
        let created = runtime.block_on(store.create(request)).unwrap();
        let handle = created.applied().unwrap().handle.clone();
        Versioned {
            store,
            clock,
            handle,
            version: 1,
            next_id: 0,
        }
    }

    /// What the caller does before the store sees the request: the tool arguments, their
    /// fingerprint, the request and the transition.
    fn request(&mut self) -> (MutationRequest, Transition) {
        self.next_id += 1;
        self.clock.advance(TICK);
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
        (request, transition)
    }

    fn step(&mut self, runtime: &Runtime) {
        let (request, transition) = self.request();
        match runtime
            .block_on(self.store.mutate(request, transition))
            .unwrap()
        {
            MutationOutcome::Applied(applied) => self.version = black_box(applied.version),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The raw in-memory equivalent: what a caller does without the framework. Under one lock on a
/// map keyed by handle it loads the JSON state and its version, checks the version it expects,
/// applies the same change to a copy (so a failing change would leave the stored state intact, as
/// the store's transitions do) and writes the copy back with the next version.
struct RawMemory {
    map: Mutex<HashMap<String, (u64, Value)>>,
    handle: String,
    version: u64,
}

impl RawMemory {
    fn new() -> Self {
        let handle = HANDLE.to_owned();
        let map = HashMap::from([(handle.clone(), (1, initial()))]);
        RawMemory {
            map: Mutex::new(map),
            handle,
            version: 1,
        }
    }

    fn step(&mut self) {
        let mut map = self.map.lock().unwrap();
        let (version, state) = map.get_mut(black_box(self.handle.as_str())).unwrap();
        assert_eq!(*version, self.version, "conflict");
        let mut next = state.clone();
        increment(&mut next);
        *state = next;
        *version += 1;
        self.version = black_box(*version);
    }
}

/// A connection with the store's settings: busy timeout, WAL, the same `synchronous`.
fn raw_sqlite_connection(path: &std::path::Path, synchronous: Synchronous) -> Connection {
    let connection = Connection::open(path).unwrap();
    connection.busy_timeout(Duration::from_secs(10)).unwrap();
    let _: String = connection
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .unwrap();
    let synchronous = match synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
        other => panic!("a mode the bench does not know: {other:?}"),
    };
    connection
        .pragma_update(None, "synchronous", synchronous)
        .unwrap();
    connection
}

/// The raw SQLite equivalent: what a caller does without the framework, on a connection opened
/// with the store's settings (busy timeout, WAL, the same `synchronous`). One `BEGIN IMMEDIATE`
/// transaction selects the JSON body and version by handle, applies the same change, writes it
/// back with `UPDATE ... SET body = ?, version = version + 1 WHERE handle = ? AND version = ?`
/// and commits; both statements are cached prepared statements, as the store's are.
struct RawSqlite {
    connection: Connection,
    handle: String,
    version: i64,
}

impl RawSqlite {
    fn new(path: &std::path::Path, synchronous: Synchronous) -> Self {
        let connection = raw_sqlite_connection(path, synchronous);
        connection
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS raw (
                     handle TEXT PRIMARY KEY, version INTEGER NOT NULL, body TEXT NOT NULL
                 ) STRICT;
                 DELETE FROM raw;",
            )
            .unwrap();
        let handle = HANDLE.to_owned();
        connection
            .execute(
                "INSERT INTO raw (handle, version, body) VALUES (?1, 1, ?2)",
                params![handle, initial().to_string()],
            )
            .unwrap();
        RawSqlite {
            connection,
            handle,
            version: 1,
        }
    }

    fn step(&mut self) {
        let txn = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        let (body, version) = txn
            .prepare_cached("SELECT body, version FROM raw WHERE handle = ?1")
            .unwrap()
            .query_row([&self.handle], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .unwrap();
        assert_eq!(version, self.version, "conflict");
        let mut state: Value = serde_json::from_str(&body).unwrap();
        increment(&mut state);
        let updated = txn
            .prepare_cached(
                "UPDATE raw SET body = ?1, version = version + 1 WHERE handle = ?2 AND version = ?3",
            )
            .unwrap()
            .execute(params![text(&state), self.handle, self.version])
            .unwrap();
        assert_eq!(updated, 1, "conflict");
        txn.commit().unwrap();
        self.version = black_box(self.version + 1);
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
    group.bench_function("raw_locked_map_write", |b| b.iter(|| raw.step()));
    let mut floor = floor::MemoryFloor::new();
    group.bench_function("floor", |b| b.iter(|| floor.step()));
    let mut versioned = memory_store(runtime);
    group.bench_function("versioned_mutate", |b| b.iter(|| versioned.step(runtime)));
    group.finish();

    let mut group = c.benchmark_group("sqlite_synchronous_normal");
    let mut raw = RawSqlite::new(&dir.join("raw.db"), Synchronous::Normal);
    group.bench_function("raw_select_update_txn", |b| b.iter(|| raw.step()));
    let mut floor = floor::SqliteFloor::new(&dir.join("floor.db"), Synchronous::Normal);
    group.bench_function("floor", |b| b.iter(|| floor.step()));
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

/// Raw, floor and versioned, [`rounds`] windows each; prints the median time per operation of
/// each, then the medians of the ratios within each round (so a drift of the machine or the disk
/// over the run cancels out). Each round starts with the next case of the three, so whatever a
/// window leaves behind (dirty pages, a WAL flush) falls on each case in turn.
fn compare(
    label: &str,
    mut raw: impl FnMut(),
    mut floor: impl FnMut(),
    mut versioned: impl FnMut(),
) {
    const WINDOW: Duration = Duration::from_millis(600);
    let mut per_case: [Vec<f64>; 3] = Default::default();
    let (mut versioned_over_raw, mut floor_over_raw, mut versioned_over_floor) =
        (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds() {
        let mut rates = [0.0; 3];
        for turn in 0..3 {
            let case = (round + turn) % 3;
            rates[case] = match case {
                0 => throughput(WINDOW, &mut raw),
                1 => throughput(WINDOW, &mut floor),
                _ => throughput(WINDOW, &mut versioned),
            };
        }
        let [raw, floor, versioned] = rates;
        versioned_over_raw.push(raw / versioned);
        floor_over_raw.push(raw / floor);
        versioned_over_floor.push(floor / versioned);
        for (all, rate) in per_case.iter_mut().zip(rates) {
            all.push(rate);
        }
    }
    let [raws, floors, versioneds] = per_case;
    println!(
        "{label:<28} raw {:>10.0} ns/op   versioned {:>10.0} ns/op   versioned/raw {:>7.2}x",
        1e9 / median(raws),
        1e9 / median(versioneds),
        median(versioned_over_raw),
    );
    println!(
        "{:<28} floor {:>8.0} ns/op   floor/raw {:>5.2}x   versioned/floor {:>5.2}x",
        "",
        1e9 / median(floors),
        median(floor_over_raw),
        median(versioned_over_floor),
    );
}

/// Windows per case: `STATE_BENCH_ROUNDS`, 5 by default.
fn rounds() -> usize {
    std::env::var("STATE_BENCH_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .filter(|rounds| *rounds > 0)
        .unwrap_or(5)
}

fn ratio_pass(runtime: &Runtime, dir: &std::path::Path) {
    println!(
        "\nSame-run ratios (medians of {} rounds of 0.6 s windows, one writer):",
        rounds()
    );
    let only = std::env::var("STATE_BENCH_ONLY").unwrap_or_default();
    if "memory".starts_with(&only) {
        let mut raw = RawMemory::new();
        let mut floor = floor::MemoryFloor::new();
        let mut versioned = memory_store(runtime);
        compare(
            "memory",
            || raw.step(),
            || floor.step(),
            || versioned.step(runtime),
        );
        // The caller's share, inside the versioned figure: what no store can save.
        let mut caller = memory_store(runtime);
        let built = throughput(Duration::from_millis(600), || {
            black_box(caller.request());
        });
        println!(
            "{:<28} of which the caller builds the arguments, fingerprint and request in {:.0} ns",
            "",
            1e9 / built
        );
    }
    for (synchronous, name) in [
        (Synchronous::Normal, "sqlite synchronous=NORMAL"),
        (Synchronous::Full, "sqlite synchronous=FULL"),
    ] {
        if !name.starts_with(&only) {
            continue;
        }
        let sub = dir.join(name.replace([' ', '='], "_"));
        std::fs::create_dir_all(&sub).unwrap();
        let mut raw = RawSqlite::new(&sub.join("raw.db"), synchronous);
        let mut floor = floor::SqliteFloor::new(&sub.join("floor.db"), synchronous);
        let mut versioned = sqlite_store(runtime, &sub, synchronous);
        compare(
            name,
            || raw.step(),
            || floor.step(),
            || versioned.step(runtime),
        );
    }
    #[cfg(feature = "postgres")]
    if "postgres".starts_with(&only) {
        match postgres::Database::open(runtime) {
            Some(database) => {
                let label = format!("postgres ({})", database.settings(runtime));
                let mut raw = database.raw(runtime);
                let mut floor = floor::postgres::PostgresFloor::new(
                    runtime,
                    &database.floor_client,
                    &database.schema,
                );
                let mut versioned = database.store(runtime);
                compare(
                    &label,
                    || raw.step(runtime),
                    || floor.step(runtime),
                    || versioned.step(runtime),
                );
                drop(versioned);
                database.drop_schema(runtime);
            }
            None => println!("postgres: skipped (set MCP_TOOLS_POSTGRES_URL)"),
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use mcp_tools::PostgresStore;
    use mcp_tools::store::{PostgresOptions, TimeSource};

    pub(super) struct Database {
        pub(super) url: String,
        pub(super) schema: String,
        pub(super) client: tokio_postgres::Client,
        /// The floor's own connection, planning as the store's connections do: each statement
        /// once, for any value.
        pub(super) floor_client: tokio_postgres::Client,
    }

    impl Database {
        pub(super) fn open(runtime: &Runtime) -> Option<Self> {
            let url = std::env::var("MCP_TOOLS_POSTGRES_URL").ok()?;
            let schema = format!("bench_{}", std::process::id());
            let connect = || async {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client
            };
            let (client, floor_client) = runtime.block_on(async {
                let client = connect().await;
                client
                    .batch_execute(&format!(
                        "CREATE SCHEMA {schema};
                         CREATE TABLE {schema}.raw (
                             id text PRIMARY KEY, version bigint NOT NULL, state text NOT NULL)"
                    ))
                    .await
                    .unwrap();
                let floor_client = connect().await;
                floor_client
                    .batch_execute("SET plan_cache_mode = force_generic_plan")
                    .await
                    .unwrap();
                (client, floor_client)
            });
            Some(Database {
                url,
                schema,
                client,
                floor_client,
            })
        }

        pub(super) fn settings(&self, runtime: &Runtime) -> String {
            runtime.block_on(async {
                let row = self
                    .client
                    .query_one(
                        "SELECT current_setting('fsync'), current_setting('synchronous_commit')",
                        &[],
                    )
                    .await
                    .unwrap();
                format!(
                    "fsync={}, synchronous_commit={}",
                    row.get::<_, String>(0),
                    row.get::<_, String>(1)
                )
            })
        }

        pub(super) fn drop_schema(&self, runtime: &Runtime) {
            runtime
                .block_on(
                    self.client
                        .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema)),
                )
                .unwrap();
        }

        pub(super) fn store(&self, runtime: &Runtime) -> Versioned<PostgresStore> {
            let clock = ManualClock::at_millis(0);
            let options = PostgresOptions {
                schema: self.schema.clone(),
                time: TimeSource::StoreClock,
                pool_size: 1,
                ..PostgresOptions::default()
            };
            // The raw client has no TLS: the store speaks plain TCP too.
            let separator = match self.url.contains("://") {
                true if self.url.contains('?') => "&",
                true => "?",
                false => " ",
            };
            let url = format!("{}{separator}sslmode=disable", self.url);
            let store = runtime
                .block_on(PostgresStore::connect_with(&url, config(&clock), options))
                .unwrap();
            Versioned::new(runtime, store, clock)
        }

        pub(super) fn raw(&self, runtime: &Runtime) -> RawPostgres<'_> {
            let id = HANDLE.to_owned();
            let (select, update) = runtime.block_on(async {
                self.client
                    .execute(
                        &format!(
                            "INSERT INTO {}.raw (id, version, state) VALUES ($1, 1, $2)",
                            self.schema
                        ),
                        &[&id, &initial().to_string()],
                    )
                    .await
                    .unwrap();
                let select = self
                    .client
                    .prepare(&format!(
                        "SELECT state, version FROM {}.raw WHERE id = $1",
                        self.schema
                    ))
                    .await
                    .unwrap();
                let update = self
                    .client
                    .prepare(&format!(
                        "UPDATE {}.raw SET state = $1, version = version + 1
                         WHERE id = $2 AND version = $3",
                        self.schema
                    ))
                    .await
                    .unwrap();
                (select, update)
            });
            RawPostgres {
                client: &self.client,
                select,
                update,
                id,
                version: 1,
            }
        }
    }

    /// Read the row, then the conditional update, each its own transaction.
    pub(super) struct RawPostgres<'a> {
        client: &'a tokio_postgres::Client,
        select: tokio_postgres::Statement,
        update: tokio_postgres::Statement,
        id: String,
        version: i64,
    }

    impl RawPostgres<'_> {
        pub(super) fn step(&mut self, runtime: &Runtime) {
            runtime.block_on(async {
                let row = self
                    .client
                    .query_one(&self.select, &[&self.id])
                    .await
                    .unwrap();
                let (body, version): (String, i64) = (row.get(0), row.get(1));
                assert_eq!(version, self.version, "conflict");
                let mut state: Value = serde_json::from_str(&body).unwrap();
                increment(&mut state);
                let updated = self
                    .client
                    .execute(&self.update, &[&text(&state), &self.id, &self.version])
                    .await
                    .unwrap();
                assert_eq!(updated, 1, "conflict");
            });
            self.version = black_box(self.version + 1);
        }
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
    if std::env::var_os("STATE_BENCH_RATIOS_ONLY").is_none() {
        criterion_pass(&mut criterion, &runtime, dir.path());
        criterion.final_summary();
    }
    ratio_pass(&runtime, dir.path());
}
