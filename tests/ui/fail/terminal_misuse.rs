use mcp_tools::store::Entity;
use mcp_tools::tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "ord")]
struct Order {
    placed: bool,
}

/// A read cannot end anything.
#[tool(reads = Order, terminal)]
fn order_get(order: &Order) -> bool {
    order.placed
}

/// Ends the order, yet claims to destroy nothing.
#[tool(mutates = Order, terminal, destructive = false)]
fn order_place(order: &mut Order) -> bool {
    order.placed = true;
    true
}

/// Not even stateful.
#[tool(terminal)]
fn shout(text: String) -> String {
    text.to_uppercase()
}

fn main() {}
