//! `Mcp-Param-*` headers: tool arguments a schema marks with `x-mcp-header` are mirrored in
//! headers so intermediaries can route on them; the server checks they agree with the body.

use http::{HeaderMap, HeaderName};
use serde_json::{Map, Value};

use crate::protocol::error::RpcError;
use crate::protocol::headers::{Presence, header_text};

/// One argument mirrored in a header, with its header name parsed once, when the tool is built.
#[derive(Debug, Clone)]
pub(crate) struct ParamHeader {
    /// The `{Name}` as the schema spells it.
    name: String,
    /// `mcp-param-{name}`.
    header: HeaderName,
    /// Property names from the argument root.
    path: Vec<String>,
}

/// Keywords whose value is a map of subschemas.
const SCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];
/// Keywords whose value is a subschema or an array of them.
const SCHEMA_SLOTS: [&str; 16] = [
    "items",
    "prefixItems",
    "additionalItems",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "allOf",
    "anyOf",
    "oneOf",
    "contentSchema",
];

/// Finds the `x-mcp-header` declarations of an input schema, and refuses one that clients would
/// drop the whole tool for: an empty or non-token name, a name used twice (case-insensitively), a
/// property that is not a string, integer or boolean, or a declaration not reachable from the
/// root through `properties` alone (under `items`, `anyOf`, `$defs`...). A client reads a listed
/// tool's declarations with it, to send the headers and to drop a tool it could not call.
pub(crate) fn declarations(schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let mut found = Vec::new();
    walk(schema, &mut Vec::new(), Position::Root, &mut found)?;
    for (i, declaration) in found.iter().enumerate() {
        if let Some(twin) = found[..i]
            .iter()
            .find(|earlier| earlier.header == declaration.header)
        {
            return Err(format!(
                "x-mcp-header {:?} at {} and {:?} at {} name one header: header names must be unique, ignoring case",
                twin.name,
                property_pointer(&twin.path),
                declaration.name,
                property_pointer(&declaration.path),
            ));
        }
    }
    Ok(found)
}

/// Where a subschema sits: only properties reached from the root through `properties` alone may
/// be mirrored in a header.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Position {
    Root,
    Property,
    Elsewhere,
}

fn walk(
    schema: &Value,
    path: &mut Vec<String>,
    position: Position,
    found: &mut Vec<ParamHeader>,
) -> Result<(), String> {
    let Some(object) = schema.as_object() else {
        return Ok(());
    };
    if let Some(name) = object.get("x-mcp-header") {
        let at = pointer(path);
        if position != Position::Property {
            let fix = if path
                .first()
                .is_some_and(|step| step == "$defs" || step == "definitions")
            {
                "the property belongs to a type the schema refers to: put `#[schemars(inline)]` on that type when an argument holds it directly (in a list, a map or an enum it cannot be mirrored)"
            } else {
                "move it to such a property"
            };
            return Err(format!(
                "x-mcp-header at {at} is not on a property reached from the root through `properties` alone (not through `items`, `anyOf`, `$ref`, `$defs`...): {fix}"
            ));
        }
        found.push(declaration(name, object, path, &at)?);
    }
    for (keyword, value) in object {
        if SCHEMA_MAPS.contains(&keyword.as_str()) {
            let Some(map) = value.as_object() else {
                continue;
            };
            let child = if keyword == "properties" && position != Position::Elsewhere {
                Position::Property
            } else {
                Position::Elsewhere
            };
            for (name, subschema) in map {
                path.extend([keyword.clone(), name.clone()]);
                walk(subschema, path, child, found)?;
                path.truncate(path.len() - 2);
            }
        } else if SCHEMA_SLOTS.contains(&keyword.as_str()) {
            let subschemas = match value {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            let depth = path.len();
            for (i, subschema) in subschemas.into_iter().enumerate() {
                path.push(keyword.clone());
                if value.is_array() {
                    path.push(i.to_string());
                }
                walk(subschema, path, Position::Elsewhere, found)?;
                path.truncate(depth);
            }
        }
    }
    Ok(())
}

fn declaration(
    name: &Value,
    property: &Map<String, Value>,
    path: &[String],
    at: &str,
) -> Result<ParamHeader, String> {
    let Some(name) = name.as_str() else {
        return Err(format!(
            "x-mcp-header at {at} is {name}, not a string: give the {{Name}} of Mcp-Param-{{Name}}"
        ));
    };
    // `HeaderName` admits exactly the RFC 9110 token characters; the prefix alone is one too.
    let header = HeaderName::from_bytes(format!("mcp-param-{name}").as_bytes())
        .ok()
        .filter(|_| !name.is_empty())
        .ok_or_else(|| {
            format!(
                "x-mcp-header {name:?} at {at} is not a header name token: use ASCII letters, digits and !#$%&'*+-.^_`|~"
            )
        })?;
    let single_type = match property.get("type") {
        Some(Value::String(single)) => Some(single.as_str()),
        Some(Value::Array(types)) => {
            let mut not_null = types.iter().filter(|t| t.as_str() != Some("null"));
            match (not_null.next(), not_null.next()) {
                (Some(single), None) => single.as_str(),
                _ => None,
            }
        }
        _ => None,
    };
    if !matches!(single_type, Some("string" | "integer" | "boolean")) {
        const DECLARE: &str =
            "declare `\"type\": \"string\"`, `\"integer\"` or `\"boolean\"` on the property";
        let combined = ["anyOf", "oneOf", "allOf"]
            .iter()
            .any(|keyword| property.contains_key(*keyword));
        let (found, fix) = match property.get("type") {
            Some(written) if single_type == Some("number") => (
                format!("its `type` is {written}"),
                "take an integer or a string instead of a float",
            ),
            Some(written) => (format!("its `type` is {written}"), DECLARE),
            None if property.contains_key("$ref") => (
                "it is a `$ref` to another type".to_owned(),
                "put `#[schemars(inline)]` on the enum, or `#[serde(transparent)]` on the newtype",
            ),
            None if combined => (
                "it is an `anyOf`/`oneOf`/`allOf` of types".to_owned(),
                "an enum whose variants have doc comments, or an `Option` of a referenced type, is published that way: mirror a plain string, or an inline enum without variant docs",
            ),
            None => ("it has no `type`".to_owned(), DECLARE),
        };
        return Err(format!(
            "x-mcp-header {name:?} at {at} is on a property that is not a string, integer or boolean ({found}): {fix}"
        ));
    }
    Ok(ParamHeader {
        name: name.to_owned(),
        header,
        // A declaration's pointer is `properties`, NAME, `properties`, NAME...: the names are the
        // argument's path.
        path: path.iter().skip(1).step_by(2).cloned().collect(),
    })
}

/// The JSON pointer of the property an argument path names.
fn property_pointer(names: &[String]) -> String {
    let steps: Vec<String> = names
        .iter()
        .flat_map(|name| ["properties".to_owned(), name.clone()])
        .collect();
    pointer(&steps)
}

/// The largest integer every client holds exactly (JavaScript's `Number.MAX_SAFE_INTEGER`):
/// past it, a client cannot mirror the value it sends.
const SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The `x-mcp-header` declarations of an input schema, which is rewritten to publish each
/// mirrored property in the one shape clients accept: a single `type` string (clients drop a
/// tool whose mirrored property has `["string", "null"]`, which every `Option` argument has; the
/// property stays optional since it is not `required`), no `null` in its `enum`, and an
/// integer's range within ±(2^53−1). Arguments are validated against the schema as written, so
/// an explicit `null` is still accepted, as the argument's absence. A schema with a declaration
/// clients would drop the tool for is refused (see [`declarations`]) and left as it is.
pub(crate) fn publish(schema: &mut Value) -> Result<Vec<ParamHeader>, String> {
    let declared = declarations(schema)?;
    for declaration in &declared {
        let property = declaration
            .path
            .iter()
            .try_fold(&mut *schema, |node, name| {
                node.get_mut("properties")?.get_mut(name)
            })
            .and_then(Value::as_object_mut);
        let Some(property) = property else {
            continue;
        };
        if let Some(Value::Array(types)) = property.get("type") {
            let single = types.iter().find(|t| t.as_str() != Some("null")).cloned();
            if let Some(single) = single {
                property.insert("type".to_owned(), single);
            }
        }
        if let Some(Value::Array(members)) = property.get_mut("enum") {
            members.retain(|member| !member.is_null());
        }
        if property.get("type").and_then(Value::as_str) == Some("integer") {
            let safe = SAFE_INTEGER as f64;
            let bound = |key: &str| property.get(key).and_then(Value::as_f64);
            let minimum_safe = bound("minimum").is_some_and(|minimum| minimum >= -safe);
            let maximum_safe = bound("maximum").is_some_and(|maximum| maximum <= safe);
            if !minimum_safe {
                property.insert("minimum".to_owned(), (-SAFE_INTEGER).into());
            }
            if !maximum_safe {
                property.insert("maximum".to_owned(), SAFE_INTEGER.into());
            }
        }
    }
    Ok(declared)
}

/// A JSON pointer (RFC 6901) into the input schema, for messages.
fn pointer(path: &[String]) -> String {
    if path.is_empty() {
        return "the root".to_owned();
    }
    path.iter()
        .map(|step| format!("/{}", step.replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn lookup<'a>(arguments: &'a Map<String, Value>, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    rest.iter()
        .try_fold(arguments.get(first)?, |value, key| value.get(key))
}

/// Whether a header value represents `value` (strings as is, numbers as the same decimal value,
/// booleans as `true`/`false`).
fn agrees(header: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => header == s,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        // Exactly, not through `f64`: `9007199254740993` and `9007199254740992` are one `f64`.
        Value::Number(n) => match (Decimal::parse(header), Decimal::parse(&n.to_string())) {
            (Some(header), Some(body)) => header == body,
            _ => false,
        },
        _ => false,
    }
}

/// A JSON number as an exact decimal, `±digits × 10^exponent` with no leading or trailing zero
/// in `digits`, so `42`, `42.0` and `4.2e1` are equal and nothing is rounded.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl Decimal {
    /// Parses the JSON number grammar (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`).
    fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => {
                let exponent = &rest[at + 1..];
                let unsigned = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
                if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                (&rest[..at], exponent.parse::<i64>().ok()?)
            }
            None => (rest, 0),
        };
        let (integer, fraction) = match mantissa.split_once('.') {
            Some((integer, fraction)) if !fraction.is_empty() => (integer, fraction),
            Some(_) => return None,
            None => (mantissa, ""),
        };
        let well_formed = !integer.is_empty()
            && integer.bytes().all(|b| b.is_ascii_digit())
            && fraction.bytes().all(|b| b.is_ascii_digit())
            && (integer == "0" || !integer.starts_with('0'));
        if !well_formed {
            return None;
        }
        let all = format!("{integer}{fraction}");
        let significant = all.trim_start_matches('0');
        let trimmed = significant.trim_end_matches('0');
        if trimmed.is_empty() {
            return Some(Decimal {
                negative: false,
                digits: "0".to_owned(),
                exponent: 0,
            });
        }
        let dropped = i64::try_from(significant.len() - trimmed.len()).ok()?;
        let fraction_len = i64::try_from(fraction.len()).ok()?;
        Some(Decimal {
            negative,
            digits: trimmed.to_owned(),
            exponent: exponent.checked_sub(fraction_len)?.checked_add(dropped)?,
        })
    }
}

/// What a client needs of a declaration to send its header.
#[cfg(feature = "client")]
impl ParamHeader {
    /// `mcp-param-{name}`.
    pub(crate) fn header(&self) -> &HeaderName {
        &self.header
    }

    /// The argument this header mirrors in `arguments`, when it is there.
    pub(crate) fn argument<'a>(&self, arguments: &'a Map<String, Value>) -> Option<&'a Value> {
        lookup(arguments, &self.path)
    }
}

/// Checks every `Mcp-Param-*` header a tool declares against the call's arguments.
pub(crate) fn check_param_headers(
    declared: &[ParamHeader],
    params: &Map<String, Value>,
    headers: &HeaderMap,
    presence: Presence,
) -> Result<(), RpcError> {
    let empty = Map::new();
    let arguments = params
        .get("arguments")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for declaration in declared {
        // Only an error names it, as the schema spells it.
        let display = || format!("Mcp-Param-{}", declaration.name);
        let header = header_text(headers, &declaration.header)?;
        match (lookup(arguments, &declaration.path), header) {
            (None | Some(Value::Null), None) => {}
            (Some(value), Some(header)) if agrees(&header, value) => {}
            // A client of an earlier revision sends no mirror; one it does send must agree.
            (Some(_), None) if presence == Presence::IfSent => {}
            (Some(value), None) if !value.is_null() => {
                return Err(RpcError::header_mismatch(format!(
                    "Missing required header {}: it must mirror the argument {}",
                    display(),
                    declaration.path.join(".")
                )));
            }
            (value, header) => {
                return Err(RpcError::header_mismatch(format!(
                    "Header mismatch: {} header value {:?} does not match body value {}",
                    display(),
                    header.unwrap_or_default(),
                    value.unwrap_or(&Value::Null)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_agree_exactly_as_decimals() {
        let body: Value = serde_json::from_str("9007199254740993").unwrap();
        assert!(agrees("9007199254740993", &body));
        assert!(
            !agrees("9007199254740992", &body),
            "no rounding through f64"
        );
        for (header, body) in [
            ("42", "42.0"),
            ("42.0", "42"),
            ("4.2e1", "42"),
            ("-0", "0"),
            ("0.50", "0.5"),
            ("1E+2", "100"),
        ] {
            let body: Value = serde_json::from_str(body).unwrap();
            assert!(agrees(header, &body), "{header} vs {body}");
        }
        for (header, body) in [
            ("42", "43"),
            ("-42", "42"),
            ("4.2", "42"),
            ("042", "42"),
            ("42.", "42"),
            ("0x2a", "42"),
            ("", "0"),
            ("1e", "1"),
            ("+42", "42"),
            ("4 2", "42"),
        ] {
            let body: Value = serde_json::from_str(body).unwrap();
            assert!(!agrees(header, &body), "{header} vs {body}");
        }
    }

    #[test]
    fn finds_declarations_through_properties_only() {
        let schema = json!({ "type": "object", "properties": {
            "region": { "type": "string", "x-mcp-header": "Region" },
            "nested": { "type": "object", "properties": {
                "n": { "type": ["integer", "null"], "x-mcp-header": "N" }
            } },
            "flag": { "type": "boolean", "x-mcp-header": "Dry-Run_v2" },
            "list": { "type": "array", "items": { "type": "string" } }
        }});
        let found = declarations(&schema).unwrap();
        let names: Vec<_> = found
            .iter()
            .map(|d| (d.header.as_str(), d.name.as_str(), d.path.join(".")))
            .collect();
        assert_eq!(
            names,
            [
                ("mcp-param-dry-run_v2", "Dry-Run_v2", "flag".to_owned()),
                ("mcp-param-n", "N", "nested.n".to_owned()),
                ("mcp-param-region", "Region", "region".to_owned()),
            ]
        );
        assert!(
            agrees("42", &json!(42)) && agrees("42.0", &json!(42)) && !agrees("43", &json!(42))
        );
        assert!(agrees("true", &json!(true)) && !agrees("True", &json!(true)));
    }

    #[test]
    fn refuses_what_clients_drop_the_tool_for_and_says_where() {
        let property =
            |declared: Value| json!({ "type": "object", "properties": { "p": declared } });
        for (schema, expected) in [
            (
                property(json!({ "type": "string", "x-mcp-header": "" })),
                "x-mcp-header \"\" at /properties/p is not a header name token",
            ),
            (
                property(json!({ "type": "string", "x-mcp-header": "Two Words" })),
                "x-mcp-header \"Two Words\" at /properties/p is not a header name token",
            ),
            (
                property(json!({ "type": "string", "x-mcp-header": "Caf\u{e9}" })),
                "is not a header name token",
            ),
            (
                property(json!({ "type": "string", "x-mcp-header": "a\r\nb" })),
                "is not a header name token",
            ),
            (
                property(json!({ "type": "string", "x-mcp-header": "a:b" })),
                "is not a header name token",
            ),
            (
                property(json!({ "type": "string", "x-mcp-header": "(Region)" })),
                "is not a header name token",
            ),
            (
                property(json!({ "type": ["null"], "x-mcp-header": "P" })),
                "(its `type` is [\"null\"]): declare",
            ),
            (
                property(json!({ "type": "string", "x-mcp-header": 7 })),
                "x-mcp-header at /properties/p is 7, not a string",
            ),
            (
                property(json!({ "type": "number", "x-mcp-header": "P" })),
                "x-mcp-header \"P\" at /properties/p is on a property that is not a string, integer or boolean (its `type` is \"number\"): take an integer or a string",
            ),
            (
                property(json!({ "type": ["string", "integer"], "x-mcp-header": "P" })),
                "(its `type` is [\"string\",\"integer\"]): declare",
            ),
            (
                property(json!({ "$ref": "#/$defs/Colour", "x-mcp-header": "P" })),
                "(it is a `$ref` to another type): put `#[schemars(inline)]` on the enum",
            ),
            (
                property(
                    json!({ "oneOf": [{ "const": "a" }, { "const": "b" }], "x-mcp-header": "P" }),
                ),
                "(it is an `anyOf`/`oneOf`/`allOf` of types): an enum whose variants have doc comments",
            ),
            (
                property(json!({ "x-mcp-header": "P" })),
                "(it has no `type`): declare",
            ),
            (
                property(
                    json!({ "type": "array", "items": { "type": "string", "x-mcp-header": "P" } }),
                ),
                "x-mcp-header at /properties/p/items is not on a property reached from the root",
            ),
            (
                json!({ "type": "object", "anyOf": [
                    { "properties": { "a/b": { "type": "string", "x-mcp-header": "P" } } }
                ] }),
                "x-mcp-header at /anyOf/0/properties/a~1b is not on a property",
            ),
            (
                json!({ "type": "object", "$defs": { "Inner": { "type": "object", "properties": {
                    "q": { "type": "string", "x-mcp-header": "Q" }
                } } } }),
                "x-mcp-header at /$defs/Inner/properties/q is not on a property reached from the root through `properties` alone (not through `items`, `anyOf`, `$ref`, `$defs`...): the property belongs to a type the schema refers to: put `#[schemars(inline)]` on that type when an argument holds it directly (in a list, a map or an enum it cannot be mirrored)",
            ),
            (
                json!({ "type": "object", "x-mcp-header": "Root" }),
                "x-mcp-header at the root is not on a property",
            ),
            (
                json!({ "type": "object", "properties": {
                    "a": { "type": "string", "x-mcp-header": "Zone" },
                    "b": { "type": "object", "properties": {
                        "c": { "type": "string", "x-mcp-header": "zone" }
                    } }
                } }),
                "x-mcp-header \"Zone\" at /properties/a and \"zone\" at /properties/b/properties/c name one header",
            ),
        ] {
            let refused = declarations(&schema)
                .map(|found| found.len())
                .expect_err(&schema.to_string());
            assert!(
                refused.contains(expected),
                "{schema}: expected {expected:?} in {refused:?}"
            );
        }
        // Every token character is admitted.
        let every = property(json!({ "type": "string", "x-mcp-header": "!#$%&'*+-.^_`|~Az09" }));
        assert_eq!(declarations(&every).map(|found| found.len()), Ok(1));
    }

    #[test]
    fn publishes_one_type_and_the_safe_integer_range() {
        let mut schema = json!({ "type": "object", "properties": {
            "region": { "type": ["string", "null"], "x-mcp-header": "Region" },
            "colour": { "type": ["string", "null"], "enum": ["red", null], "x-mcp-header": "Colour" },
            "wide": { "type": ["integer", "null"], "minimum": -9.3e18, "maximum": 1.8e19, "x-mcp-header": "Wide" },
            "narrow": { "type": "integer", "minimum": 0, "maximum": 10, "x-mcp-header": "Narrow" },
            "bare": { "type": "integer", "x-mcp-header": "Bare" },
            "flag": { "type": "boolean", "x-mcp-header": "Flag" },
            "plain": { "type": ["string", "null"] },
            "route": { "type": "object", "properties": {
                "zone": { "type": ["string", "null"], "x-mcp-header": "Zone" }
            } }
        }});
        let declared = publish(&mut schema).unwrap();
        assert_eq!(declared.len(), 7);
        let safe = 9_007_199_254_740_991_i64;
        assert_eq!(
            schema["properties"],
            json!({
                "region": { "type": "string", "x-mcp-header": "Region" },
                "colour": { "type": "string", "enum": ["red"], "x-mcp-header": "Colour" },
                "wide": { "type": "integer", "minimum": -safe, "maximum": safe, "x-mcp-header": "Wide" },
                "narrow": { "type": "integer", "minimum": 0, "maximum": 10, "x-mcp-header": "Narrow" },
                "bare": { "type": "integer", "minimum": -safe, "maximum": safe, "x-mcp-header": "Bare" },
                "flag": { "type": "boolean", "x-mcp-header": "Flag" },
                "plain": { "type": ["string", "null"] },
                "route": { "type": "object", "properties": {
                    "zone": { "type": "string", "x-mcp-header": "Zone" }
                } }
            })
        );
        // What it publishes is still valid, and unchanged by publishing again.
        let published = schema.clone();
        assert_eq!(publish(&mut schema).unwrap().len(), 7);
        assert_eq!(schema, published);
        // A refused schema is left as written.
        let mut refused = json!({ "type": "object", "properties": {
            "a": { "type": ["string", "null"], "x-mcp-header": "Zone" },
            "b": { "type": "string", "x-mcp-header": "ZONE" }
        }});
        let written = refused.clone();
        assert!(publish(&mut refused).is_err());
        assert_eq!(refused, written);
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct RoutedArgs {
        #[schemars(extend("x-mcp-header" = "Region"))]
        region: Option<String>,
    }

    struct Routed;

    impl crate::tools::Tool for Routed {
        type Args = RoutedArgs;
        type Output = String;
        fn info(&self) -> crate::tools::ToolInfo {
            crate::tools::ToolInfo::new("routed", "Routed on its region.")
        }
        async fn call(&self, args: RoutedArgs, _: crate::context::Context) -> String {
            args.region.unwrap_or_default()
        }
    }

    /// The documents made without a server (`definitions`, and the Markdown page from it) show
    /// the schema as `tools/list` publishes it.
    #[test]
    fn definitions_publish_what_the_catalog_publishes() {
        let set = crate::tools::set::ToolSet::new().with(Routed);
        let catalog = set.compile().unwrap();
        let listed = serde_json::to_value(&catalog.tools[0].definition).unwrap();
        assert_eq!(set.definitions(), json!([listed]));
        assert_eq!(
            listed["inputSchema"]["properties"]["region"]["type"],
            "string"
        );
    }

    fn call(arguments: Value) -> Map<String, Value> {
        json!({ "name": "routed", "arguments": arguments })
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn a_missing_header_is_named_missing_and_a_wrong_one_a_mismatch() {
        let catalog = crate::tools::set::ToolSet::new()
            .with(Routed)
            .compile()
            .unwrap();
        let tool = &catalog.tools[0].param_headers;
        let none = HeaderMap::new();
        let mut eu = HeaderMap::new();
        eu.insert("mcp-param-region", "eu".parse().unwrap());
        let mut us = HeaderMap::new();
        us.insert("mcp-param-region", "us".parse().unwrap());

        let region = call(json!({ "region": "eu" }));
        assert!(check_param_headers(tool, &region, &eu, Presence::Required).is_ok());
        // The client is told to add the header rather than that some value disagreed.
        let missing = check_param_headers(tool, &region, &none, Presence::Required).unwrap_err();
        assert_eq!(missing.code(), -32020);
        assert!(
            missing
                .message()
                .starts_with("Missing required header Mcp-Param-Region"),
            "{}",
            missing.message()
        );
        let wrong = check_param_headers(tool, &region, &us, Presence::Required).unwrap_err();
        assert_eq!(wrong.code(), -32020);
        assert!(
            wrong
                .message()
                .starts_with("Header mismatch: Mcp-Param-Region"),
            "{}",
            wrong.message()
        );
        // A client of an earlier revision sends no mirror, but one it sends must agree.
        assert!(check_param_headers(tool, &region, &none, Presence::IfSent).is_ok());
        assert!(check_param_headers(tool, &region, &eu, Presence::IfSent).is_ok());
        let legacy_wrong = check_param_headers(tool, &region, &us, Presence::IfSent).unwrap_err();
        assert_eq!(legacy_wrong.code(), -32020);
        let legacy_extra =
            check_param_headers(tool, &call(json!({})), &eu, Presence::IfSent).unwrap_err();
        assert_eq!(legacy_extra.code(), -32020);
        // An absent or null argument needs no header, and must not get one.
        for absent in [json!({}), json!({ "region": null })] {
            assert!(
                check_param_headers(tool, &call(absent.clone()), &none, Presence::Required).is_ok()
            );
            let extra = check_param_headers(tool, &call(absent.clone()), &eu, Presence::Required)
                .unwrap_err();
            assert!(
                extra.message().starts_with("Header mismatch"),
                "{absent}: {}",
                extra.message()
            );
        }
    }
}
