//! Load benchmark: `tools/call` throughput and latency of the runtime against a bare axum handler
//! that parses the same JSON body and writes an equivalent reply, measured side by side.
//!
//! `cargo bench --bench http_throughput -- --connections 32 --seconds 5 --rounds 3`
//!
//! Each round runs the baseline, then the runtime, for the same duration with the same number of
//! keep-alive connections; the report gives both and their ratio.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::routing::post;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use mcp_tools::McpServer;
use mcp_tools::tools::ToolSet;
use serde_json::{Value, json};

/// The same `echo` tool the end-to-end tests serve.
#[path = "../tests/common/tools.rs"]
#[allow(dead_code)]
mod tools;

/// The baseline: parse the body as JSON, pull out the same fields, answer the same shape.
async fn bare(body: Bytes) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let text = request["params"]["arguments"]["text"]
        .as_str()
        .unwrap_or_default();
    let reply = json!({
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {
            "resultType": "complete",
            "content": [{ "type": "text", "text": text }],
            "_meta": { "io.modelcontextprotocol/serverInfo": { "name": "bench", "version": "1" } }
        }
    });
    (
        [("content-type", "application/json")],
        serde_json::to_vec(&reply).unwrap(),
    )
}

struct Options {
    connections: usize,
    seconds: u64,
    rounds: usize,
}

fn options() -> Options {
    let mut options = Options {
        connections: 32,
        seconds: 5,
        rounds: 3,
    };
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        let value = pair[1].parse::<u64>().ok();
        match (pair[0].as_str(), value) {
            ("--connections", Some(v)) => options.connections = v as usize,
            ("--seconds", Some(v)) => options.seconds = v,
            ("--rounds", Some(v)) => options.rounds = v as usize,
            _ => {}
        }
    }
    options
}

async fn listen(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn request_body() -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "echo",
                "arguments": { "text": "hello, world" },
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": { "name": "bench", "version": "1" }
                }
            }
        }))
        .unwrap(),
    )
}

struct Measurement {
    requests: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Measurement {
    fn throughput(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&mut self, p: f64) -> Duration {
        self.latencies.sort_unstable();
        let index = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies[index]
    }
}

/// Drives `connections` keep-alive connections for `duration`, each sending requests back to back.
async fn load(addr: SocketAddr, connections: usize, duration: Duration) -> Measurement {
    let body = request_body();
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::with_capacity(connections);
    for _ in 0..connections {
        let body = body.clone();
        workers.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let request = Request::post("/mcp")
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json")
                    .header("mcp-protocol-version", "2026-07-28")
                    .header("mcp-method", "tools/call")
                    .header("mcp-name", "echo")
                    .body(Full::new(body.clone()))
                    .unwrap();
                let sent = Instant::now();
                let response = sender.send_request(request).await.unwrap();
                assert_eq!(response.status(), 200);
                let bytes = response.into_body().collect().await.unwrap().to_bytes();
                // Both servers must really answer the call, not fail fast.
                assert!(bytes.windows(9).any(|w| w == b"\"result\":"), "{bytes:?}");
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await.unwrap());
    }
    Measurement {
        requests: latencies.len(),
        elapsed: started.elapsed(),
        latencies,
    }
}

fn main() {
    let options = options();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let server = McpServer::builder("bench", "1")
            .tools(ToolSet::new().with(tools::Echo))
            .build()
            .unwrap();
        let runtime_addr = listen(server.router()).await;
        let bare_addr = listen(axum::Router::new().route("/mcp", post(bare))).await;
        let duration = Duration::from_secs(options.seconds);
        // Warm both up so neither pays for first-touch costs in the measurement.
        load(bare_addr, options.connections, Duration::from_millis(500)).await;
        load(
            runtime_addr,
            options.connections,
            Duration::from_millis(500),
        )
        .await;
        println!(
            "tools/call, {} keep-alive connections, {} s per run, {} rounds",
            options.connections, options.seconds, options.rounds
        );
        println!("| round | bare axum req/s | p50 | p99 | mcp-tools req/s | p50 | p99 | ratio |");
        println!("|---|---|---|---|---|---|---|---|");
        let mut ratios = Vec::new();
        for round in 1..=options.rounds {
            let mut bare = load(bare_addr, options.connections, duration).await;
            let mut ours = load(runtime_addr, options.connections, duration).await;
            let ratio = ours.throughput() / bare.throughput();
            ratios.push(ratio);
            println!(
                "| {round} | {:.0} | {:?} | {:?} | {:.0} | {:?} | {:?} | {:.2} |",
                bare.throughput(),
                bare.percentile(0.5),
                bare.percentile(0.99),
                ours.throughput(),
                ours.percentile(0.5),
                ours.percentile(0.99),
                ratio
            );
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "median throughput ratio (mcp-tools / bare axum): {:.2}",
            ratios[ratios.len() / 2]
        );
    });
}
