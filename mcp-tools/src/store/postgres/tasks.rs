//! Task records in PostgreSQL: one row per task, the record as a document; a change locks the
//! row (`SELECT ... FOR UPDATE`) for the length of one short transaction.

use tokio_postgres::types::ToSql;

use super::schema::backend;
use super::{Inner, PLAN_PER_CALL, PostgresStore};
use crate::store::error::StoreError;
use crate::store::error::StoreFuture;
use crate::store::tasks::record::TaskRecord;
use crate::store::tasks::{TaskChange, TaskInsert, TaskStore};

fn to_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

impl Inner {
    async fn load_task_row(
        &self,
        client: &deadpool_postgres::ClientWrapper,
        id: &str,
        lock: bool,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let sql = if lock {
            &self.sql.task_lock
        } else {
            &self.sql.task_load
        };
        let statement = client.prepare_cached(sql).await.map_err(backend)?;
        let row = client
            .query_opt(&statement, &[&id])
            .await
            .map_err(backend)?;
        let Some(row) = row else { return Ok(None) };
        // Each read also tells how far the database's clock is from this process's.
        self.now(row.get::<_, i64>(1));
        row.get::<_, Option<&[u8]>>(0)
            .map(TaskRecord::decode)
            .transpose()
    }
}

impl TaskStore for PostgresStore {
    /// The database's clock: this process's ([`StoreConfig::clock`]) corrected by the offset
    /// to the database's last observed (within a round trip) when the store connected, by every
    /// state call and by every task read; [`StoreConfig::clock`] itself under
    /// [`TimeSource::StoreClock`](super::TimeSource::StoreClock).
    ///
    /// [`StoreConfig::clock`]: crate::store::StoreConfig::clock
    fn now_millis(&self) -> u64 {
        let local = self.inner.config.clock.now_millis();
        let now = match self.inner.options.time {
            super::TimeSource::Database => local.saturating_add(
                self.inner
                    .clock_offset
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            super::TimeSource::StoreClock => local,
        };
        u64::try_from(now).unwrap_or(0)
    }

    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsert> {
        let inner = &self.inner;
        Box::pin(inner.bounded(async move {
            let session = inner.session().await?;
            let client = session.client();
            let insert = client
                .prepare_cached(&inner.sql.task_insert)
                .await
                .map_err(backend)?;
            let inserted = client
                .execute(
                    &insert,
                    &[
                        &task.id(),
                        &to_i64(task.expires_at_ms()),
                        &task.encode(),
                        &to_i64(task.created_at_ms()),
                    ],
                )
                .await
                .map_err(backend)?;
            let outcome = if inserted == 1 {
                TaskInsert::Inserted
            } else {
                let existing = inner.load_task_row(client, task.id(), false).await?;
                TaskInsert::Existing(Box::new(existing.ok_or_else(|| {
                    StoreError::Backend("a task row vanished between two statements".into())
                })?))
            };
            session.release();
            Ok(outcome)
        }))
    }

    fn load_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        let inner = &self.inner;
        Box::pin(inner.bounded(async move {
            let session = inner.session().await?;
            let found = inner.load_task_row(session.client(), id, false).await?;
            session.release();
            Ok(found)
        }))
    }

    fn update_task<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        let inner = &self.inner;
        Box::pin(inner.bounded(async move {
            let session = inner.session().await?;
            let client = session.client();
            // A failure past BEGIN drops the session unreleased, which closes the connection
            // and so rolls the transaction back.
            client.batch_execute("BEGIN").await.map_err(backend)?;
            let Some(mut record) = inner.load_task_row(client, id, true).await? else {
                client.batch_execute("COMMIT").await.map_err(backend)?;
                session.release();
                return Ok(None);
            };
            if change.apply(&mut record) {
                let update = client
                    .prepare_cached(&inner.sql.task_update)
                    .await
                    .map_err(backend)?;
                client
                    .execute(&update, &[&id, &record.encode()])
                    .await
                    .map_err(backend)?;
            }
            client.batch_execute("COMMIT").await.map_err(backend)?;
            session.release();
            Ok(Some(record))
        }))
    }

    fn purge_tasks(&self, now_ms: u64) -> StoreFuture<'_, u64> {
        let inner = &self.inner;
        Box::pin(inner.bounded(async move {
            let session = inner.session().await?;
            let client = session.client();
            let purge = client
                .prepare_cached(&inner.sql.task_purge)
                .await
                .map_err(backend)?;
            let now_ms = to_i64(now_ms);
            let params: [&(dyn ToSql + Sync); 1] = [&now_ms];
            let (_, _, deleted, _) = tokio::try_join!(
                biased;
                client.batch_execute("BEGIN"),
                client.batch_execute(PLAN_PER_CALL),
                client.execute(&purge, &params),
                client.batch_execute("COMMIT"),
            )
            .map_err(backend)?;
            session.release();
            Ok(deleted)
        }))
    }
}
