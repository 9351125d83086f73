//! stdio: the server runs as a child process; newline-delimited JSON-RPC on its standard input
//! and output, answers matched to requests by id, notifications handed on as they come, and
//! `notifications/cancelled` for a request the caller gave up on.

use std::collections::HashMap;
use std::process::Stdio as Pipe;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

use super::error::{ClientError, RpcFailure, TransportErrorKind};
use super::wire::{Outgoing, SinkCell};
use crate::sync::{lock, read};

type Answer = Result<Value, ClientError>;

/// A server process and the tasks that read and write its pipes.
pub(super) struct Stdio {
    shared: Arc<Shared>,
    /// Killed when the client is dropped.
    _child: Child,
    /// The command, for messages.
    command: String,
}

struct Shared {
    /// Requests awaiting their response, by id.
    pending: Mutex<HashMap<i64, oneshot::Sender<Answer>>>,
    /// Requests whose every message is wanted (`subscriptions/listen`), by id.
    streams: Mutex<HashMap<i64, mpsc::Sender<Answer>>>,
    /// Lines for the server's standard input.
    lines: mpsc::Sender<Vec<u8>>,
    /// Why the pipes closed, once they did.
    closed: Mutex<Option<String>>,
    sink: SinkCell,
}

impl Stdio {
    /// Starts `command` (its program, arguments and environment set), its standard error
    /// inherited.
    pub(super) fn spawn(
        mut command: Command,
        sink: SinkCell,
        limit: usize,
    ) -> Result<Stdio, ClientError> {
        command
            .stdin(Pipe::piped())
            .stdout(Pipe::piped())
            .stderr(Pipe::inherit())
            .kill_on_drop(true);
        let display = command
            .as_std()
            .get_program()
            .to_string_lossy()
            .into_owned();
        let mut child = command
            .spawn()
            .map_err(|error| ClientError::Local(format!("cannot start {display}: {error}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ClientError::Local(format!(
                "{display} was started without pipes"
            )));
        };
        let (lines, queued) = mpsc::channel(64);
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            lines,
            closed: Mutex::new(None),
            sink,
        });
        tokio::spawn(write_lines(stdin, queued, Arc::downgrade(&shared)));
        tokio::spawn(read_lines(stdout, Arc::clone(&shared), limit));
        Ok(Stdio {
            shared,
            _child: child,
            command: display,
        })
    }

    /// The command, for messages.
    pub(super) fn command(&self) -> &str {
        &self.command
    }

    /// Sends `out` and waits for its response. Dropping the future cancels the request
    /// (`notifications/cancelled`).
    pub(super) async fn send(&self, out: &Outgoing) -> Answer {
        let (answer, answered) = oneshot::channel();
        lock(&self.shared.pending).insert(out.id, answer);
        let mut guard = Cancel {
            shared: &self.shared,
            id: out.id,
            armed: true,
            table: Table::Pending,
        };
        self.shared.write(out.body.clone()).await?;
        let answer = answered
            .await
            .unwrap_or_else(|_| Err(self.shared.closed_error()));
        guard.armed = false;
        answer
    }

    /// Sends `out` and hands every message about it to `messages` (its notifications, then its
    /// response), until the response or until `messages` is closed, which cancels the request.
    pub(super) async fn stream(&self, out: &Outgoing, messages: mpsc::Sender<Answer>) {
        lock(&self.shared.streams).insert(out.id, messages.clone());
        let _guard = Cancel {
            shared: &self.shared,
            id: out.id,
            armed: true,
            table: Table::Streams,
        };
        if let Err(error) = self.shared.write(out.body.clone()).await {
            let _ = messages.send(Err(error)).await;
            return;
        }
        messages.closed().await;
    }
}

impl Shared {
    async fn write(&self, line: Vec<u8>) -> Result<(), ClientError> {
        if lock(&self.closed).is_some() {
            return Err(self.closed_error());
        }
        self.lines.send(line).await.map_err(|_| self.closed_error())
    }

    fn closed_error(&self) -> ClientError {
        let why = lock(&self.closed)
            .clone()
            .unwrap_or_else(|| "the server process closed its pipes".to_owned());
        ClientError::transport(TransportErrorKind::Closed, why)
    }

    /// Ends every request in flight: the pipes are gone.
    fn close(&self, why: String) {
        *lock(&self.closed) = Some(why);
        let pending: Vec<_> = lock(&self.pending).drain().collect();
        for (_, answer) in pending {
            let _ = answer.send(Err(self.closed_error()));
        }
        let streams: Vec<_> = lock(&self.streams).drain().collect();
        for (_, messages) in streams {
            let _ = messages.try_send(Err(self.closed_error()));
        }
    }

    /// Routes one message from the server.
    fn route(&self, message: Value) {
        let id = message.get("id").and_then(Value::as_i64);
        let method = message.get("method").and_then(Value::as_str);
        match (method, id) {
            (Some(_), Some(_)) => {
                tracing::warn!("the server sent a request; this protocol revision has none");
            }
            (Some(method), None) => {
                let params = &message["params"];
                let stream = params["_meta"]["io.modelcontextprotocol/subscriptionId"]
                    .as_i64()
                    .or_else(|| {
                        (method == "notifications/cancelled")
                            .then(|| params["requestId"].as_i64())
                            .flatten()
                    });
                let target = stream.and_then(|id| lock(&self.streams).get(&id).cloned());
                match target {
                    Some(messages) => {
                        let _ = messages.try_send(Ok(message));
                    }
                    None => {
                        let sink = Arc::clone(&read(&self.sink));
                        sink(message);
                    }
                }
            }
            (None, Some(id)) => {
                if let Some(answer) = lock(&self.pending).remove(&id) {
                    let _ = answer.send(response(message));
                } else if let Some(messages) = lock(&self.streams).remove(&id) {
                    let _ = messages.try_send(Ok(message));
                }
            }
            (None, None) => {
                tracing::warn!("the server wrote a message without an id or a method; ignored");
            }
        }
    }
}

/// The `result` of a response, or its error.
fn response(mut message: Value) -> Answer {
    if let Some(error) = message.get("error") {
        return Err(ClientError::Rpc(Box::new(RpcFailure::from_error(
            error, None,
        ))));
    }
    match message.get_mut("result").map(Value::take) {
        Some(result @ Value::Object(_)) => Ok(result),
        _ => Err(ClientError::Protocol(
            "a response without a result object".into(),
        )),
    }
}

#[derive(Clone, Copy)]
enum Table {
    Pending,
    Streams,
}

/// Cancels a request its caller gave up on: nothing more is awaited, and the server is told.
struct Cancel<'a> {
    shared: &'a Shared,
    id: i64,
    armed: bool,
    table: Table,
}

impl Drop for Cancel<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let removed = match self.table {
            Table::Pending => lock(&self.shared.pending).remove(&self.id).is_some(),
            Table::Streams => lock(&self.shared.streams).remove(&self.id).is_some(),
        };
        if removed && lock(&self.shared.closed).is_none() {
            let cancelled = json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": { "requestId": self.id, "reason": "the client gave up on the request" },
            });
            let line = serde_json::to_vec(&cancelled).expect("JSON serializes");
            let _ = self.shared.lines.try_send(line);
        }
    }
}

async fn write_lines(
    mut stdin: ChildStdin,
    mut queued: mpsc::Receiver<Vec<u8>>,
    shared: std::sync::Weak<Shared>,
) {
    while let Some(mut line) = queued.recv().await {
        line.push(b'\n');
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        if let Err(error) = written.await {
            if let Some(shared) = shared.upgrade() {
                shared.close(format!("writing to the server process failed: {error}"));
            }
            return;
        }
    }
}

async fn read_lines(stdout: ChildStdout, shared: Arc<Shared>, limit: usize) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    let why = loop {
        line.clear();
        let read = (&mut reader)
            .take(limit as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) => break "the server process closed its standard output".to_owned(),
            Ok(_) if line.len() > limit && !line.ends_with(b"\n") => {
                break format!("the server wrote a line longer than {limit} bytes");
            }
            Ok(_) => {}
            Err(error) => break format!("reading from the server process failed: {error}"),
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(text) {
            Ok(message) => shared.route(message),
            Err(error) => {
                tracing::warn!(%error, "the server wrote a line that is not JSON; ignored")
            }
        }
    };
    shared.close(why);
}
