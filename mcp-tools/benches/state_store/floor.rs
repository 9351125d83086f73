//! The contract's floor on each engine: the raw conditional write plus the rows the versioned
//! contract cannot do without, hand-written for this one change, in the same transaction.
//!
//! What a versioned mutation must persist with its change, whatever framework writes it:
//!
//! - a **ledger record** of the operation id (its fingerprint and the version it produced),
//!   looked up before the change and kept for the ledger's retention, so a retry is answered
//!   instead of applied again and a reused id with other arguments is refused;
//! - an **undo entry** for the version (here the previous `count`, which is all this change
//!   touches), the oldest dropped past the history limit, so a caller who read an older version
//!   can be told what changed since;
//! - the caller's SHA-256 fingerprint of its arguments, computed before the request.
//!
//! Each floor knows the shape of this one state and change, so it skips everything a generic
//! store pays for: no state diff, no lifecycle, expiry, ownership or quota, no outcome beyond
//! the version. Where a store needs an index at scale, the floor goes without one when the bench's
//! sizes let it (the SQLite ledger is swept by a scan). So it is a lower bound for stores that
//! keep undo entries and ledger records as rows of their own, as the three stores here do. (An
//! undo ring kept inside the resource's row would save SQLite a page per commit and rewrite the
//! whole ring with every change instead.)

use std::collections::{HashMap, VecDeque};
use std::hint::black_box;
use std::sync::{Arc, LazyLock, Mutex};

use mcp_tools::store::{Fingerprint, StoreConfig};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::{Value, json};

use super::{HANDLE, LEDGER_RETENTION, Synchronous, TICK, increment, initial, text};

/// Versions between two deletions of undo entries past the limit, as the SQL stores batch them
/// (`HISTORY_SWEEP_EVERY` in the store's columns, private to the crate).
const HISTORY_SWEEP_EVERY: u64 = 16;

/// Operations a ledger record outlives: the versioned store's retention at its clock's tick.
const RETENTION: u64 = (LEDGER_RETENTION.as_millis() / TICK.as_millis()) as u64;

/// Undo entries kept: the store's default history limit, less the current version. Read once:
/// a default config builds a clock.
fn history() -> u64 {
    static HISTORY: LazyLock<u64> = LazyLock::new(|| StoreConfig::default().history_limit - 1);
    *HISTORY
}

/// What every floor has before it touches its engine, as the versioned caller does: a fresh
/// operation id and the fingerprint of the tool arguments that carry it.
struct Call {
    operation_id: String,
    fingerprint: Fingerprint,
}

/// The undo entries a write at `version` drops, as the SQL stores batch it: through the last
/// version past the limit, once every [`HISTORY_SWEEP_EVERY`] versions.
fn undo_to_drop(version: u64) -> Option<u64> {
    let through = version.checked_sub(history())?;
    (through > 0 && through.is_multiple_of(HISTORY_SWEEP_EVERY)).then_some(through)
}

/// The floors' caller: one principal changing one counter, each call with a fresh operation id
/// and the version the previous call produced.
struct Caller {
    principal: Arc<str>,
    handle: String,
    version: u64,
    /// Calls made so far; also the floors' clock (one tick per operation).
    sequence: u64,
}

impl Caller {
    fn new() -> Self {
        Caller {
            principal: Arc::from("bench"),
            handle: HANDLE.to_owned(),
            version: 1,
            sequence: 0,
        }
    }

    fn next(&mut self) -> Call {
        self.sequence += 1;
        let operation_id = format!("op-{}", self.sequence);
        let arguments = json!({
            "counter_id": self.handle,
            "expected_version": self.version,
            "operation_id": operation_id,
        });
        Call {
            fingerprint: Fingerprint::of_call("increment", &arguments),
            operation_id,
        }
    }

    fn applied(&mut self, version: u64) {
        self.version = black_box(version);
    }
}

/// What a ledger record of the call's operation id answers: the bench sends fresh ids, so
/// either answer is a bug in the floor.
fn replayed(recorded: &[u8], fingerprint: &Fingerprint, operation_id: &str) -> ! {
    match recorded == fingerprint.as_bytes() {
        true => panic!("operation {operation_id} replayed in a bench of fresh ids"),
        false => panic!("operation {operation_id} reused with other arguments"),
    }
}

struct Counter {
    version: u64,
    state: Value,
    /// (version, the `count` it replaced), oldest first.
    undo: VecDeque<(u64, Value)>,
}

/// (principal, operation id), shared between the ledger and its expiry queue.
type LedgerKey = (Arc<str>, Arc<str>);

#[derive(Default)]
struct MemoryTables {
    counters: HashMap<String, Counter>,
    /// (principal, operation id) to (fingerprint, version produced).
    ledger: HashMap<LedgerKey, (Fingerprint, u64)>,
    /// Ledger keys in recording order, with the operation count they expire at.
    expiry: VecDeque<(u64, LedgerKey)>,
}

/// In memory: one lock over the counters and the ledger.
pub(crate) struct MemoryFloor {
    tables: Mutex<MemoryTables>,
    caller: Caller,
}

impl MemoryFloor {
    pub(crate) fn new() -> Self {
        let mut tables = MemoryTables::default();
        tables.counters.insert(
            HANDLE.to_owned(),
            Counter {
                version: 1,
                state: initial(),
                undo: VecDeque::new(),
            },
        );
        MemoryFloor {
            tables: Mutex::new(tables),
            caller: Caller::new(),
        }
    }

    pub(crate) fn step(&mut self) {
        let Call {
            operation_id,
            fingerprint,
        } = self.caller.next();
        let now = self.caller.sequence;
        let mut guard = self.tables.lock().unwrap();
        let tables = &mut *guard;
        while let Some((expires, _)) = tables.expiry.front()
            && *expires <= now
        {
            let (_, key) = tables.expiry.pop_front().unwrap();
            tables.ledger.remove(&key);
        }
        let key = (
            Arc::clone(&self.caller.principal),
            Arc::<str>::from(operation_id),
        );
        if let Some((recorded, _)) = tables.ledger.get(&key) {
            replayed(recorded.as_bytes(), &fingerprint, &key.1);
        }
        let counter = tables
            .counters
            .get_mut(black_box(self.caller.handle.as_str()))
            .unwrap();
        assert_eq!(counter.version, self.caller.version, "conflict");
        let mut next = counter.state.clone();
        increment(&mut next);
        let previous = std::mem::replace(&mut counter.state, next);
        counter.version += 1;
        counter
            .undo
            .push_back((counter.version, previous["count"].clone()));
        if counter.undo.len() as u64 > history() {
            counter.undo.pop_front();
        }
        let version = counter.version;
        tables.ledger.insert(key.clone(), (fingerprint, version));
        tables.expiry.push_back((now + RETENTION, key));
        self.caller.applied(version);
    }
}

/// SQLite, on a connection with the store's settings: one `BEGIN IMMEDIATE` transaction reads
/// the ledger record and the row, writes the conditional update, the undo row (dropping those
/// past the limit in batches) and the ledger record, and commits. The ledger is keyed by (principal,
/// operation id) alone (`WITHOUT ROWID`) and swept by a scan every 1,024 operations: no
/// expiry index, which a ledger of a day's operations would need.
pub(crate) struct SqliteFloor {
    connection: Connection,
    caller: Caller,
}

impl SqliteFloor {
    pub(crate) fn new(path: &std::path::Path, synchronous: Synchronous) -> Self {
        let connection = super::raw_sqlite_connection(path, synchronous);
        connection
            .execute_batch(
                "CREATE TABLE floor_counters (
                     handle TEXT PRIMARY KEY, version INTEGER NOT NULL, body TEXT NOT NULL
                 ) STRICT;
                 CREATE TABLE floor_undo (
                     handle TEXT NOT NULL, version INTEGER NOT NULL, undo TEXT NOT NULL,
                     PRIMARY KEY (handle, version)
                 ) STRICT, WITHOUT ROWID;
                 CREATE TABLE floor_ledger (
                     principal TEXT NOT NULL, operation_id TEXT NOT NULL,
                     fingerprint BLOB NOT NULL, version INTEGER NOT NULL,
                     expires_at INTEGER NOT NULL,
                     PRIMARY KEY (principal, operation_id)
                 ) STRICT, WITHOUT ROWID;",
            )
            .unwrap();
        connection
            .execute(
                "INSERT INTO floor_counters (handle, version, body) VALUES (?1, 1, ?2)",
                params![HANDLE, initial().to_string()],
            )
            .unwrap();
        SqliteFloor {
            connection,
            caller: Caller::new(),
        }
    }

    pub(crate) fn step(&mut self) {
        let call = self.caller.next();
        let caller = &self.caller;
        let now = caller.sequence as i64;
        let txn = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        if caller.sequence.is_multiple_of(1024) {
            txn.prepare_cached("DELETE FROM floor_ledger WHERE expires_at <= ?1")
                .unwrap()
                .execute([now])
                .unwrap();
        }
        let recorded = txn
            .prepare_cached(
                "SELECT fingerprint FROM floor_ledger
                 WHERE principal = ?1 AND operation_id = ?2 AND expires_at > ?3",
            )
            .unwrap()
            .query_row(params![&*caller.principal, call.operation_id, now], |row| {
                row.get::<_, Vec<u8>>(0)
            })
            .optional()
            .unwrap();
        if let Some(recorded) = recorded {
            replayed(&recorded, &call.fingerprint, &call.operation_id);
        }
        let (body, version) = txn
            .prepare_cached("SELECT body, version FROM floor_counters WHERE handle = ?1")
            .unwrap()
            .query_row([&caller.handle], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .unwrap();
        assert_eq!(version as u64, caller.version, "conflict");
        let mut state: Value = serde_json::from_str(&body).unwrap();
        let previous = state["count"].clone();
        increment(&mut state);
        let next = version + 1;
        let updated = txn
            .prepare_cached(
                "UPDATE floor_counters SET body = ?1, version = version + 1
                 WHERE handle = ?2 AND version = ?3",
            )
            .unwrap()
            .execute(params![text(&state), caller.handle, version])
            .unwrap();
        assert_eq!(updated, 1, "conflict");
        txn.prepare_cached("INSERT INTO floor_undo (handle, version, undo) VALUES (?1, ?2, ?3)")
            .unwrap()
            .execute(params![caller.handle, next, text(&previous)])
            .unwrap();
        if let Some(through) = undo_to_drop(next as u64) {
            txn.prepare_cached("DELETE FROM floor_undo WHERE handle = ?1 AND version <= ?2")
                .unwrap()
                .execute(params![caller.handle, through as i64])
                .unwrap();
        }
        txn.prepare_cached(
            "INSERT INTO floor_ledger (principal, operation_id, fingerprint, version, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .unwrap()
        .execute(params![
            &*caller.principal,
            call.operation_id,
            call.fingerprint.as_bytes().as_slice(),
            next,
            now + RETENTION as i64,
        ])
        .unwrap();
        txn.commit().unwrap();
        self.caller.applied(next as u64);
    }
}

#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    use super::*;
    use tokio::runtime::Runtime;
    use tokio_postgres::types::ToSql;

    /// PostgreSQL, on a connection of its own that plans as the store's do, shaped as the
    /// store's unit is (the fewest round trips this design allows). First round trip, pipelined:
    /// `BEGIN`,
    /// transaction-scoped advisory locks on the counter and the operation id (so a retry racing
    /// its first attempt waits instead of running its change twice), and one read of the row
    /// and the unexpired ledger record. Second round trip, pipelined: one statement that makes
    /// the conditional update and, from its `RETURNING`, inserts the undo row, drops the
    /// entries past the limit (in batches, as the store does) and inserts the ledger record;
    /// then `COMMIT`. Unlike the store, the floor never sweeps its ledger: it grows by a row per
    /// operation over the run.
    pub(crate) struct PostgresFloor<'a> {
        client: &'a tokio_postgres::Client,
        locks: tokio_postgres::Statement,
        read: tokio_postgres::Statement,
        write: tokio_postgres::Statement,
        caller: Caller,
    }

    impl<'a> PostgresFloor<'a> {
        pub(crate) fn new(
            runtime: &Runtime,
            client: &'a tokio_postgres::Client,
            schema: &str,
        ) -> Self {
            let (locks, read, write) = runtime.block_on(async {
                client
                    .batch_execute(&format!(
                        "CREATE TABLE {schema}.floor_counters (
                             id text PRIMARY KEY, version bigint NOT NULL, state text NOT NULL);
                         CREATE TABLE {schema}.floor_undo (
                             handle text NOT NULL, version bigint NOT NULL, undo text NOT NULL,
                             PRIMARY KEY (handle, version));
                         CREATE TABLE {schema}.floor_ledger (
                             principal text NOT NULL, operation_id text NOT NULL,
                             fingerprint bytea NOT NULL, version bigint NOT NULL,
                             expires_at bigint NOT NULL,
                             PRIMARY KEY (principal, operation_id));"
                    ))
                    .await
                    .unwrap();
                client
                    .execute(
                        &format!(
                            "INSERT INTO {schema}.floor_counters (id, version, state)
                             VALUES ($1, 1, $2)"
                        ),
                        &[&HANDLE, &initial().to_string()],
                    )
                    .await
                    .unwrap();
                let locks = client
                    .prepare(
                        "SELECT pg_advisory_xact_lock($1::int8), pg_advisory_xact_lock($2::int8)",
                    )
                    .await
                    .unwrap();
                let read = client
                    .prepare(&format!(
                        "SELECT c.state, c.version, l.fingerprint
                         FROM (SELECT 1) AS one
                         LEFT JOIN {schema}.floor_counters AS c ON c.id = $1
                         LEFT JOIN {schema}.floor_ledger AS l
                             ON l.principal = $2 AND l.operation_id = $3
                                AND l.expires_at > $4"
                    ))
                    .await
                    .unwrap();
                let write = client
                    .prepare(&format!(
                        "WITH u AS (
                             UPDATE {schema}.floor_counters SET state = $1, version = version + 1
                             WHERE id = $2 AND version = $3 RETURNING id, version),
                         h AS (INSERT INTO {schema}.floor_undo (handle, version, undo)
                               SELECT id, version, $4 FROM u),
                         d AS (DELETE FROM {schema}.floor_undo
                               WHERE handle = $2 AND version <= $5::int8
                                 AND EXISTS (SELECT 1 FROM u)),
                         l AS (INSERT INTO {schema}.floor_ledger
                               (principal, operation_id, fingerprint, version, expires_at)
                               SELECT $6, $7, $8, version, $9 FROM u)
                         SELECT count(*) FROM u"
                    ))
                    .await
                    .unwrap();
                (locks, read, write)
            });
            PostgresFloor {
                client,
                locks,
                read,
                write,
                caller: Caller::new(),
            }
        }

        pub(crate) fn step(&mut self, runtime: &Runtime) {
            let call = self.caller.next();
            let caller = &self.caller;
            let (counter_lock, operation_lock) =
                (lock_key(&caller.handle), lock_key(&call.operation_id));
            let version = caller.version as i64;
            let now = caller.sequence as i64;
            let expires_at = now + RETENTION as i64;
            let undo_through = undo_to_drop(caller.version + 1).unwrap_or(0) as i64;
            let client = self.client;
            runtime.block_on(async {
                let lock_params: [&(dyn ToSql + Sync); 2] = [&counter_lock, &operation_lock];
                let read_params: [&(dyn ToSql + Sync); 4] = [
                    &caller.handle,
                    &&*caller.principal,
                    &call.operation_id,
                    &now,
                ];
                let (_, _, row) = tokio::try_join!(
                    biased;
                    client.batch_execute("BEGIN"),
                    client.execute(&self.locks, &lock_params),
                    client.query_one(&self.read, &read_params),
                )
                .unwrap();
                if let Some(recorded) = row.get::<_, Option<Vec<u8>>>(2) {
                    replayed(&recorded, &call.fingerprint, &call.operation_id);
                }
                let (body, current): (String, i64) = (row.get(0), row.get(1));
                assert_eq!(current, version, "conflict");
                let mut state: Value = serde_json::from_str(&body).unwrap();
                let previous = text(&state["count"]);
                increment(&mut state);
                let fingerprint = call.fingerprint.as_bytes().as_slice();
                let write_params: [&(dyn ToSql + Sync); 9] = [
                    &text(&state),
                    &caller.handle,
                    &version,
                    &previous,
                    &undo_through,
                    &&*caller.principal,
                    &call.operation_id,
                    &fingerprint,
                    &expires_at,
                ];
                let (written, _) = tokio::try_join!(
                    biased;
                    client.query_one(&self.write, &write_params),
                    client.batch_execute("COMMIT"),
                )
                .unwrap();
                assert_eq!(written.get::<_, i64>(0), 1, "conflict");
            });
            self.caller.applied(version as u64 + 1);
        }
    }

    /// A 64-bit lock key for `name`: the first bytes of a SHA-256 digest, as the store's are.
    fn lock_key(name: &str) -> i64 {
        let digest = Fingerprint::of(&Value::String(name.to_owned()));
        i64::from_le_bytes(digest.as_bytes()[..8].try_into().unwrap())
    }
}
