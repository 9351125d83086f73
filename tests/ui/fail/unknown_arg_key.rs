use mcp_tools::tool;

/// Reads a file.
#[tool]
fn read(#[arg(renmae = "file")] path: String) -> String {
    path
}

fn main() {}
