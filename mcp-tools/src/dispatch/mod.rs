//! The transport-independent request path: `_meta`, version and header checks in the order the
//! protocol pins, then the method handlers. HTTP and the in-process test client both use it.

mod subscriptions;

use std::sync::Arc;

use axum::body::Bytes;
use http::HeaderMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::RpcError;
use crate::completion::CompletionTarget;
use crate::context::notify::Notifier;
use crate::context::{Context, Principal, RoundInput};
use crate::protocol::headers::require_equal;
use crate::protocol::param_headers::check_param_headers;
use crate::protocol::{
    Envelope, REMOVED_METHODS, RequestId, RequestMeta, SUPPORTED_VERSIONS, headers, meta_keys,
};
use crate::server::{Listing, McpServer, Snapshot};
use crate::tools::content::{CallToolResult, Content};
use crate::tools::input::{Binding, InputRequired, Reply, StateSeal};
use crate::tools::set::CompiledTool;

/// Where a message came from: HTTP carries routing headers that must agree with the body.
#[derive(Clone, Copy)]
pub(crate) enum Transport<'a> {
    Http(&'a HeaderMap),
    InProcess,
}

pub(crate) type Finish = crate::tools::BoxFuture<'static, Result<Bytes, RpcError>>;

/// What the request path produced.
pub(crate) enum Outcome {
    /// A notification was accepted; nothing to answer.
    Accepted,
    /// A result, serialized.
    Result { id: RequestId, result: Bytes },
    /// An error, carrying the id it answers.
    Error(RpcError),
    /// Notifications, then the result: the request opted in to progress or log messages, or
    /// opened a subscription. Dropping it cancels the request.
    Stream {
        id: RequestId,
        notifications: mpsc::Receiver<Value>,
        finish: Finish,
    },
}

impl Outcome {
    /// A short label for logs.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Result { .. } => "ok",
            Outcome::Error(_) => "error",
            Outcome::Stream { .. } => "stream",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Discover,
    ListTools,
    CallTool,
    ListResources,
    ListTemplates,
    ReadResource,
    ListPrompts,
    GetPrompt,
    Complete,
    Listen,
    /// Legacy `initialize`.
    Initialize,
    /// Legacy methods answered with an empty result (`ping`, `logging/setLevel`,
    /// `resources/subscribe`, `resources/unsubscribe`).
    Empty,
}

impl Route {
    /// The route of `method`, if the server currently advertises the capability behind it.
    fn of(method: &str, capabilities: &Value, legacy: bool) -> Option<Route> {
        let has = |capability: &str| capabilities.get(capability).is_some();
        let route = match method {
            "initialize" if legacy => Route::Initialize,
            "ping" if legacy => Route::Empty,
            "logging/setLevel" if legacy && has("logging") => Route::Empty,
            "resources/subscribe" | "resources/unsubscribe" if legacy && has("resources") => {
                Route::Empty
            }
            "server/discover" | "subscriptions/listen" if legacy => return None,
            "server/discover" => Route::Discover,
            "tools/list" if has("tools") => Route::ListTools,
            "tools/call" if has("tools") => Route::CallTool,
            "resources/list" if has("resources") => Route::ListResources,
            "resources/templates/list" if has("resources") => Route::ListTemplates,
            "resources/read" if has("resources") => Route::ReadResource,
            "prompts/list" if has("prompts") => Route::ListPrompts,
            "prompts/get" if has("prompts") => Route::GetPrompt,
            "completion/complete" if has("completions") => Route::Complete,
            "subscriptions/listen" if has("tools") || has("resources") || has("prompts") => {
                Route::Listen
            }
            _ => return None,
        };
        Some(route)
    }
}

/// A request that passed every check, ready to run.
struct Prepared {
    legacy: bool,
    route: Route,
    /// The called tool's position in the snapshot's catalog, for `tools/call`.
    tool: Option<usize>,
    params: Map<String, Value>,
    cx: Context,
    snapshot: Arc<Snapshot>,
}

impl McpServer {
    /// Serves one parsed message.
    pub(crate) async fn handle(
        &self,
        envelope: Envelope,
        transport: Transport<'_>,
        principal: Principal,
    ) -> Outcome {
        let Envelope { id, method, params } = envelope;
        let Some(id) = id else {
            // Notifications carry nothing this server acts on in 2026-07-28; accept and drop.
            return Outcome::Accepted;
        };
        let (prepared, notifications) =
            match self.prepare(&id, method, params, transport, principal) {
                Ok(prepared) => prepared,
                Err(error) => return Outcome::Error(error.with_id(Some(id))),
            };
        match notifications {
            Some(notifications) => {
                let server = self.clone();
                Outcome::Stream {
                    id,
                    notifications,
                    finish: Box::pin(async move { server.execute(prepared).await }),
                }
            }
            None => match self.execute(prepared).await {
                Ok(result) => Outcome::Result { id, result },
                Err(error) => Outcome::Error(error.with_id(Some(id))),
            },
        }
    }

    #[allow(clippy::type_complexity)]
    fn prepare(
        &self,
        id: &RequestId,
        method: String,
        mut params: Option<Map<String, Value>>,
        transport: Transport<'_>,
        principal: Principal,
    ) -> Result<(Prepared, Option<mpsc::Receiver<Value>>), RpcError> {
        let http_headers = match transport {
            Transport::Http(headers) => Some(headers),
            Transport::InProcess => None,
        };
        let legacy = crate::protocol::era::is_legacy(params.as_ref(), &method, http_headers);
        if legacy && !self.shared.legacy_era {
            // A client of an earlier revision: name the versions served so it can move on.
            let requested = crate::protocol::era::requested_version(params.as_ref(), http_headers);
            return Err(RpcError::unsupported_version(
                &requested,
                &self.shared.base.supported_versions,
            ));
        }
        let (meta, mut params) = if legacy {
            let mut params = params.unwrap_or_default();
            (
                crate::protocol::era::meta(&mut params, http_headers),
                params,
            )
        } else {
            (
                RequestMeta::take_from(params.as_mut())?,
                params.unwrap_or_default(),
            )
        };
        if let (false, Transport::Http(headers)) = (legacy, transport) {
            require_equal(
                headers,
                headers::PROTOCOL_VERSION,
                "MCP-Protocol-Version",
                &meta.protocol_version,
            )?;
        }
        if !legacy && !SUPPORTED_VERSIONS.contains(&meta.protocol_version.as_str()) {
            return Err(RpcError::unsupported_version(
                &meta.protocol_version,
                &self.shared.base.supported_versions,
            ));
        }
        if let (false, Transport::Http(headers)) = (legacy, transport) {
            require_equal(headers, headers::METHOD, "Mcp-Method", &method)?;
            if let Some(field) = named_target(&method) {
                match params.get(field) {
                    Some(Value::String(target)) => {
                        require_equal(headers, headers::NAME, "Mcp-Name", target)?;
                    }
                    // A method this server does not serve is answered 404 below, whatever its
                    // params look like.
                    _ if Route::of(&method, &self.shared.snapshot.load().capabilities, legacy)
                        .is_none() => {}
                    _ => {
                        return Err(RpcError::invalid_params(format!(
                            "`params.{field}` must be a string"
                        )));
                    }
                }
            }
        }
        let snapshot = self.shared.snapshot.load_full();
        let route = match Route::of(&method, &snapshot.capabilities, legacy) {
            Some(route) => route,
            None if REMOVED_METHODS.contains(&method.as_str()) => {
                return Err(RpcError::method_not_found(&method).with_data(json!({
                    "reason": "Removed in protocol revision 2026-07-28: requests are self-describing and need no handshake"
                })));
            }
            None => return Err(RpcError::method_not_found(&method)),
        };
        // What the request names is resolved before any request state is opened: an unknown
        // tool or prompt is answered as such, whatever else a retry carries.
        let tool = resolve_target(route, &snapshot, &params)?;
        if let (Some(tool), Transport::Http(headers), false) = (tool, transport, legacy) {
            check_param_headers(&snapshot.catalog.tools[tool], &params, headers)?;
        }
        let input = self.round_input(route, &mut params, &principal)?;
        tracing::Span::current().record("id", tracing::field::display(id));
        // Only requests that run user code and opted in get a stream; everything else is one
        // JSON answer.
        let (notifier, notifications) = if route == Route::Listen {
            let (sender, receiver) = mpsc::channel(crate::context::notify::BUFFER);
            (Some(Notifier::new(sender, None, None)), Some(receiver))
        } else if matches!(
            route,
            Route::CallTool | Route::GetPrompt | Route::ReadResource
        ) && (meta.progress_token.is_some()
            || (meta.log_level.is_some() && snapshot.capabilities.get("logging").is_some()))
        {
            let (sender, receiver) = mpsc::channel(crate::context::notify::BUFFER);
            let log_level = meta
                .log_level
                .filter(|_| snapshot.capabilities.get("logging").is_some());
            (
                Some(Notifier::new(
                    sender,
                    meta.progress_token.clone(),
                    log_level,
                )),
                Some(receiver),
            )
        } else {
            (None, None)
        };
        let cx = Context::new(
            Some(id.clone()),
            method,
            meta,
            principal,
            self.clone(),
            notifier,
            input,
        );
        Ok((
            Prepared {
                legacy,
                route,
                tool,
                params,
                cx,
                snapshot,
            },
            notifications,
        ))
    }

    async fn execute(&self, prepared: Prepared) -> Result<Bytes, RpcError> {
        let Prepared {
            legacy,
            route,
            tool,
            mut params,
            cx,
            snapshot,
        } = prepared;
        match route {
            Route::Initialize => Ok(Bytes::from(
                crate::protocol::era::initialize_result(
                    &params,
                    &snapshot.capabilities,
                    &self.shared.base.result_meta[meta_keys::SERVER_INFO],
                    self.shared.base.instructions.as_deref(),
                )
                .to_string(),
            )),
            Route::Empty => Ok(Bytes::from_static(b"{}")),
            Route::Discover => Ok(snapshot.discover.clone()),
            Route::ListTools => self.page(&snapshot.tools, &params),
            Route::ListResources => self.page(&snapshot.resources, &params),
            Route::ListTemplates => self.page(&snapshot.templates, &params),
            Route::ListPrompts => self.page(&snapshot.prompts, &params),
            Route::CallTool => {
                let tool = &snapshot.catalog.tools[tool.expect("tools/call resolves its tool")];
                self.call_tool(tool, &mut params, cx, legacy).await
            }
            Route::ReadResource => self.read_resource(&snapshot, &params, cx).await,
            Route::GetPrompt => self.get_prompt(&snapshot, &mut params, cx).await,
            Route::Complete => self.complete(&snapshot, &params, &cx),
            Route::Listen => self.listen(&snapshot, &params, cx).await,
        }
    }

    fn page(&self, listing: &Listing, params: &Map<String, Value>) -> Result<Bytes, RpcError> {
        let page = match params.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(Value::String(cursor)) => self
                .shared
                .base
                .cursors
                .decode(listing.kind, cursor, listing.fingerprint)
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

    /// Reads `inputResponses` and verifies `requestState` of a multi-round retry.
    fn round_input(
        &self,
        route: Route,
        params: &mut Map<String, Value>,
        principal: &Principal,
    ) -> Result<RoundInput, RpcError> {
        let responses = match params.remove("inputResponses") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(responses)) => responses,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "`params.inputResponses` must be an object",
                ));
            }
        };
        let state = match params.remove("requestState") {
            None | Some(Value::Null) => None,
            Some(Value::String(sealed)) => {
                let Some(target) = round_target(route, params) else {
                    return Err(RpcError::invalid_params(
                        "`requestState` is only accepted on tools/call, prompts/get and resources/read",
                    ));
                };
                let arguments = round_arguments(route, params);
                let binding = Binding {
                    target: &target,
                    principal: principal.key(),
                    arguments: &arguments,
                };
                StateSeal {
                    key: &self.shared.state_key,
                }
                .open(&binding, &sealed)?
            }
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "`params.requestState` must be a string",
                ));
            }
        };
        Ok(RoundInput { responses, state })
    }

    /// Turns a tool's request for input into an `input_required` result, after checking the
    /// client declared every capability it needs.
    fn input_required(
        &self,
        route: Route,
        params: &Map<String, Value>,
        cx: &Context,
        input: InputRequired,
    ) -> Result<Bytes, RpcError> {
        let missing = input.missing_capabilities(cx.client_capabilities());
        if !missing.is_empty() {
            return Err(RpcError::missing_capability(Value::Object(missing)));
        }
        let target = round_target(route, params).unwrap_or_default();
        let arguments = round_arguments(route, params);
        let binding = Binding {
            target: &target,
            principal: cx.principal().key(),
            arguments: &arguments,
        };
        let sealed = StateSeal {
            key: &self.shared.state_key,
        }
        .seal(&binding, input.state.as_ref());
        let mut result = json!({ "resultType": "input_required", "requestState": sealed });
        if !input.requests.is_empty() {
            result["inputRequests"] = Value::Object(input.requests);
        }
        Ok(Bytes::from(result.to_string()))
    }

    /// Runs a tool. A legacy client cannot be asked for input without a session, so there a
    /// tool that asks for input gets an error result saying so.
    async fn call_tool(
        &self,
        tool: &CompiledTool,
        params: &mut Map<String, Value>,
        cx: Context,
        legacy: bool,
    ) -> Result<Bytes, RpcError> {
        tracing::Span::current().record("tool", &*tool.definition.name);
        let empty = Value::Object(Map::new());
        let arguments = match params.get("arguments") {
            Some(arguments @ Value::Object(_)) => arguments,
            // `resolve_target` admitted only an object, `null` or nothing.
            _ => &empty,
        };
        let result = match tool.call(arguments, cx.clone()).await {
            Reply::Complete(result) => result,
            Reply::InputRequired(input) if !legacy => {
                return self.input_required(Route::CallTool, params, &cx, input);
            }
            Reply::InputRequired(_) => crate::ToolError::new(
                "INPUT_REQUIRED",
                "This tool needs input from the client, which protocol 2025-11-25 can only ask for within a session; connect with protocol 2026-07-28",
            )
            .into_result(),
        };
        Ok(self.serialize_call_result(&result))
    }

    async fn read_resource(
        &self,
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
        let result = self.shared.base.cacheable(json!({
            "resultType": "complete",
            "contents": contents,
            "_meta": self.shared.server_meta,
        }));
        Ok(Bytes::from(result.to_string()))
    }

    async fn get_prompt(
        &self,
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
            crate::ToolReply::Complete(rendered) => rendered,
            crate::ToolReply::InputRequired(input) => {
                return self.input_required(Route::GetPrompt, params, &cx, input);
            }
        };
        let mut result = serde_json::to_value(&rendered).expect("prompt results serialize");
        result["resultType"] = json!("complete");
        result["_meta"] = serde_json::to_value(&self.shared.server_meta).expect("meta is JSON");
        Ok(Bytes::from(result.to_string()))
    }

    fn complete(
        &self,
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
        let result = json!({ "resultType": "complete", "completion": completion, "_meta": self.shared.server_meta });
        Ok(Bytes::from(result.to_string()))
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

/// Checks the params that name what a request acts on, and finds the tool of a `tools/call`.
fn resolve_target(
    route: Route,
    snapshot: &Snapshot,
    params: &Map<String, Value>,
) -> Result<Option<usize>, RpcError> {
    let arguments_are_an_object = || match params.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => Ok(()),
        Some(_) => Err(RpcError::invalid_params(
            "`params.arguments` must be an object",
        )),
    };
    match route {
        Route::CallTool => {
            let Some(Value::String(name)) = params.get("name") else {
                return Err(RpcError::invalid_params("`params.name` must be a string"));
            };
            let Some(tool) = snapshot.catalog.position(name) else {
                return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
            };
            arguments_are_an_object()?;
            Ok(Some(tool))
        }
        Route::GetPrompt => {
            let Some(Value::String(name)) = params.get("name") else {
                return Err(RpcError::invalid_params("`params.name` must be a string"));
            };
            if snapshot.offer.prompts.get(name).is_none() {
                return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
            }
            arguments_are_an_object()?;
            Ok(None)
        }
        Route::ReadResource => match params.get("uri") {
            Some(Value::String(_)) => Ok(None),
            _ => Err(RpcError::invalid_params("`params.uri` must be a string")),
        },
        _ => Ok(None),
    }
}

/// What a multi-round state is bound to: the tool, prompt or resource.
fn round_target(route: Route, params: &Map<String, Value>) -> Option<String> {
    let field = match route {
        Route::CallTool | Route::GetPrompt => "name",
        Route::ReadResource => "uri",
        _ => return None,
    };
    // The method is part of the binding: a state sealed for prompt `x` must not open for tool `x`.
    let method = match route {
        Route::CallTool => "tools/call",
        Route::GetPrompt => "prompts/get",
        _ => "resources/read",
    };
    params
        .get(field)
        .and_then(Value::as_str)
        .map(|t| format!("{method}:{t}"))
}

/// The arguments a state is bound to; absent and `null` count as `{}`, as they do for the call.
fn round_arguments(route: Route, params: &Map<String, Value>) -> Value {
    match (route, params.get("arguments")) {
        (Route::CallTool | Route::GetPrompt, Some(arguments)) if !arguments.is_null() => {
            arguments.clone()
        }
        _ => Value::Object(Map::new()),
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
