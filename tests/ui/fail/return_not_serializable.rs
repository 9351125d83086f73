use mcp_tools::tool;

struct Report {
    lines: Vec<String>,
}

/// Builds a report.
#[tool]
fn report(title: String) -> Report {
    Report { lines: vec![title] }
}

fn main() {}
