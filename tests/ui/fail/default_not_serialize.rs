use mcp_tools::store::Entity;
use mcp_tools::tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk")]
struct Basket {
    memory_gib: u32,
}

#[derive(Clone, Default, Deserialize, JsonSchema)]
struct Plan {
    gib: u32,
}

/// Creates a basket from a plan.
#[tool(creates = Basket)]
fn create(#[arg(default)] plan: Plan) -> Basket {
    Basket {
        memory_gib: plan.gib,
    }
}

/// Applies a plan.
#[tool(mutates = Basket)]
fn apply(basket: &mut Basket, #[arg(default = Plan { gib: 8 })] plan: Plan) -> u32 {
    basket.memory_gib = plan.gib;
    plan.gib
}

/// Without an operation id the fingerprint is never taken, so no `Serialize` is needed.
#[tool(mutates = Basket, operation_id = false)]
fn apply_once(basket: &mut Basket, #[arg(default)] plan: Plan) -> u32 {
    basket.memory_gib = plan.gib;
    plan.gib
}

fn main() {}
