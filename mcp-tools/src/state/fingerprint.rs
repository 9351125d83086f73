//! Payload fingerprints for the operation-id ledger: SHA-256 of canonical JSON.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The SHA-256 of a payload's canonical JSON, in lowercase hex.
///
/// Canonical JSON here: object keys sorted by their UTF-8 bytes at every depth, no insignificant
/// whitespace, strings escaped as `serde_json` escapes them, numbers as `serde_json` prints them.
/// Two argument objects that differ only in key order or spacing therefore have one fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of a tool call: its name and its arguments.
    pub fn of_call(tool: &str, arguments: &Value) -> Self {
        let mut text = String::new();
        write_canonical(&Value::String(tool.to_owned()), &mut text);
        text.push('\n');
        write_canonical(arguments, &mut text);
        Fingerprint::of_text(&text)
    }

    /// The fingerprint of one JSON value.
    pub fn of(value: &Value) -> Self {
        Fingerprint::of_text(&canonical_json(value))
    }

    fn of_text(text: &str) -> Self {
        let digest = Sha256::digest(text.as_bytes());
        let mut hex = String::with_capacity(64);
        for byte in digest.iter() {
            let _ = write!(hex, "{byte:02x}");
        }
        Fingerprint(hex)
    }

    /// The hex digest.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    #[cfg(feature = "sqlite")]
    pub(crate) fn from_stored(hex: String) -> Self {
        Fingerprint(hex)
    }
}

/// The canonical JSON text of `value` (see [`Fingerprint`]).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(&Value::String(key.clone()), out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_spacing_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "é\n"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"é\n","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"é\n","y":[1,2]},"b":1}"#);
        assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b));
        assert_eq!(Fingerprint::of(&a).as_str().len(), 64);
    }

    #[test]
    fn different_payloads_or_tools_differ() {
        let args = json!({"basket_id": "bsk_1", "gigabytes": 32});
        assert_ne!(
            Fingerprint::of(&args),
            Fingerprint::of(&json!({"basket_id": "bsk_1", "gigabytes": 64}))
        );
        assert_ne!(
            Fingerprint::of_call("a", &args),
            Fingerprint::of_call("b", &args)
        );
        assert_ne!(
            Fingerprint::of(&json!([1, 2])),
            Fingerprint::of(&json!([2, 1]))
        );
        assert_eq!(
            Fingerprint::of(&json!("")).as_str(),
            // SHA-256 of the two bytes `""`.
            "12ae32cb1ec02d01eda3581b127c1fee3b0dc53572ed6baf239721a03d82e126"
        );
    }
}
