use mcp_tools::tool;

/// Adds a pair.
#[tool]
fn add_pair((a, b): (i64, i64)) -> String {
    (a + b).to_string()
}

fn main() {}
