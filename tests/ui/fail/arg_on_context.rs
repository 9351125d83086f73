use mcp_tools::{Context, tool};

/// Says which method is served.
#[tool]
fn method(#[arg(rename = "cx")] cx: Context) -> String {
    cx.method().to_owned()
}

fn main() {}
