//! The outbox in PostgreSQL: one row per effect, inserted with its change (in the commit's
//! pipelined flight, so no round trip more); a claim is one statement that skips rows another
//! replica is claiming, and every time is the database's.

use super::schema::backend;
use super::{PostgresStore, corrupt};
use crate::store::error::StoreFuture;
use crate::store::outbox::{
    Claim, ClaimedEffect, EffectStatus, Outbox, Settlement, payload_from_text, settlement_columns,
    status_from_columns,
};
use crate::store::tasks::TaskStore;

/// The store's clock: the database's as this replica last saw it (see
/// [`TaskStore::now_millis`]), or the configured clock under
/// [`TimeSource::StoreClock`](super::TimeSource::StoreClock).
fn now_of(store: &PostgresStore) -> i64 {
    i64::try_from(TaskStore::now_millis(store)).unwrap_or(i64::MAX)
}

impl Outbox for PostgresStore {
    fn claim_effects(&self, claim: Claim) -> StoreFuture<'_, Vec<ClaimedEffect>> {
        let inner = &self.inner;
        Box::pin(inner.bounded(async move {
            let session = inner.session().await?;
            let client = session.client();
            let statement = client
                .prepare_cached(&inner.sql.claim_effects)
                .await
                .map_err(backend)?;
            let limit = i64::try_from(claim.limit).unwrap_or(i64::MAX);
            let now = now_of(self);
            let rows = client
                .query(
                    &statement,
                    &[&claim.owner, &claim.lease_ms, &claim.kinds, &limit, &now],
                )
                .await
                .map_err(backend)?;
            session.release();
            let mut claimed = Vec::with_capacity(rows.len());
            for row in rows {
                let seq: i64 = row.try_get(0).map_err(corrupt)?;
                let payload: &str = row.try_get(5).map_err(corrupt)?;
                let attempts: i32 = row.try_get(6).map_err(corrupt)?;
                claimed.push((
                    seq,
                    ClaimedEffect {
                        key: row.try_get(1).map_err(corrupt)?,
                        kind: row.try_get(2).map_err(corrupt)?,
                        handle: row.try_get(3).map_err(corrupt)?,
                        principal: row.try_get(4).map_err(corrupt)?,
                        payload: payload_from_text(payload),
                        attempt: u32::try_from(attempts).unwrap_or(0),
                    },
                ));
            }
            // RETURNING gives rows in no promised order.
            claimed.sort_by_key(|(seq, _)| *seq);
            Ok(claimed.into_iter().map(|(_, effect)| effect).collect())
        }))
    }

    fn settle_effect<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        settlement: Settlement,
    ) -> StoreFuture<'a, bool> {
        let inner = &self.inner;
        Box::pin(inner.bounded(async move {
            let session = inner.session().await?;
            let client = session.client();
            let statement = client
                .prepare_cached(&inner.sql.settle_effect)
                .await
                .map_err(backend)?;
            let (state, result, error, next_at) = settlement_columns(&settlement);
            let now = now_of(self);
            let changed = client
                .execute(
                    &statement,
                    &[&key, &owner, &state, &result, &error, &next_at, &now],
                )
                .await
                .map_err(backend)?;
            session.release();
            Ok(changed == 1)
        }))
    }

    fn effect_statuses<'a>(
        &'a self,
        handle: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<EffectStatus>> {
        let inner = &self.inner;
        Box::pin(inner.bounded(async move {
            let session = inner.session().await?;
            let client = session.client();
            let statement = client
                .prepare_cached(&inner.sql.effect_statuses)
                .await
                .map_err(backend)?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = client
                .query(&statement, &[&handle, &limit])
                .await
                .map_err(backend)?;
            session.release();
            let mut statuses = Vec::with_capacity(rows.len());
            for row in rows {
                let state: &str = row.try_get(2).map_err(corrupt)?;
                let attempts: i32 = row.try_get(3).map_err(corrupt)?;
                statuses.push(status_from_columns(
                    row.try_get(0).map_err(corrupt)?,
                    row.try_get(1).map_err(corrupt)?,
                    state,
                    i64::from(attempts),
                    row.try_get(4).map_err(corrupt)?,
                    row.try_get(5).map_err(corrupt)?,
                )?);
            }
            Ok(statuses)
        }))
    }

    fn outbox_signal(&self) -> std::sync::Arc<tokio::sync::Notify> {
        std::sync::Arc::clone(&self.inner.outbox_signal)
    }
}
