//! What a caller should do after an error, and the codes a tool's own errors declare.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What the model should do next: the hint every refusal carries, in the outcome, in its text
/// and in the tool's output schema.
///
/// Serialized as a `snake_case` string. Besides the hints the framework knows, an author can
/// name one of their own ([`Recovery::Other`]); clients that do not know it treat it as `stop`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recovery {
    /// Read the resource again, re-plan from the current state, retry with a new operation id.
    RefreshAndReplan,
    /// Show the current state to whoever decided the change and get it confirmed before retrying.
    Reconfirm,
    /// Do not retry: the request cannot succeed as it is.
    Stop,
    /// The resource is gone; create a new one.
    CreateNew,
    /// Send this request again with a fresh operation id.
    NewOperationId,
    /// Send the same request again later, with the same operation id.
    RetryLater,
    /// A hint of the tool's own (`snake_case`), explained by the code's description.
    Other(Cow<'static, str>),
}

const KNOWN: [(&str, Recovery); 6] = [
    ("refresh_and_replan", Recovery::RefreshAndReplan),
    ("reconfirm", Recovery::Reconfirm),
    ("stop", Recovery::Stop),
    ("create_new", Recovery::CreateNew),
    ("new_operation_id", Recovery::NewOperationId),
    ("retry_later", Recovery::RetryLater),
];

impl Recovery {
    /// The serialized name.
    pub fn as_str(&self) -> &str {
        match self {
            Recovery::RefreshAndReplan => "refresh_and_replan",
            Recovery::Reconfirm => "reconfirm",
            Recovery::Stop => "stop",
            Recovery::CreateNew => "create_new",
            Recovery::NewOperationId => "new_operation_id",
            Recovery::RetryLater => "retry_later",
            Recovery::Other(name) => name,
        }
    }

    /// The hint a name stands for: a known one, or [`Recovery::Other`].
    pub fn from_name(name: &str) -> Recovery {
        KNOWN
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, recovery)| recovery.clone())
            .unwrap_or_else(|| Recovery::Other(Cow::Owned(name.to_owned())))
    }

    /// The hint as a sentence for the model.
    pub fn instruction(&self) -> String {
        match self {
            Recovery::RefreshAndReplan => "Read the resource again, re-plan from its current state and retry with a new operation_id.".to_owned(),
            Recovery::Reconfirm => "Show the current state to whoever asked for this change and get it confirmed before retrying.".to_owned(),
            Recovery::Stop => "Do not retry this request.".to_owned(),
            Recovery::CreateNew => "Create a new one to continue.".to_owned(),
            Recovery::NewOperationId => "Retry with a new operation_id.".to_owned(),
            Recovery::RetryLater => "Retry later with the same operation_id.".to_owned(),
            Recovery::Other(name) => format!("Next step: {name}."),
        }
    }

    /// The names of the hints the framework knows, in a fixed order.
    pub fn known_names() -> impl Iterator<Item = &'static str> {
        KNOWN.iter().map(|(name, _)| *name)
    }
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Recovery {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Recovery {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = Cow::<str>::deserialize(deserializer)?;
        Ok(Recovery::from_name(&name))
    }
}

impl JsonSchema for Recovery {
    fn schema_name() -> Cow<'static, str> {
        "Recovery".into()
    }

    fn json_schema(_generator: &mut SchemaGenerator) -> Schema {
        let known: Vec<&str> = Recovery::known_names().collect();
        json_schema!({
            "description": "What to do next. A hint the tool declares of its own is explained by its code's description; treat an unknown one as `stop`.",
            "anyOf": [
                { "type": "string", "enum": known },
                { "type": "string", "pattern": "^[a-z][a-z0-9_]*$" }
            ]
        })
    }
}

/// A code a tool's own error type can answer with, as that type declares it: what the code
/// means and what to do about it. `#[derive(IntoToolError)]` lists one per variant; the stateful
/// tools publish them in their output schema and their concurrency contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainCode {
    /// The code, `UPPER_SNAKE_CASE` by convention.
    pub code: &'static str,
    /// What it means, for the model and the docs (the variant's doc comment).
    pub description: &'static str,
    /// What to do next, when the code implies it.
    pub recovery: Option<Recovery>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_kept() {
        for name in Recovery::known_names().chain(["ask_the_owner"]) {
            let recovery: Recovery = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(recovery.as_str(), name);
            assert_eq!(serde_json::to_value(&recovery).unwrap(), name);
        }
        assert_eq!(
            Recovery::from_name("ask_the_owner"),
            Recovery::Other("ask_the_owner".into())
        );
        assert_eq!(Recovery::from_name("stop"), Recovery::Stop);
    }

    /// The published schema admits every hint a value can serialize to, and nothing else.
    #[test]
    fn the_schema_admits_known_and_custom_hints_only() {
        let schema = crate::protocol::schema_generator().into_root_schema_for::<Recovery>();
        let validator = jsonschema::validator_for(&schema.to_value()).unwrap();
        for hint in Recovery::known_names().chain(["ask_the_owner"]) {
            assert!(validator.is_valid(&serde_json::json!(hint)), "{hint}");
        }
        for bad in [
            serde_json::json!("Ask The Owner"),
            serde_json::json!(""),
            serde_json::json!(3),
        ] {
            assert!(!validator.is_valid(&bad), "{bad}");
        }
        assert_eq!(Recovery::schema_name(), "Recovery");
    }

    /// The hints `#[derive(IntoToolError)]` and `#[recovery]` accept are exactly the ones this
    /// type knows, each naming the variant that serializes to its name.
    #[test]
    fn the_macros_know_the_hints_the_runtime_knows() {
        let macros = mcp_tools_derive::__known_recoveries!();
        let names: Vec<&str> = macros.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, Recovery::known_names().collect::<Vec<_>>());
        for (name, recovery) in macros {
            assert_eq!(recovery.as_str(), name);
            assert_eq!(Recovery::from_name(name), recovery);
        }
    }
}
