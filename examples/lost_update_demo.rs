//! The lost-update schedule of the seed, replayed over HTTP against the basket server.
//!
//! `cargo run --example lost_update_demo` starts the basket server in this process on an
//! ephemeral loopback port (state in memory) and runs the schedule against it;
//! `-- --url http://127.0.0.1:8080/mcp` runs it against a server started with
//! `cargo run --example basket`.
//!
//! Agents A and B both read version 1 (16 GiB memory, 512 GiB storage). A upgrades the memory to
//! 32 GiB. B, still reasoning from version 1, sends a full configuration with 1024 GiB of
//! storage, which would silently restore 16 GiB of memory under last-write-wins. Here B is
//! refused with the delta, refreshes, re-plans with a new operation id, and the final basket has
//! both upgrades.

#[path = "support/basket.rs"]
mod basket;

use std::time::{SystemTime, UNIX_EPOCH};

use mcp_tools::McpServer;
use mcp_tools::MemoryStore;
use serde_json::{Value, json};

struct Client {
    url: String,
    http: reqwest::Client,
    next_id: u64,
}

impl Client {
    /// Calls a tool and prints the call and its outcome.
    async fn call(&mut self, who: &str, tool: &str, arguments: Value) -> Result<Value, String> {
        self.next_id += 1;
        let body = json!({
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": { "name": "lost-update-demo", "version": "1.0.0" }
                }
            }
        });
        let response = self
            .http
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/call")
            .header("Mcp-Name", tool)
            .json(&body)
            .send()
            .await
            .map_err(|error| format!("{tool}: {error}"))?;
        let status = response.status();
        let reply: Value = response
            .json()
            .await
            .map_err(|error| format!("{tool}: {error}"))?;
        let result = reply
            .get("result")
            .cloned()
            .ok_or_else(|| format!("{tool}: HTTP {status}: {reply}"))?;
        let outcome = &result["structuredContent"];
        println!("{who}  {tool} {arguments}");
        println!(
            "    -> {}{}",
            outcome["outcome"].as_str().unwrap_or("?"),
            if result["isError"] == true {
                " (isError)"
            } else {
                ""
            }
        );
        if let Some(text) = result["content"][0]["text"].as_str() {
            println!("       {text}");
        }
        if outcome["outcome"] == "stale_view" {
            println!("       delta: {}", outcome["delta"]);
        }
        println!();
        Ok(outcome.clone())
    }
}

fn expect(condition: bool, what: &str) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(format!("unexpected: {what}"))
    }
}

async fn run(url: String) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|error| error.to_string())?;
    let mut client = Client {
        url,
        http,
        next_id: 0,
    };
    // Operation ids must be new for every change, also across runs against one durable server.
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|error| error.to_string())?
        .as_nanos();
    let op = |name: &str| format!("demo-{run}-{name}");

    let created = client
        .call(
            "  ",
            "basket_create",
            json!({ "operation_id": op("create") }),
        )
        .await?;
    let handle = created["handle"].as_str().ok_or("no handle")?.to_owned();

    let a_view = client
        .call("A ", "basket_get", json!({ "basket_id": handle }))
        .await?;
    let b_view = client
        .call("B ", "basket_get", json!({ "basket_id": handle }))
        .await?;
    expect(
        a_view["version"] == 1 && b_view["version"] == 1,
        "both read version 1",
    )?;

    let a = client
        .call(
            "A ",
            "basket_upgrade_memory",
            json!({ "basket_id": handle, "expected_version": a_view["version"], "operation_id": op("A-1"), "memory_gib": 32 }),
        )
        .await?;
    expect(a["outcome"] == "applied", "A's upgrade is applied")?;

    // B plans a full configuration from the version 1 it read: its memory value is stale.
    let b = client
        .call(
            "B ",
            "basket_replace_configuration",
            json!({ "basket_id": handle, "expected_version": b_view["version"], "operation_id": op("B-1"),
                    "memory_gib": b_view["state"]["memory_gib"], "storage_gib": 1024 }),
        )
        .await?;
    expect(
        b["outcome"] == "stale_view",
        "B's stale snapshot is refused",
    )?;

    let b_view = client
        .call("B ", "basket_get", json!({ "basket_id": handle }))
        .await?;
    let b = client
        .call(
            "B ",
            "basket_replace_configuration",
            json!({ "basket_id": handle, "expected_version": b_view["version"], "operation_id": op("B-2"),
                    "memory_gib": b_view["state"]["memory_gib"], "storage_gib": 1024 }),
        )
        .await?;
    expect(
        b["outcome"] == "applied",
        "B's re-planned change is applied",
    )?;

    let last = client
        .call("  ", "basket_get", json!({ "basket_id": handle }))
        .await?;
    let state = &last["state"];
    expect(
        state["memory_gib"] == 32 && state["storage_gib"] == 1024,
        "the final basket has both upgrades",
    )?;
    println!(
        "Final basket {handle} at version {}: {} GiB memory (A's upgrade) and {} GiB storage (B's upgrade). No update was lost.",
        last["version"], state["memory_gib"], state["storage_gib"]
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut url = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--url" => url = Some(args.next().ok_or("--url needs the server's MCP endpoint")?),
            other => return Err(format!("unknown option {other}; use --url URL").into()),
        }
    }
    let (url, stop) = match url {
        Some(url) => (url, None),
        None => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let url = format!("http://{}/mcp", listener.local_addr()?);
            println!("Started the basket server in this process at {url} (state in memory).\n");
            let server = McpServer::builder("basket", env!("CARGO_PKG_VERSION"))
                .tools(basket::tool_set())
                .store(MemoryStore::default())
                .build()?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let serving = tokio::spawn(server.serve_listener(listener, async {
                let _ = stopped.await;
            }));
            (url, Some((stop, serving)))
        }
    };
    let outcome = run(url).await;
    if let Some((stop, serving)) = stop {
        let _ = stop.send(());
        serving.await??;
    }
    outcome.map_err(Into::into)
}
