//! The runtime of the stateful tool kinds: what `#[tool(creates = E)]`, `#[tool(reads = E)]` and
//! `#[tool(mutates = E)]` run, and what a hand-written [`Tool`](crate::tools::Tool) can run the same
//! way.
//!
//! A stateful call goes through the same steps whichever way it was declared:
//!
//! 1. its arguments are decoded together with the JSON they came in ([`WithRaw`]), so the
//!    operation-id fingerprint covers the payload as sent ([`fingerprint`]);
//! 2. its preconditions are read: the version it is based on, by number or by a validator a
//!    result issued ([`ExpectedVersion`]), or a validator in `_meta`; an operation id no other
//!    anonymous caller can guess; a confirmation of a consequential change;
//! 3. the store runs the create, read or transition in its atomic boundary (see
//!    [`store`](crate::store));
//! 4. the outcome's validators are sealed, its state recorded in the request's span, and it is
//!    answered as a tool result whose `structuredContent` is the outcome ([`StatefulReply`]).
//!
//! What each stateful tool publishes in `tools/list` (its outcome union as the output schema,
//! its concurrency rules under [`STATE_META_KEY`](crate::protocol::framework::STATE_META_KEY))
//! is built by [`StatefulContract`].
//!
//! # A hand-written stateful tool
//!
//! ```
//! use std::marker::PhantomData;
//!
//! use mcp_tools::stateful::{self, ExpectedVersion, MutationSpec, StatefulReply, WithRaw};
//! use mcp_tools::store::{ConflictPolicy, Entity, Transition};
//! use mcp_tools::Context;
//! use mcp_tools::tools::{Tool, ToolInfo};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
//! #[entity(kind = "counter", prefix = "ctr")]
//! struct Counter {
//!     count: u64,
//! }
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct BumpArgs {
//!     counter_id: String,
//!     expected_version: Option<ExpectedVersion>,
//!     operation_id: String,
//! }
//!
//! struct Bump;
//!
//! impl Tool for Bump {
//!     type Args = WithRaw<BumpArgs>;
//!     type Output = StatefulReply;
//!
//!     fn info(&self) -> ToolInfo {
//!         ToolInfo::new("counter_bump", "Adds one to a counter.")
//!     }
//!
//!     fn entity_kind(&self) -> Option<&'static str> {
//!         Some(Counter::KIND)
//!     }
//!
//!     async fn call(&self, args: WithRaw<BumpArgs>, cx: Context) -> StatefulReply {
//!         let WithRaw { raw, args } = args;
//!         let spec = MutationSpec::<Counter> {
//!             tool: "counter_bump",
//!             arguments: &[],
//!             policy: ConflictPolicy::Reject,
//!             handle: args.counter_id,
//!             precondition: true,
//!             expected_version: args.expected_version,
//!             operation_id: Some(args.operation_id),
//!             resource: PhantomData,
//!         };
//!         let bump = Transition::typed(|counter: &mut Counter| {
//!             counter.count += 1;
//!             Ok::<_, String>(counter.count)
//!         });
//!         stateful::mutate(&cx, spec, &raw, bump).await
//!     }
//! }
//! ```

mod args;
pub(crate) mod bounds;
mod precondition;
mod published;
mod render;
mod run;
pub(crate) mod trace;

pub use args::{
    ExpectedVersion, Injected, MAX_VERSION, PayloadArgument, WithRaw, fingerprint, input_schema,
};
pub(crate) use precondition::is_unguessable;
pub use published::{PublishedPolicy, StatefulContract, ToolKind, no_domain_codes};
pub use run::{
    CreateSpec, MutationSpec, StepPartSpec, StepSpec, create, mutate, mutate_step, read,
    read_result, tool_error,
};

use schemars::SchemaGenerator;
use serde_json::Value;

use crate::protocol::content::CallToolResult;
use crate::protocol::reply::Reply;
use crate::tools::reply::IntoCallToolResult;

/// What a stateful call answers: the outcome as a tool result (successes already written as
/// JSON), or a request to confirm a change first. Return it from a hand-written
/// [`Tool`](crate::tools::Tool) as it is; publish the tool's output schema with
/// [`StatefulContract::mutation_schema`] or [`StatefulContract::read_schema`].
pub struct StatefulReply(pub(crate) Reply);

impl From<CallToolResult> for StatefulReply {
    fn from(result: CallToolResult) -> Self {
        StatefulReply(Reply::Complete(result))
    }
}

impl IntoCallToolResult for StatefulReply {
    /// None: a stateful tool's output schema depends on its entity and its codes, which the
    /// tool publishes itself (see [`StatefulContract`]).
    fn output_schema(_: &mut SchemaGenerator) -> Option<Value> {
        None
    }

    fn into_call_tool_result(self) -> CallToolResult {
        match self.0.into_result() {
            Ok(result) => result,
            Err(input) => input.into_call_tool_result(),
        }
    }

    fn into_reply(self) -> Reply {
        self.0
    }
}
