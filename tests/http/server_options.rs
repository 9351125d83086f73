//! The builder options the README names, each observed over real HTTP: caching hints, the
//! endpoint path, the `Host`/`Origin` allow-list and the keep-alive interval of event streams.

use crate::common;

use std::time::Duration;

use common::tools::tool_set;
use common::{Call, Reply, TestServer, assert_conforms, within, within_for};
use mcp_tools::server::CacheScope;
use mcp_tools::{McpServer, McpServerBuilder};
use serde_json::{Value, json};

fn builder() -> McpServerBuilder {
    McpServer::builder("options", "1").tools(tool_set(0))
}

async fn start(builder: McpServerBuilder) -> TestServer {
    TestServer::start(builder.build().unwrap()).await
}

/// The `server/discover` and `tools/list` results, each checked against the official schema.
async fn discover_and_list(server: &TestServer) -> (Value, Value) {
    let discover = Call::discover().send(server).await.json();
    assert_conforms("DiscoverResultResponse", &discover);
    let list = Call::new("tools/list", json!(2), json!({}))
        .send(server)
        .await
        .json();
    assert_conforms("ListToolsResultResponse", &list);
    (discover["result"].clone(), list["result"].clone())
}

#[tokio::test]
async fn list_ttl_sets_the_ttl_of_discover_and_list_results() {
    let default = start(builder()).await;
    let (discover, list) = discover_and_list(&default).await;
    assert_eq!(
        (&discover["ttlMs"], &list["ttlMs"]),
        (&json!(300_000), &json!(300_000))
    );

    let short = start(builder().list_ttl(Duration::from_millis(4_250))).await;
    let (discover, list) = discover_and_list(&short).await;
    assert_eq!(discover["ttlMs"], 4_250);
    assert_eq!(list["ttlMs"], 4_250);
}

#[tokio::test]
async fn cache_scope_sets_the_scope_of_discover_and_list_results() {
    let default = start(builder()).await;
    let (discover, list) = discover_and_list(&default).await;
    assert_eq!(
        (&discover["cacheScope"], &list["cacheScope"]),
        (&json!("public"), &json!("public"))
    );

    let private = start(builder().cache_scope(CacheScope::Private)).await;
    let (discover, list) = discover_and_list(&private).await;
    assert_eq!(discover["cacheScope"], "private");
    assert_eq!(list["cacheScope"], "private");
}

#[tokio::test]
async fn endpoint_path_moves_the_endpoint_and_leaves_healthz_in_place() {
    let server = start(builder().endpoint_path("/other")).await;
    let moved = Call::discover()
        .send_to(&format!("http://{}/other", server.addr))
        .await;
    assert_eq!(moved.status, 200, "{}", moved.text);
    assert_conforms("DiscoverResultResponse", &moved.json());
    // `/mcp` is then no route at all: the router's plain 404, not a JSON-RPC message.
    let old = Call::discover().send(&server).await;
    assert_eq!(old.status, 404, "{}", old.text);
    let health = server.healthz().await;
    assert_eq!((health.status, health.text.as_str()), (200, "ok"));
}

fn assert_served(label: &str, reply: &Reply) {
    assert_eq!(reply.status, 200, "{label}: {}", reply.text);
    assert_conforms("DiscoverResultResponse", &reply.json());
}

fn assert_forbidden(label: &str, reply: &Reply) {
    assert_eq!(reply.status, 403, "{label}: {}", reply.text);
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_eq!(body["error"]["code"], -32600, "{label}: {body}");
}

#[tokio::test]
async fn allow_any_host_accepts_foreign_hosts_and_origins_the_default_refuses() {
    let foreign = [
        (
            "foreign Host",
            Call::discover().header("host", "evil.example.com"),
        ),
        (
            "foreign Origin",
            Call::discover().header("origin", "http://evil.example.com"),
        ),
    ];
    let default = start(builder()).await;
    let any = start(builder().allow_any_host()).await;
    for (label, call) in &foreign {
        assert_forbidden(&format!("default, {label}"), &call.send(&default).await);
        assert_served(&format!("allow_any_host, {label}"), &call.send(&any).await);
    }
}

#[tokio::test]
async fn the_default_allows_only_the_loopback_names_with_or_without_a_port() {
    let server = start(builder()).await;
    for host in [
        "localhost",
        "localhost:8080",
        "127.0.0.1",
        "127.0.0.1:8080",
        "[::1]",
        "[::1]:8080",
    ] {
        let reply = Call::discover().header("host", host).send(&server).await;
        assert_served(&format!("Host {host}"), &reply);
        let origin = format!("http://{host}");
        let reply = Call::discover()
            .header("origin", &origin)
            .send(&server)
            .await;
        assert_served(&format!("Origin {origin}"), &reply);
    }
    for host in ["example.com", "localhost.example.com", "127.0.0.2", "[::2]"] {
        let reply = Call::discover().header("host", host).send(&server).await;
        assert_forbidden(&format!("Host {host}"), &reply);
    }
}

#[tokio::test]
async fn allowed_hosts_accepts_the_named_hosts_only() {
    let server = start(builder().allowed_hosts(["mcp.example.com"])).await;
    for (label, call) in [
        ("Host", Call::discover().header("host", "mcp.example.com")),
        (
            "Host with a port",
            Call::discover().header("host", "mcp.example.com:8443"),
        ),
        (
            "Origin",
            Call::discover()
                .header("host", "mcp.example.com")
                .header("origin", "https://mcp.example.com"),
        ),
    ] {
        assert_served(label, &call.send(&server).await);
    }
    for (label, call) in [
        // The loopback default is replaced, not extended.
        ("the loopback address", Call::discover()),
        ("localhost", Call::discover().header("host", "localhost")),
        (
            "another host",
            Call::discover().header("host", "evil.example.com"),
        ),
        (
            "a name that only begins like the allowed one",
            Call::discover().header("host", "mcp.example.com.evil.example"),
        ),
        (
            "a foreign Origin",
            Call::discover()
                .header("host", "mcp.example.com")
                .header("origin", "https://evil.example.com"),
        ),
    ] {
        assert_forbidden(label, &call.send(&server).await);
    }
}

#[tokio::test]
async fn a_quiet_stream_gets_a_keep_alive_comment_after_the_default_15_seconds() {
    const README_INTERVAL: Duration = Duration::from_secs(15);
    let server = start(builder()).await;
    let call = Call::new(
        "subscriptions/listen",
        json!(5),
        json!({ "notifications": { "toolsListChanged": true } }),
    );
    let mut request = common::client().post(server.url());
    for (name, value) in &call.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let opened = tokio::time::Instant::now();
    let mut response = within("the subscription to open", request.json(&call.body).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut seen = String::new();
    within_for(
        Duration::from_secs(25),
        "a keep-alive comment on a quiet stream",
        async {
            while !seen.lines().any(|line| line.starts_with(':')) {
                let chunk = response
                    .chunk()
                    .await
                    .unwrap()
                    .expect("the stream stays open");
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
        },
    )
    .await;
    let waited = opened.elapsed();
    // Nothing but the acknowledgement came before the comment, so the stream was quiet.
    let ack: Vec<Value> = seen
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).unwrap())
        .collect();
    assert_eq!(ack.len(), 1, "{seen:?}");
    assert_conforms("SubscriptionsAcknowledgedNotification", &ack[0]);
    // The interval starts after the acknowledgement, which is after `opened`: an earlier
    // comment means a shorter interval than the README states.
    assert!(
        waited >= README_INTERVAL - Duration::from_millis(500),
        "the first keep-alive came after {waited:?}"
    );
}
