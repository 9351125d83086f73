//! The contract-file parser and differ (`mcp_tools::contract`). The first byte of an input
//! chooses what the rest is:
//!
//! - `0`: one contract file, arbitrary bytes;
//! - `1`: two contract files, split at the first `0xff` byte;
//! - anything else: edits to a committed contract (`examples/contracts/quickstart.json`, or one
//!   tool of `basket.json`): values replaced, members removed or added (schema keywords, local
//!   `$ref`s that may loop), subtrees copied elsewhere. The edited file is diffed against the
//!   committed one both ways.
//!
//! Asserts:
//! - a file that parses writes back (`to_json_string`) to a file that parses to the same
//!   contract and writes the same bytes; a refusal says why (a non-empty message);
//! - a contract differs from itself in nothing; equal contracts have an empty diff;
//! - a diff is deterministic, breaking changes first, its counts, `max_severity`,
//!   `is_breaking`, JSON report and text agree, and every change has a location and a message;
//! - an entry removed in `a → b` is added in `b → a`, and the other way round.

#![no_main]

use std::sync::LazyLock;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use mcp_tools::contract::{Contract, ContractDiff, Severity};
use mcp_tools_fuzz::json;
use serde_json::{Map, Value, json};

const QUICKSTART: &str = include_str!("../../examples/contracts/quickstart.json");
const BASKET: &str = include_str!("../../examples/contracts/basket.json");

/// The committed contracts an edit starts from, as JSON and parsed: quickstart, and each basket
/// tool alone.
static BASES: LazyLock<Vec<(Value, Contract)>> = LazyLock::new(|| {
    let mut bases: Vec<Value> = vec![serde_json::from_str(QUICKSTART).unwrap()];
    let basket: Value = serde_json::from_str(BASKET).unwrap();
    for tool in basket["tools"].as_array().unwrap() {
        let mut one = basket.clone();
        one["tools"] = json!([tool]);
        bases.push(one);
    }
    bases
        .into_iter()
        .map(|json| {
            let contract = Contract::parse(&json.to_string()).unwrap();
            (json, contract)
        })
        .collect()
});

const KEYWORDS: &[&str] = &[
    "type", "properties", "required", "items", "enum", "const", "minimum", "maximum",
    "exclusiveMinimum", "minLength", "maxLength", "minItems", "additionalProperties", "anyOf",
    "oneOf", "allOf", "not", "if", "then", "else", "$ref", "$defs", "definitions", "default",
    "description", "title", "format", "pattern", "prefixItems", "contains", "propertyNames",
    "patternProperties", "dependentRequired", "unevaluatedProperties", "annotations",
    "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "_meta", "execution",
    "io.github.mcp-tools/scopes", "io.github.mcp-tools/state", "io.github.mcp-tools/task",
    "inputSchema", "outputSchema", "name", "uri", "uriTemplate", "arguments",
];
const WORDS: &[&str] = &[
    "string", "integer", "number", "object", "array", "boolean", "null", "#", "#/$defs/Basket",
    "#/$defs/McpToolError", "#/properties", "#/$defs", "#/definitions/X", "add", "echo",
    "required", "optional", "applied", "rejected", "STALE_VIEW",
];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode {
        0 => {
            let text = String::from_utf8_lossy(rest);
            if let Some(contract) = parse(&text) {
                check_pair(&BASES[0].1, &contract);
            }
        }
        1 => {
            let at = rest.iter().position(|b| *b == 0xff).unwrap_or(rest.len());
            let a = parse(&String::from_utf8_lossy(&rest[..at]));
            let b = parse(&String::from_utf8_lossy(rest.get(at + 1..).unwrap_or_default()));
            if let (Some(a), Some(b)) = (a, b) {
                check_pair(&a, &b);
            }
        }
        _ => {
            let _ = edited(&mut Unstructured::new(rest));
        }
    }
});

/// Parses `text`; a contract that parses must write back to itself.
fn parse(text: &str) -> Option<Contract> {
    let contract = match Contract::parse(text) {
        Ok(contract) => contract,
        Err(error) => {
            assert!(!error.to_string().is_empty());
            return None;
        }
    };
    let written = contract.to_json_string();
    let again = Contract::parse(&written)
        .unwrap_or_else(|e| panic!("a written contract does not parse ({e}):\n{written}"));
    assert_eq!(again, contract, "a contract changed through its file:\n{written}");
    assert_eq!(again.to_json_string(), written, "a contract file is not canonical");
    Some(contract)
}

fn check_pair(a: &Contract, b: &Contract) {
    let forward = a.diff(b);
    let backward = b.diff(a);
    assert_eq!(forward, a.diff(b), "a diff is not deterministic");
    check_report(&forward);
    check_report(&backward);
    for contract in [a, b] {
        let itself = contract.diff(contract);
        assert!(itself.changes().is_empty(), "a contract differs from itself:\n{itself}");
    }
    if a == b {
        assert!(forward.changes().is_empty(), "equal contracts differ:\n{forward}");
    }
    // An entry removed one way is added the other way.
    for (one, other) in [(&forward, &backward), (&backward, &forward)] {
        for change in one.changes() {
            for kind in ["tool", "prompt", "resource", "resource template"] {
                let location = change.location();
                if location.strip_prefix(kind).is_some_and(|rest| rest.starts_with(' '))
                    && change.message() == format!("{kind} removed")
                {
                    let added = format!("{kind} added");
                    assert!(
                        other
                            .changes()
                            .iter()
                            .any(|c| c.location() == location && c.message() == added),
                        "{location} removed one way, not added the other way"
                    );
                }
            }
        }
    }
}

fn check_report(diff: &ContractDiff) {
    let changes = diff.changes();
    for pair in changes.windows(2) {
        assert!(pair[0].severity() >= pair[1].severity(), "not breaking first:\n{diff}");
    }
    let max = changes.iter().map(|c| c.severity()).max();
    assert_eq!(diff.max_severity(), max);
    assert_eq!(diff.is_breaking(), max == Some(Severity::Breaking));
    for change in changes {
        assert!(!change.location().is_empty(), "a change without a location:\n{diff}");
        assert!(!change.message().is_empty(), "a change without a message:\n{diff}");
    }
    let report = diff.to_json();
    let count = |key: &str| report[key].as_u64().unwrap() as usize;
    assert_eq!(count("breaking") + count("compatible") + count("cosmetic"), changes.len());
    assert_eq!(report["changes"].as_array().unwrap().len(), changes.len());
    let text = diff.to_string();
    if changes.is_empty() {
        assert_eq!(text, "no changes");
    } else {
        let lines = text.lines().count();
        let newlines_inside: usize = changes
            .iter()
            .map(|c| c.to_string().matches('\n').count())
            .sum();
        assert_eq!(lines, changes.len() + 1 + newlines_inside, "{text}");
    }
}

/// A committed contract with edits, diffed against it.
fn edited(u: &mut Unstructured<'_>) -> Result<()> {
    let bases = &*BASES;
    let index = if u.ratio(2, 3)? { 0 } else { u.choose_index(bases.len())? };
    let (base, old) = &bases[index];
    let mut edited = base.clone();
    for _ in 0..u.int_in_range(1..=6)? {
        edit(u, &mut edited)?;
    }
    let text = serde_json::to_string(&edited).unwrap();
    if let Some(new) = parse(&text) {
        check_pair(old, &new);
    }
    Ok(())
}

/// One edit at a random place of `root`.
fn edit(u: &mut Unstructured<'_>, root: &mut Value) -> Result<()> {
    // A subtree to copy elsewhere, taken before the walk.
    let donor = pick(u, root)?.clone();
    let mut node = root;
    loop {
        let children = match node {
            Value::Object(map) => map.len(),
            Value::Array(items) => items.len(),
            _ => 0,
        };
        if children == 0 || u.ratio(1, 4)? {
            break;
        }
        let at = u.choose_index(children)?;
        node = match node {
            Value::Object(map) => map.values_mut().nth(at).unwrap(),
            Value::Array(items) => &mut items[at],
            _ => unreachable!(),
        };
    }
    match u.int_in_range(0..=9)? {
        0 => *node = json::value(u, 2, KEYWORDS, WORDS)?,
        1 => *node = donor,
        2 => {
            if let Value::Object(map) = node
                && !map.is_empty()
            {
                let at = u.choose_index(map.len())?;
                let key = map.keys().nth(at).unwrap().clone();
                map.remove(&key);
            }
        }
        3 | 4 => {
            if let Value::Object(map) = node {
                let key = (*u.choose(KEYWORDS)?).to_owned();
                let value = match u.int_in_range(0..=3)? {
                    0 => json!({ "$ref": *u.choose(WORDS)? }),
                    1 => donor,
                    _ => json::value(u, 2, KEYWORDS, WORDS)?,
                };
                map.insert(key, value);
            }
        }
        5 => {
            if let Value::Array(items) = node {
                items.push(if u.arbitrary()? { donor } else { json::value(u, 1, KEYWORDS, WORDS)? });
            }
        }
        6 => {
            if let Value::Array(items) = node
                && !items.is_empty()
            {
                let at = u.choose_index(items.len())?;
                items.remove(at);
            }
        }
        7 => {
            if let Some(n) = node.as_i64() {
                *node = json!(n.saturating_add(i64::from(u.int_in_range(-2i8..=2)?)));
            } else if let Some(b) = node.as_bool() {
                *node = json!(!b);
            } else if let Value::String(s) = node {
                s.push_str(json::string(u, WORDS)?.as_str());
            }
        }
        8 => *node = json!({ "$ref": *u.choose(WORDS)? }),
        _ => {
            if let Value::Object(map) = node {
                let mut wrapped = Map::new();
                wrapped.insert((*u.choose(&["anyOf", "oneOf", "allOf"])?).to_owned(), json!([Value::Object(map.clone()), { "type": "null" }]));
                *node = Value::Object(wrapped);
            }
        }
    }
    Ok(())
}

/// A random subtree of `root`.
fn pick<'v>(u: &mut Unstructured<'_>, root: &'v Value) -> Result<&'v Value> {
    let mut node = root;
    loop {
        let children: Vec<&Value> = match node {
            Value::Object(map) => map.values().collect(),
            Value::Array(items) => items.iter().collect(),
            _ => Vec::new(),
        };
        if children.is_empty() || u.ratio(1, 3)? {
            return Ok(node);
        }
        node = *u.choose(&children)?;
    }
}
