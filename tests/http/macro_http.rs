//! `#[tool]` arguments over real HTTP on loopback: every argument problem comes back as a tool
//! error (`isError: true`, code `INVALID_ARGUMENTS`) naming the field, never as a protocol error;
//! each bad field is its own violation in `details.violations`, whether the input schema or the
//! decoding refused it.

use crate::common;

use std::collections::BTreeSet;

use mcp_tools::{McpServer, tool, tools};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use common::{Call, TestServer, assert_conforms, assert_matches_schema, compile};

/// Repeats a word.
#[tool]
fn repeat(
    /// The word to repeat.
    word: String,
    /// How many times.
    times: u32,
) -> String {
    word.repeat(times as usize)
}

/// A confirmed room booking.
#[derive(Serialize, JsonSchema)]
struct Booking {
    /// The room booked.
    room: String,
    /// Nights booked.
    nights: u32,
}

/// Books a room.
#[tool]
fn book(
    /// The room.
    room: String,
    /// Nights to stay.
    nights: u32,
    /// Guests in the room.
    guests: u8,
    /// A note for the front desk.
    note: Option<String>,
) -> Booking {
    let _ = (guests, note);
    Booking { room, nights }
}

async fn serve() -> TestServer {
    let server = McpServer::builder("macro-http", "0.0.0")
        .tools(tools![repeat, book])
        .build()
        .unwrap();
    TestServer::start(server).await
}

/// The published definition of `name`.
async fn definition(server: &TestServer, name: &str) -> Value {
    let reply = Call::new("tools/list", json!(1), json!({}))
        .send(server)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let list = reply.json();
    assert_conforms("ListToolsResultResponse", &list);
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {list}"))
        .clone()
}

/// Calls `name` and returns its `CallToolResult`, after checking the HTTP status, the whole
/// message against the official schema and `structuredContent` against the published output
/// schema, if the tool has one.
async fn call(server: &TestServer, definition: &Value, arguments: Value) -> Value {
    let name = definition["name"].as_str().unwrap();
    let reply = Call::call_tool(name, arguments).send(server).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let json = reply.json();
    assert_conforms("CallToolResultResponse", &json);
    let result = json["result"].clone();
    if let Some(schema) = definition.get("outputSchema") {
        assert_matches_schema(schema, &result["structuredContent"]);
    }
    result
}

/// `(path, message)` of every violation, checked for shape on the way.
fn violations(result: &Value) -> Vec<(String, String)> {
    assert_eq!(result["isError"], true, "{result}");
    let error = &result["structuredContent"];
    assert_eq!(error["code"], "INVALID_ARGUMENTS", "{result}");
    let list = error["details"]["violations"]
        .as_array()
        .unwrap_or_else(|| panic!("no details.violations: {result}"));
    list.iter()
        .map(|violation| {
            let path = violation["path"].as_str().expect("a path").to_owned();
            let message = violation["message"].as_str().expect("a message").to_owned();
            assert!(path.starts_with('/'), "not a JSON pointer: {violation}");
            assert!(!message.is_empty(), "no message: {violation}");
            (path, message)
        })
        .collect()
}

#[tokio::test]
async fn wrong_argument_type_is_a_tool_error_with_the_field_path() {
    let server = serve().await;
    let repeat = definition(&server, "repeat").await;

    let ok = call(&server, &repeat, json!({"word": "ab", "times": 2})).await;
    assert_eq!(ok["content"][0]["text"], "abab", "{ok}");
    assert_ne!(ok["isError"], true);

    let wrong = call(&server, &repeat, json!({"word": "ab", "times": "two"})).await;
    let found = violations(&wrong);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "/times");
    let text = wrong["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/times"), "{text}");
}

#[tokio::test]
async fn several_bad_arguments_give_one_violation_per_field_with_its_pointer() {
    let server = serve().await;
    let book = definition(&server, "book").await;
    assert!(
        book.get("outputSchema").is_some(),
        "book publishes its output schema: {book}"
    );

    let result = call(
        &server,
        &book,
        json!({"room": 12, "nights": "two", "guests": -1, "note": false, "breakfast": true}),
    )
    .await;
    let found = violations(&result);
    let paths: BTreeSet<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        BTreeSet::from(["/", "/guests", "/nights", "/note", "/room"]),
        "{found:?}"
    );
    assert_eq!(
        found.len(),
        paths.len(),
        "one violation per field: {found:?}"
    );
    let message = |path: &str| {
        found
            .iter()
            .find(|(at, _)| at == path)
            .map(|(_, message)| message.as_str())
            .unwrap()
    };
    assert!(message("/room").contains("string"), "{found:?}");
    assert!(message("/nights").contains("integer"), "{found:?}");
    assert!(message("/guests").contains("minimum"), "{found:?}");
    assert!(message("/").contains("breakfast"), "{found:?}");
    // The text a model reads names every field too.
    let text = result["content"][0]["text"].as_str().unwrap();
    for path in ["/room", "/nights", "/guests", "/note"] {
        assert!(text.contains(path), "{path} missing from {text}");
    }

    let missing = call(&server, &book, json!({"nights": 1})).await;
    let found = violations(&missing);
    let paths: BTreeSet<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(paths, BTreeSet::from(["/"]), "{found:?}");
    for field in ["room", "guests"] {
        assert!(
            found.iter().any(|(_, message)| message.contains(field)),
            "the missing {field} is not named: {found:?}"
        );
    }
}

#[tokio::test]
async fn a_value_the_schema_accepts_but_decoding_refuses_names_the_field() {
    let server = serve().await;
    let book = definition(&server, "book").await;
    // The published schema bounds a u32 at both ends, and JSON Schema counts `2.0` as an
    // integer, so this reaches decoding, which wants an integer literal.
    let arguments = json!({"room": "12", "nights": 2.0, "guests": 2});
    let nights = &book["inputSchema"]["properties"]["nights"];
    assert_eq!(nights["maximum"], u32::MAX, "{nights}");
    assert_eq!(nights["minimum"], 0, "{nights}");
    assert!(
        compile(&book["inputSchema"]).is_valid(&arguments),
        "the input schema refuses {arguments}"
    );

    let result = call(&server, &book, arguments).await;
    let found = violations(&result);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "/nights", "{found:?}");
    assert!(found[0].1.contains("2.0"), "{found:?}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/nights"), "{text}");

    // The same holds for a plain-text tool, which has no output schema.
    let repeat = definition(&server, "repeat").await;
    let result = call(&server, &repeat, json!({"word": "ab", "times": 1.0})).await;
    let found = violations(&result);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "/times", "{found:?}");
}
