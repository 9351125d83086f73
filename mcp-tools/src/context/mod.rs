//! The per-request context handed to every tool call.

pub(crate) mod notify;

use std::any::Any;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::auth::Principal;
use crate::context::notify::Notifier;
use crate::protocol::LogLevel;
use crate::protocol::{RequestId, RequestMeta};

/// Who is calling, and what its token grants.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    pub(crate) principal: Principal,
    /// `None` when the server checks no scopes (it is not an OAuth resource server): the caller
    /// may then use everything.
    pub(crate) scopes: Option<crate::auth::Granted>,
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
    caller: Caller,
    /// The serving server, opaque here so the context does not depend on the server layer;
    /// [`Context::server`] is defined there.
    server: Arc<dyn Any + Send + Sync>,
    state: SharedState,
    notifier: Option<Notifier>,
    input: RoundInput,
    /// The task this call runs as, once it is one.
    task: std::sync::OnceLock<TaskSlot>,
    /// Set once the call became a task: progress and log messages are not sent for tasks.
    quiet: std::sync::atomic::AtomicBool,
}

/// A task's id and its tie to the worker, opaque here so the context does not depend on the
/// tasks layer, which reads it back.
#[derive(Clone)]
pub(crate) struct TaskSlot {
    pub(crate) id: Arc<str>,
    pub(crate) link: Arc<dyn Any + Send + Sync>,
}

/// What the client sent back on a multi-round retry.
#[derive(Default)]
pub(crate) struct RoundInput {
    pub(crate) responses: Map<String, Value>,
    pub(crate) state: Option<Value>,
}

impl Context {
    pub(crate) fn new(
        request_id: Option<RequestId>,
        method: String,
        meta: RequestMeta,
        caller: Caller,
        (server, state): (Arc<dyn Any + Send + Sync>, SharedState),
        notifier: Option<Notifier>,
        input: RoundInput,
    ) -> Self {
        Context {
            inner: Arc::new(ContextInner {
                request_id,
                method,
                meta,
                caller,
                server,
                state,
                notifier,
                input,
                task: std::sync::OnceLock::new(),
                quiet: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// This context with another multi-round answer: a task's tool that returned
    /// [`InputRequired`](crate::tools::InputRequired) runs again with it. Notifications do not follow
    /// a task.
    pub(crate) fn with_round_input(&self, input: RoundInput) -> Context {
        let inner = &self.inner;
        let task = std::sync::OnceLock::new();
        if let Some(link) = inner.task.get() {
            let _ = task.set(link.clone());
        }
        Context {
            inner: Arc::new(ContextInner {
                request_id: inner.request_id.clone(),
                method: inner.method.clone(),
                meta: inner.meta.clone(),
                caller: inner.caller.clone(),
                server: Arc::clone(&inner.server),
                state: inner.state.clone(),
                notifier: None,
                input,
                task,
                quiet: std::sync::atomic::AtomicBool::new(true),
            }),
        }
    }

    /// Makes this call's context the one of task `slot`.
    pub(crate) fn attach_task(&self, slot: TaskSlot) {
        let _ = self.inner.task.set(slot);
    }

    /// Stops progress and log messages: the call became a task, whose client polls instead.
    pub(crate) fn quiet(&self) {
        self.inner
            .quiet
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The request's notification stream, while the call may still use it.
    fn notifier(&self) -> Option<&Notifier> {
        if self.inner.quiet.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        self.inner.notifier.as_ref()
    }

    /// The task this call runs as, if any.
    pub(crate) fn task_slot(&self) -> Option<&TaskSlot> {
        self.inner.task.get()
    }

    /// The id of the task this call runs as, when it runs as one.
    pub fn task_id(&self) -> Option<&str> {
        self.inner.task.get().map(|slot| &*slot.id)
    }

    /// The server behind [`Context::server`].
    pub(crate) fn server_handle(&self) -> &Arc<dyn Any + Send + Sync> {
        &self.inner.server
    }

    /// The client's answer to the input request `key` of an earlier round, on a retry.
    pub fn input_response(&self, key: &str) -> Option<&Value> {
        self.inner.input.responses.get(key)
    }

    /// Every input response the retry carries.
    pub fn input_responses(&self) -> &Map<String, Value> {
        &self.inner.input.responses
    }

    /// The state the tool attached to its last [`InputRequired`](crate::tools::InputRequired), verified.
    pub fn request_state(&self) -> Option<&Value> {
        self.inner.input.state.as_ref()
    }

    /// Reports progress, when the request asked for it with a `progressToken`; otherwise does
    /// nothing. Reports must strictly increase: one that does not is dropped.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(notifier) = self.notifier() {
            notifier.progress(progress, total, message);
        }
    }

    /// Queues a notification that must not be lost, waiting while the reader is behind.
    pub(crate) async fn send_notification(&self, message: Value) {
        if let Some(notifier) = self.notifier() {
            notifier.deliver(message).await;
        }
    }

    /// Sends a log message on this request's stream, when the request set a `logLevel` at or
    /// below `level`; otherwise does nothing.
    pub fn log(&self, level: LogLevel, data: impl Into<Value>) {
        if let Some(notifier) = self.notifier() {
            notifier.log(level, None, data.into());
        }
    }

    /// Like [`log`](Self::log), naming the logger.
    pub fn log_from(&self, logger: &str, level: LogLevel, data: impl Into<Value>) {
        if let Some(notifier) = self.notifier() {
            notifier.log(level, Some(logger), data.into());
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
        self.inner.meta.protocol_version()
    }

    /// The capabilities the client declared on this request.
    pub fn client_capabilities(&self) -> &Map<String, Value> {
        self.inner.meta.client_capabilities()
    }

    /// The client's self-reported implementation, if sent. Never a basis for security.
    pub fn client_info(&self) -> Option<&Value> {
        self.inner.meta.client_info()
    }

    /// The whole request `_meta`, including keys the runtime does not interpret.
    pub fn meta(&self) -> &RequestMeta {
        &self.inner.meta
    }

    /// The caller.
    pub fn principal(&self) -> &Principal {
        &self.inner.caller.principal
    }

    /// The scopes the caller's bearer token grants (with every scope they imply), when the
    /// server is an OAuth resource server; `None` otherwise.
    pub fn granted_scopes(&self) -> Option<&crate::auth::Granted> {
        self.inner.caller.scopes.as_ref()
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
            .field("principal", &self.inner.caller.principal)
            .finish_non_exhaustive()
    }
}
