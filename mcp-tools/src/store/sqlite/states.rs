//! Decoded states by handle and version, so that a read or a mutation of a state the process
//! has already decoded skips parsing its JSON text again.
//!
//! A version's state never changes once committed (a write sets a new version with every new
//! state), so an entry is valid for as long as its version is the one the row holds. Every
//! lookup names the version the row read in the same transaction, and a state is published
//! only once it is committed: a row another process rewrote has a version no entry here has,
//! and a write rolled back publishes nothing.
//!
//! The cache is two generations of at most half the budget each, measured in bytes of the JSON
//! text SQLite holds: entries go into the young one; when it is full it becomes the old one and
//! the previous old one is dropped; a hit in the old generation moves the entry back into the
//! young one. That keeps what is used, in constant time per call, without a list to maintain.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

/// A state decoded or written in a transaction, published once the transaction commits.
pub(super) struct Decoded {
    pub(super) handle: String,
    pub(super) version: u64,
    pub(super) state: Arc<Value>,
    /// The length of its JSON text.
    pub(super) bytes: usize,
}

/// Decoded states, at most `budget` bytes of their JSON text.
pub(super) struct StateCache {
    budget: usize,
    generations: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    young: Generation,
    old: Generation,
}

#[derive(Default)]
struct Generation {
    entries: HashMap<Box<str>, Entry>,
    bytes: usize,
}

struct Entry {
    version: u64,
    state: Arc<Value>,
    bytes: usize,
}

impl Generation {
    fn take(&mut self, handle: &str) -> Option<Entry> {
        let entry = self.entries.remove(handle)?;
        self.bytes -= entry.bytes;
        Some(entry)
    }
}

impl StateCache {
    /// A cache of at most `budget` bytes of JSON text; `0` keeps nothing.
    pub(super) fn new(budget: usize) -> Self {
        StateCache {
            budget,
            generations: Mutex::default(),
        }
    }

    fn generations(&self) -> MutexGuard<'_, Generations> {
        // Every change to the maps completes before the lock is let go (no user code runs
        // under it), so a poisoned lock guards consistent maps.
        self.generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The state of `handle` at `version`, if it was decoded here.
    pub(super) fn get(&self, handle: &str, version: u64) -> Option<Arc<Value>> {
        if self.budget == 0 {
            return None;
        }
        let mut generations = self.generations();
        if let Some(entry) = generations.young.entries.get(handle) {
            return (entry.version == version).then(|| Arc::clone(&entry.state));
        }
        let entry = generations.old.take(handle)?;
        if entry.version != version {
            return None;
        }
        let state = Arc::clone(&entry.state);
        self.keep(&mut generations, handle, entry);
        Some(state)
    }

    /// Keeps the states a committed transaction decoded or wrote.
    pub(super) fn publish(&self, decoded: Vec<Decoded>) {
        if self.budget == 0 || decoded.is_empty() {
            return;
        }
        let mut generations = self.generations();
        for Decoded {
            handle,
            version,
            state,
            bytes,
        } in decoded
        {
            let young = generations.young.take(&handle);
            let old = generations.old.take(&handle);
            // A reader that decoded an older version may publish after the writer published
            // a newer one: the newer stays. At the same version the value already shared stays,
            // so that one copy is held, not one per reader that decoded it.
            let newest = [young, old]
                .into_iter()
                .flatten()
                .filter(|kept| kept.version >= version)
                .max_by_key(|kept| kept.version);
            let entry = newest.unwrap_or(Entry {
                version,
                state,
                bytes,
            });
            self.keep(&mut generations, &handle, entry);
        }
    }

    /// Puts `entry` in the young generation, which becomes the old one when it would pass half
    /// the budget. A state larger than that is not kept.
    fn keep(&self, generations: &mut Generations, handle: &str, entry: Entry) {
        let half = self.budget / 2;
        if entry.bytes > half {
            return;
        }
        if generations.young.bytes + entry.bytes > half {
            generations.old = std::mem::take(&mut generations.young);
        }
        generations.young.bytes += entry.bytes;
        generations.young.entries.insert(handle.into(), entry);
    }

    /// Bytes of JSON text held (for tests of the bound).
    #[cfg(test)]
    fn held(&self) -> usize {
        let generations = self.generations();
        generations.young.bytes + generations.old.bytes
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decoded(handle: &str, version: u64, bytes: usize) -> Decoded {
        Decoded {
            handle: handle.into(),
            version,
            state: Arc::new(json!({ "handle": handle, "version": version })),
            bytes,
        }
    }

    fn version_of(state: &Value) -> u64 {
        state["version"].as_u64().unwrap()
    }

    #[test]
    fn a_state_is_found_at_its_version_only() {
        let cache = StateCache::new(1000);
        cache.publish(vec![decoded("a", 3, 10)]);
        assert_eq!(cache.get("a", 3).map(|state| version_of(&state)), Some(3));
        assert!(cache.get("a", 4).is_none());
        assert!(cache.get("a", 2).is_none());
        assert!(cache.get("b", 3).is_none());
    }

    #[test]
    fn a_newer_version_replaces_an_older_one_and_not_the_reverse() {
        let cache = StateCache::new(1000);
        cache.publish(vec![decoded("a", 3, 10), decoded("a", 4, 10)]);
        assert!(cache.get("a", 3).is_none());
        assert!(cache.get("a", 4).is_some());
        // A reader that decoded version 3 before the write publishes after it.
        cache.publish(vec![decoded("a", 3, 10)]);
        assert!(cache.get("a", 4).is_some());
        assert!(cache.get("a", 3).is_none());
        assert_eq!(cache.held(), 10);
    }

    #[test]
    fn the_text_held_stays_within_the_budget() {
        let cache = StateCache::new(100);
        for handle in 0..1000 {
            cache.publish(vec![decoded(&handle.to_string(), 1, 7)]);
            assert!(cache.held() <= 100, "{} bytes held", cache.held());
        }
        // The last ones stay; the first ones went with the generation they were in.
        assert!(cache.get("999", 1).is_some());
        assert!(cache.get("0", 1).is_none());
    }

    #[test]
    fn the_cache_fills_its_budget() {
        let cache = StateCache::new(100);
        for handle in 0..10 {
            cache.publish(vec![decoded(&handle.to_string(), 1, 10)]);
        }
        assert_eq!(cache.held(), 100);
        // Then the oldest half goes.
        cache.publish(vec![decoded("10", 1, 10)]);
        assert_eq!(cache.held(), 60);
        assert!(cache.get("4", 1).is_none());
        assert!(cache.get("5", 1).is_some());
    }

    #[test]
    fn a_state_larger_than_half_the_budget_is_not_kept() {
        let cache = StateCache::new(100);
        cache.publish(vec![decoded("big", 1, 51)]);
        assert!(cache.get("big", 1).is_none());
        cache.publish(vec![decoded("fits", 1, 50)]);
        assert!(cache.get("fits", 1).is_some());
    }

    #[test]
    fn a_state_in_use_survives_the_turn_of_a_generation() {
        // Half the budget is 40 bytes: four entries of 10 fill a generation.
        let cache = StateCache::new(80);
        cache.publish(vec![decoded("used", 1, 10)]);
        for round in 0..20 {
            cache.publish(vec![decoded(&format!("other{round}"), 1, 10)]);
            assert!(cache.get("used", 1).is_some(), "lost in round {round}");
        }
        // One not looked up is dropped after two turns.
        assert!(cache.get("other0", 1).is_none());
    }

    #[test]
    fn the_same_version_published_twice_keeps_the_first_value() {
        let cache = StateCache::new(1000);
        cache.publish(vec![decoded("a", 1, 10)]);
        let first = cache.get("a", 1).unwrap();
        cache.publish(vec![decoded("a", 1, 10)]);
        assert!(Arc::ptr_eq(&first, &cache.get("a", 1).unwrap()));
        assert_eq!(cache.held(), 10);
    }

    #[test]
    fn a_budget_of_zero_keeps_nothing() {
        let cache = StateCache::new(0);
        // Not even a text of no bytes.
        cache.publish(vec![decoded("a", 1, 0)]);
        assert!(cache.get("a", 1).is_none());
        assert!(cache.generations().young.entries.is_empty());
    }
}
