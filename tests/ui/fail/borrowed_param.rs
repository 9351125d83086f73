use mcp_tools::tool;

/// Measures text.
#[tool]
fn length(text: &str) -> String {
    text.len().to_string()
}

fn main() {}
