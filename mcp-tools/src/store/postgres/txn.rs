//! The boundary's transaction over PostgreSQL: what the boundary reads is fetched before it runs
//! (in the round trip that takes the locks), and what it writes is kept and sent in one round
//! trip with the commit. A read it was not given is named, fetched, and the boundary run again
//! (before its transition runs: every read comes first).

use std::sync::Arc;

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::store::boundary::{Change, LedgerEntry, LedgerState, Record, Txn};
use crate::store::collection::{ItemWrite, StoredItem};
pub(crate) use crate::store::columns::version_to_sql;
use crate::store::columns::{
    history_to_drop, json, ledger_state_from_sql, ledger_state_to_sql, to_json, version_from_sql,
};
use crate::store::entity::Lifecycle;
use crate::store::error::StoreError;
use crate::store::fingerprint::Fingerprint;
use crate::store::history::Undo;
use crate::store::outbox::OutboxEntry;

/// What the boundary asked for and was not given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// The resource under this handle.
    Resource(String),
    /// The ledger record of (principal, operation id).
    Ledger(String, String),
    /// The undo patches of a handle after a version.
    Undo(String, u64),
    /// The live ledger records of a resource at its share's limit, counted after the expired
    /// ones are taken off.
    Count(String),
    /// Collection items of a handle, by (collection, id).
    Items(String, Vec<(&'static str, u64)>),
    /// A page of a collection's items: handle, collection, after id, how many.
    Page(String, &'static str, u64, usize),
    /// The items written after a version: handle, version, how many.
    Since(String, u64, usize),
}

/// An item: handle, collection, id.
type ItemKey = (String, &'static str, u64);
/// A page: handle, collection, after id, how many.
pub(crate) type PageKey = (String, &'static str, u64, usize);
/// The changes since a version: handle, version, how many.
pub(crate) type SinceKey = (String, u64, usize);

/// Collection items written by one change: the handle, its new version, the writes, and the
/// version through which remembered removals may be forgotten (0: none).
pub(crate) struct ItemWrites {
    pub(crate) handle: String,
    pub(crate) version: i64,
    pub(crate) writes: Vec<ItemWrite>,
    pub(crate) forget_through: i64,
}

/// A fetched undo history: the patches of `handle` after `since`, newest first.
pub(crate) struct History {
    pub(crate) handle: String,
    pub(crate) since: u64,
    pub(crate) versions: Vec<i64>,
    pub(crate) patches: Vec<String>,
}

/// One write the boundary asked for, sent at commit.
pub(crate) enum Write {
    Insert {
        handle: String,
        record: Record,
        counted: i64,
    },
    Update {
        handle: String,
        record: Record,
        change: Change,
        counted: i64,
    },
    LedgerInsert {
        principal: String,
        operation_id: String,
        entry: LedgerEntry,
        /// Whether this statement counts the record against its resource's share (no write of
        /// that resource in the transaction does).
        counts: bool,
    },
    LedgerDelete {
        principal: String,
        operation_id: String,
    },
}

pub(crate) struct PgTxn {
    /// Resources read, by handle (`None`: no such handle), with their `ledger_live`.
    resources: Vec<(String, Option<(Record, i64)>)>,
    /// Ledger records read, by (principal, operation id).
    ledger: Vec<((String, String), Option<LedgerEntry>)>,
    history: Vec<History>,
    /// Resources whose share was counted exactly (after expired records were taken off).
    exact: Vec<String>,
    pub(crate) writes: Vec<Write>,
    /// The collection items the writes change, sent after them.
    pub(crate) item_writes: Vec<ItemWrites>,
    /// The effects the writes emitted, sent after them.
    pub(crate) effects: Vec<OutboxEntry>,
    /// Items fetched, by (handle, collection, id): `None` when there is no such item.
    items: Vec<(ItemKey, Option<StoredItem>)>,
    /// Pages fetched, by what [`Need::Page`] asked.
    pages: Vec<(PageKey, Vec<StoredItem>)>,
    /// Changes since a version fetched, by what [`Need::Since`] asked.
    since: Vec<(SinceKey, Vec<(String, StoredItem)>)>,
    pub(crate) need: Option<Need>,
}

impl PgTxn {
    pub(crate) fn new() -> Self {
        PgTxn {
            resources: Vec::new(),
            ledger: Vec::new(),
            history: Vec::new(),
            exact: Vec::new(),
            writes: Vec::new(),
            item_writes: Vec::new(),
            effects: Vec::new(),
            items: Vec::new(),
            pages: Vec::new(),
            since: Vec::new(),
            need: None,
        }
    }

    /// What a fetch of [`Need::Items`] found: `found` among `wanted`.
    pub(crate) fn know_items(
        &mut self,
        handle: &str,
        wanted: &[(&'static str, u64)],
        found: Vec<(&'static str, StoredItem)>,
    ) {
        for &(field, id) in wanted {
            let item = found
                .iter()
                .find(|(known, item)| *known == field && item.id == id)
                .map(|(_, item)| item.clone());
            self.items.push(((handle.to_owned(), field, id), item));
        }
    }

    pub(crate) fn know_page(&mut self, asked: PageKey, items: Vec<StoredItem>) {
        self.pages.push((asked, items));
    }

    pub(crate) fn know_since(&mut self, asked: SinceKey, items: Vec<(String, StoredItem)>) {
        self.since.push((asked, items));
    }

    pub(crate) fn know_resource(&mut self, handle: &str, record: Option<(Record, i64)>) {
        self.resources.retain(|(known, _)| known != handle);
        self.resources.push((handle.to_owned(), record));
    }

    pub(crate) fn know_ledger(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: Option<LedgerEntry>,
    ) {
        self.ledger
            .push(((principal.to_owned(), operation_id.to_owned()), entry));
    }

    pub(crate) fn know_history(&mut self, history: History) {
        self.history.push(history);
    }

    /// The share of `handle` as counted now, after expired records were taken off.
    pub(crate) fn know_exact_count(&mut self, handle: &str, live: i64) {
        if let Some((_, Some((_, known)))) =
            self.resources.iter_mut().find(|(known, _)| known == handle)
        {
            *known = live;
        }
        self.exact.push(handle.to_owned());
    }

    /// Starts the boundary again with what was fetched since: the writes of the last run are
    /// forgotten.
    pub(crate) fn restart(&mut self) {
        self.writes.clear();
        self.item_writes.clear();
        self.effects.clear();
        self.need = None;
    }

    fn missing<T>(&mut self, need: Need) -> Result<T, StoreError> {
        let error = StoreError::Backend(format!("the boundary needs {need:?} first"));
        self.need = Some(need);
        Err(error)
    }

    fn resource(&self, handle: &str) -> Option<&Option<(Record, i64)>> {
        self.resources
            .iter()
            .find(|(known, _)| known == handle)
            .map(|(_, record)| record)
    }

    /// Whether a write of `handle` in this transaction already counts the record that follows.
    fn fold_count(&mut self, handle: &str) -> bool {
        for write in self.writes.iter_mut().rev() {
            match write {
                Write::Insert {
                    handle: written,
                    counted,
                    ..
                }
                | Write::Update {
                    handle: written,
                    counted,
                    ..
                } if written == handle && *counted == 0 => {
                    *counted = 1;
                    return true;
                }
                _ => {}
            }
        }
        false
    }
}

impl Txn for PgTxn {
    fn ledger_get(
        &mut self,
        principal: &str,
        operation_id: &str,
    ) -> Result<Option<LedgerEntry>, StoreError> {
        match self
            .ledger
            .iter()
            .find(|((p, o), _)| p == principal && o == operation_id)
        {
            Some((_, entry)) => Ok(entry.clone()),
            None => self.missing(Need::Ledger(principal.to_owned(), operation_id.to_owned())),
        }
    }

    fn ledger_put(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: LedgerEntry,
    ) -> Result<(), StoreError> {
        let counts = match (&entry.handle, &entry.state) {
            (Some(handle), LedgerState::Done(_)) => !self.fold_count(handle),
            _ => false,
        };
        self.writes.push(Write::LedgerInsert {
            principal: principal.to_owned(),
            operation_id: operation_id.to_owned(),
            entry,
            counts,
        });
        Ok(())
    }

    fn ledger_remove(
        &mut self,
        principal: &str,
        operation_id: &str,
        _read: &LedgerEntry,
    ) -> Result<(), StoreError> {
        // The statement takes the record off its resource's count if it still finds it: a sweep
        // may have removed (and uncounted) an expired one since it was read.
        self.writes.push(Write::LedgerDelete {
            principal: principal.to_owned(),
            operation_id: operation_id.to_owned(),
        });
        Ok(())
    }

    fn ledger_full(&mut self, handle: &str, quota: u64, _now: i64) -> Result<bool, StoreError> {
        let quota = i64::try_from(quota).unwrap_or(i64::MAX);
        let live = match self.resource(handle) {
            Some(Some((_, live))) => *live,
            Some(None) => 0,
            None => return self.missing(Need::Resource(handle.to_owned())),
        };
        if live < quota || self.exact.iter().any(|counted| counted == handle) {
            return Ok(live >= quota);
        }
        // Expired records may still be counted until a sweep takes them off.
        self.missing(Need::Count(handle.to_owned()))
    }

    fn load(&mut self, handle: &str) -> Result<Option<Record>, StoreError> {
        match self.resource(handle) {
            Some(record) => Ok(record.as_ref().map(|(record, _)| record.clone())),
            None => self.missing(Need::Resource(handle.to_owned())),
        }
    }

    fn undo_since(
        &mut self,
        handle: &str,
        version: u64,
    ) -> Result<Option<Vec<Vec<Undo>>>, StoreError> {
        let Some(history) = self
            .history
            .iter()
            .find(|history| history.handle == handle && history.since == version)
        else {
            return self.missing(Need::Undo(handle.to_owned(), version));
        };
        let oldest = history.versions.last().copied();
        if oldest != Some(version_to_sql(version)? + 1) {
            return Ok(None);
        }
        history
            .patches
            .iter()
            .map(|patch| json(patch, "stored history"))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn insert(&mut self, handle: &str, record: Record) -> Result<(), StoreError> {
        self.writes.push(Write::Insert {
            handle: handle.to_owned(),
            record,
            counted: 0,
        });
        Ok(())
    }

    fn items_get(
        &mut self,
        handle: &str,
        wanted: &[(&'static str, u64)],
    ) -> Result<Vec<(&'static str, StoredItem)>, StoreError> {
        let mut found = Vec::with_capacity(wanted.len());
        for &(field, id) in wanted {
            let known = self
                .items
                .iter()
                .find(|((h, f, i), _)| h == handle && *f == field && *i == id);
            match known {
                Some((_, item)) => found.extend(item.clone().map(|item| (field, item))),
                None => return self.missing(Need::Items(handle.to_owned(), wanted.to_vec())),
            }
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
        let asked = (handle.to_owned(), field, after, limit);
        match self.pages.iter().find(|(known, _)| *known == asked) {
            Some((_, items)) => Ok(items.clone()),
            None => self.missing(Need::Page(handle.to_owned(), field, after, limit)),
        }
    }

    fn items_since(
        &mut self,
        handle: &str,
        version: u64,
        limit: usize,
    ) -> Result<Vec<(String, StoredItem)>, StoreError> {
        let asked = (handle.to_owned(), version, limit);
        match self.since.iter().find(|(known, _)| *known == asked) {
            Some((_, items)) => Ok(items.clone()),
            None => self.missing(Need::Since(handle.to_owned(), version, limit)),
        }
    }

    fn write(
        &mut self,
        handle: &str,
        record: Record,
        mut change: Change,
    ) -> Result<(), StoreError> {
        self.effects.append(&mut change.effects);
        let writes = std::mem::take(&mut change.items);
        if !writes.is_empty() || change.collections {
            self.item_writes.push(ItemWrites {
                handle: handle.to_owned(),
                version: version_to_sql(record.version)?,
                writes,
                forget_through: version_to_sql(history_to_drop(change.drop_through))?,
            });
        }
        self.writes.push(Write::Update {
            handle: handle.to_owned(),
            record,
            change,
            counted: 0,
        });
        Ok(())
    }
}

fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    at: usize,
) -> Result<T, StoreError> {
    row.try_get(at)
        .map_err(|error| StoreError::Corrupt(format!("column {at}: {error}")))
}

/// A resource from the 7 resource columns starting at `at`, with its `ledger_live`; `None` when
/// they are null (a left join that found nothing).
pub(crate) fn record_from(row: &Row, at: usize) -> Result<Option<(Record, i64)>, StoreError> {
    let Some(kind) = column::<Option<&str>>(row, at)? else {
        return Ok(None);
    };
    let lifecycle: &str = column(row, at + 4)?;
    let state: &str = column(row, at + 3)?;
    let record = Record {
        kind: kind.into(),
        owner: column::<&str>(row, at + 1)?.into(),
        version: version_from_sql(column(row, at + 2)?)?,
        state: Arc::new(json(state, "stored state")?),
        lifecycle: Lifecycle::parse(lifecycle)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown lifecycle {lifecycle:?}")))?,
        expires_at: column(row, at + 5)?,
    };
    Ok(Some((record, column(row, at + 6)?)))
}

/// A ledger record from the 6 ledger columns starting at `at`; `None` when they are null.
/// An item from its id and version columns (`at`, `at + 1`) and its value column (`value`;
/// a null value is a removal).
pub(crate) fn item_from(
    row: &Row,
    at: usize,
    value: Option<usize>,
) -> Result<StoredItem, StoreError> {
    let text: Option<&str> = match value {
        Some(value) => column(row, value)?,
        None => None,
    };
    Ok(StoredItem {
        id: version_from_sql(column(row, at)?)?,
        version: version_from_sql(column(row, at + 1)?)?,
        value: text.map(|text| json(text, "collection item")).transpose()?,
    })
}

pub(crate) fn entry_from(row: &Row, at: usize) -> Result<Option<LedgerEntry>, StoreError> {
    let Some(fingerprint) = column::<Option<&[u8]>>(row, at)? else {
        return Ok(None);
    };
    let state = ledger_state_from_sql(column(row, at + 1)?, column(row, at + 2)?)?;
    let fingerprint: [u8; 32] = fingerprint.try_into().map_err(|_| {
        StoreError::Corrupt(format!(
            "a ledger row's fingerprint has {} bytes, not 32",
            fingerprint.len()
        ))
    })?;
    Ok(Some(LedgerEntry {
        fingerprint: Fingerprint::from_bytes(fingerprint),
        state,
        handle: column(row, at + 3)?,
        recorded_at: column(row, at + 4)?,
        expires_at: column(row, at + 5)?,
    }))
}

/// Tells `pg` what an opening read (`open_mutation`, `open_create`) found: the ledger record of
/// `operation` in columns 1 to 6 and, from column 7, the resource `handle` names or, without
/// one, the resource the ledger record names.
pub(crate) fn know_opened(
    pg: &mut PgTxn,
    row: &Row,
    handle: Option<&str>,
    operation: Option<(&str, &str)>,
) -> Result<(), StoreError> {
    let resource = record_from(row, 7)?;
    let entry = match operation {
        Some(_) => entry_from(row, 1)?,
        None => None,
    };
    let named = entry.as_ref().and_then(|entry| entry.handle.as_deref());
    if let Some(handle) = handle.or(named) {
        pg.know_resource(handle, resource);
    }
    if let Some((principal, operation_id)) = operation {
        pg.know_ledger(principal, operation_id, entry);
    }
    Ok(())
}

/// The undo patches a `read` row holds (columns 8 and 9): of `handle`, after `since`.
pub(crate) fn history_from(row: &Row, handle: String, since: u64) -> Result<History, StoreError> {
    Ok(History {
        handle,
        since,
        versions: column(row, 8)?,
        patches: column(row, 9)?,
    })
}

/// A boxed statement parameter.
pub(crate) type Param = Box<dyn ToSql + Sync + Send>;

/// Which prepared statement a write runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Statement {
    InsertResource,
    /// A new resource and the ledger record about it.
    InsertRecorded,
    /// An update, its undo patch and the history beyond the limit.
    UpdateResource,
    /// An update, its undo patch, the history beyond the limit and the ledger record about it.
    UpdateRecorded,
    InsertLedger,
    /// A ledger record and its count against the resource it names.
    InsertLedgerCounted,
    DeleteLedger,
    /// Collection items made or changed at one version.
    UpsertItems,
    /// Collection items removed at one version, remembered.
    RemoveItems,
    /// Remembered removals the history no longer reaches.
    ForgetRemovals,
    /// The effects a change emitted, into the outbox.
    InsertEffects,
}

/// The statement that writes `effects` (one change's, all of one resource and principal).
pub(crate) fn effect_statements(
    effects: Vec<OutboxEntry>,
    out: &mut Vec<(Statement, Vec<Param>, bool)>,
) {
    let Some(first) = effects.first() else {
        return;
    };
    let (handle, principal, at) = (
        first.handle.clone(),
        first.principal.clone(),
        first.created_at,
    );
    let (mut keys, mut kinds, mut payloads) = (Vec::new(), Vec::new(), Vec::new());
    for effect in effects {
        keys.push(effect.key);
        kinds.push(effect.kind);
        payloads.push(effect.payload.to_string());
    }
    out.push((
        Statement::InsertEffects,
        vec![
            Box::new(keys),
            Box::new(kinds),
            Box::new(handle),
            Box::new(principal),
            Box::new(at),
            Box::new(payloads),
        ],
        false,
    ));
}

/// The statements that write `item_writes`, after the resource writes they belong to.
pub(crate) fn item_statements(
    item_writes: Vec<ItemWrites>,
    out: &mut Vec<(Statement, Vec<Param>, bool)>,
) {
    for ItemWrites {
        handle,
        version,
        writes,
        forget_through,
    } in item_writes
    {
        let (mut kept, mut gone) = (
            (Vec::new(), Vec::new(), Vec::new()),
            (Vec::new(), Vec::new()),
        );
        for ItemWrite { field, id, value } in writes {
            let id = i64::try_from(id).unwrap_or(i64::MAX);
            match value {
                Some(value) => {
                    kept.0.push(field.to_owned());
                    kept.1.push(id);
                    kept.2.push(value.to_string());
                }
                None => {
                    gone.0.push(field.to_owned());
                    gone.1.push(id);
                }
            }
        }
        if !kept.0.is_empty() {
            out.push((
                Statement::UpsertItems,
                vec![
                    Box::new(handle.clone()),
                    Box::new(version),
                    Box::new(kept.0),
                    Box::new(kept.1),
                    Box::new(kept.2),
                ],
                false,
            ));
        }
        if !gone.0.is_empty() {
            out.push((
                Statement::RemoveItems,
                vec![
                    Box::new(handle.clone()),
                    Box::new(version),
                    Box::new(gone.0),
                    Box::new(gone.1),
                ],
                false,
            ));
        }
        if forget_through > 0 {
            out.push((
                Statement::ForgetRemovals,
                vec![Box::new(handle), Box::new(forget_through)],
                false,
            ));
        }
    }
}

/// The statements the writes run, with their parameters, in order; `true` where exactly one row
/// must change. A change or a new resource followed by its ledger record (the common mutation
/// and create) is one statement.
pub(crate) fn statements(
    writes: Vec<Write>,
    out: &mut Vec<(Statement, Vec<Param>, bool)>,
) -> Result<(), StoreError> {
    // Deletions of ledger records first: a record being replaced is then let go before the
    // resource row is written, the order the sweep takes them in, so the two cannot deadlock.
    let (deletes, rest): (Vec<Write>, Vec<Write>) = writes
        .into_iter()
        .partition(|write| matches!(write, Write::LedgerDelete { .. }));
    for write in deletes {
        statement(write, out)?;
    }
    let mut writes = rest.into_iter().peekable();
    while let Some(write) = writes.next() {
        let record = match &write {
            Write::Update {
                handle, counted: 1, ..
            }
            | Write::Insert {
                handle, counted: 1, ..
            } => writes.next_if(|next| records_about(handle, next)),
            _ => None,
        };
        // The write's own parameters come first, the record's last.
        match (write, record) {
            (
                Write::Update {
                    handle,
                    record,
                    change,
                    ..
                },
                Some(Write::LedgerInsert {
                    principal,
                    operation_id,
                    entry,
                    ..
                }),
            ) => {
                let mut params = update_params(handle, &record, &change)?;
                params.extend(ledger_params(principal, operation_id, entry, true)?);
                out.push((Statement::UpdateRecorded, params, true));
            }
            (
                Write::Insert { handle, record, .. },
                Some(Write::LedgerInsert {
                    principal,
                    operation_id,
                    entry,
                    ..
                }),
            ) => {
                let mut params = insert_params(handle, &record)?;
                params.extend(ledger_params(principal, operation_id, entry, true)?);
                out.push((Statement::InsertRecorded, params, true));
            }
            (write, _) => statement(write, out)?,
        }
    }
    Ok(())
}

/// A new resource's columns, the parameters its statements start with.
fn insert_params(handle: String, record: &Record) -> Result<Vec<Param>, StoreError> {
    Ok(vec![
        Box::new(handle),
        Box::new(record.kind.to_string()),
        Box::new(record.owner.to_string()),
        Box::new(version_to_sql(record.version)?),
        Box::new(to_json(&*record.state, "state")?),
        Box::new(record.lifecycle.as_str()),
        Box::new(record.expires_at),
    ])
}

/// A change's columns, its undo patch and the history it drops: the parameters its statements
/// start with.
fn update_params(
    handle: String,
    record: &Record,
    change: &Change,
) -> Result<Vec<Param>, StoreError> {
    Ok(vec![
        Box::new(handle),
        Box::new(version_to_sql(record.version)?),
        Box::new(to_json(&*record.state, "state")?),
        Box::new(record.lifecycle.as_str()),
        Box::new(record.expires_at),
        Box::new(to_json(&change.undo, "history")?),
        Box::new(version_to_sql(history_to_drop(change.drop_through))?),
    ])
}

/// Whether `next` is a ledger record of an outcome about `handle` that the write of `handle`
/// counts: the two are then one statement.
fn records_about(handle: &str, next: &Write) -> bool {
    matches!(next, Write::LedgerInsert { entry, counts: false, .. }
        if matches!(entry.state, LedgerState::Done(_)) && entry.handle.as_deref() == Some(handle))
}

/// A ledger record's parameters. Folded into the write of the resource it is about, it has no
/// claim (an outcome) and takes its handle from the write's: neither is a parameter then.
fn ledger_params(
    principal: String,
    operation_id: String,
    entry: LedgerEntry,
    folded: bool,
) -> Result<Vec<Param>, StoreError> {
    let (outcome, claim) = ledger_state_to_sql(&entry.state)?;
    let mut params: Vec<Param> = vec![
        Box::new(principal),
        Box::new(operation_id),
        Box::new(entry.fingerprint.as_bytes().to_vec()),
        Box::new(outcome),
    ];
    if !folded {
        params.push(Box::new(claim));
        params.push(Box::new(entry.handle));
    }
    params.push(Box::new(entry.recorded_at));
    params.push(Box::new(entry.expires_at));
    Ok(params)
}

fn statement(write: Write, out: &mut Vec<(Statement, Vec<Param>, bool)>) -> Result<(), StoreError> {
    match write {
        Write::Insert {
            handle,
            record,
            counted,
        } => {
            let mut params = insert_params(handle, &record)?;
            params.push(Box::new(counted));
            out.push((Statement::InsertResource, params, true));
        }
        Write::Update {
            handle,
            record,
            change,
            counted,
        } => {
            let mut params = update_params(handle, &record, &change)?;
            params.push(Box::new(counted));
            out.push((Statement::UpdateResource, params, true));
        }
        Write::LedgerInsert {
            principal,
            operation_id,
            entry,
            counts,
        } => {
            let statement = if counts {
                Statement::InsertLedgerCounted
            } else {
                Statement::InsertLedger
            };
            let params = ledger_params(principal, operation_id, entry, false)?;
            // The insert cannot miss; the count can, once its resource is gone.
            out.push((statement, params, !counts));
        }
        Write::LedgerDelete {
            principal,
            operation_id,
        } => out.push((
            Statement::DeleteLedger,
            vec![Box::new(principal), Box::new(operation_id)],
            false,
        )),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::columns::HISTORY_SWEEP_EVERY;
    use crate::store::outcome::{RecordedOutcome, Rejected};
    use crate::store::postgres::schema::Sql;

    fn record(version: u64) -> Record {
        Record {
            kind: "counter".into(),
            owner: "alice".into(),
            version,
            state: Arc::new(serde_json::json!({ "count": version })),
            lifecycle: Lifecycle::Active,
            expires_at: None,
        }
    }

    fn done(handle: &str) -> LedgerEntry {
        LedgerEntry {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            state: LedgerState::Done(RecordedOutcome::Rejected(Rejected::not_found("counter"))),
            handle: Some(handle.to_owned()),
            recorded_at: 1,
            expires_at: 2,
        }
    }

    fn change(drop_through: u64) -> Change {
        Change {
            undo: Vec::new(),
            drop_through,
            recorded: true,
            expiry_moved: true,
            items: Vec::new(),
            collections: false,
            effects: Vec::new(),
        }
    }

    fn kinds(writes: Vec<Write>) -> Vec<(Statement, bool)> {
        let mut out = Vec::new();
        statements(writes, &mut out).unwrap();
        out.into_iter()
            .map(|(statement, _, exact)| (statement, exact))
            .collect()
    }

    /// A record about the resource the same transaction writes is counted in that write, and
    /// the pair is the one statement of the usual mutation; a record about another resource
    /// counts on its own.
    #[test]
    fn a_change_and_its_record_are_one_statement() {
        let mut txn = PgTxn::new();
        txn.write("ctr_a", record(2), change(0)).unwrap();
        txn.ledger_put("alice", "op", done("ctr_a")).unwrap();
        assert!(matches!(txn.writes[0], Write::Update { counted: 1, .. }));
        assert_eq!(txn.writes.len(), 2);
        let writes = std::mem::take(&mut txn.writes);
        assert!(matches!(
            kinds(writes)[..],
            [(Statement::UpdateRecorded, true)]
        ));

        let mut txn = PgTxn::new();
        txn.write("ctr_a", record(2), change(0)).unwrap();
        txn.ledger_put("alice", "op", done("ctr_b")).unwrap();
        assert!(matches!(txn.writes[0], Write::Update { counted: 0, .. }));
        assert!(matches!(
            &txn.writes[1],
            Write::LedgerInsert { counts: true, .. }
        ));
        let writes = std::mem::take(&mut txn.writes);
        assert!(matches!(
            kinds(writes)[..],
            [
                (Statement::UpdateResource, true),
                (Statement::InsertLedgerCounted, false)
            ]
        ));

        // A record about a resource the transaction does not write counts in its own statement.
        let mut txn = PgTxn::new();
        txn.ledger_put("alice", "op", done("ctr_a")).unwrap();
        let writes = std::mem::take(&mut txn.writes);
        assert!(matches!(
            kinds(writes)[..],
            [(Statement::InsertLedgerCounted, false)]
        ));
    }

    /// A record that replaces an expired one deletes it first, before any resource row.
    #[test]
    fn deletions_come_first() {
        let mut txn = PgTxn::new();
        txn.write("ctr_a", record(2), change(0)).unwrap();
        txn.ledger_remove("alice", "op", &done("ctr_a")).unwrap();
        txn.ledger_put("alice", "op", done("ctr_a")).unwrap();
        let writes = std::mem::take(&mut txn.writes);
        assert!(matches!(
            kinds(writes)[..],
            [
                (Statement::DeleteLedger, false),
                (Statement::UpdateRecorded, true)
            ]
        ));
    }

    /// Patches beyond the history limit are dropped every so many versions, on both paths.
    #[test]
    fn history_is_dropped_every_so_many_versions() {
        assert_eq!(history_to_drop(0), 0);
        assert_eq!(history_to_drop(1), 0);
        assert_eq!(history_to_drop(HISTORY_SWEEP_EVERY), HISTORY_SWEEP_EVERY);
        assert_eq!(history_to_drop(HISTORY_SWEEP_EVERY + 1), 0);
        // `$7` of both updates: the versions the change drops up to, 0 for none.
        let sql = Sql::new("public", "mcp_");
        for recorded in [false, true] {
            let dropped = |drop_through| {
                let mut txn = PgTxn::new();
                txn.write("ctr_a", record(2), change(drop_through)).unwrap();
                if recorded {
                    txn.ledger_put("alice", "op", done("ctr_a")).unwrap();
                }
                let mut out = Vec::new();
                statements(std::mem::take(&mut txn.writes), &mut out).unwrap();
                let [(statement, params, true)] = &out[..] else {
                    panic!("one exact statement, not {}", out.len());
                };
                assert!(sql.of(*statement).contains("$7"));
                format!("{:?}", params[6])
            };
            let every = HISTORY_SWEEP_EVERY * 2;
            assert_eq!(dropped(every), every.to_string());
            assert_eq!(dropped(every + 1), "0");
            assert_eq!(dropped(0), "0");
        }
    }

    /// The highest `$n` a statement's text names.
    fn placeholders(text: &str) -> usize {
        text.split('$')
            .skip(1)
            .filter_map(|after| {
                let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .max()
            .unwrap_or(0)
    }

    /// Every write pattern gives each statement exactly the parameters its text names; a new
    /// resource and its record are one statement, a claim is never folded into a write.
    #[test]
    fn each_statement_gets_the_parameters_it_names() {
        let sql = Sql::new("public", "mcp_");
        let pending = LedgerEntry {
            state: LedgerState::Pending { token: 9 },
            ..done("ctr_a")
        };
        let cases: Vec<(Vec<Write>, Vec<Statement>)> = {
            let mut cases = Vec::new();
            let mut txn = PgTxn::new();
            txn.insert("ctr_a", record(1)).unwrap();
            txn.ledger_put("alice", "op", done("ctr_a")).unwrap();
            cases.push((txn.writes, vec![Statement::InsertRecorded]));
            let mut txn = PgTxn::new();
            txn.insert("ctr_a", record(1)).unwrap();
            txn.ledger_put("alice", "op", pending).unwrap();
            cases.push((
                txn.writes,
                vec![Statement::InsertResource, Statement::InsertLedger],
            ));
            let mut txn = PgTxn::new();
            txn.write("ctr_a", record(2), change(0)).unwrap();
            txn.ledger_put("alice", "op", done("ctr_a")).unwrap();
            cases.push((txn.writes, vec![Statement::UpdateRecorded]));
            let mut txn = PgTxn::new();
            txn.write("ctr_a", record(2), change(0)).unwrap();
            txn.ledger_remove("alice", "old", &done("ctr_b")).unwrap();
            txn.ledger_put("alice", "op", done("ctr_b")).unwrap();
            cases.push((
                txn.writes,
                vec![
                    Statement::DeleteLedger,
                    Statement::UpdateResource,
                    Statement::InsertLedgerCounted,
                ],
            ));
            cases
        };
        for (writes, expected) in cases {
            let mut out = Vec::new();
            statements(writes, &mut out).unwrap();
            let got: Vec<Statement> = out.iter().map(|(statement, _, _)| *statement).collect();
            assert_eq!(got, expected);
            for (statement, params, _) in &out {
                assert_eq!(
                    params.len(),
                    placeholders(sql.of(*statement)),
                    "{statement:?}"
                );
            }
        }
    }

    /// Reads answer from what was fetched, by its exact key, and name what they were not given.
    #[test]
    fn reads_answer_by_exact_key() {
        let mut txn = PgTxn::new();
        txn.know_ledger("alice", "op", Some(done("ctr_a")));
        assert!(txn.ledger_get("alice", "op").unwrap().is_some());
        assert!(txn.ledger_get("bob", "op").is_err());
        assert_eq!(
            txn.need.take(),
            Some(Need::Ledger("bob".into(), "op".into()))
        );
        assert!(txn.ledger_get("alice", "other").is_err());

        txn.know_resource("ctr_a", None);
        txn.know_resource("ctr_a", Some((record(3), 0)));
        assert_eq!(
            txn.load("ctr_a").unwrap().unwrap().version,
            3,
            "the newer read wins"
        );
        txn.know_resource("ctr_b", Some((record(5), 0)));
        assert_eq!(txn.load("ctr_a").unwrap().unwrap().version, 3);

        txn.know_history(History {
            handle: "ctr_a".into(),
            since: 1,
            versions: vec![3, 2],
            patches: vec!["[]".into(), "[]".into()],
        });
        assert_eq!(txn.undo_since("ctr_a", 1).unwrap().unwrap().len(), 2);
        assert!(txn.undo_since("ctr_b", 1).is_err());
        assert_eq!(txn.need.take(), Some(Need::Undo("ctr_b".into(), 1)));
        assert!(txn.undo_since("ctr_a", 2).is_err());
    }

    /// Below the quota the count read with the resource answers; at it, an exact count is asked
    /// for once.
    #[test]
    fn the_share_is_counted_exactly_only_at_the_limit() {
        let mut txn = PgTxn::new();
        txn.know_resource("ctr_a", Some((record(2), 9)));
        assert!(!txn.ledger_full("ctr_a", 10, 0).unwrap());
        assert_eq!(txn.need, None);
        txn.know_resource("ctr_a", Some((record(2), 10)));
        assert!(txn.ledger_full("ctr_a", 10, 0).is_err());
        assert_eq!(txn.need.take(), Some(Need::Count("ctr_a".into())));
        txn.know_exact_count("ctr_a", 10);
        assert!(txn.ledger_full("ctr_a", 10, 0).unwrap());
        txn.know_exact_count("ctr_a", 4);
        assert!(!txn.ledger_full("ctr_a", 10, 0).unwrap());
    }

    /// Starting over forgets the writes of the run that asked for more.
    #[test]
    fn a_restart_forgets_the_writes() {
        let mut txn = PgTxn::new();
        txn.write("ctr_a", record(2), change(0)).unwrap();
        txn.need = Some(Need::Resource("ctr_b".into()));
        txn.restart();
        assert!(txn.writes.is_empty());
        assert_eq!(txn.need, None);
    }
}
