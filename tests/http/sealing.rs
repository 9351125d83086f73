//! The signed values a client carries between requests: `requestState` of multi-round calls and
//! pagination cursors. Each test changes what a value *says* while keeping it well-formed, so
//! only the signature check, the binding or the expiry can refuse it.

use crate::common;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::{Call, TestServer, assert_conforms};
use hmac::{Hmac, KeyInit, Mac};
use mcp_tools::auth::{Principal, Unauthorized};
use mcp_tools::tools::{InputRequired, NoArgs, Tool, ToolInfo, ToolReply, ToolSet};
use mcp_tools::{Context, McpServer};
use serde_json::{Value, json};
use sha2::Sha256;

const KEY: &[u8] = b"a key every replica shares, padded to thirty-two bytes";
const TAG_LEN: usize = 16;

/// Asks for a confirmation, carrying a quote through the sealed state.
struct Book;

impl Tool for Book {
    type Args = NoArgs;
    type Output = ToolReply<String>;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("book", "Books after a confirmation.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> ToolReply<String> {
        match cx.request_state() {
            Some(state) if cx.input_response("ok").is_some() => {
                ToolReply::Complete(format!("booked at {}", state["quote"]))
            }
            _ => ToolReply::InputRequired(
                InputRequired::new()
                    .elicit(
                        "ok",
                        "Book it?",
                        json!({ "type": "object", "properties": {} }),
                    )
                    .state(json!({ "quote": 420 })),
            ),
        }
    }
}

fn server(key: &[u8]) -> McpServer {
    McpServer::builder("sealing", "1")
        .tools(ToolSet::new().with(Book))
        .signing_key(key)
        .authenticate(
            |headers| match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some(token) => Ok(Principal::subject(token)),
                None => Err(Unauthorized::new("Bearer", "A token is required")),
            },
        )
        .build()
        .unwrap()
}

fn first_round(user: &str) -> Call {
    Call::call_tool("book", json!({}))
        .capabilities(json!({ "elicitation": {} }))
        .header("authorization", user)
}

fn retry(user: &str, state: &str) -> Call {
    first_round(user).body(|b| {
        b["params"]["inputResponses"] = json!({ "ok": { "action": "accept", "content": {} } });
        b["params"]["requestState"] = json!(state);
    })
}

async fn issued_state(server: &TestServer, user: &str) -> String {
    let reply = first_round(user).send(server).await.json();
    assert_conforms("JSONRPCResultResponse", &reply);
    assert_eq!(reply["result"]["resultType"], "input_required", "{reply}");
    reply["result"]["requestState"].as_str().unwrap().to_owned()
}

/// The JSON payload and the tag of a sealed state.
fn unseal(state: &str) -> (Value, Vec<u8>) {
    let bytes = URL_SAFE_NO_PAD.decode(state).unwrap();
    let (payload, tag) = bytes.split_at(bytes.len() - TAG_LEN);
    (serde_json::from_slice(payload).unwrap(), tag.to_vec())
}

fn reseal(payload: &Value, tag: &[u8]) -> String {
    let mut bytes = payload.to_string().into_bytes();
    bytes.extend_from_slice(tag);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Signs `payload` the way the server does, with `key`.
fn sign(key: &[u8], payload: &Value) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    mac.update(b"mcp-tools/request-state\0");
    mac.update(payload.to_string().as_bytes());
    reseal(payload, &mac.finalize().into_bytes()[..TAG_LEN])
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A `-32602` in-band error whose message says `why`.
fn assert_refused(reply: &common::Reply, why: &str) {
    let json = reply.json();
    assert_conforms("JSONRPCErrorResponse", &json);
    assert_eq!(
        (reply.status, reply.error_code()),
        (200, Some(-32602)),
        "{json}"
    );
    let message = json["error"]["message"].as_str().unwrap();
    assert!(message.contains(why), "expected {why:?} in {message:?}");
}

#[tokio::test]
async fn a_state_whose_content_was_changed_is_refused_by_its_signature() {
    let server = TestServer::start(server(KEY)).await;
    let state = issued_state(&server, "alice").await;
    let done = retry("alice", &state).send(&server).await.result();
    assert_eq!(done["content"][0]["text"], "booked at 420");

    let (mut payload, tag) = unseal(&state);
    payload["s"]["quote"] = json!(1);
    assert_refused(
        &retry("alice", &reseal(&payload, &tag)).send(&server).await,
        "altered",
    );
}

#[tokio::test]
async fn a_state_is_bound_to_the_caller_it_was_issued_to() {
    let server = TestServer::start(server(KEY)).await;
    let state = issued_state(&server, "alice").await;
    assert_refused(&retry("bob", &state).send(&server).await, "another request");
    let done = retry("alice", &state).send(&server).await.result();
    assert_eq!(done["content"][0]["text"], "booked at 420");
}

#[tokio::test]
async fn a_state_opens_on_any_replica_with_the_same_key_and_no_other() {
    let issuer = TestServer::start(server(KEY)).await;
    let replica = TestServer::start(server(KEY)).await;
    let stranger =
        TestServer::start(server(b"another key, also of thirty-two bytes or more")).await;
    let state = issued_state(&issuer, "alice").await;
    let done = retry("alice", &state).send(&replica).await.result();
    assert_eq!(done["content"][0]["text"], "booked at 420");
    assert_refused(&retry("alice", &state).send(&stranger).await, "altered");
}

#[tokio::test]
async fn a_state_lives_fifteen_minutes() {
    let server = TestServer::start(server(KEY)).await;
    let before = now();
    let state = issued_state(&server, "alice").await;
    let after = now();
    let (payload, _) = unseal(&state);
    let expiry = payload["e"].as_u64().unwrap();
    assert!(
        (before + 15 * 60..=after + 15 * 60).contains(&expiry),
        "expiry {expiry} is not 15 minutes after {before}..{after}"
    );

    // Correctly signed and bound, so only the expiry decides.
    let mut expired = payload.clone();
    expired["e"] = json!(now() - 1);
    assert_refused(
        &retry("alice", &sign(KEY, &expired)).send(&server).await,
        "expired",
    );
    let mut fresh = payload;
    fresh["e"] = json!(now() + 60);
    let done = retry("alice", &sign(KEY, &fresh))
        .send(&server)
        .await
        .result();
    assert_eq!(done["content"][0]["text"], "booked at 420");
}

/// A server with `tools` filler tools, two per page.
fn paged(key: &[u8], tools: usize) -> McpServer {
    let set = (0..tools).fold(ToolSet::new(), |set, i| {
        set.with(common::tools::Named(
            ["t0", "t1", "t2", "t3", "t4", "t5"][i],
        ))
    });
    McpServer::builder("paged", "1")
        .tools(set)
        .page_size(2)
        .signing_key(key)
        .build()
        .unwrap()
}

fn list(cursor: Option<&str>) -> Call {
    let params = match cursor {
        Some(cursor) => json!({ "cursor": cursor }),
        None => json!({}),
    };
    Call::new("tools/list", json!(1), params)
}

async fn names(server: &TestServer, cursor: Option<&str>) -> (Vec<String>, Option<String>) {
    let reply = list(cursor).send(server).await.json();
    assert_conforms("ListToolsResultResponse", &reply);
    let result = &reply["result"];
    let names = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    (names, result["nextCursor"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn a_cursor_with_a_changed_position_is_refused_by_its_signature() {
    let server = TestServer::start(paged(KEY, 6)).await;
    let (_, next) = names(&server, None).await;
    let cursor = next.unwrap();
    let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
    // The position is the first four bytes, big-endian: page 1 becomes page 2.
    bytes[3] = 2;
    let reply = list(Some(&URL_SAFE_NO_PAD.encode(bytes)))
        .send(&server)
        .await;
    assert_refused(&reply, "altered");
}

#[tokio::test]
async fn a_cursor_continues_on_a_replica_with_the_same_key_and_no_other() {
    let issuer = TestServer::start(paged(KEY, 6)).await;
    let replica = TestServer::start(paged(KEY, 6)).await;
    let stranger =
        TestServer::start(paged(b"another key, also of thirty-two bytes or more", 6)).await;
    let (first, next) = names(&issuer, None).await;
    assert_eq!(first, ["t0", "t1"]);
    let cursor = next.unwrap();
    let (second, _) = names(&replica, Some(&cursor)).await;
    assert_eq!(second, ["t2", "t3"]);
    assert_refused(&list(Some(&cursor)).send(&stranger).await, "altered");
}

#[tokio::test]
async fn a_cursor_is_refused_once_the_listing_changed() {
    let server = paged(KEY, 6);
    let handle = server.clone();
    let live = TestServer::start(server).await;
    let (_, next) = names(&live, None).await;
    let cursor = next.unwrap();
    assert!(handle.remove_tool("t5"));
    assert_refused(&list(Some(&cursor)).send(&live).await, "listing changed");
}

#[tokio::test]
async fn a_cursor_of_one_listing_does_not_page_another() {
    let server = McpServer::builder("paged", "1")
        .tools((0..4).fold(ToolSet::new(), |set, i| {
            set.with(common::tools::Named(["t0", "t1", "t2", "t3"][i]))
        }))
        .prompts((0..4).fold(mcp_tools::prompts::PromptSet::new(), |set, i| {
            set.with(mcp_tools::prompts::Prompt::new(
                ["p0", "p1", "p2", "p3"][i],
                "A prompt.",
                |_, _| async {
                    Ok::<_, mcp_tools::protocol::RpcError>(
                        Vec::<mcp_tools::prompts::PromptMessage>::new(),
                    )
                },
            ))
        }))
        .page_size(2)
        .signing_key(KEY)
        .build()
        .unwrap();
    let live = TestServer::start(server).await;
    let prompts = Call::new("prompts/list", json!(1), json!({}))
        .send(&live)
        .await
        .result();
    let cursor = prompts["nextCursor"].as_str().unwrap();
    assert_refused(&list(Some(cursor)).send(&live).await, "altered");
}
