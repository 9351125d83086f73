//! `resources/read`.

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::protocol::error::RpcError;
use crate::server::{McpServer, Snapshot};

pub(super) async fn read_resource(
    server: &McpServer,
    snapshot: &Snapshot,
    params: &Map<String, Value>,
    cx: Context,
) -> Result<Bytes, RpcError> {
    let Some(Value::String(uri)) = params.get("uri") else {
        return Err(RpcError::invalid_params("`params.uri` must be a string"));
    };
    let not_found = || {
        RpcError::invalid_params(format!("Resource not found: {uri}"))
            .with_data(json!({ "uri": uri }))
    };
    let read = snapshot
        .offer
        .resources
        .read(uri, cx)
        .ok_or_else(not_found)?;
    let contents = read.await?;
    if contents.is_empty() {
        return Err(not_found());
    }
    let mut result = Map::new();
    result.insert("contents".into(), json!(contents));
    Ok(Bytes::from(
        server.shared.base.results.cacheable(result).to_string(),
    ))
}
