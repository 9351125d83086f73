use mcp_tools::store::{Lifecycle, Entity};
use mcp_tools::{ToolError, tool, tools};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "shopping_cart", prefix = "crt", ttl_secs = 60, lifecycle = stage)]
struct ShoppingCart {
    items: Vec<String>,
    closed: bool,
}

impl ShoppingCart {
    fn stage(&self) -> Lifecycle {
        if self.closed { Lifecycle::Terminal } else { Lifecycle::Draft }
    }
}

/// Opens a cart.
#[tool(creates = ShoppingCart)]
async fn cart_open(first: Option<String>) -> Result<ShoppingCart, ToolError> {
    Ok(ShoppingCart { items: first.into_iter().collect(), closed: false })
}

/// Opens an empty cart, without an idempotency key.
#[tool(creates = ShoppingCart, operation_id = false)]
fn cart_open_empty() -> ShoppingCart {
    ShoppingCart { items: Vec::new(), closed: false }
}

/// Counts the items.
#[tool(reads = ShoppingCart)]
async fn cart_count(cart: &ShoppingCart, cx: &mcp_tools::Context) -> usize {
    let _ = cx.principal();
    cart.items.len()
}

/// Adds an item.
#[tool(mutates = ShoppingCart, on_conflict = rebase, touches = [items], idempotent = false)]
fn cart_add(cart: &mut ShoppingCart, item: String) -> Result<usize, ToolError> {
    cart.items.push(item);
    Ok(cart.items.len())
}

/// Closes the cart.
#[tool(mutates = ShoppingCart, expected_version = false, operation_id = false)]
fn cart_close(cart: &mut ShoppingCart) -> bool {
    cart.closed = true;
    true
}

fn main() {
    assert_eq!(<ShoppingCart as Entity>::KIND, "shopping_cart");
    assert_eq!(<ShoppingCart as Entity>::PREFIX, "crt");
    assert_eq!(tools![cart_open, cart_open_empty, cart_count, cart_add, cart_close].len(), 5);
}
