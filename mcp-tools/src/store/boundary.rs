//! The atomic boundary, written once against a minimal transaction interface that each store
//! implements while it holds its locks (memory) or its write transaction (SQL).

use std::sync::Arc;

use serde_json::Value;

use super::clock::{duration_millis, format_rfc3339};
use super::contract::{
    ConflictPolicy, CreateRequest, MutationRequest, ReadRequest, StoreConfig, StoreError,
    Transition,
};
use super::delta::diff;
use super::entity::{EntityKind, Lifecycle};
use super::fingerprint::Fingerprint;
use super::handle::has_prefix;
use super::outcome::Recovery;
use super::outcome::{
    Applied, MutationOutcome, ReadOutcome, RecordedOutcome, Rejected, Replayed, Resumption,
    Snapshot, StaleView, code,
};

/// One stored resource at its current version. Cloning it is cheap: the strings and the state are
/// shared, and the in-memory store keeps the same state in the record and in its history.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) kind: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) version: u64,
    pub(crate) state: Arc<Value>,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) expires_at: Option<i64>,
}

/// A recorded outcome as the ledger keeps it: an `applied` outcome shares its state with the
/// stored version instead of holding another copy.
#[derive(Debug, Clone)]
pub(crate) enum LedgerOutcome {
    /// `applied`; `applied.state` is `Null` and the state is `state`.
    Applied { applied: Applied, state: Arc<Value> },
    /// Any other outcome, as recorded.
    Other(RecordedOutcome),
}

impl LedgerOutcome {
    /// The ledger's form of `outcome`; `state` is the stored state of an `applied` outcome.
    fn new(outcome: &RecordedOutcome, state: Option<&Arc<Value>>) -> Self {
        match (outcome, state) {
            (RecordedOutcome::Applied(applied), Some(state)) => LedgerOutcome::Applied {
                applied: Applied {
                    handle: applied.handle.clone(),
                    version: applied.version,
                    state: Value::Null,
                    result: applied.result.clone(),
                    rebased_from: applied.rebased_from,
                    resumption: applied.resumption.clone(),
                },
                state: Arc::clone(state),
            },
            (outcome, _) => LedgerOutcome::Other(outcome.clone()),
        }
    }

    /// The outcome as it was recorded.
    pub(crate) fn into_recorded(self) -> RecordedOutcome {
        match self {
            LedgerOutcome::Applied { mut applied, state } => {
                applied.state = Arc::unwrap_or_clone(state);
                RecordedOutcome::Applied(applied)
            }
            LedgerOutcome::Other(outcome) => outcome,
        }
    }
}

impl From<RecordedOutcome> for LedgerOutcome {
    fn from(outcome: RecordedOutcome) -> Self {
        LedgerOutcome::Other(outcome)
    }
}

/// One operation-id ledger record.
#[derive(Debug, Clone)]
pub(crate) struct LedgerEntry {
    pub(crate) fingerprint: Fingerprint,
    pub(crate) outcome: LedgerOutcome,
    pub(crate) recorded_at: i64,
    pub(crate) expires_at: i64,
}

/// The operations the boundary performs inside one store transaction.
pub(crate) trait Txn {
    /// The ledger record of (principal, operation id), expired or not.
    fn ledger_get(
        &mut self,
        principal: &str,
        operation_id: &str,
    ) -> Result<Option<LedgerEntry>, StoreError>;
    /// Inserts or replaces the ledger record of (principal, operation id).
    fn ledger_put(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: LedgerEntry,
    ) -> Result<(), StoreError>;
    /// The resource at its current version.
    fn load(&mut self, handle: &str) -> Result<Option<Record>, StoreError>;
    /// The state at an older version, if still kept.
    fn history(&mut self, handle: &str, version: u64) -> Result<Option<Value>, StoreError>;
    /// Stores `record` (version 1) under a newly minted handle, with its history.
    fn insert(&mut self, handle: &str, record: Record) -> Result<(), StoreError>;
    /// Writes `record` as the new current version, appends it to the history and drops history
    /// versions `<= drop_through` (now or later: the boundary never asks for them again).
    fn write(&mut self, handle: &str, record: Record, drop_through: u64) -> Result<(), StoreError>;
}

pub(crate) fn resumption(handle: &str, record: &Record) -> Resumption {
    Resumption {
        handle: handle.to_owned(),
        basis_version: record.version,
        lifecycle: record.lifecycle,
        expires_at: record.expires_at.map(format_rfc3339),
    }
}

pub(crate) fn expiry(kind: &EntityKind, now: i64) -> Option<i64> {
    kind.ttl.map(|ttl| now.saturating_add(duration_millis(ttl)))
}

/// The first record of a new resource.
pub(crate) fn new_record(kind: &EntityKind, owner: &str, state: Value, now: i64) -> Record {
    Record {
        kind: kind.kind.into(),
        owner: owner.into(),
        version: 1,
        lifecycle: (kind.lifecycle)(&state),
        state: Arc::new(state),
        expires_at: expiry(kind, now),
    }
}

pub(crate) fn applied_on_create(handle: &str, record: &Record) -> Applied {
    Applied {
        handle: handle.to_owned(),
        version: record.version,
        state: Value::clone(&record.state),
        result: Value::Null,
        rebased_from: None,
        resumption: resumption(handle, record),
    }
}

/// Resolves a handle for `principal`: `Err` with the rejection the caller must see otherwise.
fn resolve(
    kind: &EntityKind,
    principal: &str,
    handle: &str,
    record: Option<Record>,
) -> Result<Record, Rejected> {
    match record {
        Some(record)
            if *record.owner == *principal
                && *record.kind == *kind.kind
                && has_prefix(handle, kind.prefix) =>
        {
            Ok(record)
        }
        _ => Err(Rejected::not_found(kind.kind)),
    }
}

fn expired(record: &Record, now: i64) -> Option<i64> {
    record.expires_at.filter(|at| *at <= now)
}

/// The read boundary.
pub(crate) fn read(
    txn: &mut impl Txn,
    request: &ReadRequest,
    now: i64,
) -> Result<ReadOutcome, StoreError> {
    let loaded = if has_prefix(&request.handle, request.kind.prefix) {
        txn.load(&request.handle)?
    } else {
        None
    };
    let record = match resolve(
        &request.kind,
        request.principal.key(),
        &request.handle,
        loaded,
    ) {
        Ok(record) => record,
        Err(rejected) => return Ok(ReadOutcome::Rejected(rejected)),
    };
    if let Some(at) = expired(&record, now) {
        return Ok(ReadOutcome::Rejected(Rejected::expired(
            request.kind.kind,
            &request.handle,
            &format_rfc3339(at),
        )));
    }
    Ok(ReadOutcome::Current(Snapshot {
        handle: request.handle.clone(),
        version: record.version,
        resumption: resumption(&request.handle, &record),
        state: Arc::unwrap_or_clone(record.state),
    }))
}

/// The ledger lookup that starts the boundary: the answer to a repeated operation id, if it is one.
fn replay(
    txn: &mut impl Txn,
    principal: &str,
    operation: Option<&(String, Fingerprint)>,
    now: i64,
) -> Result<Option<MutationOutcome>, StoreError> {
    let Some((operation_id, fingerprint)) = operation else {
        return Ok(None);
    };
    let Some(entry) = txn.ledger_get(principal, operation_id)? else {
        return Ok(None);
    };
    if entry.expires_at <= now {
        return Ok(None);
    }
    if &entry.fingerprint != fingerprint {
        return Ok(Some(MutationOutcome::Rejected(
            Rejected::operation_id_reused(operation_id),
        )));
    }
    Ok(Some(MutationOutcome::Replayed(Replayed {
        operation_id: operation_id.clone(),
        recorded_at: format_rfc3339(entry.recorded_at),
        original: entry.outcome.into_recorded(),
    })))
}

/// Records `outcome` under the operation id, if the request has one.
fn record(
    txn: &mut impl Txn,
    config: &StoreConfig,
    principal: &str,
    operation: Option<&(String, Fingerprint)>,
    outcome: &RecordedOutcome,
    state: Option<&Arc<Value>>,
    now: i64,
) -> Result<(), StoreError> {
    if let Some((operation_id, fingerprint)) = operation {
        let entry = LedgerEntry {
            fingerprint: fingerprint.clone(),
            outcome: LedgerOutcome::new(outcome, state),
            recorded_at: now,
            expires_at: now.saturating_add(duration_millis(config.ledger_retention)),
        };
        txn.ledger_put(principal, operation_id, entry)?;
    }
    Ok(())
}

/// The create boundary: the ledger lookup, then version 1 under `handle` (minted by the caller)
/// and the ledger record. The caller holds whatever makes `txn` atomic.
pub(crate) fn create(
    txn: &mut impl Txn,
    config: &StoreConfig,
    request: CreateRequest,
    handle: &str,
    now: i64,
) -> Result<MutationOutcome, StoreError> {
    let principal = request.principal.key();
    if let Some(answer) = replay(txn, principal, request.operation.as_ref(), now)? {
        return Ok(answer);
    }
    let record = new_record(&request.kind, principal, request.state, now);
    let applied = RecordedOutcome::Applied(applied_on_create(handle, &record));
    let stored = Arc::clone(&record.state);
    txn.insert(handle, record)?;
    self::record(
        txn,
        config,
        principal,
        request.operation.as_ref(),
        &applied,
        Some(&stored),
        now,
    )?;
    Ok(applied.into())
}

/// The mutation boundary. The caller holds whatever makes `txn` atomic.
pub(crate) fn mutate(
    txn: &mut impl Txn,
    config: &StoreConfig,
    request: &MutationRequest,
    transition: &mut Transition,
    now: i64,
) -> Result<MutationOutcome, StoreError> {
    let principal = request.principal.key();
    if let Some(answer) = replay(txn, principal, request.operation.as_ref(), now)? {
        return Ok(answer);
    }
    let mut stored = None;
    let outcome = decide(txn, config, request, transition, now, &mut stored)?;
    record(
        txn,
        config,
        principal,
        request.operation.as_ref(),
        &outcome,
        stored.as_ref(),
        now,
    )?;
    Ok(outcome.into())
}

fn decide(
    txn: &mut impl Txn,
    config: &StoreConfig,
    request: &MutationRequest,
    transition: &mut Transition,
    now: i64,
    stored: &mut Option<Arc<Value>>,
) -> Result<RecordedOutcome, StoreError> {
    let kind = &request.kind;
    let handle = request.handle.as_str();
    let loaded = if has_prefix(handle, kind.prefix) {
        txn.load(handle)?
    } else {
        None
    };
    let mut record = match resolve(kind, request.principal.key(), handle, loaded) {
        Ok(record) => record,
        Err(rejected) => return Ok(RecordedOutcome::Rejected(rejected)),
    };
    if record.lifecycle == Lifecycle::Terminal {
        return Ok(RecordedOutcome::Rejected(Rejected::terminal(
            kind.kind, handle,
        )));
    }
    if let Some(at) = expired(&record, now) {
        return Ok(RecordedOutcome::Rejected(Rejected::expired(
            kind.kind,
            handle,
            &format_rfc3339(at),
        )));
    }

    let mut rebased_from = None;
    if let Some(expected) = request.expected_version
        && expected != record.version
        && !config.skips_version_checks()
    {
        // Only the last `history_limit` versions are kept; a store may drop older ones lazily.
        let oldest_kept = record.version.saturating_sub(config.history_limit.max(1)) + 1;
        let before = if expected < record.version && expected >= oldest_kept {
            txn.history(handle, expected)?
        } else {
            None
        };
        let delta = before.as_ref().map(|before| diff(before, &record.state));
        let rebase = match (&request.policy, &delta) {
            (ConflictPolicy::Rebase { touches }, Some(delta)) => delta.iter().all(|change| {
                change
                    .top_level_field()
                    .is_some_and(|field| !touches.contains(&field))
            }),
            _ => false,
        };
        if !rebase {
            let recovery = match request.policy {
                ConflictPolicy::Reconfirm => Recovery::Reconfirm,
                _ => Recovery::RefreshAndReplan,
            };
            return Ok(RecordedOutcome::StaleView(StaleView {
                code: code::STALE_VIEW.to_owned(),
                handle: handle.to_owned(),
                expected_version: expected,
                current_version: record.version,
                recovery,
                delta_available: delta.is_some(),
                delta: delta.unwrap_or_default(),
                resumption: resumption(handle, &record),
                current_state: Arc::unwrap_or_clone(record.state),
            }));
        }
        rebased_from = Some(expected);
    }

    // The transition works on a copy: the stored state stays intact when it fails or panics.
    let mut state = Value::clone(&record.state);
    let result = match transition.run(&mut state) {
        Ok(result) => result,
        Err(error) => return Ok(RecordedOutcome::Rejected(Rejected::domain(&error))),
    };
    record.version += 1;
    record.lifecycle = (kind.lifecycle)(&state);
    record.expires_at = expiry(kind, now);
    let applied = Applied {
        handle: handle.to_owned(),
        version: record.version,
        result,
        rebased_from,
        resumption: resumption(handle, &record),
        state: state.clone(),
    };
    record.state = Arc::new(state);
    *stored = Some(Arc::clone(&record.state));
    let drop_through = record.version.saturating_sub(config.history_limit.max(1));
    txn.write(handle, record, drop_through)?;
    Ok(RecordedOutcome::Applied(applied))
}
