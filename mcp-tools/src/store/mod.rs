//! Versioned state for tools that keep it: handles, the atomic mutation boundary, typed outcomes
//! and the stores behind them.
//!
//! A tool that changes a resource sends the store a [`MutationRequest`] (handle, principal,
//! `expected_version`, `operation_id` with the payload's [`Fingerprint`], conflict policy) and a
//! synchronous [`Transition`]. The store resolves the handle, consults the operation-id ledger,
//! checks ownership, lifecycle, expiry and version, runs the transition and writes the new
//! version, its history and the ledger record, all in one atomic unit, and answers with a
//! [`MutationOutcome`]: `applied`, `stale_view` (with a field-level delta), `rejected` with a code,
//! or `replayed`.
//!
//! ```
//! use mcp_tools::MemoryStore;
//! use mcp_tools::auth::Principal;
//! use mcp_tools::store::{
//!     CreateRequest, Entity, Fingerprint, MutationOutcome, MutationRequest, Store, Transition,
//! };
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Serialize, Deserialize, JsonSchema)]
//! struct Basket { memory_gib: u32, storage_gib: u32 }
//!
//! impl Entity for Basket {
//!     const KIND: &'static str = "basket";
//!     const PREFIX: &'static str = "bsk";
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::default();
//! let alice = Principal::subject("alice");
//! let basket = Basket { memory_gib: 16, storage_gib: 512 };
//! let request = CreateRequest::typed(alice.clone(), &basket)?
//!     .operation("op-0", Fingerprint::of_call("basket_create", &serde_json::json!({})));
//! let outcome = store.create(request).await?;
//! let created = outcome.applied().expect("a new basket");
//!
//! let arguments = serde_json::json!({ "basket_id": created.handle, "gigabytes": 32 });
//! let request = MutationRequest::new(Basket::kind(), alice, &created.handle)
//!     .expect_version(created.version)
//!     .operation("op-1", Fingerprint::of_call("basket_upgrade_memory", &arguments));
//! let transition = Transition::typed(|basket: &mut Basket| {
//!     basket.memory_gib = 32;
//!     Ok::<_, String>(basket.memory_gib)
//! });
//! let outcome = store.mutate(request, transition).await?;
//! assert!(matches!(outcome, MutationOutcome::Applied(ref applied) if applied.version == 2));
//! let result = outcome.into_call_tool_result(); // structuredContent + text for the model
//! # assert!(!result.is_error);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod api;
mod boundary;
pub(crate) mod clock;
pub(crate) mod collection;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod columns;
mod delta;
mod depth;
pub(crate) mod entity;
mod error;
pub(crate) mod fingerprint;
mod handle;
mod history;
pub(crate) mod memory;
pub(crate) mod outbox;
mod outcome;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
mod step;
mod sweeper;
pub(crate) mod tasks;

pub use api::{
    ConflictPolicy, CreateRequest, Creation, MutationRequest, PruneReport, ReadRequest, Store,
    StoreConfig, Transition,
};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use clock::format_rfc3339;
pub use clock::{Clock, ManualClock, SystemClock};
pub use collection::Collection;
pub use delta::FieldChange;
pub use depth::MAX_DEPTH;
pub use entity::{Entity, EntityKind, Lifecycle, ViewType};
pub use error::{StoreError, StoreFuture};
pub use fingerprint::Fingerprint;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use handle::mint_handle;
pub use mcp_tools_derive::Entity;
pub use outbox::{
    Claim, ClaimedEffect, EffectState, EffectStatus, EffectTicket, Outbox, Settlement,
};
pub use outcome::{
    Applied, Changes, MutationOutcome, PartVersion, ReadOutcome, RecordedApplied, RecordedOutcome,
    RecordedStaleView, RecordedStep, Rejected, Replayed, Resumption, Snapshot, StaleView,
};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, TimeSource};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, Synchronous};
pub use step::{
    AppliedPart, AppliedStep, MovedPart, ReplayedStep, StaleStep, StepOutcome, StepPart,
    StepRequest, StepTransition,
};
