//! Calls to the counter server's tools from fuzz bytes: mostly well-formed, each argument now and
//! then absent, `null`, of another type or at an edge; handles, versions, validators and
//! operation ids drawn from what the calls so far produced.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Value, json};

use crate::counter::Model;
use crate::json;

const WORDS: &[&str] = &["", "a", "red", "green", "blue", "counter", "ctr_", "ünï", " "];

/// One argument: usually `good`, sometimes absent, `null`, another value or an edge number.
fn slot(
    u: &mut Unstructured<'_>,
    arguments: &mut Map<String, Value>,
    key: &str,
    good: Value,
) -> Result<()> {
    match u.int_in_range(0..=19)? {
        0 => {}
        1 => {
            arguments.insert(key.to_owned(), Value::Null);
        }
        2 => {
            arguments.insert(key.to_owned(), json::value(u, 2, &["x", "y", "kind"], WORDS)?);
        }
        3 => {
            arguments.insert(key.to_owned(), json::number(u)?);
        }
        _ => {
            arguments.insert(key.to_owned(), good);
        }
    }
    Ok(())
}

fn int_in(u: &mut Unstructured<'_>, low: i128, high: i128) -> Result<Value> {
    Ok(if u.ratio(1, 3)? {
        json::integer_value(*u.choose(&[low, high, low - 1, high + 1, 0, 1])?)
    } else {
        let span = (high - low) as u128;
        let offset = u128::from(u.arbitrary::<u64>()?) % (span + 1);
        json::integer_value(low + offset as i128)
    })
}

/// Arguments for `kinds`: half the time every argument well-formed (twelve arguments, each
/// now and then malformed, would rarely all be well-formed), though at the edges of its type.
pub fn kinds(u: &mut Unstructured<'_>) -> Result<Value> {
    let clean = u.ratio(1, 2)?;
    let value = kinds_arguments(u)?;
    if !clean {
        return Ok(value);
    }
    // The same arguments, every malformed one replaced by a well-formed one.
    let mut fixed = value;
    let object = fixed.as_object_mut().expect("an object");
    object.retain(|key, value| {
        (value.is_null() && matches!(key.as_str(), "maybe" | "shape")) || well_formed(key, value)
    });
    let required = json!({
        "small": 255, "signed": -32768, "big": u64::MAX, "wide": i64::MIN, "ratio": 0.5,
        "colour": "red", "point": { "x": -1, "y": 2147483647 },
    });
    for (key, good) in required.as_object().unwrap() {
        object.entry(key.clone()).or_insert_with(|| good.clone());
    }
    Ok(fixed)
}

/// Whether `value` is a well-formed value of the `kinds` argument `key`.
fn well_formed(key: &str, value: &Value) -> bool {
    let int = |low: i128, high: i128| {
        value
            .as_i64()
            .map(i128::from)
            .or(value.as_u64().map(i128::from))
            .is_some_and(|n| (low..=high).contains(&n))
    };
    match key {
        "small" => int(0, 255),
        "signed" => int(-32768, 32767),
        "big" => int(0, u64::MAX as i128),
        "wide" => int(i64::MIN as i128, i64::MAX as i128),
        "ratio" => value.is_number(),
        "colour" => matches!(value.as_str(), Some("red" | "green" | "blue")),
        "maybe" => int(0, u32::MAX as i128),
        "fallback" => int(0, 65535),
        "point" => value.as_object().is_some_and(|p| {
            p.keys().all(|k| matches!(k.as_str(), "x" | "y" | "label"))
                && p.get("x").is_some_and(|x| x.as_i64().is_some_and(|x| i32::try_from(x).is_ok()))
                && p.get("y").is_some_and(|y| y.as_i64().is_some_and(|y| i32::try_from(y).is_ok()))
                && p.get("label").is_none_or(|l| l.is_null() || l.is_string())
        }),
        "tags" => value.as_array().is_some_and(|t| t.iter().all(Value::is_string)),
        "shape" => match value.get("kind").and_then(Value::as_str) {
            Some("circle") => value.get("radius").is_some_and(|r| r.as_u64().is_some_and(|r| r <= u64::from(u32::MAX))),
            Some("square") => value.get("side").is_some_and(|r| r.as_u64().is_some_and(|r| r <= 65535)),
            Some("dot") => true,
            _ => false,
        },
        "flag" => value.is_boolean(),
        _ => false,
    }
}

fn kinds_arguments(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut a = Map::new();
    let v = int_in(u, 0, 255)?;
    slot(u, &mut a, "small", v)?;
    let v = int_in(u, -32768, 32767)?;
    slot(u, &mut a, "signed", v)?;
    let v = int_in(u, 0, u64::MAX as i128)?;
    slot(u, &mut a, "big", v)?;
    let v = int_in(u, i64::MIN as i128, i64::MAX as i128)?;
    slot(u, &mut a, "wide", v)?;
    let v = json::number(u)?;
    slot(u, &mut a, "ratio", v)?;
    let v = json!(*u.choose(&["red", "green", "blue", "Red", "purple"])?);
    slot(u, &mut a, "colour", v)?;
    let v = int_in(u, 0, u32::MAX as i128)?;
    slot(u, &mut a, "maybe", v)?;
    let v = int_in(u, 0, 65535)?;
    slot(u, &mut a, "fallback", v)?;
    let mut point = Map::new();
    let v = int_in(u, i32::MIN as i128, i32::MAX as i128)?;
    slot(u, &mut point, "x", v)?;
    let v = int_in(u, i32::MIN as i128, i32::MAX as i128)?;
    slot(u, &mut point, "y", v)?;
    let v = json!(json::string(u, WORDS)?);
    slot(u, &mut point, "label", v)?;
    if u.ratio(1, 10)? {
        point.insert("z".into(), json!(1));
    }
    slot(u, &mut a, "point", Value::Object(point))?;
    let mut tags = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        tags.push(json!(json::string(u, WORDS)?));
    }
    slot(u, &mut a, "tags", Value::Array(tags))?;
    let shape = match u.int_in_range(0..=3)? {
        0 => json!({ "kind": "circle", "radius": int_in(u, 0, u32::MAX as i128)? }),
        1 => json!({ "kind": "square", "side": int_in(u, 0, 65535)? }),
        2 => json!({ "kind": "dot" }),
        _ => json!({ "kind": json::string(u, &["circle", "dot", "triangle"])?, "radius": 1, "side": 2 }),
    };
    slot(u, &mut a, "shape", shape)?;
    let v = json!(u.arbitrary::<bool>()?);
    slot(u, &mut a, "flag", v)?;
    if u.ratio(1, 12)? {
        a.insert("unknown".into(), json!(true));
    }
    Ok(Value::Object(a))
}

/// Arguments for `scale`.
pub fn scale(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut a = Map::new();
    let v = int_in(u, i32::MIN as i128, i32::MAX as i128)?;
    slot(u, &mut a, "factor", v)?;
    let v = int_in(u, 0, 255)?;
    slot(u, &mut a, "times", v)?;
    let v = json!(*u.choose(&["red", "green", "blue", "Blue"])?);
    slot(u, &mut a, "unit", v)?;
    Ok(Value::Object(a))
}

/// Where the counters' calls get their handles, versions and operation ids from.
pub struct Draw<'m> {
    pub model: &'m Model,
    /// How many fresh operation ids were drawn so far in this input.
    pub fresh: &'m mut u32,
}

impl Draw<'_> {
    /// A handle: mostly of a counter that exists.
    pub fn handle(&self, u: &mut Unstructured<'_>) -> Result<Value> {
        let counters = &self.model.counters;
        Ok(match u.int_in_range(0..=9)? {
            0..=6 if !counters.is_empty() => json!(u.choose(counters)?.handle),
            7 => json!(format!("ctr_{}", json::string(u, &[])?)),
            8 => json!(json::string(u, &["ctr_", "bsk_x"])?),
            9 => json::value(u, 1, &[], &[])?,
            _ => json!("ctr_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        })
    }

    /// A version for the counter `handle`: its own, one near it, a validator, or anything.
    pub fn version(&self, u: &mut Unstructured<'_>, handle: &Value) -> Result<Option<Value>> {
        let current = handle
            .as_str()
            .and_then(|h| self.model.find(h))
            .map_or(1, |c| c.version);
        Ok(match u.int_in_range(0..=15)? {
            0..=4 => Some(json!(current)),
            5 => Some(json!(current.saturating_sub(1).max(1))),
            6 => Some(json!(current + 1)),
            7 => Some(json!(1)),
            8..=10 => Some(self.validator(u, handle)?),
            11 => Some(json!(json::string(u, &[])?)),
            12 => Some(json::number(u)?),
            13 => Some(Value::Null),
            14 => Some(json!(current as f64)),
            _ => None,
        })
    }

    /// A validator: one issued for this handle (at its current or an older version), for
    /// another, or one altered.
    pub fn validator(&self, u: &mut Unstructured<'_>, handle: &Value) -> Result<Value> {
        let issued: Vec<(&String, &(String, u64))> = self.model.validators.iter().collect();
        let mut issued = issued;
        issued.sort();
        let mine: Vec<&(&String, &(String, u64))> = issued
            .iter()
            .filter(|(_, (h, _))| Some(h.as_str()) == handle.as_str())
            .collect();
        let current = handle.as_str().and_then(|h| self.model.find(h)).map(|c| c.version);
        let pick = match u.int_in_range(0..=9)? {
            0..=3 => mine
                .iter()
                .find(|(_, (_, v))| Some(*v) == current)
                .map(|(s, _)| (*s).clone()),
            4 | 5 if !mine.is_empty() => Some(u.choose(&mine)?.0.clone()),
            6 if !issued.is_empty() => Some(u.choose(&issued)?.0.clone()),
            _ => None,
        };
        let base = match pick {
            Some(base) => base,
            None if !issued.is_empty() => u.choose(&issued)?.0.clone(),
            None => "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned(),
        };
        Ok(json!(alter(u, &base)?))
    }

    /// An operation id: a fresh unguessable one, one sent before, a guessable one, or anything.
    pub fn operation_id(&mut self, u: &mut Unstructured<'_>) -> Result<Option<Value>> {
        let sent = &self.model.operation_ids;
        Ok(match u.int_in_range(0..=11)? {
            0..=6 => {
                *self.fresh += 1;
                Some(json!(format!("op-{:020}", *self.fresh)))
            }
            7 | 8 if !sent.is_empty() => Some(json!(u.choose(sent)?)),
            9 => Some(json!(format!("op-{}", u.int_in_range(0..=3)?))),
            10 => Some(json!(json::string(u, &[])?)),
            11 => Some(json::value(u, 1, &[], &[])?),
            _ => None,
        })
    }
}

/// `validator` as sent: mostly unchanged, or altered the ways a client or an attacker might.
pub fn alter(u: &mut Unstructured<'_>, validator: &str) -> Result<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bytes = validator.as_bytes().to_vec();
    Ok(match u.int_in_range(0..=15)? {
        0..=6 => validator.to_owned(),
        7 => {
            // One character replaced by another of the alphabet.
            if !bytes.is_empty() {
                let at = u.choose_index(bytes.len())?;
                bytes[at] = *u.choose(ALPHABET)?;
            }
            String::from_utf8(bytes).unwrap()
        }
        8 => {
            let keep = u.int_in_range(0..=bytes.len())?;
            validator[..keep].to_owned()
        }
        9 => format!("{validator}{}", *u.choose(&["A", "=", "==", " ", "AAAA", "\n"])?),
        10 => validator.replace('-', "+").replace('_', "/"),
        11 => validator.to_ascii_uppercase(),
        12 => {
            // The last character changed in its low bits only: the same bytes if the decoder
            // ignored trailing bits.
            if let Some(last) = bytes.last_mut() {
                let at = ALPHABET.iter().position(|c| c == last).unwrap_or(0);
                *last = ALPHABET[(at & !3) | usize::from(u.int_in_range(0u8..=3)?)];
            }
            String::from_utf8(bytes).unwrap()
        }
        13 => {
            // Another tag: the body kept, the rest made up.
            let keep = bytes.len().min(11);
            let mut forged = validator[..keep].to_owned();
            for _ in keep..validator.len() {
                forged.push(*u.choose(ALPHABET)? as char);
            }
            forged
        }
        14 => format!(" {validator}"),
        _ => json::string(u, &[])?,
    })
}

/// A call of a counter tool: its name and arguments.
pub fn counter_call(u: &mut Unstructured<'_>, draw: &mut Draw<'_>) -> Result<(&'static str, Value)> {
    let tool = *u.choose(&[
        "counter_create",
        "counter_create",
        "counter_get",
        "counter_add",
        "counter_add",
        "counter_rename",
        "counter_close",
        "counter_note",
    ])?;
    let mut a = Map::new();
    match tool {
        "counter_create" => {
            let v = json!(json::string(u, WORDS)?);
            slot(u, &mut a, "label", v)?;
            let v = json::number(u)?;
            if u.arbitrary()? {
                a.insert("start".into(), v);
            }
        }
        "counter_get" => {
            let handle = draw.handle(u)?;
            if u.ratio(1, 2)?
                && let Some(basis) = draw.version(u, &handle)?
            {
                a.insert("basis_version".into(), basis);
            }
            a.insert("counter_id".into(), handle);
        }
        _ => {
            let handle = draw.handle(u)?;
            if tool != "counter_note"
                && let Some(version) = draw.version(u, &handle)?
            {
                a.insert("expected_version".into(), version);
            }
            a.insert("counter_id".into(), handle);
            match tool {
                "counter_add" => {
                    let step = if u.ratio(1, 4)? { json::number(u)? } else { json!(u.int_in_range(-3i64..=3)?) };
                    a.insert("step".into(), step);
                }
                "counter_rename" => {
                    let v = json!(json::string(u, WORDS)?);
                    slot(u, &mut a, "label", v)?;
                }
                "counter_note" => {
                    let v = json!(json::string(u, WORDS)?);
                    slot(u, &mut a, "text", v)?;
                }
                _ => {}
            }
        }
    }
    if tool != "counter_get"
        && let Some(id) = draw.operation_id(u)?
    {
        a.insert("operation_id".into(), id);
    }
    if u.ratio(1, 16)? {
        a.insert(json::string(u, &["basis_version", "expected_version", "counter_id"])?, json::value(u, 1, &[], &[])?);
    }
    Ok((tool, Value::Object(a)))
}
