//! The drop-in harness between a host on stdio and a server over HTTP, driven here as a host
//! drives it, over the pipes of a real process (the quickstart example's `harness` command):
//! the host lists the stateful tools with the arguments the harness supplies optional, calls
//! them without those arguments, gets a lost answer retried once and applied once, and, started
//! again with the same records file, goes on from what it was shown. `.ci/clients` drives it
//! with the official TypeScript and Python clients.

use std::path::Path;
use std::process::Stdio;

use mcp_tools::client::Outcome;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::common::within;
use crate::support::{self, ExampleServer, FaultProxy, call, example};

/// A host: the harness process it runs, and the lines it exchanges with it.
pub struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: i64,
    /// The notifications received so far.
    pub notifications: Vec<Value>,
    /// The requests the harness sent this host.
    pub asked: Vec<Value>,
}

impl Host {
    /// Starts `quickstart harness --upstream URL` (with `--records FILE`, when given).
    pub async fn start(upstream: &str, records: Option<&Path>) -> Host {
        let mut command = Command::new(example("quickstart"));
        command.args(["harness", "--upstream", upstream]);
        if let Some(records) = records {
            command.arg("--records").arg(records);
        }
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Host {
            child,
            stdin,
            stdout,
            next_id: 1,
            notifications: Vec::new(),
            asked: Vec::new(),
        }
    }

    /// Sends a request with the `_meta` every request carries; returns the response.
    pub async fn request(&mut self, method: &str, mut params: Value) -> Value {
        params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
        params["_meta"]["io.modelcontextprotocol/clientInfo"] =
            json!({ "name": "test-host", "version": "1.0.0" });
        self.send(method, params).await
    }

    /// Sends a request as `params` say (a host of an earlier revision sends no `_meta`
    /// claim); returns the response. Requests the harness sends meanwhile (an elicitation)
    /// are accepted, with `confirm: true`, and counted in `asked`.
    pub async fn send(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let mut line = serde_json::to_vec(&request).unwrap();
        line.push(b'\n');
        let stdin = self.stdin.as_mut().expect("the host's end is open");
        within("writing to the harness", stdin.write_all(&line))
            .await
            .unwrap();
        loop {
            let line = within(&format!("the answer to {method}"), self.stdout.next_line())
                .await
                .unwrap()
                .unwrap_or_else(|| {
                    panic!("the harness closed its output before answering {method}")
                });
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
            assert!(
                message.get("method").is_some(),
                "a stray message: {message}"
            );
            if message.get("id").is_some() {
                self.asked.push(message.clone());
                let accepted = json!({ "jsonrpc": "2.0", "id": message["id"],
                    "result": { "action": "accept", "content": { "confirm": true } } });
                let mut line = serde_json::to_vec(&accepted).unwrap();
                line.push(b'\n');
                let stdin = self.stdin.as_mut().expect("the host's end is open");
                within("answering the harness", stdin.write_all(&line))
                    .await
                    .unwrap();
                continue;
            }
            self.notifications.push(message);
        }
    }

    /// Calls a tool; returns the result, which must not be a JSON-RPC error.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self
            .request(
                "tools/call",
                json!({ "name": tool, "arguments": arguments }),
            )
            .await;
        assert!(response.get("error").is_none(), "{tool}: {response}");
        response["result"].clone()
    }

    /// Closes the host's end; the harness exits on its own, with status 0.
    pub async fn close(mut self) {
        drop(self.stdin.take());
        let status = within("the harness to exit", self.child.wait())
            .await
            .unwrap();
        assert!(status.success(), "the harness exited with {status}");
    }
}

fn outcome(result: &Value) -> &str {
    result["structuredContent"]["outcome"]
        .as_str()
        .unwrap_or_else(|| panic!("no outcome: {result}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_calls_stateful_tools_without_the_arguments_the_harness_supplies() {
    let server = ExampleServer::start("basket", &["--memory"]).await;
    let proxy =
        FaultProxy::start(vec![format!("127.0.0.1:{}", server.port).parse().unwrap()]).await;
    let records = std::env::temp_dir().join(format!(
        "mcp-tools-client-dropin-{}-{}.json",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let mut host = Host::start(&proxy.url(), Some(&records)).await;

    let discovered = host.request("server/discover", json!({})).await;
    assert_eq!(
        discovered["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "basket"
    );
    let listed = host.request("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let tool = |name: &str| tools.iter().find(|tool| tool["name"] == name).unwrap();
    for name in [
        "basket_create",
        "basket_upgrade_memory",
        "basket_add_note",
        "basket_checkout",
    ] {
        let schema = &tool(name)["inputSchema"];
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|required| required.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert!(!required.contains(&"operation_id"), "{name}: {required:?}");
        let description = schema["properties"]["operation_id"]["description"]
            .as_str()
            .unwrap();
        assert!(
            description.starts_with("Optional: leave it out."),
            "{name}: {description}"
        );
    }
    let expected = tool("basket_upgrade_memory")["inputSchema"]["properties"]["expected_version"]
        ["description"]
        .as_str()
        .unwrap();
    assert!(expected.contains("harness"), "{expected}");
    assert_eq!(
        tool("basket_upgrade_memory")["inputSchema"]["required"],
        json!(["basket_id", "memory_gib"])
    );

    let created = host.call("basket_create", json!({})).await;
    assert_eq!(outcome(&created), "applied", "{created}");
    let handle = created["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    let read = host
        .call("basket_get", json!({ "basket_id": handle }))
        .await;
    assert_eq!(read["structuredContent"]["version"], 1);
    let upgraded = host
        .call(
            "basket_upgrade_memory",
            json!({ "basket_id": handle, "memory_gib": 32 }),
        )
        .await;
    assert_eq!(
        outcome(&upgraded),
        "applied",
        "based on version 1: {upgraded}"
    );

    // A lost answer: the harness sends the same call again, and the host gets it replayed.
    proxy.lose_answers(1);
    let noted = host
        .call(
            "basket_add_note",
            json!({ "basket_id": handle, "text": "once" }),
        )
        .await;
    assert_eq!(outcome(&noted), "replayed", "{noted}");
    assert_eq!(
        proxy.seen_of("tools/call", Some("basket_add_note")).len(),
        2
    );
    let basket = support::current(&server.url, &handle).await;
    assert_eq!(
        basket.state["notes"]["items"],
        json!([{ "id": 1, "version": 3, "value": "once" }]),
        "appended once"
    );
    assert_eq!(basket.version, 3);
    host.close().await;

    let saved = mcp_tools::client::load_records(&records).unwrap();
    assert_eq!(saved.len(), 1);
    assert_eq!(
        (saved[0].handle.as_str(), saved[0].basis_version),
        (handle.as_str(), 3)
    );

    // Meanwhile another agent changes the basket.
    let other = support::harness(&server.url).await;
    let Outcome::Current(_) = call(&other, "basket_get", json!({ "basket_id": handle })).await
    else {
        panic!("read");
    };
    let changed = call(
        &other,
        "basket_upgrade_memory",
        json!({ "basket_id": handle, "memory_gib": 48 }),
    )
    .await;
    assert!(matches!(changed, Outcome::Applied(_)), "{changed:?}");

    // The host restarted with the same records goes on from version 3, what it was shown: its
    // change, planned on that, is refused with what changed.
    let mut restarted = Host::start(&proxy.url(), Some(&records)).await;
    let stale = restarted
        .call(
            "basket_upgrade_memory",
            json!({ "basket_id": handle, "memory_gib": 64 }),
        )
        .await;
    assert_eq!(outcome(&stale), "stale_view", "{stale}");
    assert_eq!(stale["structuredContent"]["expected_version"], 3);
    assert_eq!(stale["structuredContent"]["current_version"], 4);
    restarted.close().await;

    // Without its records, a harness was shown nothing: no basis, and the server refuses.
    let mut forgetful = Host::start(&proxy.url(), None).await;
    let refused = forgetful
        .call(
            "basket_upgrade_memory",
            json!({ "basket_id": handle, "memory_gib": 64 }),
        )
        .await;
    assert_eq!(
        refused["structuredContent"]["code"], "INVALID_ARGUMENTS",
        "{refused}"
    );
    forgetful.close().await;
    let _ = std::fs::remove_file(&records);
}

/// A request the host cancels is cancelled upstream, and the harness goes on serving;
/// a line that is not JSON is answered with a parse error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_answers_bad_lines_and_honours_cancellation() {
    let server = ExampleServer::start("basket", &["--memory"]).await;
    let mut host = Host::start(&server.url, None).await;
    let stdin = host.stdin.as_mut().unwrap();
    within("writing", stdin.write_all(b"{not json\n"))
        .await
        .unwrap();
    let line = within("the parse error", host.stdout.next_line())
        .await
        .unwrap()
        .unwrap();
    let error: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(error["error"]["code"], -32700, "{error}");

    let created = host.call("basket_create", json!({})).await;
    let handle = created["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    // A slow quote, cancelled: nothing comes back for it.
    let slow = json!({ "jsonrpc": "2.0", "id": "slow", "method": "tools/call", "params": {
        "name": "basket_quote", "arguments": { "basket_id": handle, "seconds": 30 },
        "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {} } } });
    let cancel = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": "slow" } });
    let stdin = host.stdin.as_mut().unwrap();
    for message in [slow, cancel] {
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        within("writing", stdin.write_all(&line)).await.unwrap();
    }
    let read = host
        .call("basket_get", json!({ "basket_id": handle }))
        .await;
    assert_eq!(read["structuredContent"]["outcome"], "current");
    host.close().await;
}

/// A host of an earlier revision (the 2025-11-25 handshake, no `_meta` claims): the harness
/// answers the handshake itself, relays its requests as 2026-07-28 ones with what it declared,
/// answers in its revision, and asks it for the input a tool needs as that revision does, with a
/// request (`elicitation/create`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_of_an_earlier_revision_is_answered_in_its_revision() {
    let server = ExampleServer::start("basket", &["--memory"]).await;
    let mut host = Host::start(&server.url, None).await;
    let initialized = host
        .send(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": { "elicitation": {} },
                "clientInfo": { "name": "earlier-host", "version": "1.0.0" } }),
        )
        .await;
    let result = &initialized["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18", "{initialized}");
    assert_eq!(result["serverInfo"]["name"], "basket");
    assert!(result["capabilities"]["tools"].is_object());
    assert!(result["capabilities"].get("extensions").is_none());
    assert!(result["instructions"].as_str().unwrap().contains("basket"));
    assert_eq!(host.send("ping", json!({})).await["result"], json!({}));

    let listed = host.send("tools/list", json!({})).await;
    assert!(listed["result"].get("resultType").is_none(), "{listed}");
    assert!(listed["result"].get("ttlMs").is_none());
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 11);

    let created = host
        .send("tools/call", call_json("basket_create", json!({})))
        .await;
    let handle = created["result"]["structuredContent"]["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    assert!(created["result"].get("resultType").is_none());
    let read = host
        .send(
            "tools/call",
            call_json("basket_get", json!({ "basket_id": handle })),
        )
        .await;
    assert_eq!(read["result"]["structuredContent"]["version"], 1);

    // Another agent changes the basket; the host's checkout, planned on version 1, must be
    // reconfirmed: the harness asks the host, which confirms, and the checkout applies.
    let other = support::harness(&server.url).await;
    let Outcome::Current(_) = call_of(&other, &handle).await else {
        panic!("read");
    };
    let noted = call(
        &other,
        "basket_add_note",
        json!({ "basket_id": handle, "text": "x" }),
    )
    .await;
    assert!(matches!(noted, Outcome::Applied(_)));
    let checkout = host
        .send(
            "tools/call",
            call_json("basket_checkout", json!({ "basket_id": handle })),
        )
        .await;
    assert_eq!(
        checkout["result"]["structuredContent"]["outcome"], "applied",
        "{checkout}"
    );
    assert_eq!(host.asked.len(), 1, "asked once: {:?}", host.asked);
    assert_eq!(host.asked[0]["method"], "elicitation/create");
    host.close().await;
}

fn call_json(name: &str, arguments: Value) -> Value {
    json!({ "name": name, "arguments": arguments })
}

async fn call_of(harness: &mcp_tools::client::Harness, handle: &str) -> Outcome {
    call(harness, "basket_get", json!({ "basket_id": handle })).await
}
