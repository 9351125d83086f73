use mcp_tools::tool;

/// Reads a file.
#[tool]
fn read(path: String) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

fn main() {}
