use mcp_tools::tool;

/// Copies a file.
#[tool]
fn copy(from: String, #[arg(rename = "from")] to: String) -> String {
    format!("{from} -> {to}")
}

fn main() {}
