//! A minimal MCP tool server: three plain functions, served statelessly over HTTP.
//!
//! Run it with `cargo run --example quickstart` (add `-- --bind 127.0.0.1:9000` to move it, or
//! `-- --stdio` to serve standard input and output). `-- --help` lists the other commands:
//! `schema`, `docs`, `list`, `contract check FILE`, `call add '{"a": 1, "b": 2}'`, `probe URL`.

use mcp_tools::tools::ToolSet;
use mcp_tools::{Context, McpServer, ToolError, tool, tools};
use schemars::JsonSchema;
use serde::Serialize;

/// The sum of two integers.
#[derive(Serialize, JsonSchema)]
pub struct Sum {
    /// `a + b`.
    pub sum: i64,
}

/// Adds two integers and returns their sum.
///
/// Fails with `OVERFLOW` when the sum does not fit in a 64-bit integer.
#[tool(title = "Add", read_only)]
pub fn add(
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
) -> Result<Sum, ToolError> {
    let sum = a
        .checked_add(b)
        .ok_or_else(|| ToolError::new("OVERFLOW", "The sum does not fit in a 64-bit integer"))?;
    Ok(Sum { sum })
}

/// Returns the given text unchanged.
#[tool(read_only)]
pub async fn echo(
    /// The text to send back.
    text: String,
) -> String {
    text
}

/// Describes the calling client as the server sees it on this request.
#[tool(read_only)]
pub fn whoami(cx: &Context) -> String {
    let client = cx
        .client_info()
        .and_then(|info| info.get("name"))
        .and_then(|name| name.as_str())
        .unwrap_or("an unnamed client");
    format!("{client}, speaking MCP {}", cx.protocol_version())
}

/// The tools of this example, in `tools/list` order.
pub fn tool_set() -> ToolSet {
    tools![add, echo, whoami]
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Standard output may be the stdio transport: logs go to standard error.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let server = McpServer::builder("quickstart", env!("CARGO_PKG_VERSION"))
        .instructions("Small arithmetic and echo tools for trying MCP 2026-07-28.")
        .tools(tool_set())
        .build()
        .expect("the quickstart's tools are valid");
    server.run_cli().await
}
