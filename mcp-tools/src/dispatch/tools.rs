//! `tools/call`: validate the arguments, run the tool, and shape its reply as a result.

use axum::body::Bytes;
use serde_json::{Map, Value};

use crate::context::Context;
use crate::protocol::content::{CallToolResult, Content};
use crate::protocol::error::RpcError;
use crate::protocol::reply::Rendered;
use crate::protocol::reply::Reply;
use crate::server::McpServer;
use crate::tools::set::CompiledTool;

use super::Route;
use super::rounds::input_required;

/// Runs a tool. A legacy client cannot be asked for input without a session, so there a
/// tool that asks for input gets an error result saying so.
pub(super) async fn call_tool(
    server: &McpServer,
    tool: &CompiledTool,
    params: &mut Map<String, Value>,
    cx: Context,
    legacy: bool,
) -> Result<Bytes, RpcError> {
    let empty = Value::Object(Map::new());
    let arguments = match params.get("arguments") {
        Some(arguments @ Value::Object(_)) => arguments,
        // `resolve_target` admitted only an object, `null` or nothing.
        _ => &empty,
    };
    let result = match tool.call(arguments, cx.clone()).await {
        Reply::Complete(result) => result,
        Reply::Rendered(rendered) => return Ok(serialize_rendered(server, &rendered)),
        Reply::InputRequired(input) if !legacy => {
            return input_required(server, Route::CallTool, params, &cx, input);
        }
        Reply::InputRequired(_) => crate::protocol::tool_error::ToolError::new(
            crate::protocol::framework::code::INPUT_REQUIRED,
            "This tool needs input from the client, which protocol 2025-11-25 can only ask for within a session; connect with protocol 2026-07-28",
        )
        .into_result(),
    };
    if result.is_error {
        let code = result
            .structured_content
            .as_ref()
            .and_then(|structured| structured.get("code"))
            .and_then(Value::as_str)
            .unwrap_or("tool_error");
        super::trace::record_error(&tracing::Span::current(), code);
    }
    Ok(serialize_call_result(server, &result))
}

pub(super) fn serialize_call_result(server: &McpServer, result: &CallToolResult) -> Bytes {
    let content = Content::size_hint(&result.content);
    // Structured content, when there is some, mostly restates the text.
    let structured = match result.structured_content {
        Some(_) => content,
        None => 0,
    };
    server.shared.base.results.call_tool(
        &result.content,
        result.structured_content.as_ref(),
        result.is_error,
        result.meta.as_ref(),
        content + structured,
    )
}

pub(super) fn serialize_rendered(server: &McpServer, rendered: &Rendered) -> Bytes {
    server.shared.base.results.call_tool(
        &rendered.content,
        Some(&*rendered.structured),
        false,
        None,
        Content::size_hint(&rendered.content) + rendered.structured.get().len(),
    )
}
