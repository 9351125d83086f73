//! The peer benchmark's server on rmcp 3.11.0, configured as a knowledgeable user would for a
//! stateless deployment:
//!
//! - `StreamableHttpService` with `NeverSessionManager` (no session state), mounted in axum;
//! - `legacy_session_mode = false`: every request is served statelessly (2026-07-28 requests
//!   always are);
//! - `json_response = true`: a terminal reply is `application/json`, not an SSE stream;
//! - SSE keep-alive and retry priming off (unused without SSE);
//! - the tool router, filler tools included, is built once and shared through an `Arc`, so the
//!   per-request service factory only clones a pointer (a plain `ToolRouter<Self>` field would
//!   clone a map of tool definitions on every request);
//! - stdio through `stdio_pipes()`, which uses the reactor instead of the blocking pool when
//!   both streams are pipes;
//! - no tracing subscriber.
//!
//! rmcp has no bearer-token verifier on its server side; with `--jwks` an axum middleware
//! (`peers-jwt`, jsonwebtoken) checks the token in front of the MCP service, as an rmcp
//! application would.
//!
//! Usage: rmcp-peer --bind 127.0.0.1:PORT [--tools N] [--jwks FILE] | --stdio [--tools N]

use std::sync::Arc;

use peers_common::{AUDIENCE, ISSUER, Options, filler_description, filler_name};
use rmcp::handler::server::common::schema_for_type;
use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Tool, ToolAnnotations};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    /// The first addend.
    pub a: i64,
    /// The second addend.
    pub b: i64,
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct Sum {
    pub sum: i64,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct TextArgs {
    /// The text to send back.
    pub text: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct StatsArgs {
    /// The integers, at least one.
    pub values: Vec<i64>,
}

/// Count, sum, extremes and mean of a list of integers.
#[derive(Serialize, schemars::JsonSchema)]
pub struct Stats {
    pub count: u64,
    pub sum: i64,
    pub min: i64,
    pub max: i64,
    pub mean: f64,
}

// The same description as `peers_common::FILLER_ARG_DESCRIPTION`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct FillerArgs {
    /// The text to return.
    pub text: String,
}

#[derive(Clone)]
pub struct Peer {
    tool_router: Arc<ToolRouter<Peer>>,
}

#[tool_router]
impl Peer {
    pub fn new(fillers: usize) -> Self {
        let mut router = Self::tool_router();
        let schema = schema_for_type::<FillerArgs>();
        let annotations = ToolAnnotations::new().read_only(true);
        for i in 0..fillers {
            let filler = Tool::new(filler_name(i), filler_description(i), schema.clone())
                .annotate(annotations.clone());
            router.add_route(ToolRoute::new(filler, Peer::filler));
        }
        Self {
            tool_router: Arc::new(router),
        }
    }

    fn filler(&self, Parameters(FillerArgs { text }): Parameters<FillerArgs>) -> String {
        text
    }

    /// Adds two integers: the sum as structured output `{sum}`, mirrored as JSON text.
    #[tool(description = "Adds two integers.", annotations(read_only_hint = true))]
    fn add(
        &self,
        Parameters(AddArgs { a, b }): Parameters<AddArgs>,
    ) -> Result<Json<Sum>, ErrorData> {
        let sum = a
            .checked_add(b)
            .ok_or_else(|| ErrorData::invalid_params("integer overflow", None))?;
        Ok(Json(Sum { sum }))
    }

    #[tool(
        description = "Returns the given text unchanged.",
        annotations(read_only_hint = true)
    )]
    fn echo(&self, Parameters(TextArgs { text }): Parameters<TextArgs>) -> String {
        text
    }

    #[tool(
        description = "Count, sum, minimum, maximum and mean of a list of integers.",
        annotations(read_only_hint = true)
    )]
    fn stats(
        &self,
        Parameters(StatsArgs { values }): Parameters<StatsArgs>,
    ) -> Result<Json<Stats>, ErrorData> {
        let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
            return Err(ErrorData::invalid_params("values must not be empty", None));
        };
        let sum = values
            .iter()
            .try_fold(0i64, |s, v| s.checked_add(*v))
            .ok_or_else(|| ErrorData::invalid_params("integer overflow", None))?;
        let count = values.len() as u64;
        Ok(Json(Stats {
            count,
            sum,
            min,
            max,
            mean: sum as f64 / count as f64,
        }))
    }
}

#[tool_handler(router = self.tool_router, name = "rmcp-peer", version = "0.1.0")]
impl ServerHandler for Peer {}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = Options::from_args("rmcp-peer");
    let peer = Peer::new(options.fillers);
    if options.stdio {
        peer.serve(rmcp::transport::io::stdio_pipes())
            .await?
            .waiting()
            .await?;
        return Ok(());
    }
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_sse_retry(None);
    let service: StreamableHttpService<Peer, NeverSessionManager> = StreamableHttpService::new(
        move || Ok(peer.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let mut app = axum::Router::new().route_service("/mcp", service);
    if let Some(jwks) = &options.jwks {
        let verifier =
            peers_jwt::Verifier::new(jwks, ISSUER, AUDIENCE).map_err(|e| format!("--jwks: {e}"))?;
        app = app.layer(axum::middleware::from_fn_with_state(
            Arc::new(verifier),
            peers_jwt::require_bearer,
        ));
    }
    let listener = tokio::net::TcpListener::bind(options.bind).await?;
    eprintln!(
        "rmcp-peer listening on http://{}/mcp",
        listener.local_addr()?
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
