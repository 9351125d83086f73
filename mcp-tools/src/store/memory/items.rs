//! The items of a resource's collections in memory: each item on its own, so a change of `k`
//! items costs `k` map updates whatever the collection holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::store::collection::{ItemWrite, StoredItem};

/// One resource's items, kept under its writer's lock.
#[derive(Default)]
pub(super) struct ItemTable {
    /// Each live item by (collection, id): the version that wrote it and its value.
    live: BTreeMap<(&'static str, u64), (u64, Arc<Value>)>,
    /// The live items by the version that wrote them.
    live_by_version: BTreeSet<(u64, &'static str, u64)>,
    /// Remembered removals, by the version that made them.
    removals: BTreeSet<(u64, &'static str, u64)>,
    /// When each remembered removal was made.
    removed: HashMap<(&'static str, u64), u64>,
}

impl ItemTable {
    pub(super) fn get(&self, wanted: &[(&'static str, u64)]) -> Vec<(&'static str, StoredItem)> {
        wanted
            .iter()
            .filter_map(|&(field, id)| {
                if let Some((version, value)) = self.live.get(&(field, id)) {
                    return Some((field, stored(id, *version, Some(value))));
                }
                let version = *self.removed.get(&(field, id))?;
                Some((field, stored(id, version, None)))
            })
            .collect()
    }

    pub(super) fn page(&self, field: &'static str, after: u64, limit: usize) -> Vec<StoredItem> {
        self.live
            .range((field, after.saturating_add(1))..)
            .take_while(|((known, _), _)| *known == field)
            .take(limit)
            .map(|((_, id), (version, value))| stored(*id, *version, Some(value)))
            .collect()
    }

    pub(super) fn since(&self, version: u64, limit: usize) -> Vec<(String, StoredItem)> {
        let from = (version.saturating_add(1), "", 0);
        let mut written: Vec<(u64, &'static str, u64)> = self
            .live_by_version
            .range(from..)
            .take(limit)
            .chain(self.removals.range(from..).take(limit))
            .copied()
            .collect();
        written.sort_unstable();
        written.truncate(limit);
        written
            .into_iter()
            .map(|(at, field, id)| {
                let value = self.live.get(&(field, id)).map(|(_, value)| value);
                (field.to_owned(), stored(id, at, value))
            })
            .collect()
    }

    /// Applies `writes` at `version`, and forgets removals made at or before `forget_through`.
    pub(super) fn write(&mut self, writes: Vec<ItemWrite>, version: u64, forget_through: u64) {
        for ItemWrite { field, id, value } in writes {
            let key = (field, id);
            if let Some((was, _)) = self.live.remove(&key) {
                self.live_by_version.remove(&(was, field, id));
            }
            if let Some(was) = self.removed.remove(&key) {
                self.removals.remove(&(was, field, id));
            }
            match value {
                Some(value) => {
                    self.live.insert(key, (version, Arc::new(value)));
                    self.live_by_version.insert((version, field, id));
                }
                None => {
                    self.removed.insert(key, version);
                    self.removals.insert((version, field, id));
                }
            }
        }
        while let Some(&(at, field, id)) = self.removals.first()
            && at <= forget_through
        {
            self.removals.pop_first();
            self.removed.remove(&(field, id));
        }
    }
}

fn stored(id: u64, version: u64, value: Option<&Arc<Value>>) -> StoredItem {
    StoredItem {
        id,
        version,
        value: value.map(|value| Value::clone(value)),
    }
}
