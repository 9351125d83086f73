//! Typed outcomes of the state boundary, serialized as MCP `structuredContent`.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::delta::FieldChange;
use super::entity::Lifecycle;
use super::outbox::{EffectStatus, EffectTicket};
use crate::protocol::recovery::Recovery;
use crate::protocol::tool_error::ToolError;

use crate::protocol::framework::code;

/// Where to resume from: enough to continue after a context compaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resumption {
    /// The resource handle to pass on later calls.
    pub handle: String,
    /// The version this result describes; pass it as `expected_version` on the next change.
    pub basis_version: u64,
    /// The lifecycle state at that version.
    pub lifecycle: Lifecycle,
    /// When the handle expires (RFC 3339, UTC), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// An opaque, server-issued token for exactly this version of this resource: pass it as
    /// `expected_version` (or in the request's `_meta` under `io.github.mcp-tools/validator`)
    /// instead of the number. Set by servers; a store used on its own leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
}

/// A transition that was committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Applied {
    /// The resource handle.
    pub handle: String,
    /// The new version.
    pub version: u64,
    /// The entity's view of the state at the new version (the whole state unless the entity
    /// declares a view).
    // Shared with the store where it can be: the doc comment above is the published schema's.
    pub state: Arc<Value>,
    /// What the tool returned.
    pub result: Value,
    /// Set when the change was re-applied on a newer version than the caller saw, because no
    /// intervening change touched the fields it works on: the version the caller expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebased_from: Option<u64>,
    /// Where to resume from.
    pub resumption: Resumption,
    /// The effects the change emitted, to be delivered now that it is committed (each starts
    /// `pending`; a read of the resource reports how each delivery went).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<EffectTicket>,
}

/// A transition refused because the caller's view is out of date (`isError: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StaleView {
    /// Always `STALE_VIEW`.
    pub code: String,
    /// The resource handle.
    pub handle: String,
    /// The version the caller based the change on.
    pub expected_version: u64,
    /// The version the resource is at now.
    pub current_version: u64,
    /// `refresh_and_replan`, or `reconfirm` for consequential changes.
    pub recovery: Recovery,
    /// Whether `delta` is known; `false` once the expected version's history was pruned.
    pub delta_available: bool,
    /// What changed in the entity's view between the expected version and now.
    pub delta: Vec<FieldChange>,
    /// The entity's view of the state now.
    pub current_state: Arc<Value>,
    /// Where to resume from (the current version).
    pub resumption: Resumption,
    /// For a change that must be reconfirmed: a server-issued confirmation of this very request
    /// against `current_version`. Once whoever decided the change confirms it, send the same
    /// request again (same arguments, same `operation_id`) with this value in `_meta` under
    /// `io.github.mcp-tools/confirmation`: it applies only if the resource is still at
    /// `current_version`. Set by servers; it expires after 15 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<String>,
}

/// A transition refused with a code (`isError: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Rejected {
    /// `OPERATION_ID_REUSED`, `TERMINAL`, `EXPIRED`, `NOT_FOUND` or the tool's own domain code.
    pub code: String,
    /// What happened, for the model.
    pub message: String,
    /// What to do next, when the code implies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
    /// Structured details of a domain error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl Rejected {
    /// The single answer for an unknown handle and for another principal's handle.
    pub fn not_found(kind: &str) -> Self {
        Rejected {
            code: code::NOT_FOUND.into(),
            message: format!(
                "No {kind} with this handle is available to you. Check the handle you passed, or create a new {kind}."
            ),
            recovery: Some(Recovery::Stop),
            details: None,
        }
    }

    /// The resource is terminal.
    pub fn terminal(kind: &str, handle: &str) -> Self {
        Rejected {
            code: code::TERMINAL.into(),
            message: format!("The {kind} {handle} is finished and accepts no further changes."),
            recovery: Some(Recovery::Stop),
            details: None,
        }
    }

    /// The resource outlived its time to live.
    pub fn expired(kind: &str, handle: &str, expired_at: &str) -> Self {
        Rejected {
            code: code::EXPIRED.into(),
            message: format!(
                "The {kind} {handle} expired at {expired_at}. Create a new {kind} to continue."
            ),
            recovery: Some(Recovery::CreateNew),
            details: Some(serde_json::json!({ "expired_at": expired_at })),
        }
    }

    /// An operation id sent again with a different payload.
    pub fn operation_id_reused(operation_id: &str) -> Self {
        Rejected {
            code: code::OPERATION_ID_REUSED.into(),
            message: format!(
                "The operation_id {operation_id:?} was already used for a different request. Use a new operation_id for a new change."
            ),
            recovery: Some(Recovery::NewOperationId),
            details: None,
        }
    }

    /// An operation id another anonymous caller could guess.
    pub fn guessable_operation_id(operation_id: &str) -> Self {
        Rejected {
            code: code::GUESSABLE_OPERATION_ID.into(),
            message: format!(
                "The operation_id {operation_id:?} could be guessed, and callers here are not authenticated, so they share one record of operations; nothing was done. Send a new UUID (v4) you generate, such as 3f2c8a4e-9b1d-4c6f-8e2a-7d5b0c1e9f43, or at least 22 URL-safe random characters."
            ),
            recovery: Some(Recovery::NewOperationId),
            details: None,
        }
    }

    /// An earlier request with this operation id is still running.
    pub fn operation_in_progress(operation_id: &str) -> Self {
        Rejected {
            code: code::OPERATION_IN_PROGRESS.into(),
            message: format!(
                "An earlier request with the operation_id {operation_id:?} is still running. Send the same request again in a few seconds, with the same operation_id, to get its outcome."
            ),
            recovery: Some(Recovery::RetryLater),
            details: None,
        }
    }

    /// The resource's share of the ledger is full.
    pub fn ledger_full(kind: &str, handle: &str, limit: u64) -> Self {
        Rejected {
            code: code::LEDGER_FULL.into(),
            message: format!(
                "The {kind} {handle} already holds {limit} recorded operations, the most it keeps at once; nothing was changed. Retry later, with the same operation_id, once older records expire."
            ),
            recovery: Some(Recovery::RetryLater),
            details: Some(serde_json::json!({ "limit": limit })),
        }
    }

    /// The tool's own code (its transition, or the entity's lifecycle or view) panicked while the
    /// store ran it.
    pub fn panicked(kind: &str) -> Self {
        Rejected {
            code: code::TRANSITION_PANICKED.into(),
            message: format!(
                "The tool failed with an internal error on the {kind}; nothing was changed. Retrying will fail the same way: report it to the server's operator."
            ),
            recovery: Some(Recovery::Stop),
            details: None,
        }
    }

    /// The transition reached collection items one at a time more often than a store fetches
    /// them for it (each round fetches what the last run asked for).
    pub fn too_many_item_rounds(kind: &str, rounds: usize) -> Self {
        Rejected {
            code: code::INVALID_STATE.into(),
            message: format!(
                "The tool reached the items of a {kind} one after another more than {rounds} times, each found through the one before; nothing was changed. The same call will fail the same way: report it to the server's operator."
            ),
            recovery: Some(Recovery::Stop),
            details: None,
        }
    }

    /// The tool made a state, a result or an error's details nested deeper than
    /// [`MAX_DEPTH`](super::MAX_DEPTH) levels, more than a store keeps.
    pub fn too_deep(kind: &str) -> Self {
        Rejected {
            code: code::INVALID_STATE.into(),
            message: format!(
                "The tool made a {kind} state, a result, an effect or an error's details that nest arrays and objects more than {} levels deep, more than the store keeps; nothing was changed. The same call will fail the same way: report it to the server's operator.",
                super::MAX_DEPTH
            ),
            recovery: Some(Recovery::Stop),
            details: None,
        }
    }

    /// An `expected_version` the resource never reached: a number that was not read.
    pub fn future_version(kind: &str, handle: &str, expected: u64, current: u64) -> Self {
        Rejected {
            code: code::FUTURE_VERSION.into(),
            message: format!(
                "The {kind} {handle} is at version {current} and never was at version {expected}; nothing was changed. Read the {kind} first and pass the version the read returns as expected_version."
            ),
            recovery: Some(Recovery::RefreshAndReplan),
            details: Some(serde_json::json!({ "current_version": current })),
        }
    }

    /// A validator that does not open for this resource: forged, altered, cut short, issued for
    /// another resource or under a key this server no longer holds.
    pub fn invalid_validator(kind: &str, handle: &str) -> Self {
        Rejected {
            code: code::INVALID_VALIDATOR.into(),
            message: format!(
                "The validator you sent was not issued for the {kind} {handle}; nothing was changed. Read the {kind} again and pass the `resumption.validator` (or `resumption.basis_version`) of that result."
            ),
            recovery: Some(Recovery::RefreshAndReplan),
            details: None,
        }
    }

    /// The change was not confirmed against the current state.
    pub fn not_confirmed(kind: &str, handle: &str) -> Self {
        Rejected {
            code: code::NOT_CONFIRMED.into(),
            message: format!(
                "The change to the {kind} {handle} was not confirmed against its current state, so nothing was changed."
            ),
            recovery: Some(Recovery::Stop),
            details: None,
        }
    }

    /// A confirmation that does not open for this request.
    pub fn invalid_confirmation(kind: &str, handle: &str) -> Self {
        Rejected {
            code: code::INVALID_CONFIRMATION.into(),
            message: format!(
                "The confirmation you sent was not issued for this request on the {kind} {handle}, or it expired; nothing was changed. Send the request again without it to get the current state and a new confirmation."
            ),
            recovery: Some(Recovery::Reconfirm),
            details: None,
        }
    }

    /// What the model reads: the message, and for the tool's own codes the hint as a sentence
    /// (the framework's messages already say what to do).
    fn text(&self) -> String {
        match &self.recovery {
            Some(recovery) if !code::is_framework(&self.code) => {
                let message = self.message.trim_end();
                let stop = if message.ends_with(['.', '!', '?']) {
                    ""
                } else {
                    "."
                };
                format!("{message}{stop} {}", recovery.instruction())
            }
            _ => self.message.clone(),
        }
    }

    /// The transition's own error.
    pub fn domain(error: &ToolError) -> Self {
        Rejected {
            code: error.code().to_owned(),
            message: error.message().to_owned(),
            recovery: error.recovery().cloned(),
            details: error.details().cloned(),
        }
    }
}

/// An outcome as the operation-id ledger records it: a summary, without the state, so a record
/// costs what the outcome says and not what the resource weighs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecordedOutcome {
    /// The change was committed.
    Applied(RecordedApplied),
    /// The caller's view was stale; nothing changed.
    StaleView(RecordedStaleView),
    /// Refused with a code; nothing changed.
    Rejected(Rejected),
    /// A step over several resources (see [`StepOutcome`](super::StepOutcome)): only the
    /// ledger keeps it, so no single-resource tool publishes it.
    #[schemars(skip)]
    Step {
        /// The step's summary.
        step: RecordedStep,
    },
}

/// A step as the ledger records it: versions and codes, never states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecordedStep {
    /// Committed: each resource's handle and new version, and the tool's result.
    Applied {
        /// `(handle, version)` of each resource, in order.
        resources: Vec<PartVersion>,
        /// What the tool returned.
        result: Value,
    },
    /// Refused: each resource that moved.
    StaleView {
        /// Always `STALE_VIEW`.
        code: String,
        /// `(handle, version)` of each resource that moved, at the version it had moved to.
        moved: Vec<PartVersion>,
    },
    /// Refused with a code.
    Rejected(Rejected),
}

/// A resource's handle and a version of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PartVersion {
    /// The resource handle.
    pub handle: String,
    /// The version.
    pub version: u64,
}

/// The summary of an `applied` outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecordedApplied {
    /// The resource handle.
    pub handle: String,
    /// The version the change produced.
    pub version: u64,
    /// What the tool returned.
    pub result: Value,
    /// The version the caller expected, when the change was rebased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebased_from: Option<u64>,
    /// The effects the change emitted (a replay never emits them again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<EffectTicket>,
}

/// The summary of a `stale_view` outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecordedStaleView {
    /// Always `STALE_VIEW`.
    pub code: String,
    /// The resource handle.
    pub handle: String,
    /// The version the caller based the change on.
    pub expected_version: u64,
    /// The version the resource was at.
    pub current_version: u64,
    /// What the caller was told to do.
    pub recovery: Recovery,
}

impl From<&Applied> for RecordedApplied {
    fn from(applied: &Applied) -> Self {
        RecordedApplied {
            handle: applied.handle.clone(),
            version: applied.version,
            result: applied.result.clone(),
            rebased_from: applied.rebased_from,
            effects: applied.effects.clone(),
        }
    }
}

impl From<&StaleView> for RecordedStaleView {
    fn from(stale: &StaleView) -> Self {
        RecordedStaleView {
            code: stale.code.clone(),
            handle: stale.handle.clone(),
            expected_version: stale.expected_version,
            current_version: stale.current_version,
            recovery: stale.recovery.clone(),
        }
    }
}

/// The answer to a repeat of an earlier request with the same operation id and payload: what
/// was recorded then, and the resource as it is now, so the answer keeps its meaning however
/// the resource moved on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Replayed {
    /// The operation id.
    pub operation_id: String,
    /// When the original outcome was recorded (RFC 3339, UTC).
    pub recorded_at: String,
    /// The original outcome, as recorded.
    pub original: RecordedOutcome,
    /// The resource now (its current version and the entity's view), when the original outcome
    /// names a resource that is still available to the caller.
    // Also absent when the entity's view panicked: that is logged, and the model is told only
    // what it needs, that the operation was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<Snapshot>,
    /// How the delivery of each effect the original change emitted is going, now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<EffectStatus>,
}

/// The outcome of a mutation: the `structuredContent` of a mutating tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum MutationOutcome {
    /// The transition was committed.
    Applied(Applied),
    /// The caller's view is stale; nothing changed.
    StaleView(StaleView),
    /// Refused with a code; nothing changed.
    Rejected(Rejected),
    /// A repeat of an earlier request; nothing changed this time.
    Replayed(Replayed),
}

impl RecordedOutcome {
    fn is_error(&self) -> bool {
        !matches!(
            self,
            RecordedOutcome::Applied(_)
                | RecordedOutcome::Step {
                    step: RecordedStep::Applied { .. }
                }
        )
    }

    /// The error code, if the outcome was an error.
    pub fn code(&self) -> Option<&str> {
        match self {
            RecordedOutcome::Applied(_) => None,
            RecordedOutcome::StaleView(stale) => Some(&stale.code),
            RecordedOutcome::Rejected(rejected) => Some(&rejected.code),
            RecordedOutcome::Step { step } => match step {
                RecordedStep::Applied { .. } => None,
                RecordedStep::StaleView { code, .. } => Some(code),
                RecordedStep::Rejected(rejected) => Some(&rejected.code),
            },
        }
    }

    /// The resource the outcome is about, if it names one.
    pub fn handle(&self) -> Option<&str> {
        match self {
            RecordedOutcome::Applied(applied) => Some(&applied.handle),
            RecordedOutcome::StaleView(stale) => Some(&stale.handle),
            RecordedOutcome::Rejected(_) | RecordedOutcome::Step { .. } => None,
        }
    }

    fn text(&self) -> String {
        match self {
            RecordedOutcome::Applied(applied) => {
                applied_text(&applied.handle, applied.version, applied.rebased_from)
            }
            RecordedOutcome::StaleView(stale) => format!(
                "Not applied: {} had changed after version {} that it was based on; it was at version {}.",
                stale.handle, stale.expected_version, stale.current_version
            ),
            RecordedOutcome::Rejected(rejected) => rejected.text(),
            RecordedOutcome::Step { .. } => {
                "A step over several resources, recorded under this operation id.".to_owned()
            }
        }
    }
}

fn applied_text(handle: &str, version: u64, rebased_from: Option<u64>) -> String {
    match rebased_from {
        Some(from) => format!(
            "Applied to {handle} at version {version}: your change was based on version {from}, and the changes since then did not touch what it modifies."
        ),
        None => format!("Applied: {handle} is now at version {version}."),
    }
}

impl Applied {
    fn text(&self) -> String {
        let applied = applied_text(&self.handle, self.version, self.rebased_from);
        match self.effects.len() {
            0 => applied,
            1 => format!(
                "{applied} It emitted a {} effect, delivered now that the change is committed: read {} to see how its delivery went.",
                self.effects[0].kind, self.handle
            ),
            n => format!(
                "{applied} It emitted {n} effects, delivered now that the change is committed: read {} to see how each delivery went.",
                self.handle
            ),
        }
    }
}

impl StaleView {
    fn text(&self) -> String {
        let changed = if !self.delta_available {
            "The history of your version is no longer kept, so compare with the current state."
                .to_owned()
        } else {
            let paths: Vec<&str> = self.delta.iter().map(|c| c.path.as_str()).collect();
            format!("Changed since then: {}.", paths.join(", "))
        };
        let next = match self.recovery {
            Recovery::Reconfirm => format!(
                "Show the current state to whoever asked for this change and confirm it still holds before retrying with expected_version {} and a new operation_id.",
                self.current_version
            ),
            _ => format!(
                "Re-plan from the current state and retry with expected_version {} and a new operation_id.",
                self.current_version
            ),
        };
        format!(
            "Not applied: {} changed after version {} that you based this on; it is now at version {}. {changed} {next}",
            self.handle, self.expected_version, self.current_version
        )
    }
}

impl MutationOutcome {
    /// Whether the result is an error for the model (`isError`): everything but `applied`, and a
    /// replay of anything but `applied`.
    pub fn is_error(&self) -> bool {
        match self {
            MutationOutcome::Applied(_) => false,
            MutationOutcome::StaleView(_) | MutationOutcome::Rejected(_) => true,
            MutationOutcome::Replayed(replayed) => replayed.original.is_error(),
        }
    }

    /// The error code, if the outcome is an error.
    pub fn code(&self) -> Option<&str> {
        match self {
            MutationOutcome::Applied(_) => None,
            MutationOutcome::StaleView(stale) => Some(&stale.code),
            MutationOutcome::Rejected(rejected) => Some(&rejected.code),
            MutationOutcome::Replayed(replayed) => replayed.original.code(),
        }
    }

    /// The committed result of this request (not of a replayed one: see [`Replayed::original`]).
    pub fn applied(&self) -> Option<&Applied> {
        match self {
            MutationOutcome::Applied(applied) => Some(applied),
            _ => None,
        }
    }

    /// The handle of the resource a change was committed to, by this request or by the one it
    /// replays.
    pub fn committed_handle(&self) -> Option<&str> {
        match self {
            MutationOutcome::Applied(applied) => Some(&applied.handle),
            MutationOutcome::Replayed(Replayed {
                original: RecordedOutcome::Applied(applied),
                ..
            }) => Some(&applied.handle),
            _ => None,
        }
    }

    /// A short text for the model.
    pub fn text(&self) -> String {
        match self {
            MutationOutcome::Applied(applied) => applied.text(),
            MutationOutcome::StaleView(stale) => stale.text(),
            MutationOutcome::Rejected(rejected) => rejected.text(),
            MutationOutcome::Replayed(replayed) => {
                let now = match &replayed.current {
                    Some(current) => format!(
                        " It is now at version {}; pass expected_version {} on your next change.",
                        current.version, current.version
                    ),
                    None => String::new(),
                };
                format!(
                    "Already done: this repeats operation {} recorded at {}; nothing was changed again. Original outcome: {}{now}",
                    replayed.operation_id,
                    replayed.recorded_at,
                    replayed.original.text()
                )
            }
        }
    }

    /// The JSON Schema (2020-12) of this union, for a tool's `outputSchema`.
    pub fn json_schema() -> Value {
        schema_value(crate::protocol::schema_generator().into_root_schema_for::<MutationOutcome>())
    }
}

/// A resource as read, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReadOutcome {
    /// The current state.
    Current(Snapshot),
    /// `NOT_FOUND` or `EXPIRED`.
    Rejected(Rejected),
}

/// The current state of a resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Snapshot {
    /// The resource handle.
    pub handle: String,
    /// The current version; pass it as `expected_version` when changing the resource.
    pub version: u64,
    /// The state.
    // Shared with the store where it can be: the doc comment above is the published schema's.
    pub state: Arc<Value>,
    /// Where to resume from.
    pub resumption: Resumption,
    /// What changed since the version the caller asked about, when it asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Changes>,
    /// The effects changes of the resource emitted (the newest 20, oldest first), with how
    /// each delivery is going: reported by reads of resources whose tools emit effects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<EffectStatus>,
    /// A page of each collection's items, which a `reads` tool shows through its entity.
    #[serde(skip)]
    #[schemars(skip)]
    #[doc(hidden)]
    pub pages: Vec<super::collection::ItemsPage>,
}

impl Snapshot {
    /// The text of a read of this snapshot.
    pub(crate) fn text(&self) -> String {
        let changes = match &self.changes {
            None => String::new(),
            Some(changes) if !changes.delta_available => format!(
                " The history of version {} is no longer kept, so compare with the state.",
                changes.since_version
            ),
            Some(changes) if changes.delta.is_empty() => format!(
                " Nothing it shows changed since version {}.",
                changes.since_version
            ),
            Some(changes) => {
                let paths: Vec<&str> = changes.delta.iter().map(|c| c.path.as_str()).collect();
                format!(
                    " Changed since version {}: {}.",
                    changes.since_version,
                    paths.join(", ")
                )
            }
        };
        format!(
            "{} is at version {} ({}).{changes} Pass expected_version {} when you change it.",
            self.handle,
            self.version,
            self.resumption.lifecycle.as_str(),
            self.version
        )
    }
}

/// What changed in the entity's view between a version the caller saw and now: a worker
/// resuming from a record learns whether its plan still holds without attempting a write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Changes {
    /// The version the caller asked about.
    pub since_version: u64,
    /// Whether `delta` is known; `false` once that version's history was pruned.
    pub delta_available: bool,
    /// What changed in the entity's view since then (empty when nothing it shows changed).
    pub delta: Vec<FieldChange>,
}

impl ReadOutcome {
    /// Whether the result is an error for the model.
    pub fn is_error(&self) -> bool {
        matches!(self, ReadOutcome::Rejected(_))
    }

    /// The snapshot, if the read succeeded.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        match self {
            ReadOutcome::Current(snapshot) => Some(snapshot),
            ReadOutcome::Rejected(_) => None,
        }
    }

    /// A short text for the model.
    pub fn text(&self) -> String {
        match self {
            ReadOutcome::Current(snapshot) => snapshot.text(),
            ReadOutcome::Rejected(rejected) => rejected.text(),
        }
    }

    /// The JSON Schema (2020-12) of this union.
    pub fn json_schema() -> Value {
        schema_value(crate::protocol::schema_generator().into_root_schema_for::<ReadOutcome>())
    }
}

fn schema_value(schema: schemars::Schema) -> Value {
    schema.to_value()
}
