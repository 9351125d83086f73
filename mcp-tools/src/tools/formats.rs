//! Published schemas carry only the `format` values JSON Schema 2020-12 defines. schemars marks
//! Rust integers with formats of its own (`uint32`, `int64`, ...), which validators of other
//! languages warn about and ignore; their meaning, the integer's range, is published instead as
//! `minimum` and `maximum`, which every validator enforces.

use serde_json::{Map, Number, Value};

/// The formats JSON Schema 2020-12 defines (Validation, section 7.3).
const STANDARD: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// The range of an integer format, as the bounds to publish.
fn range(format: &str) -> Option<(Number, Number)> {
    let signed = |min: i64, max: i64| Some((Number::from(min), Number::from(max)));
    let unsigned = |max: u64| Some((Number::from(0u64), Number::from(max)));
    match format {
        "int8" => signed(i8::MIN.into(), i8::MAX.into()),
        "int16" => signed(i16::MIN.into(), i16::MAX.into()),
        "int32" => signed(i32::MIN.into(), i32::MAX.into()),
        // `int` is schemars' `isize`: 64-bit targets are the ones served.
        "int64" | "int" => signed(i64::MIN, i64::MAX),
        "uint8" => unsigned(u8::MAX.into()),
        "uint16" => unsigned(u16::MAX.into()),
        "uint32" => unsigned(u32::MAX.into()),
        "uint64" | "uint" => unsigned(u64::MAX),
        _ => None,
    }
}

/// Rewrites `schema` and every schema inside it so that only standard formats remain.
pub(crate) fn standardize(schema: &mut Value) {
    let Value::Object(members) = schema else {
        return;
    };
    if let Some(Value::String(format)) = members.get("format")
        && !STANDARD.contains(&format.as_str())
    {
        let bounds = range(format);
        members.remove("format");
        if let Some((min, max)) = bounds {
            tighten(members, "minimum", min, |new, old| new > old);
            tighten(members, "maximum", max, |new, old| new < old);
        }
    }
    for (keyword, value) in members.iter_mut() {
        match keyword.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let Value::Object(schemas) = value {
                    schemas.values_mut().for_each(standardize);
                }
            }
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(schemas) = value {
                    schemas.iter_mut().for_each(standardize);
                }
            }
            "items"
            | "additionalProperties"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "contains"
            | "propertyNames"
            | "not"
            | "if"
            | "then"
            | "else" => standardize(value),
            _ => {}
        }
    }
}

/// Sets `keyword` to `bound` unless the schema already has a tighter one.
fn tighten(
    members: &mut Map<String, Value>,
    keyword: &str,
    bound: Number,
    tighter: fn(f64, f64) -> bool,
) {
    let as_f64 = |number: &Number| number.as_f64().unwrap_or(f64::NAN);
    match members.get(keyword) {
        Some(Value::Number(existing)) if !tighter(as_f64(&bound), as_f64(existing)) => {}
        _ => {
            members.insert(keyword.to_owned(), Value::Number(bound));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integer_formats_become_bounds_and_standard_ones_stay() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "small": {"type": "integer", "format": "uint8", "minimum": 0},
                "count": {"type": ["integer", "null"], "format": "uint64", "minimum": 0},
                "offset": {"type": "integer", "format": "int32"},
                "capped": {"type": "integer", "format": "uint32", "maximum": 10},
                "ratio": {"type": "number", "format": "double"},
                "when": {"type": "string", "format": "date-time"},
                "format": {"type": "string", "format": "uuid"},
                "list": {"type": "array", "items": {"type": "integer", "format": "int16"}},
            },
            "$defs": {"Inner": {"anyOf": [{"type": "integer", "format": "uint"}, {"type": "null"}]}},
            "default": {"format": "uint32"},
        });
        standardize(&mut schema);
        let p = &schema["properties"];
        assert_eq!(
            p["small"],
            json!({"type": "integer", "minimum": 0, "maximum": 255})
        );
        assert_eq!(
            p["count"],
            json!({"type": ["integer", "null"], "minimum": 0, "maximum": u64::MAX})
        );
        assert_eq!(
            p["offset"],
            json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX})
        );
        assert_eq!(
            p["capped"],
            json!({"type": "integer", "minimum": 0, "maximum": 10})
        );
        assert_eq!(p["ratio"], json!({"type": "number"}));
        assert_eq!(p["when"]["format"], "date-time");
        assert_eq!(p["format"]["format"], "uuid");
        assert_eq!(
            p["list"]["items"],
            json!({"type": "integer", "minimum": i16::MIN, "maximum": i16::MAX})
        );
        assert_eq!(
            schema["$defs"]["Inner"]["anyOf"][0],
            json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
        );
        assert_eq!(
            schema["default"],
            json!({"format": "uint32"}),
            "values are not schemas"
        );
    }

    /// Each integer format has its own range, and a bound the schema already has is kept when
    /// it is tighter and replaced when it is looser.
    #[test]
    fn every_integer_format_gets_its_range_and_the_tighter_bound_wins() {
        let cases = [
            ("int8", json!({}), json!([i8::MIN, i8::MAX])),
            ("int16", json!({}), json!([i16::MIN, i16::MAX])),
            ("int", json!({}), json!([i64::MIN, i64::MAX])),
            ("int64", json!({}), json!([i64::MIN, i64::MAX])),
            ("uint16", json!({}), json!([0, u16::MAX])),
            // Tighter than the range: kept.
            ("uint8", json!({"minimum": 3, "maximum": 9}), json!([3, 9])),
            // Looser than the range: replaced.
            (
                "int8",
                json!({"minimum": -1000, "maximum": 1000}),
                json!([i8::MIN, i8::MAX]),
            ),
            ("uint32", json!({"maximum": 1e12}), json!([0, u32::MAX])),
        ];
        for (format, bounds, expected) in cases {
            let mut schema = json!({"type": "integer", "format": format});
            for (keyword, bound) in bounds.as_object().unwrap() {
                schema[keyword] = bound.clone();
            }
            standardize(&mut schema);
            assert_eq!(
                json!([schema["minimum"], schema["maximum"]]),
                expected,
                "{format} {bounds}"
            );
            assert!(schema.get("format").is_none());
        }
    }
}
