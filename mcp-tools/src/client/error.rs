//! Why a request failed, typed so a caller branches on the kind and never parses a message.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::result::ToolResult;
use crate::protocol::recovery::Recovery;
use crate::store::tasks::record::TaskStatus;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The request did not reach the server, or its answer did not come back whole.
    #[error("{0}")]
    Transport(TransportError),
    /// An HTTP answer that is not a JSON-RPC one: a proxy's `502`, a `401` challenge.
    #[error("HTTP {status} without a JSON-RPC answer{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    Http {
        /// The status.
        status: u16,
        /// The start of the body, as text.
        body: String,
        /// The `Retry-After` the server asked for, if any.
        retry_after: Option<Duration>,
    },
    /// The server answered with a JSON-RPC error.
    #[error("{0}")]
    Rpc(Box<RpcFailure>),
    /// A tool answered with `isError: true`.
    #[error("{0}")]
    Tool(Box<ToolFailure>),
    /// The server does not serve protocol revision 2026-07-28.
    #[error("not a 2026-07-28 server: {reason}")]
    Unsupported {
        /// What it answered instead.
        reason: String,
        /// The versions it says it serves, when it says.
        supported: Vec<String>,
    },
    /// An answer that breaks the protocol: not JSON-RPC, another request's id, a page cursor
    /// that never ends.
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    /// A tool asked for input (elicitation, sampling, roots) that the client could not give:
    /// no input handler, or more rounds than the client allows.
    #[error("the tool asked for input the client did not give: {0}")]
    InputRequired(String),
    /// A task ended without a result.
    #[error("task {task_id} ended {status:?}: {message}")]
    Task {
        /// The task.
        task_id: String,
        /// `Failed` or `Cancelled`.
        status: TaskStatus,
        /// The server's error message, or its status message.
        message: String,
    },
    /// The caller asked for something the client cannot send: arguments that are not an object,
    /// capabilities that are not one, an invalid header.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A resumption record that cannot be used.
    #[error("{0}")]
    Record(#[from] RecordError),
    /// This machine failed: no random numbers for an operation id, a child process that cannot
    /// be started.
    #[error("{0}")]
    Local(String),
}

impl ClientError {
    /// Whether sending the same request again may succeed: the transport failed, or the server
    /// answered `5xx` or `429`. For a request that changes something, only a retry with the same
    /// operation id is safe, since the first one may have been applied.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Transport(_) => true,
            ClientError::Http { status, .. } => *status >= 500 || *status == 429,
            ClientError::Rpc(failure) => failure
                .status
                .is_some_and(|status| status >= 500 || status == 429),
            _ => false,
        }
    }

    /// How long the server asked to wait before a retry (`Retry-After`), if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::Http { retry_after, .. } => *retry_after,
            ClientError::Rpc(failure) => failure.retry_after,
            _ => None,
        }
    }

    /// The JSON-RPC error code, for [`ClientError::Rpc`].
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            ClientError::Rpc(failure) => Some(failure.code),
            _ => None,
        }
    }

    pub(super) fn transport(kind: TransportErrorKind, message: impl Into<String>) -> ClientError {
        ClientError::Transport(TransportError {
            kind,
            message: message.into(),
        })
    }
}

/// A request that did not reach the server, or whose answer did not come back whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError {
    /// What happened.
    pub kind: TransportErrorKind,
    /// The details, for a person.
    pub message: String,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            TransportErrorKind::Connect => "no connection to the server (nothing was sent)",
            TransportErrorKind::Lost => "the answer was lost (the server may have acted on it)",
            TransportErrorKind::Timeout => {
                "no answer in time (the server may have acted on the request)"
            }
            TransportErrorKind::Closed => "the server's process closed its pipes",
        };
        write!(f, "{what}: {}", self.message)
    }
}

/// What went wrong in the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// No connection could be made: the request was not sent.
    Connect,
    /// The request was sent and its answer was cut off (a reset connection, a stream that
    /// ended early): the server may have acted on it.
    Lost,
    /// No answer within the client's timeout: the server may have acted on the request.
    Timeout,
    /// The server process exited or closed its standard output.
    Closed,
}

/// A JSON-RPC error answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RpcFailure {
    /// The code, e.g. `-32602`.
    pub code: i64,
    /// The message.
    pub message: String,
    /// The error's `data`.
    pub data: Option<Value>,
    /// The HTTP status it came with (HTTP only).
    pub status: Option<u16>,
    /// The `Retry-After` it came with.
    pub retry_after: Option<Duration>,
}

impl RpcFailure {
    /// Reads a JSON-RPC `error` member; a malformed one is kept as an internal error.
    pub(super) fn from_error(error: &Value, status: Option<u16>) -> RpcFailure {
        RpcFailure {
            code: error["code"]
                .as_i64()
                .unwrap_or(crate::protocol::codes::INTERNAL_ERROR.into()),
            message: error["message"]
                .as_str()
                .unwrap_or("(no message)")
                .to_owned(),
            data: error.get("data").cloned(),
            status,
            retry_after: None,
        }
    }

    /// The JSON-RPC `error` member this failure was read from.
    pub fn to_error_object(&self) -> Value {
        let mut error = serde_json::json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

impl fmt::Display for RpcFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)?;
        if let Some(status) = self.status {
            write!(f, " (HTTP {status})")?;
        }
        Ok(())
    }
}

/// A tool result with `isError: true`, read as this framework's tools write one: a stable
/// `code`, a `message`, what to do next (`recovery`) and `details`, in `structuredContent`.
/// Another server's tool may only write text: then `code` is `None` and `message` is the text.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolFailure {
    /// The tool called.
    pub tool: String,
    /// The stable code, when the result carries one.
    pub code: Option<String>,
    /// What went wrong.
    pub message: String,
    /// What to do next, when the result says.
    pub recovery: Option<Recovery>,
    /// Structured details.
    pub details: Option<Value>,
    /// The whole result.
    pub result: ToolResult,
}

impl ToolFailure {
    pub(super) fn from_result(tool: &str, result: ToolResult) -> ToolFailure {
        let structured = result.structured_content.as_ref();
        let text = |key: &str| {
            structured
                .and_then(|value| value.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        ToolFailure {
            tool: tool.to_owned(),
            code: text("code"),
            message: text("message").unwrap_or_else(|| result.text()),
            recovery: text("recovery").map(|name| Recovery::from_name(&name)),
            details: structured.and_then(|value| value.get("details")).cloned(),
            result,
        }
    }
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "tool {} failed with {code}: {}", self.tool, self.message),
            None => write!(f, "tool {} failed: {}", self.tool, self.message),
        }
    }
}

/// The format a resumption record says it has.
pub(super) const RECORD_FORMAT: &str = "mcp-tools/resumption@1";

/// Why a resumption record cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The file cannot be read or written.
    #[error("resumption records in {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The text is not a resumption record: cut short, altered, or another kind of file.
    #[error("not a resumption record: {0}")]
    Malformed(String),
    /// A record written by another format of this library.
    #[error(
        "a resumption record of format {found:?}, which this build does not read (it reads {RECORD_FORMAT})"
    )]
    Format {
        /// The format the record says it has.
        found: String,
    },
    /// A record of another server than the one the client is connected to.
    #[error(
        "a resumption record of the server {recorded:?}, but this client is connected to {connected:?}"
    )]
    OtherServer {
        /// The server the record was made with.
        recorded: String,
        /// The server connected to.
        connected: String,
    },
    /// The server publishes no tool that reads this kind of resource since a basis version.
    #[error("the server publishes no `reads` tool for {resource} that takes `basis_version`")]
    NoRead {
        /// The resource kind of the record.
        resource: String,
    },
    /// The server refused the record's basis: its validator was not issued by this server for
    /// this resource (`INVALID_VALIDATOR`), or the resource never reached its version
    /// (`FUTURE_VERSION`).
    #[error("the server refused the record's basis with {code}: {message}")]
    BasisRefused {
        /// The server's code.
        code: String,
        /// The server's message.
        message: String,
    },
}
