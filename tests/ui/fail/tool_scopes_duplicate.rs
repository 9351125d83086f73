use mcp_tools::{tool, toolbox};

/// Reads a basket.
#[tool(scopes = ["basket:read", "audit", "basket:read"])]
fn read(id: String) -> String {
    id
}

/// Writes a basket.
#[tool(scopes = ["basket:write"], read_only = false, scopes = ["audit"])]
fn write(id: String) -> String {
    id
}

struct Baskets;

#[toolbox]
impl Baskets {
    /// Empties a basket.
    #[tool(scopes = ["basket:write", "basket:write", "basket:write"])]
    fn empty(&self, id: String) -> String {
        id
    }
}

fn main() {}
