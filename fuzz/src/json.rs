//! JSON values from fuzz bytes, weighted towards the values that sit on a rule's edge: integers
//! at the ends of their types, whole numbers written as floats, strings of handles and versions.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Number, Value};

/// Integers at the edges of the Rust types arguments decode into.
pub const EDGE_INTEGERS: &[i128] = &[
    0,
    1,
    -1,
    2,
    7,
    42,
    127,
    128,
    255,
    256,
    -128,
    -129,
    32767,
    32768,
    -32768,
    -32769,
    65535,
    65536,
    2147483647,
    2147483648,
    -2147483648,
    -2147483649,
    4294967295,
    4294967296,
    9007199254740991,
    9007199254740992,
    9007199254740993,
    -9007199254740991,
    -9007199254740993,
    9223372036854775807,
    9223372036854775808,
    -9223372036854775808,
    -9223372036854775809,
    18446744073709551615,
    18446744073709551616,
];

/// A number: an integer (often at an edge), a whole number written as a float, or any float.
pub fn number(u: &mut Unstructured<'_>) -> Result<Value> {
    Ok(match u.int_in_range(0..=5)? {
        0 => {
            let edge = *u.choose(EDGE_INTEGERS)?;
            integer_value(edge)
        }
        1 => Value::from(u.arbitrary::<i64>()?),
        2 => Value::from(u.arbitrary::<u64>()?),
        3 => {
            // A whole number written as a float: `3.0`.
            let edge = *u.choose(EDGE_INTEGERS)?;
            Number::from_f64(edge as f64).map_or(Value::Null, Value::Number)
        }
        4 => Value::from(u.int_in_range(-3i64..=40)?),
        _ => {
            let float = f64::from_bits(u.arbitrary::<u64>()?);
            Number::from_f64(float).map_or(Value::from(0.5), Value::Number)
        }
    })
}

/// An integer as JSON parses it: `i64`/`u64` when it fits, a float beyond.
pub fn integer_value(n: i128) -> Value {
    if let Ok(n) = i64::try_from(n) {
        Value::from(n)
    } else if let Ok(n) = u64::try_from(n) {
        Value::from(n)
    } else {
        Number::from_f64(n as f64).map_or(Value::Null, Value::Number)
    }
}

/// A short string, sometimes from `words`.
pub fn string(u: &mut Unstructured<'_>, words: &[&str]) -> Result<String> {
    if !words.is_empty() && u.ratio(1, 2)? {
        return Ok((*u.choose(words)?).to_owned());
    }
    let len = u.int_in_range(0..=24)?;
    let mut text = String::new();
    for _ in 0..len {
        let c = match u.int_in_range(0..=9)? {
            0 => u.arbitrary::<char>()?,
            1 => *u.choose(&['-', '_', '=', '?', ' ', '\t', '"', '\\', '/', '.'])?,
            _ => (b'a' + u.int_in_range(0..=25)?) as char,
        };
        text.push(c);
    }
    Ok(text)
}

/// Any JSON value, at most `depth` deep, its strings sometimes from `words` and its object keys
/// sometimes from `keys`.
pub fn value(u: &mut Unstructured<'_>, depth: u32, keys: &[&str], words: &[&str]) -> Result<Value> {
    let top = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => number(u)?,
        3 | 4 => Value::String(string(u, words)?),
        5 => {
            let len = u.int_in_range(0..=4)?;
            let mut items = Vec::with_capacity(len);
            for _ in 0..len {
                items.push(value(u, depth - 1, keys, words)?);
            }
            Value::Array(items)
        }
        _ => Value::Object(object(u, depth - 1, keys, words)?),
    })
}

/// A JSON object, its keys sometimes from `keys`.
pub fn object(
    u: &mut Unstructured<'_>,
    depth: u32,
    keys: &[&str],
    words: &[&str],
) -> Result<Map<String, Value>> {
    let len = u.int_in_range(0..=5)?;
    let mut map = Map::new();
    for _ in 0..len {
        let key = string(u, keys)?;
        map.insert(key, value(u, depth, keys, words)?);
    }
    Ok(map)
}
