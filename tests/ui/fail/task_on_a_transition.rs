use mcp_tools::store::Entity;
use mcp_tools::tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk")]
struct Basket {
    memory_gib: u32,
}

/// Upgrades the memory, as a task.
#[tool(mutates = Basket, task = optional)]
fn upgrade_memory(basket: &mut Basket, memory_gib: u32) -> u32 {
    basket.memory_gib = memory_gib;
    memory_gib
}

/// Creates a basket, as a task.
#[tool(creates = Basket, task = required)]
fn create() -> Basket {
    Basket { memory_gib: 16 }
}

/// Waits, in a mode that does not exist.
#[tool(task = sometimes)]
async fn wait() -> String {
    String::new()
}

fn main() {}
