//! What a connection and a caller may cost the server: how long a connection may take to send a
//! request's headers and its body, how long a response may wait for the client to read it, how
//! many connections are served at once and how many requests one caller may have in flight, how
//! many request bytes are buffered at once, and how long a shutdown waits; and the signal a
//! served server stops on. Rate limits per caller are in `rate.rs` (feature `rate-limits`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::auth::Principal;
use crate::protocol::error::RpcError;
use crate::sync::lock;

/// How long a connection may take to send a request's headers by default: also how long a
/// kept-alive connection may stay idle between requests.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections [`McpServer::serve`](crate::McpServer::serve) serves at once by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How long a shutdown waits for in-flight requests by default: less than the 30 s an
/// orchestrator such as Kubernetes allows between SIGTERM and SIGKILL, so the server closes what
/// is left and exits on its own.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a request's body may take to arrive by default, from the end of its headers.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a write to a client may make no progress by default, before the connection is
/// closed: a client that stops reading its answer holds nothing longer.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How many requests one authenticated principal may have in flight at once by default,
/// answers being written included.
pub const DEFAULT_MAX_IN_FLIGHT_PER_PRINCIPAL: usize = 64;

/// How many bytes of request bodies the server buffers at once by default, over all requests.
pub const DEFAULT_MAX_BUFFERED_BODY_BYTES: usize = 256 * 1024 * 1024;

/// What a connection may cost the server: set with
/// [`McpServerBuilder::header_read_timeout`](crate::McpServerBuilder::header_read_timeout),
/// [`McpServerBuilder::body_read_timeout`](crate::McpServerBuilder::body_read_timeout),
/// [`McpServerBuilder::write_timeout`](crate::McpServerBuilder::write_timeout),
/// [`McpServerBuilder::max_connections`](crate::McpServerBuilder::max_connections) and
/// [`McpServerBuilder::drain_timeout`](crate::McpServerBuilder::drain_timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) body_read_timeout: Duration,
    pub(crate) write_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) drain_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// The requests each authenticated principal has in flight, answers being written included, so
/// that one token holder cannot take every connection the server serves. Anonymous callers are
/// one principal, so they are left to the connection cap and the read and write deadlines.
pub(crate) struct InFlight {
    max: usize,
    open: Mutex<HashMap<Principal, usize>>,
}

/// One request of a principal in flight; dropping it (with the answer's body) frees its place.
pub(crate) struct InFlightSlot {
    in_flight: Arc<InFlight>,
    principal: Principal,
}

impl InFlight {
    /// The most requests one principal may have in flight.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(InFlight {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more request of `principal`, or the 429 that refuses it. `None` for the
    /// anonymous principal, which is not counted.
    pub(crate) fn enter(
        self: &Arc<Self>,
        principal: &Principal,
    ) -> Result<Option<InFlightSlot>, RpcError> {
        if matches!(principal, Principal::Anonymous) {
            return Ok(None);
        }
        // Each critical section is one count change, so a poisoned lock holds consistent counts.
        let mut open = lock(&self.open);
        let count = open.entry(principal.clone()).or_insert(0);
        if *count >= self.max {
            return Err(RpcError::too_many_in_flight(self.max));
        }
        *count += 1;
        Ok(Some(InFlightSlot {
            in_flight: Arc::clone(self),
            principal: principal.clone(),
        }))
    }
}

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.in_flight.open);
        if let Some(count) = open.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.principal);
            }
        }
    }
}

/// The bytes of request bodies being buffered, over all requests: a bound on the memory that
/// slow or large uploads hold at once.
pub(crate) struct BodyBudget {
    max: usize,
    used: AtomicUsize,
}

/// Bytes taken from the budget; dropping it gives them back.
pub(crate) struct BodyBytes {
    budget: Arc<BodyBudget>,
    taken: usize,
}

impl BodyBudget {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(BodyBudget {
            max,
            used: AtomicUsize::new(0),
        })
    }

    /// An empty reservation, to grow as a body arrives.
    pub(crate) fn reserve(self: &Arc<Self>) -> BodyBytes {
        BodyBytes {
            budget: Arc::clone(self),
            taken: 0,
        }
    }
}

impl BodyBytes {
    /// Takes `bytes` more; `false` (taking nothing) when the budget cannot spare them.
    pub(crate) fn grow(&mut self, bytes: usize) -> bool {
        let budget = &self.budget;
        let taken = budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|after| *after <= budget.max)
            });
        if taken.is_ok() {
            self.taken += bytes;
        }
        taken.is_ok()
    }
}

impl Drop for BodyBytes {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.taken, Ordering::AcqRel);
    }
}

/// Completes on ctrl-c, or on SIGTERM where there is one.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: draining in-flight requests");
}
