//! What a connection may cost the server, over real TCP on loopback: one that never finishes its
//! request headers is closed after the header-read timeout, so is a kept-alive one left idle,
//! and at most `max_connections` are served at once while the rest wait their turn. Clients that
//! hold every slot on purpose (a body that never comes, an answer never read, one token's many
//! connections, uploads that add up) are cut loose while a legitimate client is still served.

use crate::common;

use std::time::Duration;

use common::{TestServer, within_for};
use mcp_tools::McpServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn server(header_read_timeout: Duration, max_connections: usize) -> McpServer {
    McpServer::builder("connections", "1")
        .tools(common::tools::tool_set(0))
        .header_read_timeout(header_read_timeout)
        .max_connections(max_connections)
        .build()
        .unwrap()
}

/// A complete `server/discover` request on a kept-alive connection.
fn discover() -> Vec<u8> {
    discover_as(None)
}

/// A complete `server/discover` request, with `Authorization: Bearer <token>` if given.
fn discover_as(token: Option<&str>) -> Vec<u8> {
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": { "_meta": common::meta() } })
    .to_string();
    let mut request = head("server/discover", body.len(), token);
    request.extend_from_slice(body.as_bytes());
    request
}

/// A request head promising `length` bytes of body.
fn head(method: &str, length: usize, token: Option<&str>) -> Vec<u8> {
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {}\r\n\
         Mcp-Method: {method}\r\n{authorization}Content-Length: {length}\r\n\r\n",
        common::VERSION,
    )
    .into_bytes()
}

/// The head of a response: its status code and whether it says the connection closes.
async fn read_head(stream: &mut TcpStream) -> (u16, bool) {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        let read = stream.read(&mut byte).await.unwrap();
        assert!(read > 0, "the connection closed before a response head");
        seen.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
    (
        text[9..12].parse().unwrap(),
        text.contains("\r\nconnection: close\r\n"),
    )
}

/// Reads one whole response (head and `Content-Length` body); its status code.
async fn read_response(stream: &mut TcpStream) -> u16 {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the connection closed before a whole response");
        seen.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().unwrap())
                })
                .expect("a Content-Length");
            if seen.len() >= end + 4 + length {
                return text[9..12].parse().unwrap();
            }
        }
    }
}

/// Waits until the server closes the connection (a read of 0 bytes, or a reset).
async fn closed_by_the_server(stream: &mut TcpStream) {
    let mut chunk = [0u8; 1024];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            // A `408` the server may send before closing.
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_headers_is_closed() {
    let server = TestServer::start(server(Duration::from_millis(300), 64)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
        .await
        .unwrap();
    within_for(
        Duration::from_secs(10),
        "the server closing a connection stuck in its headers",
        closed_by_the_server(&mut stream),
    )
    .await;
    // The server itself is fine.
    let mut fresh = TcpStream::connect(server.addr).await.unwrap();
    fresh.write_all(&discover()).await.unwrap();
    let status = within_for(
        Duration::from_secs(10),
        "a discover answer",
        read_response(&mut fresh),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_kept_alive_connection_left_idle_is_closed() {
    let server = TestServer::start(server(Duration::from_millis(300), 64)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    for _ in 0..2 {
        stream.write_all(&discover()).await.unwrap();
        let status = within_for(
            Duration::from_secs(10),
            "a discover answer on the kept-alive connection",
            read_response(&mut stream),
        )
        .await;
        assert_eq!(status, 200, "kept alive between requests");
    }
    within_for(
        Duration::from_secs(10),
        "the server closing an idle kept-alive connection",
        closed_by_the_server(&mut stream),
    )
    .await;
}

#[tokio::test]
async fn connections_over_the_cap_wait_for_a_free_one() {
    // A long header timeout, so the two held connections stay open until the test closes them.
    let server = TestServer::start(server(Duration::from_secs(60), 2)).await;
    let held: Vec<TcpStream> = {
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(server.addr).await.unwrap();
            // One answered request each, so both are surely being served.
            stream.write_all(&discover()).await.unwrap();
            within_for(
                Duration::from_secs(10),
                "a held connection's answer",
                read_response(&mut stream),
            )
            .await;
            held.push(stream);
        }
        held
    };
    let addr = server.addr;
    let mut third = tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&discover()).await.unwrap();
        read_response(&mut stream).await
    });
    // A bounded look for an answer that must not come while both slots are taken.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut third)
            .await
            .is_err(),
        "a third connection was served past the cap of two"
    );
    drop(held);
    let status = within_for(
        Duration::from_secs(10),
        "the third connection's answer once a slot freed",
        third,
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
}

/// A legitimate client's `server/discover`, answered within `bound`.
async fn served_within(addr: std::net::SocketAddr, token: Option<&str>, bound: Duration) {
    let request = discover_as(token);
    let status = within_for(bound, "a legitimate client's answer", async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&request).await.unwrap();
        read_response(&mut stream).await
    })
    .await;
    assert_eq!(status, 200);
}

/// Opens `count` connections that each send a head promising 4,000,000 bytes of body and then
/// one byte of it.
async fn slow_bodies(
    addr: std::net::SocketAddr,
    count: usize,
    token: Option<&str>,
) -> Vec<TcpStream> {
    let mut streams = Vec::new();
    for _ in 0..count {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(&head("tools/call", 4_000_000, token))
            .await
            .unwrap();
        stream.write_all(b"{").await.unwrap();
        streams.push(stream);
    }
    streams
}

#[tokio::test]
async fn bodies_that_never_come_are_cut_at_the_body_deadline() {
    // Every slot taken by a body that stops after one byte, with a header deadline long enough
    // that only the body deadline can free them.
    let server = TestServer::start(
        McpServer::builder("connections", "1")
            .tools(common::tools::tool_set(0))
            .header_read_timeout(Duration::from_secs(60))
            .body_read_timeout(Duration::from_millis(400))
            .max_connections(8)
            .build()
            .unwrap(),
    )
    .await;
    let mut attackers = slow_bodies(server.addr, 8, None).await;
    served_within(server.addr, None, Duration::from_secs(10)).await;
    for attacker in &mut attackers {
        let (status, closes) = within_for(
            Duration::from_secs(10),
            "a 408 for a stalled body",
            read_head(attacker),
        )
        .await;
        assert_eq!((status, closes), (408, true));
        within_for(
            Duration::from_secs(10),
            "the server closing a stalled body's connection",
            closed_by_the_server(attacker),
        )
        .await;
    }
}

/// `big`: an answer of `bytes` bytes, more than a client's socket buffers hold.
struct Big;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BigArgs {
    bytes: usize,
}

impl mcp_tools::tools::Tool for Big {
    type Args = BigArgs;
    type Output = String;
    fn info(&self) -> mcp_tools::tools::ToolInfo {
        mcp_tools::tools::ToolInfo::new("big", "A long answer.")
    }
    async fn call(&self, args: BigArgs, _: mcp_tools::Context) -> String {
        "x".repeat(args.bytes)
    }
}

#[tokio::test]
async fn an_answer_never_read_is_cut_at_the_write_deadline() {
    let server = TestServer::start(
        McpServer::builder("connections", "1")
            .tools(mcp_tools::tools::ToolSet::new().with(Big))
            .header_read_timeout(Duration::from_secs(60))
            .write_timeout(Duration::from_millis(400))
            .max_connections(1)
            .build()
            .unwrap(),
    )
    .await;
    // The only slot: a 24 MB answer to a client with a small receive window that reads nothing.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut reader_that_never_reads = socket.connect(server.addr).await.unwrap();
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "big", "arguments": { "bytes": 24_000_000 },
                    "_meta": common::meta() } })
    .to_string();
    let mut request = head("tools/call", body.len(), None);
    request.extend_from_slice(body.as_bytes());
    // `Mcp-Name` goes with a call's head.
    let request = String::from_utf8(request).unwrap().replacen(
        "Mcp-Method: tools/call\r\n",
        "Mcp-Method: tools/call\r\nMcp-Name: big\r\n",
        1,
    );
    reader_that_never_reads
        .write_all(request.as_bytes())
        .await
        .unwrap();
    served_within(server.addr, None, Duration::from_secs(10)).await;
    drop(reader_that_never_reads);
}

#[tokio::test]
async fn one_token_cannot_take_every_connection() {
    // A long body deadline: only the per-principal bound can keep the slots free.
    let server = TestServer::start(
        McpServer::builder("connections", "1")
            .tools(common::tools::tool_set(0))
            .authenticate(common::tools::bearer_subject)
            .header_read_timeout(Duration::from_secs(60))
            .body_read_timeout(Duration::from_secs(60))
            .max_in_flight_per_principal(4)
            .max_connections(16)
            .build()
            .unwrap(),
    )
    .await;
    let mallory = slow_bodies(server.addr, 16, Some("mallory")).await;
    served_within(server.addr, Some("alice"), Duration::from_secs(10)).await;
    // Each request past mallory's four in flight was refused and its connection closed; the
    // four are still held.
    for mut refused in first_answered(mallory, 12).await {
        let (status, closes) = within_for(
            Duration::from_secs(10),
            "a refusal",
            read_head(&mut refused),
        )
        .await;
        assert_eq!((status, closes), (429, true));
    }
}

/// The first `count` of `streams` the server answers, within a bound; the others are checked
/// to stay unanswered for a bounded look, then closed.
async fn first_answered(streams: Vec<TcpStream>, count: usize) -> Vec<TcpStream> {
    let mut waiting = tokio::task::JoinSet::new();
    for stream in streams {
        waiting.spawn(async move {
            let mut byte = [0u8; 1];
            let _ = stream.peek(&mut byte).await;
            stream
        });
    }
    let mut answered = Vec::new();
    while answered.len() < count {
        let stream = within_for(Duration::from_secs(10), "an answer", waiting.join_next())
            .await
            .expect("fewer connections than answers awaited")
            .unwrap();
        answered.push(stream);
    }
    // A bounded look for an answer that must not come.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting.join_next())
            .await
            .is_err(),
        "more than {count} connections were answered"
    );
    answered
}

#[tokio::test]
async fn uploads_past_the_byte_budget_are_refused_while_small_requests_pass() {
    let server = TestServer::start(
        McpServer::builder("connections", "1")
            .tools(common::tools::tool_set(0))
            .header_read_timeout(Duration::from_secs(60))
            .body_read_timeout(Duration::from_secs(60))
            .body_limit(512 * 1024)
            .max_buffered_body_bytes(1024 * 1024)
            .build()
            .unwrap(),
    )
    .await;
    // Three uploads of 400 KB out of a promised 500 KB: whichever passes the 1 MiB budget is
    // refused, the other two are still being received.
    let mut uploads = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(&head("tools/call", 500_000, None))
            .await
            .unwrap();
        stream.write_all(&vec![b' '; 400_000]).await.unwrap();
        uploads.push(stream);
    }
    let mut refused = first_answered(uploads, 1).await.remove(0);
    let (status, closes) = within_for(
        Duration::from_secs(10),
        "a refusal of the upload past the budget",
        read_head(&mut refused),
    )
    .await;
    assert_eq!((status, closes), (503, true));
    served_within(server.addr, None, Duration::from_secs(10)).await;
}
