use mcp_tools::effects::Effects;
use mcp_tools::store::Entity;
use mcp_tools::tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "ord")]
struct Order {
    paid: bool,
}

/// Not an `Effect`: no kind to deliver it by.
#[derive(Serialize, Deserialize)]
struct Charge {
    amount: u32,
}

/// Pays the order.
#[tool(mutates = Order)]
fn order_pay(order: &mut Order, effects: &mut Effects<Charge>) -> bool {
    effects.emit(Charge { amount: 1 });
    order.paid = true;
    true
}

fn main() {}
