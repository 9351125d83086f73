//! The memory store's outbox: every effect by key, the pending ones in the order they were
//! emitted, and each resource's effects for its reads.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::{MemoryStore, lock};
use crate::store::error::StoreFuture;
use crate::store::outbox::{
    Claim, ClaimedEffect, EffectState, EffectStatus, Outbox, OutboxEntry, Settlement,
};

struct Stored {
    entry: OutboxEntry,
    /// Its place in the emission order.
    seq: u64,
    state: EffectState,
    attempts: u32,
    next_at: i64,
    /// `(owner, until)`.
    lease: Option<(String, i64)>,
    result: Option<Value>,
    error: Option<String>,
    settled_at: Option<i64>,
}

#[derive(Default)]
pub(super) struct OutboxTable {
    effects: HashMap<String, Stored>,
    /// The pending effects' keys, by emission order.
    pending: BTreeMap<u64, String>,
    /// Each resource's effect keys, in emission order.
    by_handle: HashMap<String, Vec<String>>,
    next_seq: u64,
    /// No settled effect was settled before this instant (a lower bound), so the sweep knows
    /// when there is something to forget.
    earliest_settled: Option<i64>,
}

impl OutboxTable {
    /// Adds the effects of a change being written.
    pub(super) fn insert(&mut self, entries: Vec<OutboxEntry>) {
        for entry in entries {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.pending.insert(seq, entry.key.clone());
            self.by_handle
                .entry(entry.handle.clone())
                .or_default()
                .push(entry.key.clone());
            let next_at = entry.created_at;
            self.effects.insert(
                entry.key.clone(),
                Stored {
                    entry,
                    seq,
                    state: EffectState::Pending,
                    attempts: 0,
                    next_at,
                    lease: None,
                    result: None,
                    error: None,
                    settled_at: None,
                },
            );
        }
    }

    fn claim(&mut self, claim: &Claim, now: i64) -> Vec<ClaimedEffect> {
        let mut claimed = Vec::new();
        for key in self.pending.values() {
            if claimed.len() >= claim.limit {
                break;
            }
            let Some(stored) = self.effects.get_mut(key) else {
                continue;
            };
            let leased = stored.lease.as_ref().is_some_and(|(_, until)| *until > now);
            if stored.state != EffectState::Pending
                || leased
                || stored.next_at > now
                || !claim.kinds.contains(&stored.entry.kind)
            {
                continue;
            }
            stored.attempts = stored.attempts.saturating_add(1);
            stored.lease = Some((claim.owner.clone(), now.saturating_add(claim.lease_ms)));
            claimed.push(ClaimedEffect {
                key: stored.entry.key.clone(),
                kind: stored.entry.kind.clone(),
                handle: stored.entry.handle.clone(),
                principal: stored.entry.principal.clone(),
                payload: stored.entry.payload.clone(),
                attempt: stored.attempts,
            });
        }
        claimed
    }

    fn settle(&mut self, key: &str, owner: &str, settlement: Settlement, now: i64) -> bool {
        let Some(stored) = self.effects.get_mut(key) else {
            return false;
        };
        let held = stored
            .lease
            .as_ref()
            .is_some_and(|(holder, _)| holder == owner);
        if !held || stored.state != EffectState::Pending {
            return false;
        }
        stored.lease = None;
        match settlement {
            Settlement::Delivered(result) => {
                stored.state = EffectState::Delivered;
                stored.result = Some(result);
                stored.error = None;
            }
            Settlement::Retry { error, at_ms } => {
                stored.error = Some(error);
                stored.next_at = at_ms;
            }
            Settlement::Failed(error) => {
                stored.state = EffectState::Failed;
                stored.error = Some(error);
            }
        }
        if stored.state != EffectState::Pending {
            stored.settled_at = Some(now);
            self.pending.remove(&stored.seq);
            self.earliest_settled = Some(self.earliest_settled.map_or(now, |at| at.min(now)));
        }
        true
    }

    fn statuses(&self, handle: &str, limit: usize) -> Vec<EffectStatus> {
        let Some(keys) = self.by_handle.get(handle) else {
            return Vec::new();
        };
        keys[keys.len().saturating_sub(limit)..]
            .iter()
            .filter_map(|key| self.effects.get(key))
            .map(|stored| EffectStatus {
                key: stored.entry.key.clone(),
                kind: stored.entry.kind.clone(),
                state: stored.state,
                attempts: stored.attempts,
                result: stored.result.clone(),
                error: stored.error.clone(),
            })
            .collect()
    }

    /// Forgets the effects settled at or before `cutoff`: how many.
    pub(super) fn prune(&mut self, cutoff: i64) -> u64 {
        if self.earliest_settled.is_none_or(|at| at > cutoff) {
            return 0;
        }
        let before = self.effects.len();
        self.effects
            .retain(|_, stored| stored.settled_at.is_none_or(|at| at > cutoff));
        let effects = &self.effects;
        self.by_handle.retain(|_, keys| {
            keys.retain(|key| effects.contains_key(key));
            !keys.is_empty()
        });
        self.earliest_settled = self
            .effects
            .values()
            .filter_map(|stored| stored.settled_at)
            .min();
        (before - self.effects.len()) as u64
    }
}

impl Outbox for MemoryStore {
    fn claim_effects(&self, claim: Claim) -> StoreFuture<'_, Vec<ClaimedEffect>> {
        let now = self.inner.config.clock.now_millis();
        let claimed = lock(&self.inner.outbox).claim(&claim, now);
        Box::pin(std::future::ready(Ok(claimed)))
    }

    fn settle_effect<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        settlement: Settlement,
    ) -> StoreFuture<'a, bool> {
        let now = self.inner.config.clock.now_millis();
        let settled = lock(&self.inner.outbox).settle(key, owner, settlement, now);
        Box::pin(std::future::ready(Ok(settled)))
    }

    fn effect_statuses<'a>(
        &'a self,
        handle: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<EffectStatus>> {
        let statuses = lock(&self.inner.outbox).statuses(handle, limit);
        Box::pin(std::future::ready(Ok(statuses)))
    }

    fn outbox_signal(&self) -> std::sync::Arc<tokio::sync::Notify> {
        std::sync::Arc::clone(&self.inner.outbox_signal)
    }
}
