//! Property tests: arbitrary bytes and arbitrary JSON sent to the endpoint never produce a 500, a
//! panic, or a body that is not a JSON-RPC message.

mod common;

use common::{Call, TestServer, tools::tool_set};
use mcp_tools::McpServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "2.0",
            "tools/call",
            "echo",
            "2026-07-28",
            "_meta",
            "server/discover"
        ])
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "jsonrpc",
                    "id",
                    "method",
                    "params",
                    "_meta",
                    "name",
                    "arguments",
                    "cursor",
                    "io.modelcontextprotocol/protocolVersion",
                    "io.modelcontextprotocol/clientCapabilities",
                    "text",
                    "x",
                ])
                .prop_map(str::to_owned),
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A mostly valid `tools/call` whose arguments, params or meta are replaced by arbitrary JSON.
fn mutated_call() -> impl Strategy<Value = Value> {
    (arbitrary_json(), 0..4usize).prop_map(|(junk, slot)| {
        let mut body = Call::call_tool("echo", json!({ "text": "x" })).body;
        match slot {
            0 => body["params"]["arguments"] = junk,
            1 => body["params"]["_meta"] = junk,
            2 => body["params"] = junk,
            _ => body["id"] = junk,
        }
        body
    })
}

fn check(reply: &common::Reply) -> Result<(), TestCaseError> {
    prop_assert!(
        reply.status < 500,
        "status {}: {}",
        reply.status,
        reply.text
    );
    if reply.status != 202 {
        let body: Value = serde_json::from_str(&reply.text)
            .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {}", reply.text)))?;
        prop_assert_eq!(&body["jsonrpc"], "2.0");
        prop_assert!(body.get("result").is_some() ^ body.get("error").is_some());
    }
    Ok(())
}

fn run(strategy: impl Strategy<Value = Vec<u8>>, cases: u32) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(TestServer::start(
        McpServer::builder("fuzz", "1")
            .tools(tool_set(0))
            .build()
            .unwrap(),
    ));
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    runner
        .run(&strategy, |bytes| {
            let reply =
                runtime.block_on(Call::call_tool("echo", json!({})).raw(bytes).send(&server));
            check(&reply)
        })
        .unwrap();
    // The server is still healthy afterwards.
    let reply = runtime.block_on(Call::discover().send(&server));
    assert_eq!(reply.status, 200);
}

#[test]
fn arbitrary_bytes_never_cause_a_server_error() {
    run(prop::collection::vec(any::<u8>(), 0..512), 300);
}

#[test]
fn arbitrary_json_never_causes_a_server_error() {
    run(
        arbitrary_json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        300,
    );
}

#[test]
fn mutated_tool_calls_never_cause_a_server_error() {
    run(
        mutated_call().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        400,
    );
}
