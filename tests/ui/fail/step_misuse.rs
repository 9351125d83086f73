use mcp_tools::store::Entity;
use mcp_tools::{Context, tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk")]
struct Basket {
    items: u32,
}

/// One entity is a single change, not a step.
#[tool(step)]
fn basket_bump(basket: &mut Basket) -> u32 {
    basket.items += 1;
    basket.items
}

/// A step changes each entity it takes.
#[tool(step)]
fn basket_copy(from: &Basket, to: &mut Basket) -> u32 {
    to.items = from.items;
    to.items
}

/// A step declares no stateful kind beside it.
#[tool(step, mutates = Basket)]
fn basket_swap(left: &mut Basket, right: &mut Basket) -> u32 {
    std::mem::swap(&mut left.items, &mut right.items);
    left.items
}

/// A step's transition runs in the store: no context, not async.
#[tool(step)]
async fn basket_merge(left: &mut Basket, right: &mut Basket, cx: &Context) -> u32 {
    let _ = cx;
    left.items += right.items;
    left.items
}

/// An argument may not take the name of an entity's handle.
#[tool(step)]
fn basket_split(left: &mut Basket, right: &mut Basket, left_id: String) -> u32 {
    let _ = left_id;
    right.items = left.items / 2;
    right.items
}

/// At most four entities.
#[tool(step)]
fn basket_gather(a: &mut Basket, b: &mut Basket, c: &mut Basket, d: &mut Basket, e: &mut Basket) -> u32 {
    a.items + b.items + c.items + d.items + e.items
}

fn main() {}
