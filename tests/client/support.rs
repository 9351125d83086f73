//! What the client tests share: basket servers built here, a TCP proxy that loses answers on
//! demand, a server of an earlier revision, and harness processes restarted by the tests.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mcp_tools::McpServer;
use mcp_tools::client::{Client, ClientError, Harness, Outcome};
use mcp_tools::store::Store;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

use crate::basket;
use crate::common::within;

/// The key every basket server of these tests signs with: replicas must share one.
pub const KEY: &[u8] = b"the client tests' signing key, thirty-two bytes or more";

/// The basket server on `store`, anonymous callers, signing with [`KEY`].
pub fn basket_server(store: impl Store) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set())
        .store(store)
        .signing_key(KEY.to_vec())
        .build()
        .unwrap()
}

/// A client of `url` with the settings of these tests: answers within a test step.
pub async fn client(url: &str) -> Client {
    within(
        &format!("connecting to {url}"),
        Client::builder()
            .client_info("client-tests", "1.0.0")
            .connect_http(url),
    )
    .await
    .unwrap_or_else(|error| panic!("connecting to {url}: {error}"))
}

/// A harness over a new client of `url`, which has listed the tools.
pub async fn harness(url: &str) -> Harness {
    let client = client(url).await;
    within("listing the tools", client.list_tools())
        .await
        .unwrap_or_else(|error| panic!("listing the tools of {url}: {error}"));
    Harness::new(client)
}

/// `harness.call(tool, arguments)`, within a test step.
pub async fn call(harness: &Harness, tool: &str, arguments: Value) -> Outcome {
    within(
        &format!("{tool} {arguments}"),
        harness.call(tool, arguments),
    )
    .await
    .unwrap_or_else(|error| panic!("{tool}: {error}"))
}

/// `harness.call(tool, arguments)` that must fail, within a test step.
pub async fn call_err(harness: &Harness, tool: &str, arguments: Value) -> ClientError {
    match within(
        &format!("{tool} {arguments}"),
        harness.call(tool, arguments),
    )
    .await
    {
        Ok(outcome) => panic!("{tool}: expected an error, got {outcome:?}"),
        Err(error) => error,
    }
}

/// Creates a basket through `harness` and brings it to version 7 with six notes, memory and
/// storage untouched (16 GiB and 512 GiB): the seed's starting point. Returns its handle.
pub async fn basket_at_version_7(harness: &Harness) -> String {
    let Outcome::Applied(created) = call(harness, "basket_create", json!({})).await else {
        panic!("basket_create did not apply");
    };
    for note in 1..=6 {
        let added = call(
            harness,
            "basket_add_note",
            json!({ "basket_id": created.handle, "text": format!("note {note}") }),
        )
        .await;
        assert!(matches!(added, Outcome::Applied(_)), "{added:?}");
    }
    created.handle
}

/// The basket as it is now, read through a harness of its own (what a third party sees).
/// The notes a read of a basket shows (`notes.items[].value`), oldest first.
pub fn notes(state: &Value) -> Vec<&str> {
    state["notes"]["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item["value"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

pub async fn current(url: &str, handle: &str) -> mcp_tools::store::Snapshot {
    let reader = harness(url).await;
    match call(&reader, "basket_get", json!({ "basket_id": handle })).await {
        Outcome::Current(snapshot) => snapshot,
        other => panic!("basket_get: {other:?}"),
    }
}

/// What a proxy saw of one request: the replica it went to, its method and its `Mcp-Name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub replica: usize,
    pub method: String,
    pub name: Option<String>,
    /// The request as it arrived in its first chunk: the head and the start of the body.
    pub text: String,
}

impl Seen {
    /// The request's JSON body, once all of it has arrived.
    pub fn body(&self) -> Value {
        let (_, body) = self
            .text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("a request with a body: {}", self.text));
        serde_json::from_str(body).unwrap_or_else(|error| panic!("{error}: {body}"))
    }
}

/// How the proxy loses an answer the server gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Loss {
    /// The connection closes without it: a connection reset.
    #[default]
    Drop,
    /// A gateway's `502 Bad Gateway` in its place, and the connection closes.
    BadGateway,
    /// Never delivered: the connection stays open and silent until the client gives up.
    Hold,
    /// In its place the `STORE_UNAVAILABLE` tool error a replica answers when its store fails
    /// (for PostgreSQL, a connection lost after `COMMIT`), and the connection closes.
    StoreUnavailable,
}

/// The result a replica answers when its store failed, as `ToolError::into_result` renders
/// `STORE_UNAVAILABLE`.
const STORE_UNAVAILABLE_MESSAGE: &str = "The state store is temporarily unavailable; retry the same request with the same operation_id.";

/// A TCP proxy in front of one or more replicas, each client connection to the next replica in
/// turn. Armed with [`FaultProxy::lose_answers`], it lets the next requests through and loses
/// their answers once the server has sent them (so the server has acted), as a [`Loss`] says,
/// closes every client connection, and sends the next connection to the next replica.
pub struct FaultProxy {
    pub addr: SocketAddr,
    state: Arc<ProxyState>,
    accepting: AbortHandle,
}

#[derive(Default)]
struct ProxyState {
    replicas: Vec<SocketAddr>,
    /// The replica the next connection goes to.
    next: AtomicUsize,
    /// How many answers to lose still.
    to_lose: AtomicUsize,
    /// How they are lost.
    loss: Mutex<Loss>,
    /// How many answers were lost.
    lost: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
    connections: Mutex<Vec<AbortHandle>>,
}

impl FaultProxy {
    pub async fn start(replicas: Vec<SocketAddr>) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(ProxyState {
            replicas,
            ..ProxyState::default()
        });
        let accepting = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let replica = state.next.load(Ordering::SeqCst) % state.replicas.len();
                    let task = tokio::spawn(relay(Arc::clone(&state), client, replica));
                    lock(&state.connections).push(task.abort_handle());
                }
            })
            .abort_handle()
        };
        FaultProxy {
            addr,
            state,
            accepting,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Drops the next `count` answers after the server sent them.
    pub fn lose_answers(&self, count: usize) {
        self.lose_answers_as(count, Loss::Drop);
    }

    /// Loses the next `count` answers after the server sent them, as `loss` says.
    pub fn lose_answers_as(&self, count: usize, loss: Loss) {
        *lock(&self.state.loss) = loss;
        self.state.to_lose.store(count, Ordering::SeqCst);
    }

    /// How many answers were dropped.
    pub fn lost(&self) -> usize {
        self.state.lost.load(Ordering::SeqCst)
    }

    /// Every request seen so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.state.seen).clone()
    }

    /// The requests seen so far of `method` (and `name`, when given).
    pub fn seen_of(&self, method: &str, name: Option<&str>) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|seen| {
                seen.method == method && (name.is_none() || seen.name.as_deref() == name)
            })
            .collect()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        for connection in lock(&self.state.connections).drain(..) {
            connection.abort();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The value of a header in a request's head, read case-insensitively.
fn header(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_owned())
    })
}

/// One client connection: to `replica`, both ways, until either side closes or an answer is
/// to be lost.
async fn relay(state: Arc<ProxyState>, mut client: TcpStream, replica: usize) {
    let Ok(mut server) = TcpStream::connect(state.replicas[replica]).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    // This connection's last request in `seen`, which later chunks (its body) extend.
    let last = AtomicUsize::new(usize::MAX);
    let requests = async {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = client_read.read(&mut buffer).await.unwrap_or(0);
            if read == 0 {
                return;
            }
            let text = String::from_utf8_lossy(&buffer[..read]);
            {
                let mut seen = lock(&state.seen);
                // A request's head (its body may follow in the same chunk or the next ones).
                match header(&text, "mcp-method") {
                    Some(method) => {
                        seen.push(Seen {
                            replica,
                            method,
                            name: header(&text, "mcp-name"),
                            text: text.clone().into_owned(),
                        });
                        last.store(seen.len() - 1, Ordering::SeqCst);
                    }
                    None => {
                        if let Some(seen) = seen.get_mut(last.load(Ordering::SeqCst)) {
                            seen.text.push_str(&text);
                        }
                    }
                }
            }
            if server_write.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    };
    let answers = async {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = server_read.read(&mut buffer).await.unwrap_or(0);
            if read == 0 {
                return;
            }
            let lose = state
                .to_lose
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok();
            if lose {
                state.lost.fetch_add(1, Ordering::SeqCst);
                state.next.fetch_add(1, Ordering::SeqCst);
                let loss = *lock(&state.loss);
                let instead = match loss {
                    Loss::Drop => return,
                    Loss::Hold => return std::future::pending().await,
                    Loss::BadGateway => {
                        "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_owned()
                    }
                    Loss::StoreUnavailable => {
                        let request = lock(&state.seen)[last.load(Ordering::SeqCst)].body();
                        let body = json!({ "jsonrpc": "2.0", "id": request["id"], "result": {
                            "resultType": "complete",
                            "content": [{ "type": "text", "text": STORE_UNAVAILABLE_MESSAGE }],
                            "structuredContent": {
                                "code": "STORE_UNAVAILABLE",
                                "message": STORE_UNAVAILABLE_MESSAGE,
                            },
                            "isError": true,
                        } })
                        .to_string();
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    }
                };
                let _ = client_write.write_all(instead.as_bytes()).await;
                return;
            }
            if client_write.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    };
    let lost = tokio::select! {
        () = requests => false,
        () = answers => state.lost.load(Ordering::SeqCst) > 0,
    };
    if lost {
        // Every other connection goes too: the retry opens a new one, to the next replica.
        let others: Vec<AbortHandle> = lock(&state.connections).drain(..).collect();
        for other in others {
            other.abort();
        }
    }
}

/// A server of an earlier revision: it knows no `server/discover` and answers every POST as a
/// 2025-11-25 server without a session does (`400`, `-32000`), or with another refusal
/// ([`EarlierServer::answering`]). Counts what it was sent.
pub struct EarlierServer {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicUsize>,
    accepting: AbortHandle,
}

impl EarlierServer {
    pub async fn start() -> EarlierServer {
        let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;
        EarlierServer::answering(body).await
    }

    /// A server that answers every POST with `400` and `body`.
    pub async fn answering(body: &'static str) -> EarlierServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&requests);
        let accepting = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 64 * 1024];
                    let mut request = Vec::new();
                    // The head, then the body its Content-Length announces.
                    loop {
                        let Ok(read) = stream.read(&mut buffer).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        request.extend_from_slice(&buffer[..read]);
                        let text = String::from_utf8_lossy(&request).into_owned();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let length: usize = header(&text[..end], "content-length")
                                .and_then(|length| length.parse().ok())
                                .unwrap_or(0);
                            if request.len() >= end + 4 + length {
                                break;
                            }
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let answer = format!(
                        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        })
        .abort_handle();
        EarlierServer {
            addr,
            requests,
            accepting,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for EarlierServer {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// A process of this test binary running the ignored test `test` (its path as
/// `module_path!()` spells it) with `env`: its output's lines starting with `RESULT ` are
/// returned, parsed, once it exits.
pub fn run_child(test: &str, env: &[(&str, String)]) -> Vec<Value> {
    let (_, test) = test.split_once("::").expect("a test path");
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(command.output());
    });
    let output = finished
        .recv_timeout(crate::common::STEP)
        .expect("the child process to finish within a test step")
        .expect("the child process runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the child failed:\n{stdout}");
    stdout
        .lines()
        .filter_map(|line| line.split_once("RESULT ").map(|(_, json)| json))
        .map(|json| serde_json::from_str(json).expect("a child's RESULT is JSON"))
        .collect()
}

/// The example binary `name`, which `cargo test` builds next to this test binary; refused when
/// older than its source (`cargo test --test client` alone does not rebuild examples).
pub fn example(name: &str) -> std::path::PathBuf {
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|debug| debug.join("examples").join(name))
        .filter(|path| path.exists())
        .unwrap_or_else(|| panic!("cargo test builds the {name} example next to the tests"));
    let modified = |path: &std::path::Path| std::fs::metadata(path).unwrap().modified().unwrap();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut sources = vec![examples.join(format!("{name}.rs"))];
    if matches!(name, "basket" | "harness") {
        sources.push(examples.join("support").join("basket.rs"));
    }
    for source in sources {
        assert!(
            modified(&binary) >= modified(&source),
            "{} is older than {}: run `cargo build --example {name}` or the whole `cargo test`",
            binary.display(),
            source.display()
        );
    }
    binary
}

/// An example server serving HTTP on a free loopback port, killed when dropped.
pub struct ExampleServer {
    pub url: String,
    pub port: u16,
    _process: crate::common::examples::Process,
}

impl ExampleServer {
    /// Starts the example `name` with `args` and `--bind`, and waits until it answers.
    pub async fn start(name: &str, args: &[&str]) -> ExampleServer {
        let port = crate::common::examples::free_port();
        let bind = format!("127.0.0.1:{port}");
        let process = std::process::Command::new(example(name))
            .args(args)
            .args(["--bind", &bind])
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let process = crate::common::examples::Process(process);
        crate::common::examples::healthy(port).await;
        ExampleServer {
            url: format!("http://{bind}/mcp"),
            port,
            _process: process,
        }
    }
}
