//! `subscriptions/listen`: one long-lived request whose response stream carries list-change and
//! resource-update notifications, filtered to what the client asked for.

use axum::body::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::context::Context;
use crate::protocol::error::RpcError;
use crate::server::{Change, McpServer, Snapshot};

/// The subset of the requested filter this server honours.
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

impl Filter {
    fn honoured(requested: &Map<String, Value>, capabilities: &Value) -> Result<Filter, RpcError> {
        let flag = |key: &str| -> Result<bool, RpcError> {
            match requested.get(key) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(RpcError::invalid_params(format!(
                    "`notifications.{key}` must be a boolean"
                ))),
            }
        };
        let has = |capability: &str| capabilities.get(capability).is_some();
        let uris = match requested.get("resourceSubscriptions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    RpcError::invalid_params(
                        "`notifications.resourceSubscriptions` must be an array of URIs",
                    )
                })?,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "`notifications.resourceSubscriptions` must be an array of URIs",
                ));
            }
        };
        Ok(Filter {
            tools: flag("toolsListChanged")? && has("tools"),
            prompts: flag("promptsListChanged")? && has("prompts"),
            resources: flag("resourcesListChanged")? && has("resources"),
            uris: if has("resources") { uris } else { Vec::new() },
        })
    }

    fn to_json(&self) -> Value {
        let mut honoured = Map::new();
        if self.tools {
            honoured.insert("toolsListChanged".into(), json!(true));
        }
        if self.prompts {
            honoured.insert("promptsListChanged".into(), json!(true));
        }
        if self.resources {
            honoured.insert("resourcesListChanged".into(), json!(true));
        }
        if !self.uris.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(honoured)
    }

    /// The subscribed URI that `uri` is, or is a sub-resource of.
    fn subscribed_to(&self, uri: &str) -> Option<&str> {
        self.uris
            .iter()
            .find(|subscribed| {
                uri == subscribed.as_str()
                    || uri
                        .strip_prefix(subscribed.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            })
            .map(String::as_str)
    }

    /// The notification for `change`, if this subscription asked for it.
    fn notification(
        &self,
        change: Change,
        uri: Option<&str>,
    ) -> Option<(&'static str, Option<String>)> {
        match change {
            Change::Tools if self.tools => Some(("notifications/tools/list_changed", None)),
            Change::Prompts if self.prompts => Some(("notifications/prompts/list_changed", None)),
            Change::Resources if self.resources => {
                Some(("notifications/resources/list_changed", None))
            }
            Change::ResourceUpdated => {
                let uri = uri?;
                // A sub-resource of a subscribed URI counts too.
                self.subscribed_to(uri)
                    .map(|_| ("notifications/resources/updated", Some(uri.to_owned())))
            }
            _ => None,
        }
    }
}

/// The most tasks one `subscriptions/listen` stream follows: each is read when the stream opens
/// and at every poll.
pub(crate) const MAX_WATCHED_TASKS: usize = 64;

/// The tasks a stream follows: each id with the last (status, update time) sent for it.
struct WatchedTasks {
    watched: Vec<(String, crate::store::tasks::record::Revision)>,
}

impl WatchedTasks {
    /// The acknowledged filter, with the task ids accepted.
    fn acknowledged(&self, mut honoured: Value) -> Value {
        if !self.watched.is_empty() {
            let ids: Vec<&str> = self.watched.iter().map(|(id, _)| id.as_str()).collect();
            honoured["taskIds"] = json!(ids);
        }
        honoured
    }

    /// The `DetailedTask` of each followed task that changed since the last look; a task
    /// that ended is followed no further.
    async fn changes(&mut self, server: &McpServer, owner: &str) -> Vec<Map<String, Value>> {
        let mut changed = Vec::new();
        let mut followed = Vec::with_capacity(self.watched.len());
        for (id, seen) in std::mem::take(&mut self.watched) {
            let record = match server.shared.tasks.get(owner, &id).await {
                Ok(record) => record,
                // Expired or purged: nothing more will happen to it.
                Err(error) if error.code() == crate::protocol::codes::INVALID_PARAMS => continue,
                // The store is unavailable: look again at the next poll.
                Err(_) => {
                    followed.push((id, seen));
                    continue;
                }
            };
            let now = record.revision();
            if now != seen {
                changed.push(record.detailed());
            }
            if !record.status().is_terminal() {
                followed.push((id, now));
            }
        }
        self.watched = followed;
        changed
    }
}

/// A `subscriptions/listen` request, read and checked before its stream opens, so that a
/// malformed one is answered as one JSON error with its HTTP status.
pub(super) struct Listen {
    filter: Filter,
    /// The task ids to follow, at most [`MAX_WATCHED_TASKS`].
    task_ids: Vec<String>,
}

impl Listen {
    pub(super) fn parse(
        params: &Map<String, Value>,
        snapshot: &Snapshot,
        cx: &Context,
    ) -> Result<Listen, RpcError> {
        let requested = match params.get("notifications") {
            Some(Value::Object(filter)) => filter,
            _ => {
                return Err(RpcError::invalid_params(
                    "`params.notifications` must be a subscription filter object",
                ));
            }
        };
        Ok(Listen {
            filter: Filter::honoured(requested, &snapshot.capabilities)?,
            task_ids: task_ids(snapshot, requested, cx)?,
        })
    }
}

/// The ids a `subscriptions/listen` filter names in `taskIds`. Naming any needs the extension;
/// a server without task tools leaves `taskIds` out, as any kind it does not serve.
fn task_ids(
    snapshot: &Snapshot,
    requested: &Map<String, Value>,
    cx: &Context,
) -> Result<Vec<String>, RpcError> {
    if !super::has_tasks(&snapshot.capabilities) {
        return Ok(Vec::new());
    }
    let not_ids =
        || RpcError::invalid_params("`notifications.taskIds` must be an array of task ids");
    let ids = match requested.get("taskIds") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| id.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(not_ids)?,
        Some(_) => return Err(not_ids()),
    };
    if ids.len() > MAX_WATCHED_TASKS {
        return Err(RpcError::invalid_params(format!(
            "`notifications.taskIds` names {} tasks: one stream follows at most {MAX_WATCHED_TASKS}; open another for the rest",
            ids.len()
        )));
    }
    if !ids.is_empty() && !super::tasks::declared(cx) {
        return Err(RpcError::missing_capability(
            json!({ "extensions": { crate::tasks::TASKS_EXTENSION: {} } }),
        ));
    }
    Ok(ids)
}

/// Of `ids`, the tasks the caller may see, each with its state now, so only later changes are
/// sent.
async fn watched_tasks(
    server: &McpServer,
    ids: Vec<String>,
    cx: &Context,
) -> Result<WatchedTasks, RpcError> {
    let mut watched = Vec::new();
    for id in ids {
        if let Some(record) = server
            .shared
            .tasks
            .existing(cx.principal().key(), &id)
            .await?
        {
            watched.push((id, record.revision()));
        }
    }
    Ok(WatchedTasks { watched })
}

pub(super) async fn listen(
    server: &McpServer,
    listen: Listen,
    cx: Context,
) -> Result<Bytes, RpcError> {
    let Listen { filter, task_ids } = listen;
    let mut tasks = watched_tasks(server, task_ids, &cx).await?;
    // An update tells that a resource changed: only to callers who may read it, and the
    // resource they subscribed to.
    let access = server.access(cx.granted_scopes());
    let may_read = |uri: &str| {
        access.is_none_or(|access| {
            let snapshot = server.shared.snapshot.load();
            access.may_learn_of(uri, &snapshot)
                && filter
                    .subscribed_to(uri)
                    .is_none_or(|subscribed| access.may_learn_of(subscribed, &snapshot))
        })
    };
    let subscription_id = json!(cx.request_id());
    // Subscribe before acknowledging, so no change between the two is missed.
    let mut changes = server.shared.changes.subscribe();
    let mut shutdown = server.shared.shutdown.subscribe();
    cx.send_notification(json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": { "io.modelcontextprotocol/subscriptionId": subscription_id },
            "notifications": tasks.acknowledged(filter.to_json()),
        }
    }))
    .await;
    let mut poll = tokio::time::interval(server.shared.tasks.options.poll_interval);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // The guard `wait_for` returns must not live across the awaits below.
            () = async { drop(shutdown.wait_for(|closing| *closing).await) } => break,
            _ = poll.tick(), if !tasks.watched.is_empty() => {
                for detailed in tasks.changes(server, cx.principal().key()).await {
                    let mut params = detailed;
                    params.insert("_meta".into(), json!({ "io.modelcontextprotocol/subscriptionId": subscription_id }));
                    cx.send_notification(json!({ "jsonrpc": "2.0", "method": "notifications/tasks", "params": params })).await;
                }
            }
            change = changes.recv() => match change {
                Ok((change, uri)) => {
                    if let Some((method, uri)) = filter.notification(change, uri.as_deref())
                        && uri.as_deref().is_none_or(may_read)
                    {
                        let mut params = json!({ "_meta": { "io.modelcontextprotocol/subscriptionId": subscription_id } });
                        if let Some(uri) = uri {
                            params["uri"] = json!(uri);
                        }
                        cx.send_notification(json!({ "jsonrpc": "2.0", "method": method, "params": params })).await;
                    }
                }
                // A slow listener missed some changes: tell it every list it follows changed.
                Err(RecvError::Lagged(_)) => {
                    for change in [Change::Tools, Change::Prompts, Change::Resources] {
                        if let Some((method, _)) = filter.notification(change, None) {
                            cx.send_notification(json!({ "jsonrpc": "2.0", "method": method, "params": {
                                "_meta": { "io.modelcontextprotocol/subscriptionId": subscription_id } } })).await;
                        }
                    }
                    // Updates may have been missed too: every subscribed resource may have changed.
                    for uri in filter.uris.iter().filter(|uri| may_read(uri)) {
                        cx.send_notification(json!({ "jsonrpc": "2.0", "method": "notifications/resources/updated",
                            "params": { "_meta": { "io.modelcontextprotocol/subscriptionId": subscription_id }, "uri": uri } })).await;
                    }
                }
                Err(RecvError::Closed) => break,
            },
        }
    }
    let mut result = Map::new();
    result.insert(
        "_meta".into(),
        json!({ "io.modelcontextprotocol/subscriptionId": subscription_id }),
    );
    Ok(server.shared.base.results.complete(result))
}
