//! `subscriptions/listen`: one long request whose answer is a stream of change notifications,
//! first the acknowledgement of what the server will send, then the changes, until either side
//! ends it.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::api::{Client, Inner};
use super::error::{ClientError, RpcFailure, TransportErrorKind};
use super::result::Task;
use crate::protocol::meta_keys::CLIENT_CAPABILITIES;

/// What a subscription asks to hear about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubscriptionFilter {
    /// `notifications/tools/list_changed`.
    pub tools_list_changed: bool,
    /// `notifications/prompts/list_changed`.
    pub prompts_list_changed: bool,
    /// `notifications/resources/list_changed`.
    pub resources_list_changed: bool,
    /// `notifications/resources/updated` for these URIs.
    pub resource_subscriptions: Vec<String>,
    /// `notifications/tasks` for these tasks (the Tasks extension).
    pub task_ids: Vec<String>,
}

impl SubscriptionFilter {
    /// Nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Changes to the tool list.
    pub fn tools(mut self) -> Self {
        self.tools_list_changed = true;
        self
    }

    /// Changes to the prompt list.
    pub fn prompts(mut self) -> Self {
        self.prompts_list_changed = true;
        self
    }

    /// Changes to the resource list.
    pub fn resources(mut self) -> Self {
        self.resources_list_changed = true;
        self
    }

    /// Updates of the resource `uri`.
    pub fn resource(mut self, uri: impl Into<String>) -> Self {
        self.resource_subscriptions.push(uri.into());
        self
    }

    /// Status changes of the task `task_id`.
    pub fn task(mut self, task_id: impl Into<String>) -> Self {
        self.task_ids.push(task_id.into());
        self
    }

    fn to_json(&self) -> Value {
        let mut filter = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools_list_changed),
            ("promptsListChanged", self.prompts_list_changed),
            ("resourcesListChanged", self.resources_list_changed),
        ] {
            if on {
                filter.insert(key.into(), Value::Bool(true));
            }
        }
        if !self.resource_subscriptions.is_empty() {
            filter.insert(
                "resourceSubscriptions".into(),
                json!(self.resource_subscriptions),
            );
        }
        if !self.task_ids.is_empty() {
            filter.insert("taskIds".into(), json!(self.task_ids));
        }
        Value::Object(filter)
    }
}

/// A change a subscription heard of.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ListenEvent {
    /// The tool list changed (the client's listing is marked stale).
    ToolsListChanged,
    /// The prompt list changed.
    PromptsListChanged,
    /// The resource list changed.
    ResourcesListChanged,
    /// A subscribed resource changed.
    ResourceUpdated {
        /// The resource (or a part of a subscribed one).
        uri: String,
    },
    /// A subscribed task changed.
    Task(Task),
    /// Any other notification on the stream.
    Other {
        /// The method.
        method: String,
        /// Its params.
        params: Value,
    },
}

/// An open `subscriptions/listen`. Dropping it ends the subscription (on HTTP its stream is
/// closed, on stdio the server is sent `notifications/cancelled`).
#[derive(Debug)]
pub struct Subscription {
    acknowledged: Value,
    messages: mpsc::Receiver<Result<Value, ClientError>>,
    client: Arc<Inner>,
    ended: bool,
}

impl Subscription {
    /// What the server acknowledged it will send (a `SubscriptionFilter` object): kinds it
    /// does not support are left out.
    pub fn acknowledged(&self) -> &Value {
        &self.acknowledged
    }

    /// The next change; `None` once the subscription ended (the server closed it with its
    /// result, or it ended abnormally after reporting why).
    pub async fn next(&mut self) -> Option<Result<ListenEvent, ClientError>> {
        while !self.ended {
            let Some(message) = self.messages.recv().await else {
                self.ended = true;
                return Some(Err(ClientError::transport(
                    TransportErrorKind::Lost,
                    "the subscription's stream ended without its result",
                )));
            };
            let message = match message {
                Ok(message) => message,
                Err(error) => {
                    self.ended = true;
                    return Some(Err(error));
                }
            };
            if message.get("method").is_none() {
                // The listen request's own response: the server ended the subscription.
                self.ended = true;
                if let Some(error) = message.get("error") {
                    let failure = RpcFailure::from_error(error, None);
                    return Some(Err(ClientError::Rpc(Box::new(failure))));
                }
                return None;
            }
            if let Some(event) = self.event(message) {
                return Some(event);
            }
        }
        None
    }

    fn event(&mut self, mut message: Value) -> Option<Result<ListenEvent, ClientError>> {
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let params = message
            .get_mut("params")
            .map(Value::take)
            .unwrap_or(Value::Null);
        let event = match method.as_str() {
            "notifications/tools/list_changed" => {
                self.client.catalog.invalidate();
                ListenEvent::ToolsListChanged
            }
            "notifications/prompts/list_changed" => ListenEvent::PromptsListChanged,
            "notifications/resources/list_changed" => ListenEvent::ResourcesListChanged,
            "notifications/resources/updated" => ListenEvent::ResourceUpdated {
                uri: params["uri"].as_str().unwrap_or_default().to_owned(),
            },
            "notifications/tasks" => match params.as_object().map(Task::from_map) {
                Some(Ok(task)) => ListenEvent::Task(task),
                Some(Err(error)) => return Some(Err(ClientError::Protocol(error))),
                None => ListenEvent::Other { method, params },
            },
            // On stdio the server ends a subscription it closes with this, after its result.
            "notifications/cancelled" => {
                self.ended = true;
                return None;
            }
            _ => ListenEvent::Other { method, params },
        };
        Some(Ok(event))
    }
}

impl Client {
    /// Opens a subscription (`subscriptions/listen`) and waits for the server's
    /// acknowledgement. Listening to tasks declares the Tasks extension.
    pub async fn listen(&self, filter: SubscriptionFilter) -> Result<Subscription, ClientError> {
        let mut params = Map::new();
        params.insert("notifications".into(), filter.to_json());
        if !filter.task_ids.is_empty() {
            let mut meta = Map::new();
            meta.insert(CLIENT_CAPABILITIES.into(), Value::Object(self.with_tasks()));
            params.insert("_meta".into(), Value::Object(meta));
        }
        let out = self.outgoing("subscriptions/listen", params)?;
        let (sender, mut messages) = mpsc::channel(64);
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move { inner.transport.stream(&out, sender).await });
        let first = match self.inner_timeout() {
            Some(limit) => tokio::time::timeout(limit, messages.recv())
                .await
                .unwrap_or_else(|_| {
                    Some(Err(ClientError::transport(
                        TransportErrorKind::Timeout,
                        "no acknowledgement of the subscription in time",
                    )))
                }),
            None => messages.recv().await,
        };
        let first = first.ok_or_else(|| {
            ClientError::transport(
                TransportErrorKind::Lost,
                "the subscription ended before its acknowledgement",
            )
        })??;
        if let Some(error) = first.get("error") {
            let failure = RpcFailure::from_error(error, None);
            return Err(ClientError::Rpc(Box::new(failure)));
        }
        if first["method"] != "notifications/subscriptions/acknowledged" {
            return Err(ClientError::Protocol(format!(
                "a subscription's first message is not its acknowledgement: {first}"
            )));
        }
        Ok(Subscription {
            acknowledged: first["params"]["notifications"].clone(),
            messages,
            client: Arc::clone(&self.inner),
            ended: false,
        })
    }
}
