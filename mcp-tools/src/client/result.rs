//! What a server answers, as values: a tool's result, a task, what it serves, the
//! notifications it sends about a request.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::protocol::LogLevel;
use crate::store::tasks::record::TaskStatus;

/// What a tool answered (`CallToolResult`).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ToolResult {
    /// The content blocks, as sent (`{"type": "text", "text": ...}`, images, resources...).
    pub content: Vec<Value>,
    /// The structured content, when the tool returns one.
    pub structured_content: Option<Value>,
    /// Whether the tool reports an error the model should see and correct.
    pub is_error: bool,
    /// The result's `_meta`.
    pub meta: Map<String, Value>,
}

impl ToolResult {
    /// Reads a `CallToolResult`; `Err` says what is wrong with it.
    pub(super) fn from_map(mut result: Map<String, Value>) -> Result<ToolResult, String> {
        let content = match result.remove("content") {
            Some(Value::Array(blocks)) => blocks,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err("a tool result whose content is not an array".into()),
        };
        Ok(ToolResult {
            content,
            structured_content: result
                .remove("structuredContent")
                .filter(|value| !value.is_null()),
            is_error: result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            meta: match result.remove("_meta") {
                Some(Value::Object(meta)) => meta,
                _ => Map::new(),
            },
        })
    }

    /// The text blocks, joined by newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter(|block| block["type"] == "text")
            .filter_map(|block| block["text"].as_str())
            .collect();
        texts.join("\n")
    }

    /// The structured content as `T` (as `null` when there is none).
    pub fn structured<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match &self.structured_content {
            Some(value) => T::deserialize(value),
            None => T::deserialize(&Value::Null),
        }
    }
}

/// A task as the server describes it (`CreateTaskResult`, `GetTaskResult`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Task {
    /// The task's id: keep it to poll the task again after a restart.
    pub task_id: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// What it is doing, when the server says.
    pub status_message: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: Option<String>,
    /// When it last changed (RFC 3339).
    pub last_updated_at: Option<String>,
    /// How long the server keeps it from its creation, in milliseconds (`None`: unlimited).
    pub ttl_ms: Option<u64>,
    /// How often the server asks to be polled, in milliseconds.
    pub poll_interval_ms: Option<u64>,
    /// What it waits for, while `input_required`: key to `{"method", "params"}`.
    pub input_requests: Map<String, Value>,
    /// The tool's result, once `completed` (a `CallToolResult`).
    pub result: Option<Value>,
    /// The JSON-RPC error it failed with, once `failed`.
    pub error: Option<Value>,
}

impl Task {
    /// Reads a task; `Err` says what is wrong with it.
    pub(super) fn from_map(result: &Map<String, Value>) -> Result<Task, String> {
        let task_id = result
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or("a task without a taskId")?;
        let status = result
            .get("status")
            .cloned()
            .and_then(|status| serde_json::from_value::<TaskStatus>(status).ok())
            .ok_or_else(|| {
                format!(
                    "task {task_id} has a status this client does not know: {}",
                    result.get("status").unwrap_or(&Value::Null)
                )
            })?;
        let text = |key: &str| result.get(key).and_then(Value::as_str).map(str::to_owned);
        Ok(Task {
            task_id: task_id.to_owned(),
            status,
            status_message: text("statusMessage"),
            created_at: text("createdAt"),
            last_updated_at: text("lastUpdatedAt"),
            ttl_ms: result.get("ttlMs").and_then(Value::as_u64),
            poll_interval_ms: result.get("pollIntervalMs").and_then(Value::as_u64),
            input_requests: result
                .get("inputRequests")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            result: result.get("result").cloned(),
            error: result.get("error").cloned(),
        })
    }
}

/// What a server says it serves (`server/discover`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Discovery {
    /// Every protocol version the endpoint serves.
    pub supported_versions: Vec<String>,
    /// The server's capabilities (`ServerCapabilities`).
    pub capabilities: Map<String, Value>,
    /// Guidance for the model, when the server gives any.
    pub instructions: Option<String>,
    /// The server's implementation (`name`, `version`), when it says.
    pub server_info: Option<Value>,
    /// How long the answer may be cached, in milliseconds.
    pub ttl_ms: u64,
    /// `public` or `private`.
    pub cache_scope: Option<String>,
}

impl Discovery {
    /// Reads a `DiscoverResult`; `Err` says what is wrong with it.
    pub(super) fn from_map(result: &Map<String, Value>) -> Result<Discovery, String> {
        let Some(Value::Array(versions)) = result.get("supportedVersions") else {
            return Err("a server/discover result without supportedVersions".into());
        };
        Ok(Discovery {
            supported_versions: versions
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            capabilities: result
                .get("capabilities")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
            server_info: result
                .get("_meta")
                .and_then(|meta| meta.get(crate::protocol::meta_keys::SERVER_INFO))
                .cloned(),
            ttl_ms: result.get("ttlMs").and_then(Value::as_u64).unwrap_or(0),
            cache_scope: result
                .get("cacheScope")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// The server's name (`serverInfo.name`), when it says.
    pub fn server_name(&self) -> Option<&str> {
        self.server_info.as_ref()?.get("name")?.as_str()
    }
}

/// A notification the server sent about a request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Notification {
    /// `notifications/progress`.
    Progress {
        /// The call's progress token.
        token: Value,
        /// How far along it is.
        progress: f64,
        /// Out of how much, when known.
        total: Option<f64>,
        /// What it is doing.
        message: Option<String>,
    },
    /// `notifications/message`: a log message.
    Log {
        /// Its level.
        level: LogLevel,
        /// The logger's name, when given.
        logger: Option<String>,
        /// What was logged.
        data: Value,
    },
    /// Any other notification.
    Other {
        /// The method.
        method: String,
        /// Its params.
        params: Value,
    },
}

impl Notification {
    pub(super) fn from_message(mut message: Value) -> Notification {
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let params = message
            .get_mut("params")
            .map(Value::take)
            .unwrap_or(Value::Null);
        let text = |key: &str| params.get(key).and_then(Value::as_str).map(str::to_owned);
        match method.as_str() {
            "notifications/progress" if params["progress"].is_number() => Notification::Progress {
                token: params["progressToken"].clone(),
                progress: params["progress"].as_f64().unwrap_or_default(),
                total: params["total"].as_f64(),
                message: text("message"),
            },
            "notifications/message" => match params["level"].as_str().and_then(LogLevel::parse) {
                Some(level) => Notification::Log {
                    level,
                    logger: text("logger"),
                    data: params["data"].clone(),
                },
                None => Notification::Other { method, params },
            },
            _ => Notification::Other { method, params },
        }
    }
}
