//! An MCP endpoint inside an existing axum application: the server's router merged with the
//! application's own routes, wrapped in tower layers (CORS for browser clients such as the MCP
//! Inspector, request tracing), and served with the server's connection limits, deadlines and
//! graceful shutdown.
//!
//! `cargo run --example axum_app`, then `GET http://127.0.0.1:8080/` and MCP at `/mcp`. Needs
//! nothing beyond the default features; copied into a crate of its own it also needs `axum` and
//! `tower-http` (features `cors`, `trace`).

use axum::Router;
use axum::routing::get;
use mcp_tools::{McpServer, tool, tools};
use tower_http::cors::CorsLayer;
use tower_http::trace::TraceLayer;

/// Returns the text in upper case.
#[tool(read_only)]
fn shout(
    /// The text to raise.
    text: String,
) -> String {
    text.to_uppercase()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let server = McpServer::builder("app", "1.0.0")
        .tools(tools![shout])
        .build()?;
    let app = Router::new()
        .route("/", get(|| async { "the application's own page" }))
        .merge(server.router())
        // A browser client sends its own headers: allow the MCP ones (and any other) here, and
        // let the server's host and origin policy decide who may call.
        .layer(CorsLayer::permissive())
        .layer(TraceLayer::new_for_http());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    server
        .serve_app(app, listener, mcp_tools::server::shutdown_signal())
        .await?;
    Ok(())
}
