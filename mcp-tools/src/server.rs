//! The server: configuration, the compiled catalog, and the answers computed once at start-up.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use serde::Serialize;
use serde_json::{Value, json};

use crate::context::SharedState;
use crate::cursor::CursorCodec;
use crate::host::HostPolicy;
use crate::protocol::{SUPPORTED_VERSIONS, meta_keys};
use crate::tool_set::{Catalog, ToolSet};

/// Why a server could not be built. Every variant names what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A tool name is outside `^[A-Za-z0-9_./-]{1,64}$`.
    #[error(
        "tool name {0:?} is invalid: use 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', '/', '-'"
    )]
    InvalidToolName(String),
    /// Two tools share a name.
    #[error("two tools are named {0:?}: tool names must be unique")]
    DuplicateTool(String),
    /// A tool has no description.
    #[error("tool {0:?} has no description: models choose tools by their descriptions")]
    MissingDescription(String),
    /// An input schema whose root is not `"type": "object"`.
    #[error(
        "the input schema of tool {0:?} must have `\"type\": \"object\"` at its root: take arguments as a struct with named fields (or `NoArgs`)"
    )]
    InputSchemaNotObject(String),
    /// A schema that is not valid JSON Schema 2020-12.
    #[error("a schema of tool {tool:?} is not valid JSON Schema 2020-12: {reason}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// The validator's explanation.
        reason: String,
    },
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    InvalidSetting(&'static str),
}

/// Who may cache list results: everyone, or only the requesting principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    /// Results do not depend on the caller.
    Public,
    /// Results may depend on the caller's authorization.
    Private,
}

/// Builds an [`McpServer`].
#[must_use]
pub struct McpServerBuilder {
    name: String,
    version: String,
    title: Option<String>,
    instructions: Option<String>,
    tools: ToolSet,
    state: http::Extensions,
    page_size: usize,
    list_ttl: Duration,
    cache_scope: CacheScope,
    cursor_key: Option<Vec<u8>>,
    body_limit: usize,
    hosts: HostPolicy,
    endpoint_path: String,
}

/// Default body limit: 4 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 4 * 1024 * 1024;

impl McpServerBuilder {
    fn new(name: String, version: String) -> Self {
        McpServerBuilder {
            name,
            version,
            title: None,
            instructions: None,
            tools: ToolSet::new(),
            state: http::Extensions::new(),
            page_size: 100,
            list_ttl: Duration::from_secs(300),
            cache_scope: CacheScope::Public,
            cursor_key: None,
            body_limit: DEFAULT_BODY_LIMIT,
            hosts: HostPolicy::loopback(),
            endpoint_path: "/mcp".into(),
        }
    }

    /// Display title of the server.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Guidance for the model returned by `server/discover` (do not repeat tool descriptions).
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Adds the tools of `tools`, after any added before.
    pub fn tools(mut self, tools: ToolSet) -> Self {
        self.tools = std::mem::take(&mut self.tools).merge(tools);
        self
    }

    /// Registers shared application state, read by tools with
    /// [`Context::state`](crate::Context::state). One value per type.
    pub fn state<T: Clone + Send + Sync + 'static>(mut self, state: T) -> Self {
        self.state.insert(state);
        self
    }

    /// Items per page of `tools/list` (default 100).
    pub fn page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size;
        self
    }

    /// `ttlMs` advertised on `server/discover` and list results (default 5 minutes).
    pub fn list_ttl(mut self, ttl: Duration) -> Self {
        self.list_ttl = ttl;
        self
    }

    /// `cacheScope` advertised on `server/discover` and list results (default public).
    pub fn cache_scope(mut self, scope: CacheScope) -> Self {
        self.cache_scope = scope;
        self
    }

    /// The HMAC-SHA256 key that signs pagination cursors.
    ///
    /// Every replica behind one load balancer must use the same key, so a listing started on one
    /// continues on another. Without a key each process draws a random one at start-up, which
    /// suits a single process only.
    pub fn cursor_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.cursor_key = Some(key.into());
        self
    }

    /// Largest accepted request body in bytes (default 4 MiB); larger bodies get HTTP 413.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Host names accepted in `Host` and `Origin`, against DNS rebinding. Replaces the default,
    /// which accepts only `localhost`, `127.0.0.1` and `[::1]` (any port).
    pub fn allowed_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hosts = HostPolicy::only(hosts);
        self
    }

    /// Accepts any `Host` and `Origin`: only for servers behind a proxy that checks them.
    pub fn allow_any_host(mut self) -> Self {
        self.hosts = HostPolicy::any();
        self
    }

    /// Path of the MCP endpoint in [`McpServer::router`] (default `/mcp`).
    pub fn endpoint_path(mut self, path: impl Into<String>) -> Self {
        self.endpoint_path = path.into();
        self
    }

    /// Checks the configuration and every tool, and computes the answers that never change.
    pub fn build(self) -> Result<McpServer, BuildError> {
        if self.page_size == 0 {
            return Err(BuildError::InvalidSetting("page_size must be at least 1"));
        }
        if !self.endpoint_path.starts_with('/') {
            return Err(BuildError::InvalidSetting(
                "endpoint_path must start with '/'",
            ));
        }
        let cursor_key = match self.cursor_key {
            Some(key) if key.is_empty() => {
                return Err(BuildError::InvalidSetting("cursor_key must not be empty"));
            }
            Some(key) => key,
            None => {
                let mut key = vec![0; 32];
                getrandom::fill(&mut key).map_err(|_| {
                    BuildError::InvalidSetting(
                        "no system randomness for the cursor key; set cursor_key",
                    )
                })?;
                key
            }
        };
        let catalog = self.tools.compile()?;
        let mut server_info = json!({ "name": self.name, "version": self.version });
        if let Some(title) = &self.title {
            server_info["title"] = json!(title);
        }
        let result_meta = json!({ meta_keys::SERVER_INFO: server_info });
        let ttl_ms = u64::try_from(self.list_ttl.as_millis()).unwrap_or(u64::MAX);
        let mut capabilities = serde_json::Map::new();
        if !catalog.tools.is_empty() {
            capabilities.insert("tools".into(), json!({ "listChanged": false }));
        }
        let mut discover = json!({
            "resultType": "complete",
            "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": capabilities,
            "ttlMs": ttl_ms,
            "cacheScope": self.cache_scope,
            "_meta": result_meta,
        });
        if let Some(instructions) = &self.instructions {
            discover["instructions"] = json!(instructions);
        }
        let cursors = CursorCodec::new(&cursor_key);
        let tool_pages = paginate(
            &catalog,
            self.page_size,
            &cursors,
            ttl_ms,
            self.cache_scope,
            &result_meta,
        );
        let fingerprint = tool_pages.fingerprint;
        Ok(McpServer {
            shared: Arc::new(Shared {
                endpoint_path: self.endpoint_path,
                body_limit: self.body_limit,
                hosts: self.hosts,
                state: SharedState::new(self.state),
                server_meta: serde_json::value::to_raw_value(&result_meta).expect("maps serialize"),
                discover: Bytes::from(discover.to_string()),
                catalog,
                tool_pages: tool_pages.pages,
                tools_fingerprint: fingerprint,
                cursors,
            }),
        })
    }
}

struct Pages {
    pages: Vec<Bytes>,
    fingerprint: u64,
}

/// Serializes every page of `tools/list` once, cursors included.
fn paginate(
    catalog: &Catalog,
    page_size: usize,
    cursors: &CursorCodec,
    ttl_ms: u64,
    scope: CacheScope,
    result_meta: &Value,
) -> Pages {
    let definitions: Vec<Value> = catalog
        .tools
        .iter()
        .map(|tool| serde_json::to_value(&tool.definition).expect("definitions serialize"))
        .collect();
    let fingerprint = fingerprint_of(&Value::Array(definitions.clone()), page_size);
    let chunks: Vec<&[Value]> = if definitions.is_empty() {
        vec![&[]]
    } else {
        definitions.chunks(page_size).collect()
    };
    let count = chunks.len();
    let pages = chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| {
            let mut page = json!({
                "resultType": "complete",
                "tools": chunk,
                "ttlMs": ttl_ms,
                "cacheScope": scope,
                "_meta": result_meta,
            });
            if i + 1 < count {
                let position = u32::try_from(i + 1).expect("fewer than 2^32 pages");
                page["nextCursor"] = json!(cursors.encode("tools/list", position, fingerprint));
            }
            Bytes::from(page.to_string())
        })
        .collect();
    Pages { pages, fingerprint }
}

/// Identifies one listing (its content and page size), so a cursor from another cannot page it.
fn fingerprint_of(listing: &Value, page_size: usize) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(listing.to_string().as_bytes())
        .chain_update(page_size.to_be_bytes())
        .finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// A built MCP server. Cheap to clone: clones share everything.
///
/// Mount it with [`router`](McpServer::router) or run it with [`serve`](McpServer::serve).
#[derive(Clone)]
pub struct McpServer {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) endpoint_path: String,
    pub(crate) body_limit: usize,
    pub(crate) hosts: HostPolicy,
    pub(crate) state: SharedState,
    /// `{"io.modelcontextprotocol/serverInfo": {...}}`, serialized once.
    pub(crate) server_meta: Box<serde_json::value::RawValue>,
    pub(crate) discover: Bytes,
    pub(crate) catalog: Catalog,
    pub(crate) tool_pages: Vec<Bytes>,
    pub(crate) tools_fingerprint: u64,
    pub(crate) cursors: CursorCodec,
}

impl McpServer {
    /// Starts building a server that reports `name` and `version` as its implementation.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> McpServerBuilder {
        McpServerBuilder::new(name.into(), version.into())
    }
}
