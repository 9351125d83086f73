//! What a tool function may return, converted into a [`CallToolResult`] (or a request for
//! client input) with its output schema.

use schemars::{JsonSchema, SchemaGenerator};
use serde::Serialize;
use serde_json::Value;

use crate::protocol::content::{CallToolResult, Content};
use crate::protocol::framework::code;
use crate::protocol::input::InputRequired;
use crate::protocol::reply::Reply;
use crate::protocol::tool_error::{IntoToolError, ToolError};

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
    /// [`InputRequired`](crate::tools::InputRequired) and [`ToolReply`](crate::tools::ToolReply) ask for input.
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
            Err(error) => ToolError::output_not_serializable(error).into_result(),
        }
    }
}

/// What a tool produced: a result, or a request for input.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolReply<T> {
    /// The call is complete.
    Complete(T),
    /// The call needs input from the client first.
    InputRequired(InputRequired),
}

impl<T> From<T> for ToolReply<T> {
    fn from(complete: T) -> Self {
        ToolReply::Complete(complete)
    }
}

impl<T: IntoCallToolResult> IntoCallToolResult for ToolReply<T> {
    fn output_schema(generator: &mut schemars::SchemaGenerator) -> Option<Value> {
        T::output_schema(generator)
    }

    fn into_call_tool_result(self) -> CallToolResult {
        match self.into_reply().into_result() {
            Ok(result) => result,
            Err(_) => ToolError::new(
                code::INPUT_REQUIRED,
                "The tool needs input from the client, which this path cannot ask for",
            )
            .into_result(),
        }
    }

    fn into_reply(self) -> Reply {
        match self {
            ToolReply::Complete(value) => value.into_reply(),
            ToolReply::InputRequired(input) => Reply::InputRequired(input),
        }
    }
}

impl IntoCallToolResult for InputRequired {
    fn into_call_tool_result(self) -> CallToolResult {
        ToolReply::<CallToolResult>::InputRequired(self).into_call_tool_result()
    }

    fn into_reply(self) -> Reply {
        Reply::InputRequired(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, schemars::JsonSchema)]
    struct Point {
        x: i64,
    }

    #[test]
    fn a_reply_that_may_ask_for_input_publishes_the_schema_of_its_result() {
        let schema = <ToolReply<Structured<Point>> as IntoCallToolResult>::output_schema(
            &mut schemars::SchemaGenerator::default(),
        );
        assert!(schema.is_some());
        assert_eq!(
            schema,
            Structured::<Point>::output_schema(&mut schemars::SchemaGenerator::default())
        );
    }

    #[test]
    fn a_request_for_input_where_none_can_be_asked_is_an_error_result() {
        assert_eq!(
            ToolReply::Complete("done").into_call_tool_result(),
            CallToolResult::text("done")
        );
        let asked = InputRequired::new().list_roots("where");
        for result in [
            ToolReply::<&'static str>::InputRequired(asked.clone()).into_call_tool_result(),
            asked.into_call_tool_result(),
        ] {
            assert!(result.is_error);
            assert_eq!(
                result.structured_content.as_ref().unwrap()["code"],
                "INPUT_REQUIRED"
            );
        }
    }
}
