use mcp_tools::tool;

/// Reads a file.
#[tool(name = "read", title = "Read", name = "read_file")]
fn read(path: String) -> String {
    path
}

fn main() {}
