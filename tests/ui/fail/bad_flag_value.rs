use mcp_tools::tool;

/// Deletes a file.
#[tool(destructive = "yes")]
fn delete(path: String) -> String {
    path
}

fn main() {}
