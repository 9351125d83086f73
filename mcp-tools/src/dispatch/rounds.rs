//! Multi-round requests: the `inputResponses` and sealed `requestState` a retry carries, and the
//! `input_required` result that asks for them.

use axum::body::Bytes;
use serde_json::{Map, Value};

use crate::auth::Principal;
use crate::context::{Context, RoundInput};
use crate::protocol::error::RpcError;
use crate::protocol::input::InputRequired;
use crate::protocol::seal::Binding;
use crate::server::McpServer;

use super::Route;

/// Reads `inputResponses` and verifies `requestState` of a multi-round retry. Only the
/// methods that can answer `input_required` take a retry; every other method leaves these
/// params to its own reading (`tasks/update` has an `inputResponses` of its own) or ignores
/// them, as it does any param it does not define.
pub(super) fn round_input(
    server: &McpServer,
    route: Route,
    params: &mut Map<String, Value>,
    principal: &Principal,
) -> Result<RoundInput, RpcError> {
    if !takes_rounds(route) {
        return Ok(RoundInput::default());
    }
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
            // The target was resolved before: an unnamed one never gets this far.
            let target = round_target(route, params).unwrap_or_default();
            let arguments = round_arguments(route, params);
            let binding = Binding {
                target: &target,
                principal: principal.key(),
                arguments: &arguments,
            };
            server
                .shared
                .base
                .seal
                .open_request_state(&binding, &sealed)?
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
pub(super) fn input_required(
    server: &McpServer,
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
    let sealed = server
        .shared
        .base
        .seal
        .request_state(&binding, input.state.as_ref());
    Ok(server
        .shared
        .base
        .results
        .input_required(sealed, input.requests))
}

/// Whether `route` may answer `input_required`, and so take a multi-round retry.
fn takes_rounds(route: Route) -> bool {
    matches!(
        route,
        Route::CallTool | Route::GetPrompt | Route::ReadResource
    )
}

/// What a multi-round state is bound to: the tool, prompt or resource.
pub(super) fn round_target(route: Route, params: &Map<String, Value>) -> Option<String> {
    let field = match route {
        Route::CallTool | Route::GetPrompt => "name",
        Route::ReadResource => "uri",
        _ => return None,
    };
    // The method is part of the binding: a state sealed for prompt `x` must not open for tool `x`.
    let target = params.get(field).and_then(Value::as_str)?;
    Some(match route {
        Route::CallTool => crate::protocol::seal::tool_call_target(target),
        Route::GetPrompt => format!("prompts/get:{target}"),
        _ => format!("resources/read:{target}"),
    })
}

/// The arguments a state is bound to; absent and `null` count as `{}`, as they do for the call.
pub(super) fn round_arguments(route: Route, params: &Map<String, Value>) -> Value {
    match (route, params.get("arguments")) {
        (Route::CallTool | Route::GetPrompt, Some(arguments)) if !arguments.is_null() => {
            arguments.clone()
        }
        _ => Value::Object(Map::new()),
    }
}
