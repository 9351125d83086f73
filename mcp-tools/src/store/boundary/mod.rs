//! The atomic boundary, written once against a minimal transaction interface that each store
//! implements while it holds its locks (memory) or its write transaction (SQL).

pub(crate) mod step;

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::FutureExt;

use serde_json::Value;

use super::clock::{duration_millis, format_rfc3339};
use super::collection::{InHand, ItemWrite, ItemsPage, PAGE_SIZE, StoredItem};
use super::delta::{FieldChange, diff};
use super::entity::{EntityKind, Lifecycle};
use super::fingerprint::Fingerprint;
use super::handle::mint_handle;
use super::handle::{has_prefix, random};
use super::history::{Undo, apply_undo, undo_patch};
use super::outbox::{EffectTicket, OutboxEntry, effect_key};
use crate::auth::Principal;
use crate::protocol::framework::code;
use crate::protocol::recovery::Recovery;
use crate::protocol::tool_error::ToolError;
use crate::store::api::{
    Changed, ConflictPolicy, CreateRequest, Making, MutationRequest, ReadRequest, StoreConfig,
    Transition,
};
use crate::store::depth::{MAX_DEPTH, deeper_than};
use crate::store::error::StoreError;
use crate::store::outcome::{
    Applied, Changes, MutationOutcome, ReadOutcome, RecordedApplied, RecordedOutcome,
    RecordedStaleView, Rejected, Replayed, Resumption, Snapshot, StaleView,
};

/// One stored resource at its current version. Cloning it is cheap: the strings and the state are
/// shared.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) kind: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) version: u64,
    pub(crate) state: Arc<Value>,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) expires_at: Option<i64>,
}

/// What a ledger record holds besides its key.
#[derive(Debug, Clone)]
pub(crate) enum LedgerState {
    /// A create claimed the operation id and is making its state.
    Pending { token: u64 },
    /// The recorded outcome.
    Done(RecordedOutcome),
}

/// One operation-id ledger record.
#[derive(Debug, Clone)]
pub(crate) struct LedgerEntry {
    pub(crate) fingerprint: Fingerprint,
    pub(crate) state: LedgerState,
    /// The resource the record counts against (the one its outcome names).
    pub(crate) handle: Option<String>,
    pub(crate) recorded_at: i64,
    pub(crate) expires_at: i64,
}

/// The operations the boundary performs inside one store transaction.
pub(crate) trait Txn {
    /// Says which resource and ledger record the boundary reads first, so a store can read both
    /// in one round trip; `ledger_get` and `load` then answer from it once.
    fn prefetch(
        &mut self,
        _handle: &str,
        _principal: &str,
        _operation_id: Option<&str>,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// The ledger record of (principal, operation id), expired or not.
    fn ledger_get(
        &mut self,
        principal: &str,
        operation_id: &str,
    ) -> Result<Option<LedgerEntry>, StoreError>;
    /// Stores the ledger record of (principal, operation id), which holds none (see
    /// [`Txn::ledger_remove`]); a record with a handle counts against that resource's share.
    fn ledger_put(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: LedgerEntry,
    ) -> Result<(), StoreError>;
    /// Removes the ledger record of (principal, operation id), `entry` as read.
    fn ledger_remove(
        &mut self,
        principal: &str,
        operation_id: &str,
        entry: &LedgerEntry,
    ) -> Result<(), StoreError>;
    /// Whether the resource holds `quota` live ledger records or more.
    fn ledger_full(&mut self, handle: &str, quota: u64, now: i64) -> Result<bool, StoreError>;
    /// The resource at its current version.
    fn load(&mut self, handle: &str) -> Result<Option<Record>, StoreError>;
    /// The undo patches of the versions after `version`, newest first, or `None` when one of
    /// them is no longer kept.
    fn undo_since(
        &mut self,
        handle: &str,
        version: u64,
    ) -> Result<Option<Vec<Vec<Undo>>>, StoreError>;
    /// Stores `record` (version 1) under a newly minted handle.
    fn insert(&mut self, handle: &str, record: Record) -> Result<(), StoreError>;
    /// The stored items among `wanted` (`value: None`: a removal still remembered); an id not
    /// returned is not there.
    fn items_get(
        &mut self,
        handle: &str,
        wanted: &[(&'static str, u64)],
    ) -> Result<Vec<(&'static str, StoredItem)>, StoreError>;
    /// Up to `limit` items of `field` with ids after `after`, in id order.
    fn items_page(
        &mut self,
        handle: &str,
        field: &'static str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredItem>, StoreError>;
    /// Up to `limit` items written after `version` (removals too, as long as they are
    /// remembered), by collection, in version order.
    fn items_since(
        &mut self,
        handle: &str,
        version: u64,
        limit: usize,
    ) -> Result<Vec<(String, StoredItem)>, StoreError>;
    /// Writes `record` as the new current version with the undo patch back to the previous one,
    /// and drops the patches of versions `<= drop_through` (now or later: the boundary never asks
    /// for them again). `recorded` says a ledger record about this change follows in the same
    /// transaction, so a store may count it against the resource in this write.
    fn write(&mut self, handle: &str, record: Record, change: Change) -> Result<(), StoreError>;
}

/// What a write adds besides the new record.
#[derive(Debug)]
pub(crate) struct Change {
    /// The patch back to the previous version.
    pub(crate) undo: Vec<Undo>,
    /// Patches of versions up to this one may be dropped.
    pub(crate) drop_through: u64,
    /// A ledger record about this change follows in the same transaction (SQLite counts it in
    /// the write; the other stores count it with the record).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) recorded: bool,
    /// The change moved the resource's expiry (see [`expiry`]): SQLite rewrites the expiry
    /// column, and so its index, only then.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) expiry_moved: bool,
    /// The collection items written at the new version (`value: None`: removed); a removal is
    /// remembered as long as the versions up to it are (see `drop_through`), for deltas.
    pub(crate) items: Vec<ItemWrite>,
    /// The resource's kind has collections, so remembered removals may need forgetting.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) collections: bool,
    /// The effects the change emitted, written to the outbox in the same unit.
    pub(crate) effects: Vec<OutboxEntry>,
}

/// How often a transition may ask for collection items it was not handed before it is refused:
/// each round fetches every item the last run asked for, so only a transition that finds each
/// item through the one before needs more than one or two.
const MAX_ITEM_ROUNDS: usize = 16;

/// How many item changes a read since a version lists before it answers "re-read" instead.
pub(crate) const MAX_ITEM_DELTA: usize = 100;

/// An item change as a delta entry: its path (`/notes/items/7`) and the item now (`after`
/// absent: removed). An item's earlier value is not kept, so `before` is never given.
fn item_change(field: &str, item: &StoredItem) -> FieldChange {
    FieldChange {
        path: format!("/{field}/items/{}", item.id),
        before: None,
        after: item.value.as_ref().map(
            |value| serde_json::json!({ "id": item.id, "version": item.version, "value": value }),
        ),
    }
}

pub(crate) fn resumption(handle: &str, record: &Record) -> Resumption {
    Resumption {
        handle: handle.to_owned(),
        basis_version: record.version,
        lifecycle: record.lifecycle,
        expires_at: record.expires_at.map(format_rfc3339),
        validator: None,
    }
}

/// When a resource of `kind` changed at `now` expires: its time to live later, rounded up to
/// the largest of 1 ms, 10 ms, 100 ms, 1 s, 10 s and 1 min that is at most a thousandth of the
/// time to live.
///
/// The rounding is what lets a busy resource's expiry stand still: every change within one step
/// computes the same expiry, so a store's write leaves the expiry column, and the index the
/// sweep finds expired resources by, as they were (SQLite skips the index, PostgreSQL can
/// update the row in place). A resource still lives at least its time to live after its last
/// change, and at most one step more.
pub(crate) fn expiry(kind: &EntityKind, now: i64) -> Option<i64> {
    kind.ttl.map(|ttl| {
        let ttl = duration_millis(ttl);
        let step = EXPIRY_STEPS
            .iter()
            .copied()
            .find(|step| *step <= ttl / 1000)
            .unwrap_or(1);
        let exact = now.saturating_add(ttl);
        match exact.rem_euclid(step) {
            0 => exact,
            past => exact.saturating_add(step - past),
        }
    })
}

/// The steps an expiry is rounded up to, largest first, in milliseconds.
const EXPIRY_STEPS: [i64; 6] = [60_000, 10_000, 1_000, 100, 10, 1];

/// Resolves a handle for `principal`: `Err` with the rejection the caller must see otherwise.
fn resolve(
    txn: &mut impl Txn,
    kind: &EntityKind,
    principal: &str,
    handle: &str,
) -> Result<Result<Record, Rejected>, StoreError> {
    let loaded = if has_prefix(handle, kind.prefix) {
        txn.load(handle)?
    } else {
        None
    };
    Ok(match loaded {
        Some(record) if *record.owner == *principal && *record.kind == *kind.kind => Ok(record),
        _ => Err(Rejected::not_found(kind.kind)),
    })
}

fn expired(record: &Record, now: i64) -> Option<i64> {
    record.expires_at.filter(|at| *at <= now)
}

/// The read boundary.
pub(crate) fn read(
    txn: &mut impl Txn,
    config: &StoreConfig,
    request: &ReadRequest,
    now: i64,
) -> Result<ReadOutcome, StoreError> {
    let record = match resolve(txn, &request.kind, request.principal.key(), &request.handle)? {
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
    let changes = match request.since {
        None => None,
        Some(since) if since > record.version => {
            return Ok(ReadOutcome::Rejected(Rejected::future_version(
                request.kind.kind,
                &request.handle,
                since,
                record.version,
            )));
        }
        Some(since) if since == record.version => Some(Changes {
            since_version: since,
            delta_available: true,
            delta: Vec::new(),
        }),
        Some(since) => {
            let before = state_at(txn, config, &request.handle, &record, since)?;
            // Between the views, as a `stale_view` delta: never what the view hides.
            let mut delta = before.map(|before| {
                diff(
                    &request.kind.view_of(&before),
                    &request.kind.view_of(&record.state),
                )
            });
            if let Some(delta) = &mut delta
                && !request.kind.collections.is_empty()
            {
                let items = txn.items_since(&request.handle, since, MAX_ITEM_DELTA + 1)?;
                if items.len() > MAX_ITEM_DELTA {
                    // Too many to list: the caller re-reads.
                    delta.clear();
                    return Ok(ReadOutcome::Current(snapshot(
                        txn,
                        request,
                        record,
                        Some(Changes {
                            since_version: since,
                            delta_available: false,
                            delta: Vec::new(),
                        }),
                    )?));
                }
                delta.extend(items.iter().map(|(field, item)| item_change(field, item)));
            }
            Some(Changes {
                since_version: since,
                delta_available: delta.is_some(),
                delta: delta.unwrap_or_default(),
            })
        }
    };
    Ok(ReadOutcome::Current(snapshot(
        txn, request, record, changes,
    )?))
}

/// The page of `field` a read asks for: the id it starts after, and how many items to fetch
/// (one more than a page, to tell whether more follow).
pub(crate) fn page_of(request: &ReadRequest, field: &str) -> (u64, usize) {
    let after = match &request.page_after {
        Some((paged, after)) if paged == field => *after,
        _ => 0,
    };
    (after, PAGE_SIZE + 1)
}

/// A read's snapshot of `record`, with a page of each collection's items.
fn snapshot(
    txn: &mut impl Txn,
    request: &ReadRequest,
    record: Record,
    changes: Option<Changes>,
) -> Result<Snapshot, StoreError> {
    let mut pages = Vec::with_capacity(request.kind.collections.len());
    for field in request.kind.collections {
        let (after, limit) = page_of(request, field);
        let mut items = txn.items_page(&request.handle, field, after, limit)?;
        let more = items.len() > PAGE_SIZE;
        items.truncate(PAGE_SIZE);
        pages.push(ItemsPage { field, items, more });
    }
    Ok(Snapshot {
        handle: request.handle.clone(),
        version: record.version,
        resumption: resumption(&request.handle, &record),
        state: record.state,
        changes,
        effects: Vec::new(),
        pages,
    })
}

/// The resource a replayed outcome names, as the caller may see it now.
fn current_view(
    txn: &mut impl Txn,
    kind: &EntityKind,
    principal: &str,
    handle: &str,
    now: i64,
) -> Result<Option<Snapshot>, StoreError> {
    let Ok(record) = resolve(txn, kind, principal, handle)? else {
        return Ok(None);
    };
    if expired(&record, now).is_some() {
        return Ok(None);
    }
    // The operation was applied, and the replay must say so whatever the view does: a caller
    // told otherwise might apply it again under a new operation id.
    let Some(state) = entity_code(|| kind.view_shared(&record.state)) else {
        tracing::error!(
            kind = kind.kind,
            handle,
            "the entity's view panicked: a replay is answered without the resource's current view"
        );
        return Ok(None);
    };
    Ok(Some(Snapshot {
        handle: handle.to_owned(),
        version: record.version,
        resumption: resumption(handle, &record),
        state,
        changes: None,
        effects: Vec::new(),
        pages: Vec::new(),
    }))
}

/// Runs the entity's own code, its lifecycle or its view, outside a transition: `None` when it
/// panicked. A create or a change then answers as a panicking transition, unrecorded; a replay
/// still answers `replayed`, without the current view. (A read's view is left to unwind to its
/// caller, as the read tool's own code would.)
fn entity_code<T>(code: impl FnOnce() -> T) -> Option<T> {
    panic::catch_unwind(AssertUnwindSafe(code)).ok()
}

/// What the ledger lookup that starts the boundary found.
enum Lookup {
    /// The answer to a repeated operation id.
    Answer(Box<MutationOutcome>),
    /// A new operation; `stale` is an expired record under the same key, to be replaced.
    Fresh { stale: Option<LedgerEntry> },
}

fn lookup(
    txn: &mut impl Txn,
    kind: &EntityKind,
    principal: &str,
    operation: Option<&(String, Fingerprint)>,
    reconfirmed: bool,
    now: i64,
) -> Result<Lookup, StoreError> {
    let Some((operation_id, fingerprint)) = operation else {
        return Ok(Lookup::Fresh { stale: None });
    };
    let Some(entry) = txn.ledger_get(principal, operation_id)? else {
        return Ok(Lookup::Fresh { stale: None });
    };
    if entry.expires_at <= now {
        return Ok(Lookup::Fresh { stale: Some(entry) });
    }
    // A confirmed retry of the same request replaces the `stale_view` it answers: nothing was
    // applied under this operation id yet.
    if reconfirmed
        && entry.fingerprint == *fingerprint
        && matches!(
            entry.state,
            LedgerState::Done(RecordedOutcome::StaleView(_))
        )
    {
        return Ok(Lookup::Fresh { stale: Some(entry) });
    }
    let answer = answer(txn, kind, principal, operation_id, fingerprint, entry, now)?;
    Ok(Lookup::Answer(Box::new(answer)))
}

/// The answer a live ledger record gives a request with its operation id.
fn answer(
    txn: &mut impl Txn,
    kind: &EntityKind,
    principal: &str,
    operation_id: &str,
    fingerprint: &Fingerprint,
    entry: LedgerEntry,
    now: i64,
) -> Result<MutationOutcome, StoreError> {
    if entry.fingerprint != *fingerprint {
        return Ok(MutationOutcome::Rejected(Rejected::operation_id_reused(
            operation_id,
        )));
    }
    let original = match entry.state {
        LedgerState::Pending { .. } => {
            return Ok(MutationOutcome::Rejected(Rejected::operation_in_progress(
                operation_id,
            )));
        }
        LedgerState::Done(original) => original,
    };
    let current = match &entry.handle {
        Some(handle) => current_view(txn, kind, principal, handle, now)?,
        None => None,
    };
    Ok(MutationOutcome::Replayed(Replayed {
        operation_id: operation_id.to_owned(),
        recorded_at: format_rfc3339(entry.recorded_at),
        original,
        current,
        effects: Vec::new(),
    }))
}

/// Records `outcome` about the resource `handle` under the operation id, replacing the expired
/// record `stale` if there was one. The record counts against that resource's share, whatever
/// the outcome.
#[allow(clippy::too_many_arguments)]
fn record(
    txn: &mut impl Txn,
    config: &StoreConfig,
    principal: &str,
    operation: &(String, Fingerprint),
    stale: Option<&LedgerEntry>,
    handle: &str,
    outcome: RecordedOutcome,
    now: i64,
) -> Result<(), StoreError> {
    let (operation_id, fingerprint) = operation;
    if let Some(stale) = stale {
        txn.ledger_remove(principal, operation_id, stale)?;
    }
    let entry = LedgerEntry {
        fingerprint: *fingerprint,
        handle: Some(handle.to_owned()),
        state: LedgerState::Done(outcome),
        recorded_at: now,
        expires_at: now.saturating_add(duration_millis(config.ledger_retention)),
    };
    txn.ledger_put(principal, operation_id, entry)
}

/// How a store runs the atomic units of a create, each holding the ledger key of its operation
/// id (a lock in memory, the write transaction in SQL).
pub(crate) trait CreateUnits: Sync {
    /// The store's transaction.
    type Txn<'t>: Txn;

    /// Runs `work` as one atomic unit.
    fn unit<T, F>(
        &self,
        principal: &Principal,
        operation_id: Option<&str>,
        work: F,
    ) -> impl Future<Output = Result<T, StoreError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut Self::Txn<'_>, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static;

    /// Gives up the claim `token` on `operation_id` without waiting for it: the create was
    /// dropped while its state was being made (its caller went away), so a retry need not wait
    /// for the claim to lapse.
    fn abandon(&self, principal: &Principal, operation_id: &str, token: u64);

    /// Whether a unit may still run once the future of [`unit`](Self::unit) was dropped (a
    /// writer thread running the jobs it was given). Where it may not, a unit whose work never
    /// started wrote nothing, and a dropped create need not give up a claim it never made.
    const RUNS_WHEN_DROPPED: bool = false;
}

/// A create, in the steps every store takes: a state known up front is stored in the unit that
/// consults the ledger; a state the tool makes is made between a unit that claims the operation
/// id and one that stores the state, so it is made once however often the create is retried.
pub(crate) async fn create(
    store: &impl CreateUnits,
    request: CreateRequest<'_>,
) -> Result<MutationOutcome, StoreError> {
    let CreateRequest {
        kind,
        principal,
        operation,
        initial,
    } = request;
    let operation_id = operation
        .as_ref()
        .map(|(operation_id, _)| operation_id.clone());
    let making = match initial.into_making() {
        Making::Ready(state) => {
            let handle = mint_handle(kind.prefix)?;
            let who = principal.clone();
            return store
                .unit(
                    &principal,
                    operation_id.as_deref(),
                    move |txn, config, now| {
                        create_now(
                            txn,
                            config,
                            &kind,
                            &who,
                            operation.as_ref(),
                            &handle,
                            state,
                            now,
                        )
                    },
                )
                .await;
        }
        Making::Deferred(making) => making,
    };
    let token = claim_token()?;
    // Armed before the claim is sent: a unit may commit after its caller is gone (SQLite's
    // writer runs the jobs it was given; a database may commit what it had received), and a
    // create dropped then would leave its claim to lapse. A claim that never committed carries
    // no token of this create's, so giving it up removes nothing.
    let started = Arc::new(AtomicBool::new(false));
    let mut abandon = Abandon {
        store,
        principal: &principal,
        claim: operation_id
            .as_deref()
            .map(|operation_id| (operation_id, token)),
        started: Arc::clone(&started),
    };
    let claimed = {
        let (who, operation) = (principal.clone(), operation.clone());
        store
            .unit(
                &principal,
                operation_id.as_deref(),
                move |txn, config, now| {
                    started.store(true, Ordering::Relaxed);
                    claim(txn, config, &kind, &who, operation.as_ref(), token, now)
                },
            )
            .await?
    };
    let token = match claimed {
        Claim::Answer(answer) => {
            abandon.claim = None;
            return Ok(*answer);
        }
        Claim::Claimed(token) => token,
    };
    let made = match AssertUnwindSafe(making).catch_unwind().await {
        Ok(Ok(state)) => Made::State(state),
        Ok(Err(error)) => Made::Failed(error),
        Err(_) => Made::Panicked,
    };
    let handle = mint_handle(kind.prefix)?;
    let who = principal.clone();
    // The claim is given up on a drop until the unit that records the outcome has finished:
    // that unit may wait (for the operation id's turn, for the database), and a create dropped
    // there would otherwise leave the claim to lapse. Given up after that unit committed, the
    // claim is no longer this create's to give up, and nothing is removed; given up after it
    // failed (rolled back), the claim is freed for the retry at once.
    let finished = store
        .unit(
            &principal,
            operation_id.as_deref(),
            move |txn, config, now| {
                finish_create(
                    txn,
                    config,
                    &kind,
                    &who,
                    operation.as_ref(),
                    token,
                    &handle,
                    made,
                    now,
                )
            },
        )
        .await;
    if finished.is_ok() {
        abandon.claim = None;
    }
    finished
}

/// Gives a create's claim up if the create is dropped before it finished.
struct Abandon<'a, S: CreateUnits> {
    store: &'a S,
    principal: &'a Principal,
    claim: Option<(&'a str, u64)>,
    /// Whether the work of the claiming unit started. A create dropped while it waited for its
    /// turn, a connection or a lock leaves nothing to give up, and giving it up anyway would
    /// cost a store under pressure one more transaction.
    started: Arc<AtomicBool>,
}

impl<S: CreateUnits> Drop for Abandon<'_, S> {
    fn drop(&mut self) {
        let Some((operation_id, token)) = self.claim else {
            return;
        };
        if S::RUNS_WHEN_DROPPED || self.started.load(Ordering::Relaxed) {
            self.store.abandon(self.principal, operation_id, token);
        }
    }
}

/// A random token that tells one create's claim from another's.
fn claim_token() -> Result<u64, StoreError> {
    random().map(u64::from_le_bytes)
}

/// What the first step of a create decided.
pub(crate) enum Claim {
    /// The create ends here (a replay, a reused or busy operation id).
    Answer(Box<MutationOutcome>),
    /// Go on and make the state; with an operation id, it is claimed with this token.
    Claimed(Option<u64>),
}

/// The first step of a create: the ledger lookup, and a claim on a new operation id so a
/// concurrent or later retry does not make the state again.
pub(crate) fn claim(
    txn: &mut impl Txn,
    config: &StoreConfig,
    kind: &EntityKind,
    principal: &Principal,
    operation: Option<&(String, Fingerprint)>,
    token: u64,
    now: i64,
) -> Result<Claim, StoreError> {
    let principal = principal.key();
    let stale = match lookup(txn, kind, principal, operation, false, now)? {
        Lookup::Answer(answer) => return Ok(Claim::Answer(answer)),
        Lookup::Fresh { stale } => stale,
    };
    let Some((operation_id, fingerprint)) = operation else {
        return Ok(Claim::Claimed(None));
    };
    if let Some(stale) = &stale {
        txn.ledger_remove(principal, operation_id, stale)?;
    }
    txn.ledger_put(
        principal,
        operation_id,
        LedgerEntry {
            fingerprint: *fingerprint,
            state: LedgerState::Pending { token },
            handle: None,
            recorded_at: now,
            expires_at: now.saturating_add(duration_millis(config.creation_lease)),
        },
    )?;
    Ok(Claim::Claimed(Some(token)))
}

/// How making a create's state ended.
pub(crate) enum Made {
    State(Value),
    Failed(ToolError),
    Panicked,
}

/// The last step of a create: version 1 under `handle` (minted by the caller) and the ledger
/// record, if the claim `token` still holds. A create whose state could not be made records
/// nothing and gives its claim up, so a retry makes it again.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_create(
    txn: &mut impl Txn,
    config: &StoreConfig,
    kind: &EntityKind,
    principal: &Principal,
    operation: Option<&(String, Fingerprint)>,
    token: Option<u64>,
    handle: &str,
    made: Made,
    now: i64,
) -> Result<MutationOutcome, StoreError> {
    let principal = principal.key();
    // Our claim (lapsed or not), an expired record or nothing is replaced; a live record of
    // another attempt that took the id over after our claim lapsed stands, and answers.
    let stale = match (operation, token) {
        (Some((operation_id, fingerprint)), Some(token)) => {
            match txn.ledger_get(principal, operation_id)? {
                Some(entry)
                    if entry.expires_at > now
                        && !matches!(entry.state, LedgerState::Pending { token: held } if held == token) =>
                {
                    return answer(txn, kind, principal, operation_id, fingerprint, entry, now);
                }
                other => other,
            }
        }
        _ => None,
    };
    let state = match made {
        Made::State(state) if deeper_than(&state, MAX_DEPTH) => {
            release(txn, principal, operation, stale.as_ref())?;
            return Ok(MutationOutcome::Rejected(Rejected::too_deep(kind.kind)));
        }
        Made::State(state) => state,
        Made::Failed(error) => {
            release(txn, principal, operation, stale.as_ref())?;
            return Ok(MutationOutcome::Rejected(Rejected::domain(&error)));
        }
        Made::Panicked => {
            release(txn, principal, operation, stale.as_ref())?;
            return Ok(MutationOutcome::Rejected(Rejected::panicked(kind.kind)));
        }
    };
    let state = Arc::new(state);
    let Some((lifecycle, view)) =
        entity_code(|| ((kind.lifecycle)(&state), kind.view_shared(&state)))
    else {
        release(txn, principal, operation, stale.as_ref())?;
        return Ok(MutationOutcome::Rejected(Rejected::panicked(kind.kind)));
    };
    let record = Record {
        kind: kind.kind.into(),
        owner: principal.into(),
        version: 1,
        lifecycle,
        state,
        expires_at: expiry(kind, now),
    };
    let applied = Applied {
        handle: handle.to_owned(),
        version: 1,
        state: view,
        result: Value::Null,
        rebased_from: None,
        resumption: resumption(handle, &record),
        effects: Vec::new(),
    };
    txn.insert(handle, record)?;
    if let Some(operation) = operation {
        let summary = RecordedOutcome::Applied(RecordedApplied::from(&applied));
        self::record(
            txn,
            config,
            principal,
            operation,
            stale.as_ref(),
            handle,
            summary,
            now,
        )?;
    }
    Ok(MutationOutcome::Applied(applied))
}

/// A create whose state is known up front: the lookup, version 1 and the record in one atomic
/// unit, so concurrent retries see either nothing or the outcome, never a claim.
#[allow(clippy::too_many_arguments)]
pub(crate) fn create_now(
    txn: &mut impl Txn,
    config: &StoreConfig,
    kind: &EntityKind,
    principal: &Principal,
    operation: Option<&(String, Fingerprint)>,
    handle: &str,
    state: Value,
    now: i64,
) -> Result<MutationOutcome, StoreError> {
    let stale = match lookup(txn, kind, principal.key(), operation, false, now)? {
        Lookup::Answer(answer) => return Ok(*answer),
        Lookup::Fresh { stale } => stale,
    };
    if let (Some((operation_id, _)), Some(stale)) = (operation, &stale) {
        txn.ledger_remove(principal.key(), operation_id, stale)?;
    }
    finish_create(
        txn,
        config,
        kind,
        principal,
        operation,
        None,
        handle,
        Made::State(state),
        now,
    )
}

/// Gives up a create's claim (read as `held`), if it still holds one.
pub(crate) fn release(
    txn: &mut impl Txn,
    principal: &str,
    operation: Option<&(String, Fingerprint)>,
    held: Option<&LedgerEntry>,
) -> Result<(), StoreError> {
    if let (Some((operation_id, _)), Some(entry)) = (operation, held)
        && matches!(entry.state, LedgerState::Pending { .. })
    {
        txn.ledger_remove(principal, operation_id, entry)?;
    }
    Ok(())
}

/// Gives up the claim `token` on a create's operation id, when the create was abandoned before
/// it finished.
pub(crate) fn abandon(
    txn: &mut impl Txn,
    principal: &Principal,
    operation_id: &str,
    token: u64,
) -> Result<(), StoreError> {
    let principal = principal.key();
    if let Some(entry) = txn.ledger_get(principal, operation_id)?
        && matches!(entry.state, LedgerState::Pending { token: held } if held == token)
    {
        txn.ledger_remove(principal, operation_id, &entry)?;
    }
    Ok(())
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
    let operation = request.operation.as_ref();
    if has_prefix(&request.handle, request.kind.prefix) {
        let operation_id = operation.map(|(operation_id, _)| operation_id.as_str());
        txn.prefetch(&request.handle, principal, operation_id)?;
    }
    let stale = match lookup(
        txn,
        &request.kind,
        principal,
        operation,
        request.reconfirmed,
        now,
    )? {
        Lookup::Answer(answer) => return Ok(*answer),
        Lookup::Fresh { stale } => stale,
    };
    let decision = decide(txn, config, request, transition, now)?;
    let (outcome, recorded) = match decision {
        Decision::Record(outcome, summary) => (outcome, Some(summary)),
        Decision::Unrecorded(outcome) => (outcome, None),
    };
    if let (Some(operation), Some(summary)) = (operation, recorded) {
        record(
            txn,
            config,
            principal,
            operation,
            stale.as_ref(),
            &request.handle,
            summary,
            now,
        )?;
    }
    Ok(outcome)
}

/// What the mutation boundary answers, and whether the ledger records it.
enum Decision {
    Record(MutationOutcome, RecordedOutcome),
    Unrecorded(MutationOutcome),
}

impl Decision {
    fn rejected(rejected: Rejected) -> Self {
        let summary = RecordedOutcome::Rejected(rejected.clone());
        Decision::Record(MutationOutcome::Rejected(rejected), summary)
    }
}

fn decide(
    txn: &mut impl Txn,
    config: &StoreConfig,
    request: &MutationRequest,
    transition: &mut Transition,
    now: i64,
) -> Result<Decision, StoreError> {
    let kind = &request.kind;
    let handle = request.handle.as_str();
    let mut record = match resolve(txn, kind, request.principal.key(), handle)? {
        Ok(record) => record,
        // Never recorded: a guessed handle must not cost the ledger anything.
        Err(rejected) => return Ok(Decision::Unrecorded(MutationOutcome::Rejected(rejected))),
    };
    let full = request.operation.is_some() && txn.ledger_full(handle, config.ledger_quota, now)?;
    // A terminal or expired resource stays so: at a full share its answer is given but not
    // recorded, and a retry gets the same answer anyway.
    let settled = |rejected: Rejected| {
        if full {
            Decision::Unrecorded(MutationOutcome::Rejected(rejected))
        } else {
            Decision::rejected(rejected)
        }
    };
    if record.lifecycle == Lifecycle::Terminal {
        return Ok(settled(Rejected::terminal(kind.kind, handle)));
    }
    if let Some(at) = expired(&record, now) {
        return Ok(settled(Rejected::expired(
            kind.kind,
            handle,
            &format_rfc3339(at),
        )));
    }
    if full {
        return Ok(Decision::Unrecorded(MutationOutcome::Rejected(
            Rejected::ledger_full(kind.kind, handle, config.ledger_quota),
        )));
    }

    let mut rebased_from = None;
    if let Some(expected) = request.expected_version
        && expected > record.version
        && !config.skips_version_checks()
    {
        return Ok(Decision::rejected(Rejected::future_version(
            kind.kind,
            handle,
            expected,
            record.version,
        )));
    }
    let per_item = matches!(request.policy, ConflictPolicy::Items);
    if let Some(expected) = request.expected_version
        && expected != record.version
        && !config.skips_version_checks()
        && per_item
    {
        // Which items count is known once the transition ran.
        rebased_from = Some(expected);
    } else if let Some(expected) = request.expected_version
        && expected != record.version
        && !config.skips_version_checks()
    {
        let before = state_at(txn, config, handle, &record, expected)?;
        let rebase = match (&request.policy, &before) {
            (ConflictPolicy::Rebase { touches }, Some(before)) => {
                diff(before, &record.state).iter().all(|change| {
                    change
                        .top_level_field()
                        .is_some_and(|field| !touches.contains(&field))
                })
            }
            _ => false,
        };
        if !rebase {
            let recovery = match request.policy {
                ConflictPolicy::Reconfirm => Recovery::Reconfirm,
                _ => Recovery::RefreshAndReplan,
            };
            // Between the views, so the delta never shows what the view hides.
            let Some((current_state, delta)) = entity_code(|| {
                let current_state = kind.view_shared(&record.state);
                let delta = before.map(|before| diff(&kind.view_of(&before), &current_state));
                (current_state, delta)
            }) else {
                return Ok(Decision::Unrecorded(MutationOutcome::Rejected(
                    Rejected::panicked(kind.kind),
                )));
            };
            return Ok(stale_view(
                handle,
                &record,
                expected,
                recovery,
                delta,
                current_state,
            ));
        }
        rebased_from = Some(expected);
    }

    // The transition only borrows the stored state: it stays intact when it fails or panics.
    // Collection items it asks for and was not handed are fetched, and it runs again with them.
    let mut in_hand = InHand::new(!kind.collections.is_empty());
    let mut rounds = 0;
    let run = loop {
        let run = panic::catch_unwind(AssertUnwindSafe(|| transition.run(&record.state, &in_hand)));
        let wanted = in_hand.take_misses();
        if wanted.is_empty() {
            break run;
        }
        rounds += 1;
        if rounds > MAX_ITEM_ROUNDS {
            return Ok(Decision::Unrecorded(MutationOutcome::Rejected(
                Rejected::too_many_item_rounds(kind.kind, MAX_ITEM_ROUNDS),
            )));
        }
        let found = txn.items_get(handle, &wanted)?;
        in_hand.add(&wanted, found);
    };
    if let (true, Some(expected)) = (per_item, rebased_from) {
        let moved: Vec<FieldChange> = in_hand
            .all()
            .filter(|(_, item)| item.version > expected)
            .map(|(field, item)| item_change(field, item))
            .collect();
        if !moved.is_empty() {
            let Some(current_state) = entity_code(|| kind.view_shared(&record.state)) else {
                return Ok(Decision::Unrecorded(MutationOutcome::Rejected(
                    Rejected::panicked(kind.kind),
                )));
            };
            return Ok(stale_view(
                handle,
                &record,
                expected,
                Recovery::RefreshAndReplan,
                Some(moved),
                current_state,
            ));
        }
    }
    let changed = match run {
        Ok(Ok(changed)) => changed,
        // Recorded, so its details are bounded as a state is; past the bound it is refused
        // unrecorded, as a state would be.
        Ok(Err(error)) if error.details().is_some_and(|d| deeper_than(d, MAX_DEPTH)) => {
            return Ok(Decision::Unrecorded(MutationOutcome::Rejected(
                Rejected::too_deep(kind.kind),
            )));
        }
        Ok(Err(error)) => return Ok(Decision::rejected(Rejected::domain(&error))),
        // A bug, not an outcome: nothing is recorded, so a fixed server applies the retry.
        Err(_) => {
            return Ok(Decision::Unrecorded(MutationOutcome::Rejected(
                Rejected::panicked(kind.kind),
            )));
        }
    };
    let Changed {
        state,
        result,
        known,
        items,
        effects,
    } = changed;
    // Unrecorded, as a panic is: a server whose tool was fixed applies the retry.
    if deeper_than(&state, MAX_DEPTH)
        || deeper_than(&result, MAX_DEPTH)
        || effects
            .iter()
            .any(|effect| deeper_than(&effect.payload, MAX_DEPTH))
    {
        return Ok(Decision::Unrecorded(MutationOutcome::Rejected(
            Rejected::too_deep(kind.kind),
        )));
    }
    let state = Arc::new(state);
    // What a typed transition worked out with the entity's type; the kind's functions otherwise.
    let shown = entity_code(|| match known {
        Some(known) if known.kind == kind.kind => {
            let view = match (kind.view, known.view) {
                (Some(_), Some(view)) => Arc::new(view),
                _ => kind.view_shared(&state),
            };
            (known.lifecycle, view)
        }
        _ => ((kind.lifecycle)(&state), kind.view_shared(&state)),
    });
    let Some((lifecycle, view)) = shown else {
        return Ok(Decision::Unrecorded(MutationOutcome::Rejected(
            Rejected::panicked(kind.kind),
        )));
    };
    let undo = undo_patch(&record.state, &state);
    record.version += 1;
    record.lifecycle = lifecycle;
    let expires_at = expiry(kind, now);
    let expiry_moved = record.expires_at != expires_at;
    record.expires_at = expires_at;
    record.state = state;
    let operation_id = request.operation.as_ref().map(|(id, _)| id.as_str());
    let principal = request.principal.key();
    let effects: Vec<OutboxEntry> = effects
        .into_iter()
        .enumerate()
        .map(|(index, emitted)| OutboxEntry {
            key: effect_key(principal, operation_id, handle, record.version, index),
            kind: emitted.kind.to_owned(),
            handle: handle.to_owned(),
            principal: principal.to_owned(),
            payload: emitted.payload,
            created_at: now,
        })
        .collect();
    let applied = Applied {
        handle: handle.to_owned(),
        version: record.version,
        state: view,
        result,
        rebased_from,
        resumption: resumption(handle, &record),
        effects: effects
            .iter()
            .map(|entry| EffectTicket {
                key: entry.key.clone(),
                kind: entry.kind.clone(),
            })
            .collect(),
    };
    let drop_through = record
        .version
        .saturating_sub(config.history_limit.max(1) - 1);
    let change = Change {
        undo,
        drop_through,
        recorded: request.operation.is_some(),
        expiry_moved,
        items,
        collections: !kind.collections.is_empty(),
        effects,
    };
    txn.write(handle, record, change)?;
    let summary = RecordedOutcome::Applied(RecordedApplied::from(&applied));
    Ok(Decision::Record(MutationOutcome::Applied(applied), summary))
}

/// A recorded `stale_view` of `record` for a caller that expected `expected`: `delta` is `None`
/// when the history of that version is no longer kept.
fn stale_view(
    handle: &str,
    record: &Record,
    expected: u64,
    recovery: Recovery,
    delta: Option<Vec<FieldChange>>,
    current_state: Arc<Value>,
) -> Decision {
    let stale = StaleView {
        code: code::STALE_VIEW.to_owned(),
        handle: handle.to_owned(),
        expected_version: expected,
        current_version: record.version,
        recovery,
        delta_available: delta.is_some(),
        delta: delta.unwrap_or_default(),
        resumption: resumption(handle, record),
        current_state,
        confirmation: None,
    };
    let summary = RecordedOutcome::StaleView(RecordedStaleView::from(&stale));
    Decision::Record(MutationOutcome::StaleView(stale), summary)
}

/// The state at an older version, rebuilt from the current one with the kept undo patches, if
/// that version is still within the history limit.
fn state_at(
    txn: &mut impl Txn,
    config: &StoreConfig,
    handle: &str,
    record: &Record,
    version: u64,
) -> Result<Option<Value>, StoreError> {
    let oldest_kept = record.version.saturating_sub(config.history_limit.max(1)) + 1;
    if version == 0 || version >= record.version || version < oldest_kept {
        return Ok(None);
    }
    let Some(patches) = txn.undo_since(handle, version)? else {
        return Ok(None);
    };
    let mut state = Value::clone(&record.state);
    for patch in &patches {
        apply_undo(&mut state, patch)
            .map_err(|error| StoreError::Corrupt(format!("history of {handle}: {error}")))?;
    }
    Ok(Some(state))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn expiry_after(ttl: Duration, now: i64) -> i64 {
        expiry(&EntityKind::new("thing", "thg").with_ttl(ttl), now).unwrap()
    }

    /// An expiry is the time to live later, rounded up to a step of at most a thousandth of it.
    #[test]
    fn an_expiry_is_rounded_up_to_its_step() {
        let cases: &[(Duration, i64, i64)] = &[
            // time to live, now, expiry
            (Duration::from_millis(1), 7, 8),
            (Duration::from_millis(999), 7, 1_006),
            (Duration::from_secs(10), 7, 10_010),
            (Duration::from_secs(10), 10, 10_010),
            (Duration::from_secs(60), 1_001, 61_010),
            (Duration::from_secs(600), 1_001, 601_100),
            (Duration::from_secs(3_600), 1_001, 3_602_000),
            (Duration::from_secs(3_600), 1_000, 3_601_000),
            (Duration::from_secs(86_400), 1_001, 86_460_000),
            (Duration::from_secs(30 * 86_400), 1, 2_592_060_000),
            (Duration::from_secs(3_600), -1_001, 3_599_000),
        ];
        for &(ttl, now, expected) in cases {
            assert_eq!(expiry_after(ttl, now), expected, "{ttl:?} after {now}");
        }
        assert_eq!(expiry(&EntityKind::new("thing", "thg"), 5), None);
    }

    /// Every change within one step computes the same expiry; the next step moves it by one
    /// step; no expiry comes before the time to live has passed.
    #[test]
    fn changes_within_a_step_keep_the_expiry() {
        let ttl = Duration::from_secs(3_600);
        let first = expiry_after(ttl, 1_785_231_000_001);
        for now in 1_785_231_000_001..1_785_231_001_000 {
            assert_eq!(expiry_after(ttl, now), first);
        }
        assert_eq!(expiry_after(ttl, 1_785_231_001_001), first + 1_000);
        for now in (0..5_000).map(|n| 1_785_231_000_000 + n * 7) {
            let at = expiry_after(ttl, now);
            assert!(
                at >= now + 3_600_000 && at < now + 3_601_000,
                "{at} after {now}"
            );
        }
    }

    /// A time to live past what milliseconds since the epoch can hold saturates, never wraps.
    #[test]
    fn an_endless_time_to_live_saturates() {
        assert_eq!(expiry_after(Duration::MAX, 1_000), i64::MAX);
        assert_eq!(
            expiry_after(Duration::from_secs(86_400), i64::MAX - 5),
            i64::MAX
        );
    }
}
