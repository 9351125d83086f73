//! Outcomes as MCP tool results: `structuredContent` is the outcome, the text is what a model
//! reads, and a successful outcome is written straight to JSON on the request path.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::protocol::content::{CallToolResult, Content};
use crate::protocol::framework::code;
use crate::protocol::reply::Rendered;
use crate::protocol::reply::Reply;
use crate::protocol::tool_error::{IntoToolError, ToolError};
use crate::store::{
    Changes, EffectStatus, MutationOutcome, ReadOutcome, Replayed, Resumption, Snapshot, StoreError,
};
use crate::tools::reply::IntoCallToolResult;

impl MutationOutcome {
    /// The state this outcome carries, taken out (left `null`), and the path of its member in
    /// the serialized outcome.
    fn take_state(&mut self) -> Option<(&'static str, Option<&'static str>, Arc<Value>)> {
        match self {
            MutationOutcome::Applied(applied) => Some(("state", None, take(&mut applied.state))),
            MutationOutcome::StaleView(stale) => {
                Some(("current_state", None, take(&mut stale.current_state)))
            }
            MutationOutcome::Replayed(Replayed {
                current: Some(current),
                ..
            }) => Some(("current", Some("state"), take(&mut current.state))),
            _ => None,
        }
    }

    /// The tool result: `structuredContent` is this outcome, the text is [`MutationOutcome::text`].
    pub fn into_call_tool_result(mut self) -> CallToolResult {
        let is_error = self.is_error();
        let text = self.text();
        let state = self.take_state();
        to_result(&self, state, text, is_error)
    }

    /// The reply the request path answers with: a success written straight from the outcome.
    pub(crate) fn into_reply(self) -> Reply {
        if !self.is_error()
            && let Ok(rendered) = Rendered::new(self.text(), &self)
        {
            return Reply::Rendered(rendered);
        }
        Reply::Complete(self.into_call_tool_result())
    }
}

impl ReadOutcome {
    /// The tool result.
    pub fn into_call_tool_result(mut self) -> CallToolResult {
        let is_error = self.is_error();
        let text = self.text();
        let state = match &mut self {
            ReadOutcome::Current(snapshot) => Some(("state", None, take(&mut snapshot.state))),
            ReadOutcome::Rejected(_) => None,
        };
        to_result(&self, state, text, is_error)
    }
}

impl Snapshot {
    /// The read of this snapshot with `view` as its state, written straight from `view`: the
    /// structured content [`ReadOutcome::Current`] would have with `view` serialized into
    /// `state`, without building either as a JSON tree.
    pub(crate) fn render_with<T: Serialize>(
        &self,
        view: &T,
    ) -> Result<Rendered, serde_json::Error> {
        /// `ReadOutcome::Current` as serialized, with a borrowed state of any type.
        #[derive(Serialize)]
        struct Current<'a, T> {
            outcome: &'static str,
            handle: &'a str,
            version: u64,
            state: &'a T,
            resumption: &'a Resumption,
            #[serde(skip_serializing_if = "Option::is_none")]
            changes: Option<&'a Changes>,
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            effects: &'a [EffectStatus],
        }
        Rendered::new(
            self.text(),
            &Current {
                outcome: "current",
                handle: &self.handle,
                version: self.version,
                state: view,
                resumption: &self.resumption,
                changes: self.changes.as_ref(),
                effects: &self.effects,
            },
        )
    }
}

/// A hand-written [`Tool`](crate::tools::Tool) may return the outcomes the store answers with.
impl IntoCallToolResult for MutationOutcome {
    fn output_schema(generator: &mut schemars::SchemaGenerator) -> Option<Value> {
        Some(generator.root_schema_for::<MutationOutcome>().to_value())
    }

    fn into_call_tool_result(self) -> CallToolResult {
        MutationOutcome::into_call_tool_result(self)
    }

    fn into_reply(self) -> Reply {
        MutationOutcome::into_reply(self)
    }
}

impl IntoCallToolResult for ReadOutcome {
    fn output_schema(generator: &mut schemars::SchemaGenerator) -> Option<Value> {
        Some(generator.root_schema_for::<ReadOutcome>().to_value())
    }

    fn into_call_tool_result(self) -> CallToolResult {
        ReadOutcome::into_call_tool_result(self)
    }

    fn into_reply(self) -> Reply {
        match &self {
            ReadOutcome::Current(snapshot) => match snapshot.render_with(&snapshot.state) {
                Ok(rendered) => Reply::Rendered(rendered),
                Err(_) => Reply::Complete(self.into_call_tool_result()),
            },
            ReadOutcome::Rejected(_) => Reply::Complete(self.into_call_tool_result()),
        }
    }
}

/// Takes a shared state out, leaving `null`.
fn take(state: &mut Arc<Value>) -> Arc<Value> {
    std::mem::replace(state, Arc::new(Value::Null))
}

/// The tool result of an outcome whose (possibly large) state was taken out of it: the rest is
/// serialized and the state moved back into its member, so the state is copied at most once
/// (when the store still shares it), never serialized twice.
fn to_result<T: Serialize>(
    outcome: &T,
    state: Option<(&'static str, Option<&'static str>, Arc<Value>)>,
    text: String,
    is_error: bool,
) -> CallToolResult {
    let mut structured = serde_json::to_value(outcome).ok();
    if let (Some(Value::Object(members)), Some((member, nested, state))) =
        (structured.as_mut(), state)
    {
        let slot = match nested {
            None => members.get_mut(member),
            Some(inner) => members
                .get_mut(member)
                .and_then(|value| value.get_mut(inner)),
        };
        if let Some(slot) = slot {
            *slot = Arc::unwrap_or_clone(state);
        }
    }
    CallToolResult {
        content: vec![Content::text(text)],
        structured_content: structured,
        is_error,
        meta: None,
    }
}

impl IntoToolError for StoreError {
    fn into_tool_error(self) -> ToolError {
        // The model sees only that it may retry; the operator needs the cause.
        tracing::warn!(error = %self, "the state store failed; the call answers STORE_UNAVAILABLE");
        ToolError::new(
            code::STORE_UNAVAILABLE,
            "The state store is temporarily unavailable; retry the same request with the same operation_id.",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::recovery::Recovery;
    use crate::store::{
        Applied, FieldChange, Lifecycle, RecordedApplied, RecordedOutcome, Rejected, StaleView,
    };
    use serde_json::json;

    fn resumption() -> Resumption {
        Resumption {
            handle: "bsk_a".into(),
            basis_version: 3,
            lifecycle: Lifecycle::Active,
            expires_at: None,
            validator: None,
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            handle: "bsk_a".into(),
            version: 3,
            state: json!({"notes": ["a", "b"], "memory_gib": 16}).into(),
            resumption: resumption(),
            changes: None,
            effects: Vec::new(),
            pages: Vec::new(),
        }
    }

    /// The structured content is the outcome as serialized, whichever way the state got there.
    #[test]
    fn structured_content_is_the_serialized_outcome() {
        let applied = Applied {
            handle: "bsk_a".into(),
            version: 3,
            state: json!({"memory_gib": 32}).into(),
            result: json!(32),
            rebased_from: Some(2),
            resumption: resumption(),
            effects: vec![crate::store::EffectTicket {
                key: "eff_0".into(),
                kind: "charge".into(),
            }],
        };
        let stale = StaleView {
            code: code::STALE_VIEW.into(),
            handle: "bsk_a".into(),
            expected_version: 1,
            current_version: 3,
            recovery: Recovery::RefreshAndReplan,
            delta_available: true,
            delta: vec![],
            current_state: json!({"memory_gib": 64}).into(),
            resumption: resumption(),
            confirmation: None,
        };
        let replayed = Replayed {
            operation_id: "op".into(),
            recorded_at: "2026-07-28T09:30:00.000Z".into(),
            original: RecordedOutcome::Applied(RecordedApplied::from(&applied)),
            current: Some(snapshot()),
            effects: Vec::new(),
        };
        for outcome in [
            MutationOutcome::Applied(applied),
            MutationOutcome::StaleView(stale),
            MutationOutcome::Replayed(replayed),
            MutationOutcome::Rejected(Rejected::not_found("basket")),
        ] {
            let expected = serde_json::to_value(&outcome).unwrap();
            let rendered = outcome.clone().into_reply();
            assert_eq!(
                matches!(rendered, Reply::Rendered(_)),
                !outcome.is_error(),
                "{outcome:?}: only successes are written straight to JSON"
            );
            let result = outcome.into_call_tool_result();
            assert_eq!(result.structured_content, Some(expected));
            assert_eq!(rendered.into_result().unwrap(), result);
        }
        for outcome in [
            ReadOutcome::Current(snapshot()),
            ReadOutcome::Rejected(Rejected::not_found("basket")),
        ] {
            let expected = serde_json::to_value(&outcome).unwrap();
            let rendered = crate::tools::IntoCallToolResult::into_reply(outcome.clone());
            assert_eq!(matches!(rendered, Reply::Rendered(_)), !outcome.is_error());
            let result = outcome.into_call_tool_result();
            assert_eq!(result.structured_content, Some(expected));
            assert_eq!(rendered.into_result().unwrap(), result);
        }
    }

    /// A read's text names the version to send next and what changed since the caller's.
    #[test]
    fn a_read_says_its_version_and_what_changed() {
        let change = |path: &str| FieldChange {
            path: path.into(),
            before: Some(json!(1)),
            after: Some(json!(2)),
        };
        let mut snapshot = snapshot();
        let cases = [
            (None, ""),
            (
                Some((false, vec![])),
                " The history of version 2 is no longer kept, so compare with the state.",
            ),
            (
                Some((true, vec![])),
                " Nothing it shows changed since version 2.",
            ),
            (
                Some((true, vec![change("/memory_gib"), change("/notes/1")])),
                " Changed since version 2: /memory_gib, /notes/1.",
            ),
        ];
        for (changes, said) in cases {
            snapshot.changes = changes.map(|(delta_available, delta)| Changes {
                since_version: 2,
                delta_available,
                delta,
            });
            assert_eq!(
                ReadOutcome::Current(snapshot.clone()).text(),
                format!(
                    "bsk_a is at version 3 (active).{said} Pass expected_version 3 when you change it."
                )
            );
        }
    }

    /// A read tool's own view, written straight to JSON, is the read outcome whose state is that
    /// view: the same members, the same text.
    #[test]
    fn a_view_rendered_into_a_snapshot_is_the_read_outcome_with_that_state() {
        #[derive(Serialize)]
        struct View {
            memory_gib: u32,
            notes: Vec<&'static str>,
            note: Option<String>,
        }
        let view = View {
            memory_gib: 32,
            notes: vec!["a", "\"quoted\""],
            note: None,
        };
        let mut snapshot = snapshot();
        snapshot.resumption.validator = Some("AAAA".into());
        for changes in [
            None,
            Some(Changes {
                since_version: 2,
                delta_available: true,
                delta: vec![FieldChange {
                    path: "/memory_gib".into(),
                    before: Some(json!(16)),
                    after: Some(json!(32)),
                }],
            }),
        ] {
            snapshot.changes = changes;
            let rendered = snapshot.render_with(&view).unwrap().into_call_tool_result();
            let mut expected = snapshot.clone();
            expected.state = serde_json::to_value(&view).unwrap().into();
            assert_eq!(
                rendered,
                ReadOutcome::Current(expected).into_call_tool_result()
            );
        }
    }
}
