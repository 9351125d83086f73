//! A table of values shared by key.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use super::lock;

/// Values shared by key among the parties using them. The first party to join a key makes its
/// value; the last to leave, whether it finished or was cancelled midway, removes it, so the
/// table holds only what someone still uses.
pub(crate) struct Shared<K, V> {
    // The table changes by whole map operations and counts: a poisoned lock guards a whole map.
    table: Mutex<HashMap<K, (Arc<V>, usize)>>,
}

impl<K: Eq + Hash + Clone, V: Default> Shared<K, V> {
    pub(crate) fn new() -> Self {
        Shared {
            table: Mutex::new(HashMap::new()),
        }
    }

    /// `key`'s value, made now if nobody uses it, until the member is dropped.
    pub(crate) fn join(&self, key: K) -> Member<'_, K, V> {
        let mut table = lock(&self.table);
        let (value, members) = table.entry(key.clone()).or_default();
        // Counted rather than read off the value's reference count: a party may hold other
        // references (a future cancelled midway drops them in no set order).
        *members += 1;
        let value = Arc::clone(value);
        drop(table);
        Member {
            shared: self,
            key,
            value,
        }
    }

    /// How many parties use `key`'s value.
    #[cfg(test)]
    pub(crate) fn members(&self, key: &K) -> usize {
        lock(&self.table)
            .get(key)
            .map_or(0, |(_, members)| *members)
    }

    /// How many keys someone uses.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.table).len()
    }
}

/// A party's use of a key's value in [`Shared`].
pub(crate) struct Member<'a, K: Eq + Hash, V> {
    shared: &'a Shared<K, V>,
    key: K,
    value: Arc<V>,
}

impl<K: Eq + Hash, V> Member<'_, K, V> {
    pub(crate) fn value(&self) -> &Arc<V> {
        &self.value
    }
}

impl<K: Eq + Hash, V> Drop for Member<'_, K, V> {
    fn drop(&mut self) {
        let mut table = lock(&self.shared.table);
        if let Some((_, members)) = table.get_mut(&self.key) {
            *members -= 1;
            if *members == 0 {
                table.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_shared_while_used_and_forgotten_by_the_last_to_leave() {
        let shared = Shared::<u8, Mutex<u32>>::new();
        let first = shared.join(1);
        let second = shared.join(1);
        assert!(Arc::ptr_eq(first.value(), second.value()));
        *lock(first.value()) += 1;
        assert_eq!(*lock(second.value()), 1);
        let other = shared.join(2);
        assert!(!Arc::ptr_eq(first.value(), other.value()));
        assert_eq!((shared.members(&1), shared.len()), (2, 2));
        drop(other);
        drop(first);
        assert_eq!((shared.members(&1), shared.len()), (1, 1));
        // Another reference to the value does not keep the key.
        let kept = Arc::clone(second.value());
        drop(second);
        assert_eq!(shared.len(), 0);
        assert_eq!(*lock(&kept), 1);
        assert_eq!(
            *lock(shared.join(1).value()),
            0,
            "a new value once forgotten"
        );
    }
}
