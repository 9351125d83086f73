use mcp_tools::tool;

/// Reads a file.
#[tool(name = "read file!")]
fn read(path: String) -> String {
    path
}

fn main() {}
