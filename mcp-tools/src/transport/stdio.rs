//! The stdio transport: newline-delimited JSON-RPC on a reader and a writer, the way a client
//! that runs the server as its own child process speaks to it.
//!
//! Requests are served concurrently, each keyed by its id so `notifications/cancelled` can drop
//! it; one writer owns the output, so lines never interleave.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::HeaderMap;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use crate::context::Caller;
use crate::dispatch::{Outcome, Transport};
use crate::protocol::error::RpcError;
use crate::protocol::{Envelope, RequestId};
use crate::server::McpServer;

/// How long requests still running when the input ends may take to finish before they are
/// dropped: a client that closed stdin usually stops the process soon after.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// How many lines may wait for a slow reader of the output before requests wait for it.
const QUEUE: usize = 256;

/// Bytes read from the input, and written to the output, at a time. tokio reads stdin and
/// writes stdout on a blocking thread, so each read or write is a hand-off between threads:
/// under a client that pipes requests fast, 64 KiB at a time takes a few hundred of them
/// where 8 KiB took thousands.
const IO_BUFFER: usize = 64 * 1024;

impl McpServer {
    /// Serves MCP on the process's stdin and stdout until stdin closes.
    ///
    /// This is [`serve_io`](McpServer::serve_io) on tokio's stdin and stdout: one JSON-RPC
    /// message per line each way. **Stdout carries nothing but MCP messages**, so the
    /// application must log to stderr (with `tracing-subscriber`,
    /// `tracing_subscriber::fmt().with_writer(std::io::stderr).init()`) and never print to
    /// stdout while serving.
    ///
    /// A local process is trusted by whoever spawned it, and stdio carries no `Authorization`
    /// header: a server built with [`oauth`](crate::McpServerBuilder::oauth) refuses to serve
    /// stdio with an [`io::ErrorKind::Unsupported`] error. An
    /// [`authenticate`](crate::McpServerBuilder::authenticate) hook is called for every request
    /// with an empty `HeaderMap`.
    ///
    /// ```no_run
    /// use mcp_tools::McpServer;
    /// use mcp_tools::tools::ToolSet;
    ///
    /// #[tokio::main]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     // Any logging goes to stderr: stdout belongs to the protocol.
    ///     eprintln!("serving MCP on stdio");
    ///     McpServer::builder("my-tools", "1.0.0")
    ///         .tools(ToolSet::new())
    ///         .build()?
    ///         .serve_stdio()
    ///         .await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn serve_stdio(&self) -> io::Result<()> {
        self.serve_io(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Serves MCP on `reader` and `writer`: newline-delimited JSON-RPC, one message per line
    /// (a `\r\n` ending is accepted, blank lines are ignored), each answer and notification
    /// written as one line.
    ///
    /// - Requests are served concurrently: a slow tool call does not hold up what follows it.
    ///   At most [`max_in_flight_per_principal`](crate::McpServerBuilder::max_in_flight_per_principal)
    ///   run at once (listens aside); past it no more input is read until one is answered, so
    ///   the memory a fast producer costs is bounded (a cancellation behind the waiting request
    ///   is read once a place frees).
    ///   Progress and log notifications, and those of a `subscriptions/listen`, are written as
    ///   they come, each on its own line, before the request's final answer; listen
    ///   notifications name their subscription in `_meta`.
    /// - `notifications/cancelled` with a `requestId` drops that request (a tool sees its future
    ///   dropped) and nothing more is written for it; an unknown or finished id is ignored.
    ///   A second request reusing the id of one still in flight is refused with `-32600`.
    /// - A subscription the server ends itself (see
    ///   [`close_subscriptions`](McpServer::close_subscriptions)) gets its final result, then a
    ///   `notifications/cancelled` naming it, as the protocol asks of stdio servers.
    /// - A line longer than the body limit ([`body_limit`](crate::McpServerBuilder::body_limit))
    ///   is answered with `-32600` as soon as it is too long, and the rest of it is skipped
    ///   without being kept; a line that is not JSON gets `-32700`. Serving goes on after both.
    /// - When `reader` reaches its end, open subscriptions are dropped at once and other
    ///   requests still running get up to one second to finish and be answered; those still
    ///   running then are dropped. The writer is flushed and `Ok(())` returned.
    /// - An error reading `reader` or writing `writer` (the client closed the pipe) ends serving
    ///   with that error; requests in flight are dropped.
    ///
    /// Authorization is as for [`serve_stdio`](McpServer::serve_stdio): refused with OAuth,
    /// and the `authenticate` hook sees an empty `HeaderMap`.
    ///
    /// ```
    /// # use mcp_tools::McpServer;
    /// # use mcp_tools::tools::ToolSet;
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    ///
    /// let server = McpServer::builder("demo", "1.0.0").tools(ToolSet::new()).build().unwrap();
    /// let (mut input, server_input) = tokio::io::duplex(4096);
    /// let (server_output, output) = tokio::io::duplex(4096);
    /// let serving = tokio::spawn(async move { server.serve_io(server_input, server_output).await });
    ///
    /// input.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"#).await.unwrap();
    /// input.write_all(br#""io.modelcontextprotocol/protocolVersion":"2026-07-28","#).await.unwrap();
    /// input.write_all(br#""io.modelcontextprotocol/clientCapabilities":{}}}}"#).await.unwrap();
    /// input.write_all(b"\n").await.unwrap();
    /// drop(input); // the end of the input ends serving, once the request is answered
    ///
    /// let mut answer = String::new();
    /// BufReader::new(output).read_line(&mut answer).await.unwrap();
    /// let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    /// assert_eq!(answer["id"], 1);
    /// assert!(answer["result"]["supportedVersions"].is_array());
    /// serving.await.unwrap().unwrap();
    /// # });
    /// ```
    pub async fn serve_io<R, W>(&self, reader: R, writer: W) -> io::Result<()>
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send,
    {
        if self.shared.oauth.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this server is an OAuth resource server, and stdio carries no Authorization \
                 header to check: serve it over HTTP, or build it without `oauth` to serve stdio \
                 (a local process is trusted by whoever spawned it)",
            ));
        }
        self.start_effect_delivery();
        let inflight = Arc::new(Inflight::default());
        let (lines, queued) = mpsc::channel(QUEUE);
        let writing = write_lines(writer, queued);
        let reading = self.read_requests(reader, lines, inflight);
        tokio::pin!(writing);
        tokio::select! {
            // The reader holds a sender until it is done, so the writer ends first only on a
            // write error; dropping `reading` then drops every request in flight.
            written = &mut writing => return written,
            read = reading => read?,
        }
        writing.await
    }

    /// Reads and serves messages until the input ends, then lets requests in flight finish for
    /// a bounded time.
    async fn read_requests<R: AsyncRead + Unpin + Send>(
        &self,
        reader: R,
        lines: mpsc::Sender<Line>,
        inflight: Arc<Inflight>,
    ) -> io::Result<()> {
        let limit = self.shared.body_limit;
        let mut input = LineReader::new(reader, limit);
        let mut tasks = JoinSet::new();
        // At most this many requests (listens aside) run at once: past it the reader stops
        // reading, so a client that pipes requests faster than they are answered waits in its
        // pipe, not in this process's memory.
        let running = Arc::new(tokio::sync::Semaphore::new(self.shared.in_flight.max()));
        loop {
            let read = input.next().await?;
            // Finished requests answered already; reaping them here keeps the set small.
            while tasks.try_join_next().is_some() {}
            let message = match read {
                Read::End => break,
                Read::TooLong => {
                    let error = RpcError::invalid_request(format!(
                        "The message exceeds the {limit}-byte line limit"
                    ));
                    send_error(&lines, &error).await;
                    continue;
                }
                Read::Line(message) => message,
            };
            if message.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let envelope = match Envelope::parse(&message) {
                Ok(envelope) => envelope,
                Err(error) => {
                    send_error(&lines, &error).await;
                    continue;
                }
            };
            let Some(id) = envelope.id.clone() else {
                if envelope.method == "notifications/cancelled" {
                    if let Some(id) = cancelled_request(envelope.params.as_ref()) {
                        inflight.cancel(&id);
                    }
                } else {
                    // Other notifications (a legacy client's `notifications/initialized`) are
                    // accepted, as on HTTP, and answered with nothing.
                    crate::dispatch::handle(self, envelope, Transport::Stdio, Caller::default())
                        .await;
                }
                continue;
            };
            let caller = match self.stdio_caller() {
                Ok(caller) => caller,
                Err(error) => {
                    send_error(&lines, &error.with_id(Some(id))).await;
                    continue;
                }
            };
            let dropped = Arc::new(AtomicBool::new(false));
            let listen = envelope.method == "subscriptions/listen";
            // A listen lives as long as its client wants: it is bounded per principal instead.
            let permit = if listen {
                None
            } else {
                let permit = Arc::clone(&running).acquire_owned().await;
                Some(permit.expect("the semaphore is never closed"))
            };
            let refused = {
                let mut requests = inflight.lock();
                if requests.contains_key(&id) {
                    true
                } else {
                    // Registered under the lock the request itself takes to finish, so even
                    // one that finishes at once finds itself registered.
                    let task = serve_request(
                        self.clone(),
                        envelope,
                        caller,
                        Arc::clone(&dropped),
                        lines.clone(),
                        Arc::clone(&inflight),
                    );
                    let abort = tasks.spawn(async move {
                        task.await;
                        drop(permit);
                    });
                    requests.insert(
                        id.clone(),
                        Entry {
                            dropped,
                            abort,
                            listen,
                        },
                    );
                    false
                }
            };
            if refused {
                let error = RpcError::invalid_request(format!(
                    "Request id {id} is already in flight: each request in flight needs its own id"
                ))
                .with_id(Some(id));
                send_error(&lines, &error).await;
            }
        }
        // The client is gone or going: a subscription has nothing more to deliver, while a
        // call may still be about to finish and be answered.
        inflight.drop_where(|entry| entry.listen);
        let _ = tokio::time::timeout(DRAIN_LIMIT, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        inflight.drop_where(|_| true);
        tasks.shutdown().await;
        Ok(())
    }

    /// Who is calling: stdio carries no credentials, so the `authenticate` hook, if any, judges
    /// an empty set of headers.
    fn stdio_caller(&self) -> Result<Caller, RpcError> {
        let mut caller = Caller::default();
        if let Some(authenticate) = &self.shared.authenticate {
            caller.principal = authenticate(&HeaderMap::new())?;
        }
        Ok(caller)
    }
}

/// The id a `notifications/cancelled` names, when it names one that could be a request's.
fn cancelled_request(params: Option<&serde_json::Map<String, Value>>) -> Option<RequestId> {
    serde_json::from_value(params?.get("requestId")?.clone()).ok()
}

/// One request in flight.
struct Entry {
    /// Set once the request is dropped, so the lines it already queued are not written; also
    /// tells it apart from a later request that reuses its id.
    dropped: Arc<AtomicBool>,
    abort: AbortHandle,
    listen: bool,
}

impl Entry {
    fn drop_request(&self) {
        self.dropped.store(true, Ordering::Release);
        self.abort.abort();
    }
}

/// The requests in flight, by id: the reader registers and cancels them, and each takes itself
/// out to be answered.
#[derive(Default)]
struct Inflight(Mutex<HashMap<RequestId, Entry>>);

impl Inflight {
    fn lock(&self) -> MutexGuard<'_, HashMap<RequestId, Entry>> {
        crate::sync::lock(&self.0)
    }

    /// Takes a finished request out; `false` if it was cancelled meanwhile and must not be
    /// answered.
    fn finish(&self, id: &RequestId, dropped: &Arc<AtomicBool>) -> bool {
        let mut requests = self.lock();
        if requests
            .get(id)
            .is_some_and(|entry| Arc::ptr_eq(&entry.dropped, dropped))
        {
            requests.remove(id);
            true
        } else {
            false
        }
    }

    /// Drops the request `id`, if it is still in flight.
    fn cancel(&self, id: &RequestId) {
        if let Some(entry) = self.lock().remove(id) {
            entry.drop_request();
        }
    }

    fn drop_where(&self, pick: impl Fn(&Entry) -> bool) {
        self.lock().retain(|_, entry| {
            let drop = pick(entry);
            if drop {
                entry.drop_request();
            }
            !drop
        });
    }
}

/// One line to write.
struct Line {
    bytes: Vec<u8>,
    /// Whether the request a notification belongs to was dropped: nothing it queued before a
    /// cancellation goes out after it.
    dropped: Option<Arc<AtomicBool>>,
}

impl Line {
    fn answer(bytes: Vec<u8>) -> Line {
        Line {
            bytes,
            dropped: None,
        }
    }

    fn notification(message: &Value, dropped: &Arc<AtomicBool>) -> Line {
        Line {
            bytes: serde_json::to_vec(message).expect("notifications serialize"),
            dropped: Some(Arc::clone(dropped)),
        }
    }
}

async fn send_error(lines: &mpsc::Sender<Line>, error: &RpcError) {
    let bytes = serde_json::to_vec(&error.to_response()).expect("errors serialize");
    // A closed queue means the writer failed, which ends serving with its own error.
    let _ = lines.send(Line::answer(bytes)).await;
}

/// Serves one request to its end, writing its notifications as they come and then its answer,
/// unless it was cancelled first.
async fn serve_request(
    server: McpServer,
    envelope: Envelope,
    caller: Caller,
    dropped: Arc<AtomicBool>,
    lines: mpsc::Sender<Line>,
    inflight: Arc<Inflight>,
) {
    let id = envelope.id.clone().expect("requests carry an id");
    let listen = envelope.method == "subscriptions/listen";
    let run = async {
        match crate::dispatch::handle(&server, envelope, Transport::Stdio, caller).await {
            Outcome::Accepted => Vec::new(),
            Outcome::Result { id, result } => {
                vec![crate::transport::http::result_body(&id, &result)]
            }
            Outcome::Error(error) => {
                vec![serde_json::to_vec(&error.to_response()).expect("errors serialize")]
            }
            Outcome::Stream {
                id,
                mut notifications,
                mut finish,
            } => {
                let result = loop {
                    tokio::select! {
                        biased;
                        Some(message) = notifications.recv() => {
                            if lines.send(Line::notification(&message, &dropped)).await.is_err() {
                                return Vec::new();
                            }
                        }
                        result = &mut finish => break result,
                    }
                };
                // Notifications sent in the same poll as the result are still queued.
                while let Ok(message) = notifications.try_recv() {
                    if lines
                        .send(Line::notification(&message, &dropped))
                        .await
                        .is_err()
                    {
                        return Vec::new();
                    }
                }
                match result {
                    Ok(result) => {
                        let mut answer = vec![crate::transport::http::result_body(&id, &result)];
                        // A listen ends with a result only when the server closes it.
                        if listen {
                            answer.push(ended_subscription(&id));
                        }
                        answer
                    }
                    Err(error) => vec![
                        serde_json::to_vec(&error.with_id(Some(id)).to_response())
                            .expect("errors serialize"),
                    ],
                }
            }
        }
    };
    // `dispatch::handle` answers a request whose handling panicked, a stream's too.
    let answer = run.await;
    if !inflight.finish(&id, &dropped) {
        return;
    }
    for bytes in answer {
        if lines.send(Line::answer(bytes)).await.is_err() {
            return;
        }
    }
}

/// The `notifications/cancelled` a stdio server sends, after its final result, when it ends a
/// subscription itself: the only use the protocol allows a server of that notification.
fn ended_subscription(id: &RequestId) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": id, "reason": "The server closed the subscription" },
    }))
    .expect("notifications serialize")
}

/// Writes queued lines until every sender is gone, flushing whenever the queue runs dry.
async fn write_lines<W: AsyncWrite + Unpin>(
    writer: W,
    mut queued: mpsc::Receiver<Line>,
) -> io::Result<()> {
    let mut writer = BufWriter::with_capacity(IO_BUFFER, writer);
    while let Some(line) = queued.recv().await {
        if line
            .dropped
            .as_ref()
            .is_some_and(|dropped| dropped.load(Ordering::Acquire))
        {
            continue;
        }
        writer.write_all(&line.bytes).await?;
        writer.write_all(b"\n").await?;
        if queued.is_empty() {
            // Requests run as tasks of their own, and under load their answers arrive one by
            // one: a turn of the scheduler lets those about to be queued join this write,
            // where flushing at once would take a write (a hop to a blocking thread, for
            // stdout) per answer.
            tokio::task::yield_now().await;
            if queued.is_empty() {
                writer.flush().await?;
            }
        }
    }
    writer.flush().await
}

/// What the next line of input is.
enum Read {
    /// A complete line, without its `\n` or `\r\n`.
    Line(Vec<u8>),
    /// A line longer than the limit: reported once, as soon as it is too long; the rest of it
    /// is skipped by the reads that follow.
    TooLong,
    /// The input ended.
    End,
}

/// Splits the input into lines, keeping at most the limit (and a `\r`) of any one line.
struct LineReader<R> {
    reader: BufReader<R>,
    limit: usize,
    line: Vec<u8>,
    /// Inside a line already reported too long.
    skipping: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(reader: R, limit: usize) -> Self {
        LineReader {
            reader: BufReader::with_capacity(IO_BUFFER, reader),
            limit,
            line: Vec::new(),
            skipping: false,
        }
    }

    /// The next line. Cancel-safe: state changes only between reads.
    async fn next(&mut self) -> io::Result<Read> {
        loop {
            let chunk = self.reader.fill_buf().await?;
            if chunk.is_empty() {
                // A last line without its newline still counts.
                self.skipping = false;
                if self.line.is_empty() {
                    return Ok(Read::End);
                }
                return Ok(self.complete());
            }
            let newline = chunk.iter().position(|&b| b == b'\n');
            let (used, content) = match newline {
                Some(at) => (at + 1, &chunk[..at]),
                None => (chunk.len(), chunk),
            };
            if self.skipping {
                self.skipping = newline.is_none();
                self.reader.consume(used);
                continue;
            }
            // One byte over the limit may be the `\r` of a `\r\n`.
            if self.line.len() + content.len() > self.limit.saturating_add(1) {
                self.line.clear();
                self.skipping = newline.is_none();
                self.reader.consume(used);
                return Ok(Read::TooLong);
            }
            self.line.extend_from_slice(content);
            self.reader.consume(used);
            if newline.is_some() {
                return Ok(self.complete());
            }
        }
    }

    fn complete(&mut self) -> Read {
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        if self.line.len() > self.limit {
            self.line.clear();
            return Read::TooLong;
        }
        Read::Line(std::mem::take(&mut self.line))
    }
}
