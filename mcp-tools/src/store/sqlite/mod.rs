//! The embedded durable store: one SQLite file in WAL mode, shared safely by several processes.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;

mod checkpoint;
mod states;
mod tasks;
mod writer;

use states::{Decoded, StateCache};
use writer::Writer;

use crate::auth::Principal;
use crate::store::api::{
    CreateRequest, MutationRequest, PruneReport, ReadRequest, Store, StoreConfig, Transition,
};
use crate::store::boundary::{self, Change, LedgerEntry, LedgerState, Record, Txn};
use crate::store::clock::duration_millis;
use crate::store::columns::{
    history_to_drop, json, ledger_state_from_sql, ledger_state_to_sql, to_json, version_from_sql,
    version_to_sql,
};
use crate::store::entity::Lifecycle;
use crate::store::error::{StoreError, StoreFuture};
use crate::store::fingerprint::Fingerprint;
use crate::store::history::Undo;
use crate::store::outcome::{MutationOutcome, ReadOutcome};
use crate::store::sweeper::Sweeper;
// An open transaction rolls back when a panic unwinds through it; the connection stays usable.
use crate::sync::lock;

/// The layout of a store file, recorded as `layout` in `mcp_meta`.
///
/// - `mcp_resources` holds the current state of each resource once, with its version, owner,
///   kind, lifecycle, expiry and how many ledger records count against it (`ledger_live`).
/// - `mcp_changes` holds the undo patch of each kept version, keyed by (handle, version): what
///   takes that version's state back to the one before. Patches beyond the history limit are
///   deleted in batches.
/// - `mcp_ledger` appends one row per recorded operation (or claim): its rowid order is recording
///   order, so with one retention the oldest rows expire first and a sweep deletes a rowid range
///   without an expiry index; the unique index on (principal, operation id) serves lookups. A row
///   holds the outcome's summary, never a state.
/// - `mcp_tasks` holds one row per task of the Tasks extension: its record as a JSON document
///   and its expiry, for the purge. Files of this layout made before tasks existed get the
///   table when they are next opened.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS mcp_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mcp_resources (
    handle      TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    owner       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    state       TEXT NOT NULL,
    lifecycle   TEXT NOT NULL,
    expires_at  INTEGER,
    ledger_live INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX IF NOT EXISTS mcp_resources_expiry ON mcp_resources (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS mcp_changes (
    handle  TEXT NOT NULL,
    version INTEGER NOT NULL,
    undo    TEXT NOT NULL,
    PRIMARY KEY (handle, version)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mcp_ledger (
    seq          INTEGER PRIMARY KEY,
    principal    TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    outcome      TEXT,
    claim        INTEGER,
    handle       TEXT,
    recorded_at  INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS mcp_ledger_key ON mcp_ledger (principal, operation_id);
CREATE TABLE IF NOT EXISTS mcp_tasks (
    id         TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL,
    record     BLOB NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mcp_tasks_expiry ON mcp_tasks (expires_at);
";

/// The layout this version writes and reads.
const LAYOUT: &str = "2";

/// The current version of a handle.
const LOAD_SQL: &str = "SELECT kind, owner, version, state, lifecycle, expires_at, ledger_live
     FROM mcp_resources WHERE handle = ?1";

/// Up to `?2` resources that expired at or before `?1`.
const RECLAIMABLE_SQL: &str = "SELECT handle FROM mcp_resources WHERE expires_at <= ?1 LIMIT ?2";

/// Ledger rows or resources one sweep transaction deletes at most, so in-process writers wait
/// for a short transaction only.
const SWEEP_BATCH: i64 = 4096;

/// Checks the file's layout before anything is written: a new file gets this layout; a file of
/// another layout is refused, never misread.
fn check_layout(connection: &Connection, path: &Path) -> Result<(), StoreError> {
    let tables: Vec<String> = connection
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'mcp\\_%' ESCAPE '\\'")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let has = |name: &str| tables.iter().any(|table| table == name);
    if has("mcp_versions") || (has("mcp_resources") && !has("mcp_meta")) {
        return Err(StoreError::Backend(format!(
            "{} was written by an earlier pre-release of mcp-tools, which kept a full copy of the \
             state for every version; this version keeps each state once and its history as \
             changes, and does not read or migrate that layout: start from a new file",
            path.display()
        )));
    }
    if has("mcp_meta") {
        let layout: Option<String> = connection
            .query_row(
                "SELECT value FROM mcp_meta WHERE key = 'layout'",
                [],
                |row| row.get(0),
            )
            .optional()?;
        if layout.as_deref() != Some(LAYOUT) {
            return Err(StoreError::Backend(format!(
                "{} has storage layout {}, and this version of mcp-tools reads layout {LAYOUT} \
                 only: open it with the version that wrote it",
                path.display(),
                layout.as_deref().unwrap_or("(none)")
            )));
        }
    }
    Ok(())
}

/// Writes between two wake-ups of the sweep thread.
const SWEEP_EVERY: u64 = 1024;

/// Lanes of pooled reader connections. A thread takes and returns its connections in its own
/// lane, so a connection is used by one thread and SQLite's memory for it is allocated and freed
/// by that thread. Handed from thread to thread, a connection's frees landed in the other
/// thread's malloc arena, and the two threads contended for the arena locks: 12% of the samples
/// of `basket_get` over HTTP, 2% in lanes.
const READER_LANES: usize = 16;

/// The reader lane of the calling thread: threads take lanes in turn, so the first
/// [`READER_LANES`] threads to read (a runtime's workers first) each have one of their own.
fn reader_lane() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static LANE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % READER_LANES;
    }
    LANE.with(|lane| *lane)
}

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
    /// Pages of write-ahead log past which the store copies the log back into the database
    /// file (a checkpoint), like SQLite's `wal_autocheckpoint` (default 1,000, SQLite's own;
    /// `0` leaves checkpoints to the application, which runs `PRAGMA wal_checkpoint` on a
    /// connection of its own).
    ///
    /// SQLite's own checkpoint runs inside the commit that crosses the limit, and the writes
    /// queued behind it wait for it. The store's runs on a thread of its own while commits go
    /// on; a commit only copies the few pages written since that thread caught up, which lets
    /// the log start over. Past twice the limit (the thread could not keep up) a commit copies
    /// the log itself when the thread is not copying, and past four times it waits for the
    /// thread's copy first. Under [`Synchronous::Normal`] checkpoints are the only syncs. The
    /// `-wal` file keeps the largest size it reached: under sustained writes, two to four times
    /// `checkpoint_pages` times the page size (4 KiB unless the file says otherwise), more
    /// while a long read keeps a checkpoint from finishing.
    pub checkpoint_pages: u32,
    /// Memory for the states the store keeps decoded (default 16 MiB; `0` keeps none), as
    /// estimated from their structure: a decoded JSON object takes far more than its text (a
    /// tree node of about 600 bytes for up to 11 members).
    ///
    /// A read or a mutation of a version this process has already decoded or written then skips
    /// parsing its state. A row names its version, and a state is kept only once committed, so
    /// a write by another process (or a write rolled back) is never answered from memory. That
    /// holds because a handle's versions only go up: replacing the file under a running process
    /// (restoring a backup, say) needs a restart of the process. A state larger than half this
    /// budget is never kept.
    pub state_cache_bytes: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(10),
            synchronous: Synchronous::Normal,
            checkpoint_pages: 1000,
            state_cache_bytes: 16 << 20,
        }
    }
}

/// A store in one SQLite file (bundled SQLite, WAL mode).
///
/// Every mutation runs the whole boundary inside a `BEGIN IMMEDIATE` transaction: the write lock
/// is taken before the first read, so the ledger lookup, the version comparison and the write
/// cannot interleave with another writer, in this process or in any other process that opened
/// the same file. Inside a process, writers share one connection with group commit: the mutations
/// queued while one commits are committed together, and only then answered. (Refusals are
/// outcomes; a mutation fails only when something went wrong under it, a failing disk or a
/// corrupt row, and then the mutations of its group before it fail with it, retryably, and keep
/// nothing. For a minute after such a failure each mutation of a group gets a savepoint, so a
/// failing one fails alone.) A mutation awaited on a runtime's task is committed by a thread of the store's own,
/// so a commit (or a wait for another process's write lock, up to the busy timeout) never blocks
/// a runtime worker. Readers use a small pool of their own connections and never wait for
/// writers (WAL lets them read the last committed state while a write is under way). States
/// the process decoded or committed are kept decoded ([`SqliteOptions::state_cache_bytes`]), by
/// handle and version: a read or a write still reads its row, and parses the state only when its
/// version is not held. Expired records are swept by a thread of the store's own, in short
/// transactions. The one sweep on a request is a single batch, taken when a resource's ledger
/// share looks full, so that the share counts live records only.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    config: StoreConfig,
    options: SqliteOptions,
    writer: Arc<Writer>,
    /// The states this process decoded or wrote, shared with the writer.
    states: Arc<StateCache>,
    /// Idle reader connections, by [`reader_lane`].
    readers: Box<[Mutex<Vec<Connection>>]>,
    sweeper: Sweeper,
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
        check_layout(&txn, &path)?;
        txn.execute_batch(SCHEMA)?;
        txn.execute(
            "INSERT OR IGNORE INTO mcp_meta (key, value) VALUES ('layout', ?1)",
            [LAYOUT],
        )?;
        txn.commit()?;
        // The checkpoint thread ends with the writer's connection, on its own.
        drop(checkpoint::install(&mut writer, &path, &options)?);
        let states = Arc::new(StateCache::new(options.state_cache_bytes));
        let writer = Writer::spawn(writer, Arc::clone(&config.clock), Arc::clone(&states))?;
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            path,
            config,
            options,
            writer,
            states,
            readers: (0..READER_LANES).map(|_| Mutex::default()).collect(),
            sweeper: Sweeper::spawn(weak.clone(), Inner::sweep, SWEEP_EVERY),
        });
        Ok(SqliteStore { inner })
    }

    /// How many resources the file holds, expired ones included (for tests that count what was
    /// actually created).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn resource_count_for_tests(&self) -> Result<u64, StoreError> {
        self.inner.with_reader(|connection| {
            Ok(
                connection.query_row("SELECT count(*) FROM mcp_resources", [], |row| {
                    row.get::<_, i64>(0)
                })? as u64,
            )
        })
    }

    /// The `synchronous` setting in force on the connection that writes (for tests that check the
    /// durability option reached the engine: it is a per-connection setting nothing else shows).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn synchronous_for_tests(&self) -> Result<Synchronous, StoreError> {
        let level: i64 = self.inner.writer.run_blocking(|txn, _| {
            Ok(txn
                .connection
                .query_row("PRAGMA synchronous", [], |row| row.get(0))?)
        })?;
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
        let lane = &self.readers[reader_lane()];
        let pooled = lock(lane).pop();
        let connection = match pooled {
            Some(connection) => connection,
            None => connect(&self.path, &self.options)?,
        };
        let result = work(&connection);
        lock(lane).push(connection);
        result
    }

    /// Reads on the calling thread: a WAL reader takes no lock a writer holds, so the read is a
    /// key lookup and a parse, never a wait.
    fn read(&self, request: &ReadRequest) -> Result<ReadOutcome, StoreError> {
        let now = self.config.clock.now_millis();
        self.with_reader(|connection| {
            if request.since.is_none() {
                let mut txn = SqlTxn::new(connection, &self.states);
                let outcome = boundary::read(&mut txn, &self.config, request, now);
                self.states.publish(txn.take_decoded());
                return outcome;
            }
            // The state and its history from one snapshot of the file.
            let snapshot = connection.unchecked_transaction()?;
            let mut txn = SqlTxn::new(&snapshot, &self.states);
            let outcome = boundary::read(&mut txn, &self.config, request, now);
            let decoded = txn.take_decoded();
            snapshot.finish()?;
            self.states.publish(decoded);
            outcome
        })
    }

    /// The automatic sweep, on the sweep thread: its failures are logged, never answered.
    fn sweep(&self) {
        let swept = prune_in_steps(self.config.ledger_retention, |step| {
            self.writer.run_blocking(move |txn, now| step.run(txn, now))
        });
        if let Err(error) = swept {
            tracing::warn!(%error, path = %self.path.display(), "the state store's sweep failed; it will run again");
        }
    }
}

/// One transaction of a prune.
#[derive(Debug, Clone, Copy)]
enum PruneStep {
    /// Up to [`SWEEP_BATCH`] expired ledger rows.
    Ledger,
    /// Up to [`SWEEP_BATCH`] resources that expired longer ago than `retention`.
    Resources { retention: Duration },
}

impl PruneStep {
    fn run(self, txn: &mut SqlTxn<'_>, now: i64) -> Result<u64, StoreError> {
        match self {
            PruneStep::Ledger => prune_ledger(txn.connection, now),
            PruneStep::Resources { retention } => {
                let cutoff = now.saturating_sub(duration_millis(retention));
                // An expired resource is never written again, so its expiry cannot move
                // under this sweep.
                let handles = txn
                    .connection
                    .prepare_cached(RECLAIMABLE_SQL)?
                    .query_map([cutoff, SWEEP_BATCH], |row| row.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                let mut resource = txn
                    .connection
                    .prepare_cached("DELETE FROM mcp_resources WHERE handle = ?1")?;
                let mut changes = txn
                    .connection
                    .prepare_cached("DELETE FROM mcp_changes WHERE handle = ?1")?;
                for handle in &handles {
                    resource.execute([handle])?;
                    changes.execute([handle])?;
                }
                Ok(handles.len() as u64)
            }
        }
    }
}

/// A prune as short transactions, each run by `run`: the ledger a batch at a time, then the
/// resources a batch at a time. A batch smaller than [`SWEEP_BATCH`] was the last.
fn prune_in_steps(
    retention: Duration,
    mut run: impl FnMut(PruneStep) -> Result<u64, StoreError>,
) -> Result<PruneReport, StoreError> {
    let mut report = PruneReport::default();
    loop {
        let removed = run(PruneStep::Ledger)?;
        report.ledger_records += removed;
        if removed < SWEEP_BATCH as u64 {
            break;
        }
    }
    loop {
        let removed = run(PruneStep::Resources { retention })?;
        report.resources += removed;
        if removed < SWEEP_BATCH as u64 {
            return Ok(report);
        }
    }
}

/// Deletes up to [`SWEEP_BATCH`] expired ledger rows, oldest first, and takes them off the
/// counts of their resources. Rows are in recording order, and with one retention in expiry
/// order: the batch is the rows before the first live row, at most [`SWEEP_BATCH`] of them
/// (counted as rows: records replaced or given up leave gaps between rowids). A row recorded
/// out of order (a changed retention, a claim, a clock that went back) waits for the rows
/// before it; lookups ignore it once expired.
fn prune_ledger(connection: &Connection, now: i64) -> Result<u64, StoreError> {
    let end: i64 = connection
        .prepare_cached(
            "SELECT min(
                 coalesce(
                     (SELECT seq FROM mcp_ledger WHERE expires_at > ?1 ORDER BY seq LIMIT 1),
                     (SELECT max(seq) + 1 FROM mcp_ledger),
                     0),
                 coalesce(
                     (SELECT seq FROM mcp_ledger ORDER BY seq LIMIT 1 OFFSET ?2),
                     9223372036854775807))",
        )?
        .query_row([now, SWEEP_BATCH], |row| row.get(0))?;
    connection
        .prepare_cached(
            "UPDATE mcp_resources SET ledger_live = ledger_live - counted.n
             FROM (SELECT handle, count(*) AS n FROM mcp_ledger
                   WHERE seq < ?1 AND handle IS NOT NULL AND outcome IS NOT NULL
                   GROUP BY handle) AS counted
             WHERE mcp_resources.handle = counted.handle",
        )?
        .execute([end])?;
    let removed = connection
        .prepare_cached("DELETE FROM mcp_ledger WHERE seq < ?1")?
        .execute([end])?;
    Ok(removed as u64)
}

/// The boundary's operations as statements on one connection; the caller holds the transaction.
pub(crate) struct SqlTxn<'c> {
    connection: &'c Connection,
    states: &'c StateCache,
    /// The states this transaction decoded or wrote, for `states` once it commits.
    decoded: Vec<Decoded>,
    /// `ledger_live` of the resource last loaded, by handle.
    loaded_count: Option<(String, i64)>,
    /// The resource whose next ledger record its write already counted.
    counted: Option<String>,
    /// What [`Txn::prefetch`] read, until the boundary asks for it.
    prefetched: Option<Prefetched>,
}

/// A resource and a ledger record read in one round trip.
struct Prefetched {
    handle: String,
    principal: String,
    operation_id: Option<String>,
    record: Option<Option<(Record, i64)>>,
    entry: Option<Option<LedgerEntry>>,
}

/// The current version of a handle and the ledger record of (principal, operation id), in one
/// row whichever of them exists. The parameters are wrapped in `CAST`: the bundled SQLite is
/// built with STAT4, which re-prepares a statement on every new binding of a bare parameter it
/// could use to plan (a tenth of a mutation's time here); an expression is not used for that,
/// and the plan stays two key searches.
const PREFETCH_SQL: &str = "SELECT r.kind, r.owner, r.version, r.state, r.lifecycle, r.expires_at,
         r.ledger_live, l.fingerprint, l.outcome, l.claim, l.handle, l.recorded_at, l.expires_at
     FROM (SELECT CAST(?1 AS TEXT) AS handle) AS wanted
     LEFT JOIN mcp_resources AS r ON r.handle = wanted.handle
     LEFT JOIN mcp_ledger AS l
         ON l.principal = CAST(?2 AS TEXT) AND l.operation_id = CAST(?3 AS TEXT)";

impl<'c> SqlTxn<'c> {
    fn new(connection: &'c Connection, states: &'c StateCache) -> Self {
        SqlTxn {
            connection,
            states,
            decoded: Vec::new(),
            loaded_count: None,
            counted: None,
            prefetched: None,
        }
    }
}

impl Txn for SqlTxn<'_> {
    fn prefetch(
        &mut self,
        handle: &str,
        principal: &str,
        operation_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut statement = self.connection.prepare_cached(PREFETCH_SQL)?;
        let mut rows = statement.query(params![handle, principal, operation_id])?;
        let row = rows
            .next()?
            .ok_or_else(|| StoreError::Backend("the prefetch returned no row".into()))?;
        let record = self.record_from(handle, row, 0)?;
        let entry = match operation_id {
            Some(_) => entry_from(row, 7)?,
            None => None,
        };
        self.prefetched = Some(Prefetched {
            handle: handle.to_owned(),
            principal: principal.to_owned(),
            operation_id: operation_id.map(str::to_owned),
            record: Some(record),
            entry: Some(entry),
        });
        Ok(())
    }

    fn ledger_get(
        &mut self,
        principal: &str,
        operation_id: &str,
    ) -> Result<Option<LedgerEntry>, StoreError> {
        if let Some(prefetched) = &mut self.prefetched
            && prefetched.principal == principal
            && prefetched.operation_id.as_deref() == Some(operation_id)
            && let Some(entry) = prefetched.entry.take()
        {
            return Ok(entry);
        }
        let mut statement = self.connection.prepare_cached(
            "SELECT fingerprint, outcome, claim, handle, recorded_at, expires_at
             FROM mcp_ledger WHERE principal = ?1 AND operation_id = ?2",
        )?;
        let mut rows = statement.query(params![principal, operation_id])?;
        match rows.next()? {
            Some(row) => entry_from(row, 0),
            None => Ok(None),
        }
    }

    fn ledger_put(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: LedgerEntry,
    ) -> Result<(), StoreError> {
        let (outcome, claim) = ledger_state_to_sql(&entry.state)?;
        self.connection
            .prepare_cached(
                "INSERT INTO mcp_ledger
                 (principal, operation_id, fingerprint, outcome, claim, handle, recorded_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                principal,
                operation_id,
                entry.fingerprint.to_hex(),
                outcome,
                claim,
                entry.handle,
                entry.recorded_at,
                entry.expires_at
            ])?;
        if let (Some(handle), Some(_)) = (&entry.handle, &outcome) {
            if self.counted.as_deref() == Some(handle) {
                self.counted = None;
            } else {
                self.count(handle, 1)?;
            }
        }
        Ok(())
    }

    fn ledger_remove(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: &LedgerEntry,
    ) -> Result<(), StoreError> {
        let removed = self
            .connection
            .prepare_cached("DELETE FROM mcp_ledger WHERE principal = ?1 AND operation_id = ?2")?
            .execute(params![principal, operation_id])?;
        // A sweep earlier in this transaction (at a full share) may have removed the row and
        // taken it off the count already.
        if removed == 1
            && let (Some(handle), LedgerState::Done(_)) = (&entry.handle, &entry.state)
        {
            self.count(handle, -1)?;
        }
        Ok(())
    }

    fn ledger_full(&mut self, handle: &str, quota: u64, now: i64) -> Result<bool, StoreError> {
        let quota = i64::try_from(quota).unwrap_or(i64::MAX);
        let live = match &self.loaded_count {
            Some((loaded, live)) if loaded == handle => *live,
            _ => self.live_count(handle)?,
        };
        if live < quota {
            return Ok(false);
        }
        // At the limit, expired records may still be counted until the sweep takes them off:
        // take a batch of them off now (bounded: this runs inside a request), so the limit
        // counts live records only.
        prune_ledger(self.connection, now)?;
        Ok(self.live_count(handle)? >= quota)
    }

    fn load(&mut self, handle: &str) -> Result<Option<Record>, StoreError> {
        let prefetched = match &mut self.prefetched {
            Some(prefetched) if prefetched.handle == handle => prefetched.record.take(),
            _ => None,
        };
        let loaded = match prefetched {
            Some(loaded) => loaded,
            None => {
                let mut statement = self.connection.prepare_cached(LOAD_SQL)?;
                let mut rows = statement.query([handle])?;
                match rows.next()? {
                    Some(row) => self.record_from(handle, row, 0)?,
                    None => None,
                }
            }
        };
        Ok(loaded.map(|(record, live)| {
            self.loaded_count = Some((handle.to_owned(), live));
            record
        }))
    }

    fn undo_since(
        &mut self,
        handle: &str,
        version: u64,
    ) -> Result<Option<Vec<Vec<Undo>>>, StoreError> {
        let rows = self
            .connection
            .prepare_cached(
                "SELECT version, undo FROM mcp_changes
                 WHERE handle = ?1 AND version > ?2 ORDER BY version DESC",
            )?
            .query_map(params![handle, version_to_sql(version)?], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let oldest = rows.last().map(|(kept, _)| *kept);
        if oldest != Some(version_to_sql(version)? + 1) {
            return Ok(None);
        }
        rows.iter()
            .map(|(_, undo)| json(undo, "stored history"))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn insert(&mut self, handle: &str, record: Record) -> Result<(), StoreError> {
        let state = to_json(&*record.state, "state")?;
        self.connection
            .prepare_cached(
                "INSERT INTO mcp_resources
                 (handle, kind, owner, version, state, lifecycle, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                handle,
                &*record.kind,
                &*record.owner,
                version_to_sql(record.version)?,
                state,
                record.lifecycle.as_str(),
                record.expires_at
            ])?;
        self.note_state(handle, record.version, &record.state);
        Ok(())
    }

    fn write(&mut self, handle: &str, record: Record, change: Change) -> Result<(), StoreError> {
        let Change {
            undo,
            drop_through,
            recorded,
            expiry_moved,
        } = change;
        let version = version_to_sql(record.version)?;
        // The boundary loaded version - 1 inside this write transaction; the condition makes
        // any second writer of the same version fail loudly instead of overwriting. The ledger
        // record that follows is counted here, in the same row update. SQLite rewrites an
        // index entry whenever its column is assigned, even to the value it has, so an expiry
        // that did not move is not assigned: the expiry index stays untouched.
        let state = to_json(&*record.state, "state")?;
        let (lifecycle, counted) = (record.lifecycle.as_str(), i64::from(recorded));
        let updated = if expiry_moved {
            self.connection
                .prepare_cached(
                    "UPDATE mcp_resources SET version = ?2, state = ?3, lifecycle = ?4,
                         ledger_live = ledger_live + ?5, expires_at = ?6
                     WHERE handle = ?1 AND version = ?2 - 1",
                )?
                .execute(params![
                    handle,
                    version,
                    state,
                    lifecycle,
                    counted,
                    record.expires_at
                ])?
        } else {
            self.connection
                .prepare_cached(
                    "UPDATE mcp_resources SET version = ?2, state = ?3, lifecycle = ?4,
                         ledger_live = ledger_live + ?5
                     WHERE handle = ?1 AND version = ?2 - 1",
                )?
                .execute(params![handle, version, state, lifecycle, counted])?
        };
        if recorded {
            self.counted = Some(handle.to_owned());
        }
        if updated != 1 {
            return Err(StoreError::Backend(format!(
                "{handle} moved past version {} during its own write transaction",
                version - 1
            )));
        }
        self.note_state(handle, record.version, &record.state);
        self.connection
            .prepare_cached("INSERT INTO mcp_changes (handle, version, undo) VALUES (?1, ?2, ?3)")?
            .execute(params![handle, version, to_json(&undo, "history")?])?;
        let drop_through = history_to_drop(drop_through);
        if drop_through > 0 {
            self.connection
                .prepare_cached("DELETE FROM mcp_changes WHERE handle = ?1 AND version <= ?2")?
                .execute(params![handle, version_to_sql(drop_through)?])?;
        }
        Ok(())
    }
}

/// The text in column `at`, borrowed from the row.
fn text_at<'r>(row: &'r rusqlite::Row<'_>, at: usize) -> Result<&'r str, StoreError> {
    row.get_ref(at)?
        .as_str()
        .map_err(|error| StoreError::Corrupt(format!("column {at} of a resource row: {error}")))
}

/// A ledger record from the 6 ledger columns starting at `at`; `None` when they are null.
fn entry_from(row: &rusqlite::Row<'_>, at: usize) -> Result<Option<LedgerEntry>, StoreError> {
    let Some(fingerprint) = row.get::<_, Option<String>>(at)? else {
        return Ok(None);
    };
    let outcome: Option<String> = row.get(at + 1)?;
    let state = ledger_state_from_sql(outcome.as_deref(), row.get(at + 2)?)?;
    Ok(Some(LedgerEntry {
        fingerprint: Fingerprint::from_hex(&fingerprint).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "a ledger row's fingerprint is not one: {fingerprint:?}"
            ))
        })?,
        state,
        handle: row.get(at + 3)?,
        recorded_at: row.get(at + 4)?,
        expires_at: row.get(at + 5)?,
    }))
}

impl SqlTxn<'_> {
    /// `handle`'s resource from the 7 columns of [`LOAD_SQL`] starting at `at`, with its
    /// `ledger_live`; `None` when they are null (a left join that found nothing). Its state is
    /// parsed only when the process has not decoded that version yet.
    fn record_from(
        &mut self,
        handle: &str,
        row: &rusqlite::Row<'_>,
        at: usize,
    ) -> Result<Option<(Record, i64)>, StoreError> {
        let Some(kind) = row.get::<_, Option<String>>(at)? else {
            return Ok(None);
        };
        let version = version_from_sql(row.get(at + 2)?)?;
        let state = match self.states.get(handle, version) {
            Some(state) => state,
            None => {
                // Borrowed from the row: the state is parsed where SQLite holds it, not copied
                // first.
                let text = text_at(row, at + 3)?;
                let state = Arc::new(json(text, "stored state")?);
                self.note_state(handle, version, &state);
                state
            }
        };
        let lifecycle = text_at(row, at + 4)?;
        let record = Record {
            kind: kind.into(),
            owner: text_at(row, at + 1)?.into(),
            version,
            state,
            lifecycle: Lifecycle::parse(lifecycle)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown lifecycle {lifecycle:?}")))?,
            expires_at: row.get(at + 5)?,
        };
        Ok(Some((record, row.get(at + 6)?)))
    }

    /// Notes a state for the process's cache, which takes it once this transaction commits.
    fn note_state(&mut self, handle: &str, version: u64, state: &Arc<Value>) {
        if !self.states.keeps_any() {
            return;
        }
        self.decoded.push(Decoded {
            handle: handle.to_owned(),
            version,
            state: Arc::clone(state),
            bytes: states::footprint(handle, state),
        });
    }

    /// What this transaction decoded or wrote, for the cache once it commits.
    fn take_decoded(&mut self) -> Vec<Decoded> {
        std::mem::take(&mut self.decoded)
    }

    fn live_count(&self, handle: &str) -> Result<i64, StoreError> {
        Ok(self
            .connection
            .prepare_cached("SELECT ledger_live FROM mcp_resources WHERE handle = ?1")?
            .query_row([handle], |row| row.get(0))
            .optional()?
            .unwrap_or(0))
    }

    /// Adds `by` to the number of ledger records counted against `handle`.
    fn count(&mut self, handle: &str, by: i64) -> Result<(), StoreError> {
        self.connection
            .prepare_cached(
                "UPDATE mcp_resources SET ledger_live = max(ledger_live + ?2, 0) WHERE handle = ?1",
            )?
            .execute(params![handle, by])?;
        if let Some((loaded, live)) = &mut self.loaded_count
            && loaded == handle
        {
            *live += by;
        }
        Ok(())
    }
}

impl SqliteStore {
    /// Runs `work` as one atomic unit on the writer; `work` sees the store's settings.
    async fn write<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut SqlTxn<'_>, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let answer = self
            .inner
            .writer
            .run(move |txn, now| work(txn, &inner.config, now))
            .await;
        self.inner.sweeper.count_write();
        answer
    }
}

impl boundary::CreateUnits for SqliteStore {
    type Txn<'t> = SqlTxn<'t>;

    const RUNS_WHEN_DROPPED: bool = true;

    fn unit<T, F>(
        &self,
        _: &Principal,
        _: Option<&str>,
        work: F,
    ) -> impl Future<Output = Result<T, StoreError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut SqlTxn<'_>, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
    {
        // One writer serializes every unit, so the ledger key needs no lock of its own.
        self.write(work)
    }

    fn abandon(&self, principal: &Principal, operation_id: &str, token: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (principal, operation_id) = (principal.clone(), operation_id.to_owned());
        let writer = Arc::clone(&self.inner.writer);
        runtime.spawn(async move {
            let released = writer
                .run(move |txn, _| boundary::abandon(txn, &principal, &operation_id, token))
                .await;
            if let Err(error) = released {
                tracing::warn!(%error, "could not give up an abandoned create's claim; it lapses on its own");
            }
        });
    }
}

impl Store for SqliteStore {
    fn create<'a>(&'a self, request: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome> {
        Box::pin(boundary::create(self, request))
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        Box::pin(async move { self.inner.read(&request) })
    }

    fn mutate(
        &self,
        request: MutationRequest,
        mut transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome> {
        Box::pin(self.write(move |txn, config, now| {
            boundary::mutate(txn, config, &request, &mut transition, now)
        }))
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            // The steps wait for the writer as the sweep thread does, on a blocking thread.
            tokio::task::spawn_blocking(move || {
                prune_in_steps(inner.config.ledger_retention, |step| {
                    inner
                        .writer
                        .run_blocking(move |txn, now| step.run(txn, now))
                })
            })
            .await
            .map_err(|error| StoreError::Task(error.to_string()))?
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::api::{Creation, Making};
    use rusqlite::StatementStatus;

    use super::*;

    /// A thread reads on a connection of its own lane: one another thread left idle is not
    /// handed over, and a thread's second read takes the connection its first one left.
    #[test]
    fn each_thread_reads_on_its_own_connection() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("lanes.db"), StoreConfig::default()).unwrap();
        let inner = &*store.inner;
        let idle = |lane: usize| lock(&inner.readers[lane]).len();
        let read = || inner.with_reader(|_| Ok(())).unwrap();
        let first = reader_lane();
        read();
        assert_eq!(idle(first), 1);
        // Threads take lanes in turn; other tests' threads may take some meanwhile.
        let second = (0..READER_LANES)
            .find_map(|_| {
                std::thread::scope(|scope| {
                    let other = scope.spawn(|| {
                        let lane = reader_lane();
                        (lane != first).then(|| {
                            read();
                            lane
                        })
                    });
                    other.join().unwrap()
                })
            })
            .expect("threads take different lanes");
        assert_eq!(
            idle(first),
            1,
            "the first thread's connection stayed in its lane"
        );
        assert_eq!(
            idle(second),
            1,
            "the second thread opened a connection of its own"
        );
        read();
        assert_eq!((idle(first), idle(second)), (1, 1));
    }

    /// A file with the store's layout, and the prune steps run on it as the sweep runs them, one
    /// transaction each, with the steps recorded.
    fn pruned(
        fill: impl FnOnce(&rusqlite::Transaction<'_>),
    ) -> (PruneReport, Vec<String>, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let mut connection =
            connect(&dir.path().join("prune.db"), &SqliteOptions::default()).unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let txn = connection.transaction().unwrap();
        fill(&txn);
        txn.commit().unwrap();
        let states = StateCache::new(0);
        let mut steps = Vec::new();
        let report = prune_in_steps(Duration::ZERO, |step| {
            steps.push(format!("{step:?}"));
            let txn = connection.transaction()?;
            let removed = step.run(&mut SqlTxn::new(&txn, &states), 1_000)?;
            txn.commit()?;
            Ok(removed)
        })
        .unwrap();
        (report, steps, connection)
    }

    fn count(connection: &Connection, table: &str) -> i64 {
        connection
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    }

    /// A prune takes every expired ledger record off, however far apart their rowids are
    /// (records replaced or given up leave gaps), a batch of rows at a time.
    #[test]
    fn a_prune_takes_every_expired_record_whatever_the_gaps() {
        let records = 3 * SWEEP_BATCH + 10;
        let (report, steps, connection) = pruned(|txn| {
            let mut insert = txn
                .prepare(
                    "INSERT INTO mcp_ledger
                     (seq, principal, operation_id, fingerprint, outcome, recorded_at, expires_at)
                     VALUES (?1, 'p', ?1, 'f', '{}', 0, 1)",
                )
                .unwrap();
            for n in 1..=records {
                insert.execute([5 * n]).unwrap();
            }
        });
        assert_eq!(report.ledger_records, records as u64);
        assert_eq!(count(&connection, "mcp_ledger"), 0);
        let ledger_steps = steps.iter().filter(|step| *step == "Ledger").count();
        assert_eq!(ledger_steps, 4, "{steps:?}");
    }

    /// A prune deletes expired resources, with their history, a batch at a time, each batch a
    /// transaction of its own: one transaction for all of them would hold the writer (and every
    /// other process's writers) for as long as they take.
    #[test]
    fn a_prune_deletes_expired_resources_a_batch_at_a_time() {
        let resources = SWEEP_BATCH + 10;
        let (report, steps, connection) = pruned(|txn| {
            let mut resource = txn
                .prepare(
                    "INSERT INTO mcp_resources
                     (handle, kind, owner, version, state, lifecycle, expires_at)
                     VALUES (?1, 'thing', 'p', 2, '{}', 'active', ?2)",
                )
                .unwrap();
            let mut change = txn
                .prepare("INSERT INTO mcp_changes (handle, version, undo) VALUES (?1, 2, '[]')")
                .unwrap();
            for n in 0..resources {
                let handle = format!("thg_{n}");
                resource.execute(params![handle, 1]).unwrap();
                change.execute([&handle]).unwrap();
            }
            // Expires after the prune's clock: kept.
            resource.execute(params!["thg_live", 2_000]).unwrap();
        });
        assert_eq!(report.resources, resources as u64);
        assert_eq!(count(&connection, "mcp_resources"), 1);
        assert_eq!(count(&connection, "mcp_changes"), 0);
        let resource_steps = steps
            .iter()
            .filter(|step| step.starts_with("Resources"))
            .count();
        assert_eq!(resource_steps, 2, "{steps:?}");
    }

    /// The load statement is prepared once and searches the primary key, whatever the handle.
    #[test]
    fn load_is_not_re_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut connection = connect(&path, &SqliteOptions::default()).unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let txn = connection.transaction().unwrap();
        let states = StateCache::new(0);
        for handle in ["ctr_a", "ctr_b", "ctr_c"] {
            let mut sql = SqlTxn::new(&txn, &states);
            assert!(sql.load(handle).unwrap().is_none());
        }
        let plan: String = txn
            .query_row(
                &format!("EXPLAIN QUERY PLAN {LOAD_SQL}"),
                ["ctr_a"],
                |row| row.get(3),
            )
            .unwrap();
        assert!(plan.contains("(handle=?)"), "{plan}");
        let statement = txn.prepare_cached(LOAD_SQL).unwrap();
        assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
    }

    /// The read that starts a mutation finds the resource and the ledger record by their keys,
    /// with no scan.
    #[test]
    fn the_prefetch_searches_both_keys() {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let plan: Vec<String> = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {PREFETCH_SQL}"))
            .unwrap()
            .query_map(params!["bsk_a", "alice", "op"], |row| row.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|step| step.contains("SEARCH r USING INDEX")),
            "{plan:?}"
        );
        assert!(
            plan.iter()
                .any(|step| step.contains("SEARCH l USING INDEX mcp_ledger_key")),
            "{plan:?}"
        );
        assert!(
            !plan
                .iter()
                .any(|step| step.starts_with("SCAN r") || step.starts_with("SCAN l")),
            "{plan:?}"
        );
    }

    /// The sweep of expired resources searches the expiry index, not the whole table.
    #[test]
    fn reclaim_uses_the_expiry_index() {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let plan: Vec<String> = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {RECLAIMABLE_SQL}"))
            .unwrap()
            .query_map([0, 1], |row| row.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|step| step.contains("mcp_resources_expiry")),
            "{plan:?}"
        );
    }

    /// Awaits a store call; fails the test after 30 s instead of hanging, or on an error.
    async fn within<T>(what: &str, call: impl Future<Output = Result<T, StoreError>>) -> T {
        tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .unwrap_or_else(|_| panic!("{what} timed out"))
            .unwrap_or_else(|error| panic!("{what}: {error}"))
    }

    /// A store whose clock never moves, so a claim left behind would never lapse.
    fn still_store(path: &Path, options: SqliteOptions) -> SqliteStore {
        let clock = crate::store::clock::ManualClock::at_millis(1_785_231_000_000);
        let config = StoreConfig {
            clock: Arc::new(clock),
            ..StoreConfig::default()
        };
        SqliteStore::open_with(path, config, options).unwrap()
    }

    /// A create of a note with the operation id `claimed`.
    fn claiming(making: Creation<'static>) -> CreateRequest<'static> {
        const NOTE: crate::store::EntityKind = crate::store::EntityKind::new("note", "nte");
        let fingerprint = crate::store::Fingerprint::of_call("create", &serde_json::json!({}));
        CreateRequest::deferred(NOTE, crate::auth::Principal::subject("alice"), making)
            .operation("claimed", fingerprint)
    }

    /// Retries a ready create of `claiming` until it is applied (the claim on its id given
    /// up), within the test's bound: the version it was applied at.
    async fn applied_once_free(store: &SqliteStore) -> u64 {
        within("the claim on the id to be given up", async {
            loop {
                let retry = store
                    .create(claiming(Creation::ready(serde_json::json!({}))))
                    .await?;
                match retry.applied() {
                    Some(applied) => break Ok(applied.version),
                    None => tokio::task::yield_now().await,
                }
            }
        })
        .await
    }

    /// A create dropped while its claim waits in the writer's queue gives the claim up once the
    /// writer has committed it (the writer runs what it was given, whoever still waits): a retry
    /// with the id then runs, instead of answering `OPERATION_IN_PROGRESS` until the lease ends.
    #[tokio::test]
    async fn a_create_dropped_before_its_claim_committed_gives_it_up() {
        use futures_util::FutureExt;
        let dir = tempfile::tempdir().unwrap();
        let store = still_store(&dir.path().join("claims.db"), SqliteOptions::default());
        let (started, writer_busy) = tokio::sync::oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let writer = Arc::clone(&store.inner.writer);
        let busy = tokio::spawn(async move {
            writer
                .run(move |_, _| {
                    let _ = started.send(());
                    let _ = released.recv();
                    Ok(())
                })
                .await
        });
        within("the writer to start the blocking unit", async {
            writer_busy.await.unwrap();
            Ok(())
        })
        .await;
        let mut create = store.create(claiming(Creation(Making::Deferred(Box::pin(async {
            Ok(serde_json::json!({}))
        })))));
        assert!(
            (&mut create).now_or_never().is_none(),
            "the claim waits behind the busy writer"
        );
        drop(create);
        release.send(()).unwrap();
        within("the blocking unit", async { busy.await.unwrap() }).await;
        assert_eq!(applied_once_free(&store).await, 1);
    }

    /// A create whose last unit failed (rolled back, so its claim is still there) gives the
    /// claim up: the retry runs at once instead of waiting for the lease to end.
    #[tokio::test]
    async fn a_create_whose_last_unit_failed_gives_its_claim_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claims.db");
        let options = SqliteOptions {
            busy_timeout: Duration::from_millis(100),
            ..SqliteOptions::default()
        };
        let store = still_store(&path, options);
        // Another process, which takes the file's write lock while the state is made (waiting
        // as long as it takes for the store's sweep, should it run then).
        let other = Arc::new(Mutex::new(
            connect(&path, &SqliteOptions::default()).unwrap(),
        ));
        let making = {
            let other = Arc::clone(&other);
            Box::pin(async move {
                lock(&other).execute_batch("BEGIN IMMEDIATE").unwrap();
                Ok(serde_json::json!({}))
            })
        };
        let failed = tokio::time::timeout(
            Duration::from_secs(30),
            store.create(claiming(Creation(Making::Deferred(making)))),
        )
        .await
        .expect("the create timed out");
        assert!(failed.is_err(), "{failed:?}");
        // Released before this task yields, so before the claim is given up.
        lock(&other).execute_batch("ROLLBACK").unwrap();
        assert_eq!(applied_once_free(&store).await, 1);
    }

    /// A transition setting one member of a JSON state.
    fn set(member: &'static str, value: serde_json::Value) -> Transition {
        Transition::new(move |state| {
            state[member] = value.clone();
            Ok(serde_json::Value::Null)
        })
    }

    /// A change that leaves the expiry where it was does not write the expiry column (so the
    /// expiry index is not rewritten); one that moves it writes it, and a read finds it.
    #[tokio::test]
    async fn an_expiry_that_did_not_move_is_not_written() {
        const CART: crate::store::EntityKind =
            crate::store::EntityKind::new("cart", "crt").with_ttl(Duration::from_secs(3_600));
        // 2026-07-28T09:30:00Z; the time to live's step is one second.
        let clock = crate::store::clock::ManualClock::at_millis(1_785_231_000_000);
        let config = StoreConfig {
            clock: Arc::new(clock.clone()),
            ..StoreConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = SqliteStore::open(&path, config).unwrap();
        let owner = Principal::subject("writer");
        let request = CreateRequest::new(CART, owner.clone(), serde_json::json!({ "n": 0 }));
        let created = within("the create", store.create(request)).await;
        let handle = created.applied().unwrap().handle.clone();
        Connection::open(&path)
            .unwrap()
            .execute_batch(
                "CREATE TABLE expiry_writes (n INTEGER NOT NULL);
                 INSERT INTO expiry_writes VALUES (0);
                 CREATE TRIGGER count_expiry_writes AFTER UPDATE OF expires_at ON mcp_resources
                 BEGIN UPDATE expiry_writes SET n = n + 1; END;",
            )
            .unwrap();
        let writes = || -> i64 {
            Connection::open(&path)
                .unwrap()
                .query_row("SELECT n FROM expiry_writes", [], |row| row.get(0))
                .unwrap()
        };
        let mut expiries = Vec::new();
        // After 250 ms the expiry moves to the next second; after 750 ms it is that one still;
        // after 1,250 ms it moves again.
        for (n, elapsed) in [(1, 250), (2, 500), (3, 500)] {
            clock.advance(Duration::from_millis(elapsed));
            let request = MutationRequest::new(CART, owner.clone(), &handle);
            let outcome = within("a change", store.mutate(request, set("n", n.into()))).await;
            let MutationOutcome::Applied(applied) = outcome else {
                panic!("{outcome:?}")
            };
            expiries.push((applied.resumption.expires_at.unwrap(), writes()));
        }
        let expected = [
            ("2026-07-28T10:30:01.000Z", 1),
            ("2026-07-28T10:30:01.000Z", 1),
            ("2026-07-28T10:30:02.000Z", 2),
        ];
        assert_eq!(expiries, expected.map(|(at, n)| (at.to_owned(), n)));
        let request = ReadRequest::new(CART, owner, &handle);
        let read = within("the read", store.read(request)).await;
        let snapshot = read.snapshot().expect("the cart is current");
        assert_eq!(snapshot.version, 4);
        assert_eq!(
            snapshot.resumption.expires_at.as_deref(),
            Some("2026-07-28T10:30:02.000Z")
        );
    }

    const NOTE: crate::store::EntityKind = crate::store::EntityKind::new("note", "nte");

    /// A store on `path` keeping `state_cache_bytes` of decoded states.
    fn cached_store(path: &Path, state_cache_bytes: usize) -> SqliteStore {
        let options = SqliteOptions {
            state_cache_bytes,
            ..SqliteOptions::default()
        };
        SqliteStore::open_with(path, StoreConfig::default(), options).unwrap()
    }

    async fn read_state(store: &SqliteStore, owner: &Principal, handle: &str) -> Arc<Value> {
        let read = within(
            "a read",
            store.read(ReadRequest::new(NOTE, owner.clone(), handle)),
        )
        .await;
        Arc::clone(&read.snapshot().expect("the note is current").state)
    }

    async fn change(
        store: &SqliteStore,
        owner: &Principal,
        handle: &str,
        text: &str,
    ) -> Arc<Value> {
        let request = MutationRequest::new(NOTE, owner.clone(), handle);
        let outcome = within("a change", store.mutate(request, set("text", text.into()))).await;
        let MutationOutcome::Applied(applied) = outcome else {
            panic!("{outcome:?}")
        };
        applied.state
    }

    /// A state the process wrote or decoded is not parsed again: reads answer the very value
    /// the last write made, until the next write; with no cache every read parses its own.
    #[tokio::test]
    async fn reads_share_the_state_the_last_write_made() {
        let dir = tempfile::tempdir().unwrap();
        let owner = Principal::subject("writer");
        for (budget, shared) in [(1 << 20, true), (0, false)] {
            let store = cached_store(&dir.path().join(format!("{budget}.db")), budget);
            let request =
                CreateRequest::new(NOTE, owner.clone(), serde_json::json!({ "text": "a" }));
            let created = within("the create", store.create(request)).await;
            let handle = created.applied().unwrap().handle.clone();
            let written = change(&store, &owner, &handle, "b").await;
            let first = read_state(&store, &owner, &handle).await;
            let second = read_state(&store, &owner, &handle).await;
            assert_eq!(*first, serde_json::json!({ "text": "b" }));
            assert_eq!(first, second);
            assert_eq!(Arc::ptr_eq(&written, &first), shared, "budget {budget}");
            assert_eq!(Arc::ptr_eq(&first, &second), shared, "budget {budget}");
        }
    }

    /// A state read back from the file is the state that was written, floats to the last bit:
    /// the value a process holds decoded and the one another process parses are the same.
    #[tokio::test]
    async fn a_state_parsed_from_the_file_is_the_state_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("floats.db");
        let (writer, reader) = (cached_store(&path, 1 << 20), cached_store(&path, 0));
        let owner = Principal::subject("writer");
        // The first: a parse that is not correctly rounded reads it one bit off; the others are
        // further full-precision floats.
        let totals = [30.366074329203574, 0.1 + 0.2, 1e-7 / 3.0, 987.654321012345];
        let state = serde_json::json!({ "text": "a", "totals": totals });
        let created = within(
            "the create",
            writer.create(CreateRequest::new(NOTE, owner.clone(), state)),
        )
        .await;
        let handle = created.applied().unwrap().handle.clone();
        let written = change(&writer, &owner, &handle, "b").await;
        let parsed = read_state(&reader, &owner, &handle).await;
        let bits = |state: &Value| -> Vec<u64> {
            state["totals"]
                .as_array()
                .unwrap()
                .iter()
                .map(|total| total.as_f64().unwrap().to_bits())
                .collect()
        };
        assert_eq!(bits(&parsed), bits(&written));
        assert_eq!(bits(&written), totals.map(f64::to_bits));
    }

    /// Two stores on one file, as two processes would open it: each one's decoded states never
    /// hide the other's writes, from its reads or from its own next write.
    #[tokio::test]
    async fn a_write_by_another_process_is_never_answered_from_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let (one, two) = (cached_store(&path, 1 << 20), cached_store(&path, 1 << 20));
        let owner = Principal::subject("writer");
        let request = CreateRequest::new(NOTE, owner.clone(), serde_json::json!({ "text": "a" }));
        let created = within("the create", one.create(request)).await;
        let handle = created.applied().unwrap().handle.clone();
        assert_eq!(
            *read_state(&one, &owner, &handle).await,
            serde_json::json!({ "text": "a" })
        );
        assert_eq!(
            *read_state(&two, &owner, &handle).await,
            serde_json::json!({ "text": "a" })
        );

        change(&two, &owner, &handle, "b").await;
        // `one` holds version 1 decoded; its write bases version 3 on the file's version 2.
        let request = MutationRequest::new(NOTE, owner.clone(), &handle);
        let appended = Transition::new(|state| {
            let text = format!("{}c", state["text"].as_str().unwrap_or_default());
            state["text"] = text.into();
            Ok(Value::Null)
        });
        let outcome = within("an append", one.mutate(request, appended)).await;
        let MutationOutcome::Applied(applied) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(
            (applied.version, &*applied.state),
            (3, &serde_json::json!({ "text": "bc" }))
        );
        // `two` holds version 2: its read finds version 3.
        assert_eq!(
            *read_state(&two, &owner, &handle).await,
            serde_json::json!({ "text": "bc" })
        );
        change(&two, &owner, &handle, "d").await;
        change(&one, &owner, &handle, "e").await;
        for store in [&one, &two] {
            let read = within(
                "a read",
                store.read(ReadRequest::new(NOTE, owner.clone(), &handle)),
            )
            .await;
            let snapshot = read.snapshot().expect("current");
            assert_eq!(
                (snapshot.version, &*snapshot.state),
                (5, &serde_json::json!({ "text": "e" }))
            );
        }
        let history = within(
            "a read since version 2",
            two.read(ReadRequest::new(NOTE, owner.clone(), &handle).since(2)),
        )
        .await;
        assert!(
            history
                .snapshot()
                .unwrap()
                .changes
                .as_ref()
                .unwrap()
                .delta_available
        );
    }

    /// A file of the earlier layout, which kept a copy of the state per version, is refused
    /// with a message that says so, and is left as it was.
    #[test]
    fn a_file_of_the_earlier_layout_is_refused_not_misread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE mcp_versions (handle TEXT, version INTEGER, kind TEXT, owner TEXT,
                 state TEXT, lifecycle TEXT, expires_at INTEGER, PRIMARY KEY (handle, version));
             INSERT INTO mcp_versions VALUES ('bsk_a', 1, 'basket', 'anonymous', '{}', 'active', NULL);",
        )
        .unwrap();
        drop(old);
        let error = SqliteStore::open(&path, StoreConfig::default())
            .err()
            .expect("the old layout is refused");
        let message = error.to_string();
        assert!(message.contains("earlier pre-release"), "{message}");
        assert!(message.contains("new file"), "{message}");
        let tables: i64 = Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'mcp_resources'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(tables, 0, "nothing was added to the old file");
    }

    /// The size of the write-ahead log after [`LOG_WRITES`] mutations that each rewrite a 32 KB
    /// body (SQLite skips the pages of a row that did not change) and keep the old one as
    /// history, on a store that checkpoints past `checkpoint_pages`; and the file's page size.
    /// A log file never shrinks, so its size is the most it ever held.
    async fn log_after(checkpoint_pages: u32) -> (u64, u64) {
        const DOCUMENT: crate::store::EntityKind = crate::store::EntityKind::new("document", "doc");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let options = SqliteOptions {
            checkpoint_pages,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(&path, StoreConfig::default(), options).unwrap();
        let owner = Principal::subject("writer");
        let body = |write: u64| {
            char::from(b'a' + (write % 26) as u8)
                .to_string()
                .repeat(32 << 10)
        };
        let request = CreateRequest::new(
            DOCUMENT,
            owner.clone(),
            serde_json::json!({ "body": body(25) }),
        );
        let created = within("the create", store.create(request)).await;
        let handle = created.applied().unwrap().handle.clone();
        for write in 0..LOG_WRITES {
            let request = MutationRequest::new(DOCUMENT, owner.clone(), &handle);
            let outcome = within(
                "a write",
                store.mutate(request, set("body", body(write).into())),
            )
            .await;
            assert!(
                matches!(outcome, MutationOutcome::Applied(_)),
                "{outcome:?}"
            );
        }
        let page_size: i64 = store
            .inner
            .with_reader(|connection| {
                Ok(connection.query_row("PRAGMA page_size", [], |row| row.get(0))?)
            })
            .unwrap();
        let log = std::fs::metadata(dir.path().join("state.db-wal"))
            .unwrap()
            .len();
        (log, page_size as u64)
    }

    /// The checkpoint limit of the two log tests, in pages.
    const LOG_LIMIT: u32 = 200;
    /// The writes of the two log tests: twenty times [`LOG_LIMIT`] in pages of 4 KiB.
    const LOG_WRITES: u64 = 250;

    /// The pages [`LOG_WRITES`] writes of [`log_after`] put in the log at least: the new body
    /// and the old one kept as history, each.
    fn written_pages(page_size: u64) -> u64 {
        2 * (32u64 << 10).div_ceil(page_size) * LOG_WRITES
    }

    /// The write-ahead log stops growing: the checkpoints that follow the commits copy it into
    /// the file and let the next commit start it afresh. The writes add up to twenty times the
    /// checkpoint limit, which the log would hold without the checkpoints.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checkpoints_keep_the_log_short() {
        let (log, page_size) = log_after(LOG_LIMIT).await;
        let written = written_pages(page_size);
        assert!(written >= 20 * u64::from(LOG_LIMIT), "{written} pages");
        let most = 10 * u64::from(LOG_LIMIT) * page_size;
        assert!(
            log < most,
            "the log grew to {log} bytes over {LOG_WRITES} writes; checkpoints past {LOG_LIMIT} \
             pages keep it under {most}"
        );
    }

    /// The checkpoint limit is the store's, not SQLite's default of 1,000 pages: under a
    /// larger one the log holds every write of the same run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_is_checkpointed_at_the_configured_size() {
        let limit = 100 * LOG_LIMIT;
        let (log, page_size) = log_after(limit).await;
        let written = written_pages(page_size);
        assert!(written < u64::from(limit), "{written} pages");
        assert!(
            log >= written * page_size,
            "the log holds {log} bytes after {LOG_WRITES} writes of {written} pages or more \
             under a limit of {limit} pages: it was checkpointed sooner"
        );
    }

    /// A file whose recorded layout is not this version's is refused.
    #[test]
    fn a_file_of_another_recorded_layout_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
        Connection::open(&path)
            .unwrap()
            .execute("UPDATE mcp_meta SET value = '3' WHERE key = 'layout'", [])
            .unwrap();
        let message = SqliteStore::open(&path, StoreConfig::default())
            .err()
            .expect("another layout is refused")
            .to_string();
        assert!(message.contains("layout 3"), "{message}");
        assert!(SqliteStore::open(dir.path().join("new.db"), StoreConfig::default()).is_ok());
    }
}
