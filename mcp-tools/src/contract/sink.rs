//! What both comparisons share: the sink that collects changes in report order, and the helpers
//! that name a location, quote a value and read an absent member as empty.

use std::collections::{BTreeSet, HashSet};
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::{Change, Severity};

/// Values longer than this (as compact JSON) are left out of messages.
const SHORT: usize = 60;

/// Collects changes; [`finish`](Sink::finish) puts them in report order.
#[derive(Default)]
pub(super) struct Sink {
    changes: Vec<Change>,
}

impl Sink {
    pub(super) fn push(&mut self, severity: Severity, location: String, message: String) {
        self.changes.push(Change {
            severity,
            location,
            message,
        });
    }

    /// A change no rule classifies: breaking, so that nothing unexamined passes the check.
    pub(super) fn unclassified(
        &mut self,
        location: String,
        what: &str,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        if old != new {
            self.push(
                Severity::Breaking,
                location,
                format!(
                    "{}; no rule classifies this change, so it counts as breaking",
                    changed(what, old, new)
                ),
            );
        }
    }

    /// A wording change, when there is one.
    pub(super) fn cosmetic(
        &mut self,
        location: String,
        what: &str,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        if old != new {
            self.push(Severity::Cosmetic, location, changed(what, old, new));
        }
    }

    /// Breaking first; the walk order within a severity; a change reached twice kept once.
    pub(super) fn finish(self) -> Vec<Change> {
        let mut seen = HashSet::new();
        let mut changes: Vec<Change> = self
            .changes
            .into_iter()
            .filter(|change| seen.insert(change.clone()))
            .collect();
        changes.sort_by_key(|change| std::cmp::Reverse(change.severity));
        changes
    }
}

/// `what added: v`, `what removed (was v)` or `what changed from a to b`, values shown when short.
pub(super) fn changed(what: &str, old: Option<&Value>, new: Option<&Value>) -> String {
    match (old.map(short), new.map(short)) {
        (None, Some(Some(new))) => format!("{what} added: {new}"),
        (None, _) => format!("{what} added"),
        (Some(Some(old)), None) => format!("{what} removed (was {old})"),
        (_, None) => format!("{what} removed"),
        (Some(Some(old)), Some(Some(new))) => format!("{what} changed from {old} to {new}"),
        (Some(_), Some(_)) => format!("{what} changed"),
    }
}

/// A value as compact JSON, when it is short enough for a message.
pub(super) fn short(value: &Value) -> Option<String> {
    let text = value.to_string();
    (text.chars().count() <= SHORT).then_some(text)
}

/// `path.key`, or `path["key"]` when the key is not a plain identifier, so that a location
/// reads unambiguously whatever the names.
pub(super) fn child(path: &str, key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '-'));
    match (path.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::from(key)),
    }
}

/// `path[index]`.
pub(super) fn index(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

/// A location: the entry, then the path inside it.
pub(super) fn at(entity: &str, path: &str) -> String {
    if path.is_empty() {
        entity.to_owned()
    } else {
        format!("{entity}: {path}")
    }
}

static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
static EMPTY_LIST: Vec<Value> = Vec::new();

/// An absent member read as an empty object; `None` when it is something else.
pub(super) fn object_or_empty(value: Option<&Value>) -> Option<&Map<String, Value>> {
    match value {
        None => Some(&EMPTY),
        Some(value) => value.as_object(),
    }
}

/// An absent member read as an empty array; `None` when it is something else.
pub(super) fn array_or_empty(value: Option<&Value>) -> Option<&Vec<Value>> {
    match value {
        None => Some(&EMPTY_LIST),
        Some(value) => value.as_array(),
    }
}

/// A list of strings read as a set; an absent list is empty.
pub(super) fn string_set(value: Option<&Value>) -> Option<BTreeSet<&str>> {
    match value {
        None => Some(BTreeSet::new()),
        Some(Value::Array(items)) => items.iter().map(Value::as_str).collect(),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_locations_quote_keys_that_are_not_identifiers() {
        assert_eq!(child("", "inputSchema"), "inputSchema");
        assert_eq!(child("a", "$defs"), "a.$defs");
        assert_eq!(
            child("_meta", "io.github.mcp-tools/state"),
            "_meta[\"io.github.mcp-tools/state\"]"
        );
        assert_eq!(child("p", "a b"), "p[\"a b\"]");
        assert_eq!(child("p", ""), "p[\"\"]");
        assert_eq!(index("anyOf", 2), "anyOf[2]");
    }

    #[test]
    fn contract_messages_show_only_short_values() {
        let long = Value::from("x".repeat(SHORT + 1));
        assert_eq!(
            changed(
                "description",
                Some(&Value::from("a")),
                Some(&Value::from("b"))
            ),
            "description changed from \"a\" to \"b\""
        );
        assert_eq!(
            changed("description", Some(&long), Some(&Value::from("b"))),
            "description changed"
        );
        assert_eq!(
            changed("title", None, Some(&Value::from("T"))),
            "title added: \"T\""
        );
        assert_eq!(
            changed("title", Some(&Value::from("T")), None),
            "title removed (was \"T\")"
        );
    }
}
