//! What a tool call produced, as the request path carries it: a result, a successful result
//! already written as JSON, or a request for client input.

use serde::Serialize;
use serde_json::value::RawValue;

use super::content::{CallToolResult, Content};
use super::input::InputRequired;
use super::tool_error::ToolError;

/// The type-erased form the request path handles.
#[doc(hidden)]
pub enum Reply {
    /// A result.
    Complete(CallToolResult),
    /// A successful result already written as JSON.
    Rendered(Rendered),
    /// A request for input.
    InputRequired(InputRequired),
}

impl Reply {
    /// The result as a [`CallToolResult`], or the request for input.
    pub(crate) fn into_result(self) -> Result<CallToolResult, InputRequired> {
        match self {
            Reply::Complete(result) => Ok(result),
            Reply::Rendered(rendered) => Ok(rendered.into_call_tool_result()),
            Reply::InputRequired(input) => Err(input),
        }
    }
}

/// A successful result whose structured content was written as JSON text straight from typed
/// values: the request path copies it into the response as it is, where a [`CallToolResult`]'s
/// structured content would be built as a JSON tree, serialized, then dropped.
#[doc(hidden)]
#[derive(Debug)]
pub struct Rendered {
    pub(crate) content: Vec<Content>,
    pub(crate) structured: Box<RawValue>,
}

impl Rendered {
    /// One text block and `structured`, serialized now.
    pub(crate) fn new(
        text: String,
        structured: &impl Serialize,
    ) -> Result<Self, serde_json::Error> {
        Ok(Rendered {
            content: vec![Content::text(text)],
            structured: serde_json::value::to_raw_value(structured)?,
        })
    }

    /// The same result as a [`CallToolResult`], for the paths that keep or inspect results
    /// (task results, in-process calls). Output nested deeper than a JSON value may be (128
    /// levels) is answered as an error, as a stateless tool's would be, never kept without its
    /// structured content.
    pub(crate) fn into_call_tool_result(self) -> CallToolResult {
        match serde_json::from_str(self.structured.get()) {
            Ok(structured) => CallToolResult {
                content: self.content,
                structured_content: Some(structured),
                is_error: false,
                meta: None,
            },
            Err(error) => ToolError::output_not_serializable(error).into_result(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A rendered result comes back whole, or as an error: never without its structured content.
    #[test]
    fn a_rendered_result_converts_back_whole_or_as_an_error() {
        let shallow = json!({ "outcome": "current", "state": { "notes": ["a"] } });
        let back = Rendered::new("read".into(), &shallow)
            .unwrap()
            .into_call_tool_result();
        assert_eq!(
            back,
            CallToolResult {
                content: vec![Content::text("read")],
                structured_content: Some(shallow),
                is_error: false,
                meta: None,
            }
        );

        let mut deep = json!(1);
        for _ in 0..200 {
            deep = Value::Array(vec![deep]);
        }
        let back = Rendered::new("read".into(), &deep)
            .unwrap()
            .into_call_tool_result();
        assert!(back.is_error);
        let structured = back
            .structured_content
            .expect("an error result is structured");
        assert_eq!(structured["code"], "OUTPUT_NOT_SERIALIZABLE");
    }
}
