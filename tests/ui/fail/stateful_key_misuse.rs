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

/// Rebases without saying on what.
#[tool(mutates = Basket, on_conflict = rebase)]
fn a(basket: &mut Basket) -> u32 {
    basket.memory_gib
}

/// Touches without rebasing.
#[tool(mutates = Basket, touches = [memory_gib])]
fn b(basket: &mut Basket) -> u32 {
    basket.memory_gib
}

/// An unknown policy.
#[tool(mutates = Basket, on_conflict = last_write_wins)]
fn c(basket: &mut Basket) -> u32 {
    basket.memory_gib
}

/// A conflict policy without a version to conflict with.
#[tool(mutates = Basket, expected_version = false, on_conflict = reconfirm)]
fn d(basket: &mut Basket) -> u32 {
    basket.memory_gib
}

/// Mutation keys on a read.
#[tool(reads = Basket, operation_id = false)]
fn e(basket: &Basket) -> u32 {
    basket.memory_gib
}

/// Two kinds at once.
#[tool(reads = Basket, mutates = Basket)]
fn f(basket: &Basket) -> u32 {
    basket.memory_gib
}

/// A handle parameter that collides with the added one.
#[tool(reads = Basket)]
fn g(basket: &Basket, basket_id: String) -> String {
    let _ = basket;
    basket_id
}

fn main() {}
