//! The smallest server: one tool, served over HTTP on 127.0.0.1:8080.
//!
//! `cargo run --example hello`. Needs nothing beyond the default features; copied into a crate of
//! its own it needs `mcp-tools`, `tokio` (features `macros`, `rt-multi-thread`), `serde` and
//! `schemars`.

use mcp_tools::{McpServer, tool, tools};

/// Greets someone by name.
#[tool(read_only)]
fn hello(
    /// Who to greet.
    name: String,
) -> String {
    format!("Hello, {name}!")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    McpServer::builder("hello", "1.0.0")
        .tools(tools![hello])
        .build()?
        .serve("127.0.0.1:8080")
        .await?;
    Ok(())
}
