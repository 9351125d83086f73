//! Running a server on a socket: the connection loop, its limits, and graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::Semaphore;

use crate::server::McpServer;
use crate::server::limits::shutdown_signal;

/// How long a shutdown waits for the tasks running here to record their end.
const TASK_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

impl McpServer {
    /// Listens on `addr` and serves until ctrl-c or SIGTERM, then stops accepting connections and
    /// lets in-flight requests finish.
    pub async fn serve(self, addr: impl ToSocketAddrs) -> std::io::Result<()> {
        let listener = TcpListener::bind(addr).await?;
        tracing::info!(address = %listener.local_addr()?, "serving MCP");
        self.serve_listener(listener, shutdown_signal()).await
    }

    /// Serves on an already bound listener until `shutdown` completes, then drains in-flight
    /// requests for at most the drain timeout, and closes the connections of those still running
    /// past it (their callers see the connection close and may retry elsewhere).
    ///
    /// A connection that does not finish sending a request's headers within the header-read
    /// timeout is closed, and so is a kept-alive connection idle that long between requests; a
    /// body that does not arrive within the body-read timeout is answered HTTP 408 and its
    /// connection closed; a connection whose client reads nothing of what it is sent for the
    /// write timeout is closed. At most `max_connections` are served at once, further ones wait
    /// in the listen backlog until one closes.
    pub async fn serve_listener<F>(self, listener: TcpListener, shutdown: F) -> std::io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let router = self.router();
        self.serve_app(router, listener, shutdown).await
    }

    /// Serves `app` on an already bound listener as [`serve_listener`](Self::serve_listener)
    /// serves this server's own router, with every connection limit and deadline of this server
    /// and its graceful shutdown: for an application that mounts [`router`](Self::router) among
    /// its own routes or wraps it in tower layers (CORS, tracing, compression).
    ///
    /// ```no_run
    /// # async fn run(server: mcp_tools::McpServer) -> std::io::Result<()> {
    /// use axum::Router;
    /// use axum::routing::get;
    ///
    /// let app = Router::new()
    ///     .route("/", get(|| async { "a page of the application" }))
    ///     .merge(server.router());
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    /// server
    ///     .serve_app(app, listener, mcp_tools::server::shutdown_signal())
    ///     .await
    /// # }
    /// ```
    pub async fn serve_app<F>(
        self,
        app: axum::Router,
        listener: TcpListener,
        shutdown: F,
    ) -> std::io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.start_effect_delivery();
        let limits = self.shared.connections;
        let router = app;
        let mut connection = hyper::server::conn::http1::Builder::new();
        connection
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .keep_alive(true);
        let slots = Arc::new(Semaphore::new(limits.max_connections));
        let graceful = GracefulShutdown::new();
        // Owned here so that connections still busy when the drain times out can be closed.
        let mut connections = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            // A slot first: at the cap, connections wait in the kernel's backlog, not in memory.
            let slot = tokio::select! {
                slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
                () = &mut shutdown => break,
            };
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        // A connection reset before it was accepted, or the process out of
                        // descriptors: the listener itself is fine, so keep serving, after a
                        // pause in the second case rather than spinning on the same error.
                        tracing::warn!(%error, "accepting a connection failed");
                        if !is_connection_error(&error) {
                            tokio::time::sleep(ACCEPT_BACKOFF).await;
                        }
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let _ = stream.set_nodelay(true);
            let service = TowerToHyperService::new(router.clone());
            let stream = super::deadline::WriteDeadline::new(stream, limits.write_timeout);
            let served = graceful.watch(connection.serve_connection(TokioIo::new(stream), service));
            while connections.try_join_next().is_some() {}
            connections.spawn(async move {
                if let Err(error) = served.await {
                    tracing::debug!(%error, "connection ended with an error");
                }
                drop(slot);
            });
        }
        drop(listener);
        // A timeout too long to add to the clock is no bound at all.
        let deadline = tokio::time::Instant::now().checked_add(limits.drain_timeout);
        // Open subscriptions never end by themselves: close them (each gets its final result)
        // so draining can finish.
        self.close_subscriptions();
        // The same signal ends the tasks running here: let each record that it failed, so
        // clients learn it now rather than when its lease lapses.
        self.shared
            .tasks
            .drained(TASK_DRAIN.min(limits.drain_timeout))
            .await;
        let drained = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, graceful.shutdown())
                .await
                .is_ok(),
            None => {
                graceful.shutdown().await;
                true
            }
        };
        if !drained {
            tracing::warn!(
                timeout = ?limits.drain_timeout,
                "requests still running at the end of the drain; closing their connections"
            );
        }
        connections.shutdown().await;
        Ok(())
    }
}

/// How long the connection loop pauses after an accept error that is not about one connection.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

fn is_connection_error(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
