//! Every name this framework adds to MCP, in one place: the codes of the tool errors it answers
//! with, and the `_meta` and input-request keys it reads and writes. A code or key is defined
//! here once; everything else names it from here, so [`code::is_framework`] cannot miss one.

/// Stable codes of the `isError` results the framework itself answers with: refusals of the
/// state boundary, argument and store failures, and the request paths' own errors. A tool's own
/// errors carry codes of their own (or [`code::TOOL_ERROR`] for a plain message).
pub mod code {
    /// Declares each code as a constant of its own name, and the list `is_framework` reads.
    macro_rules! framework_codes {
        ($($(#[$doc:meta])* $name:ident,)*) => {
            $($(#[$doc])* pub const $name: &str = stringify!($name);)*

            /// Every code the framework answers with, in declaration order.
            pub const ALL: &[&str] = &[$($name),*];
        };
    }

    framework_codes! {
        /// The caller's view is older than the resource.
        STALE_VIEW,
        /// An operation id was sent again with a different payload.
        OPERATION_ID_REUSED,
        /// The resource reached a terminal lifecycle state.
        TERMINAL,
        /// The resource outlived its time to live.
        EXPIRED,
        /// No such handle for this caller (unknown, or owned by another principal).
        NOT_FOUND,
        /// An earlier request with the same operation id is still running.
        OPERATION_IN_PROGRESS,
        /// Callers are not authenticated and share one ledger: an operation id must be a UUID (or
        /// as unguessable).
        GUESSABLE_OPERATION_ID,
        /// The resource's share of the operation-id ledger is full until its oldest records
        /// expire.
        LEDGER_FULL,
        /// The tool's own code panicked; the same request would panic again.
        TRANSITION_PANICKED,
        /// The validator sent as the precondition was not issued for this resource by this
        /// server.
        INVALID_VALIDATOR,
        /// Whoever was asked to confirm a change against the current state declined.
        NOT_CONFIRMED,
        /// The confirmation sent is not one this server issued for this request, or it expired.
        INVALID_CONFIRMATION,
        /// The caller's `expected_version` is one the resource never reached: it was not read.
        FUTURE_VERSION,
        /// The stored state cannot be read or written as the entity's type.
        INVALID_STATE,
        /// What the tool returned cannot be serialized.
        OUTPUT_NOT_SERIALIZABLE,
        /// The arguments do not match the tool's input schema, or do not decode.
        INVALID_ARGUMENTS,
        /// A tool needs application state the server was not given.
        MISSING_STATE,
        /// The state store failed; the same request may succeed when it is sent again.
        STORE_UNAVAILABLE,
        /// The tool asked for client input on a path that cannot ask for it.
        INPUT_REQUIRED,
        /// A task asked for input and ended before the input arrived.
        TASK_ENDED,
        /// A task asked for input that its client can no longer send.
        INPUT_UNAVAILABLE,
        /// A task asked for input its client's declared capabilities cannot answer.
        MISSING_CLIENT_CAPABILITY,
    }

    /// The code of a tool's own failure given as a plain message (a `String` or `&str` error):
    /// the tool's, not the framework's.
    pub const TOOL_ERROR: &str = "TOOL_ERROR";

    /// Whether the framework itself answers with `code` (rather than a tool's own error).
    pub fn is_framework(code: &str) -> bool {
        ALL.contains(&code)
    }
}

/// The `_meta` key under which `tools/list` publishes the OAuth scopes a tool requires.
pub const SCOPES_META_KEY: &str = "io.github.mcp-tools/scopes";

/// The `_meta` key under which `tools/list` publishes whether a tool runs as a task
/// (`"optional"` or `"required"`; absent for a tool that never does), so a client knows before
/// calling, and the contract file records it.
pub const TASK_SUPPORT_META_KEY: &str = "io.github.mcp-tools/task";

/// The `_meta` key under which `tools/list` publishes a stateful tool's concurrency rules: the
/// entity, the tool kind, the precondition and idempotency arguments, the conflict policy and
/// every code an outcome can carry, for a harness to act on without reading the description.
pub const STATE_META_KEY: &str = "io.github.mcp-tools/state";

/// The `_meta` key under which a trusted harness passes a validator in place of the
/// `expected_version` argument, so the model never types it.
pub const VALIDATOR_META_KEY: &str = "io.github.mcp-tools/validator";

/// The `_meta` key under which a client sends back the `confirmation` of a `stale_view`, once
/// whoever decided the change confirmed it.
pub const CONFIRMATION_META_KEY: &str = "io.github.mcp-tools/confirmation";

/// The key of the reconfirmation elicitation in `inputRequests` and `inputResponses`.
pub const RECONFIRM_INPUT_KEY: &str = "reconfirm";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_its_own_name_and_framework_codes_are_known() {
        for name in code::ALL {
            assert!(code::is_framework(name), "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
                "{name} is not UPPER_SNAKE_CASE"
            );
        }
        assert!(!code::is_framework(code::TOOL_ERROR));
        assert!(!code::is_framework("ROOM_TAKEN"));
    }

    #[test]
    fn the_framework_keys_live_under_its_own_prefix() {
        for key in [
            SCOPES_META_KEY,
            TASK_SUPPORT_META_KEY,
            STATE_META_KEY,
            VALIDATOR_META_KEY,
            CONFIRMATION_META_KEY,
        ] {
            assert!(key.starts_with("io.github.mcp-tools/"), "{key}");
        }
    }
}
