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
mod completion;
mod context;
pub mod contract;
mod dispatch;
mod prompts;
pub mod protocol;
mod resources;
mod server;
pub mod stateful;
pub mod store;
mod sync;
pub mod tasks;
pub mod testing;
mod tools;
mod transport;

/// Content blocks of tool results.
pub mod content {
    pub use crate::protocol::content::*;
}

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

/// Collects `#[tool]` functions into a [`ToolSet`], in the given order.
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
        $crate::ToolSet::new() $(.with(<$tool>::tool()))*
    };
}

pub use auth::Principal;
pub use auth::hook::Unauthorized;
pub use completion::{CompletionTarget, Completions};
pub use context::Context;
pub use mcp_tools_derive::{ToolError, tool, toolbox};
pub use prompts::{GetPromptResult, IntoPromptReply, Prompt, PromptMessage, PromptSet, Role};
pub use protocol::LogLevel;
pub use protocol::content::{CallToolResult, Content};
pub use protocol::error::RpcError;
pub use protocol::input::InputRequired;
pub use protocol::recovery::{DomainCode, Recovery};
pub use protocol::result::CacheScope;
pub use protocol::tool_error::{IntoToolError, ToolError};
pub use resources::{Resource, ResourceContents, ResourceSet, ResourceTemplate};
pub use server::limits::{
    DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};
pub use server::{
    BuildError, DEFAULT_BODY_LIMIT, DEFAULT_MAX_LISTENS_PER_PRINCIPAL, McpServer, McpServerBuilder,
};
#[cfg(feature = "sqlite")]
pub use store::SqliteStore;
pub use store::{MemoryStore, MutationOutcome, Store};
pub use tools::extract::{FromContext, MISSING_STATE, State};
pub use tools::reply::{IntoCallToolResult, Structured, ToolReply};
pub use tools::set::ToolSet;
pub use tools::{NoArgs, Tool, ToolAnnotations, ToolInfo};
pub use transport::http::serve::shutdown_signal;
