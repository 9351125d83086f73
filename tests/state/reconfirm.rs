//! Reconfirmation that binds, over real HTTP on the basket example, on both stores: a checkout
//! (`on_conflict = reconfirm`) planned on an old version asks whoever decided it to confirm the
//! change against the current state (an elicitation when the client declared one, a sealed
//! `confirmation` otherwise), and the change applies only against the exact version confirmed.
//! Every response is checked against the official schema, and every result against the tool's
//! own output schema.

use crate::basket_client;
use crate::common;
use crate::on_every_store;

use mcp_tools::protocol::framework::{CONFIRMATION_META_KEY, RECONFIRM_INPUT_KEY};
use mcp_tools::store::Store;
use serde_json::{Value, json};

use basket_client::{Agent, operation_id, outcome, server};
use common::{Call, TestServer, assert_conforms, check, compile};

/// A client that declares form elicitation, speaking to `url`.
struct Eliciting<'a> {
    url: &'a str,
    agent: &'a Agent,
}

/// What a `tools/call` answered: a complete result, or the input it asks for and the state to
/// send back.
enum Answer {
    Complete(Value),
    Asks { requests: Value, state: String },
}

impl Eliciting<'_> {
    async fn send(&self, call: Call) -> Answer {
        println!("-> {}", call.body);
        let reply = call.send_to(self.url).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let json = reply.json();
        println!("<- {json}");
        let result = json["result"].clone();
        if result["resultType"] == "input_required" {
            assert_conforms("JSONRPCResultResponse", &json);
            assert_conforms("InputRequiredResult", &result);
            return Answer::Asks {
                requests: result["inputRequests"].clone(),
                state: result["requestState"].as_str().unwrap().to_owned(),
            };
        }
        assert_conforms("CallToolResultResponse", &json);
        let schema = compile(self.agent.output_schema("basket_checkout"));
        check(
            &schema,
            "the output schema of basket_checkout",
            &result["structuredContent"],
        );
        Answer::Complete(result)
    }

    fn checkout(&self, arguments: &Value) -> Call {
        Call::call_tool("basket_checkout", arguments.clone())
            .capabilities(json!({ "elicitation": { "form": {} } }))
    }

    /// The same call, answering the elicitation and echoing the state.
    fn answering(&self, arguments: &Value, state: &str, answer: Value) -> Call {
        self.checkout(arguments).body(|body| {
            body["params"]["inputResponses"] = json!({ RECONFIRM_INPUT_KEY: answer });
            body["params"]["requestState"] = json!(state);
        })
    }
}

fn accept() -> Value {
    json!({ "action": "accept", "content": { "confirm": true } })
}

async fn upgrade(agent: &Agent, handle: &str, expected: u64, gib: u32) {
    let result = agent
        .call(
            "basket_upgrade_memory",
            json!({
                "basket_id": handle,
                "expected_version": expected,
                "operation_id": operation_id("up"),
                "memory_gib": gib,
            }),
        )
        .await;
    assert_eq!(outcome(&result), "applied", "{result}");
}

fn complete(answer: Answer) -> Value {
    match answer {
        Answer::Complete(result) => result,
        Answer::Asks { requests, .. } => panic!("expected a result, got a request: {requests}"),
    }
}

fn asks(answer: Answer) -> (Value, String) {
    match answer {
        Answer::Asks { requests, state } => (requests, state),
        Answer::Complete(result) => panic!("expected a request for input, got {result}"),
    }
}

/// A basket at version 2 and the arguments of a checkout planned on version 1.
async fn a_checkout_planned_on_version_1(server: &TestServer) -> (Agent, String, Value) {
    let agent = Agent::connect(&server.url(), None).await;
    let handle = agent.create().await;
    upgrade(&agent, &handle, 1, 32).await;
    let arguments = json!({
        "basket_id": handle,
        "expected_version": 1,
        "operation_id": operation_id("checkout"),
    });
    (agent, handle, arguments)
}

async fn the_elicitation_binds_the_confirmed_version(store: impl Store) {
    let server = TestServer::start(server(store)).await;
    let (agent, handle, arguments) = a_checkout_planned_on_version_1(&server).await;
    let url = server.url();
    let client = Eliciting {
        url: &url,
        agent: &agent,
    };

    // Planned on version 1, the basket is at 2: the user is asked, with what changed.
    let (requests, state) = asks(client.send(client.checkout(&arguments)).await);
    let ask = &requests[RECONFIRM_INPUT_KEY];
    assert_eq!(ask["method"], "elicitation/create");
    assert_eq!(ask["params"]["mode"], "form");
    let message = ask["params"]["message"].as_str().unwrap();
    assert!(message.contains("/memory_gib: 16 -> 32"), "{message}");
    assert!(message.contains("now at version 2"), "{message}");
    assert_eq!(
        ask["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );

    // The same call again, unanswered, replays the conflict its operation id recorded: asked
    // again, against the version the basket is at.
    let (requests, _) = asks(client.send(client.checkout(&arguments)).await);
    let message = requests[RECONFIRM_INPUT_KEY]["params"]["message"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("after version 1 that this change was based on"),
        "{message}"
    );
    assert!(message.contains("now at version 2"), "{message}");

    // Someone changes the basket between the prompt and the answer: asked again, at version 3.
    upgrade(&agent, &handle, 2, 64).await;
    let (requests, state) = asks(
        client
            .send(client.answering(&arguments, &state, accept()))
            .await,
    );
    let message = requests[RECONFIRM_INPUT_KEY]["params"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("now at version 3"), "{message}");
    assert!(
        message.contains("after version 2 that you confirmed"),
        "{message}"
    );
    assert!(message.contains("/memory_gib: 32 -> 64"), "{message}");
    assert_eq!(agent.get(&handle).await.0, 3, "nothing was ordered yet");

    // Confirmed at version 3, and still at 3: ordered, exactly what was confirmed.
    let result = complete(
        client
            .send(client.answering(&arguments, &state, accept()))
            .await,
    );
    assert_eq!(outcome(&result), "applied", "{result}");
    let applied = &result["structuredContent"];
    assert_eq!(applied["version"], 4);
    assert!(
        applied["result"]["ordered"]
            .as_str()
            .unwrap()
            .contains("64 GiB memory"),
        "{result}"
    );
    // The same answer again replays the order; it is never placed twice.
    let again = complete(
        client
            .send(client.answering(&arguments, &state, accept()))
            .await,
    );
    assert_eq!(outcome(&again), "replayed", "{again}");
    assert_eq!(agent.get(&handle).await.0, 4);
}

async fn a_declined_confirmation_changes_nothing(store: impl Store) {
    let server = TestServer::start(server(store)).await;
    let (agent, handle, arguments) = a_checkout_planned_on_version_1(&server).await;
    let url = server.url();
    let client = Eliciting {
        url: &url,
        agent: &agent,
    };
    let (_, state) = asks(client.send(client.checkout(&arguments)).await);
    for answer in [
        json!({ "action": "accept", "content": { "confirm": false } }),
        json!({ "action": "decline" }),
        json!({ "action": "cancel" }),
    ] {
        let result = complete(
            client
                .send(client.answering(&arguments, &state, answer.clone()))
                .await,
        );
        assert_eq!(outcome(&result), "rejected", "{answer}: {result}");
        assert_eq!(result["structuredContent"]["code"], "NOT_CONFIRMED");
        assert_eq!(result["structuredContent"]["recovery"], "stop");
    }
    let (version, basket) = agent.get(&handle).await;
    assert_eq!((version, &basket["checked_out"]), (2, &json!(false)));
}

async fn without_elicitation_a_sealed_confirmation_binds(store: impl Store) {
    let server = TestServer::start(server(store)).await;
    let (agent, handle, arguments) = a_checkout_planned_on_version_1(&server).await;
    let stale = agent.call("basket_checkout", arguments.clone()).await;
    assert_eq!(outcome(&stale), "stale_view", "{stale}");
    assert_eq!(stale["structuredContent"]["recovery"], "reconfirm");
    let first = stale["structuredContent"]["confirmation"]
        .as_str()
        .expect("a reconfirm stale_view carries a confirmation")
        .to_owned();

    // Not this request's confirmation: another operation id, or made up.
    let mut other = arguments.clone();
    other["operation_id"] = json!(operation_id("checkout"));
    for (label, call, confirmation) in [
        ("another request's", other, json!(first)),
        ("made up", arguments.clone(), json!("Zm9yZ2Vk")),
        ("not a string", arguments.clone(), json!(2)),
    ] {
        let refused = agent
            .call_with_meta(
                "basket_checkout",
                call,
                &[(CONFIRMATION_META_KEY, confirmation)],
            )
            .await;
        assert_eq!(
            refused["structuredContent"]["code"], "INVALID_CONFIRMATION",
            "{label}: {refused}"
        );
    }

    // The basket moves on before the confirmation comes back: stale again, a new confirmation.
    upgrade(&agent, &handle, 2, 64).await;
    let again = agent
        .call_with_meta(
            "basket_checkout",
            arguments.clone(),
            &[(CONFIRMATION_META_KEY, json!(first))],
        )
        .await;
    assert_eq!(outcome(&again), "stale_view", "{again}");
    assert_eq!(again["structuredContent"]["current_version"], 3);
    let second = again["structuredContent"]["confirmation"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(second, first);
    let applied = agent
        .call_with_meta(
            "basket_checkout",
            arguments.clone(),
            &[(CONFIRMATION_META_KEY, json!(second))],
        )
        .await;
    assert_eq!(outcome(&applied), "applied", "{applied}");
    assert_eq!(applied["structuredContent"]["version"], 4);
    let (_, basket) = agent.get(&handle).await;
    assert_eq!(basket["checked_out"], true);
}

on_every_store!(
    the_elicitation_binds_the_confirmed_version,
    a_declined_confirmation_changes_nothing,
    without_elicitation_a_sealed_confirmation_binds,
);
