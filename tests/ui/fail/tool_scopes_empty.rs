use mcp_tools::tool;

/// Reads a basket.
#[tool(read_only, scopes = [])]
fn read(id: String) -> String {
    id
}

fn main() {}
