//! The embedded durable store: one SQLite file in WAL mode, shared safely by several processes.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;
use tokio::runtime::RuntimeFlavor;

use super::boundary::{self, LedgerEntry, Record, Txn};
use super::clock::duration_millis;
use super::contract::{
    CreateRequest, MutationRequest, PruneReport, ReadRequest, Store, StoreConfig, StoreError,
    StoreFuture, Transition,
};
use super::entity::Lifecycle;
use super::fingerprint::Fingerprint;
use super::handle::mint_handle;
use super::outcome::{MutationOutcome, ReadOutcome, RecordedOutcome};

/// The layout of a store file. New files only: this layout is not read from files written by
/// earlier pre-release versions, which are refused at open (see [`refuse_old_layout`]).
///
/// - `mcp_versions` holds every kept version of every resource, keyed by (handle, version): the
///   current version is the last row of its handle, and a mutation appends one row, so the
///   current state and its history cost one B-tree. Versions beyond the history limit are deleted
///   in batches.
/// - `mcp_versions_expiry` indexes the rows of resources that expire, so a sweep finds the
///   resources that expired longer ago than the ledger retention without a full scan.
/// - `mcp_ledger` appends one row per recorded operation: its rowid order is recording order, so
///   with one retention the oldest rows expire first and a sweep deletes a rowid range without an
///   expiry index; the unique index on (principal, operation id) serves lookups.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS mcp_versions (
    handle     TEXT NOT NULL,
    version    INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    owner      TEXT NOT NULL,
    state      TEXT NOT NULL,
    lifecycle  TEXT NOT NULL,
    expires_at INTEGER,
    PRIMARY KEY (handle, version)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mcp_versions_expiry ON mcp_versions (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS mcp_ledger (
    seq          INTEGER PRIMARY KEY,
    principal    TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    recorded_at  INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS mcp_ledger_key ON mcp_ledger (principal, operation_id);
";

/// The current version of a handle: its last row. The parameter is wrapped in `CAST`: the bundled
/// SQLite is built with STAT4, which re-prepares a statement on every new binding of a bare
/// parameter that bounds a range scan (here the versions of one handle); an expression is not
/// used for that, and the plan stays a primary-key search.
const LOAD_SQL: &str = "SELECT kind, owner, version, state, lifecycle, expires_at FROM mcp_versions
     WHERE handle = CAST(?1 AS TEXT) ORDER BY version DESC LIMIT 1";

/// The resources whose current version (the last row of the handle) expired at or before `?1`.
/// A handle has one last row, so each qualifying handle appears once.
const RECLAIMABLE_SQL: &str = "SELECT handle FROM mcp_versions AS v
     WHERE expires_at <= ?1
       AND NOT EXISTS (SELECT 1 FROM mcp_versions AS w
                       WHERE w.handle = v.handle AND w.version > v.version)";

/// Versions between two deletions of a resource's history beyond the limit.
const HISTORY_SWEEP_EVERY: u64 = 16;

/// Refuses a file written with the layout of earlier pre-release versions (`mcp_resources`,
/// `mcp_history`): it is not migrated.
fn refuse_old_layout(connection: &Connection, path: &Path) -> Result<(), StoreError> {
    let old: i64 = connection.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'mcp_resources'",
        [],
        |row| row.get(0),
    )?;
    if old > 0 {
        return Err(StoreError::Backend(format!(
            "{} was written by an earlier pre-release version with another layout; it is not \
             migrated: use a new file",
            path.display()
        )));
    }
    Ok(())
}

/// Writes between two automatic sweeps of the ledger and of expired resources.
const SWEEP_EVERY: u64 = 1024;

/// How SQLite syncs the write-ahead log.
///
/// Either way a mutation is atomic: its new version, history and ledger record are committed or
/// lost together, so a retry with the same operation id stays correct.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Sync on every commit: a committed outcome also survives a power loss or OS crash.
    Full,
    /// Sync at checkpoints only (the default): a committed outcome survives a crash of the
    /// process; a power loss or OS crash may roll back the most recent commits, never partly.
    #[default]
    Normal,
}

/// Engine settings of a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// How long a writer waits for another process's write transaction (default 10 s).
    pub busy_timeout: Duration,
    /// WAL sync mode (default [`Synchronous::Normal`]).
    pub synchronous: Synchronous,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(10),
            synchronous: Synchronous::Normal,
        }
    }
}

/// A store in one SQLite file (bundled SQLite, WAL mode).
///
/// Every mutation runs the whole boundary in one `BEGIN IMMEDIATE` transaction on a blocking
/// thread: the write lock is taken before the first read, so the ledger lookup, the version
/// comparison and the write cannot interleave with another writer, in this process or in any other
/// process that opened the same file. Inside a process, writers queue on one connection; readers
/// use a small pool of their own connections and never wait for writers.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    config: StoreConfig,
    options: SqliteOptions,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    mutations: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // An open transaction rolls back when a panic unwinds through it; the connection stays usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        StoreError::Backend(error.to_string())
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store in the file at `path`.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Self, StoreError> {
        SqliteStore::open_with(path, config, SqliteOptions::default())
    }

    /// Opens the store with explicit engine settings.
    pub fn open_with(
        path: impl AsRef<Path>,
        config: StoreConfig,
        options: SqliteOptions,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut writer = connect(&path, &options)?;
        let txn = writer.transaction_with_behavior(TransactionBehavior::Immediate)?;
        refuse_old_layout(&txn, &path)?;
        txn.execute_batch(SCHEMA)?;
        txn.commit()?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                config,
                options,
                writer: Mutex::new(writer),
                readers: Mutex::new(Vec::new()),
                mutations: AtomicU64::new(0),
            }),
        })
    }

    /// How many resources the file holds, expired ones included (for tests that count what was
    /// actually created).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn resource_count_for_tests(&self) -> Result<u64, StoreError> {
        self.inner.with_reader(|connection| {
            Ok(connection.query_row(
                "SELECT count(DISTINCT handle) FROM mcp_versions",
                [],
                |row| row.get::<_, i64>(0),
            )? as u64)
        })
    }

    /// The `synchronous` setting in force on the connection that writes (for tests that check the
    /// durability option reached the engine: it is a per-connection setting nothing else shows).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn synchronous_for_tests(&self) -> Result<Synchronous, StoreError> {
        let level: i64 =
            lock(&self.inner.writer).query_row("PRAGMA synchronous", [], |row| row.get(0))?;
        match level {
            1 => Ok(Synchronous::Normal),
            2 => Ok(Synchronous::Full),
            other => Err(StoreError::Backend(format!(
                "unexpected synchronous level {other}"
            ))),
        }
    }

    /// The file this store uses.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs blocking SQLite work. On a multi-threaded runtime it runs in place with
    /// `block_in_place`, which moves the thread's other tasks to another worker instead of moving
    /// this work to another thread and back; elsewhere it goes to the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::MultiThread);
        if multi_thread {
            // A panicking transition fails the call as it would on the blocking pool; the open
            // transaction rolls back as the panic unwinds through it.
            return tokio::task::block_in_place(|| {
                panic::catch_unwind(AssertUnwindSafe(|| work(&self.inner)))
                    .unwrap_or_else(|payload| Err(StoreError::Task(panic_message(&*payload))))
            });
        }
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || work(&inner))
            .await
            .map_err(|error| StoreError::Task(error.to_string()))?
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("panicked");
    format!("the store task panicked: {message}")
}

/// Switches the file to WAL and returns the journal mode in force. The switch needs the file to
/// itself for a moment, and SQLite answers "database is locked" at once, without the busy
/// handler, while another process opening the same new file holds it: wait as the busy timeout
/// would.
fn wal_mode(connection: &Connection, busy_timeout: Duration) -> Result<String, StoreError> {
    let deadline = Instant::now() + busy_timeout;
    loop {
        match connection.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)) {
            Err(rusqlite::Error::SqliteFailure(error, _))
                if matches!(
                    error.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            result => return Ok(result?),
        }
    }
}

/// Opens a connection with the settings every connection of the store shares.
pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(options.busy_timeout)?;
    let mode = wal_mode(&connection, options.busy_timeout)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Backend(format!(
            "SQLite refused WAL mode for {} (journal mode {mode})",
            path.display()
        )));
    }
    let synchronous = match options.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    connection.pragma_update(None, "synchronous", synchronous)?;
    Ok(connection)
}

impl Inner {
    fn with_reader<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = lock(&self.readers).pop();
        let connection = match pooled {
            Some(connection) => connection,
            None => connect(&self.path, &self.options)?,
        };
        let result = work(&connection);
        lock(&self.readers).push(connection);
        result
    }

    fn create(&self, request: CreateRequest) -> Result<MutationOutcome, StoreError> {
        let handle = mint_handle(request.kind.prefix)?;
        let outcome = {
            let writer = lock(&self.writer);
            let txn = WriteTxn::begin(&writer)?;
            let now = self.config.clock.now_millis();
            let outcome =
                boundary::create(&mut SqlTxn(&writer), &self.config, request, &handle, now)?;
            txn.commit()?;
            outcome
        };
        self.count_write()?;
        Ok(outcome)
    }

    /// Counts a request that may have written a resource or a ledger record and sweeps now and
    /// then.
    fn count_write(&self) -> Result<(), StoreError> {
        if self.mutations.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.prune()?;
        }
        Ok(())
    }

    fn read(&self, request: &ReadRequest) -> Result<ReadOutcome, StoreError> {
        let now = self.config.clock.now_millis();
        self.with_reader(|connection| boundary::read(&mut SqlTxn(connection), request, now))
    }

    fn mutate(
        &self,
        request: &MutationRequest,
        transition: &mut Transition,
    ) -> Result<MutationOutcome, StoreError> {
        let outcome = {
            let writer = lock(&self.writer);
            let txn = WriteTxn::begin(&writer)?;
            let now = self.config.clock.now_millis();
            let outcome =
                boundary::mutate(&mut SqlTxn(&writer), &self.config, request, transition, now)?;
            txn.commit()?;
            outcome
        };
        self.count_write()?;
        Ok(outcome)
    }

    fn prune(&self) -> Result<PruneReport, StoreError> {
        let writer = lock(&self.writer);
        let now = self.config.clock.now_millis();
        // Rows are in recording order, and with one retention in expiry order: delete the rowid
        // range before the first live row. A row recorded out of order (a changed retention, a
        // clock that went back) waits for the rows before it; lookups ignore it once expired.
        let ledger_records = writer
            .prepare_cached(
                "DELETE FROM mcp_ledger WHERE seq < coalesce(
                     (SELECT seq FROM mcp_ledger WHERE expires_at > ?1 ORDER BY seq LIMIT 1),
                     (SELECT max(seq) + 1 FROM mcp_ledger),
                     0)",
            )?
            .execute([now])?;
        let cutoff = now.saturating_sub(duration_millis(self.config.ledger_retention));
        let txn = WriteTxn::begin(&writer)?;
        // A resource is gone when its current version (its last row) expired before the cutoff;
        // an expired resource is never written again, so that cannot change under this sweep.
        let handles = writer
            .prepare_cached(RECLAIMABLE_SQL)?
            .query_map([cutoff], |row| row.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        let mut delete =
            writer.prepare_cached("DELETE FROM mcp_versions WHERE handle = CAST(?1 AS TEXT)")?;
        for handle in &handles {
            delete.execute([handle])?;
        }
        drop(delete);
        txn.commit()?;
        Ok(PruneReport {
            ledger_records: ledger_records as u64,
            resources: handles.len() as u64,
        })
    }
}

/// A `BEGIN IMMEDIATE` write transaction on the writer connection, with cached `BEGIN` and
/// `COMMIT` statements; it rolls back when dropped uncommitted (an error, a failed commit, or a
/// panic unwinding through it).
struct WriteTxn<'c> {
    connection: &'c Connection,
    open: bool,
}

impl<'c> WriteTxn<'c> {
    fn begin(connection: &'c Connection) -> Result<Self, StoreError> {
        connection.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(WriteTxn {
            connection,
            open: true,
        })
    }

    fn commit(mut self) -> Result<(), StoreError> {
        self.connection.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for WriteTxn<'_> {
    fn drop(&mut self) {
        if self.open && !self.connection.is_autocommit() {
            let _ = self.connection.execute_batch("ROLLBACK");
        }
    }
}

/// The boundary's operations as statements on one connection; the caller holds the transaction.
struct SqlTxn<'c>(&'c Connection);

fn version_to_sql(version: u64) -> Result<i64, StoreError> {
    i64::try_from(version)
        .map_err(|_| StoreError::Corrupt(format!("version {version} out of range")))
}

fn version_from_sql(version: i64) -> Result<u64, StoreError> {
    u64::try_from(version).map_err(|_| StoreError::Corrupt(format!("negative version {version}")))
}

fn json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|error| StoreError::Corrupt(error.to_string()))
}

impl Txn for SqlTxn<'_> {
    fn ledger_get(
        &mut self,
        principal: &str,
        operation_id: &str,
    ) -> Result<Option<LedgerEntry>, StoreError> {
        let row = self
            .0
            .prepare_cached(
                "SELECT fingerprint, outcome, recorded_at, expires_at FROM mcp_ledger
                 WHERE principal = ?1 AND operation_id = ?2",
            )?
            .query_row(params![principal, operation_id], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get(2)?,
                    row.get(3)?,
                ))
            })
            .optional()?;
        let Some((fingerprint, outcome, recorded_at, expires_at)) = row else {
            return Ok(None);
        };
        let outcome: RecordedOutcome = serde_json::from_str(&outcome)
            .map_err(|error| StoreError::Corrupt(format!("ledger outcome: {error}")))?;
        Ok(Some(LedgerEntry {
            fingerprint: Fingerprint::from_stored(fingerprint),
            outcome: outcome.into(),
            recorded_at,
            expires_at,
        }))
    }

    fn ledger_put(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: LedgerEntry,
    ) -> Result<(), StoreError> {
        let outcome = serde_json::to_string(&entry.outcome.into_recorded())
            .map_err(|error| StoreError::Corrupt(format!("ledger outcome: {error}")))?;
        self.0
            .prepare_cached(
                "INSERT OR REPLACE INTO mcp_ledger
                 (seq, principal, operation_id, fingerprint, outcome, recorded_at, expires_at)
                 VALUES (NULL, ?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                principal,
                operation_id,
                entry.fingerprint.as_str(),
                outcome,
                entry.recorded_at,
                entry.expires_at
            ])?;
        Ok(())
    }

    fn load(&mut self, handle: &str) -> Result<Option<Record>, StoreError> {
        let row = self
            .0
            .prepare_cached(LOAD_SQL)?
            .query_row([handle], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, String>(4)?,
                    row.get::<_, Option<i64>>(5)?,
                ))
            })
            .optional()?;
        let Some((kind, owner, version, state, lifecycle, expires_at)) = row else {
            return Ok(None);
        };
        Ok(Some(Record {
            kind: kind.into(),
            owner: owner.into(),
            version: version_from_sql(version)?,
            state: Arc::new(json(&state)?),
            lifecycle: Lifecycle::parse(&lifecycle)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown lifecycle {lifecycle:?}")))?,
            expires_at,
        }))
    }

    fn history(&mut self, handle: &str, version: u64) -> Result<Option<Value>, StoreError> {
        let state = self
            .0
            .prepare_cached("SELECT state FROM mcp_versions WHERE handle = ?1 AND version = ?2")?
            .query_row(params![handle, version_to_sql(version)?], |row| {
                row.get::<_, String>(0)
            })
            .optional()?;
        state.map(|state| json(&state)).transpose()
    }

    fn insert(&mut self, handle: &str, record: Record) -> Result<(), StoreError> {
        self.append(handle, &record)
    }

    fn write(&mut self, handle: &str, record: Record, drop_through: u64) -> Result<(), StoreError> {
        // The boundary loaded version - 1 as the last row inside this write transaction, so the
        // primary key refuses any second writer of the same version.
        self.append(handle, &record)?;
        if drop_through > 0 && drop_through.is_multiple_of(HISTORY_SWEEP_EVERY) {
            self.0
                .prepare_cached(
                    "DELETE FROM mcp_versions
                     WHERE handle = CAST(?1 AS TEXT) AND version <= CAST(?2 AS INTEGER)",
                )?
                .execute(params![handle, version_to_sql(drop_through)?])?;
        }
        Ok(())
    }
}

impl SqlTxn<'_> {
    /// Appends `record` as the last version of `handle`.
    fn append(&mut self, handle: &str, record: &Record) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "INSERT INTO mcp_versions
                 (handle, version, kind, owner, state, lifecycle, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                handle,
                version_to_sql(record.version)?,
                &*record.kind,
                &*record.owner,
                record.state.to_string(),
                record.lifecycle.as_str(),
                record.expires_at
            ])?;
        Ok(())
    }
}

impl Store for SqliteStore {
    fn create(&self, request: CreateRequest) -> StoreFuture<'_, MutationOutcome> {
        Box::pin(self.blocking(move |inner| inner.create(request)))
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        Box::pin(self.blocking(move |inner| inner.read(&request)))
    }

    fn mutate(
        &self,
        request: MutationRequest,
        mut transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome> {
        Box::pin(self.blocking(move |inner| inner.mutate(&request, &mut transition)))
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        Box::pin(self.blocking(|inner| inner.prune()))
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::StatementStatus;

    use super::*;

    /// The load statement is prepared once and searches the primary key, whatever the handle.
    #[test]
    fn load_is_not_re_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut connection = connect(&path, &SqliteOptions::default()).unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let txn = connection.transaction().unwrap();
        for handle in ["ctr_a", "ctr_b", "ctr_c"] {
            let mut sql = SqlTxn(&txn);
            assert!(sql.load(handle).unwrap().is_none());
        }
        let plan: String = txn
            .query_row(
                &format!("EXPLAIN QUERY PLAN {LOAD_SQL}"),
                ["ctr_a"],
                |row| row.get(3),
            )
            .unwrap();
        assert!(plan.contains("PRIMARY KEY (handle=?)"), "{plan}");
        let statement = txn.prepare_cached(LOAD_SQL).unwrap();
        assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
    }

    /// The sweep of expired resources searches the expiry index, not the whole table.
    #[test]
    fn reclaim_uses_the_expiry_index() {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let plan: Vec<String> = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {RECLAIMABLE_SQL}"))
            .unwrap()
            .query_map([0], |row| row.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|step| step.contains("mcp_versions_expiry")),
            "{plan:?}"
        );
    }
}
