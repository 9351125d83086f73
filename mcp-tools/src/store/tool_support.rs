//! Runtime support for the stateful tool kinds of `#[tool]` (`creates`, `reads`, `mutates`),
//! reached by generated code through `::mcp_tools::__private`. Not public API.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::value::{MapAccessDeserializer, StringDeserializer};
use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::contract::{
    ConflictPolicy, CreateRequest, Creation, MutationRequest, ReadRequest, Transition,
};
use super::entity::Entity;
use super::fingerprint::{Fingerprint, canonical_json};
use super::outcome::{MutationOutcome, ReadOutcome, Rejected, Snapshot};
use super::registry::SharedStore;
use crate::context::Context;
use crate::tools::content::{CallToolResult, IntoToolError, ToolError};
use crate::tools::extract::MISSING_STATE;

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
        let decoded = seed.deserialize(StringDeserializer::<M::Error>::new(key.clone()))?;
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
                 the last read or applied result you planned from. If the {kind} changed since, \
                 nothing is applied and the result is `stale_view` with what changed."
            ),
        );
    }
    if injected.operation_id && injected.handle.is_empty() {
        describe(
            "operation_id",
            format!(
                "A new unique id you choose for this {kind} (for example a UUID). To retry after a \
                 lost or interrupted response, send the same id with the same arguments: the \
                 recorded outcome comes back with the same handle and no second {kind} is created. \
                 Use a new id for every new {kind}."
            ),
        );
    } else if injected.operation_id {
        describe(
            "operation_id",
            "A new unique id you choose for this change (for example a UUID). To retry after a \
             lost or interrupted response, send the same id with the same arguments: the recorded \
             outcome comes back and nothing is applied twice. Use a new id for every new change, \
             including a re-planned change after `stale_view`."
                .to_owned(),
        );
    }
    schema
}

/// The output schema of `creates` and `mutates` tools: the [`MutationOutcome`] union.
pub fn mutation_output_schema() -> Value {
    object_root(MutationOutcome::json_schema())
}

/// The output schema of `reads` tools: the [`ReadOutcome`] union.
pub fn read_output_schema() -> Value {
    object_root(ReadOutcome::json_schema())
}

fn object_root(mut schema: Value) -> Value {
    if let Value::Object(object) = &mut schema {
        object.remove("title");
        object
            .entry("type")
            .or_insert_with(|| Value::String("object".to_owned()));
    }
    schema
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
) -> CallToolResult {
    let mut request = CreateRequest::deferred(R::kind(), cx.principal().clone(), creation);
    if let Some(operation_id) = spec.operation_id {
        request = request.operation(operation_id, fingerprint(spec.tool, spec.arguments, raw));
    }
    match store.create(request).await {
        Ok(outcome) => outcome.into_call_tool_result(),
        Err(error) => error.into_tool_error().into_result(),
    }
}

/// Reads the current version for a `reads` tool: the snapshot and the typed resource, or the
/// result the call ends with (`NOT_FOUND`, `EXPIRED`, a store failure).
pub async fn read<R: IsEntity>(
    store: &SharedStore,
    cx: &Context,
    handle: String,
) -> Result<(Snapshot, R), CallToolResult> {
    let request = ReadRequest {
        kind: R::kind(),
        principal: cx.principal().clone(),
        handle,
    };
    match store.read(request).await {
        Ok(ReadOutcome::Current(snapshot)) => match R::deserialize(&snapshot.state) {
            Ok(resource) => Ok((snapshot, resource)),
            Err(error) => Err(ToolError::new(
                "INVALID_STATE",
                format!("stored {} is unreadable: {error}", R::KIND),
            )
            .into_result()),
        },
        Ok(rejected @ ReadOutcome::Rejected(_)) => Err(rejected.into_call_tool_result()),
        Err(error) => Err(error.into_tool_error().into_result()),
    }
}

/// The result of a `reads` tool: the snapshot whose `state` is what the tool function returned.
pub fn read_result<T: Serialize>(
    mut snapshot: Snapshot,
    view: Result<T, ToolError>,
) -> CallToolResult {
    match view.and_then(|view| {
        serde_json::to_value(view).map_err(|error| {
            ToolError::new(
                "OUTPUT_NOT_SERIALIZABLE",
                format!("The tool produced output that cannot be serialized: {error}"),
            )
        })
    }) {
        Ok(state) => {
            snapshot.state = state;
            ReadOutcome::Current(snapshot).into_call_tool_result()
        }
        Err(error) => ReadOutcome::Rejected(Rejected::domain(&error)).into_call_tool_result(),
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
    /// The caller's `expected_version`, unless the tool opted out.
    pub expected_version: Option<u64>,
    /// The caller's `operation_id`, unless the tool opted out.
    pub operation_id: Option<String>,
    /// The resource type.
    pub resource: PhantomData<fn() -> R>,
}

/// Runs a `mutates` tool's transition in the store's atomic boundary.
pub async fn mutate<R: IsEntity>(
    store: &SharedStore,
    cx: &Context,
    spec: MutationSpec<R>,
    raw: &Value,
    transition: Transition,
) -> CallToolResult {
    let mut request =
        MutationRequest::new(R::kind(), cx.principal().clone(), spec.handle).policy(spec.policy);
    if let Some(version) = spec.expected_version {
        request = request.expect_version(version);
    }
    if let Some(operation_id) = spec.operation_id {
        request = request.operation(operation_id, fingerprint(spec.tool, spec.arguments, raw));
    }
    match store.mutate(request, transition).await {
        Ok(outcome) => outcome.into_call_tool_result(),
        Err(error) => error.into_tool_error().into_result(),
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
