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

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Plan {
    gib: u32,
}

/// Applies a plan.
#[tool(mutates = Basket)]
fn apply(basket: &mut Basket, plan: Plan) -> u32 {
    basket.memory_gib = plan.gib;
    plan.gib
}

fn main() {}
