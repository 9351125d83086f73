//! The store trait and the requests it serves.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::clock::{Clock, SystemClock};
use super::entity::{Entity, EntityKind};
use super::fingerprint::Fingerprint;
use super::outcome::{MutationOutcome, ReadOutcome};
use crate::context::Principal;
use crate::tools::content::{IntoToolError, ToolError};

/// The future every store method returns; boxed so stores can sit behind `Arc<dyn Store>`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A failure of the storage itself, not a product outcome: nothing is recorded in the ledger, so
/// the caller may retry with the same operation id.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The storage engine failed.
    #[error("storage failed: {0}")]
    Backend(String),
    /// Stored data could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The worker running the boundary panicked or was cancelled.
    #[error("store task failed: {0}")]
    Task(String),
}

impl IntoToolError for StoreError {
    fn into_tool_error(self) -> ToolError {
        ToolError::new(
            "STORE_UNAVAILABLE",
            "The state store is temporarily unavailable; retry the same request with the same operation_id.",
        )
    }
}

/// What to do when the caller's `expected_version` is older than the resource.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ConflictPolicy {
    /// Any intervening change gives `stale_view` with recovery `refresh_and_replan`.
    #[default]
    Reject,
    /// If no intervening change touched these top-level fields, re-run the transition on the
    /// current state (`applied` with `rebased_from`); otherwise `stale_view`.
    Rebase {
        /// Top-level fields of the resource the transition reads or writes.
        touches: Vec<String>,
    },
    /// Consequential change: any intervening change gives `stale_view` with recovery `reconfirm`.
    Reconfirm,
}

/// The synchronous state transition of a mutating tool: changes the state in place and returns
/// the tool's result. It runs inside the store's atomic boundary (inside the SQL transaction), so
/// it must not block on I/O; it may run on a worker thread, and its changes are discarded when it
/// fails.
pub struct Transition(Box<TransitionFn>);

type TransitionFn = dyn FnMut(&mut Value) -> Result<Value, ToolError> + Send;

impl Transition {
    /// A transition over the JSON state.
    pub fn new(f: impl FnMut(&mut Value) -> Result<Value, ToolError> + Send + 'static) -> Self {
        Transition(Box::new(f))
    }

    /// A transition over the typed resource: the state is decoded into `R`, changed, and encoded
    /// back; the returned `T` becomes the result and an error `E` becomes a rejection with its code.
    pub fn typed<R, T, E>(mut f: impl FnMut(&mut R) -> Result<T, E> + Send + 'static) -> Self
    where
        R: Entity,
        T: Serialize,
        E: IntoToolError,
    {
        Transition::new(move |state: &mut Value| {
            let mut resource = R::deserialize(&*state).map_err(|error| {
                ToolError::new(
                    "INVALID_STATE",
                    format!("stored {} is unreadable: {error}", R::KIND),
                )
            })?;
            let result = f(&mut resource).map_err(IntoToolError::into_tool_error)?;
            *state = encode(&resource)?;
            encode(&result)
        })
    }

    pub(crate) fn run(&mut self, state: &mut Value) -> Result<Value, ToolError> {
        (self.0)(state)
    }
}

impl fmt::Debug for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Transition")
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|error| {
        ToolError::new("INVALID_STATE", format!("cannot encode the state: {error}"))
    })
}

/// Creates a resource at version 1, owned by `principal`.
///
/// With an operation id (see [`CreateRequest::operation`]) the create is idempotent: it runs in
/// the same atomic boundary as a mutation, so a retry with the same id and fingerprint is
/// `replayed` with the recorded outcome (the same handle and its version-1 state) instead of
/// minting a second resource, and the same id with another fingerprint is `OPERATION_ID_REUSED`.
#[derive(Debug, Clone)]
pub struct CreateRequest {
    /// The resource kind.
    pub kind: EntityKind,
    /// The owner; the ledger is keyed by it.
    pub principal: Principal,
    /// The initial state.
    pub state: Value,
    /// The idempotency key and the fingerprint of the request's payload.
    pub operation: Option<(String, Fingerprint)>,
}

impl CreateRequest {
    /// A request for a JSON state, without an operation id.
    pub fn new(kind: EntityKind, principal: Principal, state: Value) -> Self {
        CreateRequest {
            kind,
            principal,
            state,
            operation: None,
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
pub struct ReadRequest {
    /// The resource kind.
    pub kind: EntityKind,
    /// The caller.
    pub principal: Principal,
    /// The handle the caller sent.
    pub handle: String,
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
        }
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
}

/// Settings shared by every store.
#[derive(Clone)]
pub struct StoreConfig {
    /// How long an operation id's outcome is kept for replay (default 24 hours).
    pub ledger_retention: Duration,
    /// How many versions of each resource are kept for deltas, the current one included
    /// (default 64, at least 1).
    pub history_limit: u64,
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
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// A versioned state store. Every method runs as one atomic unit.
///
/// [`Store::mutate`] is the atomic boundary, in this order, all in one transaction: resolve
/// the handle; look up the operation-id ledger (a recorded outcome with the same fingerprint is
/// replayed before anything else is judged; another fingerprint is `OPERATION_ID_REUSED`); check
/// ownership and kind (`NOT_FOUND`), lifecycle (`TERMINAL`) and expiry (`EXPIRED`); compare the
/// version under the conflict policy (`stale_view`, or a rebase); run the transition; write the
/// new version, its history and the ledger record.
///
/// A SQL engine implements it with one transaction that takes the write lock before reading
/// (`BEGIN IMMEDIATE` in SQLite, `SELECT ... FOR UPDATE` on the resource row and the ledger's
/// primary key in PostgreSQL).
pub trait Store: Send + Sync + 'static {
    /// Mints a handle and stores version 1: `applied` with the handle and the state. With an
    /// operation id it runs the ledger part of the atomic boundary too: a recorded outcome with
    /// the same fingerprint is `replayed` (nothing is minted), another fingerprint is
    /// `OPERATION_ID_REUSED`, and of concurrent creates with one id exactly one mints a resource.
    fn create(&self, request: CreateRequest) -> StoreFuture<'_, MutationOutcome>;

    /// Reads the current version.
    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome>;

    /// Runs the atomic boundary around `transition`.
    fn mutate(
        &self,
        request: MutationRequest,
        transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome>;

    /// Removes ledger records past their retention, and resources (with their history) that
    /// expired longer ago than the ledger retention: until then an expired handle still answers
    /// `EXPIRED`, afterwards `NOT_FOUND`. Stores also prune now and then on their own.
    fn prune(&self) -> StoreFuture<'_, PruneReport>;
}

/// A shared store is a store: several servers (or a server and a maintenance task) can hold one.
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn create(&self, request: CreateRequest) -> StoreFuture<'_, MutationOutcome> {
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

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        (**self).prune()
    }
}
