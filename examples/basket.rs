//! The basket server of the lost-update story: versioned, idempotent stateful tools over MCP.
//!
//! `cargo run --example basket` serves on 127.0.0.1:8080 with the SQLite file `basket.db`.
//! Options: `--db PATH` (another SQLite file), `--memory` (keep state in memory),
//! `--bind ADDR`. `--print-schemas` prints the tools' JSON document and `--print-docs` their
//! Markdown page (typed outcomes, codes and recovery hints included), then exit.
//!
//! No authentication is configured here, so every caller is the anonymous principal and a basket
//! handle is a bearer capability: whoever holds it can use it.

#[path = "support/basket.rs"]
mod basket;

use mcp_tools::McpServer;
use std::sync::Arc;

use mcp_tools::store::{MemoryStore, SqliteStore, Store, StoreConfig};

struct Options {
    bind: String,
    db: Option<String>,
    print_schemas: bool,
    print_docs: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        bind: "127.0.0.1:8080".to_owned(),
        db: Some("basket.db".to_owned()),
        print_schemas: false,
        print_docs: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => options.bind = args.next().ok_or("--bind needs an address")?,
            "--db" => options.db = Some(args.next().ok_or("--db needs a path")?),
            "--memory" => options.db = None,
            "--print-schemas" => options.print_schemas = true,
            "--print-docs" => options.print_docs = true,
            other => {
                return Err(format!(
                    "unknown option {other}; use --bind ADDR, --db PATH, --memory, --print-schemas or --print-docs"
                ));
            }
        }
    }
    Ok(options)
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
    McpServer::builder("basket", env!("CARGO_PKG_VERSION"))
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
