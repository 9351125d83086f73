//! Multi-round requests: a tool asks the client for input (elicitation, sampling, roots) by
//! returning [`InputRequired`]; the client retries the same call with the answers and the sealed
//! `requestState`, which any replica can verify.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::RpcError;
use crate::content::CallToolResult;
use crate::output::IntoCallToolResult;

/// A request for client input, returned by a tool instead of a result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputRequired {
    pub(crate) requests: Map<String, Value>,
    pub(crate) state: Option<Value>,
}

impl InputRequired {
    /// No requests yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the user to fill a form (`elicitation/create`, form mode). `schema` is a flat object
    /// schema of primitive properties.
    pub fn elicit(
        mut self,
        key: impl Into<String>,
        message: impl Into<String>,
        schema: Value,
    ) -> Self {
        self.requests.insert(
            key.into(),
            json!({ "method": "elicitation/create", "params": {
                "mode": "form", "message": message.into(), "requestedSchema": schema } }),
        );
        self
    }

    /// Asks the client's model for a completion (`sampling/createMessage`); `params` is a
    /// `CreateMessageRequestParams` object (`messages`, `maxTokens`, ...).
    pub fn sample(mut self, key: impl Into<String>, params: Value) -> Self {
        self.requests.insert(
            key.into(),
            json!({ "method": "sampling/createMessage", "params": params }),
        );
        self
    }

    /// Asks for the client's roots (`roots/list`).
    pub fn list_roots(mut self, key: impl Into<String>) -> Self {
        self.requests
            .insert(key.into(), json!({ "method": "roots/list", "params": {} }));
        self
    }

    /// State to get back on the retry, through [`Context::request_state`](crate::Context::request_state).
    /// It is sealed (HMAC-SHA256, bound to the tool, the caller and the arguments, with an
    /// expiry), so the client can neither read meaning into it nor alter it.
    pub fn state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    /// The client capabilities these requests need and `declared` lacks, as a
    /// `ClientCapabilities` object (empty when nothing is missing). Elicitation modes count:
    /// `elicitation: {}` declares the form mode only.
    pub(crate) fn missing_capabilities(&self, declared: &Map<String, Value>) -> Map<String, Value> {
        let mut missing = Map::new();
        let mut need = |capability: &str, detail: Option<&str>| {
            let entry = missing
                .entry(capability)
                .or_insert_with(|| Value::Object(Map::new()));
            if let (Some(detail), Value::Object(entry)) = (detail, entry) {
                entry.insert(detail.to_owned(), json!({}));
            }
        };
        for request in self.requests.values() {
            let params = &request["params"];
            match request["method"].as_str() {
                Some("elicitation/create") => {
                    let mode = params["mode"].as_str().unwrap_or("form");
                    let served = match declared.get("elicitation") {
                        Some(Value::Object(modes)) if mode == "form" => {
                            modes.is_empty() || modes.contains_key("form")
                        }
                        Some(Value::Object(modes)) => modes.contains_key(mode),
                        _ => false,
                    };
                    if !served {
                        need("elicitation", (mode != "form").then_some(mode));
                    }
                }
                Some("sampling/createMessage") => {
                    let sampling = declared.get("sampling").and_then(Value::as_object);
                    if sampling.is_none() {
                        need("sampling", None);
                    }
                    let uses_tools = params.get("tools").is_some_and(|t| !t.is_null());
                    if uses_tools && !sampling.is_some_and(|s| s.contains_key("tools")) {
                        need("sampling", Some("tools"));
                    }
                }
                Some("roots/list") if !declared.contains_key("roots") => need("roots", None),
                _ => {}
            }
        }
        missing
    }
}

/// What a tool produced: a result, or a request for input.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolReply<T> {
    /// The call is complete.
    Complete(T),
    /// The call needs input from the client first.
    InputRequired(InputRequired),
}

/// The type-erased form the request path handles.
#[doc(hidden)]
pub enum Reply {
    /// A result.
    Complete(CallToolResult),
    /// A request for input.
    InputRequired(InputRequired),
}

impl<T: IntoCallToolResult> IntoCallToolResult for ToolReply<T> {
    fn output_schema(generator: &mut schemars::SchemaGenerator) -> Option<Value> {
        T::output_schema(generator)
    }

    fn into_call_tool_result(self) -> CallToolResult {
        match self.into_reply() {
            Reply::Complete(result) => result,
            Reply::InputRequired(_) => crate::ToolError::new(
                "INPUT_REQUIRED",
                "The tool needs input from the client, which this path cannot ask for",
            )
            .into_result(),
        }
    }

    fn into_reply(self) -> Reply {
        match self {
            ToolReply::Complete(value) => value.into_reply(),
            ToolReply::InputRequired(input) => Reply::InputRequired(input),
        }
    }
}

impl IntoCallToolResult for InputRequired {
    fn into_call_tool_result(self) -> CallToolResult {
        ToolReply::<CallToolResult>::InputRequired(self).into_call_tool_result()
    }

    fn into_reply(self) -> Reply {
        Reply::InputRequired(self)
    }
}

/// How long a sealed request state stays valid.
const STATE_LIFETIME_SECS: u64 = 15 * 60;
const TAG_LEN: usize = 16;

/// Seals and opens `requestState` values.
pub(crate) struct StateSeal<'a> {
    pub(crate) key: &'a [u8],
}

/// What a sealed state is bound to.
pub(crate) struct Binding<'a> {
    pub(crate) target: &'a str,
    pub(crate) principal: &'a str,
    pub(crate) arguments: &'a Value,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn digest(binding: &Binding<'_>) -> String {
    let hash = Sha256::new()
        .chain_update(binding.target.as_bytes())
        .chain_update([0])
        .chain_update(binding.principal.as_bytes())
        .chain_update([0])
        .chain_update(binding.arguments.to_string().as_bytes())
        .finalize();
    URL_SAFE_NO_PAD.encode(&hash[..16])
}

impl StateSeal<'_> {
    fn mac(&self) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(self.key)
            .expect("HMAC accepts keys of any length");
        mac.update(b"mcp-tools/request-state\0");
        mac
    }

    pub(crate) fn seal(&self, binding: &Binding<'_>, state: Option<&Value>) -> String {
        let payload = json!({
            "b": digest(binding),
            "e": now() + STATE_LIFETIME_SECS,
            "s": state,
        })
        .to_string();
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        let tag = mac.finalize().into_bytes();
        let mut bytes = payload.into_bytes();
        bytes.extend_from_slice(&tag[..TAG_LEN]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The state a tool sealed, after checking integrity, binding and expiry.
    pub(crate) fn open(
        &self,
        binding: &Binding<'_>,
        sealed: &str,
    ) -> Result<Option<Value>, RpcError> {
        let invalid = |why: &str| {
            RpcError::invalid_params(format!(
                "Invalid requestState: {why}; retry the original request without requestState"
            ))
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(sealed)
            .map_err(|_| invalid("not issued by this server"))?;
        if bytes.len() <= TAG_LEN {
            return Err(invalid("not issued by this server"));
        }
        let (payload, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        let mut mac = self.mac();
        mac.update(payload);
        mac.verify_truncated_left(tag)
            .map_err(|_| invalid("it was altered or not issued by this server"))?;
        let payload: Value =
            serde_json::from_slice(payload).map_err(|_| invalid("not issued by this server"))?;
        if payload["b"].as_str() != Some(digest(binding).as_str()) {
            return Err(invalid("it belongs to another request"));
        }
        if payload["e"].as_u64().is_none_or(|expiry| expiry < now()) {
            return Err(invalid("it has expired"));
        }
        Ok(match payload.get("s") {
            None | Some(Value::Null) => None,
            Some(state) => Some(state.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_state_opens_only_for_its_binding() {
        let seal = StateSeal { key: b"k" };
        let args = json!({ "x": 1 });
        let binding = Binding {
            target: "tool",
            principal: "",
            arguments: &args,
        };
        let sealed = seal.seal(&binding, Some(&json!({ "round": 2 })));
        assert_eq!(
            seal.open(&binding, &sealed).unwrap(),
            Some(json!({ "round": 2 }))
        );
        let other_args = json!({ "x": 2 });
        let other = Binding {
            target: "tool",
            principal: "",
            arguments: &other_args,
        };
        assert!(seal.open(&other, &sealed).is_err());
        assert!(StateSeal { key: b"other" }.open(&binding, &sealed).is_err());
        let mut tampered = URL_SAFE_NO_PAD.decode(&sealed).unwrap();
        tampered[5] ^= 1;
        assert!(
            seal.open(&binding, &URL_SAFE_NO_PAD.encode(tampered))
                .is_err()
        );
        assert!(seal.open(&binding, "garbage").is_err());
    }

    #[test]
    fn a_sealed_state_expires_fifteen_minutes_after_it_was_sealed() {
        let seal = StateSeal { key: b"k" };
        let args = json!({});
        let binding = Binding {
            target: "tool",
            principal: "",
            arguments: &args,
        };
        // Read from the system clock here, so a `now()` that ignores it cannot pass.
        let wall = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        let before = wall();
        let sealed = URL_SAFE_NO_PAD.decode(seal.seal(&binding, None)).unwrap();
        let after = wall();
        let payload: Value = serde_json::from_slice(&sealed[..sealed.len() - TAG_LEN]).unwrap();
        let expiry = payload["e"].as_u64().unwrap();
        // A client that takes minutes to answer an elicitation must still be able to retry.
        assert!(
            (before + 15 * 60..=after + 15 * 60).contains(&expiry),
            "expiry {expiry} is not 15 minutes after {before}"
        );
    }

    /// Seals `payload` as `seal` would, so a test can choose the expiry.
    fn sealed_with(seal: &StateSeal<'_>, payload: Value) -> String {
        let payload = payload.to_string();
        let mut mac = seal.mac();
        mac.update(payload.as_bytes());
        let mut bytes = payload.into_bytes();
        bytes.extend_from_slice(&mac.finalize().into_bytes()[..TAG_LEN]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn a_sealed_state_opens_through_its_expiry_second_and_not_after() {
        let seal = StateSeal { key: b"k" };
        let args = json!({});
        let binding = Binding {
            target: "tool",
            principal: "",
            arguments: &args,
        };
        let b = digest(&binding);
        let past = sealed_with(&seal, json!({ "b": b, "e": now() - 1, "s": 1 }));
        let error = seal.open(&binding, &past).unwrap_err();
        assert!(error.message().contains("expired"), "{}", error.message());
        // Retried only when the clock ticks between sealing and opening.
        let opened_in_its_second = (0..5).any(|_| {
            let second = now();
            let due = sealed_with(&seal, json!({ "b": b, "e": second, "s": 1 }));
            let opened = seal.open(&binding, &due);
            if now() != second {
                return false;
            }
            assert_eq!(opened.unwrap(), Some(json!(1)));
            true
        });
        assert!(opened_in_its_second, "the clock never held still");
    }

    fn declared(capabilities: Value) -> Map<String, Value> {
        capabilities.as_object().unwrap().clone()
    }

    /// One request the builders do not make (another elicitation mode, raw sampling params).
    fn asking(method: &str, params: Value) -> InputRequired {
        let mut input = InputRequired::new();
        input.requests.insert(
            "q".to_owned(),
            json!({ "method": method, "params": params }),
        );
        input
    }

    #[test]
    fn roots_are_missing_only_when_the_client_did_not_declare_them() {
        let input = InputRequired::new()
            .sample("s", json!({ "messages": [], "maxTokens": 1 }))
            .list_roots("where");
        assert_eq!(
            input.requests["where"],
            json!({ "method": "roots/list", "params": {} })
        );
        assert!(
            input.requests.contains_key("s"),
            "earlier requests are kept"
        );
        let roots = InputRequired::new().list_roots("where");
        assert_eq!(
            roots.missing_capabilities(&declared(json!({}))),
            declared(json!({ "roots": {} }))
        );
        assert!(
            roots
                .missing_capabilities(&declared(json!({ "roots": {} })))
                .is_empty()
        );
    }

    #[test]
    fn an_elicitation_mode_is_served_only_when_the_client_declared_it() {
        let form = InputRequired::new().elicit("f", "Name?", json!({ "type": "object" }));
        // `elicitation: {}` declares the form mode only.
        for serving in [
            json!({ "elicitation": {} }),
            json!({ "elicitation": { "form": {} } }),
        ] {
            assert!(
                form.missing_capabilities(&declared(serving.clone()))
                    .is_empty(),
                "{serving}"
            );
        }
        for lacking in [json!({}), json!({ "elicitation": { "url": {} } })] {
            assert_eq!(
                form.missing_capabilities(&declared(lacking.clone())),
                declared(json!({ "elicitation": {} })),
                "{lacking}"
            );
        }
        let url = asking(
            "elicitation/create",
            json!({ "mode": "url", "message": "Sign in", "url": "https://example.com/", "elicitationId": "e" }),
        );
        assert!(
            url.missing_capabilities(&declared(json!({ "elicitation": { "url": {} } })))
                .is_empty()
        );
        for lacking in [
            json!({}),
            json!({ "elicitation": {} }),
            json!({ "elicitation": { "form": {} } }),
        ] {
            assert_eq!(
                url.missing_capabilities(&declared(lacking.clone())),
                declared(json!({ "elicitation": { "url": {} } })),
                "{lacking}"
            );
        }
    }

    #[test]
    fn sampling_with_tools_needs_the_tools_sub_capability() {
        let plain = asking(
            "sampling/createMessage",
            json!({ "messages": [], "maxTokens": 1 }),
        );
        assert!(
            plain
                .missing_capabilities(&declared(json!({ "sampling": {} })))
                .is_empty()
        );
        assert_eq!(
            plain.missing_capabilities(&declared(json!({}))),
            declared(json!({ "sampling": {} }))
        );
        // `tools: null` offers no tools.
        let null_tools = asking(
            "sampling/createMessage",
            json!({ "messages": [], "maxTokens": 1, "tools": null }),
        );
        assert!(
            null_tools
                .missing_capabilities(&declared(json!({ "sampling": {} })))
                .is_empty()
        );
        let with_tools = InputRequired::new().sample(
            "s",
            json!({ "messages": [], "maxTokens": 1,
                    "tools": [{ "name": "t", "inputSchema": { "type": "object" } }] }),
        );
        for lacking in [json!({}), json!({ "sampling": {} })] {
            assert_eq!(
                with_tools.missing_capabilities(&declared(lacking.clone())),
                declared(json!({ "sampling": { "tools": {} } })),
                "{lacking}"
            );
        }
        assert!(
            with_tools
                .missing_capabilities(&declared(json!({ "sampling": { "tools": {} } })))
                .is_empty()
        );
    }

    #[derive(serde::Serialize, schemars::JsonSchema)]
    struct Point {
        x: i64,
    }

    #[test]
    fn a_reply_that_may_ask_for_input_publishes_the_schema_of_its_result() {
        let schema = <ToolReply<crate::Structured<Point>> as IntoCallToolResult>::output_schema(
            &mut schemars::SchemaGenerator::default(),
        );
        assert!(schema.is_some());
        assert_eq!(
            schema,
            crate::Structured::<Point>::output_schema(&mut schemars::SchemaGenerator::default())
        );
    }

    #[test]
    fn a_request_for_input_where_none_can_be_asked_is_an_error_result() {
        assert_eq!(
            ToolReply::Complete("done").into_call_tool_result(),
            CallToolResult::text("done")
        );
        let asked = InputRequired::new().list_roots("where");
        for result in [
            ToolReply::<&'static str>::InputRequired(asked.clone()).into_call_tool_result(),
            asked.into_call_tool_result(),
        ] {
            assert!(result.is_error);
            assert_eq!(
                result.structured_content.as_ref().unwrap()["code"],
                "INPUT_REQUIRED"
            );
        }
    }
}
