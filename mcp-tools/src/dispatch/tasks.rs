//! The Tasks extension on the request path: a `tools/call` that becomes a task, and
//! `tasks/get`, `tasks/update`, `tasks/cancel`.

use std::sync::Arc;
use std::task::Poll;

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::protocol::error::RpcError;
use crate::protocol::reply::Reply;
use crate::protocol::result::ResultType;
use crate::server::{McpServer, Snapshot};
use crate::store::Fingerprint;
use crate::tasks::TASKS_EXTENSION;
use crate::tasks::runtime::{Restart, TaskLink, Tasks, Worker, catching};
use crate::tools::TaskSupport;

use super::Route;
use super::rounds::input_required;
use super::tools::{serialize_call_result, serialize_rendered};

/// Whether the request declared the Tasks extension in its client capabilities.
pub(super) fn declared(cx: &Context) -> bool {
    cx.client_capabilities()
        .get("extensions")
        .and_then(Value::as_object)
        .is_some_and(|extensions| extensions.contains_key(TASKS_EXTENSION))
}

fn extension_required() -> RpcError {
    RpcError::missing_capability(json!({ "extensions": { TASKS_EXTENSION: {} } }))
}

/// How a `tools/call` of this tool from this client runs.
pub(super) enum Mode {
    Synchronous,
    Task,
}

/// Decides how a call runs: as a task when the tool may be one and the client declared the
/// extension; `-32021` when the tool must be a task and the client cannot take one.
/// A tool that is never a task decides without reading the client's extensions.
pub(super) fn mode(support: TaskSupport, cx: &Context) -> Result<Mode, RpcError> {
    match support {
        TaskSupport::Forbidden => Ok(Mode::Synchronous),
        _ if declared(cx) => Ok(Mode::Task),
        TaskSupport::Optional => Ok(Mode::Synchronous),
        TaskSupport::Required => Err(extension_required()),
    }
}

/// Runs a call as a task: the tool starts here; if it finishes or asks for input without
/// waiting on anything, that is the answer and no task is made. Otherwise the task is
/// committed, the tool goes on in the background, and the answer is the `CreateTaskResult`.
pub(super) async fn call(
    server: &McpServer,
    snapshot: Arc<Snapshot>,
    index: usize,
    params: &mut Map<String, Value>,
    cx: Context,
) -> Result<Bytes, RpcError> {
    let shared = &server.shared;
    if *shared.shutdown.borrow() {
        return Err(RpcError::internal(
            "This server is shutting down and takes no new tasks; retry the call",
        )
        .with_status(http::StatusCode::SERVICE_UNAVAILABLE));
    }
    let tasks = &shared.tasks;
    let tool = &snapshot.catalog.tools[index];
    let name = tool.definition.name.to_string();
    let owner = cx.principal().key().to_owned();
    let arguments = match params.get("arguments") {
        Some(arguments @ Value::Object(_)) => arguments.clone(),
        _ => Value::Object(Map::new()),
    };
    // Only a call with an operation id can be retried into its task: only it needs the
    // arguments' fingerprint and a derived id.
    let operation = operation_id(&tool.definition.input_schema, &arguments)
        .map(|operation| (operation, Fingerprint::of_call(&name, &arguments).to_hex()));
    // Anonymous callers share one owner: an id another could guess would hand it this call's
    // task (and its result), as it would a stateful tool's recorded outcome.
    if let Some((operation, _)) = &operation
        && matches!(cx.principal(), crate::auth::Principal::Anonymous)
        && !crate::stateful::is_unguessable(operation)
    {
        let refused = crate::store::Rejected::guessable_operation_id(operation);
        let result = crate::protocol::tool_error::ToolError::new(refused.code, refused.message)
            .with_recovery(crate::protocol::recovery::Recovery::NewOperationId)
            .into_result();
        return Ok(serialize_call_result(server, &result));
    }
    let id = match &operation {
        Some((operation, _)) => shared.base.seal.task_id(&owner, &name, operation),
        None => Tasks::random_id()?,
    };
    if let Some((operation, fingerprint)) = &operation
        && let Some(existing) = made_before(server, &owner, &name, operation, &id).await?
    {
        // A retry of a call that already made its task gets that task, never a second run.
        if existing.fingerprint.as_deref() != Some(fingerprint.as_str()) {
            return Ok(serialize_call_result(server, &operation_id_reused()));
        }
        return Ok(created(server, &existing));
    }
    let permit = tasks.permit(&owner)?;
    let asks = TaskLink::attach(&cx, &id);
    let restart: Restart = {
        let snapshot = Arc::clone(&snapshot);
        let arguments = arguments.clone();
        Arc::new(move |cx| {
            let snapshot = Arc::clone(&snapshot);
            let arguments = arguments.clone();
            Box::pin(async move { snapshot.catalog.tools[index].call(&arguments, cx).await })
        })
    };
    let mut future = catching(restart(cx.clone()));
    // One poll, here: a tool that needs nothing slow answers as a plain call would.
    let first = std::future::poll_fn(|waker| Poll::Ready(future.as_mut().poll(waker))).await;
    match first {
        Poll::Ready(Ok(Reply::Complete(result))) => {
            return Ok(serialize_call_result(server, &result));
        }
        Poll::Ready(Ok(Reply::Rendered(rendered))) => {
            return Ok(serialize_rendered(server, &rendered));
        }
        Poll::Ready(Ok(Reply::InputRequired(input))) => {
            return input_required(server, Route::CallTool, params, &cx, input);
        }
        Poll::Ready(Err(_)) => return Err(RpcError::internal("The tool panicked")),
        Poll::Pending => {}
    }
    let record = tasks.new_record(
        id,
        &owner,
        &name,
        operation.map(|(operation, fingerprint)| (format!("{name}\0{operation}"), fingerprint)),
    );
    cx.quiet();
    let worker = Worker {
        restart,
        context: cx,
        asks,
        shutdown: shared.shutdown.subscribe(),
        permit,
    };
    let fingerprint = record.fingerprint.clone();
    let record = tasks.start(record, future, worker).await?;
    if record.fingerprint != fingerprint {
        // A concurrent call with this operation id and other arguments made the task first.
        return Ok(serialize_call_result(server, &operation_id_reused()));
    }
    Ok(created(server, &record))
}

/// The task a call with this operation id already made: under the id the signing key gives it,
/// or, while keys roll, under the id a key still accepted gave it.
async fn made_before(
    server: &McpServer,
    owner: &str,
    tool: &str,
    operation: &str,
    id: &str,
) -> Result<Option<crate::tasks::TaskRecord>, RpcError> {
    let tasks = &server.shared.tasks;
    if let Some(existing) = tasks.existing(owner, id).await? {
        return Ok(Some(existing));
    }
    for earlier in server
        .shared
        .base
        .seal
        .earlier_task_ids(owner, tool, operation)
    {
        if let Some(existing) = tasks.existing(owner, &earlier).await? {
            return Ok(Some(existing));
        }
    }
    Ok(None)
}

fn operation_id_reused() -> crate::protocol::content::CallToolResult {
    crate::protocol::tool_error::ToolError::new(
        crate::protocol::framework::code::OPERATION_ID_REUSED,
        "This operation_id already made a task with other arguments; use a new operation_id for a new call",
    )
    .into_result()
}

/// The caller's `operation_id` argument, when the tool's input schema declares one.
fn operation_id(schema: &Value, arguments: &Value) -> Option<String> {
    schema.get("properties")?.get("operation_id")?;
    arguments
        .get("operation_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn created(server: &McpServer, record: &crate::tasks::TaskRecord) -> Bytes {
    let body = server
        .shared
        .base
        .results
        .finish(ResultType::Task, record.created());
    Bytes::from(crate::protocol::json_text(&body))
}

/// `tasks/get`, `tasks/update` and `tasks/cancel`.
pub(super) async fn serve(
    server: &McpServer,
    route: Route,
    params: &Map<String, Value>,
    cx: &Context,
) -> Result<Bytes, RpcError> {
    if !declared(cx) {
        return Err(extension_required());
    }
    let Some(Value::String(id)) = params.get("taskId") else {
        return Err(RpcError::invalid_params("`params.taskId` must be a string"));
    };
    let tasks = &server.shared.tasks;
    let owner = cx.principal().key();
    let results = &server.shared.base.results;
    match route {
        Route::TaskGet => {
            let record = tasks.get(owner, id).await?;
            Ok(results.complete(record.detailed()))
        }
        Route::TaskUpdate => {
            let responses = match params.get("inputResponses") {
                Some(Value::Object(responses)) => responses.clone(),
                _ => {
                    return Err(RpcError::invalid_params(
                        "`params.inputResponses` must be an object of answers by request key",
                    ));
                }
            };
            tasks.update(owner, id, responses).await?;
            Ok(results.complete(Map::new()))
        }
        _ => {
            tasks.cancel(owner, id).await?;
            Ok(results.complete(Map::new()))
        }
    }
}
