//! Decoded states by handle and version, so that a read or a mutation of a state the process
//! has already decoded skips parsing its JSON text again.
//!
//! A version's state never changes once committed (a write sets a new version with every new
//! state), so an entry is valid for as long as its version is the one the row holds. Every
//! lookup names the version the row read in the same transaction, and a state is published
//! only once it is committed: a row another process rewrote has a version no entry here has,
//! and a write rolled back publishes nothing.
//!
//! The cache is two generations of at most half the budget each, measured in the memory the
//! decoded states take ([`footprint`], an estimate from their structure): entries go into the
//! young one; when it is full it becomes the old one and the previous old one is dropped; a hit
//! in the old generation moves the entry back into the young one. That keeps what is used, in
//! constant time per call, without a list to maintain.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value};

/// What an entry costs besides its state's own heap: the `Arc` around the state, the map's slot
/// and the handle's key.
const ENTRY_COST: usize = 2 * size_of::<usize>() + size_of::<Value>() + 64;

/// A B-tree node of an object's members (`serde_json::Map` is a `BTreeMap`): up to 11 keys and
/// values, a parent pointer and two counters.
const OBJECT_NODE: usize =
    11 * (size_of::<String>() + size_of::<Value>()) + size_of::<usize>() + size_of::<[u16; 2]>();

/// An estimate of the memory `handle`'s entry holds with `state` decoded: strings' bytes,
/// arrays' slots, objects' tree nodes (one for up to 11 members; past that, nodes a little over
/// half full, as sorted inserts leave them) and the entry itself.
pub(super) fn footprint(handle: &str, state: &Value) -> usize {
    ENTRY_COST + handle.len() + heap_size(state)
}

fn heap_size(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(text) => text.capacity(),
        Value::Array(items) => {
            items.capacity() * size_of::<Value>() + items.iter().map(heap_size).sum::<usize>()
        }
        Value::Object(members) => {
            object_nodes(members) * OBJECT_NODE
                + members
                    .iter()
                    .map(|(key, member)| key.capacity() + heap_size(member))
                    .sum::<usize>()
        }
    }
}

fn object_nodes(members: &Map<String, Value>) -> usize {
    match members.len() {
        0 => 0,
        1..=11 => 1,
        members => members.div_ceil(6),
    }
}

/// A state decoded or written in a transaction, published once the transaction commits.
pub(super) struct Decoded {
    pub(super) handle: String,
    pub(super) version: u64,
    pub(super) state: Arc<Value>,
    /// Its [`footprint`].
    pub(super) bytes: usize,
}

/// Decoded states, of a [`footprint`] of at most `budget` bytes in all.
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
    /// A cache of at most `budget` bytes; `0` keeps nothing.
    pub(super) fn new(budget: usize) -> Self {
        StateCache {
            budget,
            generations: Mutex::default(),
        }
    }

    /// Whether this cache keeps anything (a budget of 0 keeps nothing).
    pub(super) fn keeps_any(&self) -> bool {
        self.budget > 0
    }

    fn generations(&self) -> MutexGuard<'_, Generations> {
        // Every change to the maps completes before the lock is let go (no user code runs
        // under it), so a poisoned lock guards consistent maps.
        crate::sync::lock(&self.generations)
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
        // A newer version than the one asked for (a reader on an older snapshot) stays where
        // it is.
        if generations.old.entries.get(handle)?.version != version {
            return None;
        }
        let entry = generations.old.take(handle)?;
        let state = Arc::clone(&entry.state);
        let dropped = self.keep(&mut generations, handle, entry);
        drop(generations);
        drop(dropped);
        Some(state)
    }

    /// Keeps the states a committed transaction decoded or wrote.
    pub(super) fn publish(&self, decoded: Vec<Decoded>) {
        if self.budget == 0 || decoded.is_empty() {
            return;
        }
        let mut generations = self.generations();
        // Freed once the lock is let go: freeing a state takes as long as its size.
        let (mut replaced, mut dropped) = (Vec::new(), Vec::new());
        for Decoded {
            handle,
            version,
            state,
            bytes,
        } in decoded
        {
            // A handle is in one generation at most.
            let kept = generations.young.take(&handle);
            let kept = kept.or_else(|| generations.old.take(&handle));
            // A reader that decoded an older version may publish after the writer published
            // a newer one: the newer stays. At the same version the value already shared stays,
            // so that one copy is held, not one per reader that decoded it.
            let entry = match kept {
                Some(kept) if kept.version >= version => kept,
                older => {
                    replaced.extend(older);
                    Entry {
                        version,
                        state,
                        bytes,
                    }
                }
            };
            dropped.extend(self.keep(&mut generations, &handle, entry));
        }
        drop(generations);
        drop((replaced, dropped));
    }

    /// Puts `entry` in the young generation, which becomes the old one when it would pass half
    /// the budget. A state larger than that is not kept. Returns the generation that went, for
    /// the caller to free once it has let go of the lock: freeing many states takes a while.
    #[must_use]
    fn keep(
        &self,
        generations: &mut Generations,
        handle: &str,
        entry: Entry,
    ) -> Option<Generation> {
        let half = self.budget / 2;
        if entry.bytes > half {
            return None;
        }
        let dropped = (generations.young.bytes + entry.bytes > half).then(|| {
            let young = std::mem::take(&mut generations.young);
            std::mem::replace(&mut generations.old, young)
        });
        generations.young.bytes += entry.bytes;
        generations.young.entries.insert(handle.into(), entry);
        dropped
    }

    /// Bytes held (for tests of the bound).
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

    /// The sizes the estimate counts, on a 64-bit target: a `Value` is 32 bytes and a `String`
    /// 24, so a node of 11 members is 628 bytes.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn the_estimate_counts_a_node_and_an_entry_at_their_sizes() {
        assert_eq!((OBJECT_NODE, ENTRY_COST), (628, 112));
    }

    #[test]
    fn only_a_budget_above_zero_keeps_anything() {
        assert!(!StateCache::new(0).keeps_any());
        assert!(StateCache::new(1).keeps_any());
    }

    #[test]
    fn the_footprint_counts_nodes_slots_and_bytes() {
        let base = footprint("h", &Value::Null);
        assert_eq!(base, ENTRY_COST + 1);
        let members = |n: usize| -> Value {
            // Keys of 3 bytes, allocated to their length.
            let key = |i: usize| String::from(format!("k{i:02}").as_str());
            Value::Object((0..n).map(|i| (key(i), Value::Null)).collect())
        };
        assert_eq!(footprint("h", &members(1)) - base, OBJECT_NODE + 3);
        assert_eq!(footprint("h", &members(11)) - base, OBJECT_NODE + 33);
        assert_eq!(footprint("h", &members(12)) - base, 2 * OBJECT_NODE + 36);
        assert_eq!(footprint("h", &members(60)) - base, 10 * OBJECT_NODE + 180);
        let text = Value::String("x".repeat(100));
        assert_eq!(footprint("h", &text) - base, 100);
        let items = Value::Array(vec![text.clone(), Value::Bool(true)]);
        assert_eq!(footprint("h", &items) - base, 2 * size_of::<Value>() + 100);
        // A small object costs a node, whatever its text: far more than its text.
        assert!(footprint("h", &serde_json::json!({ "n": 7 })) > 10 * r#"{"n":7}"#.len());
    }

    #[test]
    fn a_newer_version_in_the_old_generation_stays_when_an_older_one_is_asked_for() {
        // Half the budget is 20 bytes: two entries of 10 fill a generation.
        let cache = StateCache::new(40);
        cache.publish(vec![
            decoded("a", 5, 10),
            decoded("b", 1, 10),
            decoded("c", 1, 10),
        ]);
        // "a" and "b" went to the old generation when "c" came.
        assert!(cache.get("a", 4).is_none());
        assert!(cache.get("a", 5).is_some());
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
    fn what_is_held_stays_within_the_budget() {
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
