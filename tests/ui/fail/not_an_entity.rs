use mcp_tools::tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Basket {
    memory_gib: u32,
}

/// Reads a basket.
#[tool(reads = Basket)]
fn basket_get(basket: &Basket) -> u32 {
    basket.memory_gib
}

fn main() {}
