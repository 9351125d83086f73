//! Multi-round requests: a tool asks the client for input (elicitation, sampling, roots) by
//! returning [`InputRequired`]; the client retries the same call with the answers and the sealed
//! `requestState`, which any replica can verify.

use serde_json::{Map, Value, json};

use crate::tools::content::CallToolResult;
use crate::tools::output::IntoCallToolResult;

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
