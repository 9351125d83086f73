//! What a stateful tool publishes in `tools/list`: its own outcome union as the output schema,
//! typed with its entity's view, its result and its codes; and its concurrency contract, the
//! machine-readable `_meta` a harness acts on.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use super::bounds::IsEntity;
use crate::protocol::framework::code;
use crate::protocol::recovery::{DomainCode, Recovery};
use crate::store::{MutationOutcome, ReadOutcome};

/// The kind of a stateful tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolKind {
    /// Makes a new resource and mints its handle.
    Creates,
    /// Reads a resource; changes nothing.
    Reads,
    /// Changes a resource through a transition.
    Mutates,
}

impl ToolKind {
    fn as_str(self) -> &'static str {
        match self {
            ToolKind::Creates => "creates",
            ToolKind::Reads => "reads",
            ToolKind::Mutates => "mutates",
        }
    }
}

/// How a `mutates` tool answers a caller whose view is out of date, as published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishedPolicy {
    /// `stale_view`, re-plan.
    Reject,
    /// Re-applied when the intervening changes touched none of `touches`.
    Rebase,
    /// `stale_view` asking for the change to be confirmed again.
    Reconfirm,
    /// `stale_view` only when a collection item the change reaches moved.
    Items,
}

impl PublishedPolicy {
    fn as_str(self) -> &'static str {
        match self {
            PublishedPolicy::Reject => "reject",
            PublishedPolicy::Rebase => "rebase",
            PublishedPolicy::Reconfirm => "reconfirm",
            PublishedPolicy::Items => "items",
        }
    }
}

/// Everything a stateful tool declares about its contract; the generated code keeps one per
/// tool in a constant.
#[derive(Debug, Clone, Copy)]
pub struct StatefulContract {
    /// The tool kind.
    pub kind: ToolKind,
    /// The handle argument's wire name; empty for `creates`.
    pub handle: &'static str,
    /// Whether `expected_version` is an argument.
    pub expected_version: bool,
    /// Whether `operation_id` is an argument.
    pub operation_id: bool,
    /// The conflict policy of a `mutates` tool.
    pub policy: PublishedPolicy,
    /// The Rust names of the fields a rebasing tool works on.
    pub touches: &'static [&'static str],
    /// Whether the tool is declared to end the resource's life (`terminal`).
    pub terminal: bool,
    /// The kinds of the effects the tool emits.
    pub effects: &'static [&'static str],
    /// The codes the tool's own error type declares ([`IntoToolError::declared_codes`](crate::IntoToolError::declared_codes));
    /// `None` when the set is open.
    pub domain_codes: fn() -> Option<&'static [DomainCode]>,
}

/// The declared codes of a tool function that cannot fail: none.
pub fn no_domain_codes() -> Option<&'static [DomainCode]> {
    Some(&[])
}

fn framework(code: &'static str, description: &'static str, recovery: Recovery) -> DomainCode {
    DomainCode {
        code,
        description,
        recovery: Some(recovery),
    }
}

impl StatefulContract {
    /// The codes the framework itself can answer this tool with, in a fixed order.
    pub fn framework_codes(&self) -> Vec<DomainCode> {
        let mut codes = Vec::new();
        if self.kind != ToolKind::Creates {
            codes.push(framework(
                code::NOT_FOUND,
                "No resource with this handle is available to the caller.",
                Recovery::Stop,
            ));
            codes.push(framework(
                code::EXPIRED,
                "The resource outlived its time to live.",
                Recovery::CreateNew,
            ));
        }
        if self.kind == ToolKind::Reads {
            codes.push(framework(
                code::INVALID_VALIDATOR,
                "The validator sent as `basis_version` was not issued for this resource by this server.",
                Recovery::RefreshAndReplan,
            ));
            codes.push(framework(
                code::FUTURE_VERSION,
                "The basis version is one the resource never reached.",
                Recovery::RefreshAndReplan,
            ));
        }
        if self.kind == ToolKind::Mutates {
            codes.push(framework(
                code::TERMINAL,
                "The resource is finished and accepts no further change.",
                Recovery::Stop,
            ));
            if self.expected_version {
                codes.push(framework(
                    code::STALE_VIEW,
                    "The resource changed after the expected version (the `stale_view` outcome).",
                    match self.policy {
                        PublishedPolicy::Reconfirm => Recovery::Reconfirm,
                        _ => Recovery::RefreshAndReplan,
                    },
                ));
                if self.policy == PublishedPolicy::Reconfirm {
                    codes.push(framework(
                        code::NOT_CONFIRMED,
                        "Whoever was asked to confirm the change against the current state declined.",
                        Recovery::Stop,
                    ));
                    codes.push(framework(
                        code::INVALID_CONFIRMATION,
                        "The confirmation sent was not issued for this request, or it expired.",
                        Recovery::Reconfirm,
                    ));
                }
                codes.push(framework(
                    code::INVALID_VALIDATOR,
                    "The validator sent was not issued for this resource by this server.",
                    Recovery::RefreshAndReplan,
                ));
                codes.push(framework(
                    code::FUTURE_VERSION,
                    "The expected version is one the resource never reached: read it first.",
                    Recovery::RefreshAndReplan,
                ));
            }
        }
        if self.operation_id {
            codes.push(framework(
                code::GUESSABLE_OPERATION_ID,
                "Callers are not authenticated and the operation id is not a UUID (or 22 URL-safe characters).",
                Recovery::NewOperationId,
            ));
            codes.push(framework(
                code::OPERATION_ID_REUSED,
                "The operation id was already used for a different request.",
                Recovery::NewOperationId,
            ));
            if self.kind == ToolKind::Creates {
                codes.push(framework(
                    code::OPERATION_IN_PROGRESS,
                    "An earlier request with the same operation id is still running.",
                    Recovery::RetryLater,
                ));
            } else {
                codes.push(framework(
                    code::LEDGER_FULL,
                    "The resource holds the most recorded operations it keeps at once.",
                    Recovery::RetryLater,
                ));
            }
        }
        if self.kind != ToolKind::Reads {
            codes.push(framework(
                code::TRANSITION_PANICKED,
                "The tool failed with an internal error; the same request fails again.",
                Recovery::Stop,
            ));
        }
        codes.push(DomainCode {
            code: code::INVALID_STATE,
            description: "The stored state cannot be read or written as the entity's type.",
            recovery: None,
        });
        if self.kind == ToolKind::Reads {
            codes.push(DomainCode {
                code: code::OUTPUT_NOT_SERIALIZABLE,
                description: "What the tool returned cannot be serialized.",
                recovery: None,
            });
        }
        codes
    }

    /// Every code an outcome of this tool can carry: the framework's, then the tool's own.
    fn codes(&self) -> Vec<DomainCode> {
        let mut codes = self.framework_codes();
        for domain in (self.domain_codes)().unwrap_or_default() {
            if !codes.iter().any(|known| known.code == domain.code) {
                codes.push(domain.clone());
            }
        }
        codes
    }

    /// The `_meta` entry of `tools/list`: what a harness needs to drive the tool safely without
    /// reading its description.
    pub fn meta<R: IsEntity>(&self) -> Value {
        let touches: Vec<&str> = self
            .touches
            .iter()
            .filter_map(|field| R::field_key(field))
            .collect();
        let codes: Vec<Value> = self.codes().iter().map(code_json).collect();
        let mut contract = Map::new();
        contract.insert("resource".into(), json!(R::KIND));
        contract.insert("tool".into(), json!(self.kind.as_str()));
        if !self.handle.is_empty() {
            contract.insert("handle".into(), json!(self.handle));
        }
        if self.kind == ToolKind::Mutates {
            // Which rule the tool follows: no precondition (it commutes with every other
            // change), the version of the whole resource, or the versions of the items it
            // reaches.
            let concurrency = match (self.expected_version, self.policy) {
                (false, _) => "commutes",
                (true, PublishedPolicy::Items) => "per_item",
                (true, _) => "versioned",
            };
            contract.insert("concurrency".into(), json!(concurrency));
            contract.insert("conflict".into(), json!(self.policy.as_str()));
            if self.policy == PublishedPolicy::Rebase {
                contract.insert("touches".into(), json!(touches));
            }
            contract.insert("terminal".into(), json!(self.terminal));
            if !self.effects.is_empty() {
                contract.insert("effects".into(), json!(self.effects));
            }
        }
        contract.insert(
            "precondition".into(),
            if self.expected_version {
                json!("expected_version")
            } else {
                Value::Null
            },
        );
        contract.insert(
            "idempotency".into(),
            if self.operation_id {
                json!("operation_id")
            } else {
                Value::Null
            },
        );
        if !R::COLLECTIONS.is_empty() {
            contract.insert("collections".into(), json!(R::COLLECTIONS));
        }
        contract.insert("codes".into(), Value::Array(codes));
        contract.insert("codes_open".into(), json!((self.domain_codes)().is_none()));
        Value::Object(contract)
    }

    /// The output schema of a `creates` or `mutates` tool: the [`MutationOutcome`] union with
    /// the entity's view in `state`, `current_state` and a replay's `current.state`, `T` in
    /// `result`, and this tool's codes in `code`.
    pub fn mutation_schema<R: IsEntity, T: JsonSchema>(
        &self,
        generator: &mut SchemaGenerator,
    ) -> Value {
        let union = generator.subschema_for::<MutationOutcome>();
        let view = R::view_schema(generator);
        let result = generator.subschema_for::<T>();
        let mut defs = generator.take_definitions(true);
        for (definition, member) in [
            ("Applied", "state"),
            ("StaleView", "current_state"),
            ("Snapshot", "state"),
        ] {
            type_member(&mut defs, definition, member, &view);
        }
        for definition in ["Applied", "RecordedApplied"] {
            type_member(&mut defs, definition, "result", &result);
        }
        self.type_codes(&mut defs);
        root(union, defs)
    }

    /// The output schema of a `reads` tool: the [`ReadOutcome`] union with `T` (what the tool
    /// function returns) in `state` and this tool's codes in `code`.
    pub fn read_schema<T: JsonSchema>(&self, generator: &mut SchemaGenerator) -> Value {
        let union = generator.subschema_for::<ReadOutcome>();
        let state = generator.subschema_for::<T>();
        let mut defs = generator.take_definitions(true);
        type_member(&mut defs, "Snapshot", "state", &state);
        self.type_codes(&mut defs);
        root(union, defs)
    }

    fn type_codes(&self, defs: &mut Map<String, Value>) {
        let mut alternatives: Vec<Value> = self
            .codes()
            .iter()
            .map(|code| {
                json!({
                    "const": code.code,
                    "description": code_description(code),
                })
            })
            .collect();
        if (self.domain_codes)().is_none() {
            alternatives.push(json!({
                "type": "string",
                "description": "A code of the tool's own.",
            }));
        }
        let codes =
            Schema::try_from(json!({ "anyOf": alternatives })).expect("an object is a schema");
        type_member(defs, "Rejected", "code", &codes);
    }
}

fn code_description(code: &DomainCode) -> String {
    match &code.recovery {
        Some(recovery) => format!("{} Recovery: {recovery}.", code.description),
        None => code.description.to_owned(),
    }
}

fn code_json(code: &DomainCode) -> Value {
    json!({
        "code": code.code,
        "description": code.description,
        "recovery": code.recovery.as_ref().map(Recovery::as_str),
    })
}

/// Replaces the schema of `definition.member`, keeping the member's own description.
fn type_member(defs: &mut Map<String, Value>, definition: &str, member: &str, schema: &Schema) {
    let Some(Value::Object(slot)) = defs
        .get_mut(definition)
        .and_then(|definition| definition.pointer_mut(&format!("/properties/{member}")))
    else {
        debug_assert!(false, "{definition}.{member} is not in the outcome schema");
        return;
    };
    let description = slot.remove("description");
    *slot = match schema.as_value() {
        // The member's description says what the value is for here, so it is the one kept.
        Value::Object(typed) => {
            let mut typed = typed.clone();
            if let Some(description) = description {
                typed.insert("description".into(), description);
            }
            typed
        }
        // `true` (any value): wrapped, so the member keeps its description.
        typed => {
            let mut wrapper = Map::new();
            if let Some(description) = description {
                wrapper.insert("description".into(), description);
            }
            wrapper.insert("allOf".into(), json!([typed]));
            wrapper
        }
    };
}

/// A root schema: the union's definition inlined at the top, every definition under `$defs`.
fn root(union: Schema, mut defs: Map<String, Value>) -> Value {
    let mut top = match union
        .as_value()
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| reference.strip_prefix("#/$defs/"))
        .and_then(|name| defs.remove(name))
    {
        Some(Value::Object(top)) => top,
        _ => union.as_value().as_object().cloned().unwrap_or_default(),
    };
    top.remove("title");
    top.entry("type").or_insert_with(|| json!("object"));
    top.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    top.insert("$defs".into(), Value::Object(defs));
    Value::Object(top)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Entity, Lifecycle};
    use serde::{Deserialize, Serialize};

    #[derive(Clone, Serialize, Deserialize, JsonSchema)]
    struct Counter {
        count: u32,
    }

    impl Entity for Counter {
        const KIND: &'static str = "counter";
        const PREFIX: &'static str = "ctr";
        fn lifecycle(&self) -> Lifecycle {
            Lifecycle::Active
        }
    }

    const MUTATES: StatefulContract = StatefulContract {
        kind: ToolKind::Mutates,
        handle: "counter_id",
        expected_version: true,
        operation_id: true,
        policy: PublishedPolicy::Reject,
        touches: &[],
        terminal: false,
        effects: &[],
        domain_codes: counter_codes,
    };

    fn counter_codes() -> Option<&'static [DomainCode]> {
        Some(&[DomainCode {
            code: "TOO_LARGE",
            description: "The count would overflow.",
            recovery: Some(Recovery::Stop),
        }])
    }

    fn open() -> Option<&'static [DomainCode]> {
        None
    }

    /// Every slot the typing fills is where the serialized outcome puts the value; a renamed
    /// member would leave the published schema untyped.
    #[test]
    fn every_typed_member_exists_in_the_unions() {
        let mut generator = crate::protocol::schema_generator();
        let schema = MUTATES.mutation_schema::<Counter, u32>(&mut generator);
        let defs = &schema["$defs"];
        assert_eq!(
            defs["Applied"]["properties"]["state"]["$ref"],
            "#/$defs/Counter"
        );
        assert_eq!(defs["Applied"]["properties"]["result"]["type"], "integer");
        assert_eq!(
            defs["StaleView"]["properties"]["current_state"]["$ref"],
            "#/$defs/Counter"
        );
        assert_eq!(
            defs["Snapshot"]["properties"]["state"]["$ref"],
            "#/$defs/Counter"
        );
        let codes: Vec<&str> = defs["Rejected"]["properties"]["code"]["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|code| code["const"].as_str().unwrap())
            .collect();
        assert!(codes.contains(&"TOO_LARGE") && codes.contains(&"NOT_FOUND"));
        assert!(schema["oneOf"].is_array(), "the union is the root");

        let mut generator = crate::protocol::schema_generator();
        let read = StatefulContract {
            kind: ToolKind::Reads,
            domain_codes: open,
            ..MUTATES
        }
        .read_schema::<Counter>(&mut generator);
        assert_eq!(
            read["$defs"]["Snapshot"]["properties"]["state"]["$ref"],
            "#/$defs/Counter"
        );
        let open = read["$defs"]["Rejected"]["properties"]["code"]["anyOf"]
            .as_array()
            .unwrap();
        assert_eq!(open.last().unwrap()["type"], "string", "an open set");
    }
}
