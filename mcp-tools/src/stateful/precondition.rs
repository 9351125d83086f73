//! The preconditions of a call: the version it names (by number, by validator, or through
//! `_meta`), an operation id no other anonymous caller can guess, and the reconfirmation of a
//! consequential change against the state as it is now.

use serde_json::Value;

use super::args::ExpectedVersion;
use super::bounds::IsEntity;
use crate::auth::Principal;
use crate::context::Context;
use crate::protocol::content::CallToolResult;
use crate::protocol::framework::{CONFIRMATION_META_KEY, RECONFIRM_INPUT_KEY, VALIDATOR_META_KEY};
use crate::protocol::input::InputRequired;
use crate::protocol::seal::{Binding, tool_call_target};
use crate::protocol::tool_error::ToolError;
use crate::store::{MutationOutcome, RecordedOutcome, Rejected, Replayed, StaleView};

/// The version a call's precondition names, after reading the argument and the `_meta` route;
/// `Err` with the result the call ends with when they are missing, malformed, forged or disagree.
pub(super) fn precondition(
    cx: &Context,
    kind: &'static str,
    handle: &str,
    argument: Option<ExpectedVersion>,
) -> Result<(u64, bool), CallToolResult> {
    let invalid =
        |message: String| Err(ToolError::new(ToolError::INVALID_ARGUMENTS, message).into_result());
    let from_meta = match cx.meta().raw().get(VALIDATOR_META_KEY) {
        None => None,
        Some(Value::String(validator)) => Some(validator.as_str()),
        Some(_) => {
            return invalid(format!(
                "`_meta[\"{VALIDATOR_META_KEY}\"]` must be the validator string of a result"
            ));
        }
    };
    let open = |validator: &str| {
        cx.seal()
            .and_then(|seal| seal.open_validator(kind, handle, validator))
            .ok_or_else(|| {
                MutationOutcome::Rejected(Rejected::invalid_validator(kind, handle))
                    .into_call_tool_result()
            })
    };
    let from_argument = match argument {
        None => None,
        Some(ExpectedVersion::Number(version)) => Some((version, false)),
        Some(ExpectedVersion::Validator(validator)) => Some((open(&validator)?, true)),
    };
    let from_meta = match from_meta {
        None => None,
        Some(validator) => Some(open(validator)?),
    };
    match (from_argument, from_meta) {
        (Some((argument, _)), Some(meta)) if argument != meta => invalid(format!(
            "`expected_version` says version {argument} and the validator in `_meta` says version {meta}; send one of them"
        )),
        (Some(found), _) => Ok(found),
        (None, Some(meta)) => Ok((meta, true)),
        (None, None) => Err(ToolError::new(
            ToolError::INVALID_ARGUMENTS,
            format!(
                "Invalid arguments: `expected_version` is required. Pass `resumption.basis_version` (or `resumption.validator`) of the last result about this {kind} you planned from, or read the {kind} first."
            ),
        )
        .with_details(serde_json::json!({ "violations": [{
            "path": "/",
            "message": "\"expected_version\" is a required property",
        }] }))
        .into_result()),
    }
}

/// Refuses an operation id another anonymous caller could guess. Without authentication every
/// caller is the same principal and shares one ledger, so a replay of `create-1` would hand one
/// caller the outcome (and the handle) of another's create; an id with the entropy of a handle
/// (a UUID, or at least 22 URL-safe characters) cannot be hit by accident or by trying.
pub(super) fn unguessable(cx: &Context, operation_id: &str) -> Result<(), CallToolResult> {
    if !matches!(cx.principal(), Principal::Anonymous) || is_unguessable(operation_id) {
        return Ok(());
    }
    Err(
        MutationOutcome::Rejected(Rejected::guessable_operation_id(operation_id))
            .into_call_tool_result(),
    )
}

/// At least 22 characters of the URL-safe base64 alphabet (128 bits as base64). A UUID in its
/// canonical form (36 hexadecimal digits and hyphens) is one of these.
pub(crate) fn is_unguessable(operation_id: &str) -> bool {
    let url_safe = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
    operation_id.len() >= 22 && operation_id.as_bytes().iter().all(url_safe)
}

fn binding<'a>(cx: &'a Context, target: &'a str, raw: &'a Value) -> Binding<'a> {
    Binding {
        target,
        principal: cx.principal().key(),
        arguments: raw,
    }
}

/// The version whoever decided this change confirmed it against, from the answer to the
/// reconfirmation elicitation or from a `confirmation` sent back in `_meta`; `Err` with the
/// result the call ends with when the confirmation was declined or does not open.
pub(super) fn confirmed_version<R: IsEntity>(
    cx: &Context,
    tool: &str,
    handle: &str,
    raw: &Value,
) -> Result<Option<u64>, CallToolResult> {
    let refused =
        |rejected: Rejected| Err(MutationOutcome::Rejected(rejected).into_call_tool_result());
    let asked = cx
        .request_state()
        .and_then(|state| state.get(RECONFIRM_INPUT_KEY))
        .and_then(Value::as_u64);
    if let Some(version) = asked
        && let Some(answer) = cx.input_response(RECONFIRM_INPUT_KEY)
    {
        let accepted = answer["action"] == "accept" && answer["content"]["confirm"] == true;
        if !accepted {
            return refused(Rejected::not_confirmed(R::KIND, handle));
        }
        return Ok(Some(version));
    }
    match cx.meta().raw().get(CONFIRMATION_META_KEY) {
        None => Ok(None),
        Some(Value::String(sealed)) => {
            let target = tool_call_target(tool);
            let opened = cx
                .seal()
                .and_then(|seal| {
                    seal.open_request_state(&binding(cx, &target, raw), sealed)
                        .ok()
                })
                .flatten();
            match opened
                .as_ref()
                .and_then(|state| state.get(RECONFIRM_INPUT_KEY))
                .and_then(Value::as_u64)
            {
                Some(version) => Ok(Some(version)),
                None => refused(Rejected::invalid_confirmation(R::KIND, handle)),
            }
        }
        Some(_) => refused(Rejected::invalid_confirmation(R::KIND, handle)),
    }
}

/// For a conflict under `reconfirm`: the elicitation that asks to confirm the change against the
/// current state, when the client can answer one; otherwise the `stale_view` gets the
/// confirmation to send back once whoever decided the change confirmed it.
pub(super) fn ask_to_reconfirm<R: IsEntity>(
    cx: &Context,
    tool: &str,
    raw: &Value,
    confirmed: bool,
    outcome: &mut MutationOutcome,
) -> Option<InputRequired> {
    let (current, message) = match &*outcome {
        MutationOutcome::StaleView(stale) => {
            (stale.current_version, reconfirm_message(stale, confirmed))
        }
        MutationOutcome::Replayed(Replayed {
            original: RecordedOutcome::StaleView(recorded),
            current: Some(current),
            ..
        }) => (
            current.version,
            format!(
                "The {} {} changed after version {} that this change was based on; it is now at version {}. Apply the change to it as it is now?",
                R::KIND,
                recorded.handle,
                recorded.expected_version,
                current.version
            ),
        ),
        _ => return None,
    };
    let state = serde_json::json!({ RECONFIRM_INPUT_KEY: current });
    let ask = InputRequired::new()
        .elicit(
            RECONFIRM_INPUT_KEY,
            message,
            serde_json::json!({
                "type": "object",
                "properties": { "confirm": {
                    "type": "boolean",
                    "title": "Apply to the current state",
                    "description": "Yes applies the change to the state shown; no leaves it unchanged.",
                } },
                "required": ["confirm"],
            }),
        )
        .state(state.clone());
    // The same rule that refuses input a client cannot give decides whether to ask at all.
    if ask
        .missing_capabilities(cx.client_capabilities())
        .is_empty()
    {
        return Some(ask);
    }
    if let MutationOutcome::StaleView(stale) = outcome {
        let target = tool_call_target(tool);
        stale.confirmation = cx
            .seal()
            .map(|seal| seal.request_state(&binding(cx, &target, raw), Some(&state)));
    }
    None
}

/// What the reconfirmation elicitation shows: what changed, before and after, since the version
/// the change was planned on (or, asking again, the version last confirmed).
fn reconfirm_message(stale: &StaleView, confirmed: bool) -> String {
    let basis = if confirmed {
        "that you confirmed this change against"
    } else {
        "that this change was based on"
    };
    let changes = if stale.delta_available {
        stale
            .delta
            .iter()
            .map(|change| {
                format!(
                    "{}: {} -> {}",
                    change.path,
                    change
                        .before
                        .as_ref()
                        .map_or("(none)".to_owned(), Value::to_string),
                    change
                        .after
                        .as_ref()
                        .map_or("(none)".to_owned(), Value::to_string)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        "its history is no longer kept".to_owned()
    };
    format!(
        "{} changed after version {} {basis}; it is now at version {} ({changes}). Apply the change to it as it is now?",
        stale.handle, stale.expected_version, stale.current_version
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_with_the_entropy_of_a_handle_are_unguessable() {
        for strong in [
            "3f2c8a4e-9b1d-4c6f-8e2a-7d5b0c1e9f43",
            "3F2C8A4E-9B1D-4C6F-8E2A-7D5B0C1E9F43",
            "AAAAAAAAAAAAAAAAAAAAAA",
            "create-0000000000000000000001",
            "q_-Zx09q_-Zx09q_-Zx09q",
        ] {
            assert!(is_unguessable(strong), "{strong}");
        }
        for weak in [
            "create-1",
            "",
            "AAAAAAAAAAAAAAAAAAAAA",
            "3f2c8a4e 9b1d 4c6f 8e2a 7d5b0c1e9f43",
            "an id of many words and spaces",
            "ééééééééééééééééééééééé",
            "AAAAAAAAAAAAAAAAAAAAAA=",
        ] {
            assert!(!is_unguessable(weak), "{weak}");
        }
    }
}
