//! `#[derive(IntoToolError)]` declares its codes: each variant's code with its doc comment as the
//! description and its `#[recovery]` hint, once per distinct code, and every converted error
//! carries its variant's hint, in process and over real HTTP.

use crate::common;

use std::borrow::Cow;
use std::fmt;

use mcp_tools::tools::DomainCode;
use mcp_tools::{IntoToolError, McpServer, Recovery, ToolError, tool, tools};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use common::{Call, TestServer, assert_conforms, assert_matches_schema};

#[derive(Debug, mcp_tools::IntoToolError)]
enum BookingError {
    /// The room is taken for those nights; look at what is free and book again.
    #[recovery = "refresh_and_replan"]
    RoomTaken {
        room: String,
    },
    /// The hotel does not know that room.
    #[code = "NOT_FOUND"]
    #[recovery = "stop"]
    NoSuchRoom(String),
    /// The booking needs the manager's approval: ask them, then book again.
    #[recovery(custom = "ask_the_manager")]
    NeedsApproval,
    /// The hotel does not know that room.
    #[code = "NOT_FOUND"]
    #[recovery = "stop"]
    RoomRemoved,
    Overbooked,
}

impl fmt::Display for BookingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BookingError::RoomTaken { room } => write!(f, "room {room} is taken"),
            BookingError::NoSuchRoom(room) => write!(f, "there is no room {room}"),
            BookingError::NeedsApproval => f.write_str("the manager must approve this booking"),
            BookingError::RoomRemoved => f.write_str("that room was removed"),
            BookingError::Overbooked => f.write_str("the hotel is overbooked"),
        }
    }
}

/// The front desk is closed until the morning.
#[derive(Debug, mcp_tools::IntoToolError)]
#[code = "DESK_CLOSED"]
#[recovery = "retry_later"]
struct DeskClosed;

impl fmt::Display for DeskClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the desk opens at 7")
    }
}

/// One variant per hint the framework knows, in the order of `Recovery::known_names()`.
#[derive(Debug, mcp_tools::IntoToolError)]
enum EveryKnownHint {
    #[recovery = "refresh_and_replan"]
    A,
    #[recovery = "reconfirm"]
    B,
    #[recovery = "stop"]
    C,
    #[recovery = "create_new"]
    D,
    #[recovery = "new_operation_id"]
    E,
    #[recovery = "retry_later"]
    F,
}

impl fmt::Display for EveryKnownHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

#[test]
fn declared_codes_list_each_distinct_code_once_in_declaration_order() {
    let expected = [
        DomainCode {
            code: "ROOM_TAKEN",
            description: "The room is taken for those nights; look at what is free and book again.",
            recovery: Some(Recovery::RefreshAndReplan),
        },
        DomainCode {
            code: "NOT_FOUND",
            description: "The hotel does not know that room.",
            recovery: Some(Recovery::Stop),
        },
        DomainCode {
            code: "NEEDS_APPROVAL",
            description: "The booking needs the manager's approval: ask them, then book again.",
            recovery: Some(Recovery::Other(Cow::Borrowed("ask_the_manager"))),
        },
        DomainCode {
            code: "OVERBOOKED",
            description: "",
            recovery: None,
        },
    ];
    assert_eq!(BookingError::declared_codes(), Some(&expected[..]));
}

#[test]
fn a_struct_declares_its_one_code_with_its_doc_comment_and_hint() {
    assert_eq!(
        DeskClosed::declared_codes(),
        Some(
            &[DomainCode {
                code: "DESK_CLOSED",
                description: "The front desk is closed until the morning.",
                recovery: Some(Recovery::RetryLater),
            }][..]
        )
    );
    let error = DeskClosed.into_tool_error();
    assert_eq!(error.code(), "DESK_CLOSED");
    assert_eq!(error.message(), "the desk opens at 7");
    assert_eq!(error.recovery(), Some(&Recovery::RetryLater));
}

#[test]
fn every_known_hint_name_becomes_the_runtime_hint_of_that_name() {
    let declared: Vec<Recovery> = EveryKnownHint::declared_codes()
        .unwrap()
        .iter()
        .map(|code| code.recovery.clone().expect("every variant has a hint"))
        .collect();
    let known: Vec<Recovery> = Recovery::known_names().map(Recovery::from_name).collect();
    assert_eq!(declared, known);
    let attached: Vec<Recovery> = [
        EveryKnownHint::A,
        EveryKnownHint::B,
        EveryKnownHint::C,
        EveryKnownHint::D,
        EveryKnownHint::E,
        EveryKnownHint::F,
    ]
    .into_iter()
    .map(|error| error.into_tool_error().recovery().cloned().unwrap())
    .collect();
    assert_eq!(attached, known);
    assert!(
        known.iter().all(|hint| !matches!(hint, Recovery::Other(_))),
        "{known:?}"
    );
}

#[test]
fn into_tool_error_carries_the_code_the_display_message_and_the_variant_hint() {
    let cases = [
        (
            BookingError::RoomTaken { room: "12".into() },
            "ROOM_TAKEN",
            "room 12 is taken",
            Some(Recovery::RefreshAndReplan),
        ),
        (
            BookingError::NoSuchRoom("99".into()),
            "NOT_FOUND",
            "there is no room 99",
            Some(Recovery::Stop),
        ),
        (
            BookingError::NeedsApproval,
            "NEEDS_APPROVAL",
            "the manager must approve this booking",
            Some(Recovery::Other("ask_the_manager".into())),
        ),
        (
            BookingError::RoomRemoved,
            "NOT_FOUND",
            "that room was removed",
            Some(Recovery::Stop),
        ),
        (
            BookingError::Overbooked,
            "OVERBOOKED",
            "the hotel is overbooked",
            None,
        ),
    ];
    for (error, code, message, recovery) in cases {
        let error: ToolError = error.into_tool_error();
        assert_eq!(error.code(), code);
        assert_eq!(error.message(), message);
        assert_eq!(error.recovery(), recovery.as_ref(), "{code}");
        assert_eq!(error.details(), None);
    }
}

#[derive(Serialize, JsonSchema)]
struct Booking {
    /// The room booked.
    room: String,
}

/// Books a room.
#[tool]
fn book(
    /// The room to book.
    room: String,
) -> Result<Booking, BookingError> {
    match room.as_str() {
        "12" => Err(BookingError::RoomTaken { room }),
        "vip" => Err(BookingError::NeedsApproval),
        "attic" => Err(BookingError::Overbooked),
        _ => Ok(Booking { room }),
    }
}

#[tokio::test]
async fn a_plain_tool_error_sends_its_code_message_and_recovery_over_http() {
    let server = McpServer::builder("tool-error-codes", "0.0.0")
        .tools(tools![book])
        .build()
        .unwrap();
    let server = TestServer::start(server).await;

    let listed = Call::new("tools/list", json!(1), json!({}))
        .send(&server)
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let listed = listed.json();
    assert_conforms("ListToolsResultResponse", &listed);
    let output_schema = listed["result"]["tools"][0]["outputSchema"].clone();
    assert!(output_schema.is_object(), "{listed}");

    let call = |room: &str| {
        let call = Call::call_tool("book", json!({ "room": room }));
        let server = &server;
        let output_schema = &output_schema;
        async move {
            let reply = call.send(server).await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            let json = reply.json();
            assert_conforms("CallToolResultResponse", &json);
            let result = json["result"].clone();
            assert_matches_schema(output_schema, &result["structuredContent"]);
            result
        }
    };

    let taken = call("12").await;
    assert_eq!(taken["isError"], true, "{taken}");
    assert_eq!(
        taken["structuredContent"],
        json!({
            "code": "ROOM_TAKEN",
            "message": "room 12 is taken",
            "recovery": "refresh_and_replan",
        })
    );
    // The model reads the hint in the text too.
    assert_eq!(
        taken["content"][0]["text"],
        "room 12 is taken. Read the resource again, re-plan from its current state and retry with a new operation_id.",
        "{taken}"
    );

    let approval = call("vip").await;
    assert_eq!(approval["isError"], true, "{approval}");
    assert_eq!(
        approval["structuredContent"],
        json!({
            "code": "NEEDS_APPROVAL",
            "message": "the manager must approve this booking",
            "recovery": "ask_the_manager",
        })
    );

    let overbooked = call("attic").await;
    assert_eq!(overbooked["isError"], true, "{overbooked}");
    assert_eq!(
        overbooked["structuredContent"],
        json!({ "code": "OVERBOOKED", "message": "the hotel is overbooked" }),
        "a code without a hint sends no recovery"
    );

    let booked: Value = call("7").await;
    assert_ne!(booked["isError"], true, "{booked}");
    assert_eq!(booked["structuredContent"], json!({ "room": "7" }));
}
