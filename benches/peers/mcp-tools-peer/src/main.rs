//! The peer benchmark's server on mcp-tools, written the way its README and `quickstart` example
//! teach: `#[tool]` functions in a `tools![...]` set, `McpServer::builder(..).build()?`, then
//! `serve` or `serve_stdio` from the same binary; `--jwks` makes it an OAuth resource server with
//! its own `JwtVerifier`. No tracing subscriber.
//!
//! Three settings differ from the builder's defaults, each because a scenario needs it:
//! - one `tools/list` page holds every tool (the default page is 100 tools; the other servers
//!   do not paginate, and the 200-tool listing must be one answer on every server);
//! - the connection cap is raised above the benchmark's 4,096 connections (the default is
//!   1,024, past which connections wait in the listen backlog; rmcp and axum have no cap);
//! - with `--jwks`, one principal (the benchmark's one token) may have as many requests in
//!   flight as wrk opens connections (the default is 64).
//!
//! The filler tools of the 200-tool listing implement `Tool` by hand, as the `mcp_tools::tools`
//! docs show, because their names are chosen at run time.
//!
//! Usage: mcp-tools-peer --bind 127.0.0.1:PORT [--tools N] [--jwks FILE] | --stdio [--tools N]

use mcp_tools::auth::{Algorithm, JwtVerifier, OAuth};
use mcp_tools::tools::{Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, McpServer, ToolError, tool, tools};
use peers_common::{AUDIENCE, ISSUER, Options, filler_description, filler_name};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The sum of two integers.
#[derive(Serialize, JsonSchema)]
pub struct Sum {
    /// `a + b`.
    pub sum: i64,
}

/// Adds two integers.
#[tool(read_only)]
pub fn add(
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
) -> Result<Sum, ToolError> {
    let sum = a
        .checked_add(b)
        .ok_or_else(|| ToolError::new("OVERFLOW", "The sum does not fit in a 64-bit integer"))?;
    Ok(Sum { sum })
}

/// Returns the given text unchanged.
#[tool(read_only)]
pub fn echo(
    /// The text to send back.
    text: String,
) -> String {
    text
}

/// Count, sum, extremes and mean of a list of integers.
#[derive(Serialize, JsonSchema)]
pub struct Stats {
    pub count: u64,
    pub sum: i64,
    pub min: i64,
    pub max: i64,
    pub mean: f64,
}

/// Count, sum, minimum, maximum and mean of a list of integers.
#[tool(read_only)]
pub fn stats(
    /// The integers, at least one.
    values: Vec<i64>,
) -> Result<Stats, ToolError> {
    let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
        return Err(ToolError::new("EMPTY", "values must not be empty"));
    };
    let sum = values
        .iter()
        .try_fold(0i64, |s, v| s.checked_add(*v))
        .ok_or_else(|| ToolError::new("OVERFLOW", "The sum does not fit in a 64-bit integer"))?;
    let count = values.len() as u64;
    Ok(Stats {
        count,
        sum,
        min,
        max,
        mean: sum as f64 / count as f64,
    })
}

// The same description as `peers_common::FILLER_ARG_DESCRIPTION`.
#[derive(Deserialize, JsonSchema)]
pub struct FillerArgs {
    /// The text to return.
    pub text: String,
}

/// A filler tool: returns its text.
pub struct Filler {
    name: String,
    description: String,
}

impl Tool for Filler {
    type Args = FillerArgs;
    type Output = String;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(self.name.clone(), self.description.clone()).read_only()
    }

    async fn call(&self, FillerArgs { text }: FillerArgs, _cx: Context) -> String {
        text
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = Options::from_args("mcp-tools-peer");
    let mut set: ToolSet = tools![add, echo, stats];
    for i in 0..options.fillers {
        set.add(Filler {
            name: filler_name(i),
            description: filler_description(i),
        });
    }
    let mut builder = McpServer::builder("mcp-tools-peer", "0.1.0")
        .page_size(set.len().max(100))
        .tools(set);
    if options.stdio {
        return Ok(builder.build()?.serve_stdio().await?);
    }
    builder = builder.max_connections(65_536);
    if let Some(jwks) = &options.jwks {
        let verifier = JwtVerifier::with_key_set(ISSUER, jwks)?.algorithms([Algorithm::RS256])?;
        builder = builder
            .oauth(OAuth::new(AUDIENCE, verifier).authorization_server(ISSUER))
            .max_in_flight_per_principal(65_536);
    }
    Ok(builder.build()?.serve(options.bind).await?)
}
