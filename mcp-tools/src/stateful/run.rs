//! Running a create, a read or a mutation in the store's atomic boundary, from a tool call: the
//! preconditions first, then the store, then the outcome sealed and recorded for the caller.

use std::marker::PhantomData;

use serde::Serialize;
use serde_json::Value;

use super::StatefulReply;
use super::args::{ExpectedVersion, PayloadArgument, fingerprint};
use super::bounds::IsEntity;
use super::precondition::{ask_to_reconfirm, confirmed_version, precondition, unguessable};
use super::trace::{record_fields, record_state};
use crate::context::Context;
use crate::protocol::content::CallToolResult;
use crate::protocol::framework::code;
use crate::protocol::reply::Reply;
use crate::protocol::tool_error::{IntoToolError, ToolError};
use crate::store::outbox::STATUSES_PER_READ;
use crate::store::{
    ConflictPolicy, CreateRequest, Creation, EntityKind, MutationOutcome, MutationRequest,
    ReadOutcome, ReadRequest, RecordedOutcome, Rejected, Replayed, Resumption, Snapshot,
    StepOutcome, StepPart, StepRequest, StepTransition, Store, StoreError, Transition,
};

/// Seals the validator of every resumption record in an outcome.
fn seal_validators(cx: &Context, kind: &str, outcome: &mut MutationOutcome) {
    let resumption = match outcome {
        MutationOutcome::Applied(applied) => &mut applied.resumption,
        MutationOutcome::StaleView(stale) => &mut stale.resumption,
        MutationOutcome::Replayed(Replayed {
            current: Some(current),
            ..
        }) => &mut current.resumption,
        _ => return,
    };
    seal_validator(cx, kind, resumption);
}

fn seal_validator(cx: &Context, kind: &str, resumption: &mut Resumption) {
    resumption.validator = cx
        .seal()
        .map(|seal| seal.validator(kind, &resumption.handle, resumption.basis_version));
}

/// The store of the server serving `cx`, or the result the call ends with. A server with a
/// stateful tool and no store does not build, so only a hand-written tool on such a server meets
/// the error.
fn store(cx: &Context) -> Result<&dyn Store, CallToolResult> {
    cx.store().ok_or_else(|| {
        ToolError::new(
            code::MISSING_STATE,
            "The server has no state store: register one with `McpServer::builder(..).store(..)`.",
        )
        .into_result()
    })
}

/// Wakes this process's delivery of the effects an applied change emitted; for a replay of
/// one, reports how the delivery of each is going.
async fn effects_of(store: &dyn Store, outcome: &mut MutationOutcome) -> Result<(), StoreError> {
    match outcome {
        MutationOutcome::Applied(applied) if !applied.effects.is_empty() => {
            store.effects_emitted();
        }
        MutationOutcome::Replayed(Replayed {
            original: RecordedOutcome::Applied(original),
            effects,
            ..
        }) if !original.effects.is_empty() => {
            // The resource's newest statuses name the replayed change's effects unless many
            // changes emitted effects since: then those are not reported.
            let statuses = store
                .effect_statuses(&original.handle, STATUSES_PER_READ)
                .await?;
            *effects = statuses
                .into_iter()
                .filter(|status| original.effects.iter().any(|t| t.key == status.key))
                .collect();
        }
        _ => {}
    }
    Ok(())
}

/// The store of the server serving `cx`, once the operation id (if the call has one) is one
/// another caller could not guess; or the result the call ends with.
fn store_for<'c>(
    cx: &'c Context,
    operation_id: Option<&str>,
) -> Result<&'c dyn Store, CallToolResult> {
    let store = store(cx)?;
    if let Some(operation_id) = operation_id {
        unguessable(cx, operation_id)?;
    }
    Ok(store)
}

/// Converts a tool function's error for a stateful outcome.
pub fn tool_error<E: IntoToolError>(error: E) -> ToolError {
    error.into_tool_error()
}

/// What a `creates` tool declares, and the operation id of this call.
pub struct CreateSpec<R> {
    /// The tool name, part of the payload fingerprint.
    pub tool: &'static str,
    /// The tool's own arguments, for the payload fingerprint.
    pub arguments: &'static [PayloadArgument],
    /// The caller's `operation_id`, unless the tool opted out.
    pub operation_id: Option<String>,
    /// The resource type.
    pub resource: PhantomData<fn() -> R>,
}

/// Stores the resource a `creates` tool makes, at version 1, owned by the caller. The store runs
/// `creation` (the tool's function) only after it consulted the ledger and claimed the operation
/// id: a retry is `replayed` with the handle minted the first time, without running the function
/// again.
pub async fn create<R: IsEntity>(
    cx: &Context,
    spec: CreateSpec<R>,
    raw: &Value,
    creation: Creation<'_>,
) -> StatefulReply {
    let store = match store_for(cx, spec.operation_id.as_deref()) {
        Ok(store) => store,
        Err(result) => return result.into(),
    };
    let mut request = CreateRequest::deferred(R::kind(), cx.principal().clone(), creation);
    if let Some(operation_id) = spec.operation_id {
        request = request.operation(operation_id, fingerprint(spec.tool, spec.arguments, raw));
    }
    match store.create(request).await {
        Ok(mut outcome) => {
            record_state(cx, None, None, &outcome);
            seal_validators(cx, R::KIND, &mut outcome);
            StatefulReply(outcome.into_reply())
        }
        Err(error) => error.into_tool_error().into_result().into(),
    }
}

/// Reads the current version for a `reads` tool: the snapshot and the typed resource, its
/// collections holding their first page of items (or the page `items_cursor` names), or the
/// result the call ends with (`NOT_FOUND`, `EXPIRED`, a store failure).
pub async fn read<R: IsEntity>(
    cx: &Context,
    handle: String,
    basis: Option<ExpectedVersion>,
    items_cursor: Option<String>,
) -> Result<(Snapshot, R), CallToolResult> {
    let store = store(cx)?;
    let page_after = match items_cursor {
        None => None,
        Some(cursor) => {
            let opened = cx
                .seal()
                .and_then(|seal| seal.open_items_cursor(R::KIND, &handle, &cursor))
                .filter(|(field, _)| R::COLLECTIONS.contains(&field.as_str()));
            match opened {
                Some(page) => Some(page),
                None => {
                    return Err(ToolError::new(
                        code::INVALID_ARGUMENTS,
                        format!(
                            "`items_cursor` is not a cursor this server issued for this {kind}: \
                             pass the `next_cursor` of an earlier read of the same {kind}, or \
                             read again without `items_cursor` for the first page.",
                            kind = R::KIND
                        ),
                    )
                    .into_result());
                }
            }
        }
    };
    let since = match basis {
        None => None,
        Some(ExpectedVersion::Number(version)) => Some(version),
        Some(ExpectedVersion::Validator(validator)) => {
            match cx
                .seal()
                .and_then(|seal| seal.open_validator(R::KIND, &handle, &validator))
            {
                Some(version) => Some(version),
                None => {
                    return Err(ReadOutcome::Rejected(Rejected::invalid_validator(
                        R::KIND,
                        &handle,
                    ))
                    .into_call_tool_result());
                }
            }
        }
    };
    let span = tracing::Span::current();
    let traced = (!span.is_disabled()).then(|| handle.clone());
    let mut request = ReadRequest::new(R::kind(), cx.principal().clone(), handle);
    request.since = since;
    request.page_after = page_after;
    let read = store.read(request).await;
    if let Some(handle) = traced {
        let (version, label) = match &read {
            Ok(ReadOutcome::Current(snapshot)) => (Some(snapshot.version), "current"),
            Ok(ReadOutcome::Rejected(_)) => (None, "rejected"),
            Err(_) => (None, "store_error"),
        };
        record_fields(cx, &span, Some(&handle), since, version, label);
    }
    match read {
        Ok(ReadOutcome::Current(mut snapshot)) => {
            let unreadable = |error: &dyn std::fmt::Display| {
                ToolError::new(
                    code::INVALID_STATE,
                    format!("stored {} is unreadable: {error}", R::KIND),
                )
                .into_result()
            };
            let mut resource = R::deserialize(&*snapshot.state).map_err(|e| unreadable(&e))?;
            for page in std::mem::take(&mut snapshot.pages) {
                let Some(collection) = resource.collection(page.field) else {
                    continue;
                };
                collection
                    .hand(&page.items, None)
                    .map_err(|e| unreadable(&e))?;
                let next = match (page.more, page.items.last(), cx.seal()) {
                    (true, Some(last), Some(seal)) => {
                        Some(seal.items_cursor(R::KIND, &snapshot.handle, page.field, last.id))
                    }
                    _ => None,
                };
                collection.set_next_cursor(next);
            }
            seal_validator(cx, R::KIND, &mut snapshot.resumption);
            if cx.reports_effects(R::KIND) {
                snapshot.effects = store
                    .effect_statuses(&snapshot.handle, STATUSES_PER_READ)
                    .await
                    .map_err(|error| error.into_tool_error().into_result())?;
            }
            Ok((snapshot, resource))
        }
        Ok(rejected @ ReadOutcome::Rejected(_)) => Err(rejected.into_call_tool_result()),
        Err(error) => Err(error.into_tool_error().into_result()),
    }
}

/// The result of a `reads` tool: the snapshot whose `state` is what the tool function returned.
pub fn read_result<T: Serialize>(snapshot: Snapshot, view: Result<T, ToolError>) -> StatefulReply {
    let rendered = view.and_then(|view| {
        snapshot
            .render_with(&view)
            .map_err(ToolError::output_not_serializable)
    });
    match rendered {
        Ok(rendered) => StatefulReply(Reply::Rendered(rendered)),
        Err(error) => ReadOutcome::Rejected(Rejected::domain(&error))
            .into_call_tool_result()
            .into(),
    }
}

/// What a `mutates` tool declares, and the handle and preconditions of this call.
pub struct MutationSpec<R> {
    /// The tool name, part of the payload fingerprint.
    pub tool: &'static str,
    /// The tool's own arguments, for the payload fingerprint.
    pub arguments: &'static [PayloadArgument],
    /// The conflict policy.
    pub policy: ConflictPolicy,
    /// The handle the caller sent.
    pub handle: String,
    /// Whether the tool takes a precondition (`expected_version`, unless it opted out).
    pub precondition: bool,
    /// The caller's `expected_version` argument, if sent.
    pub expected_version: Option<ExpectedVersion>,
    /// The caller's `operation_id`, unless the tool opted out.
    pub operation_id: Option<String>,
    /// The resource type.
    pub resource: PhantomData<fn() -> R>,
}

/// Runs a `mutates` tool's transition in the store's atomic boundary. Under `on_conflict =
/// reconfirm`, a conflict asks whoever decided the change to confirm it against the current
/// state (an elicitation, when the client declared it), and only a confirmation bound to the
/// version it showed applies the change.
pub async fn mutate<R: IsEntity>(
    cx: &Context,
    spec: MutationSpec<R>,
    raw: &Value,
    transition: Transition,
) -> StatefulReply {
    let store = match store_for(cx, spec.operation_id.as_deref()) {
        Ok(store) => store,
        Err(result) => return result.into(),
    };
    let reconfirm = matches!(spec.policy, ConflictPolicy::Reconfirm);
    let confirmed = if reconfirm {
        match confirmed_version::<R>(cx, spec.tool, &spec.handle, raw) {
            Ok(confirmed) => confirmed,
            Err(result) => return result.into(),
        }
    } else {
        None
    };
    let expected = if spec.precondition {
        match precondition(cx, R::KIND, &spec.handle, spec.expected_version) {
            Ok(expected) => Some(expected),
            Err(result) => return result.into(),
        }
    } else {
        None
    };
    let tool = spec.tool;
    let traced = (!tracing::Span::current().is_disabled()).then(|| spec.handle.clone());
    let mut request =
        MutationRequest::new(R::kind(), cx.principal().clone(), spec.handle).policy(spec.policy);
    if let Some((version, _)) = expected {
        request = request.expect_version(version);
    }
    if let Some(version) = confirmed {
        request = request.expect_version(version).reconfirmed();
    }
    if let Some(operation_id) = spec.operation_id {
        let fingerprint = match (expected, raw) {
            // A retry that names the version by its validator, or through `_meta`, is the same
            // request as one that sends the number.
            (Some((version, true)), Value::Object(members)) => {
                let mut members = members.clone();
                members.insert("expected_version".to_owned(), Value::from(version));
                fingerprint(spec.tool, spec.arguments, &Value::Object(members))
            }
            _ => fingerprint(spec.tool, spec.arguments, raw),
        };
        request = request.operation(operation_id, fingerprint);
    }
    let expected_version = request.expected_version;
    match store.mutate(request, transition).await {
        Ok(mut outcome) => {
            if let Err(error) = effects_of(store, &mut outcome).await {
                return error.into_tool_error().into_result().into();
            }
            if let Some(handle) = &traced {
                record_state(cx, Some(handle), expected_version, &outcome);
            }
            seal_validators(cx, R::KIND, &mut outcome);
            if reconfirm
                && let Some(ask) =
                    ask_to_reconfirm::<R>(cx, tool, raw, confirmed.is_some(), &mut outcome)
            {
                return StatefulReply(Reply::InputRequired(ask));
            }
            StatefulReply(outcome.into_reply())
        }
        Err(error) => error.into_tool_error().into_result().into(),
    }
}

/// One resource of a step tool's call: its kind, the handle the caller sent and its
/// `expected_version` (a number or a validator), if the tool takes one.
pub struct StepPartSpec {
    /// The resource kind.
    pub kind: EntityKind,
    /// The handle the caller sent.
    pub handle: String,
    /// The caller's version of this resource; `None` when the tool takes none (the step
    /// commutes with every change of it).
    pub expected_version: Option<ExpectedVersion>,
    /// Whether the tool takes a version of this resource: then one must be sent.
    pub precondition: bool,
}

/// What a tool that changes several resources at once declares, and this call's resources
/// and operation id.
pub struct StepSpec {
    /// The tool name, part of the payload fingerprint.
    pub tool: &'static str,
    /// The tool's own arguments, for the payload fingerprint.
    pub arguments: &'static [PayloadArgument],
    /// The resources, in the order the transition takes them.
    pub parts: Vec<StepPartSpec>,
    /// The caller's `operation_id`.
    pub operation_id: Option<String>,
}

/// Runs a step over several resources in the store's atomic boundary: each resource's
/// precondition (a number or a validator of that resource), then the store's step, the
/// validators of every resumption record sealed in the outcome.
pub async fn mutate_step(
    cx: &Context,
    spec: StepSpec,
    raw: &Value,
    transition: StepTransition,
) -> StatefulReply {
    let store = match store_for(cx, spec.operation_id.as_deref()) {
        Ok(store) => store,
        Err(result) => return result.into(),
    };
    let mut parts = Vec::with_capacity(spec.parts.len());
    let kinds: Vec<(String, &'static str)> = spec
        .parts
        .iter()
        .map(|part| (part.handle.clone(), part.kind.kind))
        .collect();
    let mut numbered = match raw {
        Value::Object(members) => members.clone(),
        _ => Default::default(),
    };
    for part in spec.parts {
        let mut step_part = StepPart::new(part.kind, &part.handle);
        if part.precondition {
            let version = match part.expected_version {
                Some(ExpectedVersion::Number(version)) => version,
                Some(ExpectedVersion::Validator(validator)) => {
                    match cx.seal().and_then(|seal| {
                        seal.open_validator(part.kind.kind, &part.handle, &validator)
                    }) {
                        Some(version) => {
                            // A retry that names the version by its validator is the same
                            // request as one that sends the number.
                            for value in numbered.values_mut() {
                                if value.as_str() == Some(validator.as_str()) {
                                    *value = Value::from(version);
                                }
                            }
                            version
                        }
                        None => {
                            return MutationOutcome::Rejected(Rejected::invalid_validator(
                                part.kind.kind,
                                &part.handle,
                            ))
                            .into_call_tool_result()
                            .into();
                        }
                    }
                }
                None => {
                    return ToolError::new(
                        code::INVALID_ARGUMENTS,
                        format!(
                            "send the version of {} you based this change on (a number, or the \
                             validator of a result about it)",
                            part.handle
                        ),
                    )
                    .into_result()
                    .into();
                }
            };
            step_part = step_part.expect_version(version);
        }
        parts.push(step_part);
    }
    let mut request = StepRequest::new(cx.principal().clone(), parts);
    if let Some(operation_id) = spec.operation_id {
        let fingerprint = fingerprint(spec.tool, spec.arguments, &Value::Object(numbered));
        request = request.operation(operation_id, fingerprint);
    }
    match store.mutate_step(request, transition).await {
        Ok(mut outcome) => {
            seal_step_validators(cx, &kinds, &mut outcome);
            let is_error = outcome.is_error();
            let text = outcome.text();
            StatefulReply::from(CallToolResult {
                content: vec![crate::protocol::content::Content::text(text)],
                structured_content: serde_json::to_value(&outcome).ok(),
                is_error,
                meta: None,
            })
        }
        Err(error) => error.into_tool_error().into_result().into(),
    }
}

/// Seals the validator of every resumption record in a step's outcome.
fn seal_step_validators(cx: &Context, kinds: &[(String, &'static str)], outcome: &mut StepOutcome) {
    let seal_one = |resumption: &mut Resumption| {
        if let Some((_, kind)) = kinds
            .iter()
            .find(|(handle, _)| *handle == resumption.handle)
        {
            seal_validator(cx, kind, resumption);
        }
    };
    match outcome {
        StepOutcome::Applied(applied) => {
            applied
                .resources
                .iter_mut()
                .for_each(|part| seal_one(&mut part.resumption));
        }
        StepOutcome::StaleView(stale) => {
            stale
                .moved
                .iter_mut()
                .for_each(|part| seal_one(&mut part.resumption));
        }
        StepOutcome::Replayed(replayed) => {
            replayed
                .current
                .iter_mut()
                .for_each(|snapshot| seal_one(&mut snapshot.resumption));
        }
        _ => {}
    }
}
