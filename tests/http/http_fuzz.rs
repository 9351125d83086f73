//! Model-based fuzzing of the HTTP endpoint, against a server that offers every feature
//! (`tests/http/http_fuzz/fixture.rs`).
//!
//! Every case starts as a valid request of some method family, of either era, and may then be
//! mutated at any layer: the HTTP method, `Content-Type`, `Host`/`Origin`, the body size, the
//! bytes, the JSON-RPC envelope, the id, `_meta`, the params (also replaced by arbitrary JSON),
//! and each routing header (absent, wrong, sent twice, Base64 sentinel good or bad, value case,
//! non-ASCII). Most cases stay valid, so they reach the handlers and the tools.
//!
//! A reference model of the README's "Protocol behaviour" table (and the spec digest for what the
//! table leaves open) predicts from the bytes on the wire what each request must get. The oracle
//! then requires, for every reply: no 5xx; the predicted status and code, and a pair the table
//! allows whatever the model says; the id echoed exactly when it could be read and absent
//! otherwise; a body that validates against the official schema (the method's own result type
//! for 2026-07-28 results, JSON-RPC for legacy-era ones), event streams exactly when the request
//! opted in, every streamed notification valid, and a 202 without body for notifications only.
//! The distribution of outcomes is printed and must reach every method family and every row of
//! the table.
//!
//! Two departures of the runtime from the table are tolerated, and counted apart so the
//! distribution shows them: an integer id beyond the i64 range is refused as unreadable (`-32600`
//! without id), and a `-32021` for a request that opted in to a stream arrives inside the stream
//! under 200 instead of 400.
//!
//! `subscriptions/listen` stays open by design: in the random mix only its first event is read;
//! a separate bounded test follows whole subscriptions to their final result.
//!
//! The default 1,500 cases take a few seconds, so CI runs them. Outside CI, raise the count with
//! `MCP_FUZZ_CASES` (`MCP_FUZZ_CASES=20000 cargo test --test http -- http_fuzz:: --nocapture` also
//! prints the distribution); `PROPTEST_RNG_SEED=<n>` replays a run. A campaign must end within the 15
//! minutes a sealed `requestState` lives (some 300,000 cases in a debug build), since the one it
//! sends is issued before it starts.

use crate::common;
use crate::ensure;
mod fixture;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::{
    Call, TestServer, VERSION, compile, conforms, fuzz_cases, fuzz_runtime, official, within,
    within_for,
};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

const DEFAULT_CASES: u32 = 1_500;

const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
const LOG_LEVEL_KEY: &str = "io.modelcontextprotocol/logLevel";
const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";

const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const HEADER_MISMATCH: i64 = -32020;
const MISSING_CAPABILITY: i64 = -32021;
const UNSUPPORTED_VERSION: i64 = -32022;

/// The requests of revision 2026-07-28.
const METHODS: [&str; 10] = [
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "subscriptions/listen",
];

/// Methods of earlier revisions that 2026-07-28 removed.
const REMOVED: [&str; 10] = [
    "initialize",
    "notifications/initialized",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "notifications/roots/list_changed",
    "notifications/elicitation/complete",
    "tasks/result",
    "tasks/list",
];

/// Names no revision serves, or not as requests, or not in this spelling.
const UNKNOWN: [&str; 9] = [
    "unknown/method",
    "tools/CALL",
    "Tools/list",
    "server/discover/",
    "",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
    "notifications/cancelled",
];

// ---------------------------------------------------------------------------------------------
// The request on the wire
// ---------------------------------------------------------------------------------------------

/// One HTTP request exactly as it is sent.
#[derive(Clone)]
struct Case {
    http_method: &'static str,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Case {
    /// Every value of a header, in order; names compare case-insensitively.
    fn values(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
            .collect()
    }
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} /mcp", self.http_method)?;
        for (name, value) in &self.headers {
            writeln!(
                f,
                "{name}: {}",
                String::from_utf8_lossy(value).escape_debug()
            )?;
        }
        let body = String::from_utf8_lossy(&self.body);
        if body.chars().count() > 800 {
            let head: String = body.chars().take(800).collect();
            write!(f, "\n{head}... ({} bytes)", self.body.len())
        } else {
            write!(f, "\n{body}")
        }
    }
}

/// What a client can only send after the server issued it.
#[derive(Clone, Debug)]
struct World {
    /// The second page of `tools/list`.
    cursor: String,
    /// `confirm`'s sealed state, for `arguments: {}` and the anonymous caller.
    request_state: String,
    /// A basket created before the run.
    basket: String,
}

// ---------------------------------------------------------------------------------------------
// Generators: a valid request, then mutations
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum IntentEra {
    Modern,
    /// `header`: the `MCP-Protocol-Version` sent, if any; `claim`: whether `_meta` names it too.
    Legacy {
        header: Option<&'static str>,
        claim: bool,
    },
}

/// A request as its client meant it.
#[derive(Clone, Debug)]
struct Intent {
    method: String,
    /// Without `_meta`, which the era adds.
    params: Option<Value>,
    capabilities: Value,
    era: IntentEra,
}

fn modern(method: &str, params: Value) -> Intent {
    Intent {
        method: method.to_owned(),
        params: Some(params),
        capabilities: json!({}),
        era: IntentEra::Modern,
    }
}

fn call(name: &str, arguments: Value) -> Intent {
    modern(
        "tools/call",
        json!({ "name": name, "arguments": arguments }),
    )
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        select(vec![
            "2.0",
            "tools/call",
            "echo",
            "route",
            "2026-07-28",
            "2025-11-25",
            "_meta",
            "server/discover",
            "docs://readme",
            "greet",
        ])
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                select(vec![
                    "jsonrpc",
                    "id",
                    "method",
                    "params",
                    "_meta",
                    "name",
                    "arguments",
                    "cursor",
                    "uri",
                    "text",
                    "region",
                    "shard",
                    PROTOCOL_VERSION_KEY,
                    CAPABILITIES_KEY,
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

fn junk_scalar() -> impl Strategy<Value = Value> {
    select(vec![
        Value::Null,
        json!(5),
        json!(1.5),
        json!(true),
        json!(""),
        json!([]),
        json!("x"),
    ])
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-z ]{0,8}", 1 => ".{0,6}"]
}

fn list(method: &'static str, cursor: String) -> BoxedStrategy<Intent> {
    prop_oneof![
        8 => Just(json!({})),
        1 => Just(json!({ "cursor": null })),
        3 => Just(json!({ "cursor": cursor })),
        1 => "[A-Za-z0-9_-]{0,24}".prop_map(|c| json!({ "cursor": c })),
        1 => any::<i32>().prop_map(|n| json!({ "cursor": n })),
    ]
    .prop_map(move |params| modern(method, params))
    .boxed()
}

fn region() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z]{2}-[a-z]{3,5}",
        1 => Just("zürich".to_owned()),
        1 => Just(" padded ".to_owned()),
        1 => Just("=?base64?looks-encoded?=".to_owned()),
        1 => ".{0,4}",
    ]
}

/// `confirm`: the capabilities declared, and what a retry carries.
fn confirm(world: &World) -> BoxedStrategy<Intent> {
    let state = world.request_state.clone();
    let capabilities = select(vec![
        json!({}),
        json!({ "elicitation": {} }),
        json!({ "elicitation": { "form": {} } }),
        json!({ "elicitation": { "url": {} } }),
        json!({ "sampling": {} }),
    ]);
    let arguments = prop_oneof![
        6 => Just(Some(json!({}))),
        1 => Just(None),
        1 => Just(Some(Value::Null)),
        1 => Just(Some(json!({ "x": 1 }))),
    ];
    let answer = json!({ fixture::CONFIRM_KEY: { "action": "accept", "content": { "ok": true } } });
    let round = prop_oneof![
        5 => Just((None, None)),
        2 => Just((Some(answer.clone()), None)),
        2 => Just((Some(answer), Some(json!(state.clone())))),
        1 => Just((None, Some(json!(state.clone())))),
        1 => Just((None, Some(json!(format!("{state}x"))))),
        1 => Just((Some(json!({ "other": {} })), None)),
    ];
    (capabilities, arguments, round)
        .prop_map(|(capabilities, arguments, (responses, state))| {
            let mut params = json!({ "name": "confirm" });
            if let Some(arguments) = arguments {
                params["arguments"] = arguments;
            }
            if let Some(responses) = responses {
                params["inputResponses"] = responses;
            }
            if let Some(state) = state {
                params["requestState"] = state;
            }
            Intent {
                capabilities,
                ..modern("tools/call", params)
            }
        })
        .boxed()
}

fn tool_call(world: &World) -> BoxedStrategy<Intent> {
    let handle = world.basket.clone();
    let handle_too = handle.clone();
    let handle_again = handle.clone();
    let handle_last = handle.clone();
    // Callers are anonymous, so an operation id must be 22 URL-safe characters or more.
    let operation = || "[a-z]{1,5}".prop_map(|s| format!("op-{s:_>20}"));
    prop_oneof![
        4 => text().prop_map(|t| call("echo", json!({ "text": t }))),
        3 => (any::<i32>(), -2i32..3, prop::option::of("[a-z]{0,4}")).prop_map(|(a, b, note)| {
            let mut arguments = json!({ "a": a, "b": b });
            if let Some(note) = note {
                arguments["note"] = json!(note);
            }
            call("math/divide", arguments)
        }),
        5 => (region(), prop::option::of(-(1i64 << 53)..(1i64 << 53)), any::<bool>()).prop_map(
            |(region, shard, null_shard)| {
                let mut arguments = json!({ "region": region });
                match shard {
                    Some(shard) => arguments["shard"] = json!(shard),
                    None if null_shard => arguments["shard"] = Value::Null,
                    None => {}
                }
                call("route", arguments)
            }
        ),
        6 => confirm(world),
        2 => Just(call("steps", json!({}))),
        2 => (operation(), prop::option::of("[A-Z][a-z]{0,5}")).prop_map(|(op, model)| {
            let mut arguments = json!({ "operation_id": op });
            if let Some(model) = model {
                arguments["model"] = json!(model);
            }
            call("basket_create", arguments)
        }),
        2 => select(vec![handle.clone(), "bsk_unknown".to_owned(), String::new()])
            .prop_map(|h| call("basket_get", json!({ "basket_id": h }))),
        2 => (1u64..4, operation(), 1u32..200).prop_map(move |(version, op, gib)| {
            call("basket_upgrade_memory", json!({ "basket_id": handle_too,
                "expected_version": version, "operation_id": op, "memory_gib": gib }))
        }),
        1 => (1u64..4, operation(), 1u32..4096, 1u32..4096, any::<bool>()).prop_map(
            move |(version, op, memory, storage, whole)| {
                if whole {
                    call("basket_replace_configuration", json!({ "basket_id": handle_last,
                        "expected_version": version, "operation_id": op,
                        "memory_gib": memory, "storage_gib": storage }))
                } else {
                    call("basket_upgrade_storage", json!({ "basket_id": handle_last,
                        "expected_version": version, "operation_id": op, "storage_gib": storage }))
                }
            }
        ),
        1 => (operation(), text()).prop_map(move |(op, note)| {
            call("basket_add_note", json!({ "basket_id": handle_again, "operation_id": op,
                "text": note }))
        }),
        2 => select(vec!["nope", "ECHO", "echo ", "math", ""]).prop_map(|n| call(n, json!({}))),
    ]
    .boxed()
}

fn read() -> BoxedStrategy<Intent> {
    prop_oneof![
        3 => select(fixture::RESOURCES.to_vec()).prop_map(str::to_owned),
        3 => "[a-z0-9-]{1,8}".prop_map(|page| format!("{}{page}", fixture::TEMPLATE_PREFIX)),
        1 => Just(format!("{}ünï", fixture::TEMPLATE_PREFIX)),
        2 => select(vec![
            "docs://pages/", "docs://pages/a/b", "docs://missing", "", "docs://readme/",
        ])
        .prop_map(str::to_owned),
    ]
    .prop_map(|uri| modern("resources/read", json!({ "uri": uri })))
    .boxed()
}

fn prompt() -> BoxedStrategy<Intent> {
    prop_oneof![
        4 => "[a-z]{0,6}".prop_map(|n| json!({ "name": "greet", "arguments": { "name": n } })),
        1 => ("[a-z]{0,6}", "[a-z]{0,6}")
            .prop_map(|(n, t)| json!({ "name": "greet", "arguments": { "name": n, "tone": t } })),
        1 => Just(json!({ "name": "greet", "arguments": {} })),
        1 => Just(json!({ "name": "greet", "arguments": { "name": 5 } })),
        2 => Just(json!({ "name": "plain" })),
        1 => Just(json!({ "name": "plain", "arguments": { "extra": "x" } })),
        1 => Just(json!({ "name": "nope" })),
    ]
    .prop_map(|params| modern("prompts/get", params))
    .boxed()
}

fn complete() -> BoxedStrategy<Intent> {
    let greet = json!({ "type": "ref/prompt", "name": "greet" });
    let pages = json!({ "type": "ref/resource", "uri": fixture::TEMPLATE });
    let (greet_too, greet_again) = (greet.clone(), greet.clone());
    prop_oneof![
        4 => "[a-z]{0,3}".prop_map(move |v| {
            json!({ "ref": greet, "argument": { "name": "name", "value": v } })
        }),
        2 => "[a-z]{0,3}".prop_map(move |v| {
            json!({ "ref": pages, "argument": { "name": "page", "value": v },
                "context": { "arguments": {} } })
        }),
        1 => Just(json!({ "ref": greet_too, "argument": { "name": "tone", "value": "" } })),
        1 => Just(json!({ "ref": { "type": "ref/resource", "uri": "docs://other/{x}" },
            "argument": { "name": "x", "value": "" } })),
        1 => Just(json!({ "ref": { "type": "ref/prompt", "name": "nope" },
            "argument": { "name": "name", "value": "" } })),
        1 => Just(json!({ "ref": { "type": "ref/tool", "name": "echo" },
            "argument": { "name": "name", "value": "" } })),
        1 => Just(json!({ "ref": greet_again, "argument": { "name": "name" } })),
    ]
    .prop_map(|params| modern("completion/complete", params))
    .boxed()
}

fn listen_filter() -> impl Strategy<Value = Value> {
    let flag = || {
        prop_oneof![
            3 => Just(None),
            3 => Just(Some(json!(true))),
            2 => Just(Some(json!(false))),
            1 => Just(Some(Value::Null)),
        ]
    };
    let uris = select(vec![
        "docs://readme",
        "docs://logo",
        "docs://pages/intro",
        "docs://nothing",
    ]);
    let subscriptions = prop_oneof![
        3 => Just(None),
        3 => prop::collection::vec(uris, 0..3).prop_map(|u| Some(json!(u))),
    ];
    (flag(), flag(), flag(), subscriptions).prop_map(|(tools, prompts, resources, uris)| {
        let mut filter = Map::new();
        for (key, value) in [
            ("toolsListChanged", tools),
            ("promptsListChanged", prompts),
            ("resourcesListChanged", resources),
            ("resourceSubscriptions", uris),
        ] {
            if let Some(value) = value {
                filter.insert(key.to_owned(), value);
            }
        }
        Value::Object(filter)
    })
}

fn listen() -> BoxedStrategy<Intent> {
    prop_oneof![
        8 => listen_filter().prop_map(|f| json!({ "notifications": f })),
        1 => Just(json!({})),
        1 => Just(json!({ "notifications": [] })),
        1 => Just(json!({ "notifications": { "toolsListChanged": "yes" } })),
        1 => Just(json!({ "notifications": { "resourceSubscriptions": [1] } })),
    ]
    .prop_map(|params| modern("subscriptions/listen", params))
    .boxed()
}

/// Removed and unknown methods, sent the 2026-07-28 way.
fn unserved() -> BoxedStrategy<Intent> {
    prop_oneof![
        3 => select(REMOVED.to_vec()).prop_map(|m| modern(m, json!({}))),
        2 => select(UNKNOWN.to_vec()).prop_map(|m| modern(m, json!({}))),
        1 => Just(modern("tasks/get", json!({ "taskId": "task-1" }))),
    ]
    .boxed()
}

/// A client of an earlier revision: no `_meta` claim (or an earlier one), no `Mcp-Method`.
fn legacy() -> BoxedStrategy<Intent> {
    let header = prop_oneof![
        4 => select(LEGACY_VERSIONS.to_vec()).prop_map(Some),
        1 => Just(None),
    ];
    let request = prop_oneof![
        4 => select(vec!["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]).prop_map(|v| {
            ("initialize", Some(json!({ "protocolVersion": v, "capabilities": {},
                "clientInfo": { "name": "old", "version": "1" } })))
        }),
        2 => select(vec![None, Some(json!({}))]).prop_map(|p| ("ping", p)),
        1 => select(LOG_LEVELS.to_vec())
            .prop_map(|l| ("logging/setLevel", Some(json!({ "level": l })))),
        1 => select(vec!["resources/subscribe", "resources/unsubscribe"])
            .prop_map(|m| (m, Some(json!({ "uri": "docs://readme" })))),
        2 => select(vec![None, Some(json!({}))]).prop_map(|p| ("tools/list", p)),
        3 => select(vec![
            json!({ "name": "echo", "arguments": { "text": "old" } }),
            json!({ "name": "steps" }),
            json!({ "name": "confirm", "arguments": {} }),
            json!({ "name": "route", "arguments": { "region": "eu" } }),
            json!({ "name": "nope" }),
        ])
        .prop_map(|p| ("tools/call", Some(p))),
        1 => Just(("resources/read", Some(json!({ "uri": "docs://readme" })))),
        1 => Just(("prompts/get", Some(json!({ "name": "greet",
            "arguments": { "name": "old" } })))),
        1 => Just(("prompts/list", None)),
        1 => Just(("completion/complete", Some(json!({
            "ref": { "type": "ref/prompt", "name": "greet" },
            "argument": { "name": "name", "value": "a" } })))),
        2 => select(vec!["server/discover", "subscriptions/listen", "unknown/method"])
            .prop_map(|m| (m, Some(json!({})))),
    ];
    (request, header, prop::bool::weighted(0.2))
        .prop_map(|((method, params), header, claim)| Intent {
            method: method.to_owned(),
            params,
            capabilities: json!({}),
            era: IntentEra::Legacy { header, claim },
        })
        .boxed()
}

fn intent(world: &World) -> BoxedStrategy<Intent> {
    prop_oneof![
        3 => Just(modern("server/discover", json!({}))),
        4 => list("tools/list", world.cursor.clone()),
        30 => tool_call(world),
        3 => list("resources/list", world.cursor.clone()),
        3 => list("resources/templates/list", world.cursor.clone()),
        6 => read(),
        3 => list("prompts/list", world.cursor.clone()),
        6 => prompt(),
        5 => complete(),
        4 => listen(),
        5 => unserved(),
        12 => legacy(),
    ]
    .boxed()
}

fn id() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        60 => (0i64..1000).prop_map(|n| Some(json!(n))),
        6 => any::<i64>().prop_map(|n| Some(json!(n))),
        10 => ".{0,12}".prop_map(|s| Some(json!(s))),
        4 => Just(None),
        2 => Just(Some(Value::Null)),
        2 => Just(Some(json!(1.5))),
        1 => Just(Some(json!(1.0))),
        1 => (i64::MAX as u64 + 1..=u64::MAX).prop_map(|n| Some(json!(n))),
        2 => select(vec![json!({}), json!([1]), json!(true), json!({ "id": 1 })]).prop_map(Some),
    ]
}

#[derive(Clone, Debug)]
enum MetaEdit {
    None,
    Remove(&'static str),
    Set(&'static str, Value),
    /// The `_meta` protocol version; the header follows when `true`.
    Version(&'static str, bool),
    /// `_meta` itself replaced (`None`: removed).
    Meta(Option<Value>),
    NoParams,
}

fn meta_edit() -> impl Strategy<Value = MetaEdit> {
    let token = select(vec![
        json!("tok"),
        json!(7),
        json!(1.5),
        json!(true),
        Value::Null,
        json!({}),
    ]);
    let level = select(vec![
        json!("debug"),
        json!("error"),
        json!("verbose"),
        json!("INFO"),
        json!(3),
    ]);
    prop_oneof![
        80 => Just(MetaEdit::None),
        3 => select(vec![PROTOCOL_VERSION_KEY, CAPABILITIES_KEY]).prop_map(MetaEdit::Remove),
        1 => Just(MetaEdit::Remove(CLIENT_INFO_KEY)),
        3 => (select(vec![PROTOCOL_VERSION_KEY, CAPABILITIES_KEY, CLIENT_INFO_KEY]), junk_scalar())
            .prop_map(|(k, v)| MetaEdit::Set(k, v)),
        1 => Just(MetaEdit::Set(CLIENT_INFO_KEY, json!({ "version": "1" }))),
        3 => select(vec!["2099-01-01", "2026-07-29", "v999.0.0", ""])
            .prop_map(|v| MetaEdit::Version(v, true)),
        1 => select(vec!["2099-01-01", "v999.0.0"]).prop_map(|v| MetaEdit::Version(v, false)),
        2 => (select(LEGACY_VERSIONS.to_vec()), any::<bool>())
            .prop_map(|(v, h)| MetaEdit::Version(v, h)),
        4 => token.prop_map(|t| MetaEdit::Set("progressToken", t)),
        3 => level.prop_map(|l| MetaEdit::Set(LOG_LEVEL_KEY, l)),
        1 => select(vec!["com.example/trace", "traceparent"])
            .prop_map(|k| MetaEdit::Set(k, json!("x"))),
        1 => Just(MetaEdit::Set(CAPABILITIES_KEY, json!({ "elicitation": {} }))),
        1 => junk_scalar().prop_map(|v| MetaEdit::Meta(Some(v))),
        1 => Just(MetaEdit::Meta(None)),
        1 => Just(MetaEdit::NoParams),
        1 => (
            select(vec![PROTOCOL_VERSION_KEY, CAPABILITIES_KEY, "progressToken"]),
            arbitrary_json(),
        )
            .prop_map(|(k, v)| MetaEdit::Set(k, v)),
    ]
}

#[derive(Clone, Debug)]
enum ParamsEdit {
    None,
    /// One member of `params` replaced.
    Field(&'static str, Value),
    /// `params` replaced; `_meta` kept when `true` and the replacement is an object.
    Whole(Value, bool),
}

fn params_edit() -> impl Strategy<Value = ParamsEdit> {
    let field = select(vec![
        "arguments",
        "name",
        "uri",
        "cursor",
        "ref",
        "argument",
        "notifications",
        "inputResponses",
        "requestState",
        "context",
    ]);
    prop_oneof![
        90 => Just(ParamsEdit::None),
        7 => (field, arbitrary_json()).prop_map(|(f, v)| ParamsEdit::Field(f, v)),
        3 => (arbitrary_json(), any::<bool>()).prop_map(|(v, keep)| ParamsEdit::Whole(v, keep)),
    ]
}

#[derive(Clone, Debug)]
enum EnvelopeEdit {
    None,
    /// A top-level member set (`None`: removed).
    Member(&'static str, Option<Value>),
    Batch(bool),
    Replace(Value),
    Truncate(usize),
    Bytes(Vec<u8>),
}

fn envelope_edit() -> impl Strategy<Value = EnvelopeEdit> {
    prop_oneof![
        88 => Just(EnvelopeEdit::None),
        2 => select(vec![None, Some(json!("1.0")), Some(json!(2.0)), Some(Value::Null)])
            .prop_map(|v| EnvelopeEdit::Member("jsonrpc", v)),
        2 => prop_oneof![Just(None), junk_scalar().prop_map(Some)]
            .prop_map(|v| EnvelopeEdit::Member("method", v)),
        1 => select(vec![("result", json!({})), ("error", json!({ "code": 1, "message": "x" }))])
            .prop_map(|(k, v)| EnvelopeEdit::Member(k, Some(v))),
        2 => junk_scalar().prop_map(|v| EnvelopeEdit::Member("params", Some(v))),
        1 => arbitrary_json().prop_map(|v| EnvelopeEdit::Member("extra", Some(v))),
        1 => any::<bool>().prop_map(EnvelopeEdit::Batch),
        1 => junk_scalar().prop_map(EnvelopeEdit::Replace),
        2 => any::<usize>().prop_map(EnvelopeEdit::Truncate),
        2 => prop::collection::vec(any::<u8>(), 0..64).prop_map(EnvelopeEdit::Bytes),
        2 => arbitrary_json().prop_map(EnvelopeEdit::Replace),
    ]
}

#[derive(Clone, Debug)]
enum HeaderEdit {
    Absent,
    Wrong,
    Twice,
    TwiceOther,
    Base64,
    BadBase64,
    Base64Other,
    Padded,
    Upper,
    NameUpper,
    NonAscii,
    Value(&'static str),
}

fn header_edits() -> impl Strategy<Value = Vec<(&'static str, HeaderEdit)>> {
    let target = prop_oneof![
        3 => Just("mcp-protocol-version"),
        3 => Just("mcp-method"),
        2 => Just("mcp-name"),
        1 => Just("mcp-param-region"),
        1 => Just("mcp-param-shard"),
    ];
    let edit = prop_oneof![
        3 => Just(HeaderEdit::Absent),
        2 => Just(HeaderEdit::Wrong),
        2 => Just(HeaderEdit::Twice),
        1 => Just(HeaderEdit::TwiceOther),
        2 => Just(HeaderEdit::Base64),
        2 => Just(HeaderEdit::BadBase64),
        1 => Just(HeaderEdit::Base64Other),
        1 => Just(HeaderEdit::Padded),
        1 => Just(HeaderEdit::Upper),
        1 => Just(HeaderEdit::NameUpper),
        1 => Just(HeaderEdit::NonAscii),
        2 => select(vec!["2025-11-25", "2025-06-18", "2099-01-01", "2026-07-28", "tools/call"])
            .prop_map(HeaderEdit::Value),
    ];
    prop_oneof![
        84 => Just(Vec::new()),
        13 => (target.clone(), edit.clone()).prop_map(|e| vec![e]),
        3 => prop::collection::vec((target, edit), 2..=3),
    ]
}

#[derive(Clone, Debug)]
enum TransportEdit {
    None,
    Method(&'static str),
    ContentType(&'static [&'static str]),
    Host(&'static str),
    Origin(&'static str),
    Oversize,
    /// A header added (`None`: the header removed).
    Other(&'static str, Option<&'static str>),
}

fn transport_edit() -> impl Strategy<Value = TransportEdit> {
    const TYPES: [&[&str]; 9] = [
        &[],
        &["text/plain"],
        &["application/json; charset=utf-8"],
        &["Application/JSON"],
        &["application/json-seq"],
        &["application/jsonx"],
        &["application/json", "text/plain"],
        &["text/plain", "application/json"],
        &["multipart/form-data; boundary=x"],
    ];
    prop_oneof![
        84 => Just(TransportEdit::None),
        3 => select(vec!["GET", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"])
            .prop_map(TransportEdit::Method),
        4 => select(TYPES.to_vec()).prop_map(TransportEdit::ContentType),
        2 => select(vec![
            "evil.example.com", "localhost", "[::1]:8080", "127.0.0.1.", "LOCALHOST:1", "127.0.0.2",
        ])
        .prop_map(TransportEdit::Host),
        2 => select(vec![
            "http://localhost:3000", "https://evil.example", "null", "http://127.0.0.1",
            "http://[::1]:9",
        ])
        .prop_map(TransportEdit::Origin),
        2 => Just(TransportEdit::Oversize),
        3 => select(vec![
            ("mcp-session-id", Some("session-1")),
            ("last-event-id", Some("5")),
            ("accept", Some("application/json")),
            ("accept", None),
            ("authorization", Some("Bearer nobody")),
            ("x-unrelated", Some("1")),
        ])
        .prop_map(|(name, value)| TransportEdit::Other(name, value)),
    ]
}

#[derive(Clone, Debug)]
enum HeaderValue {
    /// Sent as is when header-safe, else in the `=?base64?...?=` form, as a client must.
    Text(String),
    Raw(Vec<u8>),
}

impl HeaderValue {
    fn text(&self) -> Option<&str> {
        match self {
            HeaderValue::Text(text) => Some(text),
            HeaderValue::Raw(_) => None,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            HeaderValue::Text(text) => encode(text),
            HeaderValue::Raw(bytes) => bytes.clone(),
        }
    }
}

fn sentinel(text: &str) -> Vec<u8> {
    format!("=?base64?{}?=", STANDARD.encode(text)).into_bytes()
}

/// A header value as the spec has clients send it: plain when it is visible ASCII without
/// surrounding whitespace and does not look like the sentinel, Base64 otherwise.
fn encode(text: &str) -> Vec<u8> {
    let plain = text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && text.trim_matches([' ', '\t']) == text
        && !(text.starts_with("=?base64?") && text.ends_with("?="));
    if plain {
        text.as_bytes().to_vec()
    } else {
        sentinel(text)
    }
}

/// How a client writes an argument into its `Mcp-Param-*` header.
fn represent(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The body member that `Mcp-Name` mirrors.
fn named_target(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

fn apply_meta(params: &mut Option<Value>, version_header: &mut Option<String>, edit: &MetaEdit) {
    fn meta(params: &mut Option<Value>) -> Option<&mut Map<String, Value>> {
        let params = params.get_or_insert_with(|| json!({})).as_object_mut()?;
        params
            .entry("_meta")
            .or_insert_with(|| json!({}))
            .as_object_mut()
    }
    match edit {
        MetaEdit::None => {}
        MetaEdit::Remove(key) => {
            if let Some(meta) = meta(params) {
                meta.remove(*key);
            }
        }
        MetaEdit::Set(key, value) => {
            if let Some(meta) = meta(params) {
                meta.insert((*key).to_owned(), value.clone());
            }
        }
        MetaEdit::Version(version, header_follows) => {
            if let Some(meta) = meta(params) {
                meta.insert(PROTOCOL_VERSION_KEY.to_owned(), json!(version));
            }
            if *header_follows {
                *version_header = Some((*version).to_owned());
            }
        }
        MetaEdit::Meta(value) => {
            if let Some(Value::Object(params)) = params {
                match value {
                    Some(value) => params.insert("_meta".to_owned(), value.clone()),
                    None => params.remove("_meta"),
                };
            }
        }
        MetaEdit::NoParams => *params = None,
    }
}

fn apply_params(params: &mut Option<Value>, edit: &ParamsEdit) {
    match edit {
        ParamsEdit::None => {}
        ParamsEdit::Field(field, value) => {
            if let Some(Value::Object(params)) = params {
                params.insert((*field).to_owned(), value.clone());
            }
        }
        ParamsEdit::Whole(value, keep_meta) => {
            let meta = params.as_ref().and_then(|p| p.get("_meta")).cloned();
            let mut value = value.clone();
            if let (true, Some(meta), Value::Object(object)) = (keep_meta, meta, &mut value) {
                object.insert("_meta".to_owned(), meta);
            }
            *params = Some(value);
        }
    }
}

fn apply_envelope(mut body: Value, edit: &EnvelopeEdit) -> Vec<u8> {
    match edit {
        EnvelopeEdit::None => {}
        EnvelopeEdit::Member(key, Some(value)) => body[*key] = value.clone(),
        EnvelopeEdit::Member(key, None) => {
            body.as_object_mut().unwrap().remove(*key);
        }
        EnvelopeEdit::Batch(true) => return b"[]".to_vec(),
        EnvelopeEdit::Batch(false) => body = json!([body]),
        EnvelopeEdit::Replace(value) => body = value.clone(),
        EnvelopeEdit::Truncate(at) => {
            let bytes = serde_json::to_vec(&body).unwrap();
            return bytes[..at % bytes.len()].to_vec();
        }
        EnvelopeEdit::Bytes(bytes) => return bytes.clone(),
    }
    serde_json::to_vec(&body).unwrap()
}

fn edit_header(headers: &mut Vec<(String, HeaderValue)>, target: &str, edit: &HeaderEdit) {
    let current = headers
        .iter()
        .find(|(n, _)| n == target)
        .and_then(|(_, v)| v.text())
        .unwrap_or("x")
        .to_owned();
    let mut set = |value: HeaderValue| {
        headers.retain(|(n, _)| n != target);
        headers.push((target.to_owned(), value));
    };
    match edit {
        HeaderEdit::Absent => headers.retain(|(n, _)| n != target),
        HeaderEdit::Wrong => set(HeaderValue::Text(format!("{current}-other"))),
        HeaderEdit::Twice => headers.push((target.to_owned(), HeaderValue::Text(current))),
        HeaderEdit::TwiceOther => {
            headers.push((target.to_owned(), HeaderValue::Text("other".into())))
        }
        HeaderEdit::Base64 => set(HeaderValue::Raw(sentinel(&current))),
        HeaderEdit::BadBase64 => set(HeaderValue::Raw(b"=?base64?SGVs!!!bG8=?=".to_vec())),
        HeaderEdit::Base64Other => set(HeaderValue::Raw(sentinel(&format!("{current}x")))),
        HeaderEdit::Padded => {
            let mut padded = b"  ".to_vec();
            padded.extend(encode(&current));
            padded.extend(b" \t");
            set(HeaderValue::Raw(padded));
        }
        HeaderEdit::Upper => set(HeaderValue::Text(current.to_uppercase())),
        HeaderEdit::NameUpper => {
            for (name, _) in headers.iter_mut().filter(|(n, _)| n == target) {
                *name = name.to_uppercase();
            }
        }
        HeaderEdit::NonAscii => set(HeaderValue::Raw(b"caf\xc3\xa9".to_vec())),
        HeaderEdit::Value(value) => set(HeaderValue::Text((*value).to_owned())),
    }
}

#[derive(Clone, Debug)]
struct Parts {
    intent: Intent,
    id: Option<Value>,
    meta: MetaEdit,
    params: ParamsEdit,
    envelope: EnvelopeEdit,
    headers: Vec<(&'static str, HeaderEdit)>,
    transport: TransportEdit,
}

/// The request: the intent's body and the headers a client sends for it, then every mutation.
fn build(parts: Parts) -> Case {
    let Parts {
        intent,
        id,
        meta,
        params: params_edit,
        envelope,
        headers: header_edits,
        transport,
    } = parts;
    let mut params = intent.params.clone();
    let is_modern = matches!(intent.era, IntentEra::Modern);
    let mut version_header = match intent.era {
        IntentEra::Modern => {
            let mut meta = common::meta();
            meta[CAPABILITIES_KEY] = intent.capabilities.clone();
            params.get_or_insert_with(|| json!({}))["_meta"] = meta;
            Some(VERSION.to_owned())
        }
        IntentEra::Legacy { header, claim } => {
            if claim {
                params.get_or_insert_with(|| json!({}))["_meta"] =
                    json!({ PROTOCOL_VERSION_KEY: header.unwrap_or(LEGACY_VERSIONS[0]) });
            }
            header.map(str::to_owned)
        }
    };
    apply_meta(&mut params, &mut version_header, &meta);
    apply_params(&mut params, &params_edit);

    let text = |s: &str| HeaderValue::Text(s.to_owned());
    let mut headers = vec![
        ("content-type".to_owned(), text("application/json")),
        (
            "accept".to_owned(),
            text("application/json, text/event-stream"),
        ),
    ];
    if let Some(version) = &version_header {
        headers.push(("mcp-protocol-version".to_owned(), text(version)));
    }
    if is_modern {
        headers.push(("mcp-method".to_owned(), text(&intent.method)));
        let target = named_target(&intent.method)
            .and_then(|field| params.as_ref()?.get(field)?.as_str().map(str::to_owned));
        if let Some(target) = target {
            headers.push(("mcp-name".to_owned(), HeaderValue::Text(target)));
        }
        let calls_route = intent.method == "tools/call"
            && params.as_ref().and_then(|p| p.get("name")) == Some(&json!("route"));
        if calls_route {
            let arguments = params.as_ref().and_then(|p| p.get("arguments"));
            for (header, argument) in fixture::ROUTE_HEADERS {
                if let Some(value) = arguments.and_then(|a| a.get(argument)).and_then(represent) {
                    headers.push((
                        format!("mcp-param-{}", header.to_ascii_lowercase()),
                        HeaderValue::Text(value),
                    ));
                }
            }
        }
    }

    let mut body = json!({ "jsonrpc": "2.0", "method": intent.method });
    if let Some(id) = id {
        body["id"] = id;
    }
    if let Some(params) = params {
        body["params"] = params;
    }
    let mut bytes = apply_envelope(body, &envelope);
    for (target, edit) in &header_edits {
        edit_header(&mut headers, target, edit);
    }
    let mut http_method = "POST";
    match transport {
        TransportEdit::None => {}
        TransportEdit::Method(method) => http_method = method,
        TransportEdit::ContentType(types) => {
            headers.retain(|(n, _)| n != "content-type");
            headers.extend(types.iter().map(|t| ("content-type".to_owned(), text(t))));
        }
        TransportEdit::Host(host) => headers.push(("host".to_owned(), text(host))),
        TransportEdit::Origin(origin) => headers.push(("origin".to_owned(), text(origin))),
        TransportEdit::Oversize => bytes.extend(std::iter::repeat_n(b' ', fixture::BODY_LIMIT + 1)),
        TransportEdit::Other(name, None) => headers.retain(|(n, _)| n != name),
        TransportEdit::Other(name, Some(value)) => headers.push((name.to_owned(), text(value))),
    }
    Case {
        http_method,
        headers: headers.into_iter().map(|(n, v)| (n, v.bytes())).collect(),
        body: bytes,
    }
}

fn case(world: &World) -> impl Strategy<Value = Case> + use<> {
    (
        intent(world),
        id(),
        meta_edit(),
        params_edit(),
        envelope_edit(),
        header_edits(),
        transport_edit(),
    )
        .prop_map(|(intent, id, meta, params, envelope, headers, transport)| {
            build(Parts {
                intent,
                id,
                meta,
                params,
                envelope,
                headers,
                transport,
            })
        })
}

// ---------------------------------------------------------------------------------------------
// The model: what the protocol table says each request must get
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Era {
    /// Refused before the era mattered.
    #[default]
    Undecided,
    Modern,
    Legacy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// A JSON-RPC error travelling with this HTTP status.
    Error(u16, i64),
    /// 202 without a body.
    Accepted,
    /// The method's result.
    Result,
    /// `resultType: input_required`.
    InputRequired,
    /// The acknowledgement that opens a subscription stream.
    Ack,
    /// A status without a body (`HEAD`).
    Bare(u16),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Discover,
    ListTools,
    CallTool,
    ListResources,
    ListTemplates,
    ReadResource,
    ListPrompts,
    GetPrompt,
    Complete,
    Listen,
    Initialize,
    Empty,
}

/// What a request must get. Several answers are allowed only where the table does not order
/// two failures of one request.
#[derive(Clone, Debug, Default)]
struct Prediction {
    answers: Vec<Answer>,
    era: Era,
    /// The id the answer must echo; `None`: the answer has no `id`.
    id: Option<Value>,
    method: Option<String>,
    /// Whether a result must come as an event stream.
    stream: bool,
    progress_token: Option<Value>,
    /// The filter a subscription acknowledges.
    honoured: Option<Value>,
    completion: Option<Vec<String>>,
    tool: Option<String>,
    uri: Option<String>,
    initialize_version: Option<String>,
    /// The version a `-32022` must name as requested.
    requested: Option<String>,
    /// Where the runtime knowingly departs from the table, shown in the distribution.
    note: Option<&'static str>,
}

impl Prediction {
    fn answer(mut self, answer: Answer) -> Prediction {
        self.answers = vec![answer];
        self
    }
}

/// A JSON-RPC id: a string or an integer.
fn is_request_id(value: &Value) -> bool {
    value.is_string() || value.is_i64() || value.is_u64()
}

/// A header as the server must read it: absent; unreadable (twice, not visible ASCII, a broken
/// Base64 sentinel); or its text, trimmed and decoded.
fn header_text(case: &Case, name: &str) -> Result<Option<String>, ()> {
    match case.values(name).as_slice() {
        [] => Ok(None),
        [value] => {
            if !value
                .iter()
                .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
            {
                return Err(());
            }
            let text = std::str::from_utf8(value)
                .unwrap()
                .trim_matches([' ', '\t']);
            match text
                .strip_prefix("=?base64?")
                .and_then(|rest| rest.strip_suffix("?="))
            {
                Some(encoded) => STANDARD
                    .decode(encoded)
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .map(Some)
                    .ok_or(()),
                None => Ok(Some(text.to_owned())),
            }
        }
        _ => Err(()),
    }
}

fn header_equals(case: &Case, name: &str, expected: &str) -> bool {
    matches!(header_text(case, name), Ok(Some(text)) if text == expected)
}

fn host_allowed(authority: &str) -> bool {
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    };
    let host = host.trim().trim_end_matches('.');
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .any(|allowed| allowed.eq_ignore_ascii_case(host))
}

fn transport_allowed(case: &Case) -> bool {
    let host_ok = case
        .values("host")
        .first()
        .is_none_or(|h| std::str::from_utf8(h).is_ok_and(host_allowed));
    let origin_ok = case.values("origin").first().is_none_or(|origin| {
        std::str::from_utf8(origin).is_ok_and(|origin| {
            origin
                .split_once("://")
                .map(|(_, rest)| rest.split('/').next().unwrap_or(rest))
                .is_some_and(host_allowed)
        })
    });
    host_ok && origin_ok
}

fn is_json_content(case: &Case) -> bool {
    case.values("content-type").first().is_some_and(|value| {
        std::str::from_utf8(value).is_ok_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
        })
    })
}

/// The era of a request: its `_meta` protocol-version claim decides; without one, `initialize`,
/// no `MCP-Protocol-Version` or an earlier one is legacy (the modern header without the claim is
/// a malformed modern request).
fn is_legacy(case: &Case, method: &str, params: Option<&Map<String, Value>>) -> bool {
    let claim = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(PROTOCOL_VERSION_KEY));
    let header = case.values("mcp-protocol-version").first().and_then(|v| {
        v.iter()
            .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
            .then(|| std::str::from_utf8(v).unwrap().trim())
    });
    let header_is_legacy = header.is_none_or(|v| LEGACY_VERSIONS.contains(&v));
    match claim {
        Some(claim) => {
            claim.as_str().is_some_and(|c| LEGACY_VERSIONS.contains(&c)) && header_is_legacy
        }
        None => method == "initialize" || header_is_legacy,
    }
}

fn route_of(method: &str, legacy: bool) -> Option<Route> {
    Some(match method {
        "initialize" if legacy => Route::Initialize,
        "ping" | "logging/setLevel" | "resources/subscribe" | "resources/unsubscribe" if legacy => {
            Route::Empty
        }
        "server/discover" | "subscriptions/listen" if legacy => return None,
        "server/discover" => Route::Discover,
        "tools/list" => Route::ListTools,
        "tools/call" => Route::CallTool,
        "resources/list" => Route::ListResources,
        "resources/templates/list" => Route::ListTemplates,
        "resources/read" => Route::ReadResource,
        "prompts/list" => Route::ListPrompts,
        "prompts/get" => Route::GetPrompt,
        "completion/complete" => Route::Complete,
        "subscriptions/listen" => Route::Listen,
        _ => return None,
    })
}

fn predict(case: &Case, world: &World) -> Prediction {
    let p = Prediction::default();
    if case.http_method != "POST" {
        let answer = if case.http_method == "HEAD" {
            Answer::Bare(405)
        } else {
            Answer::Error(405, INVALID_REQUEST)
        };
        return p.answer(answer);
    }
    if !transport_allowed(case) {
        return p.answer(Answer::Error(403, INVALID_REQUEST));
    }
    if !is_json_content(case) {
        return p.answer(Answer::Error(415, INVALID_REQUEST));
    }
    if case.body.len() > fixture::BODY_LIMIT {
        return p.answer(Answer::Error(413, INVALID_REQUEST));
    }
    let Ok(message) = serde_json::from_slice::<Value>(&case.body) else {
        return p.answer(Answer::Error(400, PARSE_ERROR));
    };
    let Value::Object(message) = message else {
        return p.answer(Answer::Error(400, INVALID_REQUEST));
    };
    let id = match message.get("id") {
        None => None,
        // The runtime keeps integer ids as i64, so it cannot echo a larger one and refuses the
        // request as if the id were unreadable. Counted apart, so the distribution shows it.
        Some(id) if id.is_u64() && !id.is_i64() => {
            let p = Prediction {
                note: Some("id beyond i64"),
                ..p
            };
            return p.answer(Answer::Error(400, INVALID_REQUEST));
        }
        Some(id) if is_request_id(id) => Some(id.clone()),
        Some(_) => return p.answer(Answer::Error(400, INVALID_REQUEST)),
    };
    let mut p = Prediction {
        id: id.clone(),
        ..p
    };
    if message.get("jsonrpc") != Some(&json!("2.0"))
        || message.contains_key("result")
        || message.contains_key("error")
    {
        return p.answer(Answer::Error(400, INVALID_REQUEST));
    }
    let Some(Value::String(method)) = message.get("method") else {
        return p.answer(Answer::Error(400, INVALID_REQUEST));
    };
    p.method = Some(method.clone());
    let params = match message.get("params") {
        None => None,
        Some(Value::Object(params)) => Some(params),
        Some(_) => return p.answer(Answer::Error(400, INVALID_PARAMS)),
    };
    if id.is_none() {
        return p.answer(Answer::Accepted);
    }
    if is_legacy(case, method, params) {
        p.era = Era::Legacy;
        predict_legacy(p, case, method, params, world)
    } else {
        p.era = Era::Modern;
        predict_modern(p, case, method, params, world)
    }
}

fn predict_modern(
    p: Prediction,
    case: &Case,
    method: &str,
    params: Option<&Map<String, Value>>,
    world: &World,
) -> Prediction {
    let malformed = Answer::Error(400, INVALID_PARAMS);
    let Some(params) = params else {
        return p.answer(malformed);
    };
    let Some(Value::Object(meta)) = params.get("_meta") else {
        return p.answer(malformed);
    };
    let Some(Value::String(version)) = meta.get(PROTOCOL_VERSION_KEY) else {
        return p.answer(malformed);
    };
    let Some(Value::Object(capabilities)) = meta.get(CAPABILITIES_KEY) else {
        return p.answer(malformed);
    };
    if meta
        .get(CLIENT_INFO_KEY)
        .is_some_and(|info| !info.get("name").is_some_and(Value::is_string))
    {
        return p.answer(malformed);
    }
    let token = meta.get("progressToken");
    if token.is_some_and(|t| !is_request_id(t)) {
        return p.answer(malformed);
    }
    let level = meta.get(LOG_LEVEL_KEY);
    if level.is_some_and(|l| !l.as_str().is_some_and(|l| LOG_LEVELS.contains(&l))) {
        return p.answer(malformed);
    }
    if !header_equals(case, "mcp-protocol-version", version) {
        return p.answer(Answer::Error(400, HEADER_MISMATCH));
    }
    if version != VERSION {
        let p = Prediction {
            requested: Some(version.clone()),
            ..p
        };
        return p.answer(Answer::Error(400, UNSUPPORTED_VERSION));
    }
    if !header_equals(case, "mcp-method", method) {
        return p.answer(Answer::Error(400, HEADER_MISMATCH));
    }
    let route = route_of(method, false);
    if let Some(field) = named_target(method) {
        match params.get(field) {
            Some(Value::String(target)) => {
                if !header_equals(case, "mcp-name", target) {
                    return p.answer(Answer::Error(400, HEADER_MISMATCH));
                }
            }
            _ if route.is_none() => {}
            _ => return p.answer(Answer::Error(200, INVALID_PARAMS)),
        }
    }
    let Some(route) = route else {
        return p.answer(Answer::Error(404, METHOD_NOT_FOUND));
    };
    let mut rest = params.clone();
    rest.remove("_meta");
    let opted_in = token.is_some() || level.is_some();
    let p = Prediction {
        progress_token: token.cloned(),
        ..p
    };
    predict_route(p, case, route, &rest, capabilities, opted_in, false, world)
}

fn predict_legacy(
    p: Prediction,
    case: &Case,
    method: &str,
    params: Option<&Map<String, Value>>,
    world: &World,
) -> Prediction {
    // No routing header is required of a legacy request, but each one it sends must agree.
    let agrees_if_sent = |name: &str, expected: &str| match header_text(case, name) {
        Ok(None) => true,
        Ok(Some(text)) => text == expected,
        Err(()) => false,
    };
    if !agrees_if_sent("mcp-method", method) {
        return p.answer(Answer::Error(400, HEADER_MISMATCH));
    }
    if let Some(Value::String(target)) =
        named_target(method).and_then(|field| params.and_then(|params| params.get(field)))
        && !agrees_if_sent("mcp-name", target)
    {
        return p.answer(Answer::Error(400, HEADER_MISMATCH));
    }
    let Some(route) = route_of(method, true) else {
        return p.answer(Answer::Error(404, METHOD_NOT_FOUND));
    };
    let mut rest = params.cloned().unwrap_or_default();
    let meta = rest.remove("_meta");
    let p = Prediction {
        progress_token: meta
            .as_ref()
            .and_then(|m| m.get("progressToken"))
            .filter(|t| is_request_id(t))
            .cloned(),
        ..p
    };
    // Without a session a legacy client cannot set a log level, so its messages always go out.
    predict_route(p, case, route, &rest, &Map::new(), true, true, world)
}

/// Whether each `Mcp-Param-*` header of `route` mirrors its argument. A legacy client need not
/// send them, but one it sends must agree.
fn param_headers_agree(case: &Case, arguments: Option<&Value>, legacy: bool) -> bool {
    let arguments = arguments.and_then(Value::as_object);
    fixture::ROUTE_HEADERS.iter().all(|(header, argument)| {
        let name = format!("mcp-param-{}", header.to_ascii_lowercase());
        let value = arguments
            .and_then(|a| a.get(*argument))
            .filter(|v| !v.is_null());
        match (header_text(case, &name), value) {
            (Err(()), _) => false,
            (Ok(None), None) => true,
            (Ok(None), Some(_)) => legacy,
            (Ok(Some(_)), None) => false,
            (Ok(Some(header)), Some(value)) => match value {
                Value::String(s) => header == *s,
                Value::Bool(b) => header == b.to_string(),
                Value::Number(n) => {
                    written_out(&header).is_some()
                        && written_out(&header) == written_out(&n.to_string())
                }
                _ => false,
            },
        }
    })
}

/// A JSON number written out in full, without exponent or needless zeros (`4.2e1` and `42.0`
/// are `42`, `-0` is `0`), so two numbers compare exactly; `None` for text that is no JSON number.
fn written_out(text: &str) -> Option<String> {
    if !matches!(serde_json::from_str::<Value>(text), Ok(Value::Number(_))) || text.trim() != text {
        return None;
    }
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{integer}{fraction}");
    let point = i64::try_from(integer.len()).ok()? + exponent;
    // Written out, the point sits `point` digits from the left (zeros padded either side).
    let padded_left = usize::try_from((-point).max(0)).ok()?;
    let padded = format!("{}{digits}", "0".repeat(padded_left));
    let point = usize::try_from(point.max(0)).ok()?;
    let padded = if padded.len() < point {
        format!("{padded}{}", "0".repeat(point - padded.len()))
    } else {
        padded
    };
    let (whole, part) = padded.split_at(point);
    let whole = whole.trim_start_matches('0');
    let part = part.trim_end_matches('0');
    let number = match (whole.is_empty(), part.is_empty()) {
        (true, true) => return Some("0".to_owned()),
        (_, true) => whole.to_owned(),
        (true, false) => format!("0.{part}"),
        (false, false) => format!("{whole}.{part}"),
    };
    Some(if negative {
        format!("-{number}")
    } else {
        number
    })
}

/// Whether `state` is the one `confirm` sealed for `arguments: {}`.
fn state_is_genuine(state: &str, route: Route, params: &Map<String, Value>, world: &World) -> bool {
    let empty_arguments = match params.get("arguments") {
        None | Some(Value::Null) => true,
        Some(Value::Object(arguments)) => arguments.is_empty(),
        _ => false,
    };
    route == Route::CallTool
        && params.get("name") == Some(&json!("confirm"))
        && empty_arguments
        && state == world.request_state
}

fn declares_form_elicitation(capabilities: &Map<String, Value>) -> bool {
    match capabilities.get("elicitation") {
        Some(Value::Object(modes)) => modes.is_empty() || modes.contains_key("form"),
        _ => false,
    }
}

#[allow(clippy::too_many_arguments)]
fn predict_route(
    mut p: Prediction,
    case: &Case,
    route: Route,
    params: &Map<String, Value>,
    capabilities: &Map<String, Value>,
    opted_in: bool,
    legacy: bool,
    world: &World,
) -> Prediction {
    let in_band = Answer::Error(200, INVALID_PARAMS);
    let arguments_malformed = params
        .get("arguments")
        .is_some_and(|a| !(a.is_null() || a.is_object()));
    // What the request names.
    match route {
        Route::CallTool => {
            let Some(Value::String(name)) = params.get("name") else {
                return p.answer(in_band);
            };
            if !fixture::TOOLS.contains(&name.as_str()) {
                return p.answer(in_band);
            }
            p.tool = Some(name.clone());
            let disagree =
                name == "route" && !param_headers_agree(case, params.get("arguments"), legacy);
            match (arguments_malformed, disagree) {
                (true, true) => {
                    p.answers = vec![in_band, Answer::Error(400, HEADER_MISMATCH)];
                    return p;
                }
                (false, true) => return p.answer(Answer::Error(400, HEADER_MISMATCH)),
                (true, false) => return p.answer(in_band),
                (false, false) => {}
            }
        }
        Route::GetPrompt => {
            let Some(Value::String(name)) = params.get("name") else {
                return p.answer(in_band);
            };
            if !fixture::PROMPTS.iter().any(|(n, _)| *n == name.as_str()) || arguments_malformed {
                return p.answer(in_band);
            }
        }
        Route::ReadResource if !params.get("uri").is_some_and(Value::is_string) => {
            return p.answer(in_band);
        }
        _ => {}
    }
    // What a retry carries, read only by the methods that can ask for one; the others ignore
    // these params as they do any param they do not define.
    let takes_rounds = matches!(
        route,
        Route::CallTool | Route::GetPrompt | Route::ReadResource
    );
    match params.get("inputResponses") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(_) if !takes_rounds => {}
        Some(_) => return p.answer(in_band),
    }
    match params.get("requestState") {
        None | Some(Value::Null) => {}
        Some(_) if !takes_rounds => {}
        Some(Value::String(state)) if state_is_genuine(state, route, params, world) => {}
        Some(_) => return p.answer(in_band),
    }
    p.stream = route == Route::Listen
        || (opted_in
            && matches!(
                route,
                Route::CallTool | Route::GetPrompt | Route::ReadResource
            ));
    let cursor = |valid: Option<&str>| match params.get("cursor") {
        None | Some(Value::Null) => Answer::Result,
        Some(Value::String(cursor)) if Some(cursor.as_str()) == valid => Answer::Result,
        Some(_) => in_band,
    };
    let answer = match route {
        Route::Discover | Route::Empty => Answer::Result,
        Route::Initialize => {
            let requested = params.get("protocolVersion").and_then(Value::as_str);
            p.initialize_version = Some(
                requested
                    .filter(|v| LEGACY_VERSIONS.contains(v))
                    .unwrap_or(LEGACY_VERSIONS[0])
                    .to_owned(),
            );
            Answer::Result
        }
        Route::ListTools => cursor(Some(&world.cursor)),
        Route::ListResources | Route::ListTemplates | Route::ListPrompts => cursor(None),
        Route::CallTool if p.tool.as_deref() == Some("confirm") => {
            let empty_arguments = match params.get("arguments") {
                None | Some(Value::Null) => true,
                Some(arguments) => arguments.as_object().is_some_and(Map::is_empty),
            };
            let answered = params
                .get("inputResponses")
                .and_then(Value::as_object)
                .is_some_and(|r| r.contains_key(fixture::CONFIRM_KEY));
            if !empty_arguments || answered || legacy {
                Answer::Result
            } else if declares_form_elicitation(capabilities) {
                Answer::InputRequired
            } else {
                Answer::Error(400, MISSING_CAPABILITY)
            }
        }
        Route::CallTool => Answer::Result,
        Route::ReadResource => {
            let uri = params["uri"].as_str().unwrap();
            let page = uri.strip_prefix(fixture::TEMPLATE_PREFIX);
            let found = fixture::RESOURCES.contains(&uri)
                || page.is_some_and(|page| !page.is_empty() && !page.contains('/'));
            p.uri = Some(uri.to_owned());
            if found { Answer::Result } else { in_band }
        }
        Route::GetPrompt => {
            let empty = Map::new();
            let arguments = params
                .get("arguments")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            let name = params["name"].as_str().unwrap();
            let (_, required) = fixture::PROMPTS.iter().find(|(n, _)| *n == name).unwrap();
            let complete = required.iter().all(|r| arguments.contains_key(*r))
                && arguments.values().all(Value::is_string);
            if complete { Answer::Result } else { in_band }
        }
        Route::Complete => match predict_completion(params) {
            Some(values) => {
                p.completion = Some(values);
                Answer::Result
            }
            None => in_band,
        },
        Route::Listen => match honoured_filter(params.get("notifications")) {
            Some(honoured) => {
                p.honoured = Some(honoured);
                Answer::Ack
            }
            None => in_band,
        },
    };
    p.answer(answer)
}

/// The values a completion returns, or `None` when the request is invalid.
fn predict_completion(params: &Map<String, Value>) -> Option<Vec<String>> {
    let reference = params.get("ref")?.as_object()?;
    let target = match reference.get("type")?.as_str()? {
        "ref/prompt" => {
            let name = reference.get("name")?.as_str()?;
            fixture::PROMPTS.iter().find(|(n, _)| *n == name)?;
            ("prompt", name)
        }
        "ref/resource" => ("template", reference.get("uri")?.as_str()?),
        _ => return None,
    };
    let argument = params.get("argument")?.as_object()?;
    let name = argument.get("name")?.as_str()?;
    let value = argument.get("value")?.as_str()?;
    let candidates: &[&str] = match (target, name) {
        (("prompt", "greet"), "name") => &["alice", "albert", "bob"],
        (("template", fixture::TEMPLATE), "page") => &["intro", "install"],
        _ => &[],
    };
    Some(
        candidates
            .iter()
            .filter(|c| c.starts_with(value))
            .map(|c| (*c).to_owned())
            .collect(),
    )
}

/// The filter a subscription acknowledges, or `None` when it is malformed.
fn honoured_filter(requested: Option<&Value>) -> Option<Value> {
    let requested = requested?.as_object()?;
    let mut honoured = Map::new();
    for key in [
        "toolsListChanged",
        "promptsListChanged",
        "resourcesListChanged",
    ] {
        match requested.get(key) {
            None | Some(Value::Null | Value::Bool(false)) => {}
            Some(Value::Bool(true)) => {
                honoured.insert(key.to_owned(), json!(true));
            }
            Some(_) => return None,
        }
    }
    match requested.get("resourceSubscriptions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(uris)) => {
            if !uris.iter().all(Value::is_string) {
                return None;
            }
            if !uris.is_empty() {
                honoured.insert("resourceSubscriptions".to_owned(), json!(uris));
            }
        }
        Some(_) => return None,
    }
    Some(Value::Object(honoured))
}

// ---------------------------------------------------------------------------------------------
// Sending
// ---------------------------------------------------------------------------------------------

enum Body {
    Bytes(Vec<u8>),
    /// The events read: up to the response, or only the first when it opens a subscription.
    Events(Vec<Value>),
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Bytes(bytes) => write!(f, "{}", String::from_utf8_lossy(bytes)),
            Body::Events(events) => f
                .debug_list()
                .entries(events.iter().map(|e| e.to_string()))
                .finish(),
        }
    }
}

#[derive(Debug)]
struct Received {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Body,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Reads the server-sent events of a live response.
struct EventStream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl EventStream {
    /// The next JSON-RPC message, `None` once the stream ends.
    async fn next(&mut self) -> Result<Option<Value>, String> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let event =
                    String::from_utf8(event).map_err(|e| format!("event not UTF-8: {e}"))?;
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    continue;
                }
                let message = serde_json::from_str(&data.join("\n"))
                    .map_err(|e| format!("event data not JSON ({e}): {event:?}"))?;
                return Ok(Some(message));
            }
            match within("the next chunk of an event stream", self.response.chunk()).await {
                Ok(Some(chunk)) => self.buffer.extend_from_slice(&chunk),
                Ok(None) if self.buffer.iter().all(u8::is_ascii_whitespace) => return Ok(None),
                Ok(None) => return Err(format!("stream ended mid-event: {:?}", self.buffer)),
                Err(e) => return Err(format!("stream broken: {e}")),
            }
        }
    }
}

fn is_response(message: &Value) -> bool {
    message.get("result").is_some() || message.get("error").is_some()
}

fn is_ack(message: &Value) -> bool {
    message["method"] == "notifications/subscriptions/acknowledged"
}

async fn send(client: &reqwest::Client, url: &str, case: &Case) -> Result<Received, String> {
    let method = reqwest::Method::from_bytes(case.http_method.as_bytes()).unwrap();
    let mut request = client.request(method, url);
    for (name, value) in &case.headers {
        let value = reqwest::header::HeaderValue::from_bytes(value).unwrap();
        request = request.header(name.as_str(), value);
    }
    let response = within("the answer's head", request.body(case.body.clone()).send())
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let streaming = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let body = if streaming {
        let mut stream = EventStream {
            response,
            buffer: Vec::new(),
        };
        let mut events = Vec::new();
        // A subscription stays open after its acknowledgement; anything else ends with its
        // response.
        while let Some(message) = stream.next().await? {
            let last = is_response(&message) || is_ack(&message);
            events.push(message);
            if last {
                break;
            }
        }
        Body::Events(events)
    } else {
        let bytes = within("the answer's body", response.bytes())
            .await
            .map_err(|e| format!("body broken: {e}"))?;
        Body::Bytes(bytes.to_vec())
    };
    Ok(Received {
        status,
        headers,
        body,
    })
}

// ---------------------------------------------------------------------------------------------
// The oracle
// ---------------------------------------------------------------------------------------------

/// Validators of the official schema's definitions, compiled once.
fn definition(name: &'static str) -> &'static jsonschema::Validator {
    static VALIDATORS: OnceLock<Mutex<HashMap<&'static str, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let mut validators = VALIDATORS.get_or_init(Default::default).lock().unwrap();
    validators
        .entry(name)
        .or_insert_with(|| Box::leak(Box::new(official(name))))
}

/// A JSON-RPC 2.0 response, for the legacy era whose results this schema does not describe.
fn legacy_response() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        compile(&json!({
            "type": "object",
            "properties": {
                "jsonrpc": { "const": "2.0" },
                "id": { "type": ["string", "integer"] },
                "result": { "type": "object" },
                "error": { "type": "object", "required": ["code", "message"], "properties": {
                    "code": { "type": "integer" }, "message": { "type": "string" } } }
            },
            "required": ["jsonrpc"],
            "oneOf": [{ "required": ["result", "id"] }, { "required": ["error"] }]
        }))
    })
}

fn result_definition(method: &str) -> Option<&'static str> {
    Some(match method {
        "server/discover" => "DiscoverResultResponse",
        "tools/list" => "ListToolsResultResponse",
        "tools/call" => "CallToolResultResponse",
        "resources/list" => "ListResourcesResultResponse",
        "resources/templates/list" => "ListResourceTemplatesResultResponse",
        "resources/read" => "ReadResourceResultResponse",
        "prompts/list" => "ListPromptsResultResponse",
        "prompts/get" => "GetPromptResultResponse",
        "completion/complete" => "CompleteResultResponse",
        "subscriptions/listen" => "SubscriptionsListenResultResponse",
        _ => return None,
    })
}

/// Whether the README's table allows this answer at all, whatever the request was.
fn table_allows(answer: Answer, case: &Case) -> bool {
    match answer {
        Answer::Error(400, code) => [
            PARSE_ERROR,
            INVALID_REQUEST,
            INVALID_PARAMS,
            HEADER_MISMATCH,
            MISSING_CAPABILITY,
            UNSUPPORTED_VERSION,
        ]
        .contains(&code),
        Answer::Error(404, code) => code == METHOD_NOT_FOUND,
        Answer::Error(403 | 405 | 413 | 415, code) => code == INVALID_REQUEST,
        // In-band errors: the codes the table pins to a 4xx never travel with 200.
        Answer::Error(200, code) => ![
            PARSE_ERROR,
            INVALID_REQUEST,
            METHOD_NOT_FOUND,
            HEADER_MISMATCH,
            MISSING_CAPABILITY,
            UNSUPPORTED_VERSION,
        ]
        .contains(&code),
        Answer::Error(..) => false,
        Answer::Accepted => serde_json::from_slice::<Value>(&case.body)
            .is_ok_and(|m| m.is_object() && m.get("id").is_none()),
        Answer::Result | Answer::InputRequired | Answer::Ack => true,
        Answer::Bare(status) => status == 405,
    }
}

fn answer_of(message: &Value, status: u16) -> Result<Answer, String> {
    if let Some(error) = message.get("error") {
        let code = error["code"]
            .as_i64()
            .ok_or("an error without an integer code")?;
        return Ok(Answer::Error(status, code));
    }
    let result = message.get("result").ok_or("neither result nor error")?;
    Ok(if result["resultType"] == "input_required" {
        Answer::InputRequired
    } else {
        Answer::Result
    })
}

/// Checks one reply against the prediction; the label it counts under.
fn check(
    case: &Case,
    p: &Prediction,
    reply: &Received,
    outputs: &HashMap<String, jsonschema::Validator>,
) -> Result<String, String> {
    ensure!(reply.status < 500, "a server error");
    ensure!(
        reply.headers.get("mcp-session-id").is_none(),
        "a session id was sent"
    );
    if reply.status == 405 {
        ensure!(
            reply.header("allow") == Some("POST"),
            "405 without Allow: POST"
        );
    }
    let modern = p.era == Era::Modern;
    let (answer, response, streamed) = match &reply.body {
        Body::Bytes(bytes) if case.http_method == "HEAD" || reply.status == 202 => {
            ensure!(bytes.is_empty(), "a body where none belongs");
            let answer = if reply.status == 202 {
                Answer::Accepted
            } else {
                Answer::Bare(reply.status)
            };
            (answer, None, false)
        }
        Body::Bytes(bytes) => {
            ensure!(
                reply
                    .header("content-type")
                    .is_some_and(|t| t.starts_with("application/json")),
                "content type {:?}",
                reply.header("content-type")
            );
            let message: Value = serde_json::from_slice(bytes)
                .map_err(|e| format!("body not JSON ({e}): {}", String::from_utf8_lossy(bytes)))?;
            (answer_of(&message, reply.status)?, Some(message), false)
        }
        Body::Events(events) => {
            ensure!(reply.status == 200, "a stream with status {}", reply.status);
            ensure!(
                reply.header("x-accel-buffering") == Some("no"),
                "a stream without X-Accel-Buffering: no"
            );
            let (last, notifications) = events.split_last().ok_or("a stream without events")?;
            for notification in notifications {
                check_notification(notification, p)?;
            }
            let answer = if is_ack(last) {
                ensure!(
                    notifications.is_empty(),
                    "events before the acknowledgement"
                );
                Answer::Ack
            } else {
                ensure!(is_response(last), "the stream ended without a response");
                answer_of(last, 200)?
            };
            (answer, Some(last.clone()), true)
        }
    };
    // The runtime commits to an event stream before the tool runs, so on a request that opted in
    // to one, a tool asking for input the client cannot give ends the stream with -32021 under
    // 200, where the table asks for 400. Tolerated here and counted apart, so the distribution
    // shows it; the id and schema are still checked.
    let capability_in_stream = streamed
        && answer == Answer::Error(200, MISSING_CAPABILITY)
        && p.answers == [Answer::Error(400, MISSING_CAPABILITY)];
    let answer = if capability_in_stream {
        Answer::Error(400, MISSING_CAPABILITY)
    } else {
        answer
    };
    ensure!(
        table_allows(answer, case),
        "{answer:?} is no row of the protocol table"
    );
    ensure!(
        p.answers.contains(&answer),
        "expected {:?}, got {answer:?}",
        p.answers
    );
    match answer {
        Answer::Result | Answer::InputRequired | Answer::Ack => ensure!(
            streamed == p.stream,
            "streamed: {streamed}, but the request {} for a stream",
            if p.stream { "asked" } else { "did not ask" }
        ),
        Answer::Error(status, _) => ensure!(
            status == 200 || !streamed || capability_in_stream,
            "a {status} error inside a stream"
        ),
        Answer::Accepted | Answer::Bare(_) => {}
    }
    let Some(message) = response else {
        return Ok(label(answer, None));
    };
    if answer == Answer::Ack {
        conforms(
            definition("SubscriptionsAcknowledgedNotification"),
            "SubscriptionsAcknowledgedNotification",
            &message,
        )?;
        let subscription = &message["params"]["_meta"][SUBSCRIPTION_ID_KEY];
        ensure!(
            Some(subscription) == p.id.as_ref(),
            "subscription id {subscription} for request id {:?}",
            p.id
        );
        ensure!(
            Some(&message["params"]["notifications"]) == p.honoured.as_ref(),
            "acknowledged {}, expected {:?}",
            message["params"]["notifications"],
            p.honoured
        );
        return Ok(label(answer, None));
    }
    ensure!(
        message.get("id") == p.id.as_ref(),
        "id {:?} answered with id {:?}",
        p.id,
        message.get("id")
    );
    if message.get("error").is_some() {
        conforms(
            definition("JSONRPCErrorResponse"),
            "JSONRPCErrorResponse",
            &message,
        )?;
        check_error_data(&message["error"], p)?;
        if capability_in_stream {
            return Ok(format!("{MISSING_CAPABILITY} (in a 200 stream)"));
        }
        return Ok(label(answer, None));
    }
    let method = p.method.as_deref().unwrap_or_default();
    if modern {
        let name = result_definition(method).ok_or("a result for a method without one")?;
        conforms(definition(name), name, &message)?;
    } else {
        conforms(legacy_response(), "a JSON-RPC response", &message)?;
    }
    let result = &message["result"];
    let schema = p.tool.as_deref().and_then(|tool| outputs.get(tool));
    if let (Some(schema), Some(structured)) = (schema, result.get("structuredContent")) {
        conforms(schema, "the tool's output schema", structured)?;
    }
    if let Some(values) = &p.completion {
        ensure!(
            result["completion"]["values"] == json!(values),
            "completion {}, expected {values:?}",
            result["completion"]
        );
    }
    if let Some(uri) = &p.uri {
        ensure!(
            result["contents"][0]["uri"] == json!(uri),
            "read {} for {uri}",
            result["contents"]
        );
    }
    if let Some(version) = &p.initialize_version {
        ensure!(
            result["protocolVersion"] == json!(version),
            "initialize answered {}, expected {version}",
            result["protocolVersion"]
        );
    }
    Ok(label(answer, Some(result)))
}

/// The `data` the table and the README give some errors.
fn check_error_data(error: &Value, p: &Prediction) -> Result<(), String> {
    let data = &error["data"];
    match error["code"].as_i64() {
        Some(UNSUPPORTED_VERSION) => {
            ensure!(
                data["supported"]
                    == json!([
                        VERSION,
                        LEGACY_VERSIONS[0],
                        LEGACY_VERSIONS[1],
                        LEGACY_VERSIONS[2]
                    ])
                    && Some(&data["requested"]) == p.requested.as_ref().map(|v| json!(v)).as_ref(),
                "-32022 with data {data}, the request asked for {:?}",
                p.requested
            );
        }
        Some(MISSING_CAPABILITY) => ensure!(
            data["requiredCapabilities"]["elicitation"].is_object(),
            "-32021 with data {data}"
        ),
        // Only a read of an unknown URI gets this far with one.
        Some(INVALID_PARAMS) if p.uri.is_some() => ensure!(
            data["uri"] == json!(p.uri),
            "resource not found with data {data}, expected the URI {:?}",
            p.uri
        ),
        _ => {}
    }
    Ok(())
}

fn check_notification(notification: &Value, p: &Prediction) -> Result<(), String> {
    ensure!(
        notification.get("id").is_none() && notification["method"].is_string(),
        "a request or response before the end of a stream: {notification}"
    );
    if p.era == Era::Modern {
        conforms(
            definition("ServerNotification"),
            "ServerNotification",
            notification,
        )?;
    } else {
        conforms(
            definition("JSONRPCNotification"),
            "JSONRPCNotification",
            notification,
        )?;
    }
    if notification["method"] == "notifications/progress" {
        let token = &notification["params"]["progressToken"];
        ensure!(
            Some(token) == p.progress_token.as_ref(),
            "progress for token {token}, the request's is {:?}",
            p.progress_token
        );
    }
    Ok(())
}

fn label(answer: Answer, result: Option<&Value>) -> String {
    match answer {
        Answer::Error(_, code) => code.to_string(),
        Answer::Accepted => "accepted".into(),
        Answer::Bare(_) => "no body".into(),
        Answer::Ack => "acknowledged".into(),
        Answer::InputRequired => "input_required".into(),
        Answer::Result if result.is_some_and(|r| r["isError"] == true) => "isError".into(),
        Answer::Result => "result".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// The runs
// ---------------------------------------------------------------------------------------------

/// Learns what only the server can issue, and the tools' output schemas.
async fn setup(url: &str) -> (World, HashMap<String, jsonschema::Validator>) {
    let mut outputs = HashMap::new();
    let mut names = Vec::new();
    let mut cursor = None;
    let mut page = Call::new("tools/list", json!(1), json!({}))
        .send_to(url)
        .await
        .result();
    loop {
        for tool in page["tools"].as_array().unwrap() {
            names.push(tool["name"].as_str().unwrap().to_owned());
            if let Some(schema) = tool.get("outputSchema") {
                outputs.insert(tool["name"].as_str().unwrap().to_owned(), compile(schema));
            }
        }
        let Some(next) = page["nextCursor"].as_str().map(str::to_owned) else {
            break;
        };
        cursor.get_or_insert_with(|| next.clone());
        page = Call::new("tools/list", json!(1), json!({ "cursor": next }))
            .send_to(url)
            .await
            .result();
    }
    assert_eq!(names, fixture::TOOLS, "the model knows the fixture's tools");
    assert!(
        outputs.contains_key("math/divide") && outputs.contains_key("basket_get"),
        "structured tools publish output schemas"
    );
    let asked = Call::call_tool("confirm", json!({}))
        .capabilities(json!({ "elicitation": {} }))
        .send_to(url)
        .await
        .result();
    let created = Call::call_tool(
        "basket_create",
        json!({ "operation_id": "setup-0000000000000000" }),
    )
    .send_to(url)
    .await
    .result();
    let world = World {
        cursor: cursor.expect("tools/list has a second page"),
        request_state: asked["requestState"].as_str().unwrap().to_owned(),
        basket: created["structuredContent"]["handle"]
            .as_str()
            .unwrap()
            .to_owned(),
    };
    (world, outputs)
}

/// Outcomes counted by era, method, status and label.
#[derive(Default)]
struct Stats {
    counts: BTreeMap<(&'static str, String, u16, String), usize>,
}

impl Stats {
    fn record(&mut self, p: &Prediction, status: u16, label: String) {
        let era = match p.era {
            Era::Undecided => "-",
            Era::Modern => "2026-07-28",
            Era::Legacy => "legacy",
        };
        let known = |m: &str| {
            METHODS.contains(&m) || REMOVED.contains(&m) || UNKNOWN.contains(&m) || m == "tasks/get"
        };
        let method = match p.method.as_deref() {
            None => "(not read)".to_owned(),
            Some(m) if known(m) => format!("{m:?}"),
            Some(_) => "(other)".to_owned(),
        };
        let label = match p.note {
            Some(note) => format!("{label} ({note})"),
            None => label,
        };
        *self.counts.entry((era, method, status, label)).or_default() += 1;
    }

    fn count(&self, keep: impl Fn(&str, &str, u16, &str) -> bool) -> usize {
        self.counts
            .iter()
            .filter(|((era, method, status, label), _)| keep(era, method, *status, label))
            .map(|(_, n)| n)
            .sum()
    }

    fn print(&self) {
        let total = self.count(|_, _, _, _| true);
        println!("{total} requests: era, method, status, outcome");
        for ((era, method, status, label), n) in &self.counts {
            println!("  {era:<11} {method:<36} {status:>3} {label:<30} {n:>6}");
        }
    }
}

fn success(label: &str) -> bool {
    matches!(
        label,
        "result" | "isError" | "input_required" | "acknowledged"
    )
}

#[test]
fn every_mutated_request_gets_the_answer_the_protocol_table_predicts() {
    let runtime = fuzz_runtime();
    let server = runtime.block_on(within(
        "the fixture server to start",
        TestServer::start(fixture::server()),
    ));
    let url = server.url();
    let (world, outputs) = runtime.block_on(setup(&url));
    let client = common::client();
    let stats = Mutex::new(Stats::default());
    let cases = fuzz_cases("MCP_FUZZ_CASES", DEFAULT_CASES);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let outcome = runner.run(&case(&world), |case| {
        let prediction = predict(&case, &world);
        let reply = runtime
            .block_on(send(&client, &url, &case))
            .map_err(TestCaseError::fail)?;
        let label = check(&case, &prediction, &reply, &outputs).map_err(|e| {
            TestCaseError::fail(format!("{e}\npredicted: {prediction:?}\nreply: {reply:?}"))
        })?;
        stats
            .lock()
            .unwrap()
            .record(&prediction, reply.status, label);
        Ok(())
    });
    let stats = stats.into_inner().unwrap();
    stats.print();
    println!("{cases} cases in {:.1?}", started.elapsed());
    if let Err(failure) = outcome {
        panic!("{failure}");
    }

    let total = stats.count(|_, _, _, _| true);
    let served = stats.count(|_, _, status, label| status == 200 && success(label));
    assert!(
        served * 4 >= total,
        "only {served} of {total} requests were served: the generator rarely gets past the checks"
    );
    for method in METHODS {
        let quoted = format!("{method:?}");
        assert!(
            stats.count(|era, m, _, label| era == "2026-07-28" && m == quoted && success(label))
                > 0,
            "no {method} was served"
        );
    }
    for label in ["result", "isError", "input_required"] {
        assert!(
            stats.count(|_, m, _, l| m == "\"tools/call\"" && l == label) > 0,
            "no tools/call answered {label}"
        );
    }
    for method in ["initialize", "tools/call", "ping"] {
        let quoted = format!("{method:?}");
        assert!(
            stats.count(|era, m, _, label| era == "legacy" && m == quoted && success(label)) > 0,
            "no legacy-era {method} was served"
        );
    }
    for (status, code) in [
        (400, PARSE_ERROR),
        (400, INVALID_REQUEST),
        (400, INVALID_PARAMS),
        (400, HEADER_MISMATCH),
        (400, MISSING_CAPABILITY),
        (400, UNSUPPORTED_VERSION),
        (404, METHOD_NOT_FOUND),
        (403, INVALID_REQUEST),
        (405, INVALID_REQUEST),
        (413, INVALID_REQUEST),
        (415, INVALID_REQUEST),
        (200, INVALID_PARAMS),
    ] {
        let code = code.to_string();
        assert!(
            stats.count(|_, _, s, label| s == status && label == code) > 0,
            "no request got {status} with {code}"
        );
    }
    assert!(
        stats.count(|_, _, s, _| s == 202) > 0,
        "no notification was accepted"
    );

    // The server still serves.
    runtime.block_on(async {
        let discover = Call::discover().send_to(&url).await;
        assert_eq!(discover.status, 200, "{}", discover.text);
        common::assert_conforms("DiscoverResultResponse", &discover.json());
        let echo = Call::call_tool("echo", json!({ "text": "still here" }))
            .send_to(&url)
            .await;
        assert_eq!(echo.status, 200, "{}", echo.text);
        common::assert_conforms("CallToolResultResponse", &echo.json());
        assert_eq!(echo.result()["content"][0]["text"], "still here");
    });
}

// ---------------------------------------------------------------------------------------------
// Whole subscriptions
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Change {
    Tools,
    Prompts,
    Resources,
    Updated(&'static str),
}

/// The notification a subscription with `filter` gets for `change`: method and URI.
fn relayed(filter: &Value, change: &Change) -> Option<(&'static str, Option<&'static str>)> {
    let asked = |key: &str| filter[key] == true;
    match change {
        Change::Tools if asked("toolsListChanged") => {
            Some(("notifications/tools/list_changed", None))
        }
        Change::Prompts if asked("promptsListChanged") => {
            Some(("notifications/prompts/list_changed", None))
        }
        Change::Resources if asked("resourcesListChanged") => {
            Some(("notifications/resources/list_changed", None))
        }
        Change::Updated(uri) => {
            let subscribed = filter["resourceSubscriptions"].as_array()?;
            subscribed
                .iter()
                .filter_map(Value::as_str)
                .any(|s| {
                    *uri == s
                        || uri
                            .strip_prefix(s)
                            .is_some_and(|rest| rest.starts_with('/'))
                })
                .then_some(("notifications/resources/updated", Some(*uri)))
        }
        _ => None,
    }
}

async fn follow_subscription(filter: Value, id: Value, changes: Vec<Change>) -> Result<(), String> {
    let server = fixture::server();
    let handle = server.clone();
    let live = within("the fixture server to start", TestServer::start(server)).await;
    let call = Call::new(
        "subscriptions/listen",
        id.clone(),
        json!({ "notifications": filter }),
    );
    let mut request = common::client().post(live.url());
    for (name, value) in &call.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let response = within("the subscription's head", request.json(&call.body).send())
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    ensure!(response.status() == 200, "status {}", response.status());
    let mut stream = EventStream {
        response,
        buffer: Vec::new(),
    };
    let subscription_of = |message: &Value| message["params"]["_meta"][SUBSCRIPTION_ID_KEY].clone();

    let ack = stream.next().await?.ok_or("no acknowledgement")?;
    conforms(
        definition("SubscriptionsAcknowledgedNotification"),
        "SubscriptionsAcknowledgedNotification",
        &ack,
    )?;
    ensure!(subscription_of(&ack) == id, "acknowledged as {ack}");
    let honoured = honoured_filter(Some(&filter)).unwrap();
    ensure!(
        ack["params"]["notifications"] == honoured,
        "acknowledged {}, expected {honoured}",
        ack["params"]["notifications"]
    );

    for change in &changes {
        match change {
            Change::Tools => handle.notify_tools_changed(),
            Change::Prompts => handle.notify_prompts_changed(),
            Change::Resources => handle.notify_resources_changed(),
            Change::Updated(uri) => handle.notify_resource_updated(uri),
        }
        // Only what the filter asked for is awaited: anything else the server sent would come
        // before it, or before the final result.
        if let Some((method, uri)) = relayed(&filter, change) {
            let notification = stream
                .next()
                .await?
                .ok_or(format!("the stream ended before {method}"))?;
            conforms(
                definition("ServerNotification"),
                "ServerNotification",
                &notification,
            )?;
            ensure!(
                notification["method"] == method,
                "expected {method} for {change:?}, got {notification}"
            );
            ensure!(
                uri.is_none_or(|uri| notification["params"]["uri"] == uri),
                "{notification} for {change:?}"
            );
            ensure!(
                subscription_of(&notification) == id,
                "{notification} on subscription {id}"
            );
        }
    }

    handle.close_subscriptions();
    let last = stream
        .next()
        .await?
        .ok_or("the stream ended without its result")?;
    ensure!(
        !last["method"].is_string(),
        "a notification the filter did not ask for: {last}"
    );
    conforms(
        definition("SubscriptionsListenResultResponse"),
        "SubscriptionsListenResultResponse",
        &last,
    )?;
    ensure!(last["id"] == id, "result {last} for request id {id}");
    ensure!(
        last["result"]["_meta"][SUBSCRIPTION_ID_KEY] == id,
        "result {last} for subscription {id}"
    );
    ensure!(
        stream.next().await?.is_none(),
        "events after the final result"
    );
    Ok(())
}

#[test]
fn a_subscription_relays_only_what_its_filter_asks_for_and_ends_with_its_result() {
    let runtime = fuzz_runtime();
    let change = prop_oneof![
        Just(Change::Tools),
        Just(Change::Prompts),
        Just(Change::Resources),
        select(vec![
            "docs://readme",
            "docs://readme/part",
            "docs://readmex",
            "docs://logo",
            "docs://pages/intro",
        ])
        .prop_map(Change::Updated),
    ];
    let id = prop_oneof![
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,8}".prop_map(|s| json!(s)),
    ];
    let strategy = (listen_filter(), id, prop::collection::vec(change, 0..6));
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(filter, id, changes)| {
            runtime
                .block_on(within_for(
                    Duration::from_secs(60),
                    "one subscription, start to end",
                    follow_subscription(filter, id, changes),
                ))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}
