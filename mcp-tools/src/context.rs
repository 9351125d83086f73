//! The per-request context handed to every tool call.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::protocol::{RequestId, RequestMeta};

/// Who is calling. Handles and operation ids are bound to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Principal {
    /// No authentication is configured: handles act as bearer capabilities.
    #[default]
    Anonymous,
    /// An authenticated subject.
    Subject(Arc<str>),
}

impl Principal {
    /// An authenticated subject.
    pub fn subject(id: impl Into<Arc<str>>) -> Self {
        Principal::Subject(id.into())
    }

    /// A stable key for storage: empty for the anonymous principal.
    pub fn key(&self) -> &str {
        match self {
            Principal::Anonymous => "",
            Principal::Subject(id) => id,
        }
    }
}

/// Shared application state registered on the server, looked up by type.
#[derive(Clone, Default)]
pub(crate) struct SharedState(Arc<http::Extensions>);

impl SharedState {
    pub(crate) fn new(extensions: http::Extensions) -> Self {
        SharedState(Arc::new(extensions))
    }
}

/// Everything a tool may know about the request it serves.
///
/// Cheap to clone. Built once per request from the request itself: nothing is carried over from
/// earlier requests.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

struct ContextInner {
    request_id: Option<RequestId>,
    method: String,
    meta: RequestMeta,
    principal: Principal,
    state: SharedState,
}

impl Context {
    pub(crate) fn new(
        request_id: Option<RequestId>,
        method: String,
        meta: RequestMeta,
        principal: Principal,
        state: SharedState,
    ) -> Self {
        Context {
            inner: Arc::new(ContextInner {
                request_id,
                method,
                meta,
                principal,
                state,
            }),
        }
    }

    /// The JSON-RPC id of the request.
    pub fn request_id(&self) -> Option<&RequestId> {
        self.inner.request_id.as_ref()
    }

    /// The JSON-RPC method being served.
    pub fn method(&self) -> &str {
        &self.inner.method
    }

    /// The protocol version the request claims.
    pub fn protocol_version(&self) -> &str {
        &self.inner.meta.protocol_version
    }

    /// The capabilities the client declared on this request.
    pub fn client_capabilities(&self) -> &Map<String, Value> {
        &self.inner.meta.client_capabilities
    }

    /// The client's self-reported implementation, if sent. Never a basis for security.
    pub fn client_info(&self) -> Option<&Value> {
        self.inner.meta.client_info.as_ref()
    }

    /// The whole request `_meta`, including keys the runtime does not interpret.
    pub fn meta(&self) -> &RequestMeta {
        &self.inner.meta
    }

    /// The caller.
    pub fn principal(&self) -> &Principal {
        &self.inner.principal
    }

    /// Application state of type `T` registered with
    /// [`McpServerBuilder::state`](crate::McpServerBuilder::state).
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.inner.state.0.get::<T>()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("request_id", &self.inner.request_id)
            .field("method", &self.inner.method)
            .field("principal", &self.inner.principal)
            .finish_non_exhaustive()
    }
}
