//! The store a server's stateful tools work with, registered through
//! [`McpServerBuilder::state`](crate::McpServerBuilder::state).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::contract::Store;

/// The state store of a server: a cheap, clonable handle to one [`Store`].
///
/// Every `#[tool(creates = R)]`, `#[tool(reads = R)]` and `#[tool(mutates = R)]` finds its store
/// here, so register exactly one with the server:
///
/// ```
/// use mcp_tools::McpServer;
/// use mcp_tools::store::{MemoryStore, SharedStore};
///
/// let server = McpServer::builder("baskets", "1.0.0")
///     .state(SharedStore::new(MemoryStore::default()))
///     .build()
///     .unwrap();
/// # drop(server);
/// ```
///
/// Without it, a stateful tool answers `isError` with the code `MISSING_STATE`.
#[derive(Clone)]
pub struct SharedStore(Arc<dyn Store>);

impl SharedStore {
    /// Wraps a store.
    pub fn new(store: impl Store) -> Self {
        SharedStore(Arc::new(store))
    }

    /// Wraps a store that is already shared.
    pub fn from_arc(store: Arc<dyn Store>) -> Self {
        SharedStore(store)
    }

    /// The shared store.
    pub fn as_arc(&self) -> &Arc<dyn Store> {
        &self.0
    }
}

impl Deref for SharedStore {
    type Target = dyn Store;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedStore")
    }
}
