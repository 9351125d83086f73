//! The contract file and the classification of every difference between two contracts: one
//! table row per rule, each built from a realistic stateful tool (outcome union, `$defs`,
//! state `_meta`, scopes) and asserting exactly which changes are found, at which severity.

use crate::basket;
use crate::common;

use mcp_tools::contract::{Contract, ContractError, FORMAT_VERSION, Severity};
use serde_json::{Value, json};

use Severity::{Breaking, Compatible, Cosmetic};

const VERSION: &str = "2026-07-28";
/// JSON pointers into a tool (the `/` in the key escaped as `~1`).
const STATE: &str = "/_meta/io.github.mcp-tools~1state";
const SCOPES: &str = "/_meta/io.github.mcp-tools~1scopes";
const TASK: &str = "/_meta/io.github.mcp-tools~1task";
const INPUT: &str = "/inputSchema/properties";
const VIEW: &str = "/outputSchema/$defs/BasketView";

/// A mutating stateful tool as the framework publishes one, cut down to what the rows need.
fn add_note() -> Value {
    json!({
        "name": "basket_add_note",
        "title": "Add a note",
        "description": "Adds a note to a basket.",
        "annotations": { "destructiveHint": false, "idempotentHint": true },
        "_meta": {
            "io.github.mcp-tools/scopes": ["basket:write"],
            "io.github.mcp-tools/state": {
                "codes": [
                    { "code": "NOT_FOUND", "description": "No basket with this handle.", "recovery": "stop" },
                    { "code": "TERMINAL", "description": "The basket was checked out.", "recovery": "stop" },
                    { "code": "INVALID_STATE", "description": "The stored state is unreadable.", "recovery": null }
                ],
                "codes_open": false,
                "conflict": "reject",
                "handle": "basket_id",
                "idempotency": "operation_id",
                "precondition": null,
                "resource": "basket",
                "terminal": false,
                "tool": "mutates"
            }
        },
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "basket_id": { "type": "string", "description": "Which basket.", "x-mcp-header": "Basket-Id" },
                "text": { "type": "string", "minLength": 1, "maxLength": 500, "description": "The note." },
                "priority": { "type": ["integer", "null"], "minimum": 0, "maximum": 10, "default": null },
                "colour": { "type": "string", "enum": ["red", "green"] },
                "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 5 },
                "operation_id": { "type": "string", "minLength": 1, "maxLength": 200 }
            },
            "required": ["basket_id", "text", "operation_id"]
        },
        "outputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "anyOf": [
                {
                    "description": "The outcome of a mutation.",
                    "type": "object",
                    "oneOf": [
                        {
                            "$ref": "#/$defs/Applied",
                            "description": "The transition was committed.",
                            "type": "object",
                            "properties": { "outcome": { "const": "applied", "type": "string" } },
                            "required": ["outcome"]
                        },
                        {
                            "$ref": "#/$defs/Rejected",
                            "description": "Refused with a code; nothing changed.",
                            "type": "object",
                            "properties": { "outcome": { "const": "rejected", "type": "string" } },
                            "required": ["outcome"]
                        }
                    ]
                },
                { "$ref": "#/$defs/McpToolError" }
            ],
            "$defs": {
                "Applied": {
                    "description": "A transition that was committed.",
                    "type": "object",
                    "properties": {
                        "handle": { "type": "string", "description": "The basket's handle." },
                        "version": { "type": "integer", "format": "uint64", "minimum": 0 },
                        "state": { "$ref": "#/$defs/BasketView", "description": "The basket now." },
                        "rebased_from": { "type": ["integer", "null"], "minimum": 0 }
                    },
                    "required": ["handle", "version", "state"]
                },
                "BasketView": {
                    "description": "A basket as outcomes show it.",
                    "type": "object",
                    "properties": {
                        "model": { "type": "string", "description": "The laptop model." },
                        "note_count": { "type": "integer", "minimum": 0 },
                        "recent_notes": { "type": "array", "items": { "type": "string" }, "maxItems": 3 },
                        "status": { "type": "string", "enum": ["open", "checked_out"] },
                        "gift_wrap": { "type": "boolean" }
                    },
                    "required": ["model", "note_count", "recent_notes", "status"]
                },
                "Rejected": {
                    "description": "A transition refused with a code.",
                    "type": "object",
                    "properties": {
                        "code": {
                            "anyOf": [
                                { "const": "NOT_FOUND", "description": "No basket with this handle. Recovery: stop." },
                                { "const": "TERMINAL", "description": "The basket was checked out. Recovery: stop." },
                                { "const": "INVALID_STATE", "description": "The stored state is unreadable." }
                            ]
                        },
                        "message": { "type": "string" }
                    },
                    "required": ["code", "message"]
                },
                "McpToolError": {
                    "additionalProperties": false,
                    "type": "object",
                    "properties": { "code": { "type": "string" }, "message": { "type": "string" } },
                    "required": ["code", "message"]
                }
            }
        }
    })
}

/// A reading tool without an output schema.
fn get() -> Value {
    json!({
        "name": "basket_get",
        "description": "Reads a basket.",
        "annotations": { "readOnlyHint": true },
        "_meta": { "io.github.mcp-tools/scopes": ["basket:read"] },
        "inputSchema": {
            "type": "object",
            "properties": { "basket_id": { "type": "string" } },
            "required": ["basket_id"]
        }
    })
}

fn review_prompt() -> Value {
    json!({
        "name": "review_basket",
        "title": "Review a basket",
        "description": "Reviews a basket's configuration.",
        "arguments": [
            { "name": "basket_id", "description": "Which basket.", "required": true },
            { "name": "tone", "description": "How to phrase the review." }
        ]
    })
}

fn catalog_resource() -> Value {
    json!({
        "uri": "basket://catalog",
        "name": "catalog",
        "title": "The catalog",
        "description": "Every laptop model on offer.",
        "mimeType": "application/json"
    })
}

fn basket_template() -> Value {
    json!({ "uriTemplate": "basket://baskets/{basket_id}", "name": "basket", "mimeType": "application/json" })
}

/// A tool whose output is a recursive type: a node holding nodes.
fn tree(extra: Option<(&str, Value)>) -> Contract {
    let mut node = json!({
        "type": "object",
        "properties": {
            "label": { "type": "string" },
            "children": { "type": "array", "items": { "$ref": "#/$defs/Node" } }
        },
        "required": ["label", "children"]
    });
    if let Some((name, schema)) = extra {
        node["properties"][name] = schema;
    }
    let tool = json!({
        "name": "outline",
        "inputSchema": { "type": "object" },
        "outputSchema": { "$ref": "#/$defs/Node", "$defs": { "Node": node } }
    });
    Contract::new(VERSION, vec![tool], vec![], vec![], vec![])
}

/// The base contract's lists, to edit before building a contract.
struct Parts {
    tools: Vec<Value>,
    prompts: Vec<Value>,
    resources: Vec<Value>,
    templates: Vec<Value>,
}

impl Parts {
    fn base() -> Parts {
        Parts {
            tools: vec![add_note(), get()],
            prompts: vec![review_prompt()],
            resources: vec![catalog_resource()],
            templates: vec![basket_template()],
        }
    }

    fn tool(&mut self, name: &str) -> &mut Value {
        self.tools
            .iter_mut()
            .find(|tool| tool["name"] == name)
            .unwrap_or_else(|| panic!("no tool {name}"))
    }

    fn contract(self) -> Contract {
        Contract::new(
            VERSION,
            self.tools,
            self.prompts,
            self.resources,
            self.templates,
        )
    }
}

fn base() -> Contract {
    Parts::base().contract()
}

fn edited(edit: impl FnOnce(&mut Parts)) -> Contract {
    let mut parts = Parts::base();
    edit(&mut parts);
    parts.contract()
}

/// The base contract with `basket_add_note` edited.
fn note(edit: impl FnOnce(&mut Value)) -> Contract {
    edited(|parts| edit(parts.tool("basket_add_note")))
}

/// Sets the member at `pointer`; its parent must exist.
fn set(value: &mut Value, pointer: &str, member: Value) {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    let key = key.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(Value::Object(object)) => {
            object.insert(key, member);
        }
        Some(Value::Array(items)) => items[key.parse::<usize>().expect("an index")] = member,
        _ => panic!("no object or array at {parent}"),
    }
}

/// Removes the member at `pointer`, which must exist.
fn remove(value: &mut Value, pointer: &str) {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    let key = key.replace("~1", "/").replace("~0", "~");
    let removed = match value.pointer_mut(parent) {
        Some(Value::Object(object)) => object.remove(&key),
        Some(Value::Array(items)) => Some(items.remove(key.parse::<usize>().expect("an index"))),
        _ => None,
    };
    assert!(removed.is_some(), "nothing to remove at {pointer}");
}

/// Appends to the array at `pointer`.
fn push(value: &mut Value, pointer: &str, item: Value) {
    value
        .pointer_mut(pointer)
        .and_then(Value::as_array_mut)
        .unwrap_or_else(|| panic!("no array at {pointer}"))
        .push(item);
}

struct Row {
    name: &'static str,
    old: Contract,
    new: Contract,
    expected: Vec<(Severity, &'static str)>,
}

fn row(
    name: &'static str,
    old: Contract,
    new: Contract,
    expected: &[(Severity, &'static str)],
) -> Row {
    Row {
        name,
        old,
        new,
        expected: expected.to_vec(),
    }
}

fn rows() -> Vec<Row> {
    vec![
        // Tools.
        row(
            "a removed tool is breaking",
            base(),
            edited(|parts| parts.tools.retain(|tool| tool["name"] != "basket_get")),
            &[(Breaking, "tool basket_get")],
        ),
        row(
            "a renamed tool is a removal and an addition",
            base(),
            edited(|parts| set(parts.tool("basket_get"), "/name", json!("basket_read"))),
            &[
                (Breaking, "tool basket_get"),
                (Compatible, "tool basket_read"),
            ],
        ),
        row(
            "an added tool is compatible",
            base(),
            edited(|parts| {
                let mut list = get();
                set(&mut list, "/name", json!("basket_list"));
                parts.tools.push(list);
            }),
            &[(Compatible, "tool basket_list")],
        ),
        // Input schemas.
        row(
            "a required input argument added is breaking",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/urgent"),
                    json!({ "type": "boolean" }),
                );
                push(tool, "/inputSchema/required", json!("urgent"));
            }),
            &[(
                Breaking,
                "tool basket_add_note: inputSchema.properties.urgent",
            )],
        ),
        row(
            "an optional input argument added is compatible",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/urgent"),
                    json!({ "type": "boolean" }),
                )
            }),
            &[(
                Compatible,
                "tool basket_add_note: inputSchema.properties.urgent",
            )],
        ),
        row(
            "a removed input argument is breaking",
            base(),
            note(|tool| remove(tool, &format!("{INPUT}/priority"))),
            &[(Breaking, "inputSchema.properties.priority")],
        ),
        row(
            "an optional input argument made required is breaking",
            base(),
            note(|tool| push(tool, "/inputSchema/required", json!("priority"))),
            &[(Breaking, "inputSchema.properties.priority")],
        ),
        row(
            "a required input argument made optional is compatible",
            base(),
            note(|tool| remove(tool, "/inputSchema/required/1")),
            &[(Compatible, "inputSchema.properties.text")],
        ),
        row(
            "an input type that loses null is breaking",
            base(),
            note(|tool| set(tool, &format!("{INPUT}/priority/type"), json!("integer"))),
            &[(Breaking, "inputSchema.properties.priority.type")],
        ),
        row(
            "an input integer where a number was is breaking",
            note(|tool| set(tool, &format!("{INPUT}/priority/type"), json!("number"))),
            note(|tool| set(tool, &format!("{INPUT}/priority/type"), json!("integer"))),
            &[(Breaking, "inputSchema.properties.priority.type")],
        ),
        row(
            "an input type widened is compatible",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/priority/type"),
                    json!(["number", "null"]),
                )
            }),
            &[(Compatible, "inputSchema.properties.priority.type")],
        ),
        row(
            "an input enum value removed is breaking",
            base(),
            note(|tool| set(tool, &format!("{INPUT}/colour/enum"), json!(["red"]))),
            &[(Breaking, "inputSchema.properties.colour.enum")],
        ),
        row(
            "an input enum value added is compatible",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/colour/enum"),
                    json!(["red", "green", "blue"]),
                )
            }),
            &[(Compatible, "inputSchema.properties.colour.enum")],
        ),
        row(
            "an input const changed is breaking",
            note(|tool| set(tool, &format!("{INPUT}/colour"), json!({ "const": "red" }))),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/colour"),
                    json!({ "const": "green" }),
                )
            }),
            &[(Breaking, "inputSchema.properties.colour.const")],
        ),
        row(
            "an input minimum raised is breaking",
            base(),
            note(|tool| set(tool, &format!("{INPUT}/priority/minimum"), json!(1))),
            &[(Breaking, "inputSchema.properties.priority.minimum")],
        ),
        row(
            "an input exclusive minimum added is breaking",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/priority/exclusiveMinimum"),
                    json!(0),
                )
            }),
            &[(Breaking, "inputSchema.properties.priority.exclusiveMinimum")],
        ),
        row(
            "an input maximum lowered is breaking",
            base(),
            note(|tool| set(tool, &format!("{INPUT}/priority/maximum"), json!(5))),
            &[(Breaking, "inputSchema.properties.priority.maximum")],
        ),
        row(
            "input length and item bounds narrowed are breaking",
            base(),
            note(|tool| {
                set(tool, &format!("{INPUT}/text/minLength"), json!(2));
                set(tool, &format!("{INPUT}/text/maxLength"), json!(100));
                set(tool, &format!("{INPUT}/tags/maxItems"), json!(3));
                set(tool, &format!("{INPUT}/tags/minItems"), json!(1));
            }),
            &[
                (Breaking, "inputSchema.properties.text.minLength"),
                (Breaking, "inputSchema.properties.text.maxLength"),
                (Breaking, "inputSchema.properties.tags.maxItems"),
                (Breaking, "inputSchema.properties.tags.minItems"),
            ],
        ),
        row(
            "an input pattern added is breaking",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/operation_id/pattern"),
                    json!("^[0-9a-f-]{36}$"),
                )
            }),
            &[(Breaking, "inputSchema.properties.operation_id.pattern")],
        ),
        row(
            "an input pattern changed is breaking",
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/operation_id/pattern"),
                    json!("^[a-z]+$"),
                )
            }),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/operation_id/pattern"),
                    json!("^[a-z0-9]+$"),
                )
            }),
            &[(Breaking, "inputSchema.properties.operation_id.pattern")],
        ),
        row(
            "an input format added is breaking",
            base(),
            note(|tool| set(tool, &format!("{INPUT}/operation_id/format"), json!("uuid"))),
            &[(Breaking, "inputSchema.properties.operation_id.format")],
        ),
        row(
            "input bounds relaxed and a pattern removed are compatible",
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/operation_id/pattern"),
                    json!("^[a-z]+$"),
                )
            }),
            note(|tool| {
                set(tool, &format!("{INPUT}/text/maxLength"), json!(1000));
                remove(tool, &format!("{INPUT}/priority/minimum"));
                remove(tool, &format!("{INPUT}/tags/maxItems"));
            }),
            &[
                (Compatible, "inputSchema.properties.operation_id.pattern"),
                (Compatible, "inputSchema.properties.text.maxLength"),
                (Compatible, "inputSchema.properties.priority.minimum"),
                (Compatible, "inputSchema.properties.tags.maxItems"),
            ],
        ),
        row(
            "additionalProperties turned to false is breaking",
            note(|tool| remove(tool, "/inputSchema/additionalProperties")),
            base(),
            &[(Breaking, "inputSchema.additionalProperties")],
        ),
        row(
            "an x-mcp-header added, removed or renamed is breaking",
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/colour/x-mcp-header"),
                    json!("Colour"),
                )
            }),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/basket_id/x-mcp-header"),
                    json!("Basket"),
                );
                set(tool, &format!("{INPUT}/text/x-mcp-header"), json!("Note"));
            }),
            &[
                (Breaking, "inputSchema.properties.basket_id.x-mcp-header"),
                (Breaking, "inputSchema.properties.colour.x-mcp-header"),
                (Breaking, "inputSchema.properties.text.x-mcp-header"),
            ],
        ),
        // Output schemas.
        row(
            "a removed output field is breaking",
            base(),
            note(|tool| {
                remove(tool, &format!("{VIEW}/properties/recent_notes"));
                remove(tool, &format!("{VIEW}/required/2"));
            }),
            &[(
                Breaking,
                "tool basket_add_note: outputSchema.$defs.BasketView.properties.recent_notes",
            )],
        ),
        row(
            "an output field type changed is breaking",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{VIEW}/properties/note_count/type"),
                    json!("number"),
                )
            }),
            &[(
                Breaking,
                "outputSchema.$defs.BasketView.properties.note_count.type",
            )],
        ),
        row(
            "an output field no longer required is breaking",
            base(),
            note(|tool| remove(tool, &format!("{VIEW}/required/0"))),
            &[(Breaking, "outputSchema.$defs.BasketView.properties.model")],
        ),
        row(
            "an output enum value added is breaking",
            base(),
            note(|tool| {
                push(
                    tool,
                    &format!("{VIEW}/properties/status/enum"),
                    json!("cancelled"),
                )
            }),
            &[(
                Breaking,
                "outputSchema.$defs.BasketView.properties.status.enum",
            )],
        ),
        row(
            "an output enum value removed is breaking",
            base(),
            note(|tool| remove(tool, &format!("{VIEW}/properties/status/enum/1"))),
            &[(
                Breaking,
                "outputSchema.$defs.BasketView.properties.status.enum",
            )],
        ),
        row(
            "an added output field is compatible",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{VIEW}/properties/colour"),
                    json!({ "type": "string" }),
                )
            }),
            &[(
                Compatible,
                "outputSchema.$defs.BasketView.properties.colour",
            )],
        ),
        row(
            "an output field made required is compatible",
            base(),
            note(|tool| push(tool, &format!("{VIEW}/required"), json!("gift_wrap"))),
            &[(
                Compatible,
                "outputSchema.$defs.BasketView.properties.gift_wrap",
            )],
        ),
        row(
            "a removed outputSchema is breaking",
            base(),
            note(|tool| remove(tool, "/outputSchema")),
            &[(Breaking, "tool basket_add_note: outputSchema")],
        ),
        row(
            "an added outputSchema is compatible",
            base(),
            edited(|parts| {
                set(
                    parts.tool("basket_get"),
                    "/outputSchema",
                    json!({ "type": "object" }),
                )
            }),
            &[(Compatible, "tool basket_get: outputSchema")],
        ),
        row(
            "an outcome code added is breaking where it is declared and where it is typed",
            base(),
            note(|tool| {
                push(
                    tool,
                    &format!("{STATE}/codes"),
                    json!({ "code": "LEDGER_FULL", "description": "Too many operations.", "recovery": "retry_later" }),
                );
                push(
                    tool,
                    "/outputSchema/$defs/Rejected/properties/code/anyOf",
                    json!({ "const": "LEDGER_FULL" }),
                );
            }),
            &[
                (
                    Breaking,
                    "_meta[\"io.github.mcp-tools/state\"].codes.LEDGER_FULL",
                ),
                (
                    Breaking,
                    "outputSchema.$defs.Rejected.properties.code.anyOf",
                ),
            ],
        ),
        row(
            "a definition renamed with the same shape is cosmetic",
            base(),
            note(|tool| {
                let view = tool.pointer(VIEW).unwrap().clone();
                remove(tool, VIEW);
                set(tool, "/outputSchema/$defs/BasketState", view);
                set(
                    tool,
                    "/outputSchema/$defs/Applied/properties/state/$ref",
                    json!("#/$defs/BasketState"),
                );
            }),
            &[(Cosmetic, "outputSchema.$defs.Applied.properties.state")],
        ),
        row(
            "an output field moved into a definition with the same shape is no change",
            base(),
            note(|tool| {
                let handle = tool
                    .pointer("/outputSchema/$defs/Applied/properties/handle")
                    .unwrap()
                    .clone();
                set(tool, "/outputSchema/$defs/Handle", handle);
                set(
                    tool,
                    "/outputSchema/$defs/Applied/properties/handle",
                    json!({ "$ref": "#/$defs/Handle" }),
                );
            }),
            &[],
        ),
        row(
            "a field added to a recursive type is found once, at its definition",
            tree(None),
            tree(Some(("weight", json!({ "type": "number" })))),
            &[(
                Compatible,
                "tool outline: outputSchema.$defs.Node.properties.weight",
            )],
        ),
        // The state contract.
        row(
            "an outcome code removed is breaking",
            base(),
            note(|tool| remove(tool, &format!("{STATE}/codes/1"))),
            &[(
                Breaking,
                "_meta[\"io.github.mcp-tools/state\"].codes.TERMINAL",
            )],
        ),
        row(
            "a code's recovery changed is breaking",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{STATE}/codes/0/recovery"),
                    json!("create_new"),
                )
            }),
            &[(
                Breaking,
                "_meta[\"io.github.mcp-tools/state\"].codes.NOT_FOUND",
            )],
        ),
        row(
            "a code's description changed is cosmetic",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{STATE}/codes/0/description"),
                    json!("Unknown basket."),
                )
            }),
            &[(
                Cosmetic,
                "_meta[\"io.github.mcp-tools/state\"].codes.NOT_FOUND",
            )],
        ),
        row(
            "the state tool kind, handle, conflict policy and idempotency changed are breaking",
            base(),
            note(|tool| {
                set(tool, &format!("{STATE}/tool"), json!("creates"));
                set(tool, &format!("{STATE}/handle"), json!("id"));
                set(tool, &format!("{STATE}/conflict"), json!("rebase"));
                set(tool, &format!("{STATE}/idempotency"), Value::Null);
            }),
            &[
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].tool"),
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].handle"),
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].conflict"),
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].idempotency"),
            ],
        ),
        row(
            "the concurrency rule and the collections published where they were implicit are compatible; changed, breaking",
            base(),
            note(|tool| {
                set(tool, &format!("{STATE}/concurrency"), json!("commutes"));
                set(tool, &format!("{STATE}/collections"), json!(["notes"]));
            }),
            &[
                (
                    Compatible,
                    "_meta[\"io.github.mcp-tools/state\"].collections",
                ),
                (
                    Compatible,
                    "_meta[\"io.github.mcp-tools/state\"].concurrency",
                ),
            ],
        ),
        row(
            "a changed concurrency rule or collection list is breaking",
            note(|tool| {
                set(tool, &format!("{STATE}/concurrency"), json!("commutes"));
                set(tool, &format!("{STATE}/collections"), json!(["notes"]));
            }),
            note(|tool| {
                set(tool, &format!("{STATE}/concurrency"), json!("versioned"));
                set(
                    tool,
                    &format!("{STATE}/collections"),
                    json!(["notes", "lines"]),
                );
            }),
            &[
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].collections"),
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].concurrency"),
            ],
        ),
        row(
            "a tool that starts emitting an effect kind is compatible",
            base(),
            note(|tool| set(tool, &format!("{STATE}/effects"), json!(["charge"]))),
            &[(Compatible, "_meta[\"io.github.mcp-tools/state\"].effects")],
        ),
        row(
            "a tool that stops emitting an effect kind is breaking, one that adds one compatible",
            note(|tool| set(tool, &format!("{STATE}/effects"), json!(["charge"]))),
            note(|tool| set(tool, &format!("{STATE}/effects"), json!(["email"]))),
            &[
                (Compatible, "_meta[\"io.github.mcp-tools/state\"].effects"),
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].effects"),
            ],
        ),
        row(
            "task support changed is breaking",
            base(),
            note(|tool| {
                set(tool, "/execution", json!({ "taskSupport": "optional" }));
                set(tool, &format!("{STATE}/task"), json!("optional"));
            }),
            &[
                (Breaking, "tool basket_add_note: execution"),
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].task"),
            ],
        ),
        row(
            "a scope added is breaking and a scope removed is compatible",
            base(),
            note(|tool| set(tool, SCOPES, json!(["basket:admin"]))),
            &[
                (Breaking, "_meta[\"io.github.mcp-tools/scopes\"]"),
                (Compatible, "_meta[\"io.github.mcp-tools/scopes\"]"),
            ],
        ),
        row(
            "a tool that may now run as a task is compatible; one that must is breaking",
            base(),
            edited(|parts| {
                set(parts.tool("basket_get"), TASK, json!("optional"));
                set(parts.tool("basket_add_note"), TASK, json!("required"));
            }),
            &[
                (Breaking, "_meta[\"io.github.mcp-tools/task\"]"),
                (Compatible, "_meta[\"io.github.mcp-tools/task\"]"),
            ],
        ),
        row(
            "a task tool that stops being one is compatible; an unknown mode is unclassified",
            edited(|parts| set(parts.tool("basket_get"), TASK, json!("required"))),
            edited(|parts| set(parts.tool("basket_add_note"), TASK, json!("sometimes"))),
            &[
                (Breaking, "_meta[\"io.github.mcp-tools/task\"]"),
                (Compatible, "_meta[\"io.github.mcp-tools/task\"]"),
            ],
        ),
        // Annotations: an absent hint has the schema's default.
        row(
            "readOnlyHint turned off is breaking",
            base(),
            edited(|parts| remove(parts.tool("basket_get"), "/annotations/readOnlyHint")),
            &[(Breaking, "tool basket_get: annotations.readOnlyHint")],
        ),
        row(
            "readOnlyHint turned on is compatible",
            edited(|parts| {
                set(
                    parts.tool("basket_get"),
                    "/annotations/readOnlyHint",
                    json!(false),
                )
            }),
            base(),
            &[(Compatible, "tool basket_get: annotations.readOnlyHint")],
        ),
        row(
            "destructiveHint turned on by leaving it out is breaking",
            base(),
            note(|tool| remove(tool, "/annotations/destructiveHint")),
            &[(Breaking, "annotations.destructiveHint")],
        ),
        row(
            "destructiveHint turned off is compatible",
            note(|tool| remove(tool, "/annotations/destructiveHint")),
            base(),
            &[(Compatible, "annotations.destructiveHint")],
        ),
        row(
            "idempotentHint turned off is breaking",
            base(),
            note(|tool| set(tool, "/annotations/idempotentHint", json!(false))),
            &[(Breaking, "annotations.idempotentHint")],
        ),
        row(
            "idempotentHint turned on is compatible",
            note(|tool| remove(tool, "/annotations/idempotentHint")),
            base(),
            &[(Compatible, "annotations.idempotentHint")],
        ),
        row(
            "a hint written out with its default value is no change",
            base(),
            note(|tool| {
                set(tool, "/annotations/readOnlyHint", json!(false));
                set(tool, "/annotations/openWorldHint", json!(true));
            }),
            &[],
        ),
        // Prompts, resources, templates.
        row(
            "a removed prompt is breaking",
            base(),
            edited(|parts| parts.prompts.clear()),
            &[(Breaking, "prompt review_basket")],
        ),
        row(
            "an added prompt is compatible",
            base(),
            edited(|parts| parts.prompts.push(json!({ "name": "compare_baskets" }))),
            &[(Compatible, "prompt compare_baskets")],
        ),
        row(
            "a prompt argument made required is breaking",
            base(),
            edited(|parts| set(&mut parts.prompts[0], "/arguments/1/required", json!(true))),
            &[(Breaking, "prompt review_basket: arguments.tone")],
        ),
        row(
            "a required prompt argument added is breaking",
            base(),
            edited(|parts| {
                push(
                    &mut parts.prompts[0],
                    "/arguments",
                    json!({ "name": "budget", "required": true }),
                )
            }),
            &[(Breaking, "prompt review_basket: arguments.budget")],
        ),
        row(
            "an optional prompt argument added is compatible",
            base(),
            edited(|parts| {
                push(
                    &mut parts.prompts[0],
                    "/arguments",
                    json!({ "name": "budget" }),
                )
            }),
            &[(Compatible, "prompt review_basket: arguments.budget")],
        ),
        row(
            "a removed prompt argument is breaking",
            base(),
            edited(|parts| remove(&mut parts.prompts[0], "/arguments/1")),
            &[(Breaking, "prompt review_basket: arguments.tone")],
        ),
        row(
            "a removed resource is breaking",
            base(),
            edited(|parts| parts.resources.clear()),
            &[(Breaking, "resource basket://catalog")],
        ),
        row(
            "an added resource is compatible",
            base(),
            edited(|parts| {
                parts
                    .resources
                    .push(json!({ "uri": "basket://models", "name": "models" }))
            }),
            &[(Compatible, "resource basket://models")],
        ),
        row(
            "a resource mimeType changed is breaking",
            base(),
            edited(|parts| set(&mut parts.resources[0], "/mimeType", json!("text/csv"))),
            &[(Breaking, "resource basket://catalog: mimeType")],
        ),
        row(
            "a removed resource template is breaking",
            base(),
            edited(|parts| parts.templates.clear()),
            &[(Breaking, "resource template basket://baskets/{basket_id}")],
        ),
        row(
            "an added resource template is compatible",
            base(),
            edited(|parts| {
                parts
                    .templates
                    .push(json!({ "uriTemplate": "basket://models/{model}", "name": "model" }))
            }),
            &[(Compatible, "resource template basket://models/{model}")],
        ),
        // Wording.
        row(
            "descriptions and titles are cosmetic",
            base(),
            edited(|parts| {
                let tool = parts.tool("basket_add_note");
                set(tool, "/description", json!("Appends a note."));
                set(tool, "/title", json!("Note"));
                set(
                    tool,
                    &format!("{INPUT}/text/description"),
                    json!("The note's text."),
                );
                set(
                    tool,
                    &format!("{VIEW}/properties/model/description"),
                    json!("The model."),
                );
                set(
                    &mut parts.prompts[0],
                    "/description",
                    json!("Reviews a basket."),
                );
                set(&mut parts.prompts[0], "/arguments/0/title", json!("Basket"));
                set(
                    &mut parts.resources[0],
                    "/description",
                    json!("The laptops."),
                );
            }),
            &[
                (Cosmetic, "tool basket_add_note: description"),
                (Cosmetic, "tool basket_add_note: title"),
                (Cosmetic, "inputSchema.properties.text.description"),
                (
                    Cosmetic,
                    "outputSchema.$defs.BasketView.properties.model.description",
                ),
                (Cosmetic, "prompt review_basket: description"),
                (Cosmetic, "prompt review_basket: arguments.basket_id"),
                (Cosmetic, "resource basket://catalog: description"),
            ],
        ),
        row(
            "examples, icons, the annotation title, comments and defaults are cosmetic",
            base(),
            note(|tool| {
                set(
                    tool,
                    &format!("{INPUT}/text/examples"),
                    json!(["Gift for Sam"]),
                );
                set(
                    tool,
                    "/icons",
                    json!([{ "src": "https://example.com/note.png" }]),
                );
                set(tool, "/annotations/title", json!("Add a note"));
                set(tool, "/inputSchema/$comment", json!("Generated."));
                set(tool, &format!("{INPUT}/priority/default"), json!(0));
            }),
            &[
                (Cosmetic, "inputSchema.properties.text.examples"),
                (Cosmetic, "tool basket_add_note: icons"),
                (Cosmetic, "annotations.title"),
                (Cosmetic, "inputSchema.$comment"),
                (Cosmetic, "inputSchema.properties.priority.default"),
            ],
        ),
        // What no rule covers counts as breaking.
        row(
            "a change no rule covers is breaking",
            base(),
            edited(|parts| {
                let tool = parts.tool("basket_add_note");
                set(tool, &format!("{STATE}/terminal"), json!(true));
                set(tool, "/annotations/openWorldHint", json!(false));
                set(
                    tool,
                    "/inputSchema/dependentRequired",
                    json!({ "tags": ["colour"] }),
                );
                set(&mut parts.resources[0], "/size", json!(2048));
            }),
            &[
                (Breaking, "_meta[\"io.github.mcp-tools/state\"].terminal"),
                (Breaking, "annotations.openWorldHint"),
                (Breaking, "inputSchema.dependentRequired"),
                (Breaking, "resource basket://catalog: size"),
            ],
        ),
        row(
            "a changed protocol version is breaking",
            base(),
            {
                let parts = Parts::base();
                Contract::new(
                    "2026-12-01",
                    parts.tools,
                    parts.prompts,
                    parts.resources,
                    parts.templates,
                )
            },
            &[(Breaking, "contract: protocolVersion")],
        ),
    ]
}

/// What is wrong with a diff against a row's expectations, if anything: the severities must be
/// the expected multiset, and every expected location must be found on a change of its own.
fn mismatch(row: &Row) -> Option<String> {
    let diff = row.old.diff(&row.new);
    let changes = diff.changes();
    let mut found: Vec<Severity> = changes.iter().map(|change| change.severity()).collect();
    let mut wanted: Vec<Severity> = row.expected.iter().map(|(severity, _)| *severity).collect();
    found.sort();
    wanted.sort();
    let assigned = assign(row, changes, 0, &mut vec![false; changes.len()]);
    (found != wanted || !assigned).then(|| format!("{}:\n{diff}", row.name))
}

/// Whether expectations from `next` on can each be matched to a distinct unused change.
fn assign(
    row: &Row,
    changes: &[mcp_tools::contract::Change],
    next: usize,
    used: &mut [bool],
) -> bool {
    let Some((severity, location)) = row.expected.get(next) else {
        return true;
    };
    for (i, change) in changes.iter().enumerate() {
        if !used[i] && change.severity() == *severity && change.location().contains(location) {
            used[i] = true;
            if assign(row, changes, next + 1, used) {
                return true;
            }
            used[i] = false;
        }
    }
    false
}

#[test]
fn every_row_of_the_table_finds_exactly_its_changes() {
    let rows = rows();
    assert!(rows.len() >= 30, "{} rows", rows.len());
    let failures: Vec<String> = rows.iter().filter_map(mismatch).collect();
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_fixtures_are_what_the_official_schema_calls_tools_prompts_and_resources() {
    for tool in base().tools() {
        common::assert_conforms("Tool", tool);
    }
    common::assert_conforms("Prompt", &review_prompt());
    common::assert_conforms("Resource", &catalog_resource());
    common::assert_conforms("ResourceTemplate", &basket_template());
}

#[test]
fn identical_contracts_have_no_changes() {
    let diff = base().diff(&base());
    assert!(diff.changes().is_empty(), "{diff}");
    assert_eq!(diff.max_severity(), None);
    assert!(!diff.is_breaking());
    assert_eq!(diff.to_string(), "no changes");
}

fn basket_contract(edit: impl FnOnce(&mut Vec<Value>)) -> Contract {
    let Value::Array(mut tools) = basket::tool_set().definitions() else {
        panic!("the definitions are an array");
    };
    edit(&mut tools);
    Contract::new(VERSION, tools, vec![], vec![], vec![])
}

#[test]
fn the_basket_example_compared_with_itself_has_no_changes() {
    let contract = basket_contract(|_| {});
    assert!(contract.tools().len() >= 5);
    let diff = contract.diff(&basket_contract(|_| {}));
    assert!(diff.changes().is_empty(), "{diff}");
}

#[test]
fn a_change_in_a_definition_the_basket_shares_is_reported_once_at_the_definition() {
    // `BasketView` is reached from `Applied.state`, `StaleView.current_state` and
    // `Snapshot.state` of every mutating tool's outcome union.
    let old = basket_contract(|_| {});
    let new = basket_contract(|tools| {
        let tool = tools
            .iter_mut()
            .find(|tool| tool["name"] == "basket_add_note")
            .expect("basket_add_note");
        let view = tool
            .pointer_mut("/outputSchema/$defs/BasketView/properties")
            .and_then(Value::as_object_mut)
            .expect("the BasketView definition");
        assert!(view.remove("note_count").is_some());
    });
    let diff = old.diff(&new);
    let changes: Vec<String> = diff.changes().iter().map(ToString::to_string).collect();
    assert_eq!(
        changes,
        [
            "breaking: tool basket_add_note: outputSchema.$defs.BasketView.properties.note_count: \
             output field \"note_count\" removed"
        ],
        "{diff}"
    );
}

#[test]
fn a_recursive_type_compares_without_looping() {
    assert!(tree(None).diff(&tree(None)).changes().is_empty());
    // The recursion also runs through the added member.
    let nested = tree(Some(("parent", json!({ "$ref": "#/$defs/Node" }))));
    assert!(nested.diff(&nested.clone()).changes().is_empty());
    let diff = tree(None).diff(&nested);
    assert_eq!(diff.changes().len(), 1, "{diff}");
    assert_eq!(
        diff.changes()[0].location(),
        "tool outline: outputSchema.$defs.Node.properties.parent"
    );
}

#[test]
fn a_type_that_refers_to_itself_twice_is_compared_once_per_definition() {
    // Followed without memory, two references per level double the work at every level.
    let tree = |label: &str| {
        let node = json!({
            "type": "object",
            "properties": {
                "label": { "type": "string", "description": label },
                "left": { "anyOf": [{ "$ref": "#/$defs/Node" }, { "type": "null" }] },
                "right": { "anyOf": [{ "$ref": "#/$defs/Node" }, { "type": "null" }] }
            }
        });
        let tool = json!({
            "name": "tree",
            "inputSchema": { "type": "object", "properties": { "root": { "$ref": "#/$defs/Node" } }, "$defs": { "Node": node.clone() } },
            "outputSchema": { "$ref": "#/$defs/Node", "$defs": { "Node": node } }
        });
        Contract::new(VERSION, vec![tool], vec![], vec![], vec![])
    };
    let (old, new) = (tree("A label."), tree("The label."));
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(old.diff(&new).to_string()));
    let report = receiver
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the diff of a doubly recursive type finishes within 30 s");
    assert_eq!(
        report,
        "cosmetic: tool tree: inputSchema.$defs.Node.properties.label.description: description changed from \"A label.\" to \"The label.\"\n\
         cosmetic: tool tree: outputSchema.$defs.Node.properties.label.description: description changed from \"A label.\" to \"The label.\"\n\
         2 changes: 0 breaking, 0 compatible, 2 cosmetic"
    );
}

#[test]
fn a_mixed_diff_reads_breaking_first_then_compatible_then_cosmetic() {
    let new = edited(|parts| {
        parts
            .tools
            .push(json!({ "name": "basket_list", "inputSchema": { "type": "object" } }));
        let tool = parts.tool("basket_add_note");
        set(tool, "/description", json!("Appends a note."));
        remove(tool, &format!("{INPUT}/priority"));
    });
    assert_eq!(
        base().diff(&new).to_string(),
        "breaking: tool basket_add_note: inputSchema.properties.priority: input argument \"priority\" removed\n\
         compatible: tool basket_list: tool added\n\
         cosmetic: tool basket_add_note: description: description changed from \"Adds a note to a basket.\" to \"Appends a note.\"\n\
         3 changes: 1 breaking, 1 compatible, 1 cosmetic"
    );
}

#[test]
fn the_json_report_counts_each_severity_and_lists_every_change() {
    let new = note(|tool| {
        set(
            tool,
            &format!("{INPUT}/colour/enum"),
            json!(["red", "green", "blue"]),
        );
        set(tool, "/annotations/idempotentHint", json!(false));
    });
    let diff = base().diff(&new);
    assert!(diff.is_breaking());
    assert_eq!(diff.max_severity(), Some(Breaking));
    assert_eq!(
        diff.to_json(),
        json!({
            "breaking": 1,
            "compatible": 1,
            "cosmetic": 0,
            "changes": [
                {
                    "severity": "breaking",
                    "location": "tool basket_add_note: annotations.idempotentHint",
                    "message": "idempotentHint turned off (was true, now false)"
                },
                {
                    "severity": "compatible",
                    "location": "tool basket_add_note: inputSchema.properties.colour.enum",
                    "message": "enum value \"blue\" added"
                }
            ]
        })
    );
}

#[test]
fn a_compatible_only_diff_is_not_breaking() {
    let diff = base().diff(&note(|tool| {
        set(
            tool,
            &format!("{INPUT}/urgent"),
            json!({ "type": "boolean" }),
        )
    }));
    assert_eq!(diff.max_severity(), Some(Compatible));
    assert!(!diff.is_breaking());
}

#[test]
fn a_contract_file_reads_back_as_the_same_contract() {
    let contract = base();
    let text = contract.to_json_string();
    assert!(text.ends_with("}\n"), "{text}");
    assert!(text.starts_with("{\n  \"formatVersion\": 1,\n"), "{text}");
    assert_eq!(Contract::parse(&text).unwrap(), contract);
}

#[test]
fn the_file_does_not_depend_on_the_order_entries_were_registered_in() {
    let mut parts = Parts::base();
    parts.tools.reverse();
    parts.prompts.push(json!({ "name": "aardvark" }));
    parts.prompts.reverse();
    let mut resources = vec![json!({ "uri": "a://first", "name": "first" })];
    resources.append(&mut parts.resources);
    resources.reverse();
    let reordered = Contract::new(
        VERSION,
        parts.tools,
        parts.prompts,
        resources,
        parts.templates,
    );
    let sorted = {
        let mut parts = Parts::base();
        parts.prompts.insert(0, json!({ "name": "aardvark" }));
        parts
            .resources
            .insert(0, json!({ "uri": "a://first", "name": "first" }));
        parts.contract()
    };
    assert_eq!(reordered.to_json_string(), sorted.to_json_string());
    assert_eq!(reordered.tools()[0]["name"], "basket_add_note");
    assert_eq!(reordered.prompts()[0]["name"], "aardvark");
    assert_eq!(reordered.resources()[0]["uri"], "a://first");
}

fn parse_error(text: &str) -> ContractError {
    Contract::parse(text).expect_err("the text is not a valid contract")
}

#[test]
fn text_that_is_not_json_is_refused_with_its_line_and_column() {
    let error = parse_error("{\n  \"formatVersion\": 1,\n  \"tools\": [,]\n}");
    let ContractError::Json { line, column, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!((*line, *column), (3, 13));
    let message = error.to_string();
    assert!(
        message.starts_with("the contract is not valid JSON"),
        "{message}"
    );
    assert!(message.contains("line 3 column 13"), "{message}");
}

#[test]
fn json_that_is_not_an_object_is_refused() {
    let error = parse_error("[]");
    assert!(
        matches!(error, ContractError::NotAnObject { found: "an array" }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("must be a JSON object"),
        "{error}"
    );
}

#[test]
fn a_missing_format_version_is_refused_naming_the_version_this_build_reads() {
    let error = parse_error(r#"{"protocolVersion": "2026-07-28", "tools": []}"#);
    assert!(
        matches!(error, ContractError::MissingFormatVersion),
        "{error:?}"
    );
    assert!(error.to_string().contains("format version 1"), "{error}");
}

#[test]
fn an_unsupported_format_version_is_refused_naming_the_version_this_build_reads() {
    assert_eq!(FORMAT_VERSION, 1);
    let error = parse_error(r#"{"formatVersion": 2, "protocolVersion": "2026-07-28"}"#);
    let ContractError::UnsupportedFormatVersion { found } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(found, "2");
    let message = error.to_string();
    assert!(message.contains("version 2 is not supported"), "{message}");
    assert!(message.contains("reads format version 1"), "{message}");
}

#[test]
fn members_of_the_wrong_type_are_refused_by_name() {
    let cases = [
        (
            r#"{"formatVersion": "1", "protocolVersion": "x"}"#,
            "formatVersion",
            "an integer",
        ),
        (
            r#"{"formatVersion": 1, "protocolVersion": 7}"#,
            "protocolVersion",
            "a string",
        ),
        (
            r#"{"formatVersion": 1, "protocolVersion": "x", "tools": {}}"#,
            "tools",
            "an array",
        ),
        (
            r#"{"formatVersion": 1, "protocolVersion": "x", "resources": ["basket://a"]}"#,
            "resources[0]",
            "an object",
        ),
    ];
    for (text, member, expected) in cases {
        match parse_error(text) {
            ContractError::WrongType {
                member: found,
                expected: wanted,
                ..
            } => assert_eq!((found.as_str(), wanted), (member, expected), "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    let message =
        parse_error(r#"{"formatVersion": 1, "protocolVersion": "x", "tools": {}}"#).to_string();
    assert_eq!(message, "`tools` must be an array, found an object");
}

#[test]
fn a_missing_protocol_version_and_an_unknown_member_are_refused() {
    let error = parse_error(r#"{"formatVersion": 1}"#);
    assert!(
        matches!(error, ContractError::MissingProtocolVersion),
        "{error:?}"
    );
    let error = parse_error(r#"{"formatVersion": 1, "protocolVersion": "x", "tool": []}"#);
    assert!(
        matches!(&error, ContractError::UnknownMember { member } if member == "tool"),
        "{error:?}"
    );
}

#[test]
fn an_entry_without_its_name_is_refused() {
    let cases = [
        (
            r#"{"formatVersion": 1, "protocolVersion": "x", "tools": [{"name": "a"}, {"inputSchema": {}}]}"#,
            "tools",
            1,
            "name",
        ),
        (
            r#"{"formatVersion": 1, "protocolVersion": "x", "resources": [{"name": "a"}]}"#,
            "resources",
            0,
            "uri",
        ),
        (
            r#"{"formatVersion": 1, "protocolVersion": "x", "resourceTemplates": [{"uriTemplate": 3}]}"#,
            "resourceTemplates",
            0,
            "uriTemplate",
        ),
    ];
    for (text, list, index, key) in cases {
        match parse_error(text) {
            ContractError::Unnamed {
                list: found_list,
                index: found_index,
                key: found_key,
            } => assert_eq!((found_list, found_index, found_key), (list, index, key)),
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn duplicate_names_are_refused() {
    let error = parse_error(
        r#"{"formatVersion": 1, "protocolVersion": "x", "prompts": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}"#,
    );
    assert!(
        matches!(&error, ContractError::Duplicate { list: "prompts", key: "name", name } if name == "a"),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "`prompts` has more than one entry with `name` \"a\": keep one"
    );
}

#[test]
fn a_contract_without_lists_reads_as_empty() {
    let contract =
        Contract::parse(r#"{"formatVersion": 1, "protocolVersion": "2026-07-28"}"#).unwrap();
    assert_eq!(contract.protocol_version(), "2026-07-28");
    assert!(contract.tools().is_empty() && contract.prompts().is_empty());
    assert!(contract.resources().is_empty() && contract.resource_templates().is_empty());
}

/// The whole table through the command line, as CI runs it: `contract diff OLD NEW --format
/// json` on the quickstart binary, its exit status 1 exactly when a row has a breaking change,
/// and its report counting what the library finds.
#[test]
fn the_command_line_classifies_every_row_as_the_library_does() {
    let binary = common::examples::binary("quickstart");
    let dir = std::env::temp_dir().join(format!("mcp-tools-contract-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rows = rows();
    for (index, row) in rows.iter().enumerate() {
        let old = dir.join(format!("{index}-old.json"));
        let new = dir.join(format!("{index}-new.json"));
        std::fs::write(&old, row.old.to_json_string()).unwrap();
        std::fs::write(&new, row.new.to_json_string()).unwrap();
        let output = std::process::Command::new(&binary)
            .args(["contract", "diff"])
            .arg(&old)
            .arg(&new)
            .args(["--format", "json"])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("{}: not JSON ({error}): {output:?}", row.name));
        let count = |severity: Severity| {
            row.expected
                .iter()
                .filter(|(expected, _)| *expected == severity)
                .count()
        };
        for severity in [Breaking, Compatible, Cosmetic] {
            assert_eq!(
                report[severity.as_str()],
                count(severity),
                "{}: {report}",
                row.name
            );
        }
        let breaking = count(Breaking) > 0;
        assert_eq!(
            output.status.code(),
            Some(i32::from(breaking)),
            "{}: {report}",
            row.name
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
