//! Support for the code `#[tool]` generates. Not public API: no stability guarantees.

pub use schemars;
pub use serde;
pub use serde_json;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::store::collection::Items;
pub use crate::store::entity::{view_json, view_schema};
pub use crate::tools::extract::FromContext;

/// The bounds the stateful tool kinds (`creates`, `reads`, `mutates`) assert.
pub mod stateful {
    pub use crate::stateful::bounds::*;
}

/// Holds for every type a `#[tool]` parameter may have.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool parameter",
    label = "this parameter's type must implement `Deserialize` and `JsonSchema`",
    note = "add `#[derive(serde::Deserialize, schemars::JsonSchema)]` to the type, or use a type that has both",
    note = "parameters of type `Context`, `&Context` and `State<T>` are taken from the request instead"
)]
pub trait ToolParameter {}

impl<T: DeserializeOwned + JsonSchema> ToolParameter for T {}

/// Holds for every type a `#[tool]` function may return as structured output.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be returned from a tool",
    label = "the return type must implement `Serialize` and `JsonSchema`",
    note = "add `#[derive(serde::Serialize, schemars::JsonSchema)]` to the type, or return `String`, `Content`, `Vec<Content>` or `CallToolResult`"
)]
pub trait ToolOutput {}

impl<T: Serialize + JsonSchema> ToolOutput for T {}

/// Holds for every error type a `#[tool]` function may return in `Result<_, E>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool error",
    label = "the error type must implement `IntoToolError`",
    note = "implement `mcp_tools::IntoToolError` (or `#[derive(mcp_tools::IntoToolError)]`) to choose stable codes, or return `ToolError` or `String`"
)]
pub trait ToolErrorType {}

impl<E: crate::protocol::tool_error::IntoToolError> ToolErrorType for E {}

/// Compile-time assertion, spanned at a parameter by the generated code.
pub const fn assert_parameter<T: ToolParameter + ?Sized>() {}

/// Compile-time assertion, spanned at the return type by the generated code.
pub const fn assert_output<T: ToolOutput + ?Sized>() {}

/// Compile-time assertion, spanned at the error type by the generated code.
pub const fn assert_error<T: ToolErrorType + ?Sized>() {}

pub use crate::tools::arguments_schema as input_schema;

/// What a generated tool returns: the user's value already converted, so a request for client
/// input survives the conversion.
pub struct Outcome(pub crate::protocol::reply::Reply);

impl From<crate::protocol::content::CallToolResult> for Outcome {
    fn from(result: crate::protocol::content::CallToolResult) -> Self {
        Outcome(crate::protocol::reply::Reply::Complete(result))
    }
}

impl crate::tools::IntoCallToolResult for Outcome {
    fn into_call_tool_result(self) -> crate::protocol::content::CallToolResult {
        match self.0.into_result() {
            Ok(result) => result,
            Err(input) => input.into_call_tool_result(),
        }
    }

    fn into_reply(self) -> crate::protocol::reply::Reply {
        self.0
    }
}
