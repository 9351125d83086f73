use mcp_tools::tool;

/// Reads a file.
#[tool(readonly)]
fn read(path: String) -> String {
    path
}

fn main() {}
