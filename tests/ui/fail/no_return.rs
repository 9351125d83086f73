use mcp_tools::tool;

/// Logs a line.
#[tool]
fn log(line: String) {
    println!("{line}");
}

fn main() {}
