//! The transport-independent request path: `_meta`, version and header checks in the order the
//! protocol pins, then the method handlers. HTTP, stdio and the in-process test client use it.

mod completion;
mod discover;
mod legacy;
mod prompts;
mod resources;
mod rounds;
mod subscriptions;
mod tasks;
mod tools;
pub(crate) mod trace;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::body::Bytes;
use futures_util::FutureExt;
use http::HeaderMap;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::context::notify::Notifier;
use crate::context::{Caller, Context};
use crate::protocol::error::RpcError;
use crate::protocol::headers::{Presence, require_equal};
use crate::protocol::param_headers::check_param_headers;
use crate::protocol::{
    Envelope, REMOVED_METHODS, RequestId, RequestMeta, SUPPORTED_VERSIONS, headers,
};
use crate::server::{McpServer, Snapshot};

/// Where a message came from: HTTP carries routing headers that must agree with the body.
#[derive(Clone, Copy)]
pub(crate) enum Transport<'a> {
    Http(&'a HeaderMap),
    /// Newline-delimited messages from a local process. No headers travel, so none are checked,
    /// and the era is decided as for an HTTP request that sent none: a request without a `_meta`
    /// version claim (a legacy client's `initialize`, and what follows it) is legacy.
    Stdio,
    /// The in-process test client, whose requests always carry the modern envelope.
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
    /// The Tasks extension's methods.
    TaskGet,
    TaskUpdate,
    TaskCancel,
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
            "tasks/get" if has_tasks(capabilities) => Route::TaskGet,
            "tasks/update" if has_tasks(capabilities) => Route::TaskUpdate,
            "tasks/cancel" if has_tasks(capabilities) => Route::TaskCancel,
            _ => return None,
        };
        Some(route)
    }
}

/// Whether the server advertises the Tasks extension.
fn has_tasks(capabilities: &Value) -> bool {
    capabilities
        .get("extensions")
        .and_then(|extensions| extensions.get(crate::tasks::TASKS_EXTENSION))
        .is_some()
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
    /// A `subscriptions/listen` request, with the principal's slot, held for as long as its
    /// stream is open.
    listen: Option<(subscriptions::Listen, crate::server::ListenSlot)>,
}

/// Serves one parsed message, in its request span (see [`trace`]). A request whose handling
/// panics (a tool's bug, most likely) is answered [`panicked`], on every transport: its caller
/// gets an answer, and on HTTP the connection stays open for the next request.
pub(crate) async fn handle(
    server: &McpServer,
    envelope: Envelope,
    transport: Transport<'_>,
    caller: Caller,
) -> Outcome {
    server.start_effect_delivery();
    let Some(id) = envelope.id.clone() else {
        // Notifications carry nothing this server acts on in 2026-07-28; accept and drop.
        return Outcome::Accepted;
    };
    let handled = AssertUnwindSafe(handle_traced(server, &id, envelope, transport, caller))
        .catch_unwind()
        .await;
    match handled {
        Ok(Outcome::Stream {
            id,
            notifications,
            finish,
        }) => Outcome::Stream {
            id,
            notifications,
            finish: Box::pin(async move {
                AssertUnwindSafe(finish)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(panicked()))
            }),
        },
        Ok(outcome) => outcome,
        Err(_) => Outcome::Error(panicked().with_id(Some(id))),
    }
}

/// The answer to a request whose handling panicked.
pub(crate) fn panicked() -> RpcError {
    RpcError::internal("The request failed unexpectedly")
}

async fn handle_traced(
    server: &McpServer,
    id: &RequestId,
    envelope: Envelope,
    transport: Transport<'_>,
    caller: Caller,
) -> Outcome {
    let span = trace::request_span(&envelope.method, id, envelope.params.as_ref());
    if span.is_disabled() {
        return serve(server, envelope, transport, caller).await;
    }
    let outcome = serve(server, envelope, transport, caller)
        .instrument(span.clone())
        .await;
    match outcome {
        Outcome::Error(error) => {
            trace::record_error(&span, &error.code().to_string());
            Outcome::Error(error)
        }
        // The stream's result comes later, and its work runs in the request's span too.
        Outcome::Stream {
            id,
            notifications,
            finish,
        } => {
            let recorded = span.clone();
            let finish = async move {
                let result = finish.await;
                if let Err(error) = &result {
                    trace::record_error(&recorded, &error.code().to_string());
                }
                result
            };
            Outcome::Stream {
                id,
                notifications,
                finish: Box::pin(finish.instrument(span)),
            }
        }
        other => other,
    }
}

async fn serve(
    server: &McpServer,
    envelope: Envelope,
    transport: Transport<'_>,
    caller: Caller,
) -> Outcome {
    let Envelope { id, method, params } = envelope;
    let Some(id) = id else {
        return Outcome::Accepted;
    };
    let (prepared, notifications) = match prepare(server, &id, method, params, transport, caller) {
        Ok(prepared) => prepared,
        Err(error) => return Outcome::Error(error.with_id(Some(id))),
    };
    match notifications {
        Some(notifications) => {
            let server = server.clone();
            Outcome::Stream {
                id,
                notifications,
                finish: Box::pin(async move { execute(&server, prepared).await }),
            }
        }
        None => match execute(server, prepared).await {
            Ok(result) => Outcome::Result { id, result },
            Err(error) => Outcome::Error(error.with_id(Some(id))),
        },
    }
}

#[allow(clippy::type_complexity)]
fn prepare(
    server: &McpServer,
    id: &RequestId,
    method: String,
    mut params: Option<Map<String, Value>>,
    transport: Transport<'_>,
    caller: Caller,
) -> Result<(Prepared, Option<mpsc::Receiver<Value>>), RpcError> {
    let no_headers;
    let http_headers = match transport {
        Transport::Http(headers) => Some(headers),
        Transport::Stdio => {
            no_headers = HeaderMap::new();
            Some(&no_headers)
        }
        Transport::InProcess => None,
    };
    let legacy = crate::protocol::era::is_legacy(params.as_ref(), &method, http_headers);
    if legacy && !server.shared.legacy_era {
        // A client of an earlier revision: name the versions served so it can move on.
        let requested = crate::protocol::era::requested_version(params.as_ref(), http_headers);
        return Err(RpcError::unsupported_version(
            &requested,
            &server.shared.base.supported_versions,
        ));
    }
    let (meta, mut params) = if legacy {
        let mut params = params.unwrap_or_default();
        (legacy::meta(&mut params, http_headers), params)
    } else {
        (
            RequestMeta::take_from(params.as_mut())?,
            params.unwrap_or_default(),
        )
    };
    if let (false, Transport::Http(headers)) = (legacy, transport) {
        require_equal(
            headers,
            &headers::PROTOCOL_VERSION_HEADER_NAME,
            "MCP-Protocol-Version",
            meta.protocol_version(),
            Presence::Required,
        )?;
    }
    if !legacy && !SUPPORTED_VERSIONS.contains(&meta.protocol_version()) {
        return Err(RpcError::unsupported_version(
            meta.protocol_version(),
            &server.shared.base.supported_versions,
        ));
    }
    if let Transport::Http(headers) = transport {
        let presence = if legacy {
            Presence::IfSent
        } else {
            Presence::Required
        };
        require_equal(
            headers,
            &headers::METHOD_HEADER_NAME,
            "Mcp-Method",
            &method,
            presence,
        )?;
        if let Some(field) = headers::named_target(&method) {
            match params.get(field) {
                Some(Value::String(target)) => {
                    require_equal(
                        headers,
                        &headers::NAME_HEADER_NAME,
                        "Mcp-Name",
                        target,
                        presence,
                    )?;
                }
                // A legacy request is judged on its body alone past this point.
                _ if legacy => {}
                // A method this server does not serve is answered 404 below, whatever its
                // params look like.
                _ if Route::of(&method, &server.shared.snapshot.load().capabilities, legacy)
                    .is_none() => {}
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "`params.{field}` must be a string"
                    )));
                }
            }
        }
    }
    let snapshot = server.shared.snapshot.load_full();
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
    if let Some(access) = server.access(caller.scopes.as_ref()) {
        authorize(access, route, &snapshot, tool, &params)?;
    }
    let principal = &caller.principal;
    // Legacy requests too: a client of an earlier revision sends no mirror, but one it sends
    // must agree, so an intermediary that routes or authorizes on it sees what runs.
    if let (Some(tool), Transport::Http(headers)) = (tool, transport) {
        let presence = if legacy {
            Presence::IfSent
        } else {
            Presence::Required
        };
        check_param_headers(
            &snapshot.catalog.tools[tool].param_headers,
            &params,
            headers,
            presence,
        )?;
    }
    let input = rounds::round_input(server, route, &mut params, principal)?;
    // Counted once the call is known to be well formed, and before any stream opens, so a
    // refusal is a real HTTP 429.
    #[cfg(feature = "rate-limits")]
    match (route, tool) {
        (Route::CallTool, Some(tool)) => {
            let name = &snapshot.catalog.tools[tool].definition.name;
            server.shared.limits.check(principal, name)?;
        }
        // Each of these reads the store (a stream, at every poll), so they count too.
        (Route::Listen | Route::TaskGet | Route::TaskUpdate | Route::TaskCancel, _) => {
            server.shared.limits.check(principal, method.as_str())?;
        }
        _ => {}
    }
    // Only requests that run user code and opted in get a stream; everything else is one
    // JSON answer.
    let (notifier, notifications) = if route == Route::Listen {
        let (sender, receiver) = mpsc::channel(crate::context::notify::BUFFER);
        (Some(Notifier::new(sender, None, None)), Some(receiver))
    } else if matches!(
        route,
        Route::CallTool | Route::GetPrompt | Route::ReadResource
    ) && (meta.progress_token().is_some()
        || (meta.log_level().is_some() && snapshot.capabilities.get("logging").is_some()))
    {
        let (sender, receiver) = mpsc::channel(crate::context::notify::BUFFER);
        let log_level = meta
            .log_level()
            .filter(|_| snapshot.capabilities.get("logging").is_some());
        (
            Some(Notifier::new(
                sender,
                meta.progress_token().cloned(),
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
        caller,
        (server.shared.clone(), server.shared.state.clone()),
        notifier,
        input,
    );
    let listen = match route {
        Route::Listen => Some((
            subscriptions::Listen::parse(&params, &snapshot, &cx)?,
            server.listen_slot(cx.principal())?,
        )),
        _ => None,
    };
    Ok((
        Prepared {
            legacy,
            route,
            tool,
            params,
            cx,
            snapshot,
            listen,
        },
        notifications,
    ))
}

async fn execute(server: &McpServer, prepared: Prepared) -> Result<Bytes, RpcError> {
    let Prepared {
        legacy,
        route,
        tool,
        mut params,
        cx,
        snapshot,
        listen,
    } = prepared;
    let visible = |listing| visible(server, &cx, listing);
    match route {
        Route::Initialize => Ok(server
            .shared
            .base
            .results
            .complete(legacy::initialize_result(
                &params,
                &snapshot.capabilities,
                server.shared.base.results.server_info(),
                server.shared.base.instructions.as_deref(),
            ))),
        // The 2025-11-25 empty result is exactly `{}`: its clients (the official suite's among
        // them) refuse any member, `resultType` included.
        Route::Empty => Ok(Bytes::from_static(b"{}")),
        Route::Discover => Ok(snapshot.discover.clone()),
        Route::ListTools => discover::page(server, &visible(&snapshot.tools), &params),
        Route::ListResources => discover::page(server, &visible(&snapshot.resources), &params),
        Route::ListTemplates => discover::page(server, &visible(&snapshot.templates), &params),
        Route::ListPrompts => discover::page(server, &visible(&snapshot.prompts), &params),
        Route::CallTool => {
            let index = tool.expect("tools/call resolves its tool");
            let compiled = &snapshot.catalog.tools[index];
            match tasks::mode(compiled.definition.task_support, &cx)? {
                tasks::Mode::Task if !legacy => {
                    tasks::call(server, Arc::clone(&snapshot), index, &mut params, cx).await
                }
                _ => tools::call_tool(server, compiled, &mut params, cx, legacy).await,
            }
        }
        Route::TaskGet | Route::TaskUpdate | Route::TaskCancel => {
            tasks::serve(server, route, &params, &cx).await
        }
        Route::ReadResource => resources::read_resource(server, &snapshot, &params, cx).await,
        Route::GetPrompt => prompts::get_prompt(server, &snapshot, &mut params, cx).await,
        Route::Complete => completion::complete(server, &snapshot, &params, &cx),
        Route::Listen => match listen {
            Some((listen, _slot)) => subscriptions::listen(server, listen, cx).await,
            None => Err(RpcError::internal(
                "A listen request was not read before it ran",
            )),
        },
    }
}

/// A listing as the caller may see it: only what its token's scopes allow.
fn visible<'a>(
    server: &McpServer,
    cx: &Context,
    listing: &'a crate::server::Listing,
) -> crate::server::Visible<'a> {
    match server.access(cx.granted_scopes()) {
        Some(access) => listing.visible_to(&server.shared.base, access),
        None => crate::server::Visible::All(listing),
    }
}

/// Refuses a call, read or prompt whose scopes the caller's token does not grant, with HTTP 403
/// and a challenge naming them: the same answer the HTTP layer gives from the routing headers,
/// here judged on the body, for every era and transport.
fn authorize(
    access: crate::server::access::Access<'_>,
    route: Route,
    snapshot: &Snapshot,
    tool: Option<usize>,
    params: &Map<String, Value>,
) -> Result<(), RpcError> {
    let target = match (route, tool) {
        (Route::CallTool, Some(tool)) => Some(crate::server::access::Target::Tool(tool)),
        (Route::GetPrompt, _) => params
            .get("name")
            .and_then(Value::as_str)
            .map(crate::server::access::Target::Prompt),
        (Route::ReadResource, _) => params
            .get("uri")
            .and_then(Value::as_str)
            .map(crate::server::access::Target::Resource),
        (Route::Complete, _) => crate::server::access::Target::of_completion(params),
        _ => None,
    };
    match target {
        Some(target) => access.check(target, snapshot),
        None => Ok(()),
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
