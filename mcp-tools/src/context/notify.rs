//! Notifications a request may stream before its result: progress and log messages.
//!
//! They exist only when the request opted in (`progressToken`, `logLevel` in its `_meta`), travel
//! only on that request's own response stream, and stop with it.

use std::sync::Mutex;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::protocol::LogLevel;

/// How many notifications may wait for a slow reader. Past that, progress and log messages are
/// dropped rather than buffered without bound (they are advisory), while a subscription waits for
/// the reader: its sender then falls behind the change feed, and a subscription that lagged
/// re-sends every list and resource it follows.
pub(crate) const BUFFER: usize = 256;

/// The sending half of a request's notification stream.
pub(crate) struct Notifier {
    sender: mpsc::Sender<Value>,
    progress_token: Option<Value>,
    log_level: Option<LogLevel>,
    last_progress: Mutex<Option<f64>>,
}

impl Notifier {
    pub(crate) fn new(
        sender: mpsc::Sender<Value>,
        progress_token: Option<Value>,
        log_level: Option<LogLevel>,
    ) -> Self {
        Notifier {
            sender,
            progress_token,
            log_level,
            last_progress: Mutex::new(None),
        }
    }

    /// Sends a notification as is, waiting for room in the buffer. The stream that reads the
    /// buffer polls the sender's future too, so waiting here cannot deadlock it; a reader that has
    /// gone away ends the wait.
    pub(crate) async fn deliver(&self, message: Value) {
        let _ = self.sender.send(message).await;
    }

    pub(crate) fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        // Progress must strictly increase; a report that does not is dropped, not sent.
        {
            let mut last = self.last_progress.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|last| progress <= last) || !progress.is_finite() {
                return;
            }
            *last = Some(progress);
        }
        let mut params = json!({ "progressToken": token, "progress": progress });
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        let _ = self.sender.try_send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": params,
        }));
    }

    pub(crate) fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if self.log_level.is_none_or(|threshold| level < threshold) {
            return;
        }
        let mut params = json!({ "level": level.as_str(), "data": data });
        if let Some(logger) = logger {
            params["logger"] = json!(logger);
        }
        let _ = self.sender.try_send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": params,
        }));
    }
}
