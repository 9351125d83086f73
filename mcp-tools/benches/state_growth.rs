//! What a store retains as a resource changes: bytes kept per mutation and mutation latency, for
//! resources of about 1 KB, 100 KB and 1 MB changed in one small field, for a resource that
//! receives 10,000 appended notes of 40 bytes, and for a vault whose items live in a
//! `Collection` (10 items of 100 bytes, or 10,000: 1 MB) receiving appends, item edits and
//! scalar changes, with the ratio of each change at 10,000 items to the same change at 10 (p50
//! latency and CPU per mutation). Not timed by criterion: it prints tables.
//!
//! ```text
//! cargo bench -p mcp-tools --bench state_growth
//! STATE_GROWTH_MUTATIONS=200 cargo bench -p mcp-tools --bench state_growth   # fewer field changes
//! STATE_GROWTH_ONLY=pg cargo bench -p mcp-tools --features postgres --bench state_growth
//! ```
//!
//! (`STATE_GROWTH_ONLY` is a prefix of the store names: `memory`, `sqlite`, `pg`, `pg raw`.)
//!
//! Every mutation goes through the public `Store` API with a fresh operation id (the ledger keeps
//! its outcome for the default 24 hours, so every record is still there at the end) and the
//! default configuration (history of 64 versions). Field changes send the expected version; notes
//! are commutative and send none, as `basket_add_note` does. Every outcome must be `applied` with
//! the next version, or the bench stops with an error.
//!
//! - **SQLite**: the main file plus its `-wal`, each measured after `PRAGMA
//!   wal_checkpoint(TRUNCATE)` on a plain connection of its own (no VACUUM, so freed pages stay in
//!   the file and are reused), right after the resource is created and after the mutations.
//! - **memory**: resident growth (`VmRSS` from `/proc/self/status`) over the same span. Each case
//!   runs in a fresh child process of this bench, so heap that an earlier case freed but the
//!   allocator kept does not hide or inflate this one's growth. The first mutations also leave
//!   one-off buffers the size of the state behind (copies, serialization), which the allocator
//!   keeps and reuses; the "2nd half" column (growth between mutation N/2 and N, past the history
//!   limit) is the steady cost without them.
//!
//! - **PostgreSQL** (with the `postgres` feature, when `MCP_TOOLS_POSTGRES_URL` names a database;
//!   `.ci/postgres` starts one): the store's tables in a schema of their own, each measured as
//!   `pg_total_relation_size` (heap, TOAST and indexes) after a plain `VACUUM` (freed space stays
//!   in the files, for later rows), with autovacuum off for these tables so that the bench's
//!   vacuums (after the create, halfway, at the end) are the only ones. PostgreSQL writes a new
//!   row version, TOASTed state included, on every update and frees the old one only when a
//!   vacuum passes, so between vacuums the files grow with the state on every engine of its
//!   kind. Two more figures tell that apart from what the store keeps: `live`, the same after
//!   `VACUUM FULL` at the end (the tables rewritten with only their live rows), and the raw
//!   write beside it: the same changes to one `(id, version, state)` row by a `SELECT` and a
//!   conditional `UPDATE`, in the same database and run.
//!
//! The targets: 10,000 appends retain at most 8 MB on disk with SQLite and at most 64 MB of
//! resident memory with the memory store. The bench exits 1 when one is missed or a case fails.
//! PostgreSQL has no target of its own: it is reported beside its raw write.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mcp_tools::auth::Principal;
use mcp_tools::store::{
    Collection, ConflictPolicy, CreateRequest, Entity, EntityKind, Fingerprint, MutationOutcome,
    MutationRequest, Store, StoreConfig, Transition,
};
use mcp_tools::{MemoryStore, SqliteStore};
use rusqlite::Connection;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

const DOCUMENT: EntityKind = EntityKind::new("document", "doc");
const NOTES: usize = 10_000;
const NOTE_BYTES: usize = 40;
const SQLITE_TARGET: u64 = 8 << 20;
const MEMORY_TARGET: u64 = 64 << 20;

#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Memory,
    Sqlite,
    /// The PostgreSQL store.
    Postgres,
    /// The raw write on PostgreSQL, the store's baseline.
    PostgresRaw,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Memory => "memory",
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "pg",
            Engine::PostgresRaw => "pg raw",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Engine::PostgresRaw => "pgraw",
            other => other.name(),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    /// A resource of about this many bytes; each mutation bumps its `count`.
    Field(usize),
    /// An empty notes list; each mutation appends one note.
    Notes,
    /// A vault holding this many items of [`ITEM_BYTES`] in a `Collection`; each mutation
    /// appends one note to it, without a version.
    Append(usize),
    /// The same vault; each mutation rewrites one item, versioned per item.
    EditItem(usize),
    /// The same vault; each mutation bumps its scalar `count`, versioned on the whole vault.
    VaultField(usize),
}

/// The item size of the vault workloads: 10,000 items make 1 MB.
const ITEM_BYTES: usize = 100;

/// The vault of the collection workloads: a scalar next to items stored one by one.
#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "vault", prefix = "vlt")]
struct Vault {
    name: String,
    count: u64,
    notes: Collection<String>,
}

fn item(i: usize) -> String {
    let text = format!("item {i:08} ");
    format!("{text:.<ITEM_BYTES$}")
}

impl Workload {
    fn label(self) -> String {
        match self {
            Workload::Field(bytes) if bytes >= 1 << 20 => format!("{} MB field", bytes >> 20),
            Workload::Field(bytes) => format!("{} KB field", bytes >> 10),
            Workload::Notes => format!("{NOTE_BYTES} B notes"),
            Workload::Append(items) => format!("append @{items}"),
            Workload::EditItem(items) => format!("item @{items}"),
            Workload::VaultField(items) => format!("field @{items}"),
        }
    }

    fn key(self) -> String {
        match self {
            Workload::Field(bytes) => format!("field{bytes}"),
            Workload::Notes => "notes".to_owned(),
            Workload::Append(items) => format!("append{items}"),
            Workload::EditItem(items) => format!("edit{items}"),
            Workload::VaultField(items) => format!("vault{items}"),
        }
    }

    fn parse(key: &str) -> Option<Self> {
        let number = |prefix: &str| key.strip_prefix(prefix)?.parse().ok();
        match key {
            "notes" => Some(Workload::Notes),
            _ => None
                .or_else(|| number("field").map(Workload::Field))
                .or_else(|| number("append").map(Workload::Append))
                .or_else(|| number("edit").map(Workload::EditItem))
                .or_else(|| number("vault").map(Workload::VaultField)),
        }
    }
}

/// A JSON state of at least `bytes` bytes serialized: a small `count` next to a big array.
fn big_state(bytes: usize) -> Value {
    let mut items = Vec::new();
    let mut size = 64;
    while size < bytes {
        let item = format!("item {:08} of the growth benchmark", items.len());
        size += item.len() + 3;
        items.push(Value::String(item));
    }
    json!({ "name": "growth", "count": 0, "items": items })
}

fn note(i: usize) -> String {
    let text = format!("note {i:06} ");
    format!("{text:.<NOTE_BYTES$}")
}

/// The CPU time of this process so far, every thread's (the store's own, SQLite's writer,
/// included), in nanoseconds: `CLOCK_PROCESS_CPUTIME_ID`, exact where the scheduler's
/// per-thread counters only advance a tick (4 ms) at a time.
fn cpu_time_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec, and the clock id is one libc defines.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value");
    kib * 1024
}

/// The main file plus the `-wal` after a truncating checkpoint on a connection of its own.
fn disk_bytes(path: &Path) -> u64 {
    let connection = Connection::open(path).expect("open the store's file");
    // The busy timeout covers the wait for the writer and for readers. The store's own
    // checkpoint thread may be copying, and SQLite answers a second checkpointer busy at once,
    // without the busy handler, so that is retried for as long as a copy can take.
    connection
        .busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    let deadline = Instant::now() + Duration::from_secs(10);
    let busy = loop {
        let busy = connection
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            })
            .expect("checkpoint");
        if busy == 0 || Instant::now() >= deadline {
            break busy;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(busy, 0, "the checkpoint stayed busy for 10 s");
    drop(connection);
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    size(path) + size(Path::new(&wal))
}

struct Measured {
    state_bytes: usize,
    /// CPU time of the process's threads over the mutations, in nanoseconds.
    cpu_ns: u64,
    mutations: usize,
    before: u64,
    half: u64,
    after: u64,
    /// PostgreSQL: the tables' size after `VACUUM FULL`, at the end.
    live: Option<u64>,
    latencies: Vec<Duration>,
}

/// A workload's first state and its number of mutations.
fn initial(workload: Workload, mutations: usize) -> (Value, usize) {
    match workload {
        Workload::Field(bytes) => (big_state(bytes), mutations),
        Workload::Notes => (json!({ "name": "notes", "count": 0, "notes": [] }), NOTES),
        Workload::Append(_) | Workload::EditItem(_) | Workload::VaultField(_) => {
            unreachable!("the vault workloads run on the store only, through `run_vault`")
        }
    }
}

/// Mutation `i` of a workload, applied to `state`: what every engine's change does.
fn change(workload: Workload, i: usize, state: &mut Value) -> Value {
    match workload {
        Workload::Field(_) => {
            let count = state["count"].as_u64().unwrap_or(0) + 1;
            state["count"] = json!(count);
            json!(count)
        }
        Workload::Notes => {
            let notes = state["notes"].as_array_mut().expect("notes");
            notes.push(Value::String(note(i)));
            json!(notes.len())
        }
        Workload::Append(_) | Workload::EditItem(_) | Workload::VaultField(_) => {
            unreachable!("the vault workloads change a typed vault, through `run_vault`")
        }
    }
}

/// Runs `mutate(i)` for each of `mutations` mutations, which answers how long its timed part
/// took, with the footprint measured before, halfway and after.
fn measure(
    state_bytes: usize,
    mutations: usize,
    footprint: &dyn Fn() -> u64,
    mut mutate: impl FnMut(usize) -> Duration,
) -> Measured {
    let before = footprint();
    let mut half = before;
    let mut latencies = Vec::with_capacity(mutations);
    let mut cpu_ns = 0;
    let mut started = cpu_time_ns();
    for i in 0..mutations {
        if i == mutations / 2 {
            cpu_ns += cpu_time_ns() - started;
            half = footprint();
            started = cpu_time_ns();
        }
        latencies.push(mutate(i));
    }
    cpu_ns += cpu_time_ns() - started;
    Measured {
        state_bytes,
        cpu_ns,
        mutations,
        before,
        half,
        after: footprint(),
        live: None,
        latencies,
    }
}

/// Runs one case in this process.
fn run_case<S: Store>(
    runtime: &Runtime,
    store: &S,
    workload: Workload,
    mutations: usize,
    footprint: &dyn Fn() -> u64,
) -> Measured {
    let principal = Principal::subject("bench");
    if let Workload::Append(items) | Workload::EditItem(items) | Workload::VaultField(items) =
        workload
    {
        return run_vault(runtime, store, workload, items, mutations, footprint);
    }
    let (initial, mutations) = initial(workload, mutations);
    let state_bytes = initial.to_string().len();
    let created = runtime
        .block_on(store.create(CreateRequest::new(DOCUMENT, principal.clone(), initial)))
        .expect("create");
    let handle = created.applied().expect("created").handle.clone();
    let mut version = 1;
    measure(state_bytes, mutations, footprint, |i| {
        let operation_id = format!("growth-{i}");
        let request = match workload {
            Workload::Field(_) => {
                let arguments = json!({
                    "document_id": handle,
                    "expected_version": version,
                    "operation_id": operation_id,
                });
                MutationRequest::new(DOCUMENT, principal.clone(), &handle)
                    .expect_version(version)
                    .operation(operation_id, Fingerprint::of_call("touch", &arguments))
            }
            // Notes (the vault workloads ran `run_vault` instead).
            _ => {
                let arguments = json!({
                    "document_id": handle,
                    "text": note(i),
                    "operation_id": operation_id,
                });
                MutationRequest::new(DOCUMENT, principal.clone(), &handle)
                    .operation(operation_id, Fingerprint::of_call("add_note", &arguments))
            }
        };
        let transition = Transition::new(move |state| Ok(change(workload, i, state)));
        timed_mutation(runtime, store, request, transition, &mut version, i)
    })
}

/// A vault workload: the vault filled with `items` items in one change, then `mutations`
/// mutations of the workload's kind.
fn run_vault<S: Store>(
    runtime: &Runtime,
    store: &S,
    workload: Workload,
    items: usize,
    mutations: usize,
    footprint: &dyn Fn() -> u64,
) -> Measured {
    let principal = Principal::subject("bench");
    let vault = Vault {
        name: "growth".into(),
        count: 0,
        notes: Collection::new(),
    };
    let request = CreateRequest::typed(principal.clone(), &vault).expect("encode");
    let created = runtime.block_on(store.create(request)).expect("create");
    let handle = created.applied().expect("created").handle.clone();
    let fill = Transition::typed(move |vault: &mut Vault| {
        for i in 0..items {
            vault.notes.push(item(i));
        }
        Ok::<_, String>(())
    });
    let request = MutationRequest::new(Vault::kind(), principal.clone(), &handle);
    let filled = runtime
        .block_on(store.mutate(request, fill))
        .expect("fill the vault");
    assert!(matches!(filled, MutationOutcome::Applied(_)), "{filled:?}");
    let mut version = 2;
    measure(items * ITEM_BYTES, mutations, footprint, |i| {
        let operation_id = format!("growth-{i}");
        let arguments = json!({ "vault_id": handle, "i": i, "operation_id": operation_id });
        let fingerprint = Fingerprint::of_call("vault", &arguments);
        let request = MutationRequest::new(Vault::kind(), principal.clone(), &handle)
            .operation(operation_id, fingerprint);
        let (request, transition) = match workload {
            Workload::Append(_) => (
                request,
                Transition::typed(move |vault: &mut Vault| {
                    Ok::<_, String>(vault.notes.push(item(i)))
                }),
            ),
            Workload::EditItem(_) => {
                let id = (i % items) as u64 + 1;
                (
                    request
                        .expect_version(version)
                        .policy(ConflictPolicy::Items),
                    Transition::typed(move |vault: &mut Vault| {
                        let note = vault.notes.get_mut(id).ok_or("no such item")?;
                        *note = item(i + items);
                        Ok::<_, &str>(id)
                    }),
                )
            }
            _ => (
                request.expect_version(version),
                Transition::typed(|vault: &mut Vault| {
                    vault.count += 1;
                    Ok::<_, String>(vault.count)
                }),
            ),
        };
        timed_mutation(runtime, store, request, transition, &mut version, i)
    })
}

/// Sends mutation `i` and answers how long the store took; it must be `applied` at the version
/// after `version`, which it then moves to.
fn timed_mutation<S: Store>(
    runtime: &Runtime,
    store: &S,
    request: MutationRequest,
    transition: Transition,
    version: &mut u64,
    i: usize,
) -> Duration {
    let started = Instant::now();
    let outcome = runtime
        .block_on(store.mutate(request, transition))
        .expect("mutate");
    let took = started.elapsed();
    match outcome {
        MutationOutcome::Applied(applied) if applied.version == *version + 1 => {
            *version = applied.version;
        }
        other => panic!("mutation {i} at version {version}: expected applied, got {other:?}"),
    }
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The child's side: one case, one `RESULT` line.
fn child(case: &str) {
    let (engine, workload) = case.split_once(':').expect("engine:workload");
    let workload = Workload::parse(workload).expect("workload");
    let mutations = std::env::var("STATE_GROWTH_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000usize);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut measured = match engine {
        "memory" => {
            let store = MemoryStore::new(StoreConfig::default());
            run_case(&runtime, &store, workload, mutations, &resident_bytes)
        }
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("growth.db");
            let store = SqliteStore::open(&path, StoreConfig::default()).expect("open");
            run_case(&runtime, &store, workload, mutations, &|| disk_bytes(&path))
        }
        #[cfg(feature = "postgres")]
        "pg" | "pgraw" => postgres::run(&runtime, engine == "pgraw", workload, mutations),
        other => panic!("unknown engine {other}"),
    };
    measured.latencies.sort_unstable();
    println!(
        "RESULT state_bytes={} mutations={} before={} half={} after={} live={} p50_ns={} p99_ns={} cpu_ns={}",
        measured.state_bytes,
        measured.mutations,
        measured.before,
        measured.half,
        measured.after,
        measured.live.map_or(-1, |live| live as i64),
        percentile(&measured.latencies, 0.5).as_nanos(),
        percentile(&measured.latencies, 0.99).as_nanos(),
        measured.cpu_ns,
    );
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use mcp_tools::PostgresStore;
    use mcp_tools::store::PostgresOptions;

    /// A schema of this process's own, dropped when done.
    struct Schema {
        client: tokio_postgres::Client,
        name: String,
    }

    impl Schema {
        fn create(runtime: &Runtime, url: &str) -> Self {
            let name = format!("growth_{}", std::process::id());
            let client = runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .expect("connect to MCP_TOOLS_POSTGRES_URL");
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("CREATE SCHEMA {name}"))
                    .await
                    .expect("create the schema");
                client
            });
            Schema { client, name }
        }

        /// The schema's tables, quoted.
        async fn tables(&self) -> Vec<String> {
            let tables = self
                .client
                .query(
                    "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)
                     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = $1 AND c.relkind = 'r'",
                    &[&self.name],
                )
                .await
                .expect("list the tables");
            tables.iter().map(|row| row.get(0)).collect()
        }

        /// Keeps autovacuum off the schema's tables, so that the only vacuums are the bench's
        /// own and the store and the raw write are measured alike (autovacuum starts when it
        /// wakes, once a minute by default).
        fn without_autovacuum(&self, runtime: &Runtime) {
            runtime.block_on(async {
                for table in self.tables().await {
                    self.client
                        .batch_execute(&format!(
                            "ALTER TABLE {table} SET (autovacuum_enabled = false, \
                             toast.autovacuum_enabled = false)"
                        ))
                        .await
                        .expect("turn autovacuum off");
                }
            })
        }

        /// The bytes the schema's tables hold (heap, TOAST and indexes) after `vacuum` of each.
        fn bytes(&self, runtime: &Runtime, vacuum: &str) -> u64 {
            runtime.block_on(async {
                let mut total = 0;
                for table in self.tables().await {
                    // One statement at a time: VACUUM cannot run inside a transaction block.
                    self.client
                        .batch_execute(&format!("{vacuum} {table}"))
                        .await
                        .expect("vacuum");
                    let row = self
                        .client
                        .query_one(
                            "SELECT pg_total_relation_size($1::text::regclass)",
                            &[&table],
                        )
                        .await
                        .expect("relation size");
                    total += row.get::<_, i64>(0) as u64;
                }
                total
            })
        }

        fn drop(self, runtime: &Runtime) {
            runtime
                .block_on(
                    self.client
                        .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name)),
                )
                .expect("drop the schema");
        }
    }

    /// One case on PostgreSQL: the store, or (`raw`) the raw write.
    pub(super) fn run(
        runtime: &Runtime,
        raw: bool,
        workload: Workload,
        mutations: usize,
    ) -> Measured {
        let url = std::env::var("MCP_TOOLS_POSTGRES_URL").expect("MCP_TOOLS_POSTGRES_URL");
        let schema = Schema::create(runtime, &url);
        let footprint = || schema.bytes(runtime, "VACUUM");
        let mut measured = if raw {
            run_raw(runtime, &schema, workload, mutations, &footprint)
        } else {
            let options = PostgresOptions {
                schema: schema.name.clone(),
                ..PostgresOptions::default()
            };
            // Plain TCP, as the raw client speaks.
            let separator = match url.contains("://") {
                true if url.contains('?') => "&",
                true => "?",
                false => " ",
            };
            let url = format!("{url}{separator}sslmode=disable");
            let store = runtime
                .block_on(PostgresStore::connect_with(
                    &url,
                    StoreConfig::default(),
                    options,
                ))
                .expect("connect the store");
            schema.without_autovacuum(runtime);
            let measured = run_case(runtime, &store, workload, mutations, &footprint);
            drop(store);
            measured
        };
        measured.live = Some(schema.bytes(runtime, "VACUUM FULL"));
        schema.drop(runtime);
        measured
    }

    /// The raw write: read the row, change the state, write it back if its version is still
    /// the one read.
    fn run_raw(
        runtime: &Runtime,
        schema: &Schema,
        workload: Workload,
        mutations: usize,
        footprint: &dyn Fn() -> u64,
    ) -> Measured {
        let client = &schema.client;
        let (initial, mutations) = initial(workload, mutations);
        let state_bytes = initial.to_string().len();
        let (select, update) = runtime.block_on(async {
            client
                .batch_execute(&format!(
                    "CREATE TABLE {0}.raw (id text PRIMARY KEY, version bigint NOT NULL,
                         state text NOT NULL)",
                    schema.name
                ))
                .await
                .expect("create the raw table");
            client
                .execute(
                    &format!(
                        "INSERT INTO {}.raw (id, version, state) VALUES ('doc', 1, $1)",
                        schema.name
                    ),
                    &[&initial.to_string()],
                )
                .await
                .expect("insert the row");
            let select = client
                .prepare(&format!(
                    "SELECT state, version FROM {}.raw WHERE id = 'doc'",
                    schema.name
                ))
                .await
                .expect("prepare");
            let update = client
                .prepare(&format!(
                    "UPDATE {}.raw SET state = $1, version = version + 1
                     WHERE id = 'doc' AND version = $2",
                    schema.name
                ))
                .await
                .expect("prepare");
            (select, update)
        });
        schema.without_autovacuum(runtime);
        measure(state_bytes, mutations, footprint, |i| {
            let started = Instant::now();
            runtime.block_on(async {
                let row = client.query_one(&select, &[]).await.expect("read the row");
                let (text, version): (String, i64) = (row.get(0), row.get(1));
                let mut state: Value = serde_json::from_str(&text).expect("stored state");
                change(workload, i, &mut state);
                let updated = client
                    .execute(&update, &[&state.to_string(), &version])
                    .await
                    .expect("update the row");
                assert_eq!(updated, 1, "mutation {i}: the row changed under the bench");
            });
            started.elapsed()
        })
    }
}

fn field(line: &str, name: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

fn bytes(n: f64) -> String {
    if n.abs() >= (1 << 20) as f64 {
        format!("{:.2} MB", n / (1 << 20) as f64)
    } else if n.abs() >= 1024.0 {
        format!("{:.1} KB", n / 1024.0)
    } else {
        format!("{n:.0} B")
    }
}

fn micros(ns: f64) -> String {
    format!("{:.1} µs", ns / 1000.0)
}

fn main() {
    if let Ok(case) = std::env::var("STATE_GROWTH_CASE") {
        child(&case);
        return;
    }
    let exe = std::env::current_exe().expect("own executable");
    let workloads = [
        Workload::Field(1 << 10),
        Workload::Field(100 << 10),
        Workload::Field(1 << 20),
        Workload::Notes,
        Workload::Append(10),
        Workload::Append(10_000),
        Workload::EditItem(10),
        Workload::EditItem(10_000),
        Workload::VaultField(10),
        Workload::VaultField(10_000),
    ];
    // (engine, workload) -> (p50 ns, CPU ns per mutation, retained bytes per mutation)
    let mut costs: Vec<(Engine, Workload, f64, f64, f64)> = Vec::new();
    println!(
        "{:<7} {:<14} {:>9} {:>10} {:>11} {:>12} {:>12} {:>10} {:>10}  target",
        "store",
        "resource",
        "mutations",
        "state",
        "retained",
        "per mutation",
        "2nd half/mut",
        "p50",
        "p99",
    );
    let mut failed = false;
    let mut engines = vec![Engine::Memory, Engine::Sqlite];
    match (
        cfg!(feature = "postgres"),
        std::env::var_os("MCP_TOOLS_POSTGRES_URL").is_some(),
    ) {
        (true, true) => engines.extend([Engine::Postgres, Engine::PostgresRaw]),
        (true, false) => println!("pg: skipped (set MCP_TOOLS_POSTGRES_URL)"),
        (false, _) => println!("pg: skipped (build with --features postgres)"),
    }
    let only = std::env::var("STATE_GROWTH_ONLY").unwrap_or_default();
    engines.retain(|engine| engine.name().starts_with(&only));
    // Memory first, each case in a fresh process (see the module's comment).
    for &engine in &engines {
        for workload in workloads {
            let vault = matches!(
                workload,
                Workload::Append(_) | Workload::EditItem(_) | Workload::VaultField(_)
            );
            if vault && engine == Engine::PostgresRaw {
                continue;
            }
            let output = Command::new(&exe)
                .env(
                    "STATE_GROWTH_CASE",
                    format!("{}:{}", engine.key(), workload.key()),
                )
                .output()
                .expect("run a case");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let Some(line) = stdout.lines().find(|l| l.starts_with("RESULT ")) else {
                println!(
                    "{:<7} {:<14} FAILED: {}",
                    engine.name(),
                    workload.label(),
                    String::from_utf8_lossy(&output.stderr).trim()
                );
                failed = true;
                continue;
            };
            let n = field(line, "mutations");
            let (before, half, after) = (
                field(line, "before"),
                field(line, "half"),
                field(line, "after"),
            );
            let retained = after - before;
            let second_half = (after - half) / (n - (n / 2.0).floor());
            let target = match (workload, engine) {
                (Workload::Notes, Engine::Sqlite) => {
                    let pass = retained <= SQLITE_TARGET as f64;
                    failed |= !pass;
                    format!("<= 8 MB on disk: {}", if pass { "PASS" } else { "FAIL" })
                }
                (Workload::Notes, Engine::Memory) => {
                    let pass = retained <= MEMORY_TARGET as f64;
                    failed |= !pass;
                    format!("<= 64 MB resident: {}", if pass { "PASS" } else { "FAIL" })
                }
                _ => match field(line, "live") {
                    live if live >= 0.0 => format!("live {}", bytes(live)),
                    _ => String::new(),
                },
            };
            costs.push((
                engine,
                workload,
                field(line, "p50_ns"),
                field(line, "cpu_ns") / n,
                retained / n,
            ));
            println!(
                "{:<7} {:<14} {:>9} {:>10} {:>11} {:>12} {:>12} {:>10} {:>10}  {target}",
                engine.name(),
                workload.label(),
                n,
                bytes(field(line, "state_bytes")),
                bytes(retained),
                bytes(retained / n),
                bytes(second_half),
                micros(field(line, "p50_ns")),
                micros(field(line, "p99_ns")),
            );
        }
    }
    println!(
        "\nstate: the resource's initial JSON size. retained: SQLite main file + -wal after a \
         truncating checkpoint, memory VmRSS, PostgreSQL the tables' total size after a plain \
         VACUUM, all from just after the create to after the last mutation; live: PostgreSQL's \
         tables after VACUUM FULL, at the end. Notes also retain the notes themselves \
         ({} x {NOTE_BYTES} B).",
        NOTES
    );
    failed |= collection_ratios(&engines, &costs);
    if failed {
        std::process::exit(1);
    }
}

/// The collection targets, as ratios of one run: a change at 10,000 items against the same
/// change at 10, in p50 latency and CPU per mutation (at most 1.3x: reported, since a timing
/// on a shared machine is no pass or fail), and the bytes SQLite retains per append
/// (proportional to the item: at most 2 KB, whatever the vault holds; this one fails the run).
fn collection_ratios(engines: &[Engine], costs: &[(Engine, Workload, f64, f64, f64)]) -> bool {
    let cost = |engine: Engine, workload: Workload| {
        costs
            .iter()
            .find(|(e, w, ..)| *e == engine && *w == workload)
            .map(|(_, _, p50, cpu, retained)| (*p50, *cpu, *retained))
    };
    println!(
        "\ncollections: a change at 10,000 items (1 MB) against the same change at 10 (1 KB), same run"
    );
    println!(
        "{:<7} {:<22} {:>10} {:>10} {:>14} {:>14}  target <= 1.3x",
        "store", "change", "p50 ratio", "CPU ratio", "CPU/mut @10", "CPU/mut @10k"
    );
    let mut failed = false;
    for &engine in engines.iter().filter(|e| **e != Engine::PostgresRaw) {
        for (label, small, large) in [
            (
                "append (commutes)",
                Workload::Append(10),
                Workload::Append(10_000),
            ),
            (
                "edit one item",
                Workload::EditItem(10),
                Workload::EditItem(10_000),
            ),
            (
                "change a scalar field",
                Workload::VaultField(10),
                Workload::VaultField(10_000),
            ),
        ] {
            let (Some(small), Some(large)) = (cost(engine, small), cost(engine, large)) else {
                continue;
            };
            let (p50, cpu) = (large.0 / small.0, large.1 / small.1);
            let verdict = if p50 <= 1.3 && cpu <= 1.3 {
                "PASS"
            } else {
                "MISSED"
            };
            println!(
                "{:<7} {:<22} {:>9.2}x {:>9.2}x {:>14} {:>14}  {verdict}",
                engine.name(),
                label,
                p50,
                cpu,
                micros(small.1),
                micros(large.1),
            );
        }
        if engine == Engine::Sqlite
            && let Some((_, _, retained)) = cost(engine, Workload::Append(10_000))
        {
            let pass = retained <= 2048.0;
            failed |= !pass;
            println!(
                "sqlite  retained per append at 10,000 items: {} ({} B items): {}",
                bytes(retained),
                ITEM_BYTES,
                if pass {
                    "PASS (<= 2 KB)"
                } else {
                    "FAIL (> 2 KB)"
                }
            );
        }
    }
    failed
}
