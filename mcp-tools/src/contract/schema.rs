//! The comparison of two JSON Schemas (2020-12) as sets of values: a change that makes a schema
//! accept fewer values *narrows* it, one that makes it accept more *widens* it. Which of the
//! two breaks callers depends on the direction: narrowing an input refuses what callers send,
//! widening an output hands consumers what they never expected.
//!
//! Local references (`#/$defs/X`, `#/definitions/X`, any `#/…` pointer) are resolved on each
//! side against that side's document; a pair of definitions is compared once, which both keeps
//! a recursive type from looping and reports a change in a shared definition once, located at
//! the definition (`outputSchema.$defs.Basket.properties.notes`).

use std::collections::{BTreeSet, HashSet};

use serde_json::{Map, Value};

use super::Severity;
use super::sink::{
    Sink, array_or_empty, at as location, changed, child, index, object_or_empty, short, string_set,
};

/// Which side of the call a schema describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    /// What the caller sends.
    Input,
    /// What the caller receives.
    Output,
    /// Under a keyword whose effect depends on more than one side (`not`, `if`, `contains`,
    /// …): any change of meaning is breaking.
    Invariant,
}

impl Direction {
    fn narrowed(self) -> Severity {
        match self {
            Direction::Input | Direction::Invariant => Severity::Breaking,
            Direction::Output => Severity::Compatible,
        }
    }

    fn widened(self) -> Severity {
        match self {
            Direction::Output | Direction::Invariant => Severity::Breaking,
            Direction::Input => Severity::Compatible,
        }
    }

    /// A value consumers may branch on (an enum value, a type, a union alternative): any change
    /// breaks consumers of an output.
    fn enumerated(self, narrowing: bool) -> Severity {
        match (self, narrowing) {
            (Direction::Output, _) => Severity::Breaking,
            (_, true) => self.narrowed(),
            (_, false) => self.widened(),
        }
    }
}

/// Keywords that only describe: a change of one never changes what validates.
const ANNOTATIONS: [&str; 5] = ["description", "title", "examples", "$comment", "default"];

/// Lower bounds: a larger value narrows.
const LOWER_BOUNDS: [&str; 6] = [
    "minimum",
    "exclusiveMinimum",
    "minLength",
    "minItems",
    "minProperties",
    "minContains",
];

/// Upper bounds: a smaller value narrows.
const UPPER_BOUNDS: [&str; 6] = [
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "maxProperties",
    "maxContains",
];

/// Subschema keywords compared without a direction.
const INVARIANT_SUBSCHEMAS: [&str; 10] = [
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
    "contentSchema",
];

/// Deeper than any schema a program generates; a guard against stack exhaustion, not a limit
/// real contracts meet.
const MAX_DEPTH: usize = 128;

const ANYTHING: &Value = &Value::Bool(true);

/// Compares the schema `member` (`inputSchema`, `outputSchema`) of entry `entity`.
pub(super) fn compare(
    sink: &mut Sink,
    entity: &str,
    member: &str,
    old: &Value,
    new: &Value,
    direction: Direction,
) {
    let mut walk = Walk {
        sink,
        entity,
        member,
        old_root: old,
        new_root: new,
        visited: HashSet::new(),
    };
    let at = Node {
        old: String::new(),
        new: String::new(),
        path: member.to_owned(),
        direction,
        root: true,
        depth: 0,
    };
    walk.schema(old, new, &at);
}

struct Walk<'r, 's> {
    sink: &'s mut Sink,
    entity: &'s str,
    member: &'s str,
    old_root: &'r Value,
    new_root: &'r Value,
    /// Pairs of positions (JSON pointers in the old and new document) already compared through
    /// a reference. Positions are finite, so a walk that only re-enters unseen pairs ends.
    visited: HashSet<(String, String)>,
}

/// Where the walk is: the position in each document, the path shown in locations, and how to
/// read a change there.
#[derive(Clone)]
struct Node {
    old: String,
    new: String,
    path: String,
    direction: Direction,
    /// Whether this is the schema's root, whose properties are the tool's arguments.
    root: bool,
    depth: usize,
}

impl Node {
    /// The node under `key` (a subschema keyword), reached by `segment` in the path.
    fn under(&self, key: &str, segment: &str, direction: Direction) -> Node {
        Node {
            old: pointer_child(&self.old, key),
            new: pointer_child(&self.new, key),
            path: segment.to_owned(),
            direction,
            root: false,
            depth: self.depth + 1,
        }
    }

    /// The node at `old_index`/`new_index` of the array under `key`, shown at `path`.
    fn item(&self, key: &str, old_index: usize, new_index: usize, path: String) -> Node {
        Node {
            old: pointer_child(&pointer_child(&self.old, key), &old_index.to_string()),
            new: pointer_child(&pointer_child(&self.new, key), &new_index.to_string()),
            path,
            direction: self.direction,
            root: false,
            depth: self.depth + 1,
        }
    }
}

fn pointer_child(pointer: &str, key: &str) -> String {
    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// The target of a schema's local `$ref`, with its position; `None` when the schema has no
/// `$ref` or one this walk cannot resolve (then `$ref` is compared as a plain value).
fn target<'r>(root: &'r Value, schema: &Value) -> Option<(&'r Value, String)> {
    let reference = schema.as_object()?.get("$ref")?.as_str()?;
    let pointer = reference.strip_prefix('#')?;
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return None;
    }
    root.pointer(pointer)
        .map(|found| (found, pointer.to_owned()))
}

/// The keywords of a `$ref` schema besides `$ref`: in 2020-12 they apply alongside the target.
fn siblings(schema: &Value) -> Map<String, Value> {
    schema
        .as_object()
        .map(|object| {
            object
                .iter()
                .filter(|(key, _)| *key != "$ref")
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// A `$ref` schema with its chain of targets merged in, for comparing against a schema written
/// out in place; returns the merged schema and the position of the last target. The keywords
/// nearer the reference win, except `properties` (merged) and `required` (joined), which is
/// what applying both means for the shapes generators emit.
fn flatten(root: &Value, schema: &Value, position: &str) -> (Value, String) {
    let mut merged = Map::new();
    let mut current = schema.clone();
    let mut position = position.to_owned();
    let mut chain = HashSet::new();
    while let Some((found, pointer)) = target(root, &current) {
        if !chain.insert(pointer.clone()) {
            break;
        }
        merge(&mut merged, siblings(&current));
        current = found.clone();
        position = pointer;
    }
    match current {
        Value::Object(object) => merge(&mut merged, object),
        Value::Bool(true) => {}
        other => return (other, position),
    }
    (Value::Object(merged), position)
}

fn merge(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(&key), value) {
            (None, value) => {
                into.insert(key, value);
            }
            (Some(Value::Object(kept)), Value::Object(more)) if key == "properties" => {
                for (name, schema) in more {
                    kept.entry(name).or_insert(schema);
                }
            }
            (Some(Value::Array(kept)), Value::Array(more)) if key == "required" => {
                for name in more {
                    if !kept.contains(&name) {
                        kept.push(name);
                    }
                }
            }
            (Some(_), _) => {}
        }
    }
}

fn mentions_ref(value: &Value) -> bool {
    match value {
        Value::Object(object) => object
            .iter()
            .any(|(key, value)| key == "$ref" || mentions_ref(value)),
        Value::Array(items) => items.iter().any(mentions_ref),
        _ => false,
    }
}

/// A `$ref` target position as a location path: `outputSchema.$defs.Basket`.
fn definition_path(member: &str, pointer: &str) -> String {
    pointer
        .split('/')
        .skip(1)
        .fold(member.to_owned(), |path, segment| {
            child(&path, &segment.replace("~1", "/").replace("~0", "~"))
        })
}

/// A `type` as the set of type names it allows; `None` for any type.
fn types(value: Option<&Value>) -> Result<Option<BTreeSet<&str>>, ()> {
    match value {
        None => Ok(None),
        Some(Value::String(name)) => Ok(Some(BTreeSet::from([name.as_str()]))),
        Some(Value::Array(names)) => names
            .iter()
            .map(|name| name.as_str().ok_or(()))
            .collect::<Result<_, _>>()
            .map(Some),
        Some(_) => Err(()),
    }
}

/// Whether every value of type `name` is allowed by `allowed`.
fn covers(allowed: &Option<BTreeSet<&str>>, name: &str) -> bool {
    match allowed {
        None => true,
        Some(allowed) => {
            allowed.contains(name) || (name == "integer" && allowed.contains("number"))
        }
    }
}

fn shown_type(value: Option<&Value>) -> String {
    value.map_or_else(|| "any type".to_owned(), Value::to_string)
}

/// A name for a union alternative that survives reordering: its `const`, or the `const` of a
/// property that tells the alternatives apart (`outcome = "applied"`).
fn alternative_key(root: &Value, alternative: &Value) -> Option<String> {
    let (schema, _) = flatten(root, alternative, "");
    let object = schema.as_object()?;
    if let Some(constant) = object.get("const") {
        return Some(constant.to_string());
    }
    let properties = object.get("properties")?.as_object()?;
    properties.iter().find_map(|(name, property)| {
        let (property, _) = flatten(root, property, "");
        let constant = property.get("const")?;
        Some(format!("{name} = {constant}"))
    })
}

/// The keys of every alternative, when each has one and none repeats.
fn alternative_keys(root: &Value, alternatives: &[Value]) -> Option<Vec<String>> {
    let keys: Vec<String> = alternatives
        .iter()
        .map(|alternative| alternative_key(root, alternative))
        .collect::<Option<_>>()?;
    let distinct: BTreeSet<&String> = keys.iter().collect();
    (distinct.len() == keys.len()).then_some(keys)
}

impl Walk<'_, '_> {
    fn push(&mut self, severity: Severity, path: &str, message: String) {
        self.sink
            .push(severity, location(self.entity, path), message);
    }

    fn unclassified(&mut self, path: &str, what: &str, old: Option<&Value>, new: Option<&Value>) {
        self.sink
            .unclassified(location(self.entity, path), what, old, new);
    }

    /// Compares two schemas, resolving references first.
    fn schema(&mut self, old: &Value, new: &Value, at: &Node) {
        if at.depth > MAX_DEPTH {
            // Equal text with a reference in it may still resolve differently: not known equal.
            if old != new || mentions_ref(old) {
                self.push(
                    Severity::Breaking,
                    &at.path,
                    format!(
                        "schemas nested deeper than {MAX_DEPTH} levels may differ; not compared"
                    ),
                );
            }
            return;
        }
        let old_target = target(self.old_root, old);
        let new_target = target(self.new_root, new);
        match (old_target, new_target) {
            (None, None) => self.plain(old, new, at),
            (Some((old_target, old_position)), Some((new_target, new_position))) => {
                let old_ref = old.get("$ref");
                let new_ref = new.get("$ref");
                if old_ref != new_ref {
                    // The name of a definition is not on the wire: what it holds is compared
                    // below, so a rename with the same shape is only this.
                    self.push(
                        Severity::Cosmetic,
                        &at.path,
                        changed("$ref", old_ref, new_ref),
                    );
                }
                let (old_site, new_site) = (siblings(old), siblings(new));
                if !old_site.is_empty() || !new_site.is_empty() {
                    self.object(&old_site, &new_site, at);
                }
                if self
                    .visited
                    .insert((old_position.clone(), new_position.clone()))
                {
                    let definition = Node {
                        path: definition_path(self.member, &new_position),
                        old: old_position,
                        new: new_position,
                        depth: at.depth + 1,
                        ..at.clone()
                    };
                    self.schema(old_target, new_target, &definition);
                }
            }
            (old_target, new_target) => {
                // One side wrote out in place what the other refers to.
                let (old, old_position) = match old_target {
                    Some(_) => flatten(self.old_root, old, &at.old),
                    None => (old.clone(), at.old.clone()),
                };
                let (new, new_position) = match new_target {
                    Some(_) => flatten(self.new_root, new, &at.new),
                    None => (new.clone(), at.new.clone()),
                };
                if self
                    .visited
                    .insert((old_position.clone(), new_position.clone()))
                {
                    let merged = Node {
                        old: old_position,
                        new: new_position,
                        depth: at.depth + 1,
                        ..at.clone()
                    };
                    self.plain(&old, &new, &merged);
                }
            }
        }
    }

    /// Compares two schemas neither of which is a resolvable reference.
    fn plain(&mut self, old: &Value, new: &Value, at: &Node) {
        match (schema_object(old), schema_object(new)) {
            (Some(old), Some(new)) => self.object(old, new, at),
            _ if old == new => {}
            (Some(_), None) if *new == Value::Bool(false) => self.push(
                at.direction.narrowed(),
                &at.path,
                "schema changed to `false`: no value is accepted any more".into(),
            ),
            (None, Some(_)) if *old == Value::Bool(false) => self.push(
                at.direction.widened(),
                &at.path,
                "schema changed from `false`: values are accepted now".into(),
            ),
            _ => self.unclassified(&at.path, "the schema", Some(old), Some(new)),
        }
    }

    /// Compares two schema objects keyword by keyword.
    fn object(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, at: &Node) {
        let keys: BTreeSet<&str> = old.keys().chain(new.keys()).map(String::as_str).collect();
        let mut members_done = false;
        for key in keys {
            let (o, n) = (old.get(key), new.get(key));
            // Equal text is an equal schema unless a reference in it resolves differently.
            if o == n && !o.is_some_and(mentions_ref) {
                continue;
            }
            let path = child(&at.path, key);
            match key {
                _ if ANNOTATIONS.contains(&key) => {
                    self.sink.cosmetic(location(self.entity, &path), key, o, n)
                }
                "$defs" | "definitions" => {}
                "type" => self.type_(o, n, &path, at.direction),
                "enum" => self.enum_(o, n, &path, at.direction),
                "const" => match (o, n) {
                    (Some(_), Some(_)) => {
                        self.push(Severity::Breaking, &path, changed("const", o, n))
                    }
                    (None, _) => self.push(at.direction.narrowed(), &path, changed("const", o, n)),
                    (_, None) => self.push(at.direction.widened(), &path, changed("const", o, n)),
                },
                "properties" | "required" => {
                    if !members_done {
                        members_done = true;
                        self.members(old, new, at);
                    }
                }
                "additionalProperties" | "items" => {
                    let (o, n) = (o.unwrap_or(ANYTHING), n.unwrap_or(ANYTHING));
                    if o.is_array() || n.is_array() {
                        self.unclassified(&path, key, Some(o), Some(n));
                    } else if let (Some(was), Some(now)) = (o.as_bool(), n.as_bool()) {
                        if was != now {
                            let severity = if now {
                                at.direction.widened()
                            } else {
                                at.direction.narrowed()
                            };
                            self.push(severity, &path, changed(key, Some(o), Some(n)));
                        }
                    } else {
                        self.schema(o, n, &at.under(key, &path, at.direction));
                    }
                }
                _ if INVARIANT_SUBSCHEMAS.contains(&key) => match (o, n) {
                    (Some(o), Some(n)) => {
                        self.schema(o, n, &at.under(key, &path, Direction::Invariant))
                    }
                    _ => self.unclassified(&path, key, o, n),
                },
                "anyOf" | "oneOf" => self.alternatives(key, o, n, at),
                "allOf" | "prefixItems" => self.positional(key, o, n, at),
                "dependentSchemas" | "patternProperties" => self.schema_map(key, o, n, at),
                _ if LOWER_BOUNDS.contains(&key) => self.bound(key, o, n, &path, at, true),
                _ if UPPER_BOUNDS.contains(&key) => self.bound(key, o, n, &path, at, false),
                "pattern" | "format" | "multipleOf" => match (o, n) {
                    (None, Some(_)) => {
                        self.push(at.direction.narrowed(), &path, changed(key, o, n))
                    }
                    (Some(_), None) => self.push(at.direction.widened(), &path, changed(key, o, n)),
                    _ => self.push(Severity::Breaking, &path, changed(key, o, n)),
                },
                "uniqueItems" => match (flag(o), flag(n)) {
                    (Some(false), Some(true)) => {
                        self.push(at.direction.narrowed(), &path, changed(key, o, n))
                    }
                    (Some(true), Some(false)) => {
                        self.push(at.direction.widened(), &path, changed(key, o, n))
                    }
                    (Some(_), Some(_)) => {}
                    _ => self.unclassified(&path, key, o, n),
                },
                // The header a transport mirrors the argument into: intermediaries route on it.
                "x-mcp-header" => {
                    let message = match (o.and_then(short), n.and_then(short)) {
                        (None, Some(header)) => format!("x-mcp-header {header} added"),
                        (Some(header), None) => format!("x-mcp-header {header} removed"),
                        (Some(was), Some(now)) => {
                            format!("x-mcp-header renamed from {was} to {now}")
                        }
                        (None, None) => "x-mcp-header changed".to_owned(),
                    };
                    self.push(Severity::Breaking, &path, message);
                }
                _ => self.unclassified(&path, key, o, n),
            }
        }
    }

    fn type_(
        &mut self,
        old: Option<&Value>,
        new: Option<&Value>,
        path: &str,
        direction: Direction,
    ) {
        let (Ok(was), Ok(now)) = (types(old), types(new)) else {
            self.unclassified(path, "type", old, new);
            return;
        };
        if was == now {
            return;
        }
        let lost = match &was {
            None => true,
            Some(was) => was.iter().any(|name| !covers(&now, name)),
        };
        let gained = match &now {
            None => true,
            Some(now) => now.iter().any(|name| !covers(&was, name)),
        };
        let (old, new) = (shown_type(old), shown_type(new));
        let (severity, verb) = match (direction, lost, gained) {
            // Equal sets written differently (`"number"` and `["integer", "number"]`).
            (_, false, false) => return,
            // Consumers decode by type: a type they lose or gain both break them.
            (Direction::Output, _, _) | (_, true, true) => (Severity::Breaking, "changed"),
            (_, true, false) => (direction.narrowed(), "narrowed"),
            (_, false, true) => (direction.widened(), "widened"),
        };
        self.push(severity, path, format!("type {verb} from {old} to {new}"));
    }

    fn enum_(
        &mut self,
        old: Option<&Value>,
        new: Option<&Value>,
        path: &str,
        direction: Direction,
    ) {
        match (old, new) {
            (Some(Value::Array(was)), Some(Value::Array(now))) => {
                let removed: Vec<&Value> =
                    was.iter().filter(|value| !now.contains(value)).collect();
                let added: Vec<&Value> = now.iter().filter(|value| !was.contains(value)).collect();
                if !removed.is_empty() {
                    self.push(
                        direction.enumerated(true),
                        path,
                        format!(
                            "enum value{} {} removed",
                            plural(&removed),
                            listed(&removed)
                        ),
                    );
                }
                if !added.is_empty() {
                    self.push(
                        direction.enumerated(false),
                        path,
                        format!("enum value{} {} added", plural(&added), listed(&added)),
                    );
                }
            }
            (None, Some(Value::Array(_))) => {
                self.push(direction.narrowed(), path, changed("enum", old, new))
            }
            (Some(Value::Array(_)), None) => {
                self.push(direction.widened(), path, changed("enum", old, new))
            }
            _ => self.unclassified(path, "enum", old, new),
        }
    }

    /// `properties` and `required` together: what a member's addition or removal means depends
    /// on whether it is required.
    fn members(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, at: &Node) {
        let (Some(old_properties), Some(new_properties)) = (
            object_or_empty(old.get("properties")),
            object_or_empty(new.get("properties")),
        ) else {
            let path = child(&at.path, "properties");
            self.unclassified(
                &path,
                "properties",
                old.get("properties"),
                new.get("properties"),
            );
            return;
        };
        let (Some(old_required), Some(new_required)) = (
            string_set(old.get("required")),
            string_set(new.get("required")),
        ) else {
            let path = child(&at.path, "required");
            self.unclassified(&path, "required", old.get("required"), new.get("required"));
            return;
        };
        let noun = match (at.direction, at.root) {
            (Direction::Input, true) => "input argument",
            (Direction::Input, false) => "input property",
            (Direction::Output, _) => "output field",
            (Direction::Invariant, _) => "property",
        };
        let direction = at.direction;
        let names: BTreeSet<&str> = old_properties
            .keys()
            .chain(new_properties.keys())
            .map(String::as_str)
            .chain(old_required.iter().copied())
            .chain(new_required.iter().copied())
            .collect();
        let properties_path = child(&at.path, "properties");
        for name in names {
            let path = child(&properties_path, name);
            let (was_required, is_required) =
                (old_required.contains(name), new_required.contains(name));
            match (old_properties.get(name), new_properties.get(name)) {
                (Some(o), Some(n)) => {
                    let under = Node {
                        old: pointer_child(&pointer_child(&at.old, "properties"), name),
                        new: pointer_child(&pointer_child(&at.new, "properties"), name),
                        path: path.clone(),
                        direction,
                        root: false,
                        depth: at.depth + 1,
                    };
                    self.schema(o, n, &under);
                }
                // An input: callers that send it are refused, or with extra members allowed
                // silently ignored, so breaking whatever `additionalProperties` says. An output:
                // consumers read it.
                (Some(_), None) => {
                    self.push(
                        Severity::Breaking,
                        &path,
                        format!("{noun} {name:?} removed"),
                    );
                    continue;
                }
                (None, Some(_)) => {
                    let (severity, message) = match direction {
                        Direction::Input if is_required => (
                            Severity::Breaking,
                            format!("required {noun} {name:?} added"),
                        ),
                        Direction::Input => (
                            Severity::Compatible,
                            format!("optional {noun} {name:?} added"),
                        ),
                        Direction::Output => {
                            (Severity::Compatible, format!("{noun} {name:?} added"))
                        }
                        Direction::Invariant => {
                            (Severity::Breaking, format!("{noun} {name:?} added"))
                        }
                    };
                    self.push(severity, &path, message);
                    continue;
                }
                (None, None) => {}
            }
            let (severity, message) = match (was_required, is_required) {
                (false, true) => (
                    direction.narrowed(),
                    format!("{noun} {name:?} made required"),
                ),
                (true, false) if direction == Direction::Output => (
                    Severity::Breaking,
                    format!("{noun} {name:?} no longer required: consumers relied on it"),
                ),
                (true, false) => (
                    direction.widened(),
                    format!("{noun} {name:?} made optional"),
                ),
                _ => continue,
            };
            self.push(severity, &path, message);
        }
    }

    fn bound(
        &mut self,
        key: &str,
        old: Option<&Value>,
        new: Option<&Value>,
        path: &str,
        at: &Node,
        lower: bool,
    ) {
        let number = |value: Option<&Value>| value.map(|value| value.as_f64().ok_or(()));
        let (was, now) = match (number(old), number(new)) {
            (Some(Err(())), _) | (_, Some(Err(()))) => {
                self.unclassified(path, key, old, new);
                return;
            }
            (was, now) => (was.and_then(Result::ok), now.and_then(Result::ok)),
        };
        let narrowed = match (was, now) {
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some(was), Some(now)) if was == now => return,
            (Some(was), Some(now)) => (now > was) == lower,
            (None, None) => return,
        };
        let message = match (was, now) {
            (Some(_), Some(_)) => format!(
                "{key} {} from {} to {}",
                if now > was { "raised" } else { "lowered" },
                shown(old),
                shown(new)
            ),
            _ => changed(key, old, new),
        };
        let severity = if narrowed {
            at.direction.narrowed()
        } else {
            at.direction.widened()
        };
        self.push(severity, path, message);
    }

    /// `anyOf`/`oneOf`: alternatives matched by their key when each has one, else by position.
    fn alternatives(&mut self, key: &str, old: Option<&Value>, new: Option<&Value>, at: &Node) {
        let path = child(&at.path, key);
        let (Some(Value::Array(was)), Some(Value::Array(now))) = (old, new) else {
            match (old, new) {
                (None, Some(Value::Array(_))) => {
                    self.push(at.direction.narrowed(), &path, changed(key, old, new))
                }
                (Some(Value::Array(_)), None) => {
                    self.push(at.direction.widened(), &path, changed(key, old, new))
                }
                _ => self.unclassified(&path, key, old, new),
            }
            return;
        };
        let keyed = alternative_keys(self.old_root, was).zip(alternative_keys(self.new_root, now));
        let Some((old_keys, new_keys)) = keyed else {
            self.positional(key, old, new, at);
            return;
        };
        for (old_index, old_key) in old_keys.iter().enumerate() {
            match new_keys.iter().position(|new_key| new_key == old_key) {
                Some(new_index) => {
                    let under = at.item(key, old_index, new_index, index(&path, new_index));
                    self.schema(&was[old_index], &now[new_index], &under);
                }
                None => self.push(
                    at.direction.enumerated(true),
                    &path,
                    format!("{key} alternative {old_key} removed"),
                ),
            }
        }
        for new_key in new_keys.iter().filter(|key| !old_keys.contains(key)) {
            self.push(
                at.direction.enumerated(false),
                &path,
                format!("{key} alternative {new_key} added"),
            );
        }
    }

    /// Arrays of subschemas compared position by position (`allOf`, `prefixItems`, and unions
    /// whose alternatives have no key).
    fn positional(&mut self, key: &str, old: Option<&Value>, new: Option<&Value>, at: &Node) {
        let path = child(&at.path, key);
        let (Some(was), Some(now)) = (array_or_empty(old), array_or_empty(new)) else {
            self.unclassified(&path, key, old, new);
            return;
        };
        let union = matches!(key, "anyOf" | "oneOf");
        for position in 0..was.len().max(now.len()) {
            let item_path = index(&path, position);
            match (was.get(position), now.get(position)) {
                (Some(o), Some(n)) => {
                    self.schema(o, n, &at.item(key, position, position, item_path));
                }
                // An alternative more accepts more; an `allOf` member or a tuple position more
                // constrains more.
                (Some(_), None) => self.push(
                    if union {
                        at.direction.enumerated(true)
                    } else {
                        at.direction.widened()
                    },
                    &item_path,
                    format!("{key} member {position} removed"),
                ),
                (None, Some(_)) => self.push(
                    if union {
                        at.direction.enumerated(false)
                    } else {
                        at.direction.narrowed()
                    },
                    &item_path,
                    format!("{key} member {position} added"),
                ),
                (None, None) => {}
            }
        }
    }

    /// Maps of subschemas (`patternProperties`, `dependentSchemas`), compared without a
    /// direction.
    fn schema_map(&mut self, key: &str, old: Option<&Value>, new: Option<&Value>, at: &Node) {
        let path = child(&at.path, key);
        let (Some(was), Some(now)) = (object_or_empty(old), object_or_empty(new)) else {
            self.unclassified(&path, key, old, new);
            return;
        };
        let names: BTreeSet<&str> = was.keys().chain(now.keys()).map(String::as_str).collect();
        for name in names {
            let entry_path = child(&path, name);
            match (was.get(name), now.get(name)) {
                (Some(o), Some(n)) => {
                    let mut under = at.under(key, &entry_path, Direction::Invariant);
                    under.old = pointer_child(&under.old, name);
                    under.new = pointer_child(&under.new, name);
                    self.schema(o, n, &under);
                }
                (o, n) => self.unclassified(&entry_path, &format!("{key} {name:?}"), o, n),
            }
        }
    }
}

fn flag(value: Option<&Value>) -> Option<bool> {
    match value {
        None => Some(false),
        Some(value) => value.as_bool(),
    }
}

/// A schema as an object of keywords: `true` accepts everything, as `{}` does.
fn schema_object(schema: &Value) -> Option<&Map<String, Value>> {
    match schema {
        Value::Bool(true) => object_or_empty(None),
        other => other.as_object(),
    }
}

fn shown(value: Option<&Value>) -> String {
    value.and_then(short).unwrap_or_else(|| "…".to_owned())
}

fn plural(values: &[&Value]) -> &'static str {
    if values.len() == 1 { "" } else { "s" }
}

fn listed(values: &[&Value]) -> String {
    values
        .iter()
        .map(|value| short(value).unwrap_or_else(|| "…".to_owned()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn changes(old: Value, new: Value, direction: Direction) -> Vec<String> {
        let mut sink = Sink::default();
        compare(&mut sink, "tool t", "outputSchema", &old, &new, direction);
        sink.finish().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn contract_schema_walk_ends_on_a_reference_to_itself() {
        let looping = json!({ "$ref": "#", "type": "object" });
        assert_eq!(
            changes(looping.clone(), looping, Direction::Output),
            Vec::<String>::new()
        );
        let chain = json!({ "$ref": "#/$defs/A", "$defs": { "A": { "$ref": "#/$defs/A" } } });
        assert_eq!(
            changes(chain.clone(), chain, Direction::Input),
            Vec::<String>::new()
        );
    }

    #[test]
    fn contract_schema_walk_ends_when_references_on_each_side_never_line_up() {
        // The old side refers at every other level, the new side at the levels in between:
        // no pair of references meets, only the positions repeat.
        let old = json!({
            "$ref": "#/$defs/A",
            "$defs": { "A": { "properties": { "x": { "properties": { "x": { "$ref": "#/$defs/A" } } } } } }
        });
        let new = json!({
            "properties": { "x": { "$ref": "#/$defs/B" } },
            "$defs": { "B": { "properties": { "x": { "properties": { "x": { "$ref": "#/$defs/B" } } } } } }
        });
        assert_eq!(changes(old, new, Direction::Output), Vec::<String>::new());
    }

    #[test]
    fn contract_schema_walk_gives_up_past_the_depth_limit_as_breaking() {
        let nest =
            |leaf: Value| (0..MAX_DEPTH + 2).fold(leaf, |inner, _| json!({ "items": inner }));
        let found = changes(
            nest(json!({"type": "string"})),
            nest(json!({"type": "integer"})),
            Direction::Output,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("breaking: tool t: outputSchema.items.items"),
            "{found:?}"
        );
    }

    #[test]
    fn contract_definition_paths_follow_the_pointer() {
        assert_eq!(
            definition_path("outputSchema", "/$defs/Basket"),
            "outputSchema.$defs.Basket"
        );
        assert_eq!(definition_path("inputSchema", ""), "inputSchema");
        assert_eq!(definition_path("o", "/$defs/a~1b"), "o.$defs[\"a/b\"]");
    }
}
