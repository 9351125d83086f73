//! # mcp-tools
//!
//! A framework for MCP tool servers that speak protocol revision 2026-07-28 (stateless: no
//! handshake, no session, every POST self-describing) and whose tools keep state safely.
//!
//! ```no_run
//! use mcp_tools::{Context, McpServer, Tool, ToolInfo, ToolSet};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct EchoArgs {
//!     /// The text to send back.
//!     text: String,
//! }
//!
//! struct Echo;
//!
//! impl Tool for Echo {
//!     type Args = EchoArgs;
//!     type Output = String;
//!     fn info(&self) -> ToolInfo {
//!         ToolInfo::new("echo", "Returns its input.").read_only()
//!     }
//!     async fn call(&self, args: EchoArgs, _cx: Context) -> String {
//!         args.text
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! McpServer::builder("echo-server", "1.0.0")
//!     .tools(ToolSet::new().with(Echo))
//!     .build()?
//!     .serve("127.0.0.1:8080")
//!     .await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod content;
mod context;
mod cursor;
mod dispatch;
mod error;
mod headers;
mod host;
mod http;
mod output;
pub mod protocol;
mod serve;
mod server;
pub mod state;
pub mod testing;
mod tool;
mod tool_set;

pub use content::{CallToolResult, Content, IntoToolError, ToolError};
pub use context::{Context, Principal};
pub use cursor::CursorError;
pub use error::RpcError;
pub use output::{IntoCallToolResult, Structured};
pub use serve::shutdown_signal;
pub use server::{BuildError, CacheScope, DEFAULT_BODY_LIMIT, McpServer, McpServerBuilder};
#[cfg(feature = "sqlite")]
pub use state::SqliteStore;
pub use state::{MemoryStore, MutationOutcome, Resource, StateStore};
pub use tool::{NoArgs, Tool, ToolAnnotations, ToolInfo};
pub use tool_set::ToolSet;
