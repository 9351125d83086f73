//! Calling MCP 2026-07-28 servers (feature `client`): a client over HTTP and stdio, and a
//! harness that drives stateful tools by the concurrency rules they publish.
//!
//! [`Client`] speaks the protocol to any 2026-07-28 server: every request carries its version
//! and the client's capabilities in `_meta` (and on HTTP the routing headers), `tools/list` is
//! read page by page and kept as long as the server's `ttlMs` says, answers may stream
//! (progress and log messages go to a callback), a tool's requests for input go to a handler,
//! tasks are polled, and `subscriptions/listen` streams changes. Failures are typed
//! ([`ClientError`]).
//!
//! [`Harness`] adds what a trusted harness owes a model that calls stateful tools, read from the
//! rules each tool publishes in `tools/list` (`_meta["io.github.mcp-tools/state"]`):
//!
//! - an `operation_id` for every change the caller did not name, and the same one, with the
//!   same arguments, when it sends a call again after its answer was lost: applied once;
//! - the version (the server's validator) of the resource as the caller last saw it, for a
//!   change the caller gave no basis for; never a version it did not see;
//! - every answer as an [`Outcome`] to match on: `Applied`, `StaleView` with the delta,
//!   `Replayed`, `Rejected` with its code and recovery, `Expired`, ...;
//! - [`ResumptionRecord`]s to save, and [`Harness::resume`] to revalidate one after a restart
//!   or a hand-off: [`Resumed::Unchanged`], [`Resumed::Changed`] with the delta, or gone.
//!
//! ```no_run
//! # async fn run() -> Result<(), mcp_tools::client::ClientError> {
//! use mcp_tools::client::{Client, Harness, Outcome};
//! use serde_json::json;
//!
//! let client = Client::builder().connect_http("http://127.0.0.1:8080/mcp").await?;
//! let harness = Harness::new(client);
//! let created = harness.call("basket_create", json!({})).await?;
//! let Outcome::Applied(basket) = created else { return Ok(()) };
//! let upgraded = harness
//!     .call("basket_upgrade_memory", json!({ "basket_id": basket.handle, "memory_gib": 32 }))
//!     .await?;
//! assert!(matches!(upgraded, Outcome::Applied(_)));
//! # Ok(()) }
//! ```
//!
//! The drop-in harness puts the same between any MCP host and a server: the `harness`
//! command of [`cli`](crate::cli) speaks stdio to the host and HTTP to the server
//! ([`Harness::serve_stdio`]).

// Each file uses only those before it in: result, error, wire, catalog, http, stdio, api,
// listen, records, harness, resume, dropin.
mod api;
mod catalog;
mod dropin;
mod error;
mod harness;
mod http;
mod listen;
mod records;
mod result;
mod resume;
mod stdio;
mod wire;

pub use api::{Client, ClientBuilder, Submitted, ToolCall};
pub use catalog::{ListedTool, StateRules};
pub use error::{
    ClientError, RecordError, RpcFailure, ToolFailure, TransportError, TransportErrorKind,
};
pub use harness::{Harness, Outcome, RetryPolicy};
pub use listen::{ListenEvent, Subscription, SubscriptionFilter};
pub use records::{ResumptionRecord, load_records, save_records};
pub use result::{Discovery, Notification, Task, ToolResult};
pub use resume::Resumed;
