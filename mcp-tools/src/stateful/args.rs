//! The arguments of a stateful tool: decoded together with the JSON they came in (the payload
//! fingerprint covers what was sent), the version a precondition names, the descriptions of the
//! arguments the macro adds, and the fingerprint of a call's payload.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::value::{MapAccessDeserializer, StrDeserializer};
use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::bounds::IsEntity;
use crate::protocol::framework::VALIDATOR_META_KEY;
use crate::store::Fingerprint;
use crate::store::fingerprint::canonical_json;

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
    /// Whether `items_cursor` is an argument (every `reads` tool): published only for an
    /// entity with collections.
    pub items_cursor: bool,
}

/// The input schema of a stateful tool: the arguments struct's schema, with descriptions of the
/// added arguments that tell a model what they mean and where to find them.
pub fn input_schema<T: JsonSchema, R: IsEntity>(
    generator: &mut SchemaGenerator,
    injected: Injected,
) -> Value {
    let mut schema = crate::tools::arguments_schema::<T>(generator);
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
    if injected.items_cursor && !R::COLLECTIONS.is_empty() {
        let fields = R::COLLECTIONS.join("`, `");
        describe(
            "items_cursor",
            format!(
                "Optional: the `next_cursor` of a collection (`{fields}`) in an earlier read of                  this {kind}, for its next page of items. Without it, each collection shows its                  first page."
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
    if injected.items_cursor
        && R::COLLECTIONS.is_empty()
        && let Some(Value::Object(properties)) = schema.pointer_mut("/properties")
    {
        properties.remove("items_cursor");
    }
    schema
}

/// The largest version any store holds: versions are signed 64-bit integers in SQL.
pub const MAX_VERSION: u64 = i64::MAX as u64;

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
                // Every store answers the same for a version no resource can reach, rather
                // than one of them failing to bind it.
                if version > MAX_VERSION {
                    return Err(E::custom(format!("a version is at most {MAX_VERSION}")));
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
            "maximum": MAX_VERSION,
            "minLength": 1,
            "maxLength": 200
        })
    }
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
    fn a_version_is_a_whole_number_from_one() {
        let decode = |value: Value| serde_json::from_value::<ExpectedVersion>(value).ok();
        assert_eq!(decode(json!(3)), Some(ExpectedVersion::Number(3)));
        assert_eq!(decode(json!(3.0)), Some(ExpectedVersion::Number(3)));
        assert_eq!(
            decode(json!(MAX_VERSION)),
            Some(ExpectedVersion::Number(MAX_VERSION))
        );
        for not_a_version in [
            json!(MAX_VERSION + 1),
            json!(u64::MAX),
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
