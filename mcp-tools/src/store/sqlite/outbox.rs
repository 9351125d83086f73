//! The outbox in the SQLite file: one row per effect, written in its change's transaction;
//! claims and settlements go through the store's writer like every other write, so two
//! processes sharing the file never claim one effect twice.

use std::sync::Arc;

use rusqlite::params;

use super::SqliteStore;
use crate::store::error::{StoreError, StoreFuture};
use crate::store::outbox::{
    Claim, ClaimedEffect, EffectStatus, Outbox, Settlement, payload_from_text, settlement_columns,
    status_from_columns,
};

/// Leases up to `?5` due effects of the kinds in the JSON array `?4` to `?1` until `?2`, at `?3`:
/// a walk of the pending effects' index in emission order, so its cost follows what is pending,
/// not what the outbox keeps.
pub(super) const CLAIM_SQL: &str = "UPDATE mcp_outbox
    SET attempts = attempts + 1, lease_owner = ?1, lease_until = ?2
    WHERE seq IN (
        SELECT seq FROM mcp_outbox
        WHERE state = 'pending' AND next_at <= ?3
          AND (lease_until IS NULL OR lease_until <= ?3)
          AND kind IN (SELECT value FROM json_each(?4))
        ORDER BY seq LIMIT ?5)
    RETURNING seq, key, kind, handle, principal, payload, attempts";

/// The newest `?2` effects of resource `?1`, oldest first.
pub(super) const STATUSES_SQL: &str = "SELECT key, kind, state, attempts, result, error FROM (
        SELECT seq, key, kind, state, attempts, result, error FROM mcp_outbox
        WHERE handle = ?1 ORDER BY seq DESC LIMIT ?2)
    ORDER BY seq";

/// Deletes a sweep batch of effects settled at or before `?1`.
pub(super) const PRUNE_SQL: &str = "DELETE FROM mcp_outbox WHERE seq IN (
    SELECT seq FROM mcp_outbox WHERE settled_at IS NOT NULL AND settled_at <= ?1 LIMIT 4096)";

impl Outbox for SqliteStore {
    fn claim_effects(&self, claim: Claim) -> StoreFuture<'_, Vec<ClaimedEffect>> {
        let writer = Arc::clone(&self.inner.writer);
        Box::pin(async move {
            let kinds = serde_json::to_string(&claim.kinds)
                .map_err(|error| StoreError::Backend(error.to_string()))?;
            let limit = i64::try_from(claim.limit).unwrap_or(i64::MAX);
            writer
                .run(move |txn, now| {
                    let mut statement = txn.connection.prepare_cached(CLAIM_SQL)?;
                    let rows = statement.query_map(
                        params![
                            claim.owner,
                            now.saturating_add(claim.lease_ms),
                            now,
                            kinds,
                            limit
                        ],
                        |row| {
                            Ok((
                                row.get::<_, i64>(0)?,
                                row.get::<_, String>(1)?,
                                row.get::<_, String>(2)?,
                                row.get::<_, String>(3)?,
                                row.get::<_, String>(4)?,
                                row.get::<_, String>(5)?,
                                row.get::<_, i64>(6)?,
                            ))
                        },
                    )?;
                    let mut claimed = Vec::new();
                    for row in rows {
                        let (seq, key, kind, handle, principal, payload, attempts) = row?;
                        claimed.push((
                            seq,
                            ClaimedEffect {
                                key,
                                kind,
                                handle,
                                principal,
                                payload: payload_from_text(&payload),
                                attempt: u32::try_from(attempts).unwrap_or(u32::MAX),
                            },
                        ));
                    }
                    // RETURNING gives rows in no promised order.
                    claimed.sort_by_key(|(seq, _)| *seq);
                    Ok(claimed.into_iter().map(|(_, effect)| effect).collect())
                })
                .await
        })
    }

    fn settle_effect<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        settlement: Settlement,
    ) -> StoreFuture<'a, bool> {
        let writer = Arc::clone(&self.inner.writer);
        let (key, owner) = (key.to_owned(), owner.to_owned());
        Box::pin(async move {
            writer
                .run(move |txn, now| {
                    let (state, result, error, next_at) = settlement_columns(&settlement);
                    let settled_at = (state != "pending").then_some(now);
                    let changed = txn
                        .connection
                        .prepare_cached(
                            "UPDATE mcp_outbox
                             SET state = ?3, result = ?4, error = ?5,
                                 next_at = COALESCE(?6, next_at), settled_at = ?7,
                                 lease_owner = NULL, lease_until = NULL
                             WHERE key = ?1 AND lease_owner = ?2 AND state = 'pending'",
                        )?
                        .execute(params![
                            key, owner, state, result, error, next_at, settled_at
                        ])?;
                    Ok(changed == 1)
                })
                .await
        })
    }

    fn effect_statuses<'a>(
        &'a self,
        handle: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<EffectStatus>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Box::pin(async move {
            self.inner.with_reader(|connection| {
                let mut statement = connection.prepare_cached(STATUSES_SQL)?;
                let rows = statement.query_map(params![handle, limit], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, i64>(3)?,
                        row.get::<_, Option<String>>(4)?,
                        row.get::<_, Option<String>>(5)?,
                    ))
                })?;
                let mut statuses = Vec::new();
                for row in rows {
                    let (key, kind, state, attempts, result, error) = row?;
                    statuses.push(status_from_columns(
                        key,
                        kind,
                        &state,
                        attempts,
                        result.as_deref(),
                        error,
                    )?);
                }
                Ok(statuses)
            })
        })
    }

    fn outbox_signal(&self) -> std::sync::Arc<tokio::sync::Notify> {
        std::sync::Arc::clone(&self.inner.outbox_signal)
    }
}
