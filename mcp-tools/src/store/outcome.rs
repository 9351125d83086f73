//! Typed outcomes of the state boundary, serialized as MCP `structuredContent`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::delta::FieldChange;
use super::entity::Lifecycle;
use crate::tools::content::{CallToolResult, Content, ToolError};

/// Stable codes of the rejections the boundary itself produces.
pub mod code {
    /// The caller's view is older than the resource.
    pub const STALE_VIEW: &str = "STALE_VIEW";
    /// An operation id was sent again with a different payload.
    pub const OPERATION_ID_REUSED: &str = "OPERATION_ID_REUSED";
    /// The resource reached a terminal lifecycle state.
    pub const TERMINAL: &str = "TERMINAL";
    /// The resource outlived its time to live.
    pub const EXPIRED: &str = "EXPIRED";
    /// No such handle for this caller (unknown, or owned by another principal).
    pub const NOT_FOUND: &str = "NOT_FOUND";
}

/// What the model should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// Read the resource again, re-plan from the current state, retry with a new operation id.
    RefreshAndReplan,
    /// Show the current state to whoever decided the change and get it confirmed before retrying.
    Reconfirm,
    /// Do not retry: the resource accepts no further change.
    Stop,
    /// The resource is gone; create a new one.
    CreateNew,
    /// Send this request again with a fresh operation id.
    NewOperationId,
}

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
}

/// A transition that was committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Applied {
    /// The resource handle.
    pub handle: String,
    /// The new version.
    pub version: u64,
    /// The state at the new version.
    pub state: Value,
    /// What the tool returned.
    pub result: Value,
    /// Set when the change was re-applied on a newer version than the caller saw, because no
    /// intervening change touched the fields it works on: the version the caller expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebased_from: Option<u64>,
    /// Where to resume from.
    pub resumption: Resumption,
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
    /// The fields that changed between the expected version and now.
    pub delta: Vec<FieldChange>,
    /// The state now.
    pub current_state: Value,
    /// Where to resume from (the current version).
    pub resumption: Resumption,
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

    /// The transition's own error.
    pub fn domain(error: &ToolError) -> Self {
        Rejected {
            code: error.code().to_owned(),
            message: error.message().to_owned(),
            recovery: None,
            details: error.details().cloned(),
        }
    }
}

/// An outcome as the operation-id ledger records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RecordedOutcome {
    /// See [`Applied`].
    Applied(Applied),
    /// See [`StaleView`].
    StaleView(StaleView),
    /// See [`Rejected`].
    Rejected(Rejected),
}

/// The recorded outcome of an earlier request with the same operation id and payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Replayed {
    /// The operation id.
    pub operation_id: String,
    /// When the original outcome was recorded (RFC 3339, UTC).
    pub recorded_at: String,
    /// The original outcome, unchanged.
    pub original: RecordedOutcome,
}

/// The outcome of a mutation: the `structuredContent` of a mutating tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
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

impl From<RecordedOutcome> for MutationOutcome {
    fn from(outcome: RecordedOutcome) -> Self {
        match outcome {
            RecordedOutcome::Applied(applied) => MutationOutcome::Applied(applied),
            RecordedOutcome::StaleView(stale) => MutationOutcome::StaleView(stale),
            RecordedOutcome::Rejected(rejected) => MutationOutcome::Rejected(rejected),
        }
    }
}

impl RecordedOutcome {
    fn is_error(&self) -> bool {
        !matches!(self, RecordedOutcome::Applied(_))
    }

    fn text(&self) -> String {
        match self {
            RecordedOutcome::Applied(applied) => applied.text(),
            RecordedOutcome::StaleView(stale) => stale.text(),
            RecordedOutcome::Rejected(rejected) => rejected.message.clone(),
        }
    }
}

impl Applied {
    fn text(&self) -> String {
        match self.rebased_from {
            Some(from) => format!(
                "Applied to {} at version {}: your change was based on version {from}, and the changes since then did not touch what it modifies.",
                self.handle, self.version
            ),
            None => format!(
                "Applied: {} is now at version {}.",
                self.handle, self.version
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
            MutationOutcome::Replayed(replayed) => match &replayed.original {
                RecordedOutcome::Applied(_) => None,
                RecordedOutcome::StaleView(stale) => Some(&stale.code),
                RecordedOutcome::Rejected(rejected) => Some(&rejected.code),
            },
        }
    }

    /// The committed result, including one recovered by a replay.
    pub fn applied(&self) -> Option<&Applied> {
        match self {
            MutationOutcome::Applied(applied) => Some(applied),
            MutationOutcome::Replayed(Replayed {
                original: RecordedOutcome::Applied(applied),
                ..
            }) => Some(applied),
            _ => None,
        }
    }

    /// A short text for the model.
    pub fn text(&self) -> String {
        match self {
            MutationOutcome::Applied(applied) => applied.text(),
            MutationOutcome::StaleView(stale) => stale.text(),
            MutationOutcome::Rejected(rejected) => rejected.message.clone(),
            MutationOutcome::Replayed(replayed) => format!(
                "Already done: this repeats operation {} recorded at {}; nothing was changed again. Original outcome: {}",
                replayed.operation_id,
                replayed.recorded_at,
                replayed.original.text()
            ),
        }
    }

    /// The JSON Schema (2020-12) of this union, for a tool's `outputSchema`.
    pub fn json_schema() -> Value {
        schema_value(
            crate::tools::set::schema_generator().into_root_schema_for::<MutationOutcome>(),
        )
    }

    /// The tool result: `structuredContent` is this outcome, the text is [`MutationOutcome::text`].
    pub fn into_call_tool_result(self) -> CallToolResult {
        let is_error = self.is_error();
        let text = self.text();
        to_result(&self, text, is_error)
    }
}

/// A resource as read, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
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
    pub state: Value,
    /// Where to resume from.
    pub resumption: Resumption,
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
            ReadOutcome::Current(snapshot) => format!(
                "{} is at version {} ({}). Pass expected_version {} when you change it.",
                snapshot.handle,
                snapshot.version,
                snapshot.resumption.lifecycle.as_str(),
                snapshot.version
            ),
            ReadOutcome::Rejected(rejected) => rejected.message.clone(),
        }
    }

    /// The JSON Schema (2020-12) of this union.
    pub fn json_schema() -> Value {
        schema_value(crate::tools::set::schema_generator().into_root_schema_for::<ReadOutcome>())
    }

    /// The tool result.
    pub fn into_call_tool_result(self) -> CallToolResult {
        let is_error = self.is_error();
        let text = self.text();
        to_result(&self, text, is_error)
    }
}

/// A hand-written [`Tool`](crate::Tool) may return the outcomes the store answers with.
impl crate::IntoCallToolResult for MutationOutcome {
    fn output_schema(generator: &mut schemars::SchemaGenerator) -> Option<Value> {
        Some(generator.root_schema_for::<MutationOutcome>().to_value())
    }

    fn into_call_tool_result(self) -> CallToolResult {
        MutationOutcome::into_call_tool_result(self)
    }
}

impl crate::IntoCallToolResult for ReadOutcome {
    fn output_schema(generator: &mut schemars::SchemaGenerator) -> Option<Value> {
        Some(generator.root_schema_for::<ReadOutcome>().to_value())
    }

    fn into_call_tool_result(self) -> CallToolResult {
        ReadOutcome::into_call_tool_result(self)
    }
}

fn schema_value(schema: schemars::Schema) -> Value {
    schema.to_value()
}

fn to_result<T: Serialize>(outcome: &T, text: String, is_error: bool) -> CallToolResult {
    CallToolResult {
        content: vec![Content::text(text)],
        structured_content: serde_json::to_value(outcome).ok(),
        is_error,
        meta: None,
    }
}
