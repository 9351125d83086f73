//! The in-process store: sharded maps and one lock per handle, no global lock on the hot path.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::BuildHasher;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use arc_swap::ArcSwap;

use serde_json::Value;

use super::boundary::{self, Change, LedgerEntry, LedgerState, Record, Txn};
use super::clock::duration_millis;
use super::fingerprint::Fingerprint;
use super::history::Undo;
use super::outcome::{MutationOutcome, ReadOutcome, RecordedApplied, RecordedOutcome};
use super::sweeper::Sweeper;
use super::tasks::record::TaskRecord;
use super::tasks::{TaskChange, TaskInsert, TaskStore};
use crate::auth::Principal;
use crate::store::api::{
    CreateRequest, MutationRequest, PruneReport, ReadRequest, Store, StoreConfig, Transition,
};
use crate::store::error::{StoreError, StoreFuture};
// A panicking transition only ever changed a copy, so the data behind a poisoned lock is intact.
use crate::sync::{lock, read, write};

const SHARDS: usize = 64;
/// Locks for operation ids, each shared by the ids whose keys fall on it. A fixed table instead
/// of a lock per record: two ids rarely share one, and sharing only makes one wait for the other
/// (asynchronously, as for a resource's turn).
const OPERATION_LOCKS: usize = 1024;
/// Writes between two automatic sweeps. A sweep runs on the store's own thread and locks one
/// shard at a time, so no request pays for it or waits for more than one shard's pass.
const SWEEP_EVERY: u64 = 4096;

type ResourceShard = RwLock<HashMap<String, Arc<Cell>>>;
/// Ledger records by [`LedgerKey`], kept in the map's own table.
type LedgerShard = Mutex<HashMap<LedgerKey, Kept>>;

/// The SHA-256 digest of (principal, operation id), each part length-prefixed so distinct pairs
/// stay distinct. A record is keyed by it rather than by a copy of its two strings: keys and
/// records then live in the map's table, with no allocation of their own per record. Records
/// outlive the requests around them by hours, and each small block the heap keeps between
/// short-lived ones slows every later request. Two pairs share a digest with the odds of a
/// SHA-256 collision, as two different calls share an argument fingerprint.
type LedgerKey = [u8; 32];

fn ledger_key(principal: &str, operation_id: &str) -> LedgerKey {
    use sha2::{Digest, Sha256};
    Sha256::new()
        .chain_update((principal.len() as u64).to_be_bytes())
        .chain_update(principal)
        .chain_update(operation_id)
        .finalize()
        .into()
}

/// One resource. Writers hold `guarded` for the whole boundary; readers only load `current`, so
/// they never wait for a writer.
struct Cell {
    /// The resource's handle, shared with the ledger records that count against it.
    handle: Arc<str>,
    /// Whose turn it is to hold `guarded`: a change (or a read of what changed) waits here,
    /// giving its runtime worker back, while another change's transition runs. A transition
    /// decodes and encodes the whole state and may take milliseconds; blocked on `guarded`
    /// meanwhile, the waiting changes of one busy resource would each keep a worker from every
    /// other request.
    turn: tokio::sync::Mutex<()>,
    guarded: Mutex<Guarded>,
    current: ArcSwap<Record>,
}

/// A ledger record as this store keeps it for its retention. The handle it counts against is
/// the resource's own, shared rather than copied, and an `applied` summary does not repeat it:
/// a record owns few small allocations of its own, and since records outlive the requests around
/// them by hours, each one the heap keeps between short-lived blocks costs every later request.
/// For the same reason the common outcomes are kept inline and small, and the rare ones boxed:
/// the ledger's table holds one slot of this size for every record, whatever its outcome.
struct Kept {
    fingerprint: Fingerprint,
    handle: Option<Arc<str>>,
    outcome: KeptOutcome,
    recorded_at: i64,
    expires_at: i64,
}

enum KeptOutcome {
    /// A create claimed the operation id and is making its state.
    Pending { token: u64 },
    /// An `applied` summary about the record's handle.
    Applied {
        version: u64,
        result: Value,
        /// Versions start at 1, so no rebase is from version 0.
        rebased_from: Option<NonZeroU64>,
    },
    /// Any other outcome, as recorded.
    Done(Box<RecordedOutcome>),
}

impl Kept {
    /// Keeps `entry`, sharing `shared` as its handle when they are the same.
    fn keep(entry: LedgerEntry, shared: Option<&Arc<str>>) -> Self {
        let handle = entry.handle.map(|handle| match shared {
            Some(shared) if **shared == *handle => Arc::clone(shared),
            _ => Arc::from(handle),
        });
        let outcome = match entry.state {
            LedgerState::Pending { token } => KeptOutcome::Pending { token },
            LedgerState::Done(RecordedOutcome::Applied(applied))
                if handle.as_deref() == Some(applied.handle.as_str())
                    && applied.rebased_from != Some(0) =>
            {
                KeptOutcome::Applied {
                    version: applied.version,
                    result: applied.result,
                    rebased_from: applied.rebased_from.and_then(NonZeroU64::new),
                }
            }
            LedgerState::Done(outcome) => KeptOutcome::Done(Box::new(outcome)),
        };
        Kept {
            fingerprint: entry.fingerprint,
            handle,
            outcome,
            recorded_at: entry.recorded_at,
            expires_at: entry.expires_at,
        }
    }

    /// The record as the boundary reads it.
    fn entry(&self) -> LedgerEntry {
        let state = match &self.outcome {
            KeptOutcome::Pending { token } => LedgerState::Pending { token: *token },
            KeptOutcome::Applied {
                version,
                result,
                rebased_from,
            } => LedgerState::Done(RecordedOutcome::Applied(RecordedApplied {
                handle: self.handle.as_deref().unwrap_or_default().to_owned(),
                version: *version,
                result: result.clone(),
                rebased_from: rebased_from.map(NonZeroU64::get),
            })),
            KeptOutcome::Done(outcome) => LedgerState::Done(RecordedOutcome::clone(outcome)),
        };
        LedgerEntry {
            fingerprint: self.fingerprint,
            state,
            handle: self.handle.as_deref().map(str::to_owned),
            recorded_at: self.recorded_at,
            expires_at: self.expires_at,
        }
    }
}

/// What only the resource's writer touches.
#[derive(Default)]
struct Guarded {
    /// Undo patches of the kept versions, oldest first.
    history: VecDeque<(u64, Vec<Undo>)>,
    /// Expiry of each ledger record counted against the resource, in recording order.
    ledger: VecDeque<i64>,
}

/// A store that keeps everything in process memory; state is lost when the process ends.
///
/// Resources and ledger records live in 64 shards each. A mutation first waits for its
/// resource's turn, then for its operation id's (when it has one; ids share 1024 locks), both
/// asynchronously: the requests queued behind a slow change give their runtime workers back to
/// other requests. It then locks its handle's entry, and holds all three for the whole boundary,
/// always taken in that order; shard locks are held only to find, insert or remove an entry.
/// Requests on different handles with operation ids on different locks never wait for each
/// other, and reads wait for nobody: they load the published current version (a read of what
/// changed since a version takes the resource's turn, to read the state and its history of one
/// moment).
///
/// Expired ledger records and long-expired resources are swept every few thousand writes (and
/// when the store is idle) on a thread of the store's own, a shard at a time (see
/// [`Store::prune`] to sweep now).
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: StoreConfig,
    hasher: RandomState,
    resources: Box<[ResourceShard]>,
    ledger: Box<[LedgerShard]>,
    operation_locks: Box<[tokio::sync::Mutex<()>]>,
    /// No ledger record expires before this instant (a lower bound).
    ledger_due: AtomicI64,
    /// No resource is reclaimable before this instant (a lower bound).
    resources_due: AtomicI64,
    /// Task records by id, sharded like the resources: a shard's table grows (and rehashes)
    /// under its own lock, so a growing table stalls only the tasks that hash to it.
    tasks: Box<[Mutex<HashMap<String, TaskRecord>>]>,
    sweeper: Sweeper,
}

impl MemoryStore {
    /// An empty store.
    pub fn new(config: StoreConfig) -> Self {
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            config,
            hasher: RandomState::new(),
            resources: (0..SHARDS).map(|_| RwLock::default()).collect(),
            ledger: (0..SHARDS).map(|_| Mutex::default()).collect(),
            operation_locks: (0..OPERATION_LOCKS)
                .map(|_| tokio::sync::Mutex::default())
                .collect(),
            ledger_due: AtomicI64::new(i64::MAX),
            resources_due: AtomicI64::new(i64::MAX),
            tasks: (0..SHARDS).map(|_| Mutex::default()).collect(),
            sweeper: Sweeper::spawn(weak.clone(), Inner::sweep, SWEEP_EVERY),
        });
        MemoryStore { inner }
    }

    /// How many resources the store holds, expired ones included (for tests that count what
    /// was actually created).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn resource_count_for_tests(&self) -> usize {
        self.inner.resource_count()
    }

    /// How many ledger records the store holds, expired ones included (for tests that check what
    /// a failed request leaves behind).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn ledger_count_for_tests(&self) -> usize {
        self.inner.ledger_count()
    }
}

/// Tasks in a map: durable only within this process, and visible only to servers in it that
/// share this store.
impl TaskStore for MemoryStore {
    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsert> {
        let mut tasks = lock(self.inner.task_shard(task.id()));
        let outcome = match tasks.entry(task.id().to_owned()) {
            std::collections::hash_map::Entry::Occupied(mut existing)
                if existing.get().expires_at_ms() <= task.created_at_ms() =>
            {
                existing.insert(task);
                TaskInsert::Inserted
            }
            std::collections::hash_map::Entry::Occupied(existing) => {
                TaskInsert::Existing(Box::new(existing.get().clone()))
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(task);
                TaskInsert::Inserted
            }
        };
        Box::pin(std::future::ready(Ok(outcome)))
    }

    fn load_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        let found = lock(self.inner.task_shard(id)).get(id).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn update_task<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        let mut tasks = lock(self.inner.task_shard(id));
        let found = tasks.get_mut(id).map(|record| {
            // The change works on a copy, so a panic in it leaves the record as it was.
            let mut changed = record.clone();
            if change.apply(&mut changed) {
                *record = changed;
            }
            record.clone()
        });
        Box::pin(std::future::ready(Ok(found)))
    }

    fn purge_tasks(&self, now_ms: u64) -> StoreFuture<'_, u64> {
        let mut purged = 0;
        for shard in &self.inner.tasks {
            let mut tasks = lock(shard);
            let before = tasks.len();
            tasks.retain(|_, record| record.expires_at_ms() >= now_ms);
            purged += (before - tasks.len()) as u64;
        }
        Box::pin(std::future::ready(Ok(purged)))
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(StoreConfig::default())
    }
}

impl Inner {
    fn task_shard(&self, id: &str) -> &Mutex<HashMap<String, TaskRecord>> {
        &self.tasks[self.shard_of(&id)]
    }

    fn shard_of<K: std::hash::Hash>(&self, key: &K) -> usize {
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    fn cell(&self, handle: &str) -> Option<Arc<Cell>> {
        let shard = read(&self.resources[self.shard_of(&handle)]);
        shard.get(handle).cloned()
    }

    /// Holds the operation id of (principal, operation id) for one request, once it is its
    /// turn.
    async fn hold(&self, principal: &str, operation_id: &str) -> Held<'_> {
        let key = ledger_key(principal, operation_id);
        let lock = &self.operation_locks[operation_lock(&key)];
        Held {
            shard: &self.ledger[usize::from(key[0]) % SHARDS],
            key,
            _operation: lock.lock().await,
        }
    }

    /// [`hold`](Self::hold), when nobody holds the id's lock now.
    fn try_hold(&self, principal: &str, operation_id: &str) -> Option<Held<'_>> {
        let key = ledger_key(principal, operation_id);
        let lock = &self.operation_locks[operation_lock(&key)];
        Some(Held {
            shard: &self.ledger[usize::from(key[0]) % SHARDS],
            key,
            _operation: lock.try_lock().ok()?,
        })
    }

    /// How many ledger records the store holds, expired ones included.
    #[cfg(feature = "test-hooks")]
    fn ledger_count(&self) -> usize {
        self.ledger.iter().map(|shard| lock(shard).len()).sum()
    }

    fn prune(&self) -> PruneReport {
        let now = self.config.clock.now_millis();
        PruneReport {
            ledger_records: self.prune_ledger(now),
            resources: self.prune_resources(now),
        }
    }

    /// The automatic sweep, on the sweep thread: each map is swept only once something in it
    /// is due, so a store whose records are all live costs the sweep nothing.
    fn sweep(&self) {
        let now = self.config.clock.now_millis();
        if self.ledger_due.load(Ordering::Relaxed) <= now {
            self.prune_ledger(now);
        }
        if self.resources_due.load(Ordering::Relaxed) <= now {
            self.prune_resources(now);
        }
    }

    /// Removes the ledger records past their retention, a shard at a time, and notes when the
    /// earliest of the others falls due. Writes lower that instant as they record, so it is
    /// never later than the earliest record.
    fn prune_ledger(&self, now: i64) -> u64 {
        self.ledger_due.store(i64::MAX, Ordering::Relaxed);
        let mut removed = 0;
        let mut due = i64::MAX;
        for shard in 0..SHARDS {
            removed += self.prune_ledger_shard(shard, now, &mut due);
        }
        self.ledger_due.fetch_min(due, Ordering::Relaxed);
        removed
    }

    /// Removes the resources that expired longer ago than the ledger retention, as
    /// [`Inner::prune_ledger`] does for records.
    fn prune_resources(&self, now: i64) -> u64 {
        self.resources_due.store(i64::MAX, Ordering::Relaxed);
        let mut removed = 0;
        let mut due = i64::MAX;
        for shard in 0..SHARDS {
            removed += self.prune_resource_shard(shard, now, &mut due);
        }
        self.resources_due.fetch_min(due, Ordering::Relaxed);
        removed
    }

    /// Removes the ledger records of one shard past their retention.
    fn prune_ledger_shard(&self, shard: usize, now: i64, due: &mut i64) -> u64 {
        let mut removed = 0;
        // A request holding an expired record's operation id may have read it: it treats it as
        // gone already, and what it writes next replaces it or removes nothing.
        lock(&self.ledger[shard]).retain(|_, kept| {
            if kept.expires_at > now {
                *due = (*due).min(kept.expires_at);
                return true;
            }
            removed += 1;
            false
        });
        removed
    }

    /// Notes when `record`, just written, becomes reclaimable.
    fn resource_falls_due(&self, record: &Record) {
        if let Some(at) = record.expires_at {
            let retention = duration_millis(self.config.ledger_retention);
            self.resources_due
                .fetch_min(at.saturating_add(retention), Ordering::Relaxed);
        }
    }

    /// Removes the resources of one shard that expired longer ago than the ledger retention.
    fn prune_resource_shard(&self, shard: usize, now: i64, due: &mut i64) -> u64 {
        let retention = duration_millis(self.config.ledger_retention);
        let cutoff = now.saturating_sub(retention);
        let mut removed = 0;
        write(&self.resources[shard]).retain(|_, cell| {
            // Clones of a cell are only taken under the shard lock, so a count of one means
            // no request holds it. An expired resource is never written
            // again, so its expiry cannot move once it is past.
            if Arc::strong_count(cell) > 1 {
                *due = (*due).min(now);
                return true;
            }
            let expires_at = cell.current.load().expires_at;
            let reclaim = expires_at.is_some_and(|at| at <= cutoff);
            if reclaim {
                removed += 1;
            } else if let Some(at) = expires_at {
                *due = (*due).min(at.saturating_add(retention));
            }
            !reclaim
        });
        removed
    }

    /// How many resources the store holds, expired ones included.
    #[cfg(any(test, feature = "test-hooks"))]
    fn resource_count(&self) -> usize {
        self.resources.iter().map(|shard| read(shard).len()).sum()
    }

    /// Reads `cell`, the resource `request` names (if it exists), once it is the read's turn
    /// when it asks what changed.
    fn read(&self, cell: Option<&Cell>, request: &ReadRequest) -> Result<ReadOutcome, StoreError> {
        let now = self.config.clock.now_millis();
        // A plain read takes no lock; one that asks what changed reads the history, and holds
        // the cell's lock so the state and its history are of one moment.
        let mut guarded = match request.since {
            Some(_) => cell.map(|cell| lock(&cell.guarded)),
            None => None,
        };
        let mut txn = MemoryTxn {
            inner: self,
            held: None,
            cell: cell.map(|cell| (request.handle.as_str(), cell)),
            guarded: guarded.as_deref_mut(),
            inserted: None,
        };
        boundary::read(&mut txn, &self.config, request, now)
    }

    /// Runs a change of `cell`, the resource `request` names (if it exists), once it is the
    /// change's turn and it holds its operation id (`held`).
    fn mutate(
        &self,
        cell: Option<&Cell>,
        held: Option<Held<'_>>,
        request: &MutationRequest,
        transition: &mut Transition,
    ) -> Result<MutationOutcome, StoreError> {
        let mut guarded = cell.map(|cell| lock(&cell.guarded));
        let now = self.config.clock.now_millis();
        let mut txn = MemoryTxn {
            inner: self,
            held: held.as_ref(),
            cell: cell.map(|cell| (request.handle.as_str(), cell)),
            guarded: guarded.as_deref_mut(),
            inserted: None,
        };
        let outcome = boundary::mutate(&mut txn, &self.config, request, transition, now);
        drop(guarded);
        drop(held);
        self.sweeper.count_write();
        outcome
    }

    /// Runs `work` on a transaction holding a create's operation id (`held`).
    /// Gives up a create's claim `token` on the id `held`; a claim no longer this create's is
    /// left alone.
    fn give_up(&self, held: Held<'_>, principal: &Principal, operation_id: &str, token: u64) {
        let _ = self.with_operation(Some(held), |txn, _| {
            boundary::abandon(txn, principal, operation_id, token)
        });
    }

    fn with_operation<T>(
        &self,
        held: Option<Held<'_>>,
        work: impl FnOnce(&mut MemoryTxn<'_>, i64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut txn = MemoryTxn {
            inner: self,
            held: held.as_ref(),
            cell: None,
            guarded: None,
            inserted: None,
        };
        work(&mut txn, self.config.clock.now_millis())
    }
}

impl boundary::CreateUnits for MemoryStore {
    type Txn<'t> = MemoryTxn<'t>;

    fn unit<T, F>(
        &self,
        principal: &Principal,
        operation_id: Option<&str>,
        work: F,
    ) -> impl Future<Output = Result<T, StoreError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut MemoryTxn<'_>, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = &*self.inner;
        async move {
            let held = match operation_id {
                Some(operation_id) => Some(inner.hold(principal.key(), operation_id).await),
                None => None,
            };
            let answer = inner.with_operation(held, |txn, now| work(txn, &inner.config, now));
            inner.sweeper.count_write();
            answer
        }
    }

    fn abandon(&self, principal: &Principal, operation_id: &str, token: u64) {
        if let Some(held) = self.inner.try_hold(principal.key(), operation_id) {
            return self.inner.give_up(held, principal, operation_id, token);
        }
        // Somebody holds the id's lock (a retry of this create, or an id sharing the lock):
        // the claim is given up once it is free, off the dropping thread.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        let (principal, operation_id) = (principal.clone(), operation_id.to_owned());
        runtime.spawn(async move {
            let held = inner.hold(principal.key(), &operation_id).await;
            inner.give_up(held, &principal, &operation_id, token);
        });
    }
}

/// Which of the operation-id locks `key` falls on. The key is a digest: its bytes are already
/// evenly spread.
fn operation_lock(key: &LedgerKey) -> usize {
    usize::from(u16::from_be_bytes([key[1], key[2]])) % OPERATION_LOCKS
}

/// An operation id held by one request: its lock for the whole request, its record's shard
/// only while the record is read or written. A request that fails before recording an outcome
/// leaves nothing behind.
struct Held<'a> {
    shard: &'a LedgerShard,
    key: LedgerKey,
    _operation: tokio::sync::MutexGuard<'a, ()>,
}

impl Held<'_> {
    fn get(&self) -> Option<LedgerEntry> {
        lock(self.shard).get(&self.key).map(Kept::entry)
    }

    fn put(&self, kept: Kept) {
        lock(self.shard).insert(self.key, kept);
    }

    fn remove(&self) {
        lock(self.shard).remove(&self.key);
    }
}

pub(crate) struct MemoryTxn<'a> {
    inner: &'a Inner,
    /// The operation id the request holds, if it has one.
    held: Option<&'a Held<'a>>,
    /// The resource the request names, and its handle.
    cell: Option<(&'a str, &'a Cell)>,
    /// The writer's part of `cell`, when the transaction writes it.
    guarded: Option<&'a mut Guarded>,
    /// The resource this transaction created.
    inserted: Option<Arc<Cell>>,
}

impl Txn for MemoryTxn<'_> {
    fn ledger_get(&mut self, _: &str, _: &str) -> Result<Option<LedgerEntry>, StoreError> {
        Ok(self.held.and_then(Held::get))
    }

    fn ledger_put(&mut self, _: &str, _: &str, entry: LedgerEntry) -> Result<(), StoreError> {
        let held = self
            .held
            .ok_or_else(|| StoreError::Backend("operation id not held".into()))?;
        if entry.handle.is_some() && matches!(entry.state, LedgerState::Done(_)) {
            match (self.guarded.as_mut(), &self.inserted) {
                (Some(guarded), _) => guarded.ledger.push_back(entry.expires_at),
                (None, Some(cell)) => lock(&cell.guarded).ledger.push_back(entry.expires_at),
                (None, None) => {
                    return Err(StoreError::Backend("resource entry not held".into()));
                }
            }
        }
        self.inner
            .ledger_due
            .fetch_min(entry.expires_at, Ordering::Relaxed);
        let shared = match (self.cell, &self.inserted) {
            (Some((_, cell)), _) => Some(&cell.handle),
            (None, Some(cell)) => Some(&cell.handle),
            (None, None) => None,
        };
        held.put(Kept::keep(entry, shared));
        Ok(())
    }

    fn ledger_remove(&mut self, _: &str, _: &str, entry: &LedgerEntry) -> Result<(), StoreError> {
        // An expired record's count lapses by itself, and a claim counts against nothing; a
        // live record that gives way (a confirmed retry replacing its `stale_view`) takes its
        // count with it.
        let live = entry.expires_at > self.inner.config.clock.now_millis();
        if let (true, LedgerState::Done(_), Some(guarded)) =
            (live, &entry.state, self.guarded.as_mut())
            && let Some(at) = guarded
                .ledger
                .iter()
                .rposition(|expiry| *expiry == entry.expires_at)
        {
            guarded.ledger.remove(at);
        }
        if let Some(held) = self.held {
            held.remove();
        }
        Ok(())
    }

    fn ledger_full(&mut self, _: &str, quota: u64, now: i64) -> Result<bool, StoreError> {
        let guarded = self
            .guarded
            .as_mut()
            .ok_or_else(|| StoreError::Backend("resource entry not held".into()))?;
        while guarded.ledger.front().is_some_and(|at| *at <= now) {
            guarded.ledger.pop_front();
        }
        Ok(guarded.ledger.len() as u64 >= quota)
    }

    fn load(&mut self, handle: &str) -> Result<Option<Record>, StoreError> {
        let load = |cell: &Cell| Record::clone(&cell.current.load());
        Ok(match self.cell {
            Some((held, cell)) if held == handle => Some(load(cell)),
            // A replay shows the resource its record names, which a create does not hold.
            _ => self.inner.cell(handle).as_deref().map(load),
        })
    }

    fn undo_since(&mut self, _: &str, version: u64) -> Result<Option<Vec<Vec<Undo>>>, StoreError> {
        let Some(guarded) = self.guarded.as_ref() else {
            return Ok(None);
        };
        let mut patches = Vec::new();
        let mut oldest = None;
        for (kept, patch) in guarded.history.iter().rev() {
            if *kept <= version {
                break;
            }
            patches.push(patch.clone());
            oldest = Some(*kept);
        }
        Ok((oldest == Some(version + 1)).then_some(patches))
    }

    fn insert(&mut self, handle: &str, record: Record) -> Result<(), StoreError> {
        let inner = self.inner;
        inner.resource_falls_due(&record);
        let mut shard = write(&inner.resources[inner.shard_of(&handle)]);
        if shard.contains_key(handle) {
            return Err(StoreError::Backend(
                "minted a handle that already exists".into(),
            ));
        }
        let cell = Arc::new(Cell {
            handle: Arc::from(handle),
            turn: tokio::sync::Mutex::default(),
            guarded: Mutex::default(),
            current: ArcSwap::from_pointee(record),
        });
        shard.insert(handle.to_owned(), Arc::clone(&cell));
        self.inserted = Some(cell);
        Ok(())
    }

    fn write(&mut self, _: &str, record: Record, change: Change) -> Result<(), StoreError> {
        let Change {
            undo, drop_through, ..
        } = change;
        let (Some((_, cell)), Some(guarded)) = (self.cell, self.guarded.as_mut()) else {
            return Err(StoreError::Backend("resource entry not held".into()));
        };
        guarded.history.push_back((record.version, undo));
        while guarded
            .history
            .front()
            .is_some_and(|(version, _)| *version <= drop_through)
        {
            guarded.history.pop_front();
        }
        self.inner.resource_falls_due(&record);
        cell.current.store(Arc::new(record));
        Ok(())
    }
}

/// Waits for `cell`'s [`turn`](Cell::turn), when the resource exists.
async fn turn(cell: Option<&Cell>) -> Option<tokio::sync::MutexGuard<'_, ()>> {
    match cell {
        Some(cell) => Some(cell.turn.lock().await),
        None => None,
    }
}

impl Store for MemoryStore {
    fn create<'a>(&'a self, request: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome> {
        Box::pin(boundary::create(self, request))
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        Box::pin(async move {
            let cell = self.inner.cell(&request.handle);
            // Only a read of what changed holds `guarded`, so only it waits for a turn.
            let _turn = match request.since {
                Some(_) => turn(cell.as_deref()).await,
                None => None,
            };
            self.inner.read(cell.as_deref(), &request)
        })
    }

    fn mutate(
        &self,
        request: MutationRequest,
        mut transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome> {
        Box::pin(async move {
            let cell = self.inner.cell(&request.handle);
            let _turn = turn(cell.as_deref()).await;
            let held = match &request.operation {
                Some((operation_id, _)) => {
                    Some(self.inner.hold(request.principal.key(), operation_id).await)
                }
                None => None,
            };
            self.inner
                .mutate(cell.as_deref(), held, &request, &mut transition)
        })
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        Box::pin(async move { Ok(self.inner.prune()) })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::auth::Principal;
    use crate::store::api::{Creation, Making};
    use crate::store::clock::ManualClock;
    use crate::store::entity::EntityKind;
    use crate::store::fingerprint::Fingerprint;

    const SHORT_LIVED: EntityKind =
        EntityKind::new("ticket", "tkt").with_ttl(Duration::from_secs(60));
    const LASTING: EntityKind = EntityKind::new("note", "nte");

    /// How long a test waits for any one step before it fails instead of hanging.
    const STEP: Duration = Duration::from_secs(30);

    async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
        tokio::time::timeout(STEP, future)
            .await
            .unwrap_or_else(|_| panic!("timed out after {STEP:?}: {what}"))
    }

    /// Retries `request` until it is applied (a claim on its id given up), within [`STEP`]:
    /// the version it was applied at.
    async fn applied_once_free(
        store: &MemoryStore,
        request: impl Fn() -> CreateRequest<'static>,
    ) -> u64 {
        within("the claim on the id to be given up", async {
            loop {
                let retry = store.create(request()).await.unwrap();
                match retry.applied() {
                    Some(applied) => break applied.version,
                    None => tokio::task::yield_now().await,
                }
            }
        })
        .await
    }

    /// A create by alice with the operation id `dropped`, which the tests drop part way.
    fn dropped_create(making: Creation<'static>) -> CreateRequest<'static> {
        CreateRequest::deferred(LASTING, Principal::subject("alice"), making)
            .operation("dropped", Fingerprint::of_call("create", &json!({})))
    }

    fn create(store: &MemoryStore, kind: EntityKind, operation_id: Option<&str>) {
        let mut request = CreateRequest::new(kind, Principal::subject("alice"), json!({}));
        if let Some(operation_id) = operation_id {
            request = request.operation(operation_id, Fingerprint::of_call("create", &json!({})));
        }
        futures_util::FutureExt::now_or_never(boundary::create(store, request))
            .expect("a ready creation completes at once")
            .unwrap();
    }

    /// Per shard: ledger records and resources that expire.
    fn census(inner: &Inner) -> Vec<(usize, usize)> {
        (0..SHARDS)
            .map(|shard| {
                let expiring = inner.resources[shard]
                    .read()
                    .unwrap()
                    .values()
                    .filter(|cell| cell.current.load().expires_at.is_some())
                    .count();
                (lock(&inner.ledger[shard]).len(), expiring)
            })
            .collect()
    }

    /// `count` operation ids other than `taken` whose keys fall on the same lock.
    fn sharing_a_lock_with(taken: &str, count: usize) -> Vec<String> {
        let lock = operation_lock(&ledger_key("alice", taken));
        (0..)
            .map(|n| format!("op-{n}"))
            .filter(|id| id != taken && operation_lock(&ledger_key("alice", id)) == lock)
            .take(count)
            .collect()
    }

    /// A change stopped in its transition keeps its runtime worker, as a slow transition does
    /// (one that decodes and encodes a large state). Another change of that resource waits for
    /// its turn without holding a worker, and so do a read of what changed in it and a change
    /// and a create whose operation ids share the first change's lock, so the runtime's other
    /// worker still serves a read of another resource. Blocked on the resource's lock or the
    /// operation id's instead, any of them kept the other worker too, and the read waited for
    /// the first change to end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_waiting_for_a_busy_resource_or_operation_id_leave_the_workers_to_others() {
        let store = Arc::new(MemoryStore::new(StoreConfig::default()));
        let created = |store: Arc<MemoryStore>| async move {
            let request = CreateRequest::new(LASTING, Principal::subject("alice"), json!({"n": 0}));
            let outcome = store.create(request).await.unwrap();
            outcome.applied().expect("created").handle.clone()
        };
        let (busy, other, third) = (
            created(Arc::clone(&store)).await,
            created(Arc::clone(&store)).await,
            created(Arc::clone(&store)).await,
        );
        let change =
            |handle: &str| MutationRequest::new(LASTING, Principal::subject("alice"), handle);
        let busy_id = "op-busy";
        let [sharing_id, create_id] = <[String; 2]>::try_from(sharing_a_lock_with(busy_id, 2))
            .expect("ids fall on every lock");
        let fingerprint = || Fingerprint::of_call("change", &json!({}));

        let (entered, entered_here) = tokio::sync::oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let mut entered = Some(entered);
        let holding = Transition::new(move |state| {
            if let Some(entered) = entered.take() {
                let _ = entered.send(());
            }
            released
                .recv_timeout(STEP)
                .map_err(|_| crate::ToolError::new("HELD", "the test never let the change go"))?;
            state["n"] = json!(1);
            Ok(Value::Null)
        });
        let first = tokio::spawn({
            let (store, request) = (
                Arc::clone(&store),
                change(&busy).operation(busy_id, fingerprint()),
            );
            async move { store.mutate(request, holding).await }
        });
        within("the first change stops in its transition", entered_here)
            .await
            .unwrap();

        // Runs on the other worker up to its wait, without yielding before it.
        let (started, started_here) = tokio::sync::oneshot::channel();
        let second = tokio::spawn({
            let (store, request) = (Arc::clone(&store), change(&busy));
            async move {
                let _ = started.send(());
                let increment = Transition::new(|state| {
                    state["n"] = json!(state["n"].as_u64().unwrap_or(0) + 1);
                    Ok(Value::Null)
                });
                store.mutate(request, increment).await
            }
        });
        within("the second change starts", started_here)
            .await
            .unwrap();
        // A read of what changed in the busy resource waits for its turn the same way.
        let (started, started_here) = tokio::sync::oneshot::channel();
        let since = tokio::spawn({
            let (store, busy) = (Arc::clone(&store), busy.clone());
            async move {
                let _ = started.send(());
                let mut request = ReadRequest::new(LASTING, Principal::subject("alice"), busy);
                request.since = Some(1);
                store.read(request).await
            }
        });
        within("the read of what changed starts", started_here)
            .await
            .unwrap();
        // A change of another resource, and a create, whose operation ids share the first
        // change's lock.
        let (started, started_here) = tokio::sync::oneshot::channel();
        let sharing = tokio::spawn({
            let request = change(&third).operation(sharing_id, fingerprint());
            let store = Arc::clone(&store);
            async move {
                let _ = started.send(());
                let increment = Transition::new(|state| {
                    state["n"] = json!(1);
                    Ok(Value::Null)
                });
                store.mutate(request, increment).await
            }
        });
        within(
            "the change sharing the operation-id lock starts",
            started_here,
        )
        .await
        .unwrap();
        let (started, started_here) = tokio::sync::oneshot::channel();
        let create = tokio::spawn({
            let request = CreateRequest::new(LASTING, Principal::subject("alice"), json!({}))
                .operation(create_id, fingerprint());
            let store = Arc::clone(&store);
            async move {
                let _ = started.send(());
                store.create(request).await
            }
        });
        within(
            "the create sharing the operation-id lock starts",
            started_here,
        )
        .await
        .unwrap();

        let read = tokio::spawn({
            let (store, other) = (Arc::clone(&store), other.clone());
            async move {
                let request = ReadRequest::new(LASTING, Principal::subject("alice"), other);
                store.read(request).await
            }
        });
        let read = within("a read of another resource", read)
            .await
            .unwrap()
            .unwrap();
        assert!(
            !first.is_finished(),
            "the read waited for the busy resource's change to end"
        );
        assert_eq!(read.snapshot().expect("readable").state["n"], json!(0));

        release.send(()).unwrap();
        for change in [first, second, sharing] {
            let outcome = within("the changes of the busy resource end", change)
                .await
                .unwrap()
                .unwrap();
            assert!(outcome.applied().is_some(), "{outcome:?}");
        }
        let outcome = within("the create ends", create).await.unwrap().unwrap();
        assert!(outcome.applied().is_some(), "{outcome:?}");
        let request = ReadRequest::new(LASTING, Principal::subject("alice"), busy);
        let outcome = store.read(request).await.unwrap();
        assert_eq!(outcome.snapshot().expect("readable").state["n"], json!(2));
        let since = within("the read of what changed ends", since)
            .await
            .unwrap()
            .unwrap();
        let snapshot = since.snapshot().expect("readable");
        assert!(
            snapshot.changes.is_some() && snapshot.version > 1,
            "{since:?}"
        );
    }

    /// A create dropped while somebody holds its operation id's lock gives its claim up once
    /// the lock is free, so a retry need not wait for the claim to lapse (the clock here never
    /// moves, so it would wait for ever).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_create_dropped_while_its_id_is_held_gives_its_claim_up_later() {
        let clock = ManualClock::at_millis(1_785_231_000_000);
        let store = MemoryStore::new(StoreConfig {
            clock: Arc::new(clock),
            ..StoreConfig::default()
        });
        let alice = Principal::subject("alice");
        let request = dropped_create;
        let (started, running) = tokio::sync::oneshot::channel::<()>();
        let stalled = tokio::spawn({
            let (store, request) = (
                store.clone(),
                request(Creation(Making::Deferred(Box::pin(async move {
                    let _ = started.send(());
                    std::future::pending::<Result<Value, crate::ToolError>>().await
                })))),
            );
            async move { store.create(request).await }
        });
        within("the create to start making its state", running)
            .await
            .unwrap();
        let held = within("the id's lock", store.inner.hold(alice.key(), "dropped")).await;
        stalled.abort();
        let _ = within("the aborted create to stop", stalled).await;
        drop(held);
        let version = applied_once_free(&store, || request(Creation::ready(json!({})))).await;
        assert_eq!(version, 1);
    }

    /// A create dropped while its claim waits for the id's lock wrote nothing, so it gives
    /// nothing up: no task is left behind to take the lock after it.
    #[tokio::test]
    async fn a_create_dropped_before_claiming_leaves_nothing_to_give_up() {
        use futures_util::FutureExt;
        let store = MemoryStore::new(StoreConfig {
            clock: Arc::new(ManualClock::at_millis(1_785_231_000_000)),
            ..StoreConfig::default()
        });
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        let held = within("the id's lock", store.inner.hold("alice", "dropped")).await;
        let mut create = store.create(dropped_create(Creation(Making::Deferred(Box::pin(
            async { Ok(json!({})) },
        )))));
        assert!(
            (&mut create).now_or_never().is_none(),
            "waiting for the id's lock"
        );
        drop(create);
        assert_eq!(
            tasks(),
            before,
            "a task was left to give up a claim never made"
        );
        drop(held);
        let version =
            applied_once_free(&store, || dropped_create(Creation::ready(json!({})))).await;
        assert_eq!(version, 1);
    }

    /// With the id's lock free, a dropped create gives its claim up at once, on the dropping
    /// thread, so it needs no runtime to spawn on: here there is none, and the clock never
    /// moves, so a claim left behind would answer every retry `OPERATION_IN_PROGRESS`.
    #[test]
    fn a_create_dropped_with_its_id_free_gives_its_claim_up_at_once() {
        use futures_util::FutureExt;
        let store = MemoryStore::new(StoreConfig {
            clock: Arc::new(ManualClock::at_millis(1_785_231_000_000)),
            ..StoreConfig::default()
        });
        let request = dropped_create;
        let mut create = store.create(request(Creation(Making::Deferred(Box::pin(
            std::future::pending::<Result<Value, crate::ToolError>>(),
        )))));
        assert!(
            (&mut create).now_or_never().is_none(),
            "claimed, and making its state"
        );
        drop(create);
        let retry = store
            .create(request(Creation::ready(json!({}))))
            .now_or_never()
            .expect("a ready create with a free id completes at once")
            .unwrap();
        assert_eq!(retry.applied().map(|applied| applied.version), Some(1));
    }

    /// Operation ids spread over every one of the locks, so two ids wait for each other only
    /// as often as [`OPERATION_LOCKS`] says.
    #[test]
    fn operation_ids_spread_over_every_lock() {
        let used: std::collections::HashSet<usize> = (0..=u16::MAX)
            .map(|spread| {
                let mut key: LedgerKey = [0; 32];
                key[1..3].copy_from_slice(&spread.to_be_bytes());
                operation_lock(&key)
            })
            .collect();
        assert_eq!(used.len(), OPERATION_LOCKS);
    }

    /// A create dropped after making its state, while its last unit waits for the operation
    /// id's lock, gives its claim up too: a retry need not wait for the claim to lapse (the
    /// clock here never moves, so it would wait for ever).
    #[tokio::test]
    async fn a_create_dropped_waiting_to_finish_gives_its_claim_up() {
        use futures_util::FutureExt;
        let store = MemoryStore::new(StoreConfig {
            clock: Arc::new(ManualClock::at_millis(1_785_231_000_000)),
            ..StoreConfig::default()
        });
        let request = dropped_create;
        let (made, made_here) = tokio::sync::oneshot::channel::<()>();
        let mut create = store.create(request(Creation(Making::Deferred(Box::pin(async move {
            let _ = made_here.await;
            Ok(json!({}))
        })))));
        assert!(
            (&mut create).now_or_never().is_none(),
            "claimed, and making its state"
        );
        let held = store.inner.hold("alice", "dropped").await;
        made.send(()).unwrap();
        assert!(
            (&mut create).now_or_never().is_none(),
            "made, and waiting for the lock"
        );
        drop(create);
        drop(held);
        let version = applied_once_free(&store, || request(Creation::ready(json!({})))).await;
        assert_eq!(version, 1);
    }

    /// A kept record reads back as the entry that was recorded, whatever its outcome, and an
    /// `applied` one about the resource shares the resource's handle instead of copying it.
    #[test]
    fn a_kept_record_reads_back_as_recorded() {
        let shared: Arc<str> = Arc::from("bsk_0123456789abcdefghijklmnop");
        let entry = |handle: Option<&str>, state: LedgerState| LedgerEntry {
            fingerprint: Fingerprint::of_call("tool", &json!({ "n": 1 })),
            state,
            handle: handle.map(str::to_owned),
            recorded_at: 1_000,
            expires_at: 2_000,
        };
        let rebased = |handle: &str, rebased_from: Option<u64>| {
            LedgerState::Done(RecordedOutcome::Applied(RecordedApplied {
                handle: handle.to_owned(),
                version: 7,
                result: json!({ "memory_gib": 32 }),
                rebased_from,
            }))
        };
        let applied = |handle: &str| rebased(handle, Some(5));
        let cases = [
            entry(Some(&shared), applied(&shared)),
            entry(Some(&shared), rebased(&shared, None)),
            // No version 0 is ever rebased from, but one that says so is kept as it says.
            entry(Some(&shared), rebased(&shared, Some(0))),
            // An applied summary about another handle than the record's is kept whole.
            entry(Some(&shared), applied("bsk_other")),
            entry(None, applied(&shared)),
            entry(
                Some(&shared),
                LedgerState::Done(RecordedOutcome::Rejected(
                    crate::store::outcome::Rejected::terminal("basket", &shared),
                )),
            ),
            entry(None, LedgerState::Pending { token: 42 }),
        ];
        for recorded in cases {
            let kept = Kept::keep(recorded.clone(), Some(&shared));
            assert_eq!(format!("{:?}", kept.entry()), format!("{recorded:?}"));
            if recorded.handle.as_deref() == Some(&*shared) {
                assert!(Arc::ptr_eq(kept.handle.as_ref().unwrap(), &shared));
            }
        }
        let kept = Kept::keep(
            entry(Some(&shared), applied(&shared)),
            Some(&Arc::from("bsk_elsewhere")),
        );
        assert_eq!(kept.handle.as_deref(), Some(&*shared));
        assert!(matches!(kept.outcome, KeptOutcome::Applied { .. }));
    }

    /// The ledger's table holds one slot of this size for every record it keeps, for hours: it
    /// grows only by decision.
    #[test]
    fn a_kept_record_fills_a_small_slot() {
        let slot = std::mem::size_of::<(LedgerKey, Kept)>();
        assert!(slot <= 144, "a ledger slot takes {slot} bytes");
    }

    /// A record is swept at the instant its retention ends, not a millisecond before.
    #[test]
    fn a_record_is_swept_when_its_retention_ends() {
        let clock = ManualClock::at_millis(1_785_231_000_000);
        let retention = Duration::from_secs(60);
        let store = MemoryStore::new(StoreConfig {
            ledger_retention: retention,
            clock: Arc::new(clock.clone()),
            ..StoreConfig::default()
        });
        let inner = &*store.inner;
        create(&store, LASTING, Some("op-1"));
        let records = || {
            census(inner)
                .iter()
                .map(|&(records, _)| records)
                .sum::<usize>()
        };
        clock.advance(retention - Duration::from_millis(1));
        assert_eq!(inner.prune().ledger_records, 0);
        assert_eq!(records(), 1);
        clock.advance(Duration::from_millis(1));
        assert_eq!(inner.prune().ledger_records, 1);
        assert_eq!(records(), 0);
    }

    /// A sweep reclaims what is past its retention, in every shard, and nothing else.
    #[test]
    fn a_sweep_reclaims_exactly_what_expired() {
        let clock = ManualClock::at_millis(1_785_231_000_000);
        let store = MemoryStore::new(StoreConfig {
            ledger_retention: Duration::from_secs(10 * 60),
            clock: Arc::new(clock.clone()),
            ..StoreConfig::default()
        });
        let inner = &*store.inner;
        for i in 0..2000 {
            create(&store, SHORT_LIVED, Some(&format!("op-{i}")));
        }
        for _ in 0..100 {
            create(&store, LASTING, None);
        }
        assert!(
            census(inner)
                .iter()
                .all(|&(records, expiring)| records > 0 && expiring > 0)
        );
        inner.sweep();
        assert_eq!(inner.resource_count(), 2100, "nothing had expired yet");
        clock.advance(Duration::from_secs(20 * 60));
        inner.sweep();
        assert!(census(inner).iter().all(|&shard| shard == (0, 0)));
        assert_eq!(inner.resource_count(), 100);
    }
}
