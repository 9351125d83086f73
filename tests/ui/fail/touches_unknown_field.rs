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

/// Upgrades the storage.
#[tool(mutates = Basket, on_conflict = rebase, touches = [storage_gb])]
fn upgrade_storage(basket: &mut Basket, storage_gib: u32) -> u32 {
    basket.storage_gib = storage_gib;
    storage_gib
}

fn main() {}
