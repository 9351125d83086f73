use mcp_tools::effects::{Effect, Effects};
use mcp_tools::store::Entity;
use mcp_tools::tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "ord")]
struct Order {
    paid: bool,
}

#[derive(Serialize, Deserialize)]
struct Charge {
    amount: u32,
}

impl Effect for Charge {
    const KIND: &'static str = "charge";
}

/// A reads tool emits nothing: it changes nothing to commit effects with.
#[tool(reads = Order)]
fn order_get(order: &Order, effects: &mut Effects<Charge>) -> bool {
    let _ = effects;
    order.paid
}

/// The effects are emitted into, so they are taken by `&mut`.
#[tool(mutates = Order)]
fn order_pay(order: &mut Order, effects: &Effects<Charge>) -> bool {
    let _ = effects;
    order.paid = true;
    true
}

/// The effect type is named.
#[tool(mutates = Order)]
fn order_refund(order: &mut Order, effects: &mut Effects) -> bool {
    let _ = effects;
    order.paid = false;
    true
}

/// One effects parameter per tool.
#[tool(mutates = Order)]
fn order_split(order: &mut Order, first: &mut Effects<Charge>, second: &mut Effects<Charge>) -> bool {
    let _ = (first, second);
    order.paid = true;
    true
}

/// `#[arg]` does not apply to the effects.
#[tool(mutates = Order)]
fn order_settle(order: &mut Order, #[arg(description = "x")] effects: &mut Effects<Charge>) -> bool {
    let _ = effects;
    order.paid = true;
    true
}

fn main() {}
