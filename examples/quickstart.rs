//! A minimal MCP tool server: three plain tools, served statelessly over HTTP.
//!
//! Run it with `cargo run --example quickstart` (add `-- --bind 127.0.0.1:9000` to move it).

use mcp_tools::{Context, McpServer, NoArgs, Structured, Tool, ToolError, ToolInfo, ToolSet};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    /// `a + b`.
    sum: i64,
}

/// Adds two integers, refusing to overflow.
struct Add;

impl Tool for Add {
    type Args = AddArgs;
    type Output = Result<Structured<Sum>, ToolError>;

    fn info(&self) -> ToolInfo {
        ToolInfo::new("add", "Adds two integers and returns their sum.")
            .title("Add")
            .read_only()
    }

    async fn call(&self, args: AddArgs, _cx: Context) -> Self::Output {
        let sum = args.a.checked_add(args.b).ok_or_else(|| {
            ToolError::new("OVERFLOW", "The sum does not fit in a 64-bit integer")
        })?;
        Ok(Structured(Sum { sum }))
    }
}

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

/// Returns its input unchanged.
struct Echo;

impl Tool for Echo {
    type Args = EchoArgs;
    type Output = String;

    fn info(&self) -> ToolInfo {
        ToolInfo::new("echo", "Returns the given text unchanged.").read_only()
    }

    async fn call(&self, args: EchoArgs, _cx: Context) -> String {
        args.text
    }
}

/// Tells the caller what it knows about the request.
struct WhoAmI;

impl Tool for WhoAmI {
    type Args = NoArgs;
    type Output = String;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "whoami",
            "Describes the calling client as the server sees it on this request.",
        )
        .read_only()
    }

    async fn call(&self, _args: NoArgs, cx: Context) -> String {
        let client = cx
            .client_info()
            .and_then(|info| info.get("name"))
            .and_then(|name| name.as_str())
            .unwrap_or("an unnamed client");
        format!("{client}, speaking MCP {}", cx.protocol_version())
    }
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let server = McpServer::builder("quickstart", env!("CARGO_PKG_VERSION"))
        .instructions("Small arithmetic and echo tools for trying MCP 2026-07-28.")
        .tools(ToolSet::new().with(Add).with(Echo).with(WhoAmI))
        .build()?;
    server.serve(bind_address()).await?;
    Ok(())
}
