//! The boundary's primitives as SQL on one connection, inside a transaction the caller holds.

use super::prune_ledger;
use super::states::{self, Decoded, StateCache};
use crate::store::boundary::{Change, LedgerEntry, LedgerState, Record, Txn};
use crate::store::collection::{ItemWrite, StoredItem};
use crate::store::columns::{
    history_to_drop, json, ledger_state_from_sql, ledger_state_to_sql, to_json, version_from_sql,
    version_to_sql,
};
use crate::store::entity::Lifecycle;
use crate::store::error::StoreError;
use crate::store::fingerprint::Fingerprint;
use crate::store::history::Undo;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::sync::Arc;

/// The current version of a handle.
pub(super) const LOAD_SQL: &str =
    "SELECT kind, owner, version, state, lifecycle, expires_at, ledger_live
     FROM mcp_resources WHERE handle = ?1";

/// The boundary's operations as statements on one connection; the caller holds the transaction.
pub(crate) struct SqlTxn<'c> {
    pub(super) connection: &'c Connection,
    states: &'c StateCache,
    /// The states this transaction decoded or wrote, for `states` once it commits.
    decoded: Vec<Decoded>,
    /// `ledger_live` of the resource last loaded, by handle.
    loaded_count: Option<(String, i64)>,
    /// The resource whose next ledger record its write already counted.
    counted: Option<String>,
    /// What [`Txn::prefetch`] read, until the boundary asks for it.
    prefetched: Option<Prefetched>,
}

/// A resource and a ledger record read in one round trip.
pub(super) struct Prefetched {
    handle: String,
    principal: String,
    operation_id: Option<String>,
    record: Option<Option<(Record, i64)>>,
    entry: Option<Option<LedgerEntry>>,
}

/// The current version of a handle and the ledger record of (principal, operation id), in one
/// row whichever of them exists. The parameters are wrapped in `CAST`: the bundled SQLite is
/// built with STAT4, which re-prepares a statement on every new binding of a bare parameter it
/// could use to plan (a tenth of a mutation's time here); an expression is not used for that,
/// and the plan stays two key searches.
pub(super) const PREFETCH_SQL: &str =
    "SELECT r.kind, r.owner, r.version, r.state, r.lifecycle, r.expires_at,
         r.ledger_live, l.fingerprint, l.outcome, l.claim, l.handle, l.recorded_at, l.expires_at
     FROM (SELECT CAST(?1 AS TEXT) AS handle) AS wanted
     LEFT JOIN mcp_resources AS r ON r.handle = wanted.handle
     LEFT JOIN mcp_ledger AS l
         ON l.principal = CAST(?2 AS TEXT) AND l.operation_id = CAST(?3 AS TEXT)";

impl<'c> SqlTxn<'c> {
    pub(super) fn new(connection: &'c Connection, states: &'c StateCache) -> Self {
        SqlTxn {
            connection,
            states,
            decoded: Vec::new(),
            loaded_count: None,
            counted: None,
            prefetched: None,
        }
    }
}

impl Txn for SqlTxn<'_> {
    fn prefetch(
        &mut self,
        handle: &str,
        principal: &str,
        operation_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut statement = self.connection.prepare_cached(PREFETCH_SQL)?;
        let mut rows = statement.query(params![handle, principal, operation_id])?;
        let row = rows
            .next()?
            .ok_or_else(|| StoreError::Backend("the prefetch returned no row".into()))?;
        let record = self.record_from(handle, row, 0)?;
        let entry = match operation_id {
            Some(_) => entry_from(row, 7)?,
            None => None,
        };
        self.prefetched = Some(Prefetched {
            handle: handle.to_owned(),
            principal: principal.to_owned(),
            operation_id: operation_id.map(str::to_owned),
            record: Some(record),
            entry: Some(entry),
        });
        Ok(())
    }

    fn ledger_get(
        &mut self,
        principal: &str,
        operation_id: &str,
    ) -> Result<Option<LedgerEntry>, StoreError> {
        if let Some(prefetched) = &mut self.prefetched
            && prefetched.principal == principal
            && prefetched.operation_id.as_deref() == Some(operation_id)
            && let Some(entry) = prefetched.entry.take()
        {
            return Ok(entry);
        }
        let mut statement = self.connection.prepare_cached(
            "SELECT fingerprint, outcome, claim, handle, recorded_at, expires_at
             FROM mcp_ledger WHERE principal = ?1 AND operation_id = ?2",
        )?;
        let mut rows = statement.query(params![principal, operation_id])?;
        match rows.next()? {
            Some(row) => entry_from(row, 0),
            None => Ok(None),
        }
    }

    fn ledger_put(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: LedgerEntry,
    ) -> Result<(), StoreError> {
        let (outcome, claim) = ledger_state_to_sql(&entry.state)?;
        self.connection
            .prepare_cached(
                "INSERT INTO mcp_ledger
                 (principal, operation_id, fingerprint, outcome, claim, handle, recorded_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                principal,
                operation_id,
                entry.fingerprint.to_hex(),
                outcome,
                claim,
                entry.handle,
                entry.recorded_at,
                entry.expires_at
            ])?;
        if let (Some(handle), Some(_)) = (&entry.handle, &outcome) {
            if self.counted.as_deref() == Some(handle) {
                self.counted = None;
            } else {
                self.count(handle, 1)?;
            }
        }
        Ok(())
    }

    fn ledger_remove(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: &LedgerEntry,
    ) -> Result<(), StoreError> {
        let removed = self
            .connection
            .prepare_cached("DELETE FROM mcp_ledger WHERE principal = ?1 AND operation_id = ?2")?
            .execute(params![principal, operation_id])?;
        // A sweep earlier in this transaction (at a full share) may have removed the row and
        // taken it off the count already.
        if removed == 1
            && let (Some(handle), LedgerState::Done(_)) = (&entry.handle, &entry.state)
        {
            self.count(handle, -1)?;
        }
        Ok(())
    }

    fn ledger_full(&mut self, handle: &str, quota: u64, now: i64) -> Result<bool, StoreError> {
        let quota = i64::try_from(quota).unwrap_or(i64::MAX);
        let live = match &self.loaded_count {
            Some((loaded, live)) if loaded == handle => *live,
            _ => self.live_count(handle)?,
        };
        if live < quota {
            return Ok(false);
        }
        // At the limit, expired records may still be counted until the sweep takes them off:
        // take a batch of them off now (bounded: this runs inside a request), so the limit
        // counts live records only.
        prune_ledger(self.connection, now)?;
        Ok(self.live_count(handle)? >= quota)
    }

    fn load(&mut self, handle: &str) -> Result<Option<Record>, StoreError> {
        let prefetched = match &mut self.prefetched {
            Some(prefetched) if prefetched.handle == handle => prefetched.record.take(),
            _ => None,
        };
        let loaded = match prefetched {
            Some(loaded) => loaded,
            None => {
                let mut statement = self.connection.prepare_cached(LOAD_SQL)?;
                let mut rows = statement.query([handle])?;
                match rows.next()? {
                    Some(row) => self.record_from(handle, row, 0)?,
                    None => None,
                }
            }
        };
        Ok(loaded.map(|(record, live)| {
            self.loaded_count = Some((handle.to_owned(), live));
            record
        }))
    }

    fn undo_since(
        &mut self,
        handle: &str,
        version: u64,
    ) -> Result<Option<Vec<Vec<Undo>>>, StoreError> {
        let rows = self
            .connection
            .prepare_cached(
                "SELECT version, undo FROM mcp_changes
                 WHERE handle = ?1 AND version > ?2 ORDER BY version DESC",
            )?
            .query_map(params![handle, version_to_sql(version)?], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let oldest = rows.last().map(|(kept, _)| *kept);
        if oldest != Some(version_to_sql(version)? + 1) {
            return Ok(None);
        }
        rows.iter()
            .map(|(_, undo)| json(undo, "stored history"))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn insert(&mut self, handle: &str, record: Record) -> Result<(), StoreError> {
        let state = to_json(&*record.state, "state")?;
        self.connection
            .prepare_cached(
                "INSERT INTO mcp_resources
                 (handle, kind, owner, version, state, lifecycle, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                handle,
                &*record.kind,
                &*record.owner,
                version_to_sql(record.version)?,
                state,
                record.lifecycle.as_str(),
                record.expires_at
            ])?;
        self.note_state(handle, record.version, &record.state);
        Ok(())
    }

    fn write(&mut self, handle: &str, record: Record, change: Change) -> Result<(), StoreError> {
        let Change {
            undo,
            drop_through,
            recorded,
            expiry_moved,
            items,
            collections,
            effects,
        } = change;
        let version = version_to_sql(record.version)?;
        // The boundary loaded version - 1 inside this write transaction; the condition makes
        // any second writer of the same version fail loudly instead of overwriting. The ledger
        // record that follows is counted here, in the same row update. SQLite rewrites an
        // index entry whenever its column is assigned, even to the value it has, so an expiry
        // that did not move is not assigned: the expiry index stays untouched.
        let state = to_json(&*record.state, "state")?;
        let (lifecycle, counted) = (record.lifecycle.as_str(), i64::from(recorded));
        let updated = if expiry_moved {
            self.connection
                .prepare_cached(
                    "UPDATE mcp_resources SET version = ?2, state = ?3, lifecycle = ?4,
                         ledger_live = ledger_live + ?5, expires_at = ?6
                     WHERE handle = ?1 AND version = ?2 - 1",
                )?
                .execute(params![
                    handle,
                    version,
                    state,
                    lifecycle,
                    counted,
                    record.expires_at
                ])?
        } else {
            self.connection
                .prepare_cached(
                    "UPDATE mcp_resources SET version = ?2, state = ?3, lifecycle = ?4,
                         ledger_live = ledger_live + ?5
                     WHERE handle = ?1 AND version = ?2 - 1",
                )?
                .execute(params![handle, version, state, lifecycle, counted])?
        };
        if recorded {
            self.counted = Some(handle.to_owned());
        }
        if updated != 1 {
            return Err(StoreError::Backend(format!(
                "{handle} moved past version {} during its own write transaction",
                version - 1
            )));
        }
        self.note_state(handle, record.version, &record.state);
        self.connection
            .prepare_cached("INSERT INTO mcp_changes (handle, version, undo) VALUES (?1, ?2, ?3)")?
            .execute(params![handle, version, to_json(&undo, "history")?])?;
        self.write_items(handle, version, items)?;
        if !effects.is_empty() {
            let mut insert = self.connection.prepare_cached(
                "INSERT INTO mcp_outbox
                     (key, kind, handle, principal, payload, state, next_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?6)",
            )?;
            for effect in effects {
                insert.execute(params![
                    effect.key,
                    effect.kind,
                    effect.handle,
                    effect.principal,
                    to_json(&effect.payload, "effect")?,
                    effect.created_at
                ])?;
            }
        }
        let drop_through = history_to_drop(drop_through);
        if drop_through > 0 {
            self.connection
                .prepare_cached("DELETE FROM mcp_changes WHERE handle = ?1 AND version <= ?2")?
                .execute(params![handle, version_to_sql(drop_through)?])?;
            if collections {
                self.connection
                    .prepare_cached(
                        "DELETE FROM mcp_item_removals
                         WHERE handle = CAST(?1 AS TEXT) AND version <= CAST(?2 AS INTEGER)",
                    )?
                    .execute(params![handle, version_to_sql(drop_through)?])?;
            }
        }
        Ok(())
    }

    fn items_get(
        &mut self,
        handle: &str,
        wanted: &[(&'static str, u64)],
    ) -> Result<Vec<(&'static str, StoredItem)>, StoreError> {
        let mut live = self.connection.prepare_cached(
            "SELECT version, value FROM mcp_items
             WHERE handle = CAST(?1 AS TEXT) AND field = CAST(?2 AS TEXT)
               AND id = CAST(?3 AS INTEGER)",
        )?;
        let mut removal = self.connection.prepare_cached(
            "SELECT version FROM mcp_item_removals
             WHERE handle = CAST(?1 AS TEXT) AND field = CAST(?2 AS TEXT)
               AND id = CAST(?3 AS INTEGER)",
        )?;
        let mut found = Vec::with_capacity(wanted.len());
        for &(field, id) in wanted {
            // No id past SQLite's integers was ever minted.
            let Ok(sql_id) = i64::try_from(id) else {
                continue;
            };
            let key = params![handle, field, sql_id];
            let item = live
                .query_row(key, |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .optional()?;
            let item = match item {
                Some((version, value)) => Some(StoredItem {
                    id,
                    version: version_from_sql(version)?,
                    value: Some(json(&value, "collection item")?),
                }),
                None => removal
                    .query_row(key, |row| row.get::<_, i64>(0))
                    .optional()?
                    .map(|version| {
                        Ok::<_, StoreError>(StoredItem {
                            id,
                            version: version_from_sql(version)?,
                            value: None,
                        })
                    })
                    .transpose()?,
            };
            found.extend(item.map(|item| (field, item)));
        }
        Ok(found)
    }

    fn items_page(
        &mut self,
        handle: &str,
        field: &'static str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredItem>, StoreError> {
        // The limit is written into the SQL, not bound: a bound LIMIT lets SQLite's planner use
        // its value, which expires the statement on every new binding and re-plans it on every
        // call. The limits the boundary asks for are constants, so each is one cached statement.
        self.connection
            .prepare_cached(&format!(
                "SELECT id, version, value FROM mcp_items
                 WHERE handle = CAST(?1 AS TEXT) AND field = CAST(?2 AS TEXT)
                   AND id > CAST(?3 AS INTEGER)
                 ORDER BY id LIMIT {limit}"
            ))?
            .query_map(params![handle, field, version_to_sql(after)?], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                ))
            })?
            .map(|row| {
                let (id, version, value) = row?;
                Ok(StoredItem {
                    id: version_from_sql(id)?,
                    version: version_from_sql(version)?,
                    value: Some(json(&value, "collection item")?),
                })
            })
            .collect()
    }

    fn items_since(
        &mut self,
        handle: &str,
        version: u64,
        limit: usize,
    ) -> Result<Vec<(String, StoredItem)>, StoreError> {
        // Each side is a range of its own index, cut at `limit`, before the two are merged.
        // A literal limit, as in `items_page`.
        let mut statement = self.connection.prepare_cached(&format!(
            "SELECT * FROM (SELECT field, id, version, value FROM mcp_items
                            WHERE handle = CAST(?1 AS TEXT) AND version > CAST(?2 AS INTEGER)
                            ORDER BY version LIMIT {limit})
             UNION ALL
             SELECT * FROM (SELECT field, id, version, NULL FROM mcp_item_removals
                            WHERE handle = CAST(?1 AS TEXT) AND version > CAST(?2 AS INTEGER)
                            ORDER BY version LIMIT {limit})"
        ))?;
        let mut rows = statement.query(params![handle, version_to_sql(version)?])?;
        let mut written = Vec::new();
        while let Some(row) = rows.next()? {
            let value = match row.get::<_, Option<String>>(3)? {
                Some(text) => Some(json(&text, "collection item")?),
                None => None,
            };
            written.push((
                row.get::<_, String>(0)?,
                StoredItem {
                    id: version_from_sql(row.get(1)?)?,
                    version: version_from_sql(row.get(2)?)?,
                    value,
                },
            ));
        }
        written.sort_by_key(|(field, item)| (item.version, field.clone(), item.id));
        written.truncate(limit);
        Ok(written)
    }
}

/// The item statements wrap their parameters in `CAST` for the reason [`PREFETCH_SQL`] does:
/// a bare parameter compared with an indexed column is re-planned on every new binding.
impl SqlTxn<'_> {
    /// Writes the collection items a change made, changed or removed, at `version`.
    fn write_items(
        &mut self,
        handle: &str,
        version: i64,
        items: Vec<ItemWrite>,
    ) -> Result<(), StoreError> {
        for ItemWrite { field, id, value } in items {
            let id = version_to_sql(id)?;
            match value {
                Some(value) => {
                    self.connection
                        .prepare_cached(
                            "INSERT INTO mcp_items (handle, field, id, version, value)
                             VALUES (?1, ?2, ?3, ?4, ?5)
                             ON CONFLICT (handle, field, id)
                             DO UPDATE SET version = excluded.version, value = excluded.value",
                        )?
                        .execute(params![
                            handle,
                            field,
                            id,
                            version,
                            to_json(&value, "collection item")?
                        ])?;
                }
                None => {
                    self.connection
                        .prepare_cached(
                            "DELETE FROM mcp_items
                             WHERE handle = CAST(?1 AS TEXT) AND field = CAST(?2 AS TEXT)
                               AND id = CAST(?3 AS INTEGER)",
                        )?
                        .execute(params![handle, field, id])?;
                    self.connection
                        .prepare_cached(
                            "INSERT INTO mcp_item_removals (handle, version, field, id)
                             VALUES (?1, ?2, ?3, ?4)",
                        )?
                        .execute(params![handle, version, field, id])?;
                }
            }
        }
        Ok(())
    }
}

/// The text in column `at`, borrowed from the row.
pub(super) fn text_at<'r>(row: &'r rusqlite::Row<'_>, at: usize) -> Result<&'r str, StoreError> {
    row.get_ref(at)?
        .as_str()
        .map_err(|error| StoreError::Corrupt(format!("column {at} of a resource row: {error}")))
}

/// A ledger record from the 6 ledger columns starting at `at`; `None` when they are null.
pub(super) fn entry_from(
    row: &rusqlite::Row<'_>,
    at: usize,
) -> Result<Option<LedgerEntry>, StoreError> {
    let Some(fingerprint) = row.get::<_, Option<String>>(at)? else {
        return Ok(None);
    };
    let outcome: Option<String> = row.get(at + 1)?;
    let state = ledger_state_from_sql(outcome.as_deref(), row.get(at + 2)?)?;
    Ok(Some(LedgerEntry {
        fingerprint: Fingerprint::from_hex(&fingerprint).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "a ledger row's fingerprint is not one: {fingerprint:?}"
            ))
        })?,
        state,
        handle: row.get(at + 3)?,
        recorded_at: row.get(at + 4)?,
        expires_at: row.get(at + 5)?,
    }))
}

impl SqlTxn<'_> {
    /// `handle`'s resource from the 7 columns of [`LOAD_SQL`] starting at `at`, with its
    /// `ledger_live`; `None` when they are null (a left join that found nothing). Its state is
    /// parsed only when the process has not decoded that version yet.
    fn record_from(
        &mut self,
        handle: &str,
        row: &rusqlite::Row<'_>,
        at: usize,
    ) -> Result<Option<(Record, i64)>, StoreError> {
        let Some(kind) = row.get::<_, Option<String>>(at)? else {
            return Ok(None);
        };
        let version = version_from_sql(row.get(at + 2)?)?;
        let state = match self.states.get(handle, version) {
            Some(state) => state,
            None => {
                // Borrowed from the row: the state is parsed where SQLite holds it, not copied
                // first.
                let text = text_at(row, at + 3)?;
                let state = Arc::new(json(text, "stored state")?);
                self.note_state(handle, version, &state);
                state
            }
        };
        let lifecycle = text_at(row, at + 4)?;
        let record = Record {
            kind: kind.into(),
            owner: text_at(row, at + 1)?.into(),
            version,
            state,
            lifecycle: Lifecycle::parse(lifecycle)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown lifecycle {lifecycle:?}")))?,
            expires_at: row.get(at + 5)?,
        };
        Ok(Some((record, row.get(at + 6)?)))
    }

    /// Notes a state for the process's cache, which takes it once this transaction commits.
    pub(super) fn note_state(&mut self, handle: &str, version: u64, state: &Arc<Value>) {
        if !self.states.keeps_any() {
            return;
        }
        self.decoded.push(Decoded {
            handle: handle.to_owned(),
            version,
            state: Arc::clone(state),
            bytes: states::footprint(handle, state),
        });
    }

    /// What this transaction decoded or wrote, for the cache once it commits.
    pub(super) fn take_decoded(&mut self) -> Vec<Decoded> {
        std::mem::take(&mut self.decoded)
    }

    fn live_count(&self, handle: &str) -> Result<i64, StoreError> {
        Ok(self
            .connection
            .prepare_cached("SELECT ledger_live FROM mcp_resources WHERE handle = ?1")?
            .query_row([handle], |row| row.get(0))
            .optional()?
            .unwrap_or(0))
    }

    /// Adds `by` to the number of ledger records counted against `handle`.
    fn count(&mut self, handle: &str, by: i64) -> Result<(), StoreError> {
        self.connection
            .prepare_cached(
                "UPDATE mcp_resources SET ledger_live = max(ledger_live + ?2, 0) WHERE handle = ?1",
            )?
            .execute(params![handle, by])?;
        if let Some((loaded, live)) = &mut self.loaded_count
            && loaded == handle
        {
            *live += by;
        }
        Ok(())
    }
}
