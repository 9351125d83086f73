use mcp_tools::store::Entity;
use mcp_tools::tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk")]
struct Basket {
    memory_gib: u32,
    storage_gib: u32,
}

/// Upgrades the memory.
#[tool(mutates = Basket)]
fn upgrade_memory(basket: &mut Basket, cx: &mcp_tools::Context, memory_gib: u32) -> u32 {
    let _ = cx;
    basket.memory_gib = memory_gib;
    memory_gib
}

fn main() {}
