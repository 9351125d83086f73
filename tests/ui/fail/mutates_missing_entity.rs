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
fn upgrade_memory(memory_gib: u32) -> u32 {
    memory_gib
}

/// Upgrades the storage, but takes the basket read-only.
#[tool(mutates = Basket)]
fn upgrade_storage(basket: &Basket, storage_gib: u32) -> u32 {
    basket.storage_gib.max(storage_gib)
}

fn main() {}
