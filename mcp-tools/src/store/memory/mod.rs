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

use super::boundary::{self, LedgerEntry, LedgerState, Record};
use super::clock::duration_millis;
use super::fingerprint::Fingerprint;
use super::history::Undo;
use super::outcome::{MutationOutcome, ReadOutcome, RecordedApplied, RecordedOutcome};
use super::sweeper::Sweeper;
use super::tasks::record::TaskRecord;
use crate::auth::Principal;
use crate::store::api::{
    CreateRequest, MutationRequest, PruneReport, ReadRequest, Store, StoreConfig, Transition,
};
use crate::store::error::{StoreError, StoreFuture};
use crate::store::step::{StepOutcome, StepRequest, StepTransition};
// A panicking transition only ever changed a copy, so the data behind a poisoned lock is intact.
use crate::sync::{lock, read, write};

mod items;
mod outbox;
mod tasks;
#[cfg(test)]
mod tests;
mod txn;

use txn::{Held, MemoryTxn, operation_lock, turn};

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
                    && applied.rebased_from != Some(0)
                    && applied.effects.is_empty() =>
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
                effects: Vec::new(),
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
    /// The items of the resource's collections.
    items: items::ItemTable,
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
/// changed since a version, or of a resource whose entity has collections, takes the resource's
/// turn, to read the state with its history or its items of one moment).
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
    /// The effects changes emitted, written under the resource's lock with the change.
    outbox: Mutex<outbox::OutboxTable>,
    outbox_signal: Arc<tokio::sync::Notify>,
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
            outbox: Mutex::default(),
            outbox_signal: Arc::default(),
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
        let retention = duration_millis(self.config.ledger_retention);
        PruneReport {
            ledger_records: self.prune_ledger(now),
            resources: self.prune_resources(now),
            effects: lock(&self.outbox).prune(now.saturating_sub(retention)),
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
        let retention = duration_millis(self.config.ledger_retention);
        lock(&self.outbox).prune(now.saturating_sub(retention));
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
        // A read of a resource with collections holds it too, so its page of items is of the
        // version it reads.
        let mut guarded = match (request.since, request.kind.collections.is_empty()) {
            (None, true) => None,
            _ => cell.map(|cell| lock(&cell.guarded)),
        };
        let mut txn = MemoryTxn {
            inner: self,
            held: None,
            cell: cell.map(|cell| (request.handle.as_str(), cell)),
            guarded: guarded.as_deref_mut(),
            others: Vec::new(),
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
            others: Vec::new(),
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
            others: Vec::new(),
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

impl Store for MemoryStore {
    fn create<'a>(&'a self, request: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome> {
        Box::pin(boundary::create(self, request))
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        Box::pin(async move {
            let cell = self.inner.cell(&request.handle);
            // Only a read of what changed, or of collection items, holds `guarded`, so only it
            // waits for a turn.
            let _turn = match (request.since, request.kind.collections.is_empty()) {
                (None, true) => None,
                _ => turn(cell.as_deref()).await,
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

    fn mutate_step(
        &self,
        request: StepRequest,
        mut transition: StepTransition,
    ) -> StoreFuture<'_, StepOutcome> {
        Box::pin(async move {
            let inner = &*self.inner;
            // Every resource's turn, in handle order (as every step takes them), then the
            // operation id's, as a single change takes its one turn and then the id's: no two
            // units ever wait for each other in a circle.
            let mut handles: Vec<&str> = request.parts.iter().map(|p| p.handle.as_str()).collect();
            handles.sort_unstable();
            handles.dedup();
            let cells: Vec<(&str, Arc<Cell>)> = handles
                .into_iter()
                .filter_map(|handle| inner.cell(handle).map(|cell| (handle, cell)))
                .collect();
            let mut turns = Vec::with_capacity(cells.len());
            for (_, cell) in &cells {
                turns.push(cell.turn.lock().await);
            }
            let held = match &request.operation {
                Some((operation_id, _)) => {
                    Some(inner.hold(request.principal.key(), operation_id).await)
                }
                None => None,
            };
            let mut guards: Vec<(&str, &Cell, std::sync::MutexGuard<'_, Guarded>)> = cells
                .iter()
                .map(|(handle, cell)| (*handle, &**cell, lock(&cell.guarded)))
                .collect();
            let others = guards
                .iter_mut()
                .map(|(handle, cell, guarded)| (*handle, *cell, &mut **guarded))
                .collect();
            let now = inner.config.clock.now_millis();
            let mut txn = MemoryTxn {
                inner,
                held: held.as_ref(),
                cell: None,
                guarded: None,
                others,
                inserted: None,
            };
            let outcome =
                boundary::step::step(&mut txn, &inner.config, &request, &mut transition, now);
            drop(txn);
            drop(guards);
            drop(held);
            drop(turns);
            inner.sweeper.count_write();
            outcome
        })
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        Box::pin(async move { Ok(self.inner.prune()) })
    }
}
