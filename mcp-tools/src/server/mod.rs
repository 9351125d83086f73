//! The server: configuration, the compiled catalog, and the answers computed once at start-up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::body::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::transport::http::auth::{Authenticate, Unauthorized};
use crate::completion::Completions;
use crate::context::SharedState;
use crate::protocol::seal::CursorCodec;
use crate::transport::http::host::HostPolicy;
use crate::prompts::{Prompt, PromptSet};
use crate::protocol::{SUPPORTED_VERSIONS, meta_keys};
use crate::resources::{Resource, ResourceSet};
use crate::tools::Tool;
use crate::tools::set::{Catalog, ToolSet};

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
    catalog: Offer,
    state: http::Extensions,
    settings: ListSettings,
    cursor_key: Option<Vec<u8>>,
    body_limit: usize,
    hosts: HostPolicy,
    endpoint_path: String,
    logging: bool,
    authenticate: Option<Authenticate>,
    legacy_era: bool,
    keep_alive: Duration,
}

/// Default body limit: 4 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// Everything the server offers: tools, resources, prompts, completions. Replaced whole when it
/// changes at run time, so a request sees one consistent version.
#[derive(Clone, Default)]
pub(crate) struct Offer {
    pub(crate) tools: ToolSet,
    pub(crate) resources: ResourceSet,
    pub(crate) prompts: PromptSet,
    pub(crate) completions: Completions,
}

#[derive(Clone, Copy)]
pub(crate) struct ListSettings {
    page_size: usize,
    ttl_ms: u64,
    scope: CacheScope,
}

impl McpServerBuilder {
    fn new(name: String, version: String) -> Self {
        McpServerBuilder {
            name,
            version,
            title: None,
            instructions: None,
            catalog: Offer::default(),
            state: http::Extensions::new(),
            settings: ListSettings {
                page_size: 100,
                ttl_ms: 300_000,
                scope: CacheScope::Public,
            },
            cursor_key: None,
            body_limit: DEFAULT_BODY_LIMIT,
            hosts: HostPolicy::loopback(),
            endpoint_path: "/mcp".into(),
            logging: false,
            authenticate: None,
            legacy_era: true,
            keep_alive: crate::transport::http::sse::DEFAULT_KEEP_ALIVE,
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
        self.catalog.tools = std::mem::take(&mut self.catalog.tools).merge(tools);
        self
    }

    /// Offers these resources and resource templates.
    pub fn resources(mut self, resources: ResourceSet) -> Self {
        self.catalog.resources = resources;
        self
    }

    /// Offers these prompts.
    pub fn prompts(mut self, prompts: PromptSet) -> Self {
        self.catalog.prompts = prompts;
        self
    }

    /// Offers argument completion.
    pub fn completions(mut self, completions: Completions) -> Self {
        self.catalog.completions = completions;
        self
    }

    /// Advertises the (deprecated) logging capability: requests that set `logLevel` receive the
    /// messages tools send with [`Context::log`](crate::Context::log).
    pub fn logging(mut self) -> Self {
        self.logging = true;
        self
    }

    /// Registers shared application state, read by tools with
    /// [`Context::state`](crate::Context::state). One value per type.
    pub fn state<T: Clone + Send + Sync + 'static>(mut self, state: T) -> Self {
        self.state.insert(state);
        self
    }

    /// Items per page of list results (default 100).
    pub fn page_size(mut self, page_size: usize) -> Self {
        self.settings.page_size = page_size;
        self
    }

    /// `ttlMs` advertised on `server/discover`, list and read results (default 5 minutes).
    pub fn list_ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// `cacheScope` advertised on `server/discover`, list and read results (default public).
    pub fn cache_scope(mut self, scope: CacheScope) -> Self {
        self.settings.scope = scope;
        self
    }

    /// The HMAC-SHA256 key that signs pagination cursors and multi-round request state.
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

    /// Authenticates every HTTP request: `check` maps its headers to the calling
    /// [`Principal`](crate::Principal) or refuses it. Handles and operation ids are bound to the
    /// principal, so one caller never sees another's state.
    pub fn authenticate<F>(mut self, check: F) -> Self
    where
        F: Fn(&http::HeaderMap) -> Result<crate::Principal, Unauthorized> + Send + Sync + 'static,
    {
        self.authenticate = Some(Arc::new(check));
        self
    }

    /// Whether clients of revision 2025-11-25 (and 2025-06-18, 2025-03-26), which begin with
    /// `initialize`, are served on the same endpoint, statelessly: no session id is minted and
    /// `GET`/`DELETE` stay 405. On by default.
    pub fn legacy_era(mut self, enabled: bool) -> Self {
        self.legacy_era = enabled;
        self
    }

    /// How often a quiet event stream (a subscription, a long call) gets a comment line so that
    /// proxies keep it open (default 15 s).
    pub fn keep_alive(mut self, interval: Duration) -> Self {
        self.keep_alive = interval;
        self
    }

    /// Path of the MCP endpoint in [`McpServer::router`] (default `/mcp`).
    pub fn endpoint_path(mut self, path: impl Into<String>) -> Self {
        self.endpoint_path = path.into();
        self
    }

    /// Checks the configuration and every tool, and computes the answers that never change.
    pub fn build(self) -> Result<McpServer, BuildError> {
        if self.settings.page_size == 0 {
            return Err(BuildError::InvalidSetting("page_size must be at least 1"));
        }
        if !self.endpoint_path.starts_with('/') {
            return Err(BuildError::InvalidSetting(
                "endpoint_path must start with '/'",
            ));
        }
        let key = match self.cursor_key {
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
        let mut server_info = json!({ "name": self.name, "version": self.version });
        if let Some(title) = &self.title {
            server_info["title"] = json!(title);
        }
        let result_meta = json!({ meta_keys::SERVER_INFO: server_info });
        let mut supported_versions = SUPPORTED_VERSIONS.to_vec();
        if self.legacy_era {
            supported_versions.extend_from_slice(crate::protocol::era::LEGACY_VERSIONS);
        }
        let base = Base {
            supported_versions,
            result_meta,
            instructions: self.instructions,
            settings: self.settings,
            cursors: CursorCodec::new(&key),
            logging: self.logging,
        };
        let snapshot = base.snapshot(self.catalog)?;
        let (changes, _) = broadcast::channel(64);
        let (shutdown, _) = watch::channel(false);
        Ok(McpServer {
            shared: Arc::new(Shared {
                endpoint_path: self.endpoint_path,
                body_limit: self.body_limit,
                hosts: self.hosts,
                authenticate: self.authenticate,
                legacy_era: self.legacy_era,
                keep_alive: self.keep_alive,
                state: SharedState::new(self.state),
                server_meta: serde_json::value::to_raw_value(&base.result_meta)
                    .expect("maps serialize"),
                state_key: key,
                base,
                snapshot: ArcSwap::from_pointee(snapshot),
                edit: Mutex::new(()),
                changes,
                shutdown,
            }),
        })
    }
}

/// What does not change when the offer changes.
pub(crate) struct Base {
    /// Every version served: the current one, then the legacy ones when that era is on.
    pub(crate) supported_versions: Vec<&'static str>,
    /// `{"io.modelcontextprotocol/serverInfo": {...}}`.
    pub(crate) result_meta: Value,
    pub(crate) instructions: Option<String>,
    settings: ListSettings,
    pub(crate) cursors: CursorCodec,
    logging: bool,
}

/// One listing, serialized page by page, cursors included.
pub(crate) struct Listing {
    pub(crate) kind: &'static str,
    pub(crate) pages: Vec<Bytes>,
    pub(crate) fingerprint: u64,
}

impl Base {
    fn snapshot(&self, offer: Offer) -> Result<Snapshot, BuildError> {
        let catalog = offer.tools.compile()?;
        let definitions = catalog
            .tools
            .iter()
            .map(|tool| serde_json::to_value(&tool.definition).expect("definitions serialize"))
            .collect();
        let tools = self.listing("tools/list", "tools", definitions);
        let resources = self.listing(
            "resources/list",
            "resources",
            offer
                .resources
                .resources
                .iter()
                .map(|r| Value::Object(r.descriptor.clone()))
                .collect(),
        );
        let templates = self.listing(
            "resources/templates/list",
            "resourceTemplates",
            offer
                .resources
                .templates
                .iter()
                .map(|t| Value::Object(t.descriptor.clone()))
                .collect(),
        );
        let prompts = self.listing(
            "prompts/list",
            "prompts",
            offer
                .prompts
                .prompts
                .iter()
                .map(|p| Value::Object(p.descriptor.clone()))
                .collect(),
        );
        let mut capabilities = serde_json::Map::new();
        if !catalog.tools.is_empty() {
            capabilities.insert("tools".into(), json!({ "listChanged": true }));
        }
        if !offer.resources.is_empty() {
            capabilities.insert(
                "resources".into(),
                json!({ "subscribe": true, "listChanged": true }),
            );
        }
        if !offer.prompts.is_empty() {
            capabilities.insert("prompts".into(), json!({ "listChanged": true }));
        }
        if !offer.completions.is_empty() {
            capabilities.insert("completions".into(), json!({}));
        }
        if self.logging {
            capabilities.insert("logging".into(), json!({}));
        }
        let mut discover = json!({
            "resultType": "complete",
            "supportedVersions": self.supported_versions,
            "capabilities": capabilities,
            "ttlMs": self.settings.ttl_ms,
            "cacheScope": self.settings.scope,
            "_meta": self.result_meta,
        });
        if let Some(instructions) = &self.instructions {
            discover["instructions"] = json!(instructions);
        }
        Ok(Snapshot {
            discover: Bytes::from(discover.to_string()),
            capabilities: Value::Object(capabilities),
            catalog,
            tools,
            resources,
            templates,
            prompts,
            offer,
        })
    }

    /// Serializes every page of a listing once.
    fn listing(&self, kind: &'static str, member: &str, items: Vec<Value>) -> Listing {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new()
            .chain_update(Value::Array(items.clone()).to_string().as_bytes())
            .chain_update(self.settings.page_size.to_be_bytes())
            .finalize();
        let fingerprint = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        let chunks: Vec<&[Value]> = if items.is_empty() {
            vec![&[]]
        } else {
            items.chunks(self.settings.page_size).collect()
        };
        let count = chunks.len();
        let pages = chunks
            .into_iter()
            .enumerate()
            .map(|(i, chunk)| {
                let mut page = json!({
                    "resultType": "complete",
                    member: chunk,
                    "ttlMs": self.settings.ttl_ms,
                    "cacheScope": self.settings.scope,
                    "_meta": self.result_meta,
                });
                if i + 1 < count {
                    let position = u32::try_from(i + 1).expect("fewer than 2^32 pages");
                    page["nextCursor"] = json!(self.cursors.encode(kind, position, fingerprint));
                }
                Bytes::from(page.to_string())
            })
            .collect();
        Listing {
            kind,
            pages,
            fingerprint,
        }
    }

    /// `ttlMs`, `cacheScope` and `_meta` for a cacheable result built per request.
    pub(crate) fn cacheable(&self, mut result: Value) -> Value {
        result["ttlMs"] = json!(self.settings.ttl_ms);
        result["cacheScope"] = json!(self.settings.scope);
        result
    }
}

/// One consistent version of what the server offers, with its serialized listings.
pub(crate) struct Snapshot {
    pub(crate) discover: Bytes,
    pub(crate) capabilities: Value,
    pub(crate) catalog: Catalog,
    pub(crate) tools: Listing,
    pub(crate) resources: Listing,
    pub(crate) templates: Listing,
    pub(crate) prompts: Listing,
    pub(crate) offer: Offer,
}

/// Which list changed, for `subscriptions/listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Tools,
    Prompts,
    Resources,
    ResourceUpdated,
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
    pub(crate) authenticate: Option<Authenticate>,
    pub(crate) legacy_era: bool,
    pub(crate) keep_alive: Duration,
    pub(crate) state: SharedState,
    /// `{"io.modelcontextprotocol/serverInfo": {...}}`, serialized once.
    pub(crate) server_meta: Box<serde_json::value::RawValue>,
    /// Seals multi-round request state.
    pub(crate) state_key: Vec<u8>,
    pub(crate) base: Base,
    pub(crate) snapshot: ArcSwap<Snapshot>,
    /// Serializes run-time edits of the offer (reads never wait on it).
    edit: Mutex<()>,
    pub(crate) changes: broadcast::Sender<(Change, Option<String>)>,
    pub(crate) shutdown: watch::Sender<bool>,
}

impl McpServer {
    /// Starts building a server that reports `name` and `version` as its implementation.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> McpServerBuilder {
        McpServerBuilder::new(name.into(), version.into())
    }

    /// Applies `apply` to a copy of the offer; when it reports a change, publishes the new
    /// snapshot and tells listeners. An edit that changed nothing notifies nobody.
    fn edit(
        &self,
        change: Change,
        apply: impl FnOnce(&mut Offer) -> bool,
    ) -> Result<bool, BuildError> {
        let _guard = self.shared.edit.lock().unwrap_or_else(|e| e.into_inner());
        let mut offer = self.shared.snapshot.load().offer.clone();
        if !apply(&mut offer) {
            return Ok(false);
        }
        let snapshot = self.shared.base.snapshot(offer)?;
        self.shared.snapshot.store(Arc::new(snapshot));
        let _ = self.shared.changes.send((change, None));
        Ok(true)
    }

    /// Adds (or replaces) a tool while serving; open `subscriptions/listen` streams that asked
    /// for tool changes are told.
    pub fn add_tool<T: Tool>(&self, tool: T) -> Result<(), BuildError> {
        let addition = ToolSet::new().with(tool);
        self.edit(Change::Tools, move |offer| {
            for name in addition.names() {
                offer.tools.remove(&name);
            }
            offer.tools = std::mem::take(&mut offer.tools).merge(addition);
            true
        })
        .map(drop)
    }

    /// Removes a tool while serving; whether it existed.
    pub fn remove_tool(&self, name: &str) -> bool {
        self.remove(Change::Tools, |offer| offer.tools.remove(name))
    }

    /// Applies a removal; whether it removed anything.
    fn remove(&self, change: Change, removal: impl FnOnce(&mut Offer) -> bool) -> bool {
        // Removing never makes the offer invalid, so the edit cannot fail.
        self.edit(change, removal).unwrap_or(false)
    }

    /// Adds (or replaces) a prompt while serving.
    pub fn add_prompt(&self, prompt: Prompt) {
        let _ = self.edit(Change::Prompts, |offer| {
            offer.prompts = std::mem::take(&mut offer.prompts).with(prompt);
            true
        });
    }

    /// Removes a prompt while serving; whether it existed.
    pub fn remove_prompt(&self, name: &str) -> bool {
        self.remove(Change::Prompts, |offer| {
            let before = offer.prompts.prompts.len();
            offer.prompts.prompts.retain(|p| p.name != name);
            offer.prompts.prompts.len() != before
        })
    }

    /// Adds (or replaces) a resource while serving.
    pub fn add_resource(&self, resource: Resource) {
        let _ = self.edit(Change::Resources, |offer| {
            offer.resources = std::mem::take(&mut offer.resources).with(resource);
            true
        });
    }

    /// Removes a resource while serving; whether it existed.
    pub fn remove_resource(&self, uri: &str) -> bool {
        self.remove(Change::Resources, |offer| {
            let before = offer.resources.resources.len();
            offer.resources.resources.retain(|r| r.uri != uri);
            offer.resources.resources.len() != before
        })
    }

    /// Tells listeners that the tool list changed (for tools whose availability depends on
    /// something outside the server).
    pub fn notify_tools_changed(&self) {
        let _ = self.shared.changes.send((Change::Tools, None));
    }

    /// Tells listeners that the prompt list changed.
    pub fn notify_prompts_changed(&self) {
        let _ = self.shared.changes.send((Change::Prompts, None));
    }

    /// Tells listeners that the resource list changed.
    pub fn notify_resources_changed(&self) {
        let _ = self.shared.changes.send((Change::Resources, None));
    }

    /// Tells listeners subscribed to `uri` (or a parent of it) that its contents changed.
    pub fn notify_resource_updated(&self, uri: &str) {
        let _ = self
            .shared
            .changes
            .send((Change::ResourceUpdated, Some(uri.to_owned())));
    }

    /// Ends open `subscriptions/listen` streams gracefully (each gets its final result). Called
    /// by [`serve`](McpServer::serve) on shutdown.
    pub fn close_subscriptions(&self) {
        self.shared.shutdown.send_replace(true);
    }
}
