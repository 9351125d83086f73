//! What a connection may cost the server (how long it may take to send its headers, how many
//! are served at once, how long a shutdown waits for them), and the signal a served server
//! stops on. Rate limits per caller are in `rate.rs` (feature `rate-limits`).

use std::time::Duration;

/// How long a connection may take to send a request's headers by default: also how long a
/// kept-alive connection may stay idle between requests.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections [`McpServer::serve`](crate::McpServer::serve) serves at once by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How long a shutdown waits for in-flight requests by default: less than the 30 s an
/// orchestrator such as Kubernetes allows between SIGTERM and SIGKILL, so the server closes what
/// is left and exits on its own.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// What a connection may cost the server: set with
/// [`McpServerBuilder::header_read_timeout`](crate::McpServerBuilder::header_read_timeout),
/// [`McpServerBuilder::max_connections`](crate::McpServerBuilder::max_connections) and
/// [`McpServerBuilder::drain_timeout`](crate::McpServerBuilder::drain_timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) drain_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
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
