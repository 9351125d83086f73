//! The transport-independent request path: `_meta`, version and header checks in the order the
//! protocol pins, then the method handlers. HTTP and the in-process test client both use it.

use axum::body::Bytes;
use http::HeaderMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::RpcError;
use crate::content::{CallToolResult, Content};
use crate::context::{Context, Principal};
use crate::headers::require_equal;
use crate::protocol::{
    Envelope, REMOVED_METHODS, RequestId, RequestMeta, SUPPORTED_VERSIONS, headers,
};
use crate::server::McpServer;

/// Where a message came from: HTTP carries routing headers that must agree with the body.
#[derive(Clone, Copy)]
pub(crate) enum Transport<'a> {
    Http(&'a HeaderMap),
    InProcess,
}

/// What the request path produced.
pub(crate) enum Outcome {
    /// A notification was accepted; nothing to answer.
    Accepted,
    /// A result, serialized.
    Result { id: RequestId, result: Bytes },
    /// An error, carrying the id it answers.
    Error(RpcError),
}

impl Outcome {
    /// A short label for logs.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Result { .. } => "ok",
            Outcome::Error(_) => "error",
        }
    }
}

#[derive(Clone, Copy)]
enum Route {
    Discover,
    ListTools,
    CallTool,
}

impl McpServer {
    fn route(&self, method: &str) -> Option<Route> {
        let has_tools = !self.shared.catalog.tools.is_empty();
        match method {
            "server/discover" => Some(Route::Discover),
            "tools/list" if has_tools => Some(Route::ListTools),
            "tools/call" if has_tools => Some(Route::CallTool),
            _ => None,
        }
    }

    /// Serves one parsed message.
    pub(crate) async fn handle(
        &self,
        envelope: Envelope,
        transport: Transport<'_>,
        principal: Principal,
    ) -> Outcome {
        let Envelope {
            id,
            method,
            mut params,
        } = envelope;
        let Some(id) = id else {
            // Notifications carry nothing this server acts on in 2026-07-28; accept and drop.
            return Outcome::Accepted;
        };
        match self
            .serve_request(&id, method, params.as_mut(), transport, principal)
            .await
        {
            Ok(result) => Outcome::Result { id, result },
            Err(error) => Outcome::Error(error.with_id(Some(id))),
        }
    }

    async fn serve_request(
        &self,
        id: &RequestId,
        method: String,
        mut params: Option<&mut Map<String, Value>>,
        transport: Transport<'_>,
        principal: Principal,
    ) -> Result<Bytes, RpcError> {
        let meta = RequestMeta::take_from(params.as_deref_mut())?;
        let params = params.expect("take_from rejects a request without params");
        if let Transport::Http(headers) = transport {
            require_equal(
                headers,
                headers::PROTOCOL_VERSION,
                "MCP-Protocol-Version",
                &meta.protocol_version,
            )?;
        }
        if !SUPPORTED_VERSIONS.contains(&meta.protocol_version.as_str()) {
            return Err(RpcError::unsupported_version(
                &meta.protocol_version,
                SUPPORTED_VERSIONS,
            ));
        }
        if let Transport::Http(headers) = transport {
            require_equal(headers, headers::METHOD, "Mcp-Method", &method)?;
            if let Some(field) = named_target(&method) {
                let Some(Value::String(target)) = params.get(field) else {
                    return Err(RpcError::invalid_params(format!(
                        "`params.{field}` must be a string"
                    )));
                };
                require_equal(headers, headers::NAME, "Mcp-Name", target)?;
            }
        }
        let route = match self.route(&method) {
            Some(route) => route,
            None if REMOVED_METHODS.contains(&method.as_str()) => {
                return Err(RpcError::method_not_found(&method).with_data(serde_json::json!({
                    "reason": "Removed in protocol revision 2026-07-28: requests are self-describing and need no handshake"
                })));
            }
            None => return Err(RpcError::method_not_found(&method)),
        };
        tracing::Span::current().record("id", tracing::field::display(id));
        match route {
            Route::Discover => Ok(self.shared.discover.clone()),
            Route::ListTools => self.list_tools(params),
            Route::CallTool => {
                let cx = Context::new(
                    Some(id.clone()),
                    method,
                    meta,
                    principal,
                    self.shared.state.clone(),
                );
                self.call_tool(params, cx).await
            }
        }
    }

    fn list_tools(&self, params: &Map<String, Value>) -> Result<Bytes, RpcError> {
        let page = match params.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(Value::String(cursor)) => self
                .shared
                .cursors
                .decode("tools/list", cursor, self.shared.tools_fingerprint)
                .map_err(|e| RpcError::invalid_params(format!("Invalid cursor: {e}")))?
                as usize,
            Some(_) => return Err(RpcError::invalid_params("`params.cursor` must be a string")),
        };
        self.shared
            .tool_pages
            .get(page)
            .cloned()
            .ok_or_else(|| RpcError::invalid_params("Invalid cursor: past the end of the listing"))
    }

    async fn call_tool(
        &self,
        params: &mut Map<String, Value>,
        cx: Context,
    ) -> Result<Bytes, RpcError> {
        let Some(Value::String(name)) = params.get("name") else {
            return Err(RpcError::invalid_params("`params.name` must be a string"));
        };
        let Some(tool) = self.shared.catalog.get(name) else {
            return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
        };
        tracing::Span::current().record("tool", name.as_str());
        let arguments = match params.remove("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(arguments @ Value::Object(_)) => arguments,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "`params.arguments` must be an object",
                ));
            }
        };
        let result = tool.call(arguments, cx).await;
        Ok(self.serialize_call_result(&result))
    }

    fn serialize_call_result(&self, result: &CallToolResult) -> Bytes {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            result_type: &'static str,
            content: &'a [Content],
            #[serde(skip_serializing_if = "Option::is_none")]
            structured_content: Option<&'a Value>,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            is_error: bool,
            #[serde(rename = "_meta")]
            meta: &'a RawValue,
        }
        let merged;
        let meta: &RawValue = match &result.meta {
            None => &self.shared.server_meta,
            Some(tool_meta) => {
                let mut map: Map<String, Value> =
                    serde_json::from_str(self.shared.server_meta.get())
                        .expect("server meta is JSON");
                map.extend(tool_meta.iter().map(|(k, v)| (k.clone(), v.clone())));
                merged = serde_json::value::to_raw_value(&map).expect("maps serialize");
                &merged
            }
        };
        let wire = Wire {
            result_type: "complete",
            content: &result.content,
            structured_content: result.structured_content.as_ref(),
            is_error: result.is_error,
            meta,
        };
        Bytes::from(serde_json::to_vec(&wire).expect("tool results serialize"))
    }
}

/// The body field `Mcp-Name` must mirror, for methods that name a target.
fn named_target(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}
