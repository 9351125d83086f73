//! `scopes = [...]` on free functions and toolbox methods, next to the other keys.
use std::sync::Arc;

use mcp_tools::{tool, toolbox, tools};

/// Reads a basket.
#[tool(read_only, scopes = ["basket:read", "audit"], title = "Read")]
fn read(id: String) -> String {
    id
}

/// Writes a basket.
#[tool(scopes = [r"basket:write", "!#$%&'()*+,-./:;<=>?@[]^_`{|}~",])]
fn write(id: String) -> String {
    id
}

struct Baskets;

#[toolbox]
impl Baskets {
    /// Empties a basket.
    #[mcp_tools::tool(name = "baskets.empty", scopes = ["basket:write"])]
    fn empty(&self, id: String) -> String {
        id
    }
}

fn main() {
    let set = tools![read, write].merge(Arc::new(Baskets).tool_set());
    assert_eq!(set.len(), 3);
}
