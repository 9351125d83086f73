use mcp_tools::tool;
use schemars::JsonSchema;

#[derive(JsonSchema)]
struct Point {
    x: f64,
}

/// Moves to a point.
#[tool]
fn move_to(label: String, point: Point) -> String {
    format!("{label} {}", point.x)
}

fn main() {}
