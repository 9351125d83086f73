//! Wire-level vocabulary of MCP 2026-07-28: versions, `_meta` keys, header names, the JSON-RPC
//! envelope, and what a tool call answers (content, tool errors, recovery hints, requests for
//! client input), with every code and key this framework adds.

pub(crate) mod content;
mod envelope;
pub(crate) mod era;
pub(crate) mod error;
pub mod framework;
pub mod headers;
pub(crate) mod input;
mod meta;
pub(crate) mod param_headers;
pub(crate) mod recovery;
pub(crate) mod reply;
pub(crate) mod result;
pub(crate) mod seal;
pub(crate) mod tool_error;

pub use envelope::{Envelope, RequestId};
pub use error::RpcError;
pub use meta::{LogLevel, RequestMeta};

/// The compact JSON text of `value`, serialized straight into a buffer. `Value`'s `Display`
/// writes the same bytes through the formatting machinery: 197 ns against 62 for a three-field
/// object, 2.5 µs against 1.2 for a basket-like object with twenty notes. (The stores' columns
/// use `store::columns::to_json`, which types its errors as the store's.)
pub(crate) fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).expect("a JSON value always serializes")
}

/// The generator every published schema comes from: JSON Schema 2020-12, pinned explicitly so a
/// change of the library's default cannot change the published contract.
pub(crate) fn schema_generator() -> schemars::SchemaGenerator {
    schemars::generate::SchemaSettings::draft2020_12().into_generator()
}

/// The protocol revision this runtime speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// Every protocol version the endpoint serves, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION];

/// `_meta` keys reserved by the protocol.
pub mod meta_keys {
    /// Protocol version claimed by the request (required).
    pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
    /// Capabilities the client declares for this request (required).
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// Self-reported client implementation (optional).
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// Per-request log level opt-in (optional).
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    /// Server implementation, carried by every result.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// Progress opt-in token (optional).
    pub const PROGRESS_TOKEN: &str = "progressToken";
}

/// JSON-RPC and MCP error codes.
pub mod codes {
    /// The body is not JSON.
    pub const PARSE_ERROR: i32 = -32700;
    /// The body is not a single valid JSON-RPC request or notification.
    pub const INVALID_REQUEST: i32 = -32600;
    /// Unknown, removed or unadvertised method.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Parameters are missing or malformed.
    pub const INVALID_PARAMS: i32 = -32602;
    /// Unexpected server failure.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// A routing header is missing, malformed or disagrees with the body.
    pub const HEADER_MISMATCH: i32 = -32020;
    /// The request needs a client capability it did not declare.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i32 = -32021;
    /// The requested protocol version is not served here.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
    /// The caller exceeded a limit: its rate of tool calls, or the `subscriptions/listen` streams
    /// it may hold open (HTTP 429); an implementation-defined server error.
    pub const TOO_MANY_REQUESTS: i32 = -32000;
}

/// Methods of earlier revisions (and removed ones) that this endpoint deliberately does not serve.
pub(crate) const REMOVED_METHODS: &[&str] = &[
    "initialize",
    "notifications/initialized",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "notifications/roots/list_changed",
    "tasks/result",
    "tasks/list",
];
