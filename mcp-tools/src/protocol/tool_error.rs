//! A tool-level failure with a stable code, and the conversion of domain errors into one.

use serde_json::{Map, Value};

use super::content::{CallToolResult, Content};
use super::framework::code;
use super::recovery::{DomainCode, Recovery};

/// A tool-level failure with a stable, machine-readable code.
///
/// It becomes a result with `isError: true` whose `structuredContent` is
/// `{"code": ..., "message": ..., "details"?: ...}` and whose text is the message, so a model reads
/// what went wrong and a program can branch on the code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    code: String,
    message: String,
    details: Option<Value>,
    recovery: Option<Recovery>,
}

impl ToolError {
    /// The code for arguments that do not match the input schema.
    pub const INVALID_ARGUMENTS: &'static str = code::INVALID_ARGUMENTS;
    /// The code used when a tool fails with a plain message.
    pub const TOOL_ERROR: &'static str = code::TOOL_ERROR;

    /// The tool's output cannot be written as a result.
    pub(crate) fn output_not_serializable(error: impl std::fmt::Display) -> ToolError {
        ToolError::new(
            code::OUTPUT_NOT_SERIALIZABLE,
            format!("The tool produced output that cannot be serialized: {error}"),
        )
    }

    /// An error with a code (conventionally `UPPER_SNAKE_CASE`) and a message for the model.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
            details: None,
            recovery: None,
        }
    }

    /// Says what the caller should do next; stateful tools publish it as the outcome's
    /// `recovery`.
    pub fn with_recovery(mut self, recovery: Recovery) -> Self {
        self.recovery = Some(recovery);
        self
    }

    /// What the caller should do next, if the error says.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// Attaches structured details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The message for the model.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Structured details, if any.
    pub fn details(&self) -> Option<&Value> {
        self.details.as_ref()
    }

    /// The `isError` result this error becomes.
    pub fn into_result(self) -> CallToolResult {
        let mut structured = Map::new();
        structured.insert("code".into(), Value::String(self.code));
        structured.insert("message".into(), Value::String(self.message.clone()));
        if let Some(details) = self.details {
            structured.insert("details".into(), details);
        }
        let mut text = self.message;
        if let Some(recovery) = self.recovery {
            structured.insert(
                "recovery".into(),
                Value::String(recovery.as_str().to_owned()),
            );
            let stop = if text.trim_end().ends_with(['.', '!', '?']) {
                ""
            } else {
                "."
            };
            text = format!("{}{stop} {}", text.trim_end(), recovery.instruction());
        }
        CallToolResult {
            content: vec![Content::text(text)],
            structured_content: Some(Value::Object(structured)),
            is_error: true,
            meta: None,
        }
    }

    /// The JSON Schema of the structured error payload, shared by every tool's output schema.
    pub(crate) fn schema() -> Value {
        serde_json::json!({
            "type": "object",
            "description": "A tool-level error: branch on `code`, show `message`.",
            "properties": {
                "code": { "type": "string", "description": "Stable machine-readable error code." },
                "message": { "type": "string", "description": "What went wrong and how to fix it." },
                "details": { "description": "Optional structured details." },
                "recovery": { "type": "string", "description": "What to do next, when the error says." }
            },
            "required": ["code", "message"],
            "additionalProperties": false
        })
    }
}

/// Conversion of a domain error into a [`ToolError`]: implement it to choose stable codes.
pub trait IntoToolError {
    /// Converts `self`.
    fn into_tool_error(self) -> ToolError;

    /// Every code a value of this type can convert to, when the type declares them: a stateful
    /// tool whose error type declares its codes publishes exactly those in its output schema.
    /// `None` (the default) leaves the set open. `#[derive(IntoToolError)]` declares them.
    fn declared_codes() -> Option<&'static [DomainCode]>
    where
        Self: Sized,
    {
        None
    }
}

impl IntoToolError for ToolError {
    fn into_tool_error(self) -> ToolError {
        self
    }
}

impl IntoToolError for String {
    fn into_tool_error(self) -> ToolError {
        ToolError::new(ToolError::TOOL_ERROR, self)
    }
}

impl IntoToolError for &str {
    fn into_tool_error(self) -> ToolError {
        ToolError::new(ToolError::TOOL_ERROR, self)
    }
}
