//! The store trait and the requests it serves.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::clock::{Clock, SystemClock};
use super::collection::{InHand, ItemWrite};
use super::entity::{Entity, EntityKind, Lifecycle};
use super::error::{StoreError, StoreFuture};
use super::fingerprint::Fingerprint;
use super::outbox::{Effect, Effects, Emitted};
use super::outcome::{MutationOutcome, ReadOutcome};
use crate::auth::Principal;
use crate::protocol::tool_error::{IntoToolError, ToolError};

/// What to do when the caller's `expected_version` is older than the resource.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ConflictPolicy {
    /// Any intervening change gives `stale_view` with recovery `refresh_and_replan`.
    #[default]
    Reject,
    /// If no intervening change touched these top-level fields, re-run the transition on the
    /// current state (`applied` with `rebased_from`); otherwise `stale_view`.
    Rebase {
        /// Top-level members of the stored state (serialized names, as in the state's JSON) the
        /// transition reads or writes; [`ConflictPolicy::rebase`] maps Rust field names to them.
        touches: Vec<String>,
    },
    /// Consequential change: any intervening change gives `stale_view` with recovery `reconfirm`.
    Reconfirm,
    /// Versioned per item: `stale_view` only when a [`Collection`](super::Collection) item the
    /// transition reached (read, changed or removed) changed after `expected_version`; a change
    /// anywhere else in the resource meanwhile is no conflict, and the transition runs on the
    /// current version (`applied` with `rebased_from`). The scalar fields are not compared.
    Items,
}

impl ConflictPolicy {
    /// `Rebase` over the Rust fields `fields` of `R`, each mapped to its serialized name by
    /// [`Entity::field_key`]. A field without a single serialized name (a flattened one) could
    /// be changed under any name, so the policy is then `Reject`.
    pub fn rebase<R: Entity>(fields: &[&'static str]) -> Self {
        let touches: Option<Vec<String>> = fields
            .iter()
            .map(|field| R::field_key(field).map(str::to_owned))
            .collect();
        match touches {
            Some(touches) => ConflictPolicy::Rebase { touches },
            None => ConflictPolicy::Reject,
        }
    }
}

/// The synchronous state transition of a mutating tool: changes the state in place and returns
/// the tool's result. It runs inside the store's atomic boundary (inside the SQL transaction), so
/// it must not block on I/O; it may run on a worker thread, and its changes are discarded when it
/// fails.
pub struct Transition(Box<TransitionFn>);

/// From the stored state and the collection items in hand, the next state and the tool's
/// result. The stored state is only borrowed, so a transition that fails or panics leaves it as
/// it was.
type TransitionFn = dyn FnMut(&Value, &InHand) -> Result<Changed, ToolError> + Send;

/// What a transition made of the stored state.
pub(crate) struct Changed {
    /// The next state.
    pub(crate) state: Value,
    /// The tool's result.
    pub(crate) result: Value,
    /// What a typed transition read off the resource it had in hand, so the store need not
    /// decode the next state again for it.
    pub(crate) known: Option<Known>,
    /// The collection items the transition made, changed or removed.
    pub(crate) items: Vec<ItemWrite>,
    /// The effects the transition emitted, in order.
    pub(crate) effects: Vec<Emitted>,
}

/// The lifecycle and view of a next state, as its own type computes them.
pub(crate) struct Known {
    /// The kind they are right for: a request of another kind computes its own.
    pub(crate) kind: &'static str,
    pub(crate) lifecycle: Lifecycle,
    /// `None` when the type declares no view.
    pub(crate) view: Option<Value>,
}

impl Transition {
    /// A transition over the JSON state (it changes a copy). A [`Collection`](super::Collection)
    /// field shows here as its counts only (`{"len", "next_id"}`): its items are reached through
    /// a typed transition ([`Transition::typed`]), and a JSON transition must leave the field as
    /// it is.
    pub fn new(mut f: impl FnMut(&mut Value) -> Result<Value, ToolError> + Send + 'static) -> Self {
        Transition(Box::new(move |state: &Value, _: &InHand| {
            let mut next = state.clone();
            let result = f(&mut next)?;
            Ok(Changed {
                state: next,
                result,
                known: None,
                items: Vec::new(),
                effects: Vec::new(),
            })
        }))
    }

    /// A transition over the typed resource: the state is decoded into `R`, changed, and encoded
    /// back; the returned `T` becomes the result and an error `E` becomes a rejection with its code.
    /// For a request of `R`'s kind, the new lifecycle and the view the outcome shows are read off
    /// the changed `R` rather than decoded again from its JSON.
    pub fn typed<R, T, E>(mut f: impl FnMut(&mut R) -> Result<T, E> + Send + 'static) -> Self
    where
        R: Entity,
        T: Serialize,
        E: IntoToolError,
    {
        Transition::typed_parts(move |resource: &mut R| {
            let result = f(resource).map_err(IntoToolError::into_tool_error)?;
            Ok((encode(&result)?, Vec::new()))
        })
    }

    /// A typed transition that may emit effects of type `F` (see [`Effects`]): they are stored
    /// with the change, in the same atomic unit, and delivered after it commits by the handler
    /// registered for `F` on the server. Each run of the transition starts with no effects, so
    /// only those of the run that was committed are kept.
    pub fn typed_with_effects<R, T, E, F>(
        mut f: impl FnMut(&mut R, &mut Effects<F>) -> Result<T, E> + Send + 'static,
    ) -> Self
    where
        R: Entity,
        T: Serialize,
        E: IntoToolError,
        F: Effect,
    {
        Transition::typed_parts(move |resource: &mut R| {
            let mut effects = Effects::new();
            let result = f(resource, &mut effects).map_err(IntoToolError::into_tool_error)?;
            let emitted = effects.into_emitted().map_err(|error| {
                ToolError::new(crate::protocol::framework::code::INVALID_STATE, error)
            })?;
            Ok((encode(&result)?, emitted))
        })
    }

    /// A typed transition from `f`, which changes the resource and gives the encoded result and
    /// the effects it emitted.
    fn typed_parts<R: Entity>(
        mut f: impl FnMut(&mut R) -> Result<(Value, Vec<Emitted>), ToolError> + Send + 'static,
    ) -> Self {
        // Decoded straight from the stored state: the decoded resource is the copy.
        Transition(Box::new(move |state: &Value, in_hand: &InHand| {
            let mut resource = super::step::decode::<R>(state, in_hand)?;
            let (result, effects) = f(&mut resource)?;
            let items = super::step::take_item_writes(&mut resource)?;
            let known = Known {
                kind: R::KIND,
                lifecycle: resource.lifecycle(),
                view: R::VIEW.map(|view| view(&resource)),
            };
            Ok(Changed {
                state: encode(&resource)?,
                result,
                known: Some(known),
                items,
                effects,
            })
        }))
    }

    /// The next state and the result, from `state` and the items in hand.
    pub(crate) fn run(&mut self, state: &Value, in_hand: &InHand) -> Result<Changed, ToolError> {
        (self.0)(state, in_hand)
    }
}

impl fmt::Debug for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Transition")
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|error| {
        ToolError::new(
            crate::protocol::framework::code::INVALID_STATE,
            format!("cannot encode the state: {error}"),
        )
    })
}

/// The initial state of a resource being created: ready, or made by the tool's function.
///
/// A deferred creation is run by the store only after the operation-id ledger was consulted and
/// the operation id claimed, so a retry of a create that already happened never runs the
/// function again, and of concurrent creates with one id only one runs it.
pub struct Creation<'a>(pub(crate) Making<'a>);

pub(crate) enum Making<'a> {
    /// Known before the ledger is consulted: stored in the same atomic unit as the lookup.
    Ready(Value),
    /// Made only once the operation id is claimed.
    Deferred(Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'a>>),
}

impl<'a> Creation<'a> {
    /// A state that is already known.
    pub fn ready(state: Value) -> Self {
        Creation(Making::Ready(state))
    }

    /// A typed resource made by `make` (the function of a `creates` tool); its error becomes a
    /// rejection with its code.
    pub fn typed<R, E>(make: impl Future<Output = Result<R, E>> + Send + 'a) -> Self
    where
        R: Entity,
        E: IntoToolError,
    {
        Creation(Making::Deferred(Box::pin(async move {
            let resource = make.await.map_err(IntoToolError::into_tool_error)?;
            encode(&resource)
        })))
    }

    pub(crate) fn into_making(self) -> Making<'a> {
        self.0
    }
}

impl fmt::Debug for Creation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Creation")
    }
}

/// Creates a resource at version 1, owned by `principal`.
///
/// With an operation id (see [`CreateRequest::operation`]) the create is idempotent: the store
/// consults the ledger and claims the id before it makes the state, so a retry with the same id
/// and fingerprint is `replayed` (the same handle, the recorded version and the resource as it is
/// now) instead of minting a second resource, a retry while the first attempt still runs is
/// `OPERATION_IN_PROGRESS`, and the same id with another fingerprint is `OPERATION_ID_REUSED`.
#[derive(Debug)]
pub struct CreateRequest<'a> {
    /// The resource kind.
    pub kind: EntityKind,
    /// The owner; the ledger is keyed by it.
    pub principal: Principal,
    /// The idempotency key and the fingerprint of the request's payload.
    pub operation: Option<(String, Fingerprint)>,
    /// The initial state.
    pub initial: Creation<'a>,
}

impl<'a> CreateRequest<'a> {
    /// A request for a JSON state, without an operation id.
    pub fn new(kind: EntityKind, principal: Principal, state: Value) -> Self {
        CreateRequest::deferred(kind, principal, Creation::ready(state))
    }

    /// A request whose state is made by `initial` once the operation id is claimed.
    pub fn deferred(kind: EntityKind, principal: Principal, initial: Creation<'a>) -> Self {
        CreateRequest {
            kind,
            principal,
            operation: None,
            initial,
        }
    }

    /// A request for a typed resource, without an operation id.
    pub fn typed<R: Entity>(principal: Principal, resource: &R) -> Result<Self, StoreError> {
        Ok(CreateRequest::new(
            R::kind(),
            principal,
            serde_json::to_value(resource).map_err(|error| {
                StoreError::Corrupt(format!("cannot encode the state: {error}"))
            })?,
        ))
    }

    /// Sets the operation id and the fingerprint of the request's payload (see
    /// [`Fingerprint::of_call`]).
    pub fn operation(mut self, operation_id: impl Into<String>, fingerprint: Fingerprint) -> Self {
        self.operation = Some((operation_id.into(), fingerprint));
        self
    }
}

/// Reads the current state of a resource.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReadRequest {
    /// The resource kind.
    pub kind: EntityKind,
    /// The caller.
    pub principal: Principal,
    /// The handle the caller sent.
    pub handle: String,
    /// The version the caller last saw, to learn what changed since (revalidation without a
    /// write): the snapshot then carries [`Changes`](super::Changes).
    pub since: Option<u64>,
    /// `(collection, id)`: the page of that collection's items after that id, instead of its
    /// first page (the other collections give their first page).
    pub page_after: Option<(String, u64)>,
}

impl ReadRequest {
    /// A read of `handle` by `principal`.
    pub fn new(kind: EntityKind, principal: Principal, handle: impl Into<String>) -> Self {
        ReadRequest {
            kind,
            principal,
            handle: handle.into(),
            since: None,
            page_after: None,
        }
    }

    /// Also asks what changed in the entity's view since `version`.
    pub fn since(mut self, version: u64) -> Self {
        self.since = Some(version);
        self
    }
}

/// Everything the atomic boundary needs besides the transition.
#[derive(Debug, Clone)]
pub struct MutationRequest {
    /// The resource kind.
    pub kind: EntityKind,
    /// The caller; the handle must belong to it, and the ledger is keyed by it.
    pub principal: Principal,
    /// The handle the caller sent.
    pub handle: String,
    /// The version the caller based the change on; `None` for commutative operations that apply
    /// to whatever the current version is.
    pub expected_version: Option<u64>,
    /// The idempotency key and the fingerprint of the request's payload.
    pub operation: Option<(String, Fingerprint)>,
    /// What to do when `expected_version` is stale.
    pub policy: ConflictPolicy,
    /// Whoever decided the change confirmed it against `expected_version` after a `stale_view`
    /// that asked to reconfirm: a `stale_view` recorded for the operation id gives way to this
    /// attempt. An applied record never does, so the operation still applies at most once.
    pub reconfirmed: bool,
}

impl MutationRequest {
    /// A request with no precondition, no operation id and the `reject` policy.
    pub fn new(kind: EntityKind, principal: Principal, handle: impl Into<String>) -> Self {
        MutationRequest {
            kind,
            principal,
            handle: handle.into(),
            expected_version: None,
            operation: None,
            policy: ConflictPolicy::Reject,
            reconfirmed: false,
        }
    }

    /// Marks the change as confirmed against `expected_version` (see
    /// [`MutationRequest::reconfirmed`]).
    pub fn reconfirmed(mut self) -> Self {
        self.reconfirmed = true;
        self
    }

    /// Sets the version the change is based on.
    pub fn expect_version(mut self, version: u64) -> Self {
        self.expected_version = Some(version);
        self
    }

    /// Sets the operation id and the fingerprint of the request's payload (see
    /// [`Fingerprint::of_call`]).
    pub fn operation(mut self, operation_id: impl Into<String>, fingerprint: Fingerprint) -> Self {
        self.operation = Some((operation_id.into(), fingerprint));
        self
    }

    /// Sets the conflict policy.
    pub fn policy(mut self, policy: ConflictPolicy) -> Self {
        self.policy = policy;
        self
    }
}

/// What [`Store::prune`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Ledger records past their retention.
    pub ledger_records: u64,
    /// Resources that expired longer ago than the ledger retention, removed with their history.
    pub resources: u64,
    /// Effects delivered or failed longer ago than the ledger retention.
    pub effects: u64,
}

/// Settings shared by every store.
#[derive(Clone)]
pub struct StoreConfig {
    /// How long an operation id's outcome is kept for replay (default 24 hours).
    pub ledger_retention: Duration,
    /// How many versions of each resource are kept for deltas, the current one included
    /// (default 64, at least 1).
    pub history_limit: u64,
    /// The most ledger records one resource holds at once (default 10,000): a new operation id
    /// on a resource at the limit is refused with `LEDGER_FULL` (nothing applied, nothing
    /// recorded) until the sweep removes expired records. A record counts against the resource
    /// its outcome names, so one caller filling a resource's share does not block any other
    /// resource, even when every caller is the anonymous principal.
    pub ledger_quota: u64,
    /// How long a create's claim on its operation id lasts while the tool's function runs
    /// (default 30 s). A retry within it is `OPERATION_IN_PROGRESS`; after it (the first attempt's
    /// process died), the retry claims the id again and runs the function again.
    ///
    /// A create dropped before it finished (its client went away, a timeout), or whose last
    /// step failed, gives its claim up from a task on the tokio runtime it was dropped on (the
    /// memory store, when nobody holds the id's lock, at once). Dropped outside a tokio runtime,
    /// it has no task to do that, and its claim lasts this long; so does a claim whose giving up
    /// failed (the database busy or unreachable).
    pub creation_lease: Duration,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Test-only: skip the version comparison, which re-creates lost updates. Never set it outside
    /// tests that prove a concurrency test can fail.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub unchecked_versions_for_tests: bool,
}

impl StoreConfig {
    /// Whether the test-only switch that skips version comparisons is on.
    pub(crate) fn skips_version_checks(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        return self.unchecked_versions_for_tests;
        #[cfg(not(feature = "test-hooks"))]
        false
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            ledger_retention: Duration::from_secs(24 * 60 * 60),
            history_limit: 64,
            ledger_quota: 10_000,
            creation_lease: Duration::from_secs(30),
            clock: Arc::new(SystemClock),
            #[cfg(feature = "test-hooks")]
            unchecked_versions_for_tests: false,
        }
    }
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("ledger_retention", &self.ledger_retention)
            .field("history_limit", &self.history_limit)
            .field("ledger_quota", &self.ledger_quota)
            .field("creation_lease", &self.creation_lease)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// A versioned state store. Every method runs as one atomic unit.
///
/// # The storage model
///
/// Every store keeps the same things, so retained storage grows with what changes and not with
/// how large a resource is:
///
/// - **the current state, once**, with its version, owner, kind, lifecycle and expiry (rounded
///   up to a step of the time to live, see [`Entity::TTL`](crate::store::Entity::TTL), so a
///   store need not rewrite it, nor its index, on every change);
/// - **history as changes**: for each of the last `history_limit - 1` versions, the undo patch
///   that takes the state back to the version before (an array append is undone by a length, a
///   changed member by its old value), enough to rebuild any kept version and compute a
///   `stale_view` delta;
/// - **ledger records as summaries**: per (principal, operation id) the payload's fingerprint
///   and the outcome's summary ([`RecordedOutcome`](crate::store::RecordedOutcome): outcome, version, the tool's result, codes),
///   never a copy of the state. A replay answers with that summary and the resource as it is
///   now ([`Replayed::current`](crate::store::Replayed::current)), so its meaning does not change as the resource moves on.
///   `NOT_FOUND` is never recorded (random handles cost nothing), and each resource holds at
///   most [`StoreConfig::ledger_quota`] records.
///
/// A mutation still writes the whole new state, and decodes the current one unless the store
/// holds it decoded (SQLite keeps the states it decoded or committed, by version): CPU time and
/// write-ahead-log bytes per mutation stay proportional to the state; only what is retained is
/// not.
///
/// Outcomes show the entity's view of the state ([`Entity::VIEW`]), the whole state by default:
/// `applied.state`, `stale_view.current_state` and its delta (computed between the views, so it
/// never reveals what the view hides) and a replay's `current`. Rebase compares the stored
/// states themselves. Reads ([`Store::read`]) return the whole state: a `reads` tool's function
/// chooses what to show.
///
/// Reads never wait for writers, and expired records are swept off the request path.
///
/// # The mutation boundary
///
/// [`Store::mutate`] is the atomic boundary, in this order, all in one transaction: resolve
/// the handle; look up the operation-id ledger (a recorded outcome with the same fingerprint is
/// replayed before anything else is judged; another fingerprint is `OPERATION_ID_REUSED`); check
/// ownership and kind (`NOT_FOUND`), lifecycle (`TERMINAL`) and expiry (`EXPIRED`), and the
/// resource's ledger share (`LEDGER_FULL`); compare the version under the conflict policy
/// (`stale_view`, or a rebase); run the transition (a panic is `TRANSITION_PANICKED`, not
/// recorded, as is a panic of the entity's lifecycle or view in the boundary, except in a
/// replay, which still answers `replayed`, without its current view); write the new state, its
/// undo patch and the ledger record. A panic of the view in [`Store::read`] unwinds to its
/// caller.
///
/// A SQL engine implements it with one transaction that takes the write lock before reading
/// (`BEGIN IMMEDIATE` in SQLite, `SELECT ... FOR UPDATE` on the resource row and the ledger's
/// primary key in PostgreSQL).
///
/// # Tasks
///
/// A store also keeps the records of the Tasks extension ([`TaskStore`](crate::tasks::TaskStore)),
/// so a server's versioned state and its tasks live, and are shared by replicas, in one place.
pub trait Store: super::tasks::TaskStore + super::outbox::Outbox {
    /// Mints a handle and stores version 1: `applied` with the handle and the view. With an
    /// operation id it consults and claims the ledger before it makes the state (see
    /// [`CreateRequest`]): a recorded outcome with the same fingerprint is `replayed` (nothing
    /// is made or minted), another fingerprint is `OPERATION_ID_REUSED`, and of concurrent
    /// creates with one id exactly one makes and mints a resource.
    fn create<'a>(&'a self, request: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome>;

    /// Reads the current version (the whole state).
    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome>;

    /// Runs the atomic boundary around `transition`.
    fn mutate(
        &self,
        request: MutationRequest,
        transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome>;

    /// Runs one atomic step over several resources (see [`StepRequest`](super::StepRequest)):
    /// every resource locked, in one order every store keeps, and checked as a single change
    /// is; then the transition, every new version and one ledger record, all or nothing.
    fn mutate_step(
        &self,
        request: super::step::StepRequest,
        transition: super::step::StepTransition,
    ) -> StoreFuture<'_, super::step::StepOutcome>;

    /// Removes ledger records past their retention, and resources (with their history) that
    /// expired longer ago than the ledger retention: until then an expired handle still answers
    /// `EXPIRED`, afterwards `NOT_FOUND`. Stores also prune now and then on their own.
    fn prune(&self) -> StoreFuture<'_, PruneReport>;

    /// Whether other processes may share this store, or it outlives the process: then every
    /// process that serves it needs the same signing key, and the server does not build without
    /// one (see [`McpServerBuilder::signing_key`](crate::McpServerBuilder::signing_key)). False
    /// by default, for a store that lives in one process.
    fn shared_by_processes(&self) -> bool {
        false
    }
}

/// A shared store is a store: several servers (or a server and a maintenance task) can hold one.
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn create<'a>(&'a self, request: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome> {
        (**self).create(request)
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        (**self).read(request)
    }

    fn mutate(
        &self,
        request: MutationRequest,
        transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome> {
        (**self).mutate(request, transition)
    }

    fn mutate_step(
        &self,
        request: super::step::StepRequest,
        transition: super::step::StepTransition,
    ) -> StoreFuture<'_, super::step::StepOutcome> {
        (**self).mutate_step(request, transition)
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        (**self).prune()
    }

    fn shared_by_processes(&self) -> bool {
        (**self).shared_by_processes()
    }
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::MemoryStore;
    use crate::auth::Principal;
    use crate::store::{MutationOutcome, Store};

    #[derive(Clone, Serialize, Deserialize, JsonSchema)]
    struct Gauge {
        level: u32,
    }

    impl Entity for Gauge {
        const KIND: &'static str = "gauge";
        const PREFIX: &'static str = "gau";
        const VIEW: Option<fn(&Self) -> Value> = Some(|gauge| json!({ "shown": gauge.level }));

        fn lifecycle(&self) -> Lifecycle {
            if self.level >= 10 {
                Lifecycle::Terminal
            } else {
                Lifecycle::Active
            }
        }
    }

    fn fill() -> Transition {
        Transition::typed(|gauge: &mut Gauge| {
            gauge.level = 10;
            Ok::<_, ToolError>(gauge.level)
        })
    }

    async fn applied_after_fill(store: &MemoryStore, kind: EntityKind) -> (Value, Lifecycle) {
        let owner = Principal::subject("tester");
        let created = store
            .create(CreateRequest::new(
                kind,
                owner.clone(),
                json!({ "level": 1 }),
            ))
            .await
            .unwrap();
        let handle = created.applied().unwrap().handle.clone();
        let request = MutationRequest::new(kind, owner.clone(), &handle);
        let MutationOutcome::Applied(applied) = store.mutate(request, fill()).await.unwrap() else {
            panic!("the fill applies");
        };
        let read = store
            .read(ReadRequest::new(kind, owner, &handle))
            .await
            .unwrap();
        let crate::store::ReadOutcome::Current(current) = read else {
            panic!("the filled gauge reads");
        };
        let lifecycle = current.resumption.lifecycle;
        (Value::clone(&applied.state), lifecycle)
    }

    /// Decodes of a [`Dial`], counted: only the test below makes dials.
    static DIAL_DECODES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    #[derive(Clone, Serialize, JsonSchema)]
    struct Dial {
        level: u32,
    }

    impl<'de> Deserialize<'de> for Dial {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            #[derive(Deserialize)]
            struct Stored {
                level: u32,
            }
            DIAL_DECODES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Stored::deserialize(deserializer).map(|stored| Dial {
                level: stored.level,
            })
        }
    }

    impl Entity for Dial {
        const KIND: &'static str = "dial";
        const PREFIX: &'static str = "dia";
        const VIEW: Option<fn(&Self) -> Value> = Some(|dial| json!({ "shown": dial.level }));

        fn lifecycle(&self) -> Lifecycle {
            Lifecycle::Active
        }
    }

    /// A typed mutation decodes the stored state once, for the tool: the new state's lifecycle
    /// and view come from the value the tool changed, not from decoding it again.
    #[tokio::test]
    async fn a_typed_mutation_decodes_the_state_once() {
        let store = MemoryStore::default();
        let owner = Principal::subject("tester");
        let created = store
            .create(CreateRequest::new(
                Dial::kind(),
                owner.clone(),
                json!({ "level": 1 }),
            ))
            .await
            .unwrap();
        let handle = created.applied().unwrap().handle.clone();
        DIAL_DECODES.store(0, std::sync::atomic::Ordering::SeqCst);
        let turn = Transition::typed(|dial: &mut Dial| {
            dial.level += 1;
            Ok::<_, ToolError>(())
        });
        let request = MutationRequest::new(Dial::kind(), owner, &handle);
        let MutationOutcome::Applied(applied) = store.mutate(request, turn).await.unwrap() else {
            panic!("the turn applies");
        };
        assert_eq!(*applied.state, json!({ "shown": 2 }));
        assert_eq!(DIAL_DECODES.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A typed transition's outcome shows its type's view and records its type's lifecycle,
    /// read off the changed resource; for a request of another kind, that kind's own apply.
    #[tokio::test]
    async fn a_typed_transition_brings_its_view_and_lifecycle_for_its_own_kind_only() {
        let store = MemoryStore::default();
        let (shown, lifecycle) = applied_after_fill(&store, Gauge::kind()).await;
        assert_eq!(shown, json!({ "shown": 10 }));
        assert_eq!(lifecycle, Lifecycle::Terminal);

        let meter = EntityKind::new("meter", "gau");
        let (shown, lifecycle) = applied_after_fill(&store, meter).await;
        assert_eq!(shown, json!({ "level": 10 }));
        assert_eq!(lifecycle, Lifecycle::Active);
    }
}
