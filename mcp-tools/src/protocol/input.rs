//! Multi-round requests: a tool asks the client for input (elicitation, sampling, roots) by
//! returning [`InputRequired`]; the client retries the same call with the answers and the sealed
//! `requestState`, which any replica can verify.

use serde_json::{Map, Value, json};

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

#[cfg(test)]
mod tests {
    use super::*;
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
}
