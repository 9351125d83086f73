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

/// Reads a basket.
#[tool(reads = Basket)]
fn basket_get(basket: &mut Basket) -> u32 {
    basket.memory_gib
}

/// Reads a basket without taking it.
#[tool(reads = Basket)]
fn basket_peek() -> u32 {
    0
}

fn main() {}
