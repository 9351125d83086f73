//! A framework for MCP tool servers that speak protocol revision 2026-07-28 (stateless: no
//! handshake, no session, every request self-describing) and whose tools keep state safely.
//!
//! A tool is a plain function; [`#[tool]`](macro@tool) generates its input and output schemas
//! and the argument handling, and [`tools!`] collects tools for a [`McpServer`]:
//!
//! ```no_run
//! use mcp_tools::{McpServer, tool, tools};
//!
//! /// Returns its input.
//! #[tool(read_only)]
//! fn echo(
//!     /// The text to send back.
//!     text: String,
//! ) -> String {
//!     text
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! McpServer::builder("echo-server", "1.0.0")
//!     .tools(tools![echo])
//!     .build()?
//!     .serve("127.0.0.1:8080")
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! A stateful tool names the entity it creates, reads or changes (`#[tool(mutates = Basket)]`,
//! with `Basket` deriving [`store::Entity`]); the server checks the version a call is based on
//! and its operation id atomically with the write, in the store it was given
//! ([`MemoryStore`], [`SqliteStore`], `PostgresStore`), and answers with a typed outcome.
//!
//! # Where to start
//!
//! - [`guide`]: writing tools, stateful tools and how to design them, testing, tasks,
//!   deploying, OAuth, observability, protocol behaviour, the command line, calling servers.
//! - The modules, by layer: [`protocol`] (the wire), [`auth`], [`store`] (the state engine),
//!   [`tools`](mod@tools), [`prompts`], [`resources`], [`completion`], [`stateful`] (the runtime of the
//!   stateful tool kinds), [`tasks`], [`server`], [`testing`], `cli`, [`contract`], `client` (calling servers).
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `sqlite` | yes | [`SqliteStore`]: durable state in one file, safe for several processes |
//! | `postgres` | | `PostgresStore`: replicas on many hosts sharing one database |
//! | `oauth` | | an OAuth 2.1 resource server: JWT and introspection verifiers ([`auth`]) |
//! | `cli` | | `cli`: a standard command line for server binaries (with `client`) |
//! | `client` | | `client`: a 2026-07-28 client, and the harness that drives stateful tools |
//! | `opentelemetry` | | request spans that continue the caller's trace |
//! | `rate-limits` | | `McpServerBuilder::rate_limit` and `tool_rate_limit` |
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The macros name the runtime `::mcp_tools`, inside this crate too (its own tests use them).
extern crate self as mcp_tools;

pub mod auth;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "client")]
pub mod client;
pub mod completion;
mod context;
pub mod contract;
mod dispatch;
pub mod effects;
pub mod guide;
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

// The repository's README is compiled and run with the doctests, so it cannot drift from the
// API. It lives outside the package, which is built without `doctest` and never reads it.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

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
