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

mod auth;
mod completion;
pub mod content;
mod context;
mod cursor;
mod dispatch;
mod docs;
mod error;
mod extract;
mod headers;
mod host;
mod http;
mod input;
mod legacy;
mod listen;
mod notify;
mod output;
mod param_headers;
mod prompt;
pub mod protocol;
mod resource;
mod serve;
mod server;
mod sse;
pub mod state;
pub mod testing;
mod tool;
mod tool_set;

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

pub use auth::Unauthorized;
pub use completion::{CompletionTarget, Completions};
pub use content::{CallToolResult, Content, IntoToolError, ToolError};
pub use context::{Context, Principal};
pub use cursor::CursorError;
pub use error::RpcError;
pub use extract::{FromContext, MISSING_STATE, State};
pub use input::{InputRequired, ToolReply};
pub use mcp_tools_derive::{ToolError, tool, toolbox};
pub use notify::LogLevel;
pub use output::{IntoCallToolResult, Structured};
pub use prompt::{GetPromptResult, IntoPromptReply, Prompt, PromptMessage, PromptSet, Role};
pub use resource::{Resource, ResourceContents, ResourceSet, ResourceTemplate};
pub use serve::shutdown_signal;
pub use server::{BuildError, CacheScope, DEFAULT_BODY_LIMIT, McpServer, McpServerBuilder};
#[cfg(feature = "sqlite")]
pub use state::SqliteStore;
pub use state::{MemoryStore, MutationOutcome, StateStore};
pub use tool::{NoArgs, Tool, ToolAnnotations, ToolInfo};
pub use tool_set::ToolSet;
