//! Payload fingerprints for the operation-id ledger: SHA-256 of canonical JSON.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The SHA-256 of a payload's canonical JSON: 32 bytes, written as lowercase hex.
///
/// Canonical JSON here: object keys sorted by their UTF-8 bytes at every depth, no insignificant
/// whitespace, strings escaped as `serde_json` escapes them, numbers as `serde_json` prints them
/// except that an integral float that fits an `i64` or a `u64` is written as that integer
/// (`1.0` as `1`, `-0.0` as `0`). Two argument objects that differ only in key order, spacing or
/// the way a client library writes a whole number therefore have one fingerprint.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// A digest's 64 lowercase hexadecimal digits.
struct HexDigits([u8; 64]);

impl HexDigits {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hexadecimal digits are ASCII")
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.hex_digits().as_str())
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let hex = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Fingerprint::from_hex(&hex).ok_or_else(|| {
            serde::de::Error::custom("a fingerprint is 64 lowercase hexadecimal digits")
        })
    }
}

impl Fingerprint {
    /// The fingerprint of a tool call: its name and its arguments.
    pub fn of_call(tool: &str, arguments: &Value) -> Self {
        let mut hasher = Hasher(Sha256::new());
        write_str(tool, &mut hasher);
        hasher.0.update(b"\n");
        write_canonical(arguments, &mut hasher);
        Fingerprint::of_digest(hasher)
    }

    /// [`Fingerprint::of_call`] of the members of `arguments` that `keep` keeps, without
    /// building that object: the members are hashed where they are.
    pub(crate) fn of_call_members(
        tool: &str,
        arguments: &Map<String, Value>,
        keep: impl Fn(&str, &Value) -> bool,
    ) -> Self {
        let mut hasher = Hasher(Sha256::new());
        write_str(tool, &mut hasher);
        hasher.0.update(b"\n");
        let mut members: Vec<(&String, &Value)> = arguments
            .iter()
            .filter(|(key, value)| keep(key, value))
            .collect();
        members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        write_members(members.into_iter(), &mut hasher);
        Fingerprint::of_digest(hasher)
    }

    /// The fingerprint of one JSON value.
    pub fn of(value: &Value) -> Self {
        let mut hasher = Hasher(Sha256::new());
        write_canonical(value, &mut hasher);
        Fingerprint::of_digest(hasher)
    }

    fn of_digest(hasher: Hasher) -> Self {
        Fingerprint(hasher.0.finalize().into())
    }

    /// The digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The fingerprint whose digest is `digest`, as a store keeps it.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn from_bytes(digest: [u8; 32]) -> Self {
        Fingerprint(digest)
    }

    /// The digest as 64 lowercase hexadecimal digits, as [`Display`](std::fmt::Display) writes
    /// it.
    pub fn to_hex(&self) -> String {
        self.hex_digits().as_str().to_owned()
    }

    /// The hexadecimal digits from a table, on the stack: a SQLite store writes them with every
    /// ledger record, and `write!` per byte cost a few percent of a mutation there.
    fn hex_digits(&self) -> HexDigits {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut digits = [0u8; 64];
        for (pair, byte) in digits.chunks_exact_mut(2).zip(self.0) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0x0f)];
        }
        HexDigits(digits)
    }

    /// The fingerprint written as [`to_hex`](Self::to_hex) writes it; `None` for anything else.
    pub fn from_hex(hex: &str) -> Option<Self> {
        let digit = |byte: u8| match byte {
            b'0'..=b'9' => Some(byte - b'0'),
            b'a'..=b'f' => Some(byte - b'a' + 10),
            _ => None,
        };
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut digest = [0u8; 32];
        for (slot, pair) in digest.iter_mut().zip(bytes.chunks_exact(2)) {
            *slot = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(Fingerprint(digest))
    }
}

/// The canonical JSON text of `value` (see [`Fingerprint`]).
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Every piece written is either ASCII punctuation or `serde_json` output, which is UTF-8.
    String::from_utf8(out).unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into())
}

/// Feeds the canonical text straight into the digest, without building it first.
struct Hasher(Sha256);

impl Write for Hasher {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `value` in canonical form. The sinks used here (a digest, a `Vec`) cannot fail, so
/// write errors are impossible and ignored.
fn write_canonical<W: Write>(value: &Value, out: &mut W) {
    match value {
        Value::Object(map) => {
            let sorted = map
                .keys()
                .zip(map.keys().skip(1))
                .all(|(a, b)| a.as_bytes() < b.as_bytes());
            if sorted {
                write_members(map.iter(), out);
            } else {
                write_members(sorted_members(map).into_iter(), out);
            }
        }
        Value::Array(items) => {
            let _ = out.write_all(b"[");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    let _ = out.write_all(b",");
                }
                write_canonical(item, out);
            }
            let _ = out.write_all(b"]");
        }
        Value::String(text) => write_str(text, out),
        Value::Number(number) if number.is_f64() => write_float(number, out),
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// The bounds of the integers a float can be written as: `-2^63` and `2^64`, both exact in `f64`.
const I64_MIN: f64 = -9_223_372_036_854_775_808.0;
const U64_END: f64 = 18_446_744_073_709_551_616.0;

fn write_float<W: Write>(number: &serde_json::Number, out: &mut W) {
    let Some(float) = number.as_f64() else {
        let _ = serde_json::to_writer(&mut *out, number);
        return;
    };
    if float.fract() == 0.0 && (I64_MIN..U64_END).contains(&float) {
        // Exact: the value is a whole number inside the target range.
        let _ = if float < 0.0 {
            write!(out, "{}", float as i64)
        } else {
            write!(out, "{}", float as u64)
        };
    } else {
        let _ = serde_json::to_writer(&mut *out, number);
    }
}

fn sorted_members(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    entries
}

#[cfg(test)]
mod members_tests {
    use super::*;
    use serde_json::json;

    /// Hashing kept members in place gives the fingerprint of the object they would make.
    #[test]
    fn members_hash_as_the_object_they_make() {
        let arguments = json!({"z": 1, "operation_id": "op", "a": [1.0, {"b": null}], "m": null});
        let Value::Object(map) = &arguments else {
            unreachable!()
        };
        let kept = Fingerprint::of_call_members("t", map, |key, value| {
            key != "operation_id" && !value.is_null()
        });
        assert_eq!(
            kept,
            Fingerprint::of_call("t", &json!({"z": 1, "a": [1.0, {"b": null}]}))
        );
        assert_ne!(kept, Fingerprint::of_call("t", &json!({"z": 1})));
    }

    /// The fallback for maps that keep insertion order (`serde_json`'s `preserve_order`, which
    /// any crate in a build can turn on) gives every member, in byte order.
    #[test]
    fn sorted_members_gives_every_member_in_byte_order() {
        let object = json!({"b": 2, "a": 1, "é": 3, "Z": 0});
        let Value::Object(map) = &object else {
            unreachable!()
        };
        let keys: Vec<&str> = sorted_members(map)
            .into_iter()
            .map(|(key, _)| key.as_str())
            .collect();
        assert_eq!(keys, ["Z", "a", "b", "é"]);
    }
}

fn write_members<'a, W: Write>(
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    out: &mut W,
) {
    let _ = out.write_all(b"{");
    for (index, (key, item)) in members.enumerate() {
        if index > 0 {
            let _ = out.write_all(b",");
        }
        write_str(key, out);
        let _ = out.write_all(b":");
        write_canonical(item, out);
    }
    let _ = out.write_all(b"}");
}

fn write_str<W: Write>(text: &str, out: &mut W) {
    let _ = serde_json::to_writer(&mut *out, text);
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
        assert_eq!(Fingerprint::of(&a).to_hex().len(), 64);
    }

    #[test]
    fn call_fingerprint_is_the_digest_of_name_newline_arguments() {
        let args = json!({"z": [1.5, -2, null, true], "a": "x\"y\u{1}", "m": {"b": {}, "a": []}});
        let text = format!(
            "{}\n{}",
            canonical_json(&json!("tool \"q\"")),
            canonical_json(&args)
        );
        assert_eq!(
            text,
            "\"tool \\\"q\\\"\"\n{\"a\":\"x\\\"y\\u0001\",\"m\":{\"a\":[],\"b\":{}},\"z\":[1.5,-2,null,true]}"
        );
        let digest = Sha256::digest(text.as_bytes());
        let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(Fingerprint::of_call("tool \"q\"", &args).to_hex(), hex);
        assert_eq!(Fingerprint::of_call("tool \"q\"", &args).to_string(), hex);
        // Pinned: stored ledger fingerprints must keep matching across releases.
        assert_eq!(
            hex,
            "451e6892a39296f69818b49cabb3e95ccef837c854b999d7369c660b7533464a"
        );
    }

    #[test]
    fn integral_floats_are_written_as_integers() {
        let cases = [
            (json!(1.0), "1"),
            (json!(-2.0), "-2"),
            (json!(-0.0), "0"),
            (json!(1e15), "1000000000000000"),
            (json!(-9_223_372_036_854_775_808.0), "-9223372036854775808"),
            (json!(9_223_372_036_854_775_808.0), "9223372036854775808"),
            (json!(18_446_744_073_709_549_568.0), "18446744073709549568"),
        ];
        for (value, text) in cases {
            assert_eq!(canonical_json(&value), text, "{value}");
        }
        let sent_by_one: Value = serde_json::from_str(r#"{"gib": 32, "ratio": [1, -0]}"#).unwrap();
        let sent_by_another: Value =
            serde_json::from_str(r#"{"gib": 32.0, "ratio": [1.0, -0.0]}"#).unwrap();
        assert_eq!(
            Fingerprint::of_call("t", &sent_by_one),
            Fingerprint::of_call("t", &sent_by_another)
        );
    }

    /// Integers are written exactly, never through a float: past 2^53 neighbours share a float.
    #[test]
    fn large_integers_keep_every_digit() {
        for (value, text) in [
            (json!(9_007_199_254_740_993u64), "9007199254740993"),
            (json!(-9_007_199_254_740_993i64), "-9007199254740993"),
            (json!(u64::MAX), "18446744073709551615"),
        ] {
            assert_eq!(canonical_json(&value), text);
        }
        assert_ne!(
            Fingerprint::of(&json!(9_007_199_254_740_993u64)),
            Fingerprint::of(&json!(9_007_199_254_740_992u64))
        );
    }

    #[test]
    fn other_floats_keep_their_own_text() {
        let cases = [
            (json!(1.5), "1.5"),
            (json!(-0.25), "-0.25"),
            // Whole, but outside both integer ranges: written as a float, never wrapped.
            (
                json!(18_446_744_073_709_551_616.0),
                "1.8446744073709552e+19",
            ),
            (
                json!(-9_223_372_036_854_777_856.0),
                "-9.223372036854778e+18",
            ),
            (json!(1e300), "1e+300"),
        ];
        for (value, text) in cases {
            assert_eq!(canonical_json(&value), text, "{value}");
        }
        assert_ne!(Fingerprint::of(&json!(1.5)), Fingerprint::of(&json!(1)));
        assert_ne!(
            Fingerprint::of(&json!(18_446_744_073_709_551_616.0)),
            Fingerprint::of(&json!(0))
        );
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
            Fingerprint::of(&json!("")).to_hex(),
            // SHA-256 of the two bytes `""`.
            "12ae32cb1ec02d01eda3581b127c1fee3b0dc53572ed6baf239721a03d82e126"
        );
    }

    #[test]
    fn the_hex_form_round_trips_and_nothing_else_parses() {
        let fingerprint = Fingerprint::of(&json!({"a": 1}));
        let hex = fingerprint.to_hex();
        assert_eq!(Fingerprint::from_hex(&hex), Some(fingerprint));
        assert_eq!(serde_json::to_value(fingerprint).unwrap(), json!(hex));
        assert_eq!(
            serde_json::from_value::<Fingerprint>(json!(hex)).unwrap(),
            fingerprint
        );
        for bad in [
            &hex[..62],
            &hex.to_uppercase(),
            &format!("{}g", &hex[..63]),
            "",
        ] {
            assert_eq!(Fingerprint::from_hex(bad), None, "{bad}");
        }
        assert!(serde_json::from_value::<Fingerprint>(json!("zz")).is_err());
    }
}
