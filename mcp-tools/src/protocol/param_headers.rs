//! `Mcp-Param-*` headers: tool arguments a schema marks with `x-mcp-header` are mirrored in
//! headers so intermediaries can route on them; the server checks they agree with the body.

use http::HeaderMap;
use serde_json::{Map, Value};

use crate::RpcError;
use crate::protocol::headers::header_text;

/// One argument mirrored in a header.
#[derive(Debug, Clone)]
pub(crate) struct ParamHeader {
    /// The `{Name}` of `Mcp-Param-{Name}`.
    name: String,
    /// Property names from the argument root.
    path: Vec<String>,
}

/// Finds the `x-mcp-header` declarations reachable from the root through `properties` only.
pub(crate) fn declarations(schema: &Value) -> Vec<ParamHeader> {
    fn walk(schema: &Value, path: &mut Vec<String>, found: &mut Vec<ParamHeader>) {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (name, property) in properties {
            path.push(name.clone());
            if let Some(header) = property.get("x-mcp-header").and_then(Value::as_str) {
                found.push(ParamHeader {
                    name: header.to_owned(),
                    path: path.clone(),
                });
            }
            walk(property, path, found);
            path.pop();
        }
    }
    let mut found = Vec::new();
    walk(schema, &mut Vec::new(), &mut found);
    found
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

/// Checks every `Mcp-Param-*` header a tool declares against the call's arguments.
pub(crate) fn check_param_headers(
    declared: &[ParamHeader],
    params: &Map<String, Value>,
    headers: &HeaderMap,
) -> Result<(), RpcError> {
    let empty = Map::new();
    let arguments = params
        .get("arguments")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for declaration in declared {
        let header_name = format!("mcp-param-{}", declaration.name.to_ascii_lowercase());
        let display = format!("Mcp-Param-{}", declaration.name);
        let header = header_text(headers, &header_name)?;
        match (lookup(arguments, &declaration.path), header) {
            (None | Some(Value::Null), None) => {}
            (Some(value), Some(header)) if agrees(&header, value) => {}
            (Some(value), None) if !value.is_null() => {
                return Err(RpcError::header_mismatch(format!(
                    "Missing required header {display}: it must mirror the argument {}",
                    declaration.path.join(".")
                )));
            }
            (value, header) => {
                return Err(RpcError::header_mismatch(format!(
                    "Header mismatch: {display} header value {:?} does not match body value {}",
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
            "nested": { "type": "object", "properties": { "n": { "type": "integer", "x-mcp-header": "N" } } },
            "list": { "type": "array", "items": { "x-mcp-header": "Ignored" } }
        }});
        let found = declarations(&schema);
        let names: Vec<_> = found
            .iter()
            .map(|d| (d.name.as_str(), d.path.join(".")))
            .collect();
        assert_eq!(
            names,
            [
                ("N", "nested.n".to_owned()),
                ("Region", "region".to_owned())
            ]
        );
        assert!(
            agrees("42", &json!(42)) && agrees("42.0", &json!(42)) && !agrees("43", &json!(42))
        );
        assert!(agrees("true", &json!(true)) && !agrees("True", &json!(true)));
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct RoutedArgs {
        #[schemars(extend("x-mcp-header" = "Region"))]
        region: Option<String>,
    }

    struct Routed;

    impl crate::Tool for Routed {
        type Args = RoutedArgs;
        type Output = String;
        fn info(&self) -> crate::ToolInfo {
            crate::ToolInfo::new("routed", "Routed on its region.")
        }
        async fn call(&self, args: RoutedArgs, _: crate::Context) -> String {
            args.region.unwrap_or_default()
        }
    }

    fn call(arguments: Value) -> Map<String, Value> {
        json!({ "name": "routed", "arguments": arguments })
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn a_missing_header_is_named_missing_and_a_wrong_one_a_mismatch() {
        let catalog = crate::ToolSet::new().with(Routed).compile().unwrap();
        let tool = &catalog.tools[0].param_headers;
        let none = HeaderMap::new();
        let mut eu = HeaderMap::new();
        eu.insert("mcp-param-region", "eu".parse().unwrap());
        let mut us = HeaderMap::new();
        us.insert("mcp-param-region", "us".parse().unwrap());

        let region = call(json!({ "region": "eu" }));
        assert!(check_param_headers(tool, &region, &eu).is_ok());
        // The client is told to add the header rather than that some value disagreed.
        let missing = check_param_headers(tool, &region, &none).unwrap_err();
        assert_eq!(missing.code(), -32020);
        assert!(
            missing
                .message()
                .starts_with("Missing required header Mcp-Param-Region"),
            "{}",
            missing.message()
        );
        let wrong = check_param_headers(tool, &region, &us).unwrap_err();
        assert_eq!(wrong.code(), -32020);
        assert!(
            wrong
                .message()
                .starts_with("Header mismatch: Mcp-Param-Region"),
            "{}",
            wrong.message()
        );
        // An absent or null argument needs no header, and must not get one.
        for absent in [json!({}), json!({ "region": null })] {
            assert!(check_param_headers(tool, &call(absent.clone()), &none).is_ok());
            let extra = check_param_headers(tool, &call(absent.clone()), &eu).unwrap_err();
            assert!(
                extra.message().starts_with("Header mismatch"),
                "{absent}: {}",
                extra.message()
            );
        }
    }
}
