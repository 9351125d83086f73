//! What a server lets a connection and a caller cost it, with the defaults
//! [`McpServerBuilder`] starts from, how long listings may be cached, and the signal a served
//! server stops on. The server itself is [`McpServer`].
//!
//! Inside, a server is a built, immutable configuration plus the current catalog snapshot, shared
//! by every request; the offer changes at run time through the methods in `edits.rs`
//! ([`McpServer::add_tool`] and its siblings), which compile a new snapshot. Where each part of
//! `McpServer`'s API is defined: building in `builder.rs`, run-time changes in `edits.rs`, the
//! published contract in `contract.rs`, serving over HTTP in `transport/http/`, over stdio in
//! `transport/stdio.rs`, the standard command line in `cli/`.

pub(crate) mod access;
mod builder;
mod catalog;
mod contract;
mod edits;
pub(crate) mod host;
pub(crate) mod limits;
#[cfg(feature = "rate-limits")]
pub(crate) mod rate;

pub use crate::protocol::result::CacheScope;
pub use builder::{
    BuildError, DEFAULT_BODY_LIMIT, DEFAULT_MAX_LISTENS_PER_PRINCIPAL, MIN_SIGNING_KEY_BYTES,
    McpServerBuilder,
};
pub(crate) use catalog::{Base, Listing, Offer, Snapshot, Visible};
pub(crate) use edits::Change;
pub use limits::{
    DEFAULT_BODY_READ_TIMEOUT, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT,
    DEFAULT_MAX_BUFFERED_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_IN_FLIGHT_PER_PRINCIPAL,
    DEFAULT_WRITE_TIMEOUT, shutdown_signal,
};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{broadcast, watch};

use crate::auth::Principal;
use crate::auth::hook::Authenticate;
use crate::context::SharedState;
use crate::server::host::HostPolicy;
use crate::sync::lock;

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
    /// The OAuth resource server, when the server is one.
    pub(crate) oauth: Option<Arc<crate::auth::oauth::ResourceServer>>,
    pub(crate) legacy_era: bool,
    pub(crate) keep_alive: Duration,
    pub(crate) connections: limits::ConnectionLimits,
    /// The requests each authenticated principal has in flight.
    pub(crate) in_flight: Arc<limits::InFlight>,
    /// The request-body bytes buffered at once, over all requests.
    pub(crate) body_budget: Arc<limits::BodyBudget>,
    /// How many `subscriptions/listen` streams one principal may hold open at once.
    pub(crate) max_listens: usize,
    /// Rate limits on tool calls.
    #[cfg(feature = "rate-limits")]
    pub(crate) limits: rate::RateLimits,
    /// The open `subscriptions/listen` streams of each principal. Every critical section is one
    /// count change, so a poisoned lock still holds consistent counts.
    pub(crate) listens: Mutex<std::collections::HashMap<Principal, usize>>,
    /// The store of the stateful tools, when one was registered (stateful tools added later are
    /// refused without one).
    pub(crate) store: Option<Arc<dyn crate::store::Store>>,
    /// The delivery of the effects tools emit, when some handler is registered.
    pub(crate) effects: Option<Arc<crate::effects::deliver::Deliverer>>,
    /// The tasks of the Tasks extension, and where they are kept.
    pub(crate) tasks: Arc<crate::tasks::runtime::Tasks>,
    pub(crate) state: SharedState,
    pub(crate) base: Base,
    pub(crate) snapshot: ArcSwap<Snapshot>,
    /// Serializes run-time edits of the offer (reads never wait on it).
    pub(crate) edit: Mutex<()>,
    pub(crate) changes: broadcast::Sender<(Change, Option<String>)>,
    pub(crate) shutdown: watch::Sender<bool>,
}

impl McpServer {
    /// How many catalog snapshots (tool definitions, validators, listing pages) the server has
    /// compiled: one when built, one more per run-time change of the offer.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn catalog_compilations_for_tests(&self) -> usize {
        self.shared
            .base
            .snapshots_compiled
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts building a server that reports `name` and `version` as its implementation.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> McpServerBuilder {
        McpServerBuilder::new(name.into(), version.into())
    }
}

/// One open `subscriptions/listen` stream of a principal; closing it (dropping this) frees the
/// principal's slot.
pub(crate) struct ListenSlot {
    shared: Arc<Shared>,
    principal: Principal,
}

impl McpServer {
    /// A listen slot for `principal`, or the error that refuses the stream.
    pub(crate) fn listen_slot(
        &self,
        principal: &Principal,
    ) -> Result<ListenSlot, crate::protocol::error::RpcError> {
        let mut listens = lock(&self.shared.listens);
        let open = listens.entry(principal.clone()).or_insert(0);
        if *open >= self.shared.max_listens {
            return Err(crate::protocol::error::RpcError::too_many_subscriptions(
                self.shared.max_listens,
            ));
        }
        *open += 1;
        Ok(ListenSlot {
            shared: Arc::clone(&self.shared),
            principal: principal.clone(),
        })
    }
}

impl Drop for ListenSlot {
    fn drop(&mut self) {
        let mut listens = lock(&self.shared.listens);
        if let Some(open) = listens.get_mut(&self.principal) {
            *open -= 1;
            if *open == 0 {
                listens.remove(&self.principal);
            }
        }
    }
}

impl McpServer {
    /// Starts delivering effects on the current tokio runtime, if the server has handlers and
    /// delivery has not started yet. Serving starts it, and so does the first request: a
    /// replica that restarts delivers what the one before left pending.
    pub(crate) fn start_effect_delivery(&self) {
        if let Some(effects) = &self.shared.effects {
            effects.start();
        }
    }
}

impl crate::context::Context {
    /// The store of the serving server, if it has one.
    pub(crate) fn store(&self) -> Option<&dyn crate::store::Store> {
        self.server_handle()
            .downcast_ref::<Shared>()
            .and_then(|shared| shared.store.as_deref())
    }

    /// Whether reads of entity `kind` report the effects its changes emitted: some tool of the
    /// serving server emits effects for it.
    pub(crate) fn reports_effects(&self, kind: &str) -> bool {
        self.server_handle()
            .downcast_ref::<Shared>()
            .and_then(|shared| shared.effects.as_deref())
            .is_some_and(|effects| effects.reports(kind))
    }

    /// The seal of the serving server, for values handed out to clients.
    pub(crate) fn seal(&self) -> Option<&crate::protocol::seal::Seal> {
        self.server_handle()
            .downcast_ref::<Shared>()
            .map(|shared| &shared.base.seal)
    }

    /// The server serving this request: tools may change what it offers (add or remove tools,
    /// prompts, resources) or announce changes to listeners.
    pub fn server(&self) -> McpServer {
        let shared = Arc::clone(self.server_handle())
            .downcast::<Shared>()
            .expect("a context is made by its server");
        McpServer { shared }
    }
}
