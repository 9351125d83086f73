//! The boundary's primitives on the memory store: a transaction holds the locks of one resource
//! (of several, for a step) and one operation id, and publishes each resource's new version as
//! the boundary writes it, once every check passed. A plain read takes no lock, so while a step
//! writes, a read of one of its resources may see it before another is published (as two reads
//! in two transactions may on any store).

use super::*;
use crate::store::boundary::{Change, LedgerEntry, LedgerState, Record, Txn};
use crate::store::collection::StoredItem;
use crate::store::error::StoreError;
use crate::store::history::Undo;
use arc_swap::ArcSwap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Which of the operation-id locks `key` falls on. The key is a digest: its bytes are already
/// evenly spread.
pub(super) fn operation_lock(key: &LedgerKey) -> usize {
    usize::from(u16::from_be_bytes([key[1], key[2]])) % OPERATION_LOCKS
}

/// An operation id held by one request: its lock for the whole request, its record's shard
/// only while the record is read or written. A request that fails before recording an outcome
/// leaves nothing behind.
pub(super) struct Held<'a> {
    pub(super) shard: &'a LedgerShard,
    pub(super) key: LedgerKey,
    pub(super) _operation: tokio::sync::MutexGuard<'a, ()>,
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
    pub(super) inner: &'a Inner,
    /// The operation id the request holds, if it has one.
    pub(super) held: Option<&'a Held<'a>>,
    /// The resource the request names, and its handle.
    pub(super) cell: Option<(&'a str, &'a Cell)>,
    /// The writer's part of `cell`, when the transaction writes it.
    pub(super) guarded: Option<&'a mut Guarded>,
    /// A step's other resources, each with its writer's part (empty otherwise: no allocation).
    pub(super) others: Vec<(&'a str, &'a Cell, &'a mut Guarded)>,
    /// The resource this transaction created.
    pub(super) inserted: Option<Arc<Cell>>,
}

impl Txn for MemoryTxn<'_> {
    fn ledger_get(&mut self, _: &str, _: &str) -> Result<Option<LedgerEntry>, StoreError> {
        Ok(self.held.and_then(Held::get))
    }

    fn ledger_put(&mut self, _: &str, _: &str, entry: LedgerEntry) -> Result<(), StoreError> {
        let held = self
            .held
            .ok_or_else(|| StoreError::Backend("operation id not held".into()))?;
        if let (Some(handle), LedgerState::Done(_)) = (entry.handle.as_deref(), &entry.state) {
            let expires_at = entry.expires_at;
            let inserted = self.inserted.clone();
            match (self.guarded_of(handle), inserted) {
                (Some(guarded), _) => guarded.ledger.push_back(expires_at),
                (None, Some(cell)) => lock(&cell.guarded).ledger.push_back(expires_at),
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
        let guarded = match entry.handle.as_deref() {
            Some(handle) => self.guarded_of(handle),
            None => None,
        };
        if let (true, LedgerState::Done(_), Some(guarded)) = (live, &entry.state, guarded)
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

    fn ledger_full(&mut self, handle: &str, quota: u64, now: i64) -> Result<bool, StoreError> {
        let guarded = self
            .guarded_of(handle)
            .ok_or_else(|| StoreError::Backend("resource entry not held".into()))?;
        while guarded.ledger.front().is_some_and(|at| *at <= now) {
            guarded.ledger.pop_front();
        }
        Ok(guarded.ledger.len() as u64 >= quota)
    }

    fn load(&mut self, handle: &str) -> Result<Option<Record>, StoreError> {
        let load = |cell: &Cell| Record::clone(&cell.current.load());
        if let Some((held, cell)) = self.cell
            && held == handle
        {
            return Ok(Some(load(cell)));
        }
        if let Some((_, cell, _)) = self.others.iter().find(|(held, ..)| *held == handle) {
            return Ok(Some(load(cell)));
        }
        // A replay shows the resource its record names, which a create does not hold.
        Ok(self.inner.cell(handle).as_deref().map(load))
    }

    fn undo_since(
        &mut self,
        handle: &str,
        version: u64,
    ) -> Result<Option<Vec<Vec<Undo>>>, StoreError> {
        let Some(guarded) = self.guarded_of(handle) else {
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

    fn items_get(
        &mut self,
        handle: &str,
        wanted: &[(&'static str, u64)],
    ) -> Result<Vec<(&'static str, StoredItem)>, StoreError> {
        Ok(self.items(handle)?.get(wanted))
    }

    fn items_page(
        &mut self,
        handle: &str,
        field: &'static str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredItem>, StoreError> {
        // A resource that does not exist has no items; one that does is held by a read of it.
        Ok(match self.guarded_of(handle) {
            Some(guarded) => guarded.items.page(field, after, limit),
            None => Vec::new(),
        })
    }

    fn items_since(
        &mut self,
        handle: &str,
        version: u64,
        limit: usize,
    ) -> Result<Vec<(String, StoredItem)>, StoreError> {
        Ok(self.items(handle)?.since(version, limit))
    }

    fn write(&mut self, handle: &str, record: Record, change: Change) -> Result<(), StoreError> {
        let Change {
            undo,
            drop_through,
            items,
            effects,
            ..
        } = change;
        let Some((cell, guarded)) = self.held_mut(handle) else {
            return Err(StoreError::Backend("resource entry not held".into()));
        };
        if !items.is_empty() {
            guarded.items.write(items, record.version, drop_through);
        }
        guarded.history.push_back((record.version, undo));
        while guarded
            .history
            .front()
            .is_some_and(|(version, _)| *version <= drop_through)
        {
            guarded.history.pop_front();
        }
        if !effects.is_empty() {
            lock(&self.inner.outbox).insert(effects);
        }
        self.inner.resource_falls_due(&record);
        cell.current.store(Arc::new(record));
        Ok(())
    }
}

impl<'a> MemoryTxn<'a> {
    fn items(&mut self, handle: &str) -> Result<&items::ItemTable, StoreError> {
        self.guarded_of(handle)
            .map(|guarded| &guarded.items)
            .ok_or_else(|| StoreError::Backend("resource entry not held".into()))
    }

    /// The writer's part of the held resource `handle`.
    fn guarded_of(&mut self, handle: &str) -> Option<&mut Guarded> {
        self.held_mut(handle).map(|(_, guarded)| guarded)
    }

    /// The held resource `handle` and its writer's part.
    fn held_mut(&mut self, handle: &str) -> Option<(&'a Cell, &mut Guarded)> {
        if let Some((held, cell)) = self.cell
            && held == handle
        {
            return self.guarded.as_deref_mut().map(|guarded| (cell, guarded));
        }
        self.others
            .iter_mut()
            .find(|(held, ..)| *held == handle)
            .map(|(_, cell, guarded)| (*cell, &mut **guarded))
    }
}

/// Waits for `cell`'s [`turn`](Cell::turn), when the resource exists.
pub(super) async fn turn(cell: Option<&Cell>) -> Option<tokio::sync::MutexGuard<'_, ()>> {
    match cell {
        Some(cell) => Some(cell.turn.lock().await),
        None => None,
    }
}
