//! Request spans as an OpenTelemetry exporter sees them (feature `opentelemetry`): real HTTP,
//! a `tracing-opentelemetry` layer and an in-memory exporter. Each request is one server span
//! named and attributed as the semantic conventions for MCP say, continuing the caller's trace
//! from `_meta`, and a stateful call records which state it acted on.

#[path = "../examples/support/basket.rs"]
mod basket;
mod common;

use std::collections::HashMap;

use common::{Call, TestServer, within};
use mcp_tools::store::{
    Claim, ClaimedEffect, CreateRequest, EffectStatus, MutationOutcome, MutationRequest, Outbox,
    PruneReport, ReadOutcome, ReadRequest, Settlement, Store, StoreError, StoreFuture, Transition,
};
use mcp_tools::store::{StepOutcome, StepRequest, StepTransition};
use mcp_tools::tasks::{TaskChange, TaskInsert, TaskRecord, TaskStore};
use mcp_tools::{McpServer, MemoryStore};
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// Spans of this test's own thread: a current-thread runtime runs the server, its connections
/// and the client on the thread the subscriber is the default of.
struct Exported {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Exported {
    fn install() -> Exported {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("tests"));
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new("mcp_tools=debug"))
            .with(layer);
        Exported {
            exporter,
            _provider: provider,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The one exported span named `name`.
    fn span(&self, name: &str) -> SpanData {
        let spans = self.exporter.get_finished_spans().unwrap();
        let mut named: Vec<SpanData> = spans.into_iter().filter(|s| s.name == name).collect();
        assert_eq!(named.len(), 1, "one span named {name}");
        named.remove(0)
    }

    fn reset(&self) {
        self.exporter.reset();
    }
}

fn attributes(span: &SpanData) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect()
}

async fn tools_server() -> TestServer {
    let server = McpServer::builder("traced", "0.0.0")
        .tools(common::tools::tool_set(0))
        .build()
        .unwrap();
    TestServer::start(server).await
}

async fn basket_server(authenticated: bool) -> TestServer {
    let mut builder = McpServer::builder("traced", "0.0.0")
        .tools(basket::tool_set())
        .store(MemoryStore::default());
    if authenticated {
        builder = builder.authenticate(common::tools::bearer_subject);
    }
    TestServer::start(builder.build().unwrap()).await
}

fn traceparent() -> Value {
    json!(format!("00-{TRACE_ID}-{PARENT_ID}-01"))
}

#[tokio::test(flavor = "current_thread")]
async fn a_tool_call_continues_the_trace_its_meta_names() {
    let exported = Exported::install();
    let server = tools_server().await;
    let reply = within(
        "a traced call",
        Call::call_tool("echo", json!({"text": "hi"}))
            .meta("traceparent", traceparent())
            .meta("tracestate", json!("vendor=1"))
            .send(&server),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let span = exported.span("tools/call echo");
    assert_eq!(span.span_context.trace_id().to_string(), TRACE_ID);
    assert_eq!(span.parent_span_id.to_string(), PARENT_ID);
    assert_eq!(span.span_kind, SpanKind::Server);
    assert_eq!(span.status, Status::Unset);
    let attributes = attributes(&span);
    assert_eq!(attributes["mcp.method.name"], "tools/call");
    assert_eq!(attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(attributes["gen_ai.tool.name"], "echo");
    assert_eq!(attributes["mcp.protocol.version"], "2026-07-28");
    assert_eq!(attributes["jsonrpc.request.id"], "7");
    assert!(!attributes.contains_key("error.type"));
}

#[tokio::test(flavor = "current_thread")]
async fn without_a_valid_traceparent_a_request_starts_its_own_trace() {
    let exported = Exported::install();
    let server = tools_server().await;
    for traceparent in [None, Some(json!("00-not-a-trace-01")), Some(json!(7))] {
        exported.reset();
        let mut call = Call::discover();
        if let Some(traceparent) = traceparent.clone() {
            call = call.meta("traceparent", traceparent);
        }
        let reply = within("an untraced request", call.send(&server)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let span = exported.span("server/discover");
        assert_ne!(
            span.span_context.trace_id().to_string(),
            TRACE_ID,
            "{traceparent:?}"
        );
        assert_eq!(
            span.parent_span_id,
            opentelemetry::trace::SpanId::INVALID,
            "a root span for {traceparent:?}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn errors_mark_the_span_failed_with_their_type() {
    let exported = Exported::install();
    let server = tools_server().await;
    let reply = within(
        "an unknown tool",
        Call::call_tool("nope", json!({})).send(&server),
    )
    .await;
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.text);
    let span = exported.span("tools/call nope");
    assert!(
        matches!(span.status, Status::Error { .. }),
        "{:?}",
        span.status
    );
    assert_eq!(attributes(&span)["error.type"], "-32602");

    exported.reset();
    let reply = within(
        "a tool error",
        Call::call_tool("math/divide", json!({"a": 1, "b": 0})).send(&server),
    )
    .await;
    assert_eq!(reply.result()["isError"], true, "{}", reply.text);
    let span = exported.span("tools/call math/divide");
    assert!(matches!(span.status, Status::Error { .. }));
    assert_eq!(attributes(&span)["error.type"], "DIVISION_BY_ZERO");
}

/// The handle, the expected and resulting versions and the outcome, per call.
fn state_of(span: &SpanData) -> (Option<String>, Option<String>, Option<String>, String) {
    let attributes = attributes(span);
    (
        attributes.get("mcp_tools.state.handle").cloned(),
        attributes.get("mcp_tools.state.handle_digest").cloned(),
        attributes.get("mcp_tools.state.expected_version").cloned(),
        attributes["mcp_tools.state.outcome"].clone(),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn a_stateful_call_records_the_state_it_acted_on_and_never_an_anonymous_handle() {
    let exported = Exported::install();
    let server = basket_server(false).await;
    let created = within(
        "a create",
        Call::call_tool(
            "basket_create",
            json!({"operation_id": "6f1e2d3c-4b5a-4968-8776-5a4b3c2d1e0f"}),
        )
        .send(&server),
    )
    .await
    .result();
    let handle = created["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    let span = exported.span("tools/call basket_create");
    let (plain, digest, _, outcome) = state_of(&span);
    assert_eq!(outcome, "applied");
    assert_eq!(plain, None, "an anonymous handle is a bearer capability");
    let digest = digest.expect("a digest of the handle");
    assert_eq!(digest.len(), 16);
    assert!(!digest.contains(&handle));
    assert_eq!(attributes(&span)["mcp_tools.state.version"], "1");

    for (expected, outcome) in [(1, "applied"), (1, "stale_view")] {
        exported.reset();
        let arguments = json!({
            "basket_id": handle,
            "expected_version": expected,
            "operation_id": format!("{outcome}-0000-4000-8000-000000000000"),
            "memory_gib": 32,
        });
        within(
            "an upgrade",
            Call::call_tool("basket_upgrade_memory", arguments).send(&server),
        )
        .await;
        let span = exported.span("tools/call basket_upgrade_memory");
        let (plain, same_digest, expected_version, recorded) = state_of(&span);
        assert_eq!(recorded, outcome);
        assert_eq!(plain, None);
        assert_eq!(
            same_digest.as_deref(),
            Some(digest.as_str()),
            "one resource, one digest"
        );
        assert_eq!(expected_version.as_deref(), Some("1"));
        assert_eq!(attributes(&span)["mcp_tools.state.version"], "2");
        if outcome == "stale_view" {
            assert!(matches!(span.status, Status::Error { .. }));
            assert_eq!(attributes(&span)["error.type"], "STALE_VIEW");
        }
    }
    for span in exported.exporter.get_finished_spans().unwrap() {
        for kv in &span.attributes {
            assert!(!kv.value.to_string().contains(&handle), "{kv:?}");
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_authenticated_callers_handle_is_recorded_as_it_is() {
    let exported = Exported::install();
    let server = basket_server(true).await;
    let created = within(
        "a create",
        Call::call_tool("basket_create", json!({"operation_id": "create-by-alice"}))
            .header("authorization", "Bearer alice")
            .send(&server),
    )
    .await
    .result();
    let handle = created["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    exported.reset();
    within(
        "a read",
        Call::call_tool("basket_get", json!({"basket_id": handle}))
            .header("authorization", "Bearer alice")
            .send(&server),
    )
    .await;
    let span = exported.span("tools/call basket_get");
    let (plain, digest, _, outcome) = state_of(&span);
    assert_eq!(plain.as_deref(), Some(handle.as_str()));
    assert_eq!(digest, None);
    assert_eq!(outcome, "current");
    assert_eq!(attributes(&span)["mcp_tools.state.version"], "1");
}

/// A store whose backend refuses every call with one cause.
struct Refusing;

impl Refusing {
    const CAUSE: &str = "the disk holding the database is full";

    fn refuse<T: Send + 'static>(&self) -> StoreFuture<'static, T> {
        Box::pin(std::future::ready(Err(StoreError::Backend(
            Self::CAUSE.into(),
        ))))
    }
}

impl Store for Refusing {
    fn create<'a>(&'a self, _: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome> {
        self.refuse()
    }

    fn read(&self, _: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        self.refuse()
    }

    fn mutate(&self, _: MutationRequest, _: Transition) -> StoreFuture<'_, MutationOutcome> {
        self.refuse()
    }

    fn mutate_step(&self, _: StepRequest, _: StepTransition) -> StoreFuture<'_, StepOutcome> {
        self.refuse()
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        self.refuse()
    }
}

impl Outbox for Refusing {
    fn claim_effects(&self, claim: Claim) -> StoreFuture<'_, Vec<ClaimedEffect>> {
        let _ = claim;
        self.refuse()
    }

    fn settle_effect<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        settlement: Settlement,
    ) -> StoreFuture<'a, bool> {
        let _ = (key, owner, settlement);
        self.refuse()
    }

    fn effect_statuses<'a>(
        &'a self,
        handle: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<EffectStatus>> {
        let _ = (handle, limit);
        self.refuse()
    }

    fn outbox_signal(&self) -> std::sync::Arc<tokio::sync::Notify> {
        std::sync::Arc::default()
    }
}

impl TaskStore for Refusing {
    fn insert_task(&self, _: TaskRecord) -> StoreFuture<'_, TaskInsert> {
        self.refuse()
    }

    fn load_task<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.refuse()
    }

    fn update_task<'a>(&'a self, _: &'a str, _: TaskChange) -> StoreFuture<'a, Option<TaskRecord>> {
        self.refuse()
    }

    fn purge_tasks(&self, _: u64) -> StoreFuture<'_, u64> {
        self.refuse()
    }
}

/// The model is told only to retry; the span of the call carries the cause for the operator.
#[tokio::test(flavor = "current_thread")]
async fn a_store_failure_is_answered_store_unavailable_and_its_cause_logged_in_the_span() {
    let exported = Exported::install();
    let server = McpServer::builder("traced", "0.0.0")
        .tools(basket::tool_set())
        .store(Refusing)
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let result = within(
        "a create on a failing store",
        Call::call_tool(
            "basket_create",
            json!({"operation_id": "0b1e2d3c-4b5a-4968-8776-5a4b3c2d1e0f"}),
        )
        .send(&server),
    )
    .await
    .result();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["code"], "STORE_UNAVAILABLE");
    assert!(
        !result.to_string().contains(Refusing::CAUSE),
        "the backend's cause is for the operator, not the model: {result}"
    );
    let span = exported.span("tools/call basket_create");
    assert_eq!(attributes(&span)["error.type"], "STORE_UNAVAILABLE");
    let logged: Vec<String> = span
        .events
        .iter()
        .flat_map(|event| event.attributes.iter().map(|kv| kv.value.to_string()))
        .collect();
    assert!(
        logged.iter().any(|value| value.contains(Refusing::CAUSE)),
        "the span's events name the cause: {logged:?}"
    );
}
