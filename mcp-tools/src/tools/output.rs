//! Conversion of a tool's return value into a [`CallToolResult`], with its output schema.

use schemars::{JsonSchema, SchemaGenerator};
use serde::Serialize;
use serde_json::Value;

use crate::tools::content::{CallToolResult, Content, IntoToolError};
#[doc(hidden)]
pub use crate::tools::input::Reply;

/// A value a tool may return.
///
/// Plain text and content blocks give content without an output schema; [`Structured`] gives
/// `structuredContent`, an output schema and a text mirror; `Result<T, E>` turns `Err` into an
/// `isError` result with a stable code.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be returned from a tool",
    label = "not a tool result",
    note = "return `String`, `Content`, `Vec<Content>`, `CallToolResult`, `Structured<T>` (T: Serialize + JsonSchema) or `Result` of one of these"
)]
pub trait IntoCallToolResult {
    /// The JSON Schema of the structured content on success, if this type produces any.
    fn output_schema(generator: &mut SchemaGenerator) -> Option<Value> {
        let _ = generator;
        None
    }

    /// Converts the value.
    fn into_call_tool_result(self) -> CallToolResult;

    /// Converts the value into a result or a request for client input. Only
    /// [`InputRequired`](crate::InputRequired) and [`ToolReply`](crate::ToolReply) ask for input.
    #[doc(hidden)]
    fn into_reply(self) -> Reply
    where
        Self: Sized,
    {
        Reply::Complete(self.into_call_tool_result())
    }
}

impl IntoCallToolResult for CallToolResult {
    fn into_call_tool_result(self) -> CallToolResult {
        self
    }
}

impl IntoCallToolResult for String {
    fn into_call_tool_result(self) -> CallToolResult {
        CallToolResult::text(self)
    }
}

impl IntoCallToolResult for &'static str {
    fn into_call_tool_result(self) -> CallToolResult {
        CallToolResult::text(self)
    }
}

impl IntoCallToolResult for Content {
    fn into_call_tool_result(self) -> CallToolResult {
        CallToolResult::success(vec![self])
    }
}

impl IntoCallToolResult for Vec<Content> {
    fn into_call_tool_result(self) -> CallToolResult {
        CallToolResult::success(self)
    }
}

impl<T: IntoCallToolResult, E: IntoToolError> IntoCallToolResult for Result<T, E> {
    fn output_schema(generator: &mut SchemaGenerator) -> Option<Value> {
        T::output_schema(generator)
    }

    fn into_call_tool_result(self) -> CallToolResult {
        match self {
            Ok(value) => value.into_call_tool_result(),
            Err(error) => error.into_tool_error().into_result(),
        }
    }

    fn into_reply(self) -> Reply {
        match self {
            Ok(value) => value.into_reply(),
            Err(error) => Reply::Complete(error.into_tool_error().into_result()),
        }
    }
}

/// Structured tool output: serialized into `structuredContent`, mirrored as JSON text, and
/// described by the tool's output schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Structured<T>(pub T);

impl<T: Serialize + JsonSchema> IntoCallToolResult for Structured<T> {
    fn output_schema(generator: &mut SchemaGenerator) -> Option<Value> {
        Some(generator.root_schema_for::<T>().to_value())
    }

    fn into_call_tool_result(self) -> CallToolResult {
        match serde_json::to_value(&self.0) {
            Ok(value) => CallToolResult::structured(value),
            Err(error) => crate::ToolError::output_not_serializable(error).into_result(),
        }
    }
}
