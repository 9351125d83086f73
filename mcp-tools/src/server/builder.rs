//! Building a server: its settings, checked once, and the errors that name what to fix.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use serde_json::json;
use tokio::sync::{broadcast, watch};

use super::{Base, McpServer, Offer, Shared};
use crate::auth::hook::{Authenticate, Unauthorized};
use crate::completion::Completions;
use crate::context::SharedState;
use crate::prompts::PromptSet;
use crate::protocol::SUPPORTED_VERSIONS;
use crate::protocol::result::{CacheScope, Results};
use crate::protocol::seal::Seal;
use crate::resources::ResourceSet;
use crate::server::host::HostPolicy;
use crate::server::limits::ConnectionLimits;
#[cfg(feature = "rate-limits")]
use crate::server::rate::{CallRate, RateLimits};
use crate::store::Store;
use crate::tools::set::{InvalidTool, ToolSet};

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
    /// An `x-mcp-header` in an input schema that clients would drop the tool for.
    #[error("tool {tool:?} mirrors an argument in a header that clients refuse: {reason}")]
    InvalidParamHeader {
        /// The tool.
        tool: String,
        /// What is wrong, where in the input schema, and what to use instead.
        reason: String,
    },
    /// Stateful tools, and no store to keep their state.
    #[error(
        "tools {0:?} keep state, and the server has no store: add one with `.store(..)` (for example `MemoryStore::default()` or `SqliteStore::open(..)`)"
    )]
    MissingStore(Vec<String>),
    /// A tool emits effects of a kind no handler is registered for.
    #[error(
        "tool {tool:?} emits {effect:?} effects, and the server has no handler for them: register one on its tool set with `.effect_handler(..)`"
    )]
    MissingEffectHandler {
        /// The tool.
        tool: String,
        /// The effect kind.
        effect: String,
    },
    /// Two handlers for one effect kind.
    #[error("two handlers are registered for {0:?} effects: register one per kind")]
    DuplicateEffectHandler(String),
    /// Two prompts share a name.
    #[error("two prompts are named {0:?}: prompt names must be unique")]
    DuplicatePrompt(String),
    /// Two resources share a URI, or two templates a URI template.
    #[error("two resources have the URI {0:?}: resource URIs must be unique")]
    DuplicateResource(String),
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    InvalidSetting(&'static str),
    /// A required scope is not an RFC 6749 scope token.
    #[error(
        "{owner} requires the scope {scope:?}, which is not a scope token: use printable ASCII without spaces, quotes or backslashes"
    )]
    InvalidScope {
        /// What requires it: `tool "name"`, `resource "uri"`, `prompt "name"` or `the server`.
        owner: String,
        /// The scope as written.
        scope: String,
    },
    /// The OAuth resource server settings are incomplete or contradictory.
    #[error("invalid OAuth settings: {0}")]
    InvalidOAuth(String),
    /// A signing key shorter than [`MIN_SIGNING_KEY_BYTES`]: what it signs could be forged
    /// offline by trying keys.
    #[error(
        "the signing key is {0} bytes long: use at least 32 bytes from a good random source (for example `head -c 32 /dev/urandom`)"
    )]
    WeakSigningKey(usize),
    /// The store is shared by processes or outlives one, and no signing key was given: each
    /// process would draw its own, and refuse what the others (or it before a restart) issued.
    #[error(
        "the store is shared by processes or outlives one: give every process the same signing key with `.signing_key(..)` (32 bytes or more), or accept a per-process key with `.per_process_signing_key()`"
    )]
    SigningKeyRequired,
}

/// The shortest signing key accepted: 32 bytes, the output size of the HMAC's hash.
pub const MIN_SIGNING_KEY_BYTES: usize = 32;

impl From<InvalidTool> for BuildError {
    fn from(invalid: InvalidTool) -> Self {
        match invalid {
            InvalidTool::Name(name) => BuildError::InvalidToolName(name),
            InvalidTool::Duplicate(name) => BuildError::DuplicateTool(name),
            InvalidTool::MissingDescription(name) => BuildError::MissingDescription(name),
            InvalidTool::InputSchemaNotObject(name) => BuildError::InputSchemaNotObject(name),
            InvalidTool::Schema { tool, reason } => BuildError::InvalidSchema { tool, reason },
            InvalidTool::ParamHeader { tool, reason } => {
                BuildError::InvalidParamHeader { tool, reason }
            }
            InvalidTool::Scope { tool, scope } => BuildError::InvalidScope {
                owner: format!("tool {tool:?}"),
                scope,
            },
        }
    }
}

impl From<crate::auth::ConfigError> for BuildError {
    fn from(error: crate::auth::ConfigError) -> Self {
        match error {
            crate::auth::ConfigError::Invalid(reason) => BuildError::InvalidOAuth(reason),
            crate::auth::ConfigError::InvalidScope { owner, scope } => {
                BuildError::InvalidScope { owner, scope }
            }
        }
    }
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
    pub(crate) settings: ListSettings,
    signing_key: Option<Vec<u8>>,
    per_process_key: bool,
    max_in_flight: usize,
    max_buffered_body_bytes: usize,
    accepted_keys: Vec<(Vec<u8>, SystemTime)>,
    body_limit: usize,
    hosts: HostPolicy,
    endpoint_path: String,
    pub(crate) logging: bool,
    authenticate: Option<Authenticate>,
    oauth: Option<crate::auth::OAuth>,
    legacy_era: bool,
    keep_alive: Duration,
    connections: ConnectionLimits,
    max_listens: usize,
    #[cfg(feature = "rate-limits")]
    rate_limit: Option<CallRate>,
    #[cfg(feature = "rate-limits")]
    tool_rate_limits: Vec<(String, CallRate)>,
    /// The store of the stateful tools and of the tasks' records, when one is registered.
    store: Option<Arc<dyn Store>>,
    task_options: crate::tasks::TaskOptions,
    delivery_policy: crate::effects::DeliveryPolicy,
}

/// How many `subscriptions/listen` streams one principal may hold open by default.
pub const DEFAULT_MAX_LISTENS_PER_PRINCIPAL: usize = 16;

/// How often an idle event stream gets a comment line by default, so proxies keep it open.
const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Default body limit: 4 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 4 * 1024 * 1024;

#[derive(Clone, Copy)]
pub(crate) struct ListSettings {
    pub(crate) page_size: usize,
    pub(crate) ttl_ms: u64,
    pub(crate) scope: CacheScope,
}

impl McpServerBuilder {
    pub(super) fn new(name: String, version: String) -> Self {
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
            signing_key: None,
            per_process_key: false,
            max_in_flight: crate::server::DEFAULT_MAX_IN_FLIGHT_PER_PRINCIPAL,
            max_buffered_body_bytes: crate::server::DEFAULT_MAX_BUFFERED_BODY_BYTES,
            accepted_keys: Vec::new(),
            body_limit: DEFAULT_BODY_LIMIT,
            hosts: HostPolicy::loopback(),
            endpoint_path: "/mcp".into(),
            logging: false,
            authenticate: None,
            oauth: None,
            legacy_era: true,
            keep_alive: DEFAULT_KEEP_ALIVE,
            delivery_policy: crate::effects::DeliveryPolicy::default(),
            connections: ConnectionLimits::default(),
            max_listens: DEFAULT_MAX_LISTENS_PER_PRINCIPAL,
            #[cfg(feature = "rate-limits")]
            rate_limit: None,
            #[cfg(feature = "rate-limits")]
            tool_rate_limits: Vec::new(),
            store: None,
            task_options: crate::tasks::TaskOptions::default(),
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
        self.catalog.resources = std::mem::take(&mut self.catalog.resources).merge(resources);
        self
    }

    /// Offers these prompts.
    pub fn prompts(mut self, prompts: PromptSet) -> Self {
        self.catalog.prompts = std::mem::take(&mut self.catalog.prompts).merge(prompts);
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

    /// The store that keeps the state of the stateful tools (`#[tool(creates | reads | mutates =
    /// ..)]`): [`MemoryStore`](crate::MemoryStore), [`SqliteStore`](crate::SqliteStore) or
    /// any [`Store`]. A server with stateful tools and no store fails to build. The same store
    /// keeps the records of tasks ([`tasks`](crate::tasks)), so every replica sharing it
    /// answers for them.
    pub fn store<S: Store>(mut self, store: S) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// How tasks run: their time to live, poll interval, lease and limits (see
    /// [`TaskOptions`](crate::tasks::TaskOptions)).
    pub fn task_options(mut self, options: crate::tasks::TaskOptions) -> Self {
        self.task_options = options;
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

    /// The HMAC-SHA256 key that signs what clients carry between requests: pagination cursors,
    /// multi-round request state, the validators and confirmations of stateful tools, and task
    /// ids. At least [`MIN_SIGNING_KEY_BYTES`] (32) bytes, from a good random source.
    ///
    /// Every replica behind one load balancer must use the same key, so a listing started on one
    /// continues on another and a validator one issued is accepted by the next; and a durable
    /// store needs the same key after a restart, or the validators and task ids issued before it
    /// no longer open. So a server whose store is shared by processes or outlives one
    /// ([`Store::shared_by_processes`], true of [`SqliteStore`](crate::SqliteStore) and
    /// `PostgresStore`) does not build without one, unless told
    /// [`per_process_signing_key`](Self::per_process_signing_key).
    pub fn signing_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.signing_key = Some(key.into());
        self
    }

    /// Draws a random signing key at start-up even though the store is shared or durable: for a
    /// single process that may refuse what it issued before a restart (validators answer
    /// `INVALID_VALIDATOR`: read again), in tests and development.
    pub fn per_process_signing_key(mut self) -> Self {
        self.per_process_key = true;
        self
    }

    /// Also accepts, until `until`, what `key` signed (cursors, request states, validators,
    /// confirmations), while [`signing_key`](Self::signing_key) signs everything new. Rolling the
    /// key across replicas takes two deploys: first every replica accepts the new key while still
    /// signing with the old one; then every replica signs with the new key and accepts the old
    /// one for as long as values it signed may come back (a request state lives 15 minutes;
    /// cursors and validators as long as clients keep them). Several keys may be accepted.
    pub fn accept_signing_key(mut self, key: impl Into<Vec<u8>>, until: SystemTime) -> Self {
        self.accepted_keys.push((key.into(), until));
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

    /// Makes the server an OAuth 2.1 resource server: every HTTP request must carry a bearer
    /// token that the configured verifier accepts and whose audience names the server's
    /// canonical URI, or it is refused with HTTP 401 and a `WWW-Authenticate` challenge; a
    /// request for a tool, resource or prompt whose scopes the token does not grant is refused
    /// with HTTP 403 `insufficient_scope`, before the body is read when the routing headers name
    /// it. The caller's [`Principal`](crate::auth::Principal) is the token's issuer and subject. The
    /// RFC 9728 metadata is served by [`McpServer::router`] at
    /// `/.well-known/oauth-protected-resource` followed by the resource's path, and at the
    /// root form.
    ///
    /// With [`authenticate`](Self::authenticate) also set, the token is checked first and
    /// decides the principal and scopes; the `authenticate` check then runs on the same headers
    /// as a further gate: its refusal is answered as it is, and the principal it returns is
    /// not used.
    pub fn oauth(mut self, oauth: crate::auth::OAuth) -> Self {
        self.oauth = Some(oauth);
        self
    }

    /// Authenticates every HTTP request: `check` maps its headers to the calling
    /// [`Principal`](crate::auth::Principal) or refuses it. Handles and operation ids are bound to the
    /// principal, so one caller never sees another's state.
    pub fn authenticate<F>(mut self, check: F) -> Self
    where
        F: Fn(&http::HeaderMap) -> Result<crate::auth::Principal, Unauthorized>
            + Send
            + Sync
            + 'static,
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

    /// How long [`McpServer::serve`] waits for a request's headers before closing the connection
    /// (default 10 s, [`DEFAULT_HEADER_READ_TIMEOUT`](crate::server::DEFAULT_HEADER_READ_TIMEOUT)); a
    /// kept-alive connection idle that long between requests is closed too. With
    /// [`body_read_timeout`](Self::body_read_timeout) and
    /// [`write_timeout`](Self::write_timeout), a client that opens connections and then stalls,
    /// sending or reading, costs a socket for a bounded time, not forever. Streams being answered
    /// (subscriptions, long calls) are not affected while the client reads them.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.connections.header_read_timeout = timeout;
        self
    }

    /// How long a request's body may take to arrive once its headers have (default 30 s,
    /// [`DEFAULT_BODY_READ_TIMEOUT`](crate::server::DEFAULT_BODY_READ_TIMEOUT)); a late one is
    /// answered HTTP 408 and its connection closed.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.connections.body_read_timeout = timeout;
        self
    }

    /// How long a write to a client may make no progress before [`McpServer::serve`] closes the
    /// connection (default 30 s, [`DEFAULT_WRITE_TIMEOUT`](crate::server::DEFAULT_WRITE_TIMEOUT)):
    /// a client that stops reading its answer, or a stream it asked for, frees its connection.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.connections.write_timeout = timeout;
        self
    }

    /// How many requests one authenticated principal may have in flight at once, answers being
    /// written included (default 64,
    /// [`DEFAULT_MAX_IN_FLIGHT_PER_PRINCIPAL`](crate::server::DEFAULT_MAX_IN_FLIGHT_PER_PRINCIPAL)):
    /// one more is refused with HTTP 429 and `-32000`, so that one token holder cannot take
    /// every connection. Anonymous callers are one principal together and are not counted: the
    /// connection cap and the read and write deadlines bound them.
    ///
    /// Over stdio, with its one client, this many requests run at once (listens aside), and
    /// the server reads no further input until one is answered: a client that pipes requests
    /// faster than they are answered waits in its pipe, not in the server's memory.
    pub fn max_in_flight_per_principal(mut self, requests: usize) -> Self {
        self.max_in_flight = requests;
        self
    }

    /// How many bytes of request bodies the server buffers at once, over all requests (default
    /// 256 MiB, [`DEFAULT_MAX_BUFFERED_BODY_BYTES`](crate::server::DEFAULT_MAX_BUFFERED_BODY_BYTES)):
    /// past it a request is answered HTTP 503 with `Retry-After`, rather than the process
    /// running out of memory under many large uploads.
    pub fn max_buffered_body_bytes(mut self, bytes: usize) -> Self {
        self.max_buffered_body_bytes = bytes;
        self
    }

    /// The most connections [`McpServer::serve`] serves at once (default 1024,
    /// [`DEFAULT_MAX_CONNECTIONS`](crate::server::DEFAULT_MAX_CONNECTIONS)); further ones wait in the
    /// operating system's listen backlog until one closes. Keep it under the process's limit
    /// on open files.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.connections.max_connections = connections;
        self
    }

    /// How long a shutdown of [`McpServer::serve`] waits for in-flight requests (default 20 s,
    /// [`DEFAULT_DRAIN_TIMEOUT`](crate::server::DEFAULT_DRAIN_TIMEOUT)) before it closes their
    /// connections and returns, so that a request that never ends cannot keep the process
    /// alive. Zero closes them at once; [`Duration::MAX`] waits for them however long they take.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.connections.drain_timeout = timeout;
        self
    }

    /// How many `subscriptions/listen` streams one principal may hold open at once (default 16,
    /// [`DEFAULT_MAX_LISTENS_PER_PRINCIPAL`]); one more is refused with HTTP 429 and `-32000`.
    /// Without authentication every caller is the one anonymous principal, so this bounds the
    /// streams of all of them together.
    pub fn max_listens_per_principal(mut self, streams: usize) -> Self {
        self.max_listens = streams;
        self
    }

    /// At most `calls` tool calls per `period` for each principal, all tools together: `calls`
    /// at once, then one more every `period / calls`. `tasks/get`, `tasks/update`,
    /// `tasks/cancel` and `subscriptions/listen` count as calls too, since each reads the
    /// store. A call over the rate is refused before it runs with HTTP 429, `-32000` and
    /// `Retry-After`. Without authentication every caller is the
    /// one anonymous principal, so the rate is that of all of them together. Off by default;
    /// needs the `rate-limits` feature.
    #[cfg(feature = "rate-limits")]
    pub fn rate_limit(mut self, calls: u32, period: Duration) -> Self {
        self.rate_limit = Some(CallRate { calls, period });
        self
    }

    /// At most `calls` calls of the tool `tool` per `period` for each principal, on top of
    /// [`rate_limit`](Self::rate_limit): for the tools that cost the most.
    #[cfg(feature = "rate-limits")]
    pub fn tool_rate_limit(
        mut self,
        tool: impl Into<String>,
        calls: u32,
        period: Duration,
    ) -> Self {
        self.tool_rate_limits
            .push((tool.into(), CallRate { calls, period }));
        self
    }

    /// How effects are delivered: attempts, delays between them, timeouts, leases (see
    /// [`DeliveryPolicy`](crate::effects::DeliveryPolicy)).
    pub fn delivery_policy(mut self, policy: crate::effects::DeliveryPolicy) -> Self {
        self.delivery_policy = policy;
        self
    }

    /// Path of the MCP endpoint in [`McpServer::router`] (default `/mcp`).
    pub fn endpoint_path(mut self, path: impl Into<String>) -> Self {
        self.endpoint_path = path.into();
        self
    }

    /// Checks the configuration and every tool, and computes the answers that never change.
    pub fn build(self) -> Result<McpServer, BuildError> {
        let stateful = self.catalog.tools.stateful();
        if !stateful.is_empty() && self.store.is_none() {
            return Err(BuildError::MissingStore(stateful));
        }
        if self.settings.page_size == 0 {
            return Err(BuildError::InvalidSetting("page_size must be at least 1"));
        }
        if self.max_listens == 0 {
            return Err(BuildError::InvalidSetting(
                "max_listens_per_principal must be at least 1",
            ));
        }
        if self.connections.max_connections == 0 {
            return Err(BuildError::InvalidSetting(
                "max_connections must be at least 1",
            ));
        }
        if self.connections.header_read_timeout.is_zero() {
            return Err(BuildError::InvalidSetting(
                "header_read_timeout must be longer than zero",
            ));
        }
        if self.connections.body_read_timeout.is_zero() {
            return Err(BuildError::InvalidSetting(
                "body_read_timeout must be longer than zero",
            ));
        }
        if self.connections.write_timeout.is_zero() {
            return Err(BuildError::InvalidSetting(
                "write_timeout must be longer than zero",
            ));
        }
        if self.max_in_flight == 0 {
            return Err(BuildError::InvalidSetting(
                "max_in_flight_per_principal must be at least 1",
            ));
        }
        if self.max_buffered_body_bytes < self.body_limit {
            return Err(BuildError::InvalidSetting(
                "max_buffered_body_bytes must be at least the body limit",
            ));
        }
        if !self.endpoint_path.starts_with('/') {
            return Err(BuildError::InvalidSetting(
                "endpoint_path must start with '/'",
            ));
        }
        let key = match self.signing_key {
            Some(key) if key.len() < MIN_SIGNING_KEY_BYTES => {
                return Err(BuildError::WeakSigningKey(key.len()));
            }
            Some(key) => key,
            None if !self.per_process_key
                && self
                    .store
                    .as_ref()
                    .is_some_and(|store| store.shared_by_processes()) =>
            {
                return Err(BuildError::SigningKeyRequired);
            }
            None => {
                let mut key = vec![0; 32];
                getrandom::fill(&mut key).map_err(|_| {
                    BuildError::InvalidSetting(
                        "no system randomness for the signing key; set signing_key",
                    )
                })?;
                key
            }
        };
        self.task_options
            .check()
            .map_err(BuildError::InvalidSetting)?;
        let effects = effect_delivery(
            &self.catalog.tools,
            self.store.as_ref(),
            self.delivery_policy,
        )?;
        let task_store: Arc<dyn crate::tasks::TaskStore> = match &self.store {
            Some(store) => Arc::clone(store) as Arc<dyn crate::tasks::TaskStore>,
            None => Arc::new(crate::store::memory::MemoryStore::default()),
        };
        let tasks = crate::tasks::runtime::Tasks::new(task_store, self.task_options);
        #[cfg(feature = "rate-limits")]
        let limits = RateLimits::new(self.rate_limit, self.tool_rate_limits)
            .map_err(BuildError::InvalidSetting)?;
        let mut accepted = Vec::new();
        for (key, until) in self.accepted_keys {
            if key.len() < MIN_SIGNING_KEY_BYTES {
                return Err(BuildError::WeakSigningKey(key.len()));
            }
            let until = until
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs());
            accepted.push((key, until));
        }
        let oauth = match self.oauth {
            Some(oauth) => Some(Arc::new(oauth.compile(self.catalog.declared_scopes())?)),
            None => None,
        };
        let mut settings = self.settings;
        if oauth.is_some() {
            // What a listing shows depends on the caller's token.
            settings.scope = CacheScope::Private;
        }
        let mut server_info = json!({ "name": self.name, "version": self.version });
        if let Some(title) = &self.title {
            server_info["title"] = json!(title);
        }
        let results = Results::new(server_info, settings.ttl_ms, settings.scope);
        let mut supported_versions = SUPPORTED_VERSIONS.to_vec();
        if self.legacy_era {
            supported_versions.extend_from_slice(crate::protocol::era::LEGACY_VERSIONS);
        }
        let base = Base {
            supported_versions,
            results,
            instructions: self.instructions,
            settings,
            seal: Seal::rotating(&key, accepted),
            logging: self.logging,
            filter_listings: oauth.is_some(),
            #[cfg(feature = "test-hooks")]
            snapshots_compiled: Default::default(),
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
                oauth,
                legacy_era: self.legacy_era,
                keep_alive: self.keep_alive,
                connections: self.connections,
                in_flight: crate::server::limits::InFlight::new(self.max_in_flight),
                body_budget: crate::server::limits::BodyBudget::new(self.max_buffered_body_bytes),
                max_listens: self.max_listens,
                #[cfg(feature = "rate-limits")]
                limits,
                listens: Mutex::new(Default::default()),
                store: self.store,
                effects,
                tasks,
                state: SharedState::new(self.state),
                base,
                snapshot: ArcSwap::from_pointee(snapshot),
                edit: Mutex::new(()),
                changes,
                shutdown,
            }),
        })
    }
}

/// The delivery of effects, when some handler is registered: every effect kind a tool emits
/// has one handler, and there is a store to keep the effects in.
fn effect_delivery(
    tools: &crate::tools::ToolSet,
    store: Option<&Arc<dyn Store>>,
    policy: crate::effects::DeliveryPolicy,
) -> Result<Option<Arc<crate::effects::deliver::Deliverer>>, BuildError> {
    let emitted = tools.effects();
    let handlers = tools.effect_handlers();
    let mut kinds = std::collections::HashSet::new();
    for handler in &handlers {
        if !kinds.insert(handler.kind) {
            return Err(BuildError::DuplicateEffectHandler(handler.kind.to_owned()));
        }
    }
    if let Some((tool, _, effect)) = emitted
        .iter()
        .find(|(_, _, effect)| !kinds.contains(effect))
    {
        return Err(BuildError::MissingEffectHandler {
            tool: tool.clone(),
            effect: (*effect).to_owned(),
        });
    }
    if handlers.is_empty() {
        return Ok(None);
    }
    policy.check().map_err(BuildError::InvalidSetting)?;
    let Some(store) = store else {
        return Err(BuildError::InvalidSetting(
            "effect handlers deliver what a store keeps: add one with `.store(..)`",
        ));
    };
    let reporting = emitted.iter().map(|(_, entity, _)| *entity).collect();
    Ok(Some(Arc::new(crate::effects::deliver::Deliverer::new(
        Arc::clone(store),
        handlers,
        policy,
        reporting,
    ))))
}
