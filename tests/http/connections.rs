//! What a connection may cost the server, over real TCP on loopback: one that never finishes its
//! request headers is closed after the header-read timeout, so is a kept-alive one left idle,
//! and at most `max_connections` are served at once while the rest wait their turn.

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
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": { "_meta": common::meta() } })
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {}\r\n\
         Mcp-Method: server/discover\r\nContent-Length: {}\r\n\r\n{body}",
        common::VERSION,
        body.len()
    )
    .into_bytes()
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
