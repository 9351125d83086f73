//! `server/discover` and the `*/list` methods: answers serialized once per catalog snapshot, page
//! by page, so a request only picks one.

use axum::body::Bytes;
use serde_json::{Map, Value};

use crate::protocol::error::RpcError;
use crate::server::{Listing, McpServer};

pub(super) fn page(
    server: &McpServer,
    listing: &Listing,
    params: &Map<String, Value>,
) -> Result<Bytes, RpcError> {
    let page = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => server
            .shared
            .base
            .seal
            .open_cursor(listing.kind, cursor, listing.fingerprint)
            .map_err(|e| RpcError::invalid_params(format!("Invalid cursor: {e}")))?
            as usize,
        Some(_) => return Err(RpcError::invalid_params("`params.cursor` must be a string")),
    };
    listing
        .pages
        .get(page)
        .cloned()
        .ok_or_else(|| RpcError::invalid_params("Invalid cursor: past the end of the listing"))
}
