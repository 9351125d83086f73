//! The comparison of two contracts entry by entry: tools, prompts, resources and templates, and
//! the framework's `_meta` (scopes, the state contract). Schemas are compared in [`super::schema`].

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::schema::{self, Direction};
use super::sink::{Sink, at, changed, child, object_or_empty, string_set};
use super::{Change, Contract, Severity};
use crate::protocol::framework::{SCOPES_META_KEY, STATE_META_KEY, TASK_SUPPORT_META_KEY};

/// The changes between two contracts, in report order.
pub(super) fn contracts(old: &Contract, new: &Contract) -> Vec<Change> {
    let mut sink = Sink::default();
    if old.protocol_version != new.protocol_version {
        sink.unclassified(
            "contract: protocolVersion".into(),
            "the protocol version",
            Some(&Value::from(old.protocol_version.as_str())),
            Some(&Value::from(new.protocol_version.as_str())),
        );
    }
    entries(&mut sink, "tool", "name", &old.tools, &new.tools, tool);
    entries(
        &mut sink,
        "prompt",
        "name",
        &old.prompts,
        &new.prompts,
        prompt,
    );
    entries(
        &mut sink,
        "resource",
        "uri",
        &old.resources,
        &new.resources,
        resource,
    );
    entries(
        &mut sink,
        "resource template",
        "uriTemplate",
        &old.resource_templates,
        &new.resource_templates,
        resource,
    );
    sink.finish()
}

type CompareEntry = fn(&mut Sink, &str, &Map<String, Value>, &Map<String, Value>);

/// Matches entries by their identifier: one missing from the newer contract is removed (a
/// rename is a removal and an addition, since callers address entries by it).
fn entries(
    sink: &mut Sink,
    kind: &str,
    key: &str,
    old: &[Value],
    new: &[Value],
    compare: CompareEntry,
) {
    let by_name = |list: &'_ [Value]| -> BTreeMap<String, Value> {
        list.iter()
            .map(|entry| (super::name_of(entry, key).to_owned(), entry.clone()))
            .collect()
    };
    let (old, new) = (by_name(old), by_name(new));
    let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for name in names {
        let entity = format!("{kind} {name}");
        match (old.get(name), new.get(name)) {
            (Some(_), None) => sink.push(Severity::Breaking, entity, format!("{kind} removed")),
            (None, Some(_)) => sink.push(Severity::Compatible, entity, format!("{kind} added")),
            (Some(old), Some(new)) => match (old.as_object(), new.as_object()) {
                (Some(old), Some(new)) => compare(sink, &entity, old, new),
                _ => sink.unclassified(entity, kind, Some(old), Some(new)),
            },
            (None, None) => {}
        }
    }
}

/// The keys of two objects, in order.
fn keys<'m>(old: &'m Map<String, Value>, new: &'m Map<String, Value>) -> BTreeSet<&'m str> {
    old.keys().chain(new.keys()).map(String::as_str).collect()
}

fn tool(sink: &mut Sink, entity: &str, old: &Map<String, Value>, new: &Map<String, Value>) {
    for key in keys(old, new) {
        let (o, n) = (old.get(key), new.get(key));
        if o == n {
            continue;
        }
        let location = at(entity, &child("", key));
        match key {
            "title" | "description" | "icons" => sink.cosmetic(location, key, o, n),
            "inputSchema" => match (o, n) {
                (Some(o), Some(n)) => schema::compare(sink, entity, key, o, n, Direction::Input),
                _ => sink.unclassified(location, key, o, n),
            },
            "outputSchema" => match (o, n) {
                (Some(o), Some(n)) => schema::compare(sink, entity, key, o, n, Direction::Output),
                (Some(_), None) => sink.push(
                    Severity::Breaking,
                    location,
                    "outputSchema removed: structured results are no longer described".into(),
                ),
                (None, Some(_)) => {
                    sink.push(Severity::Compatible, location, "outputSchema added".into())
                }
                (None, None) => {}
            },
            "annotations" => match (object_or_empty(o), object_or_empty(n)) {
                (Some(o), Some(n)) => annotations(sink, entity, o, n),
                _ => sink.unclassified(location, key, o, n),
            },
            "_meta" => match (object_or_empty(o), object_or_empty(n)) {
                (Some(o), Some(n)) => meta(sink, entity, o, n),
                _ => sink.unclassified(location, key, o, n),
            },
            "execution" => sink.push(
                Severity::Breaking,
                location,
                format!("task support changed: {}", changed(key, o, n)),
            ),
            _ => sink.unclassified(location, key, o, n),
        }
    }
}

/// A hint and the value the schema gives it when absent.
const HINTS: [(&str, bool); 4] = [
    ("readOnlyHint", false),
    ("destructiveHint", true),
    ("idempotentHint", false),
    ("openWorldHint", true),
];

fn annotations(sink: &mut Sink, entity: &str, old: &Map<String, Value>, new: &Map<String, Value>) {
    for key in keys(old, new) {
        let (o, n) = (old.get(key), new.get(key));
        let location = at(entity, &child("annotations", key));
        if key == "title" {
            sink.cosmetic(location, "annotations.title", o, n);
            continue;
        }
        let Some(&(_, default)) = HINTS.iter().find(|(hint, _)| *hint == key) else {
            sink.unclassified(location, &format!("annotations.{key}"), o, n);
            continue;
        };
        let effective = |value: Option<&Value>| match value {
            None => Some(default),
            Some(value) => value.as_bool(),
        };
        let (Some(was), Some(now)) = (effective(o), effective(n)) else {
            sink.unclassified(location, key, o, n);
            continue;
        };
        if was == now {
            continue;
        }
        // Turning a hint towards "less safe" breaks the callers that skipped confirmations or
        // retried on its word; towards "safer" only adds a promise.
        let severity = match (key, now) {
            ("readOnlyHint", false) | ("destructiveHint", true) | ("idempotentHint", false) => {
                Severity::Breaking
            }
            ("openWorldHint", _) => Severity::Breaking,
            _ => Severity::Compatible,
        };
        let shown = |value: Option<&Value>, effective: bool| match value {
            Some(_) => effective.to_string(),
            None => format!("absent, so {effective}"),
        };
        let mut message = format!(
            "{key} turned {} (was {}, now {})",
            if now { "on" } else { "off" },
            shown(o, was),
            shown(n, now)
        );
        if key == "openWorldHint" {
            message.push_str("; no rule classifies this change, so it counts as breaking");
        }
        sink.push(severity, location, message);
    }
}

fn meta(sink: &mut Sink, entity: &str, old: &Map<String, Value>, new: &Map<String, Value>) {
    for key in keys(old, new) {
        let (o, n) = (old.get(key), new.get(key));
        if o == n {
            continue;
        }
        let path = child("_meta", key);
        match key {
            SCOPES_META_KEY => scopes(sink, &at(entity, &path), o, n),
            TASK_SUPPORT_META_KEY => task_support(sink, &at(entity, &path), o, n),
            STATE_META_KEY => match (o.and_then(Value::as_object), n.and_then(Value::as_object)) {
                (Some(o), Some(n)) => state(sink, entity, &path, o, n),
                _ => sink.unclassified(at(entity, &path), "the state contract", o, n),
            },
            _ => sink.unclassified(at(entity, &path), &format!("_meta {key:?}"), o, n),
        }
    }
}

/// How a tool runs as a task: a client that does not take tasks loses a tool that becomes
/// `required`; one that does copes with either answer, so other moves are compatible.
fn task_support(sink: &mut Sink, location: &str, old: Option<&Value>, new: Option<&Value>) {
    fn mode(value: Option<&Value>) -> Option<&str> {
        match value {
            None => Some("never"),
            Some(value) => value
                .as_str()
                .filter(|mode| ["optional", "required"].contains(mode)),
        }
    }
    let (Some(was), Some(now)) = (mode(old), mode(new)) else {
        sink.unclassified(location.to_owned(), "the task support", old, new);
        return;
    };
    let (severity, consequence) = match now {
        "required" => (
            Severity::Breaking,
            "clients without the Tasks extension are now refused",
        ),
        "optional" => (
            Severity::Compatible,
            "clients with the Tasks extension may get a task",
        ),
        _ => (Severity::Compatible, "calls are answered when they finish"),
    };
    sink.push(
        severity,
        location.to_owned(),
        format!("task support {was} -> {now}: {consequence}"),
    );
}

fn scopes(sink: &mut Sink, location: &str, old: Option<&Value>, new: Option<&Value>) {
    let (Some(was), Some(now)) = (string_set(old), string_set(new)) else {
        sink.unclassified(location.to_owned(), "the scopes", old, new);
        return;
    };
    for scope in now.difference(&was) {
        sink.push(
            Severity::Breaking,
            location.to_owned(),
            format!("scope {scope:?} added: callers without it are now refused"),
        );
    }
    for scope in was.difference(&now) {
        sink.push(
            Severity::Compatible,
            location.to_owned(),
            format!("scope {scope:?} no longer required"),
        );
    }
}

fn state(
    sink: &mut Sink,
    entity: &str,
    path: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) {
    for key in keys(old, new) {
        let (o, n) = (old.get(key), new.get(key));
        if o == n {
            continue;
        }
        let location = at(entity, &child(path, key));
        let named = match key {
            "codes" => {
                codes(sink, entity, &child(path, key), o, n);
                continue;
            }
            "tool" => "the state tool kind",
            "handle" => "the handle argument",
            "conflict" => "the conflict policy",
            "idempotency" => "the idempotency key",
            // Stated where an older contract left them implicit: the tool followed the same
            // rule, and had the same collections, before they were published.
            "concurrency" | "collections" if o.is_none() => {
                sink.push(
                    Severity::Compatible,
                    location,
                    format!(
                        "state {key:?} published: {}",
                        n.map_or_else(String::new, Value::to_string)
                    ),
                );
                continue;
            }
            "concurrency" => "the concurrency rule",
            "collections" => "the collections",
            "effects" => {
                effect_kinds(sink, location, o, n);
                continue;
            }
            _ if key.starts_with("task") => {
                sink.push(
                    Severity::Breaking,
                    location,
                    format!("task support changed: {}", changed(key, o, n)),
                );
                continue;
            }
            _ => {
                sink.unclassified(location, &format!("state {key:?}"), o, n);
                continue;
            }
        };
        sink.push(Severity::Breaking, location, changed(named, o, n));
    }
}

/// The kinds of effects a tool emits: a new kind is compatible (callers see only a new output
/// field); a kind no longer emitted is breaking, since effects of it already stored are
/// delivered only by a server that still has its handler.
fn effect_kinds(sink: &mut Sink, location: String, old: Option<&Value>, new: Option<&Value>) {
    let kinds = |value: Option<&Value>| -> BTreeSet<String> {
        value
            .and_then(Value::as_array)
            .map(|kinds| kinds.iter().map(Value::to_string).collect())
            .unwrap_or_default()
    };
    let (was, now) = (kinds(old), kinds(new));
    for kind in now.difference(&was) {
        sink.push(
            Severity::Compatible,
            location.clone(),
            format!("the tool now emits {kind} effects"),
        );
    }
    for kind in was.difference(&now) {
        sink.push(
            Severity::Breaking,
            location.clone(),
            format!(
                "the tool no longer emits {kind} effects: those already stored are delivered only \
                 by a server that still handles them"
            ),
        );
    }
}

/// The codes keyed by `code`, when every entry has a distinct one.
fn codes_by_name(value: Option<&Value>) -> Option<BTreeMap<&str, &Map<String, Value>>> {
    let Some(value) = value else {
        return Some(BTreeMap::new());
    };
    let list = value.as_array()?;
    let mut codes = BTreeMap::new();
    for entry in list {
        let entry = entry.as_object()?;
        let code = entry.get("code")?.as_str()?;
        if codes.insert(code, entry).is_some() {
            return None;
        }
    }
    Some(codes)
}

fn codes(sink: &mut Sink, entity: &str, path: &str, old: Option<&Value>, new: Option<&Value>) {
    let (Some(was), Some(now)) = (codes_by_name(old), codes_by_name(new)) else {
        sink.unclassified(at(entity, path), "the codes", old, new);
        return;
    };
    let names: BTreeSet<&str> = was.keys().chain(now.keys()).copied().collect();
    for code in names {
        let location = at(entity, &child(path, code));
        match (was.get(code), now.get(code)) {
            (Some(_), None) => sink.push(
                Severity::Breaking,
                location,
                format!("outcome code {code:?} removed"),
            ),
            (None, Some(_)) => sink.push(
                Severity::Breaking,
                location,
                format!("outcome code {code:?} added"),
            ),
            (Some(o), Some(n)) => {
                for key in keys(o, n) {
                    let (ov, nv) = (o.get(key), n.get(key));
                    let location = location.clone();
                    match key {
                        "code" => {}
                        "description" => sink.cosmetic(
                            location,
                            &format!("the description of code {code:?}"),
                            ov,
                            nv,
                        ),
                        "recovery" => {
                            if ov != nv {
                                sink.push(
                                    Severity::Breaking,
                                    location,
                                    changed(&format!("the recovery of code {code:?}"), ov, nv),
                                );
                            }
                        }
                        _ => sink.unclassified(
                            location,
                            &format!("{key:?} of code {code:?}"),
                            ov,
                            nv,
                        ),
                    }
                }
            }
            (None, None) => {}
        }
    }
}

fn prompt(sink: &mut Sink, entity: &str, old: &Map<String, Value>, new: &Map<String, Value>) {
    for key in keys(old, new) {
        let (o, n) = (old.get(key), new.get(key));
        if o == n {
            continue;
        }
        let location = at(entity, &child("", key));
        match key {
            "title" | "description" | "icons" => sink.cosmetic(location, key, o, n),
            "arguments" => prompt_arguments(sink, entity, o, n),
            _ => sink.unclassified(location, key, o, n),
        }
    }
}

/// The arguments keyed by `name`, when every entry has a distinct one.
fn arguments_by_name(value: Option<&Value>) -> Option<BTreeMap<&str, &Map<String, Value>>> {
    let Some(value) = value else {
        return Some(BTreeMap::new());
    };
    let mut arguments = BTreeMap::new();
    for entry in value.as_array()? {
        let entry = entry.as_object()?;
        if arguments
            .insert(entry.get("name")?.as_str()?, entry)
            .is_some()
        {
            return None;
        }
    }
    Some(arguments)
}

fn prompt_arguments(sink: &mut Sink, entity: &str, old: Option<&Value>, new: Option<&Value>) {
    let (Some(was), Some(now)) = (arguments_by_name(old), arguments_by_name(new)) else {
        sink.unclassified(at(entity, "arguments"), "the arguments", old, new);
        return;
    };
    let required = |argument: &Map<String, Value>| match argument.get("required") {
        None => Some(false),
        Some(value) => value.as_bool(),
    };
    let names: BTreeSet<&str> = was.keys().chain(now.keys()).copied().collect();
    for name in names {
        let location = at(entity, &child("arguments", name));
        match (was.get(name), now.get(name)) {
            (Some(_), None) => sink.push(
                Severity::Breaking,
                location,
                format!("prompt argument {name:?} removed"),
            ),
            (None, Some(argument)) => {
                let (severity, kind) = if required(argument) == Some(false) {
                    (Severity::Compatible, "optional")
                } else {
                    (Severity::Breaking, "required")
                };
                sink.push(
                    severity,
                    location,
                    format!("{kind} prompt argument {name:?} added"),
                );
            }
            (Some(o), Some(n)) => {
                for key in keys(o, n) {
                    let (ov, nv) = (o.get(key), n.get(key));
                    let location = location.clone();
                    match key {
                        "name" => {}
                        "title" | "description" => sink.cosmetic(
                            location,
                            &format!("the {key} of prompt argument {name:?}"),
                            ov,
                            nv,
                        ),
                        "required" => match (required(o), required(n)) {
                            (Some(false), Some(true)) => sink.push(
                                Severity::Breaking,
                                location,
                                format!("prompt argument {name:?} made required"),
                            ),
                            (Some(true), Some(false)) => sink.push(
                                Severity::Compatible,
                                location,
                                format!("prompt argument {name:?} made optional"),
                            ),
                            (Some(_), Some(_)) => {}
                            _ => sink.unclassified(location, "required", ov, nv),
                        },
                        _ => sink.unclassified(
                            location,
                            &format!("{key:?} of prompt argument {name:?}"),
                            ov,
                            nv,
                        ),
                    }
                }
            }
            (None, None) => {}
        }
    }
}

/// A resource or a resource template (the identifying member is equal by construction).
fn resource(sink: &mut Sink, entity: &str, old: &Map<String, Value>, new: &Map<String, Value>) {
    for key in keys(old, new) {
        let (o, n) = (old.get(key), new.get(key));
        if o == n {
            continue;
        }
        let location = at(entity, &child("", key));
        match key {
            "title" | "description" | "icons" => sink.cosmetic(location, key, o, n),
            // Clients pick a decoder by it.
            "mimeType" => sink.push(Severity::Breaking, location, changed("mimeType", o, n)),
            _ => sink.unclassified(location, key, o, n),
        }
    }
}
