//! The memory store's tasks: one record per task, in shards by id.

use super::*;
use crate::store::error::StoreFuture;
use crate::store::tasks::record::TaskRecord;
use crate::store::tasks::{TaskChange, TaskInsert, TaskStore};

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

    /// [`StoreConfig::clock`](crate::store::StoreConfig::clock), the clock resources expire by.
    fn now_millis(&self) -> u64 {
        crate::store::tasks::clock_millis(&*self.inner.config.clock)
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
