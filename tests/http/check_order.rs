//! The order in which a request is checked. The README's "Protocol behaviour" table says the
//! first failing check answers; here every pair of checks is put in one request, and the request
//! must get the answer of the check that comes first.

use crate::common;

use common::{Call, Reply, TestServer, assert_conforms};
use mcp_tools::auth::{Principal, Unauthorized};
use mcp_tools::tools::{InputRequired, Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, McpServer};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

const BODY_LIMIT: usize = 8 * 1024;

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)] // Decoded only to be validated.
struct AskArgs {
    /// Where the question goes; mirrored in a header.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
    /// How many answers.
    n: u32,
}

/// Asks the user a question, so a call needs the elicitation capability.
struct Ask;

impl Tool for Ask {
    type Args = AskArgs;
    type Output = InputRequired;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("ask", "Asks the user.")
    }
    async fn call(&self, _: AskArgs, _cx: Context) -> InputRequired {
        InputRequired::new().elicit(
            "answer",
            "Well?",
            json!({ "type": "object", "properties": { "ok": { "type": "boolean" } } }),
        )
    }
}

fn server() -> McpServer {
    McpServer::builder("order", "1")
        .tools(ToolSet::new().with(Ask))
        .body_limit(BODY_LIMIT)
        .authenticate(
            |headers| match headers.get("authorization").map(|v| v.as_bytes()) {
                Some(b"Bearer ok") => Ok(Principal::subject("someone")),
                _ => Err(Unauthorized::new("Bearer", "A bearer token is required")),
            },
        )
        .build()
        .unwrap()
}

/// A request with none of the defects: it reaches the tool, which asks for input.
fn valid() -> Call {
    Call::call_tool("ask", json!({ "region": "eu", "n": 1 }))
        .capabilities(json!({ "elicitation": {} }))
        .header("mcp-param-region", "eu")
        .header("authorization", "Bearer ok")
}

/// What a check answers when it fails.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// An HTTP status with a JSON-RPC error code, and a fragment its message contains.
    Error(u16, i64, &'static str),
    /// `202 Accepted` with no body.
    Accepted,
    /// A tool result with `isError` and this code.
    ToolError(&'static str),
}

struct Check {
    label: &'static str,
    answer: Answer,
    /// Adds the defect. Defects are added from the last check to the first, so an earlier
    /// check's edit wins where two touch the same field (a later one edits the JSON body, an
    /// earlier one may replace the raw bytes or pad them).
    defect: fn(Call) -> Call,
}

/// The checks, in the order the README's table gives them.
fn checks() -> Vec<Check> {
    vec![
        Check {
            label: "not POST",
            answer: Answer::Error(405, -32600, "POST"),
            defect: |c| c.http_method(reqwest::Method::PUT),
        },
        Check {
            label: "Host not allowed",
            answer: Answer::Error(403, -32600, "evil.example.com"),
            defect: |c| c.header("host", "evil.example.com"),
        },
        Check {
            label: "authentication refused",
            answer: Answer::Error(401, -32600, "bearer token"),
            defect: |c| c.without_header("authorization"),
        },
        Check {
            label: "Content-Type not JSON",
            answer: Answer::Error(415, -32600, "Content-Type"),
            defect: |c| c.header("content-type", "text/plain"),
        },
        Check {
            label: "body over the limit",
            answer: Answer::Error(413, -32600, "limit"),
            defect: |c| {
                let mut bytes = c
                    .raw_body
                    .clone()
                    .unwrap_or_else(|| serde_json::to_vec(&c.body).unwrap());
                bytes.resize(BODY_LIMIT + 1, b' ');
                c.raw(bytes)
            },
        },
        Check {
            label: "not JSON",
            answer: Answer::Error(400, -32700, "JSON"),
            defect: |c| c.raw("{\"jsonrpc\": \"2.0\", "),
        },
        Check {
            label: "a batch",
            answer: Answer::Error(400, -32600, "Batch"),
            defect: |c| {
                let batch = format!("[{}]", c.body);
                c.raw(batch)
            },
        },
        Check {
            label: "a notification",
            answer: Answer::Accepted,
            defect: |c| {
                c.body(|b| {
                    b.as_object_mut().unwrap().remove("id");
                })
            },
        },
        Check {
            label: "_meta without protocolVersion",
            answer: Answer::Error(400, -32602, "protocolVersion"),
            defect: |c| c.without_meta("io.modelcontextprotocol/protocolVersion"),
        },
        Check {
            label: "MCP-Protocol-Version not the body's",
            answer: Answer::Error(400, -32020, "MCP-Protocol-Version"),
            defect: |c| c.header("mcp-protocol-version", "2099-01-01"),
        },
        Check {
            label: "version not served",
            answer: Answer::Error(400, -32022, "2098-01-01"),
            defect: |c| {
                c.header("mcp-protocol-version", "2098-01-01").meta(
                    "io.modelcontextprotocol/protocolVersion",
                    json!("2098-01-01"),
                )
            },
        },
        Check {
            label: "Mcp-Method not the body's",
            answer: Answer::Error(400, -32020, "Mcp-Method"),
            defect: |c| c.header("mcp-method", "tools/list"),
        },
        Check {
            label: "Mcp-Name not the body's",
            answer: Answer::Error(400, -32020, "Mcp-Name"),
            defect: |c| c.header("mcp-name", "other"),
        },
        Check {
            label: "method behind a capability not advertised",
            answer: Answer::Error(404, -32601, "prompts/get"),
            defect: |c| {
                c.header("mcp-method", "prompts/get")
                    .body(|b| b["method"] = json!("prompts/get"))
            },
        },
        Check {
            label: "Mcp-Param-Region not the argument's",
            answer: Answer::Error(400, -32020, "Mcp-Param-Region"),
            defect: |c| c.header("mcp-param-region", "us"),
        },
        Check {
            label: "unknown tool",
            answer: Answer::Error(200, -32602, "Unknown tool"),
            defect: |c| {
                c.header("mcp-name", "nope")
                    .body(|b| b["params"]["name"] = json!("nope"))
            },
        },
        Check {
            label: "requestState not issued by this server",
            answer: Answer::Error(200, -32602, "requestState"),
            defect: |c| c.body(|b| b["params"]["requestState"] = json!("bm90IGEgc3RhdGU")),
        },
        Check {
            label: "invalid arguments",
            answer: Answer::ToolError("INVALID_ARGUMENTS"),
            defect: |c| c.body(|b| b["params"]["arguments"]["n"] = json!("many")),
        },
        Check {
            label: "input asked for without the client capability",
            answer: Answer::Error(400, -32021, "capabilities"),
            defect: |c| c.capabilities(json!({})),
        },
    ]
}

/// Pairs where the later defect takes away what the earlier check looks at, so there is no
/// order to observe: an unknown tool declares no `Mcp-Param-*` headers.
const UNORDERED: &[(&str, &str)] = &[("Mcp-Param-Region not the argument's", "unknown tool")];

/// What the server answered.
#[derive(Debug)]
enum Observed {
    Error(u16, i64, String),
    Accepted,
    ToolError(String),
}

fn observe(reply: &Reply) -> Observed {
    if reply.status == 202 {
        assert!(reply.text.is_empty(), "202 with a body: {}", reply.text);
        return Observed::Accepted;
    }
    let json = reply.json();
    if let Some(error) = json.get("error") {
        assert_conforms("JSONRPCErrorResponse", &json);
        return Observed::Error(
            reply.status,
            error["code"].as_i64().unwrap(),
            error["message"].as_str().unwrap().to_owned(),
        );
    }
    assert_conforms("JSONRPCResultResponse", &json);
    let result = &json["result"];
    assert_eq!(result["isError"], true, "not a refusal: {json}");
    Observed::ToolError(
        result["structuredContent"]["code"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

fn assert_answer(what: &str, reply: &Reply, expected: Answer) {
    let observed = observe(reply);
    let agrees = match (expected, &observed) {
        (Answer::Error(status, code, fragment), Observed::Error(s, c, message)) => {
            status == *s && code == *c && message.contains(fragment)
        }
        (Answer::Accepted, Observed::Accepted) => true,
        (Answer::ToolError(code), Observed::ToolError(c)) => code == c,
        _ => false,
    };
    assert!(
        agrees,
        "{what}: expected {expected:?}, got {observed:?}\n{}",
        reply.text
    );
}

#[tokio::test]
async fn a_request_without_defects_reaches_the_tool() {
    let server = TestServer::start(server()).await;
    let reply = valid().send(&server).await;
    let json = reply.json();
    assert_conforms("JSONRPCResultResponse", &json);
    assert_eq!(json["result"]["resultType"], "input_required", "{json}");
}

#[tokio::test]
async fn each_check_alone_gives_its_answer() {
    let server = TestServer::start(server()).await;
    for check in checks() {
        let reply = (check.defect)(valid()).send(&server).await;
        assert_answer(check.label, &reply, check.answer);
    }
}

#[tokio::test]
async fn of_two_failing_checks_the_earlier_one_answers() {
    let server = TestServer::start(server()).await;
    let checks = checks();
    let mut pairs = 0;
    for (i, first) in checks.iter().enumerate() {
        for second in &checks[i + 1..] {
            if UNORDERED.contains(&(first.label, second.label)) {
                continue;
            }
            let call = (first.defect)((second.defect)(valid()));
            let reply = call.send(&server).await;
            assert_answer(
                &format!("{} + {}", first.label, second.label),
                &reply,
                first.answer,
            );
            pairs += 1;
        }
    }
    assert_eq!(
        pairs,
        checks.len() * (checks.len() - 1) / 2 - UNORDERED.len()
    );
}

/// A `requestState` is only opened for a target that exists; the same holds for prompts.
#[tokio::test]
async fn an_unknown_prompt_is_answered_before_its_request_state_is_opened() {
    let server = McpServer::builder("order", "1")
        .prompts(
            mcp_tools::prompts::PromptSet::new().with(mcp_tools::prompts::Prompt::new(
                "greet",
                "Greets.",
                |_, _| async {
                    Ok::<_, mcp_tools::protocol::RpcError>(
                        Vec::<mcp_tools::prompts::PromptMessage>::new(),
                    )
                },
            )),
        )
        .build()
        .unwrap();
    let server = TestServer::start(server).await;
    let reply = Call::new(
        "prompts/get",
        json!(3),
        json!({ "name": "nope", "requestState": "bm90IGEgc3RhdGU" }),
    )
    .send(&server)
    .await;
    assert_answer(
        "unknown prompt + foreign requestState",
        &reply,
        Answer::Error(200, -32602, "Unknown prompt"),
    );
    let value: Value = reply.json();
    assert_eq!(value["id"], 3);
}
