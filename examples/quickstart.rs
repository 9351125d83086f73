//! A minimal MCP tool server: three plain functions, served statelessly over HTTP.
//!
//! Run it with `cargo run --example quickstart` (add `-- --bind 127.0.0.1:9000` to move it).
//! `--print-schemas` prints the JSON document of its tools and `--print-docs` a Markdown page;
//! both exit without serving.

use mcp_tools::{Context, McpServer, ToolError, ToolSet, tool, tools};
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

fn bind_address() -> String {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--bind" {
            if let Some(addr) = args.next() {
                return addr;
            }
        } else if let Some(addr) = arg.strip_prefix("--bind=") {
            return addr.to_owned();
        }
    }
    "127.0.0.1:8080".to_owned()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|arg| arg == "--print-schemas") {
        println!(
            "{}",
            serde_json::to_string_pretty(&tool_set().schema_document())?
        );
        return Ok(());
    }
    if std::env::args().any(|arg| arg == "--print-docs") {
        print!("{}", tool_set().markdown());
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let server = McpServer::builder("quickstart", env!("CARGO_PKG_VERSION"))
        .instructions("Small arithmetic and echo tools for trying MCP 2026-07-28.")
        .tools(tool_set())
        .build()?;
    server.serve(bind_address()).await?;
    Ok(())
}
