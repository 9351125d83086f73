//! The peer benchmark's server on flymcprust 0.1.1 (a Rust SDK of MCP 2026-07-28 that publishes
//! its own stateless benchmark), configured as its README recommends: `#[tool]` functions, the
//! Streamable HTTP service on hyper at `/mcp` with its default (localhost-only) security
//! settings, `serve_stdio` for stdio, its own `JwtVerifier` and `OAuth` for `--jwks`, and no
//! tracing subscriber. One setting differs from its defaults: the connection cap is raised above
//! the benchmark's 4,096 connections (flymcprust caps at 4,096, rmcp and axum have no cap).
//! Results carry `serverInfo` in `_meta`, flymcprust's default, as mcp-tools' do.
//!
//! Usage: flymcprust-peer --bind 127.0.0.1:PORT [--tools N] [--jwks FILE] | --stdio [--tools N]

use std::future::Future;
use std::pin::Pin;

use flymcprust::auth::{Algorithm, JwtVerifier};
use flymcprust::prelude::*;
use flymcprust::transport::http::{HttpConfig, OAuth, StreamableHttpService};
use flymcprust::{IntoToolResult, Tool, ToolDef, ToolResult};
use peers_common::{AUDIENCE, ISSUER, Options, filler_description, filler_name};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The sum of two integers.
#[derive(Serialize, schemars::JsonSchema)]
pub struct Sum {
    /// `a + b`.
    pub sum: i64,
}

/// Adds two integers.
///
/// # Arguments
/// * `a` - The first addend.
/// * `b` - The second addend.
#[tool(read_only)]
async fn add(a: i64, b: i64) -> Result<Json<Sum>, ToolError> {
    let sum = a
        .checked_add(b)
        .ok_or_else(|| ToolError::user("integer overflow"))?;
    Ok(Json(Sum { sum }))
}

/// Returns the given text unchanged.
///
/// # Arguments
/// * `text` - The text to send back.
#[tool(read_only)]
async fn echo(text: String) -> String {
    text
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

/// Count, sum, minimum, maximum and mean of a list of integers.
///
/// # Arguments
/// * `values` - The integers, at least one.
#[tool(read_only)]
async fn stats(values: Vec<i64>) -> Result<Json<Stats>, ToolError> {
    let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
        return Err(ToolError::user("values must not be empty"));
    };
    let sum = values
        .iter()
        .try_fold(0i64, |s, v| s.checked_add(*v))
        .ok_or_else(|| ToolError::user("integer overflow"))?;
    let count = values.len() as u64;
    Ok(Json(Stats {
        count,
        sum,
        min,
        max,
        mean: sum as f64 / count as f64,
    }))
}

/// The shape every filler tool takes: its definition is copied and renamed for each one.
///
/// # Arguments
/// * `text` - The text to return.
#[tool(read_only)]
async fn filler(text: String) -> String {
    text
}

#[derive(Deserialize)]
struct FillerArgs {
    text: String,
}

type CallFuture = Pin<Box<dyn Future<Output = ToolResult> + Send + 'static>>;

/// The entry point of every filler tool.
fn filler_call(arguments: Option<&RawValue>, _ctx: Ctx) -> Result<CallFuture, ToolError> {
    let FillerArgs { text } = serde_json::from_str(arguments.map_or("{}", RawValue::get))
        .map_err(|e| ToolError::invalid_argument(e.to_string()))?;
    Ok(Box::pin(async move { text.into_tool_result() }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = Options::from_args("flymcprust-peer");
    let mut builder = Server::builder("flymcprust-peer", "0.1.0")
        .tool::<add>()
        .tool::<echo>()
        .tool::<stats>();
    let template = <filler as Tool>::definition().tool().clone();
    for i in 0..options.fillers {
        let mut tool = template.clone();
        tool.name = filler_name(i);
        tool.description = Some(filler_description(i));
        builder = builder.tool_def(ToolDef::new(tool, filler_call));
    }
    let server = builder.build()?;
    if options.stdio {
        server.serve_stdio().await?;
        return Ok(());
    }
    let mut config = HttpConfig::new().max_connections(65_536);
    if let Some(jwks) = options.jwks {
        let verifier = JwtVerifier::builder(ISSUER, AUDIENCE)
            .jwks(jwks)
            .algorithms([Algorithm::Rs256])
            .build()?;
        config = config.oauth(
            OAuth::builder(AUDIENCE, verifier)
                .authorization_server(ISSUER)
                .build()?,
        );
    }
    let listener = tokio::net::TcpListener::bind(options.bind).await?;
    eprintln!(
        "flymcprust-peer listening on http://{}/mcp",
        listener.local_addr()?
    );
    let service = StreamableHttpService::with_config(server, config);
    flymcprust::transport::http::serve(listener, service, "/mcp", async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
