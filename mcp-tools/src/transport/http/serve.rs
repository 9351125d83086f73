//! Running a server on a socket with graceful shutdown.

use std::future::Future;

use tokio::net::{TcpListener, ToSocketAddrs};

use crate::server::McpServer;

impl McpServer {
    /// Listens on `addr` and serves until ctrl-c or SIGTERM, then stops accepting connections and
    /// lets in-flight requests finish.
    pub async fn serve(self, addr: impl ToSocketAddrs) -> std::io::Result<()> {
        let listener = TcpListener::bind(addr).await?;
        tracing::info!(address = %listener.local_addr()?, "serving MCP");
        self.serve_listener(listener, shutdown_signal()).await
    }

    /// Serves on an already bound listener until `shutdown` completes, then drains in-flight
    /// requests.
    pub async fn serve_listener<F>(self, listener: TcpListener, shutdown: F) -> std::io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let router = self.router();
        // Open subscriptions never end by themselves: close them (each gets its final result)
        // so draining can finish.
        let closing = async move {
            shutdown.await;
            self.close_subscriptions();
        };
        axum::serve(listener, router)
            .with_graceful_shutdown(closing)
            .await
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
