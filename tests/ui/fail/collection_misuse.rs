use mcp_tools::store::{Collection, Entity};
use mcp_tools::tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A collection cannot be flattened: its items are stored under the field's name.
#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "pln")]
struct Flattened {
    #[serde(flatten)]
    steps: Collection<String>,
}

/// An entity without collections.
#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "gau")]
struct Gauge {
    level: u32,
}

/// A plan with a collection.
#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "pln")]
struct Plan {
    steps: Collection<String>,
}

/// Per-item versions of an entity that has no items.
#[tool(mutates = Gauge, on_conflict = items)]
fn gauge_set(gauge: &mut Gauge, level: u32) -> u32 {
    gauge.level = level;
    level
}

/// Per-item versions of a change that takes no version.
#[tool(mutates = Plan, on_conflict = items, expected_version = false)]
fn plan_edit(plan: &mut Plan, id: u64, text: String) -> bool {
    plan.steps.get_mut(id).map(|step| *step = text).is_some()
}

/// A reads tool cannot take an argument named as the page cursor.
#[tool(reads = Plan)]
fn plan_get(plan: &Plan, items_cursor: Option<String>) -> u64 {
    let _ = items_cursor;
    plan.steps.len()
}

fn main() {}
