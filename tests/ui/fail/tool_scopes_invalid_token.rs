use mcp_tools::tool;

/// Reads a basket.
#[tool(scopes = ["basket read", "audit", "C:\\baskets", ""])]
fn read(id: String) -> String {
    id
}

/// Writes a basket.
#[tool(scopes = ["say \"please\"", "café"])]
fn write(id: String) -> String {
    id
}

fn main() {}
