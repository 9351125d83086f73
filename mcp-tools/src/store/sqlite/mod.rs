//! The embedded durable store: one SQLite file in WAL mode, shared safely by several processes.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

mod checkpoint;
mod outbox;
mod schema;
mod states;
mod tasks;
#[cfg(test)]
mod tests;
mod txn;
mod writer;

use schema::{LAYOUT, SCHEMA, check_layout, connect};
use states::StateCache;
use txn::SqlTxn;
use writer::Writer;

use crate::auth::Principal;
use crate::store::api::{
    CreateRequest, MutationRequest, PruneReport, ReadRequest, Store, StoreConfig, Transition,
};
use crate::store::boundary;
use crate::store::clock::duration_millis;
use crate::store::error::{StoreError, StoreFuture};
use crate::store::outcome::{MutationOutcome, ReadOutcome};
use crate::store::sweeper::Sweeper;
// An open transaction rolls back when a panic unwinds through it; the connection stays usable.
use crate::sync::lock;

/// Up to [`SWEEP_BATCH`] resources that expired at or before `?1`. The limit is written into
/// the SQL: a bound LIMIT expires the statement on every binding (the planner may use its
/// value), so each sweep step would parse and plan it again.
const RECLAIMABLE_SQL: &str = "SELECT handle FROM mcp_resources WHERE expires_at <= ?1 LIMIT 4096";

/// Ledger rows or resources one sweep transaction deletes at most, so in-process writers wait
/// for a short transaction only.
const SWEEP_BATCH: i64 = 4096;
const _: () = assert!(SWEEP_BATCH == 4096, "RECLAIMABLE_SQL writes the batch out");

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
#[non_exhaustive]
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
    /// Wakes this process's effect delivery.
    outbox_signal: Arc<tokio::sync::Notify>,
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
            outbox_signal: Arc::default(),
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
            // A read of collection items reads them from the snapshot its state is from.
            if request.since.is_none() && request.kind.collections.is_empty() {
                let mut txn = SqlTxn::new(connection, &self.states);
                let outcome = boundary::read(&mut txn, &self.config, request, now);
                self.states.publish(txn.take_decoded());
                return outcome;
            }
            // The state, its history and its items from one snapshot of the file. `BEGIN` and
            // `COMMIT` are cached statements: a read parses no SQL.
            connection.prepare_cached("BEGIN")?.execute([])?;
            let mut txn = SqlTxn::new(connection, &self.states);
            let outcome = boundary::read(&mut txn, &self.config, request, now);
            let decoded = txn.take_decoded();
            let ended = connection.prepare_cached("COMMIT")?.execute([]);
            if ended.is_err() {
                // A read-only transaction has nothing to lose; the connection goes back clean.
                let _ = connection.execute_batch("ROLLBACK");
            }
            ended?;
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
    /// Up to [`SWEEP_BATCH`] effects settled longer ago than `retention`.
    Effects { retention: Duration },
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
                    .query_map([cutoff], |row| row.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                let mut resource = txn
                    .connection
                    .prepare_cached("DELETE FROM mcp_resources WHERE handle = ?1")?;
                let mut changes = txn
                    .connection
                    .prepare_cached("DELETE FROM mcp_changes WHERE handle = ?1")?;
                let mut items = txn
                    .connection
                    .prepare_cached("DELETE FROM mcp_items WHERE handle = ?1")?;
                let mut removals = txn
                    .connection
                    .prepare_cached("DELETE FROM mcp_item_removals WHERE handle = ?1")?;
                for handle in &handles {
                    resource.execute([handle])?;
                    changes.execute([handle])?;
                    items.execute([handle])?;
                    removals.execute([handle])?;
                }
                Ok(handles.len() as u64)
            }
            PruneStep::Effects { retention } => {
                let cutoff = now.saturating_sub(duration_millis(retention));
                Ok(txn
                    .connection
                    .prepare_cached(outbox::PRUNE_SQL)?
                    .execute([cutoff])? as u64)
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
            break;
        }
    }
    loop {
        let removed = run(PruneStep::Effects { retention })?;
        report.effects += removed;
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
pub(super) fn prune_ledger(connection: &Connection, now: i64) -> Result<u64, StoreError> {
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
    /// A file other processes may open, and that outlives this one.
    fn shared_by_processes(&self) -> bool {
        true
    }

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

    /// One writer serializes every unit, so a step's resources need no lock order of their own.
    fn mutate_step(
        &self,
        request: crate::store::step::StepRequest,
        mut transition: crate::store::step::StepTransition,
    ) -> StoreFuture<'_, crate::store::step::StepOutcome> {
        Box::pin(self.write(move |txn, config, now| {
            boundary::step::step(txn, config, &request, &mut transition, now)
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
