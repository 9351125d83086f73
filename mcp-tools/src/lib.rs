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

pub mod auth;
#[cfg(feature = "cli")]
pub mod cli;
pub mod completion;
mod context;
pub mod contract;
mod dispatch;
pub mod prompts;
pub mod protocol;
pub mod resources;
pub mod server;
pub mod stateful;
pub mod store;
mod sync;
pub mod tasks;
pub mod testing;
pub mod tools;
mod transport;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

/// Collects `#[tool]` functions into a [`ToolSet`](tools::ToolSet), in the given order.
///
/// `tools![add, echo]` is `ToolSet::new().with(add::tool()).with(echo::tool())`: every `#[tool]`
/// function `f` also defines a zero-sized type `f` (in the type namespace, so the function stays
/// callable as before) whose `f::tool()` constructor returns the tool.
///
/// ```
/// use mcp_tools::{tool, tools};
///
/// /// Adds two integers.
/// #[tool]
/// fn add(a: i64, b: i64) -> String {
///     (a + b).to_string()
/// }
///
/// assert_eq!(add(1, 2), "3");
/// assert_eq!(tools![add].len(), 1);
/// ```
#[macro_export]
macro_rules! tools {
    ($($tool:path),* $(,)?) => {
        $crate::tools::ToolSet::new() $(.with(<$tool>::tool()))*
    };
}

pub use context::Context;
pub use mcp_tools_derive::{IntoToolError, tool, toolbox};
pub use protocol::recovery::Recovery;
pub use protocol::tool_error::{IntoToolError, ToolError};
pub use server::{BuildError, McpServer, McpServerBuilder};
pub use store::memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use store::postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use store::sqlite::SqliteStore;
pub use tools::extract::State;
pub use tools::reply::Structured;
