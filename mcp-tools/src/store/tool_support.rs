//! Runtime support for the stateful tool kinds of `#[tool]` (`creates`, `reads`, `mutates`),
//! reached by generated code through `::mcp_tools::__private`. Not public API.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::value::{MapAccessDeserializer, StrDeserializer};
use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::contract::{
    ConflictPolicy, CreateRequest, Creation, MutationRequest, ReadRequest, Transition,
};
use super::entity::Entity;
use super::fingerprint::{Fingerprint, canonical_json};
use super::outcome::{
    MutationOutcome, ReadOutcome, RecordedOutcome, Rejected, Replayed, Resumption, Snapshot,
    StaleView,
};
use super::registry::SharedStore;
use crate::__private::Outcome;
use crate::auth::Principal;
use crate::context::Context;
use crate::protocol::content::CallToolResult;
use crate::protocol::framework::code::MISSING_STATE;
use crate::protocol::framework::{CONFIRMATION_META_KEY, RECONFIRM_INPUT_KEY, VALIDATOR_META_KEY};
use crate::protocol::input::{InputRequired, Reply};
use crate::protocol::seal::{Binding, tool_call_target};
use crate::protocol::tool_error::{IntoToolError, ToolError};

/// Decoded tool arguments together with the JSON they were decoded from: the operation-id
/// ledger fingerprints the payload as sent.
pub struct WithRaw<T> {
    /// The arguments as sent.
    pub raw: Value,
    /// The decoded arguments.
    pub args: T,
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for WithRaw<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(WithRawVisitor(PhantomData))
    }
}

struct WithRawVisitor<T>(PhantomData<fn() -> T>);

impl<'de, T: DeserializeOwned> Visitor<'de> for WithRawVisitor<T> {
    type Value = WithRaw<T>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an object of tool arguments")
    }

    /// Decodes `T` entry by entry from the caller's map while keeping a copy of each entry, so
    /// a failure surfaces while the caller's map is at the failing entry and can be located.
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<WithRaw<T>, M::Error> {
        let mut raw = Map::new();
        let args = T::deserialize(MapAccessDeserializer::new(Recording {
            map: &mut map,
            raw: &mut raw,
            key: None,
        }))?;
        while let Some((key, value)) = map.next_entry::<String, Value>()? {
            raw.insert(key, value);
        }
        Ok(WithRaw {
            raw: Value::Object(raw),
            args,
        })
    }
}

/// A map that hands its entries on and records them.
struct Recording<'m, 'r, M> {
    map: &'m mut M,
    raw: &'r mut Map<String, Value>,
    key: Option<String>,
}

impl<'de, M: MapAccess<'de>> MapAccess<'de> for Recording<'_, '_, M> {
    type Error = M::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, M::Error> {
        let Some(key) = self.map.next_key::<String>()? else {
            return Ok(None);
        };
        let decoded = seed.deserialize(StrDeserializer::<M::Error>::new(&key))?;
        self.key = Some(key);
        Ok(Some(decoded))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, M::Error> {
        let value: Value = self.map.next_value()?;
        let decoded = seed.deserialize(value.clone()).map_err(M::Error::custom);
        if let Some(key) = self.key.take() {
            self.raw.insert(key, value);
        }
        decoded
    }
}

impl<T: JsonSchema> JsonSchema for WithRaw<T> {
    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }

    fn inline_schema() -> bool {
        T::inline_schema()
    }
}

/// Which of the arguments the macro adds a stateful tool has.
#[derive(Debug, Clone, Copy)]
pub struct Injected {
    /// The handle argument's wire name, e.g. `basket_id`; empty for a `creates` tool, which has
    /// no handle argument.
    pub handle: &'static str,
    /// Whether `expected_version` is an argument.
    pub expected_version: bool,
    /// Whether `operation_id` is an argument.
    pub operation_id: bool,
    /// Whether `basis_version` is an argument (every `reads` tool).
    pub basis_version: bool,
}

/// The input schema of a stateful tool: the arguments struct's schema, with descriptions of the
/// added arguments that tell a model what they mean and where to find them.
pub fn input_schema<T: JsonSchema, R: IsEntity>(
    generator: &mut SchemaGenerator,
    injected: Injected,
) -> Value {
    let mut schema = crate::__private::input_schema::<T>(generator);
    let kind = R::KIND;
    let prefix = R::PREFIX;
    let mut describe = |property: &str, text: String| {
        if let Some(Value::Object(object)) = schema.pointer_mut(&format!("/properties/{property}"))
        {
            object.insert("description".to_owned(), Value::String(text));
        }
    };
    if !injected.handle.is_empty() {
        describe(
            injected.handle,
            format!(
                "Which {kind}: its handle (`{prefix}_...`), as returned in `handle` and \
                 `resumption.handle` by the tool that created it or by any earlier result about it."
            ),
        );
    }
    if injected.expected_version {
        describe(
            "expected_version",
            format!(
                "The version of the {kind} this change is based on: `resumption.basis_version` of \
                 the last read or applied result you planned from, or its `resumption.validator` \
                 string. Required, unless the request's `_meta` carries that validator under \
                 `{VALIDATOR_META_KEY}`. If the {kind} changed since, nothing is applied and the \
                 result is `stale_view` with what changed."
            ),
        );
    }
    if injected.basis_version {
        describe(
            "basis_version",
            format!(
                "Optional: the version of the {kind} you last saw (`resumption.basis_version`, or \
                 its `resumption.validator`). The answer then says in `changes` what changed \
                 since, so you can tell whether a plan made at that version still holds."
            ),
        );
    }
    if injected.operation_id && injected.handle.is_empty() {
        describe(
            "operation_id",
            format!(
                "A new UUID you generate for this {kind} (or another unguessable id of at least 22 \
                 URL-safe characters; shorter ids are refused when callers are not authenticated). To retry after a \
                 lost or interrupted response, send the same id with the same arguments: the \
                 recorded outcome comes back with the same handle and no second {kind} is created. \
                 Use a new id for every new {kind}."
            ),
        );
    } else if injected.operation_id {
        describe(
            "operation_id",
            "A new UUID you generate for this change (or another unguessable id of at least 22 \
             URL-safe characters; shorter ids are refused when callers are not authenticated). To retry after a \
             lost or interrupted response, send the same id with the same arguments: the recorded \
             outcome comes back and nothing is applied twice. Use a new id for every new change, \
             including a re-planned change after `stale_view`."
                .to_owned(),
        );
    }
    schema
}

pub use super::published::{PublishedPolicy, StatefulContract, ToolKind, no_domain_codes};

/// The `expected_version` argument: a version number, or the validator a result issued for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// `resumption.basis_version`.
    Number(u64),
    /// `resumption.validator`.
    Validator(String),
}

impl<'de> Deserialize<'de> for ExpectedVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl Visitor<'_> for Either {
            type Value = ExpectedVersion;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a version number (1 or more) or a validator string")
            }
            fn visit_u64<E: serde::de::Error>(self, version: u64) -> Result<Self::Value, E> {
                if version == 0 {
                    return Err(E::custom("versions start at 1"));
                }
                Ok(ExpectedVersion::Number(version))
            }
            fn visit_i64<E: serde::de::Error>(self, version: i64) -> Result<Self::Value, E> {
                u64::try_from(version)
                    .map_err(|_| E::custom("versions start at 1"))
                    .and_then(|version| self.visit_u64(version))
            }
            fn visit_f64<E: serde::de::Error>(self, version: f64) -> Result<Self::Value, E> {
                // `3.0` is the integer 3 to JSON Schema, so it is to the decoder too.
                if version.fract() == 0.0 && (1.0..9.0e15).contains(&version) {
                    return Ok(ExpectedVersion::Number(version as u64));
                }
                Err(E::custom("a version is a whole number, 1 or more"))
            }
            fn visit_str<E: serde::de::Error>(self, validator: &str) -> Result<Self::Value, E> {
                Ok(ExpectedVersion::Validator(validator.to_owned()))
            }
        }
        deserializer.deserialize_any(Either)
    }
}

impl JsonSchema for ExpectedVersion {
    fn schema_name() -> Cow<'static, str> {
        "ExpectedVersion".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // One schema rather than `anyOf`, so a violation names what is wrong with the value
        // (`minimum` constrains only numbers, the lengths only strings).
        schemars::json_schema!({
            "type": ["integer", "string"],
            "minimum": 1,
            "minLength": 1,
            "maxLength": 200
        })
    }
}

/// The version a call's precondition names, after reading the argument and the `_meta` route;
/// `Err` with the result the call ends with when they are missing, malformed, forged or disagree.
fn precondition(
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
fn unguessable(cx: &Context, operation_id: &str) -> Result<(), CallToolResult> {
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
fn confirmed_version<R: IsEntity>(
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
fn ask_to_reconfirm<R: IsEntity>(
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

/// Records which state a stateful call acted on into the request's span (declared in
/// `dispatch/trace.rs`): the handle, the version the caller expected, the version it ended at
/// and the outcome. Where callers are anonymous a handle is a bearer capability, so the span
/// gets a keyed digest of it instead (the same on every replica sharing the cursor key).
fn record_state(
    cx: &Context,
    handle: Option<&str>,
    expected: Option<u64>,
    outcome: &MutationOutcome,
) {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    let version = match outcome {
        MutationOutcome::Applied(applied) => Some(applied.version),
        MutationOutcome::StaleView(stale) => Some(stale.current_version),
        MutationOutcome::Replayed(replayed) => replayed.current.as_ref().map(|now| now.version),
        MutationOutcome::Rejected(_) => None,
    };
    let label = match outcome {
        MutationOutcome::Applied(_) => "applied",
        MutationOutcome::StaleView(_) => "stale_view",
        MutationOutcome::Replayed(_) => "replayed",
        MutationOutcome::Rejected(_) => "rejected",
    };
    record_fields(
        cx,
        &span,
        handle.or(outcome.committed_handle()),
        expected,
        version,
        label,
    );
}

fn record_fields(
    cx: &Context,
    span: &tracing::Span,
    handle: Option<&str>,
    expected: Option<u64>,
    version: Option<u64>,
    outcome: &str,
) {
    if let Some(handle) = handle {
        match (cx.principal(), cx.seal()) {
            (Principal::Anonymous, Some(seal)) => {
                span.record("mcp_tools.state.handle_digest", seal.trace_digest(handle));
            }
            (Principal::Anonymous, None) => {}
            (Principal::Subject(_), _) => {
                span.record("mcp_tools.state.handle", handle);
            }
        }
    }
    if let Some(expected) = expected {
        span.record("mcp_tools.state.expected_version", expected);
    }
    if let Some(version) = version {
        span.record("mcp_tools.state.version", version);
    }
    span.record("mcp_tools.state.outcome", outcome);
}

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

/// One of a tool's own arguments, as the payload fingerprint sees it.
#[derive(Debug, Clone, Copy)]
pub struct PayloadArgument {
    /// The wire name.
    pub name: &'static str,
    /// Whether it is an `Option`: `null` means the same as leaving it out.
    pub optional: bool,
    /// The JSON of its default (`#[arg(default)]`): sending it means the same as leaving the
    /// argument out. `None` inside when the default does not serialize.
    pub default: Option<fn() -> Option<Value>>,
}

impl PayloadArgument {
    /// Whether `value` says nothing that leaving the argument out would not.
    fn is_implied(&self, value: &Value) -> bool {
        if self.optional && value.is_null() {
            return true;
        }
        self.default
            .and_then(|default| default())
            .is_some_and(|default| canonical_json(&default) == canonical_json(value))
    }
}

/// The fingerprint of a call's payload: the tool name and every argument but `operation_id`,
/// without the members that mean the same as their absence (`null` for an optional argument,
/// the default for one with a default), so honest retries by clients that write arguments
/// differently still match.
pub fn fingerprint(tool: &str, arguments: &[PayloadArgument], raw: &Value) -> Fingerprint {
    match raw {
        Value::Object(object) => Fingerprint::of_call_members(tool, object, |key, value| {
            key != "operation_id"
                && !arguments
                    .iter()
                    .any(|argument| argument.name == key && argument.is_implied(value))
        }),
        other => Fingerprint::of_call(tool, other),
    }
}

/// Holds for the type of an argument with a default of a `creates` or `mutates` tool.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has a default in a tool with an operation id, so it must implement `Serialize`",
    label = "this parameter's type must implement `Serialize`",
    note = "a retry that sends the default and one that leaves the argument out are the same request: the operation-id fingerprint compares the argument with the JSON of its default",
    note = "derive `serde::Serialize` for the type, or remove `#[arg(default)]`"
)]
pub trait DefaultArgument: Serialize {}

impl<T: Serialize> DefaultArgument for T {}

/// The JSON of an argument's default; spanned at the parameter's type by the generated code.
pub fn default_json<T: DefaultArgument>(default: &T) -> Option<Value> {
    serde_json::to_value(default).ok()
}

/// The registered store, or the result the call ends with.
pub fn store(cx: &Context) -> Result<SharedStore, CallToolResult> {
    match cx.state::<SharedStore>() {
        Some(store) => Ok(store.clone()),
        None => Err(ToolError::new(
            MISSING_STATE,
            "The server has no state store: register one with `McpServer::builder(..).store(..)`.",
        )
        .into_result()),
    }
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
pub async fn create<'a, R: IsEntity>(
    store: &'a SharedStore,
    cx: &Context,
    spec: CreateSpec<R>,
    raw: &Value,
    creation: Creation<'a>,
) -> Outcome {
    if let Some(operation_id) = &spec.operation_id
        && let Err(result) = unguessable(cx, operation_id)
    {
        return result.into();
    }
    let mut request = CreateRequest::deferred(R::kind(), cx.principal().clone(), creation);
    if let Some(operation_id) = spec.operation_id {
        request = request.operation(operation_id, fingerprint(spec.tool, spec.arguments, raw));
    }
    match store.create(request).await {
        Ok(mut outcome) => {
            record_state(cx, None, None, &outcome);
            seal_validators(cx, R::KIND, &mut outcome);
            Outcome(outcome.into_reply())
        }
        Err(error) => error.into_tool_error().into_result().into(),
    }
}

/// Reads the current version for a `reads` tool: the snapshot and the typed resource, or the
/// result the call ends with (`NOT_FOUND`, `EXPIRED`, a store failure).
pub async fn read<R: IsEntity>(
    store: &SharedStore,
    cx: &Context,
    handle: String,
    basis: Option<ExpectedVersion>,
) -> Result<(Snapshot, R), CallToolResult> {
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
        Ok(ReadOutcome::Current(mut snapshot)) => match R::deserialize(&*snapshot.state) {
            Ok(resource) => {
                seal_validator(cx, R::KIND, &mut snapshot.resumption);
                Ok((snapshot, resource))
            }
            Err(error) => Err(ToolError::new(
                crate::protocol::framework::code::INVALID_STATE,
                format!("stored {} is unreadable: {error}", R::KIND),
            )
            .into_result()),
        },
        Ok(rejected @ ReadOutcome::Rejected(_)) => Err(rejected.into_call_tool_result()),
        Err(error) => Err(error.into_tool_error().into_result()),
    }
}

/// The result of a `reads` tool: the snapshot whose `state` is what the tool function returned.
pub fn read_result<T: Serialize>(snapshot: Snapshot, view: Result<T, ToolError>) -> Outcome {
    let rendered = view.and_then(|view| {
        snapshot
            .render_with(&view)
            .map_err(ToolError::output_not_serializable)
    });
    match rendered {
        Ok(rendered) => Outcome(Reply::Rendered(rendered)),
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
    store: &SharedStore,
    cx: &Context,
    spec: MutationSpec<R>,
    raw: &Value,
    transition: Transition,
) -> Outcome {
    if let Some(operation_id) = &spec.operation_id
        && let Err(result) = unguessable(cx, operation_id)
    {
        return result.into();
    }
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
            if let Some(handle) = &traced {
                record_state(cx, Some(handle), expected_version, &outcome);
            }
            seal_validators(cx, R::KIND, &mut outcome);
            if reconfirm
                && let Some(ask) =
                    ask_to_reconfirm::<R>(cx, tool, raw, confirmed.is_some(), &mut outcome)
            {
                return Outcome(Reply::InputRequired(ask));
            }
            Outcome(outcome.into_reply())
        }
        Err(error) => error.into_tool_error().into_result().into(),
    }
}

/// Holds for every parameter type of a `mutates` tool besides the resource.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a parameter of a `mutates` tool",
    label = "this parameter's type must implement `Clone`",
    note = "the transition may run again on a newer version of the entity (`on_conflict = rebase`), so it receives a fresh copy of each argument every time"
)]
pub trait TransitionArgument: Clone + Send + 'static {}

impl<T: Clone + Send + 'static> TransitionArgument for T {}

/// A fresh copy of a `mutates` tool's argument for one run of the transition; spanned at the
/// parameter's type by the generated code.
pub fn fresh<T: TransitionArgument>(value: &T) -> T {
    value.clone()
}

/// Holds for the type named by `creates = `, `reads = ` and `mutates = `.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an entity",
    label = "`creates`, `reads` and `mutates` name a type that implements `mcp_tools::store::Entity`",
    note = "add `#[derive(mcp_tools::store::Entity)]` and `#[entity(kind = \"...\", prefix = \"...\")]` to the type"
)]
pub trait IsEntity: Entity {}

impl<R: Entity> IsEntity for R {}

/// Compile-time assertion, spanned at the type named by the tool kind.
pub const fn assert_resource<R: IsEntity>() {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn thirty_two() -> Option<Value> {
        Some(json!(32))
    }

    const ARGUMENTS: &[PayloadArgument] = &[
        PayloadArgument {
            name: "model",
            optional: true,
            default: None,
        },
        PayloadArgument {
            name: "gib",
            optional: false,
            default: Some(thirty_two),
        },
        PayloadArgument {
            name: "ratio",
            optional: false,
            default: None,
        },
    ];

    fn of(raw: Value) -> Fingerprint {
        fingerprint("t", ARGUMENTS, &raw)
    }

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

    #[test]
    fn a_version_is_a_whole_number_from_one() {
        let decode = |value: Value| serde_json::from_value::<ExpectedVersion>(value).ok();
        assert_eq!(decode(json!(3)), Some(ExpectedVersion::Number(3)));
        assert_eq!(decode(json!(3.0)), Some(ExpectedVersion::Number(3)));
        for not_a_version in [
            json!(0),
            json!(-3),
            json!(0.0),
            json!(-3.0),
            json!(1.5),
            json!(1e16),
        ] {
            assert_eq!(decode(not_a_version.clone()), None, "{not_a_version}");
        }
    }

    #[test]
    fn what_means_the_same_as_absence_is_left_out() {
        let bare = of(json!({"basket_id": "b", "operation_id": "1"}));
        assert_eq!(of(json!({"basket_id": "b"})), bare);
        assert_eq!(of(json!({"basket_id": "b", "model": null})), bare);
        assert_eq!(of(json!({"basket_id": "b", "gib": 32})), bare);
        assert_eq!(of(json!({"basket_id": "b", "gib": 32.0})), bare);
        assert_eq!(
            of(json!({"basket_id": "b", "model": null, "gib": 32, "operation_id": "2"})),
            bare
        );
        assert_eq!(
            of(json!({"ratio": 2})),
            of(json!({"ratio": 2.0})),
            "a whole number is one number however it is written"
        );
    }

    #[test]
    fn a_real_value_still_counts() {
        let bare = of(json!({"basket_id": "b"}));
        assert_ne!(of(json!({"basket_id": "b", "model": "Laptop 16"})), bare);
        assert_ne!(of(json!({"basket_id": "b", "gib": 64})), bare);
        assert_ne!(
            of(json!({"basket_id": "b", "gib": null})),
            bare,
            "not optional"
        );
        assert_ne!(
            of(json!({"basket_id": "b", "ratio": null})),
            bare,
            "not optional"
        );
        assert_ne!(
            of(json!({"basket_id": null})),
            of(json!({})),
            "not an argument of the tool"
        );
        assert_ne!(
            fingerprint("t", &[], &json!({"model": null})),
            fingerprint("t", &[], &json!({})),
            "nothing is left out without the description"
        );
    }
}
