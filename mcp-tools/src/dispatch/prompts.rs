//! `prompts/get`.

use axum::body::Bytes;
use serde_json::{Map, Value};

use crate::context::Context;
use crate::protocol::error::RpcError;
use crate::server::{McpServer, Snapshot};

use super::Route;
use super::rounds::input_required;

pub(super) async fn get_prompt(
    server: &McpServer,
    snapshot: &Snapshot,
    params: &mut Map<String, Value>,
    cx: Context,
) -> Result<Bytes, RpcError> {
    // `resolve_target` checked the name and the arguments against this snapshot.
    let prompt = params
        .get("name")
        .and_then(Value::as_str)
        .and_then(|name| snapshot.offer.prompts.get(name))
        .expect("prompts/get resolves its prompt");
    let arguments = match params.get("arguments") {
        Some(Value::Object(arguments)) => arguments.clone(),
        _ => Map::new(),
    };
    let rendered = match prompt.get(arguments, cx.clone()).await? {
        crate::tools::reply::ToolReply::Complete(rendered) => rendered,
        crate::tools::reply::ToolReply::InputRequired(input) => {
            return input_required(server, Route::GetPrompt, params, &cx, input);
        }
    };
    let Value::Object(result) = serde_json::to_value(&rendered).expect("prompt results serialize")
    else {
        unreachable!("a prompt result serializes to an object")
    };
    Ok(server.shared.base.results.complete(result))
}
