use mcp_tools::tool;
use serde::Deserialize;

#[derive(Deserialize)]
struct Point {
    x: f64,
    y: f64,
}

/// Moves to a point.
#[tool]
fn move_to(point: Point) -> String {
    format!("{} {}", point.x, point.y)
}

fn main() {}
