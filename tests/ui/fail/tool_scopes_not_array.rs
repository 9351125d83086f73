use mcp_tools::tool;

/// Reads a basket.
#[tool(scopes = "basket:read")]
fn read(id: String) -> String {
    id
}

/// Writes a basket.
#[tool(scopes = ["basket:write", basket_admin, 7])]
fn write(id: String) -> String {
    id
}

/// Audits a basket.
#[tool(read_only, scopes)]
fn audit(id: String) -> String {
    id
}

fn main() {}
