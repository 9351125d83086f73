//! The basket server of the lost-update story: versioned, idempotent stateful tools over MCP.
//!
//! `cargo run --example basket` serves on 127.0.0.1:8080 with the SQLite file `basket.db`.
//! Options: `--db PATH` (another SQLite file), `--memory` (keep state in memory),
//! `--bind ADDR`. `--print-schemas` prints the tools' JSON document and `--print-docs` their
//! Markdown page (typed outcomes, codes and recovery hints included), then exit.
//!
//! Without OAuth every caller is the anonymous principal and a basket handle is a bearer
//! capability: whoever holds it can use it. `--issuer URL --audience URI --jwks-url URL` (all
//! three) make the server an OAuth resource server: every request needs a JWT access token of
//! that issuer, for that audience (the server's canonical URI), signed with a key of that JWKS;
//! `basket_get` needs the scope `basket:read`, creates and changes `basket:write` (which also
//! grants `basket:read`), and each basket belongs to the token's issuer and subject.

#[path = "support/basket.rs"]
mod basket;

use mcp_tools::McpServer;
use mcp_tools::auth::{JwtVerifier, OAuth};
use std::sync::Arc;

use mcp_tools::store::{MemoryStore, SqliteStore, Store, StoreConfig};

struct Options {
    bind: String,
    db: Option<String>,
    print_schemas: bool,
    print_docs: bool,
    issuer: Option<String>,
    audience: Option<String>,
    jwks_url: Option<String>,
}

const USAGE: &str = "use --bind ADDR, --db PATH, --memory, --issuer URL --audience URI --jwks-url URL, --print-schemas or --print-docs";

fn options() -> Result<Options, String> {
    let mut options = Options {
        bind: "127.0.0.1:8080".to_owned(),
        db: Some("basket.db".to_owned()),
        print_schemas: false,
        print_docs: false,
        issuer: None,
        audience: None,
        jwks_url: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => options.bind = args.next().ok_or("--bind needs an address")?,
            "--db" => options.db = Some(args.next().ok_or("--db needs a path")?),
            "--memory" => options.db = None,
            "--print-schemas" => options.print_schemas = true,
            "--print-docs" => options.print_docs = true,
            "--issuer" => options.issuer = Some(args.next().ok_or("--issuer needs a URL")?),
            "--audience" => options.audience = Some(args.next().ok_or("--audience needs a URI")?),
            "--jwks-url" => options.jwks_url = Some(args.next().ok_or("--jwks-url needs a URL")?),
            other => return Err(format!("unknown option {other}; {USAGE}")),
        }
    }
    let oauth = [&options.issuer, &options.audience, &options.jwks_url];
    if oauth.iter().any(|o| o.is_some()) && !oauth.iter().all(|o| o.is_some()) {
        return Err(
            "OAuth needs all three of --issuer URL, --audience URI and --jwks-url URL".into(),
        );
    }
    Ok(options)
}

/// `mcp.example.com` of `https://mcp.example.com:8443/mcp`.
fn audience_host(audience: &str) -> &str {
    let authority = audience.split("://").nth(1).unwrap_or(audience);
    let authority = authority.split('/').next().unwrap_or(authority);
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// The OAuth resource server the options ask for, if any.
fn oauth(options: &Options) -> Result<Option<OAuth>, Box<dyn std::error::Error>> {
    let (Some(issuer), Some(audience), Some(jwks_url)) =
        (&options.issuer, &options.audience, &options.jwks_url)
    else {
        return Ok(None);
    };
    let verifier = JwtVerifier::with_jwks(issuer.as_str(), jwks_url)?;
    Ok(Some(
        OAuth::new(audience.as_str(), verifier)
            .authorization_server(issuer.as_str())
            .implies("basket:write", ["basket:read"])
            .resource_name("Laptop baskets"),
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    if options.print_schemas {
        println!(
            "{}",
            serde_json::to_string_pretty(&basket::tool_set().schema_document())?
        );
        return Ok(());
    }
    if options.print_docs {
        print!("{}", basket::tool_set().markdown());
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let store = match &options.db {
        Some(path) => {
            println!("basket server: state in the SQLite file {path}");
            Arc::new(SqliteStore::open(path, StoreConfig::default())?) as Arc<dyn Store>
        }
        None => {
            println!("basket server: state in memory (lost when the server stops)");
            Arc::new(MemoryStore::default())
        }
    };
    println!("basket server: MCP endpoint http://{}/mcp", options.bind);
    let mut builder = McpServer::builder("basket", env!("CARGO_PKG_VERSION"));
    if let Some(oauth) = oauth(&options)? {
        println!(
            "basket server: OAuth resource server {}, tokens of {}",
            options.audience.as_deref().unwrap_or_default(),
            options.issuer.as_deref().unwrap_or_default()
        );
        // Behind a proxy, requests name the audience's host; loopback stays allowed for probes.
        let host = audience_host(options.audience.as_deref().unwrap_or_default());
        builder = builder
            .oauth(oauth)
            .allowed_hosts(["localhost", "127.0.0.1", "[::1]", host]);
    }
    builder
        .instructions(
            "Laptop baskets shared by handle. Read a basket before changing it and pass its \
             version as expected_version; give every change a new operation_id and reuse it \
             only to retry the same change.",
        )
        .tools(basket::tool_set())
        .store(store)
        .build()?
        .serve(options.bind.as_str())
        .await?;
    Ok(())
}
