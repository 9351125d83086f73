//! The span of one request, named and attributed as the OpenTelemetry semantic conventions for
//! MCP name them, so an exporter (`tracing-opentelemetry`) turns it into a standard server span.
//!
//! It is a DEBUG span: at the usual INFO level it is disabled and costs nothing, where recording
//! a dozen fields into an enabled span costs more than the rest of a stateless request.

use serde_json::{Map, Value};
use tracing::Span;
use tracing::field::Empty;

use crate::protocol::RequestId;
use crate::stateful::trace::field;

/// The request's span, not yet entered. With the `opentelemetry` feature it continues the
/// caller's trace when `_meta` carries W3C `traceparent` (and `tracestate`), through the
/// application's global text-map propagator.
pub(crate) fn request_span(
    method: &str,
    id: &RequestId,
    params: Option<&Map<String, Value>>,
) -> Span {
    let span = tracing::debug_span!(
        "mcp.request",
        otel.name = method,
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = method,
        mcp.protocol.version = Empty,
        jsonrpc.request.id = %id,
        gen_ai.operation.name = Empty,
        gen_ai.tool.name = Empty,
        mcp.prompt.name = Empty,
        mcp.resource.uri = Empty,
        error.type = Empty,
        { field::HANDLE } = Empty,
        { field::HANDLE_DIGEST } = Empty,
        { field::EXPECTED_VERSION } = Empty,
        { field::VERSION } = Empty,
        { field::OUTCOME } = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(params) = params {
        record_target(&span, method, params);
    }
    let Some(Value::Object(meta)) = params.and_then(|params| params.get("_meta")) else {
        return span;
    };
    if let Some(Value::String(version)) = meta.get(crate::protocol::meta_keys::PROTOCOL_VERSION_KEY)
    {
        span.record("mcp.protocol.version", version.as_str());
    }
    #[cfg(feature = "opentelemetry")]
    continue_trace(&span, meta);
    span
}

/// Records what a request is about: the conventions name the span `{method} {target}` for
/// tools and prompts.
fn record_target(span: &Span, method: &str, params: &Map<String, Value>) {
    let name = params.get("name").and_then(Value::as_str);
    match (method, name) {
        ("tools/call", Some(tool)) => {
            span.record("otel.name", format!("{method} {tool}"));
            span.record("gen_ai.operation.name", "execute_tool");
            span.record("gen_ai.tool.name", tool);
        }
        ("prompts/get", Some(prompt)) => {
            span.record("otel.name", format!("{method} {prompt}"));
            span.record("mcp.prompt.name", prompt);
        }
        ("resources/read", _) => {
            if let Some(uri) = params.get("uri").and_then(Value::as_str) {
                span.record("mcp.resource.uri", uri);
            }
        }
        _ => {}
    }
}

/// Marks the request span failed with `error_type` (a JSON-RPC error code, or a tool error's
/// own code).
pub(crate) fn record_error(span: &Span, error_type: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("error.type", error_type);
}

/// A `_meta` object as an OpenTelemetry carrier: `traceparent`, `tracestate` and `baggage` are
/// members of it, as headers are of an HTTP request.
#[cfg(feature = "opentelemetry")]
struct MetaCarrier<'a>(&'a Map<String, Value>);

#[cfg(feature = "opentelemetry")]
impl opentelemetry::propagation::Extractor for MetaCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Makes `span` a child of the trace `_meta` names, before it is ever entered (a parent cannot
/// be changed once the span has started).
#[cfg(feature = "opentelemetry")]
fn continue_trace(span: &Span, meta: &Map<String, Value>) {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if !meta.contains_key("traceparent") {
        return;
    }
    let context = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&MetaCarrier(meta))
    });
    // A malformed `traceparent` extracts no remote span: the request starts a trace of its own.
    if context.span().span_context().is_valid() {
        let _ = span.set_parent(context);
    }
}
