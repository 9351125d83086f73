//! Task records in the SQLite file: one row per task, the record as a JSON document.

use std::sync::Arc;

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use crate::store::error::StoreError;
use crate::store::error::StoreFuture;
use crate::store::tasks::record::TaskRecord;
use crate::store::tasks::{TaskChange, TaskInsert, TaskStore};

const LOAD_SQL: &str = "SELECT record FROM mcp_tasks WHERE id = ?1";

fn to_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn load(connection: &rusqlite::Connection, id: &str) -> Result<Option<TaskRecord>, StoreError> {
    let bytes: Option<Vec<u8>> = connection
        .prepare_cached(LOAD_SQL)?
        .query_row([id], |row| row.get(0))
        .optional()?;
    bytes.map(|bytes| TaskRecord::decode(&bytes)).transpose()
}

/// Tasks go through the store's writer like every other write, so a task committed here is
/// visible to every process that opened the file.
impl TaskStore for SqliteStore {
    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsert> {
        let writer = Arc::clone(&self.inner.writer);
        Box::pin(async move {
            writer
                .run(move |txn, _| {
                    let inserted = txn
                        .connection
                        .prepare_cached(
                            "INSERT INTO mcp_tasks (id, expires_at, record) VALUES (?1, ?2, ?3)
                             ON CONFLICT (id) DO UPDATE
                                 SET expires_at = excluded.expires_at, record = excluded.record
                                 WHERE mcp_tasks.expires_at <= ?4",
                        )?
                        .execute(params![
                            task.id(),
                            to_i64(task.expires_at_ms()),
                            task.encode(),
                            to_i64(task.created_at_ms())
                        ])?;
                    if inserted == 1 {
                        return Ok(TaskInsert::Inserted);
                    }
                    let existing = load(txn.connection, task.id())?.ok_or_else(|| {
                        StoreError::Backend("a task row vanished inside its transaction".into())
                    })?;
                    Ok(TaskInsert::Existing(Box::new(existing)))
                })
                .await
        })
    }

    fn load_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move { self.inner.with_reader(|connection| load(connection, id)) })
    }

    fn update_task<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        let writer = Arc::clone(&self.inner.writer);
        let id = id.to_owned();
        Box::pin(async move {
            writer
                .run(move |txn, _| {
                    let Some(mut record) = load(txn.connection, &id)? else {
                        return Ok(None);
                    };
                    if change.apply(&mut record) {
                        txn.connection
                            .prepare_cached("UPDATE mcp_tasks SET record = ?2 WHERE id = ?1")?
                            .execute(params![id, record.encode()])?;
                    }
                    Ok(Some(record))
                })
                .await
        })
    }

    /// [`StoreConfig::clock`](crate::store::StoreConfig::clock), the clock resources expire by.
    fn now_millis(&self) -> u64 {
        crate::store::tasks::clock_millis(&*self.inner.config.clock)
    }

    fn purge_tasks(&self, now_ms: u64) -> StoreFuture<'_, u64> {
        let writer = Arc::clone(&self.inner.writer);
        Box::pin(async move {
            writer
                .run(move |txn, _| {
                    let deleted = txn
                        .connection
                        .prepare_cached("DELETE FROM mcp_tasks WHERE expires_at < ?1")?
                        .execute([to_i64(now_ms)])?;
                    Ok(deleted as u64)
                })
                .await
        })
    }
}
