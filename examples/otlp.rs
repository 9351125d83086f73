//! The basket server with its request spans exported to an OpenTelemetry collector.
//!
//! ```sh
//! cargo run --example otlp --features otlp
//! ```
//!
//! Spans go over OTLP/HTTP to `http://localhost:4318/v1/traces` (`OTEL_EXPORTER_OTLP_ENDPOINT`
//! moves it); state is kept in memory, and the command line is the standard one (`-- --help`). Each request is one server
//! span named `tools/call basket_get` (and so on) with the attributes of the OpenTelemetry
//! semantic conventions for MCP (`mcp.method.name`, `gen_ai.tool.name`, `jsonrpc.request.id`,
//! `error.type`, ...), a child of the trace a client names in `_meta` (`traceparent`,
//! `tracestate`), and a stateful call also records `mcp_tools.state.*`: which resource, the
//! version the caller expected, the version it ended at and the outcome.

#[path = "support/basket.rs"]
mod basket;

use std::process::ExitCode;

use mcp_tools::{McpServer, MemoryStore};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[tokio::main]
async fn main() -> ExitCode {
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(exporter) => exporter,
        Err(error) => {
            eprintln!("error: the OTLP exporter could not be built: {error}");
            return ExitCode::from(2);
        }
    };
    // Batched on a thread of the SDK's own, off the request path.
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build();
    // The trace context a client sends in `_meta` is read with the global propagator.
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    // Request spans are DEBUG spans: enabled for the exporter only, the console stays at INFO.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("basket"))
        .with_filter(EnvFilter::new("mcp_tools=debug"));
    let console = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()));
    tracing_subscriber::registry()
        .with(spans)
        .with(console)
        .init();

    let server = McpServer::builder("basket", env!("CARGO_PKG_VERSION"))
        .tools(basket::tool_set())
        .store(MemoryStore::default())
        .build()
        .expect("the basket's tools are valid");
    let status = server.run_cli().await;
    if let Err(error) = provider.shutdown() {
        eprintln!("warning: spans may not all have been exported: {error}");
    }
    status
}
