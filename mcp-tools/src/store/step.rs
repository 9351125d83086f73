//! Transitions over several resources: one atomic step that changes two or more entities (of
//! one kind or of several), each with its own expected version, all or nothing.
//!
//! A [`StepRequest`] names the resources ([`StepPart`]s, in the order the transition takes
//! them), the caller and the operation id; a [`StepTransition`] changes them together. The store
//! locks every resource in one order (memory: the resources' turns by handle; SQLite: its one
//! writer; PostgreSQL: the advisory locks sorted by key, taken in the opening round trip), so two
//! steps over the same resources never wait for each other in a circle. It then checks each
//! part as a single change is checked (owner and kind, lifecycle, expiry, version), runs the
//! transition, and writes every resource's new version and one ledger record for the whole
//! step. The answer is a [`StepOutcome`]: `applied` with every resource's new version,
//! `stale_view` naming each resource that moved since its expected version with its delta, a
//! rejection, or a replay.

use std::fmt;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::collection::InHand;
use super::delta::FieldChange;
use super::entity::{Entity, EntityKind};
use super::fingerprint::Fingerprint;
use super::outcome::{PartVersion, RecordedStep, Rejected, Resumption, Snapshot};
use crate::auth::Principal;
use crate::protocol::framework::code;
use crate::protocol::recovery::Recovery;
use crate::protocol::tool_error::{IntoToolError, ToolError};
use crate::store::collection::ItemWrite;

/// One resource of a step.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StepPart {
    /// The resource kind.
    pub kind: EntityKind,
    /// The handle the caller sent.
    pub handle: String,
    /// The version the caller based the change on; `None` when the step commutes with every
    /// change of this resource.
    pub expected_version: Option<u64>,
}

impl StepPart {
    /// The resource `handle` of `kind`, without a precondition.
    pub fn new(kind: EntityKind, handle: impl Into<String>) -> Self {
        StepPart {
            kind,
            handle: handle.into(),
            expected_version: None,
        }
    }

    /// Sets the version the change of this resource is based on.
    pub fn expect_version(mut self, version: u64) -> Self {
        self.expected_version = Some(version);
        self
    }
}

/// A change of several resources in one atomic step.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StepRequest {
    /// The caller: every resource must belong to it, and the ledger is keyed by it.
    pub principal: Principal,
    /// The resources, in the order the transition takes them; two at least, each once.
    pub parts: Vec<StepPart>,
    /// The idempotency key and the fingerprint of the request's payload.
    pub operation: Option<(String, Fingerprint)>,
}

impl StepRequest {
    /// A step over `parts` by `principal`, without an operation id.
    pub fn new(principal: Principal, parts: Vec<StepPart>) -> Self {
        StepRequest {
            principal,
            parts,
            operation: None,
        }
    }

    /// Sets the operation id and the fingerprint of the request's payload.
    pub fn operation(mut self, operation_id: impl Into<String>, fingerprint: Fingerprint) -> Self {
        self.operation = Some((operation_id.into(), fingerprint));
        self
    }
}

/// What a step's transition made of its resources.
pub(crate) struct StepChanged {
    /// Each resource's next state, in the parts' order.
    pub(crate) states: Vec<Value>,
    /// Each resource's collection item writes, in the parts' order.
    pub(crate) items: Vec<Vec<ItemWrite>>,
    /// The tool's result.
    pub(crate) result: Value,
}

type StepFn = dyn FnMut(&[&Value], &[InHand]) -> Result<StepChanged, ToolError> + Send;

/// The synchronous transition of a step: changes every resource in place and returns the tool's
/// result. Like a [`Transition`](super::Transition) it runs inside the store's atomic unit,
/// must not block on I/O, may run more than once (with more collection items in hand), and its
/// changes are discarded when it fails.
pub struct StepTransition(Box<StepFn>);

impl StepTransition {
    pub(crate) fn run(
        &mut self,
        states: &[&Value],
        in_hand: &[InHand],
    ) -> Result<StepChanged, ToolError> {
        (self.0)(states, in_hand)
    }
}

impl fmt::Debug for StepTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StepTransition")
    }
}

/// Decodes a stored state as `R`, its collections holding the items in hand (and noting the
/// ones a transition asks for and was not handed).
pub(crate) fn decode<R: Entity>(state: &Value, in_hand: &InHand) -> Result<R, ToolError> {
    let unreadable = |error: &dyn fmt::Display| {
        ToolError::new(
            code::INVALID_STATE,
            format!("stored {} is unreadable: {error}", R::KIND),
        )
    };
    let mut resource = R::deserialize(state).map_err(|error| unreadable(&error))?;
    for field in R::COLLECTIONS {
        if let Some(collection) = resource.collection(field) {
            collection
                .hand(
                    in_hand.items(field),
                    in_hand.misses.as_ref().map(|log| (log, *field)),
                )
                .map_err(|error| unreadable(&error))?;
        }
    }
    Ok(resource)
}

/// The item writes of a changed resource's collections, taken: what the store writes one by
/// one, and what its document no longer carries.
pub(crate) fn take_item_writes<R: Entity>(resource: &mut R) -> Result<Vec<ItemWrite>, ToolError> {
    let mut items = Vec::new();
    for field in R::COLLECTIONS {
        if let Some(collection) = resource.collection(field) {
            items.extend(collection.take_writes(field).map_err(|error| {
                ToolError::new(
                    code::INVALID_STATE,
                    format!("cannot encode the {field} of the state: {error}"),
                )
            })?);
        }
    }
    Ok(items)
}

/// Encodes a changed resource: its state and its collections' item writes.
fn encode<R: Entity>(mut resource: R) -> Result<(Value, Vec<ItemWrite>), ToolError> {
    let items = take_item_writes(&mut resource)?;
    let state = serde_json::to_value(&resource).map_err(|error| {
        ToolError::new(
            code::INVALID_STATE,
            format!("cannot encode the state: {error}"),
        )
    })?;
    Ok((state, items))
}

fn encode_result<T: Serialize>(result: &T) -> Result<Value, ToolError> {
    serde_json::to_value(result).map_err(|error| {
        ToolError::new(
            code::INVALID_STATE,
            format!("cannot encode the result: {error}"),
        )
    })
}

macro_rules! typed_step {
    ($(#[$doc:meta])* $name:ident, $($resource:ident $index:tt),+) => {
        $(#[$doc])*
        pub fn $name<$($resource,)+ T, E>(
            mut f: impl FnMut($(&mut $resource),+) -> Result<T, E> + Send + 'static,
        ) -> Self
        where
            $($resource: Entity,)+
            T: Serialize,
            E: IntoToolError,
        {
            StepTransition(Box::new(move |states: &[&Value], in_hand: &[InHand]| {
                let count = [$($index),+].len();
                if states.len() != count || in_hand.len() != count {
                    return Err(ToolError::new(
                        code::INVALID_STATE,
                        format!("a step over {count} resources was given {}", states.len()),
                    ));
                }
                let mut resources = ($(decode::<$resource>(states[$index], &in_hand[$index])?,)+);
                let result = f($(&mut resources.$index),+).map_err(IntoToolError::into_tool_error)?;
                let result = encode_result(&result)?;
                let mut next = Vec::with_capacity(count);
                let mut items = Vec::with_capacity(count);
                $(
                    let (state, writes) = encode(resources.$index)?;
                    next.push(state);
                    items.push(writes);
                )+
                Ok(StepChanged { states: next, items, result })
            }))
        }
    };
}

impl StepTransition {
    typed_step!(
        /// A step over two typed resources, in the parts' order: each is decoded from its
        /// stored state, changed, and encoded back; the returned `T` becomes the result and an
        /// error `E` a rejection with its code, and nothing is written.
        typed2, A 0, B 1
    );
    typed_step!(
        /// A step over three typed resources (see [`StepTransition::typed2`]).
        typed3, A 0, B 1, C 2
    );
    typed_step!(
        /// A step over four typed resources (see [`StepTransition::typed2`]).
        typed4, A 0, B 1, C 2, D 3
    );
}

/// One resource of an applied step, at its new version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppliedPart {
    /// The resource handle.
    pub handle: String,
    /// Its new version.
    pub version: u64,
    /// The entity's view of its state at the new version.
    pub state: Arc<Value>,
    /// Where to resume from.
    pub resumption: Resumption,
}

/// A step that was committed: every resource at its new version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppliedStep {
    /// The resources, in the order the tool takes them.
    pub resources: Vec<AppliedPart>,
    /// What the tool returned.
    pub result: Value,
}

/// A resource that moved after the version a step was based on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MovedPart {
    /// The resource handle.
    pub handle: String,
    /// The version the caller based the step on.
    pub expected_version: u64,
    /// The version it is at now.
    pub current_version: u64,
    /// Whether `delta` is known; `false` once the expected version's history was pruned.
    pub delta_available: bool,
    /// What changed in the entity's view between the expected version and now.
    pub delta: Vec<FieldChange>,
    /// The entity's view of its state now.
    pub current_state: Arc<Value>,
    /// Where to resume from (its current version).
    pub resumption: Resumption,
}

/// A step refused because resources moved after the versions it was based on (`isError:
/// true`); nothing changed, on any resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StaleStep {
    /// Always `STALE_VIEW`.
    pub code: String,
    /// Always `refresh_and_replan`.
    pub recovery: Recovery,
    /// Each resource that moved, in the order the tool takes them; the others did not.
    pub moved: Vec<MovedPart>,
}

/// The answer to a repeat of an earlier step with the same operation id and payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplayedStep {
    /// The operation id.
    pub operation_id: String,
    /// When the original outcome was recorded (RFC 3339, UTC).
    pub recorded_at: String,
    /// The original outcome, as recorded.
    pub original: RecordedStep,
    /// Each resource the step named, as it is now (those still available to the caller).
    pub current: Vec<Snapshot>,
}

/// The outcome of a step: the `structuredContent` of a tool that changes several resources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepOutcome {
    /// Every resource changed.
    Applied(AppliedStep),
    /// Some resources moved since the versions the step was based on; nothing changed.
    StaleView(StaleStep),
    /// Refused with a code; nothing changed.
    Rejected(Rejected),
    /// A repeat of an earlier step; nothing changed this time.
    Replayed(ReplayedStep),
}

impl StepOutcome {
    /// Whether the result is an error for the model: everything but `applied`, and a replay of
    /// anything but `applied`.
    pub fn is_error(&self) -> bool {
        match self {
            StepOutcome::Applied(_) => false,
            StepOutcome::Replayed(replayed) => {
                !matches!(replayed.original, RecordedStep::Applied { .. })
            }
            _ => true,
        }
    }

    /// The error code, if the outcome is an error.
    pub fn code(&self) -> Option<&str> {
        match self {
            StepOutcome::Applied(_) => None,
            StepOutcome::StaleView(stale) => Some(&stale.code),
            StepOutcome::Rejected(rejected) => Some(&rejected.code),
            StepOutcome::Replayed(replayed) => match &replayed.original {
                RecordedStep::Applied { .. } => None,
                RecordedStep::StaleView { code, .. } => Some(code),
                RecordedStep::Rejected(rejected) => Some(&rejected.code),
            },
        }
    }

    /// The summary the ledger keeps.
    pub(crate) fn recorded(&self) -> Option<RecordedStep> {
        Some(match self {
            StepOutcome::Applied(applied) => RecordedStep::Applied {
                resources: applied
                    .resources
                    .iter()
                    .map(|part| PartVersion {
                        handle: part.handle.clone(),
                        version: part.version,
                    })
                    .collect(),
                result: applied.result.clone(),
            },
            StepOutcome::StaleView(stale) => RecordedStep::StaleView {
                code: stale.code.clone(),
                moved: stale
                    .moved
                    .iter()
                    .map(|part| PartVersion {
                        handle: part.handle.clone(),
                        version: part.current_version,
                    })
                    .collect(),
            },
            StepOutcome::Rejected(rejected) => RecordedStep::Rejected(rejected.clone()),
            StepOutcome::Replayed(_) => return None,
        })
    }

    /// A short text for the model.
    pub fn text(&self) -> String {
        let handles = |parts: &mut dyn Iterator<Item = (&str, u64)>| {
            parts
                .map(|(handle, version)| format!("{handle} at version {version}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            StepOutcome::Applied(applied) => format!(
                "Applied, to every resource at once: {}.",
                handles(
                    &mut applied
                        .resources
                        .iter()
                        .map(|part| (part.handle.as_str(), part.version))
                )
            ),
            StepOutcome::StaleView(stale) => {
                let moved: Vec<String> = stale
                    .moved
                    .iter()
                    .map(|part| {
                        let paths: Vec<&str> = part
                            .delta
                            .iter()
                            .map(|change| change.path.as_str())
                            .collect();
                        let changed = if part.delta_available {
                            format!(" (changed: {})", paths.join(", "))
                        } else {
                            String::new()
                        };
                        format!(
                            "{} moved from version {} to {}{changed}",
                            part.handle, part.expected_version, part.current_version
                        )
                    })
                    .collect();
                format!(
                    "Not applied, to any resource: {}. Re-plan from their current states and \
                     retry with their current versions and a new operation_id.",
                    moved.join("; ")
                )
            }
            StepOutcome::Rejected(rejected) => rejected.message.clone(),
            StepOutcome::Replayed(replayed) => format!(
                "Already done: this repeats operation {} recorded at {}; nothing was changed again.",
                replayed.operation_id, replayed.recorded_at
            ),
        }
    }

    /// The JSON Schema (2020-12) of this union, for a tool's `outputSchema`.
    pub fn json_schema() -> Value {
        crate::protocol::schema_generator()
            .into_root_schema_for::<StepOutcome>()
            .to_value()
    }
}
