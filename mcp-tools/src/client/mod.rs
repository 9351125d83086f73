//! Calling MCP 2026-07-28 servers (feature `client`).
//!
//! [`Client`] speaks the protocol to any 2026-07-28 server: every request carries its version
//! and the client's capabilities in `_meta` (and on HTTP the routing headers), `tools/list` is
//! read page by page and kept as long as the server's `ttlMs` says, answers may stream
//! (progress and log messages go to a callback), a tool's requests for input go to a handler,
//! tasks are polled, and `subscriptions/listen` streams changes. Failures are typed
//! ([`ClientError`]).

// Each file uses only those before it in: result, error, wire, catalog, http, stdio, api,
// listen.
mod api;
mod catalog;
mod error;
mod http;
mod listen;
mod result;
mod stdio;
mod wire;

pub use api::{Client, ClientBuilder, Submitted, ToolCall};
pub use catalog::{ListedTool, StateRules};
pub use error::{
    ClientError, RecordError, RpcFailure, ToolFailure, TransportError, TransportErrorKind,
};
pub use listen::{ListenEvent, Subscription, SubscriptionFilter};
pub use result::{Discovery, Notification, Task, ToolResult};
