//! What a stateful call records in its request's span: which state it acted on, at which version,
//! and how it ended.

use crate::auth::Principal;
use crate::context::Context;
use crate::store::MutationOutcome;

/// The names of the state fields of a request's span: the span declares them empty
/// (`dispatch/trace.rs`), a stateful call records them.
pub(crate) mod field {
    /// The handle the call acted on, where callers are authenticated.
    pub(crate) const HANDLE: &str = "mcp_tools.state.handle";
    /// A keyed digest of the handle, where callers are anonymous and a handle is a capability.
    pub(crate) const HANDLE_DIGEST: &str = "mcp_tools.state.handle_digest";
    /// The version the caller based the call on.
    pub(crate) const EXPECTED_VERSION: &str = "mcp_tools.state.expected_version";
    /// The version the call ended at.
    pub(crate) const VERSION: &str = "mcp_tools.state.version";
    /// How the call ended: `applied`, `stale_view`, `replayed`, `rejected`, `current`, ...
    pub(crate) const OUTCOME: &str = "mcp_tools.state.outcome";
}

/// Records which state a stateful call acted on into the request's span (declared in
/// `dispatch/trace.rs`): the handle, the version the caller expected, the version it ended at
/// and the outcome. Where callers are anonymous a handle is a bearer capability, so the span
/// gets a keyed digest of it instead (the same on every replica sharing the signing key).
pub(super) fn record_state(
    cx: &Context,
    handle: Option<&str>,
    expected: Option<u64>,
    outcome: &MutationOutcome,
) {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    let version = match outcome {
        MutationOutcome::Applied(applied) => Some(applied.version),
        MutationOutcome::StaleView(stale) => Some(stale.current_version),
        MutationOutcome::Replayed(replayed) => replayed.current.as_ref().map(|now| now.version),
        MutationOutcome::Rejected(_) => None,
    };
    let label = match outcome {
        MutationOutcome::Applied(_) => "applied",
        MutationOutcome::StaleView(_) => "stale_view",
        MutationOutcome::Replayed(_) => "replayed",
        MutationOutcome::Rejected(_) => "rejected",
    };
    record_fields(
        cx,
        &span,
        handle.or(outcome.committed_handle()),
        expected,
        version,
        label,
    );
}

pub(super) fn record_fields(
    cx: &Context,
    span: &tracing::Span,
    handle: Option<&str>,
    expected: Option<u64>,
    version: Option<u64>,
    outcome: &str,
) {
    if let Some(handle) = handle {
        match (cx.principal(), cx.seal()) {
            (Principal::Anonymous, Some(seal)) => {
                span.record(field::HANDLE_DIGEST, seal.trace_digest(handle));
            }
            (Principal::Anonymous, None) => {}
            (Principal::Subject(_), _) => {
                span.record(field::HANDLE, handle);
            }
        }
    }
    if let Some(expected) = expected {
        span.record(field::EXPECTED_VERSION, expected);
    }
    if let Some(version) = version {
        span.record(field::VERSION, version);
    }
    span.record(field::OUTCOME, outcome);
}
