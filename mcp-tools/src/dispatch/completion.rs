//! `completion/complete`.

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use crate::completion::CompletionTarget;
use crate::context::Context;
use crate::protocol::error::RpcError;
use crate::server::{McpServer, Snapshot};

pub(super) fn complete(
    server: &McpServer,
    snapshot: &Snapshot,
    params: &Map<String, Value>,
    cx: &Context,
) -> Result<Bytes, RpcError> {
    let reference = params
        .get("ref")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            RpcError::invalid_params("`params.ref` must be a ref/prompt or ref/resource object")
        })?;
    let target = match (reference.get("type").and_then(Value::as_str), reference) {
        (Some("ref/prompt"), r) => match r.get("name").and_then(Value::as_str) {
            Some(name) if snapshot.offer.prompts.get(name).is_some() => {
                CompletionTarget::Prompt(name.to_owned())
            }
            Some(name) => {
                return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
            }
            None => return Err(RpcError::invalid_params("`ref.name` must be a string")),
        },
        (Some("ref/resource"), r) => match r.get("uri").and_then(Value::as_str) {
            Some(uri) => CompletionTarget::ResourceTemplate(uri.to_owned()),
            None => return Err(RpcError::invalid_params("`ref.uri` must be a string")),
        },
        _ => {
            return Err(RpcError::invalid_params(
                "`ref.type` must be \"ref/prompt\" or \"ref/resource\"",
            ));
        }
    };
    let argument = params.get("argument").and_then(Value::as_object);
    let (Some(name), Some(value)) = (
        argument.and_then(|a| a.get("name")).and_then(Value::as_str),
        argument
            .and_then(|a| a.get("value"))
            .and_then(Value::as_str),
    ) else {
        return Err(RpcError::invalid_params(
            "`params.argument` must have string `name` and `value`",
        ));
    };
    let context = params
        .get("context")
        .and_then(|c| c.get("arguments"))
        .cloned()
        .unwrap_or(Value::Null);
    let completion = snapshot
        .offer
        .completions
        .complete(&target, name, value, &context, cx);
    let mut result = Map::new();
    result.insert("completion".into(), json!(completion));
    Ok(server.shared.base.results.complete(result))
}
