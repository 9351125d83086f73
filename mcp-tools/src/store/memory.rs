//! The in-process store: sharded maps and one lock per handle, no global lock on the hot path.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError};

use serde_json::Value;

use super::boundary::{self, LedgerEntry, Record, Txn};
use super::clock::duration_millis;
use super::contract::{
    CreateRequest, MutationRequest, PruneReport, ReadRequest, Store, StoreConfig, StoreError,
    StoreFuture, Transition,
};
use super::handle::mint_handle;
use super::outcome::{MutationOutcome, ReadOutcome};

const SHARDS: usize = 64;
/// Writes between two steps of the automatic sweep. A step sweeps one ledger shard and one
/// resource shard, round robin, so no single request pays for the whole map and a full round
/// takes `SWEEP_STEP * SHARDS` writes.
const SWEEP_STEP: u64 = 64;

type Slot = Arc<Mutex<Option<LedgerEntry>>>;
type ResourceShard = RwLock<HashMap<String, Arc<Mutex<Entry>>>>;
/// Ledger slots by [`ledger_key`].
type LedgerShard = Mutex<HashMap<String, Slot>>;

/// One string for (principal, operation id): the principal's length, `:`, the principal and the
/// operation id. The length prefix keeps distinct pairs distinct.
fn ledger_key(principal: &str, operation_id: &str) -> String {
    use std::fmt::Write;
    let mut key = String::with_capacity(principal.len() + operation_id.len() + 8);
    let _ = write!(key, "{}:", principal.len());
    key.push_str(principal);
    key.push_str(operation_id);
    key
}

struct Entry {
    record: Record,
    /// Kept versions, the current one included; the current state is shared with `record`.
    history: VecDeque<(u64, Arc<Value>)>,
}

/// A store that keeps everything in process memory; state is lost when the process ends.
///
/// Resources and ledger records live in 64 shards each. A mutation locks its operation id's ledger
/// slot (when it has one), then its handle's entry, always in that order, and holds both for the
/// whole boundary; shard locks are held only to find or insert an entry. Requests on different
/// handles with different operation ids never wait for each other.
///
/// Expired ledger records and long-expired resources are swept a shard at a time, round robin,
/// every few writes (see [`Store::prune`] for a full sweep).
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: StoreConfig,
    hasher: RandomState,
    resources: Box<[ResourceShard]>,
    ledger: Box<[LedgerShard]>,
    /// Writes so far; they pace the automatic sweep.
    writes: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking transition only ever changed a copy, so the data behind a poisoned lock is intact.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MemoryStore {
    /// An empty store.
    pub fn new(config: StoreConfig) -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                config,
                hasher: RandomState::new(),
                resources: (0..SHARDS).map(|_| RwLock::default()).collect(),
                ledger: (0..SHARDS).map(|_| Mutex::default()).collect(),
                writes: AtomicU64::new(0),
            }),
        }
    }
}

impl MemoryStore {
    /// How many resources the store holds, expired ones included (for tests that count what
    /// was actually created).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn resource_count_for_tests(&self) -> usize {
        self.inner.resource_count()
    }
}

impl MemoryStore {
    /// How many ledger slots the store holds, expired ones included (for tests that check what a
    /// failed request leaves behind).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn ledger_count_for_tests(&self) -> usize {
        self.inner.ledger_count()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(StoreConfig::default())
    }
}

impl Inner {
    fn shard_of<K: std::hash::Hash>(&self, key: &K) -> usize {
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    fn entry(&self, handle: &str) -> Option<Arc<Mutex<Entry>>> {
        let shard = self.resources[self.shard_of(&handle)]
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        shard.get(handle).cloned()
    }

    /// Takes (creating it if needed) the ledger slot of (principal, operation id) for one request.
    fn lease(&self, principal: &str, operation_id: &str) -> Lease<'_> {
        let key = ledger_key(principal, operation_id);
        let mut shard = lock(&self.ledger[self.shard_of(&key)]);
        let slot = Arc::clone(shard.entry(key.clone()).or_default());
        Lease {
            inner: self,
            key,
            slot: Some(slot),
        }
    }

    /// How many ledger slots the store holds, expired ones included.
    #[cfg(feature = "test-hooks")]
    fn ledger_count(&self) -> usize {
        self.ledger.iter().map(|shard| lock(shard).len()).sum()
    }

    fn prune(&self) -> PruneReport {
        let now = self.config.clock.now_millis();
        let mut report = PruneReport::default();
        for shard in 0..SHARDS {
            report.ledger_records += self.prune_ledger_shard(shard, now);
            report.resources += self.prune_resource_shard(shard, now);
        }
        report
    }

    /// Removes the ledger records of one shard past their retention.
    fn prune_ledger_shard(&self, shard: usize, now: i64) -> u64 {
        let mut removed = 0;
        lock(&self.ledger[shard]).retain(|_, slot| {
            // Clones of a slot are only taken under this shard lock, so a count of one means
            // no request holds it or is about to lock it.
            if Arc::strong_count(slot) > 1 {
                return true;
            }
            let live = lock(slot).as_ref().map(|entry| entry.expires_at > now);
            if live == Some(false) {
                removed += 1;
            }
            live == Some(true)
        });
        removed
    }

    /// Removes the resources of one shard that expired longer ago than the ledger retention.
    fn prune_resource_shard(&self, shard: usize, now: i64) -> u64 {
        let cutoff = now.saturating_sub(duration_millis(self.config.ledger_retention));
        let mut removed = 0;
        self.resources[shard]
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|_, entry| {
                // As for ledger slots: clones are only taken under the shard lock, so a count of
                // one means no request holds the entry. An expired resource is never written
                // again, so its expiry cannot move once it is past.
                if Arc::strong_count(entry) > 1 {
                    return true;
                }
                let reclaim = lock(entry).record.expires_at.is_some_and(|at| at <= cutoff);
                if reclaim {
                    removed += 1;
                }
                !reclaim
            });
        removed
    }

    fn create(&self, request: CreateRequest) -> Result<MutationOutcome, StoreError> {
        let handle = mint_handle(request.kind.prefix)?;
        let lease = request
            .operation
            .as_ref()
            .map(|(operation_id, _)| self.lease(request.principal.key(), operation_id));
        let mut slot_guard = lease.as_ref().and_then(Lease::lock);
        let now = self.config.clock.now_millis();
        let mut txn = MemoryTxn {
            inner: self,
            slot: slot_guard.as_deref_mut(),
            entry: None,
        };
        let outcome = boundary::create(&mut txn, &self.config, request, &handle, now);
        drop(slot_guard);
        self.count_write();
        outcome
    }

    /// Counts a request that may have written a resource or a ledger record and sweeps now and
    /// then.
    fn count_write(&self) {
        let writes = self.writes.fetch_add(1, Ordering::Relaxed);
        if writes % SWEEP_STEP == SWEEP_STEP - 1 {
            let shard = ((writes / SWEEP_STEP) % SHARDS as u64) as usize;
            let now = self.config.clock.now_millis();
            self.prune_ledger_shard(shard, now);
            self.prune_resource_shard(shard, now);
        }
    }

    /// How many resources the store holds, expired ones included.
    #[cfg(any(test, feature = "test-hooks"))]
    fn resource_count(&self) -> usize {
        self.resources
            .iter()
            .map(|shard| {
                shard
                    .read()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .len()
            })
            .sum()
    }

    fn read(&self, request: &ReadRequest) -> Result<ReadOutcome, StoreError> {
        let now = self.config.clock.now_millis();
        let entry = self.entry(&request.handle);
        let mut guard = entry.as_deref().map(lock);
        let mut txn = MemoryTxn {
            inner: self,
            slot: None,
            entry: guard.as_deref_mut(),
        };
        boundary::read(&mut txn, request, now)
    }

    fn mutate(
        &self,
        request: &MutationRequest,
        transition: &mut Transition,
    ) -> Result<MutationOutcome, StoreError> {
        let lease = request
            .operation
            .as_ref()
            .map(|(operation_id, _)| self.lease(request.principal.key(), operation_id));
        let mut slot_guard = lease.as_ref().and_then(Lease::lock);
        let entry = self.entry(&request.handle);
        let mut entry_guard = entry.as_deref().map(lock);
        let now = self.config.clock.now_millis();
        let mut txn = MemoryTxn {
            inner: self,
            slot: slot_guard.as_deref_mut(),
            entry: entry_guard.as_deref_mut(),
        };
        let outcome = boundary::mutate(&mut txn, &self.config, request, transition, now);
        drop(entry_guard);
        drop(slot_guard);
        self.count_write();
        outcome
    }
}

/// A ledger slot held by one request. A request that fails before recording an outcome (a store
/// error, a panicking transition) leaves its slot empty; dropping the last lease of an empty slot
/// removes it from the ledger map instead of leaving it to the next sweep.
struct Lease<'a> {
    inner: &'a Inner,
    key: String,
    /// `Some` until the lease is dropped.
    slot: Option<Slot>,
}

impl Lease<'_> {
    fn lock(&self) -> Option<MutexGuard<'_, Option<LedgerEntry>>> {
        self.slot.as_deref().map(lock)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        // A slot that holds a record keeps it until a sweep removes the slot. Another request
        // holding the slot's lock has a lease of its own, and takes the path below when it drops.
        match slot.try_lock() {
            Ok(entry) if entry.is_some() => return,
            Err(TryLockError::Poisoned(entry)) if entry.get_ref().is_some() => return,
            _ => {}
        }
        let inner = self.inner;
        let mut shard = lock(&inner.ledger[inner.shard_of(&self.key)]);
        // Every lease lets go of its clone under the shard lock, where clones are taken, so the
        // last one to let go sees a count of one (the map's) and nobody can be about to lock it.
        drop(slot);
        let unused = shard
            .get(&self.key)
            .is_some_and(|kept| Arc::strong_count(kept) == 1 && lock(kept).is_none());
        if unused {
            shard.remove(&self.key);
        }
    }
}

struct MemoryTxn<'a> {
    inner: &'a Inner,
    slot: Option<&'a mut Option<LedgerEntry>>,
    entry: Option<&'a mut Entry>,
}

impl Txn for MemoryTxn<'_> {
    fn ledger_get(&mut self, _: &str, _: &str) -> Result<Option<LedgerEntry>, StoreError> {
        Ok(self.slot.as_ref().and_then(|slot| (**slot).clone()))
    }

    fn ledger_put(&mut self, _: &str, _: &str, entry: LedgerEntry) -> Result<(), StoreError> {
        match self.slot.as_mut() {
            Some(slot) => {
                **slot = Some(entry);
                Ok(())
            }
            None => Err(StoreError::Backend("ledger slot not held".into())),
        }
    }

    fn load(&mut self, _: &str) -> Result<Option<Record>, StoreError> {
        Ok(self.entry.as_ref().map(|entry| entry.record.clone()))
    }

    fn history(&mut self, _: &str, version: u64) -> Result<Option<Value>, StoreError> {
        Ok(self.entry.as_ref().and_then(|entry| {
            entry
                .history
                .iter()
                .find(|(kept, _)| *kept == version)
                .map(|(_, state)| Value::clone(state))
        }))
    }

    fn insert(&mut self, handle: &str, record: Record) -> Result<(), StoreError> {
        let inner = self.inner;
        let mut shard = inner.resources[inner.shard_of(&handle)]
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if shard.contains_key(handle) {
            return Err(StoreError::Backend(
                "minted a handle that already exists".into(),
            ));
        }
        let entry = Entry {
            history: VecDeque::from([(record.version, Arc::clone(&record.state))]),
            record,
        };
        shard.insert(handle.to_owned(), Arc::new(Mutex::new(entry)));
        Ok(())
    }

    fn write(&mut self, _: &str, record: Record, drop_through: u64) -> Result<(), StoreError> {
        let entry = self
            .entry
            .as_mut()
            .ok_or_else(|| StoreError::Backend("resource entry not held".into()))?;
        entry
            .history
            .push_back((record.version, Arc::clone(&record.state)));
        entry.record = record;
        while entry
            .history
            .front()
            .is_some_and(|(version, _)| *version <= drop_through)
        {
            entry.history.pop_front();
        }
        Ok(())
    }
}

impl Store for MemoryStore {
    fn create(&self, request: CreateRequest) -> StoreFuture<'_, MutationOutcome> {
        Box::pin(async move { self.inner.create(request) })
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        Box::pin(async move { self.inner.read(&request) })
    }

    fn mutate(
        &self,
        request: MutationRequest,
        mut transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome> {
        Box::pin(async move { self.inner.mutate(&request, &mut transition) })
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
    use crate::context::Principal;
    use crate::store::clock::ManualClock;
    use crate::store::entity::EntityKind;
    use crate::store::fingerprint::Fingerprint;

    const SHORT_LIVED: EntityKind =
        EntityKind::new("ticket", "tkt").with_ttl(Duration::from_secs(60));
    const LASTING: EntityKind = EntityKind::new("note", "nte");

    fn create(inner: &Inner, kind: EntityKind, operation_id: Option<&str>) {
        let mut request = CreateRequest::new(kind, Principal::subject("alice"), json!({}));
        if let Some(operation_id) = operation_id {
            request = request.operation(operation_id, Fingerprint::of_call("create", &json!({})));
        }
        inner.create(request).unwrap();
    }

    /// Per shard: ledger slots and resources that expire.
    fn census(inner: &Inner) -> Vec<(usize, usize)> {
        (0..SHARDS)
            .map(|shard| {
                let expiring = inner.resources[shard]
                    .read()
                    .unwrap()
                    .values()
                    .filter(|entry| lock(entry).record.expires_at.is_some())
                    .count();
                (lock(&inner.ledger[shard]).len(), expiring)
            })
            .collect()
    }

    /// Each step of the automatic sweep reclaims one shard of the ledger and of the resources;
    /// a full round reclaims everything past its retention.
    #[test]
    fn automatic_sweep_is_incremental() {
        let clock = ManualClock::at_millis(1_785_231_000_000);
        let store = MemoryStore::new(StoreConfig {
            ledger_retention: Duration::from_secs(10 * 60),
            clock: Arc::new(clock.clone()),
            ..StoreConfig::default()
        });
        let inner = &*store.inner;
        for i in 0..2000 {
            create(inner, SHORT_LIVED, Some(&format!("op-{i}")));
        }
        let before = census(inner);
        assert!(
            before
                .iter()
                .all(|&(slots, expiring)| slots > 0 && expiring > 0)
        );
        clock.advance(Duration::from_secs(20 * 60));

        // Up to the next step, nothing is swept; the step sweeps exactly one shard.
        let writes = inner.writes.load(Ordering::Relaxed);
        let until_step = SWEEP_STEP - 1 - writes % SWEEP_STEP;
        let shard = ((writes + until_step) / SWEEP_STEP % SHARDS as u64) as usize;
        for _ in 0..until_step {
            create(inner, LASTING, None);
        }
        assert_eq!(census(inner), before);
        create(inner, LASTING, None);
        let after = census(inner);
        for (index, (&now, &was)) in after.iter().zip(&before).enumerate() {
            if index == shard {
                assert_eq!(now, (0, 0), "shard {index} was not swept");
            } else {
                assert_eq!(now, was, "shard {index} was swept out of turn");
            }
        }

        // A full round sweeps every shard.
        for _ in 0..SWEEP_STEP * SHARDS as u64 {
            create(inner, LASTING, None);
        }
        assert!(census(inner).iter().all(|&shard| shard == (0, 0)));
        // Only the short-lived resources went; every lasting one is kept.
        let lasting = until_step + 1 + SWEEP_STEP * SHARDS as u64;
        assert_eq!(inner.resource_count() as u64, lasting);
    }
}
