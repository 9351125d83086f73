//! Calling a server in-process, through the same request path HTTP uses, to test tool contracts
//! without sockets.
//!
//! [`TestClient::call_tool`] returns the raw `result` of `tools/call`; the typed helpers decode
//! it: [`TestClient::call`] into your output type, [`TestClient::mutate`] and
//! [`TestClient::read`] into the outcomes of stateful tools. What stops a typed call is a
//! [`TestError`].
//!
//! ```
//! # use mcp_tools::{Context, McpServer};
//! # use mcp_tools::tools::{NoArgs, Tool, ToolInfo, ToolSet};
//! # struct Hello;
//! # impl Tool for Hello {
//! #     type Args = NoArgs;
//! #     type Output = &'static str;
//! #     fn info(&self) -> ToolInfo { ToolInfo::new("hello", "Says hello.") }
//! #     async fn call(&self, _: NoArgs, _: Context) -> &'static str { "hello" }
//! # }
//! # tokio_test_block_on(async {
//! use mcp_tools::testing::TestClient;
//!
//! let server = McpServer::builder("test", "0.0.0").tools(ToolSet::new().with(Hello)).build().unwrap();
//! let client = TestClient::new(server);
//! let result = client.call_tool("hello", serde_json::json!({})).await.unwrap();
//! assert_eq!(result["content"][0]["text"], "hello");
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::auth::Principal;
use crate::dispatch::{Outcome, Transport};
use crate::protocol::error::RpcError;
use crate::protocol::tool_error::ToolError;
use crate::protocol::{Envelope, PROTOCOL_VERSION, RequestId, meta_keys};
use crate::server::McpServer;
use crate::store::{MutationOutcome, ReadOutcome};

/// An in-process client. Every call builds a complete 2026-07-28 request (with `_meta`) and runs
/// it through the server's request path; only the HTTP layer is skipped.
pub struct TestClient {
    server: McpServer,
    principal: Principal,
    scopes: Option<Vec<String>>,
    capabilities: Value,
    next_id: AtomicI64,
    next_operation: AtomicU64,
}

impl TestClient {
    /// A client of `server`, calling as the anonymous principal with no client capabilities.
    pub fn new(server: McpServer) -> Self {
        TestClient {
            server,
            principal: Principal::Anonymous,
            scopes: None,
            capabilities: json!({}),
            next_id: AtomicI64::new(1),
            next_operation: AtomicU64::new(1),
        }
    }

    /// Calls as `principal` from now on.
    pub fn as_principal(mut self, principal: Principal) -> Self {
        self.principal = principal;
        self
    }

    /// Calls as if its token granted `scopes` (and what they imply) from now on: on an OAuth
    /// resource server, scoped tools, resources and prompts are then judged and listed as over
    /// HTTP. Without it, or without OAuth, scopes are not checked.
    pub fn with_scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// Declares these client capabilities on every request from now on.
    pub fn with_capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Sends `method` with `params` (an object) and returns the `result`.
    ///
    /// The request's `_meta` gets the protocol version and the client's capabilities; entries
    /// you put in `params._meta` yourself are kept (a validator under
    /// [`VALIDATOR_META_KEY`](crate::protocol::framework::VALIDATOR_META_KEY), say), and yours
    /// win over the client's.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let mut params = match params {
            Value::Object(params) => params,
            Value::Null => Map::new(),
            other => {
                return Err(RpcError::invalid_params(format!(
                    "params must be an object, got {other}"
                )));
            }
        };
        let mut meta = match params.remove("_meta") {
            Some(Value::Object(meta)) => meta,
            None | Some(Value::Null) => Map::new(),
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "params._meta must be an object, got {other}"
                )));
            }
        };
        meta.entry(meta_keys::PROTOCOL_VERSION_KEY)
            .or_insert_with(|| PROTOCOL_VERSION.into());
        meta.entry(meta_keys::CLIENT_CAPABILITIES)
            .or_insert_with(|| self.capabilities.clone());
        params.insert("_meta".into(), Value::Object(meta));
        let envelope = Envelope {
            id: Some(RequestId::Number(
                self.next_id.fetch_add(1, Ordering::Relaxed),
            )),
            method: method.to_owned(),
            params: Some(params),
        };
        match crate::dispatch::handle(
            &self.server,
            envelope,
            Transport::InProcess,
            crate::context::Caller {
                principal: self.principal.clone(),
                scopes: self.scopes.clone().map(|scopes| {
                    crate::auth::oauth::granted(self.server.shared.oauth.as_deref(), scopes)
                }),
            },
        )
        .await
        {
            Outcome::Result { result, .. } => {
                Ok(serde_json::from_slice(&result).expect("results are JSON"))
            }
            Outcome::Error(error) => Err(error),
            Outcome::Stream {
                notifications,
                finish,
                ..
            } => {
                let (_notifications, result) =
                    crate::transport::http::sse::collect(notifications, finish).await;
                result.map(|bytes| serde_json::from_slice(&bytes).expect("results are JSON"))
            }
            Outcome::Accepted => unreachable!("requests always carry an id"),
        }
    }

    /// Calls a tool; the `result` of `tools/call` (check `isError` for tool-level failures).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, RpcError> {
        self.request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
        .await
    }

    /// Every tool definition, following cursors to the end.
    pub async fn list_tools(&self) -> Result<Vec<Value>, RpcError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let page = self.request("tools/list", params).await?;
            if let Some(Value::Array(items)) = page.get("tools") {
                tools.extend(items.iter().cloned());
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(tools),
            }
        }
    }

    /// Calls a tool and decodes the result's `structuredContent` as `T`.
    ///
    /// A tool-level error (`isError: true`) comes back as [`TestError::Tool`] with its code,
    /// message, recovery hint and details; a JSON-RPC error (an unknown tool, say) as
    /// [`TestError::Rpc`]; a result that is not complete (the tool asked for client input, or
    /// the call became a task) as [`TestError::Incomplete`]; a result whose structured content
    /// is missing or is not a `T` as [`TestError::Decode`].
    ///
    /// ```
    /// use mcp_tools::testing::{TestClient, TestError};
    /// use mcp_tools::{McpServer, Recovery, ToolError, tool, tools};
    /// use schemars::JsonSchema;
    /// use serde::{Deserialize, Serialize};
    /// use serde_json::json;
    ///
    /// #[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
    /// struct Sum {
    ///     sum: i64,
    /// }
    ///
    /// /// Adds two integers.
    /// #[tool]
    /// fn add(a: i64, b: i64) -> Result<Sum, ToolError> {
    ///     a.checked_add(b).map(|sum| Sum { sum }).ok_or_else(|| {
    ///         ToolError::new("OVERFLOW", "The sum does not fit in 64 bits")
    ///             .with_recovery(Recovery::Stop)
    ///     })
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let server = McpServer::builder("test", "0.0.0").tools(tools![add]).build().unwrap();
    /// let client = TestClient::new(server);
    ///
    /// let sum: Sum = client.call("add", json!({ "a": 2, "b": 40 })).await.unwrap();
    /// assert_eq!(sum, Sum { sum: 42 });
    ///
    /// // The tool's own error, typed.
    /// let overflow = client.call::<Sum>("add", json!({ "a": i64::MAX, "b": 1 })).await;
    /// let Err(TestError::Tool(error)) = overflow else { panic!("{overflow:?}") };
    /// assert_eq!(error.code(), "OVERFLOW");
    /// assert_eq!(error.recovery(), Some(&Recovery::Stop));
    ///
    /// // Arguments the input schema refuses: the tool never ran.
    /// let invalid = client.call::<Sum>("add", json!({ "a": "two", "b": 1 })).await;
    /// let Err(TestError::Tool(error)) = invalid else { panic!("{invalid:?}") };
    /// assert_eq!(error.code(), "INVALID_ARGUMENTS");
    /// assert_eq!(error.details().unwrap()["violations"][0]["path"], "/a");
    ///
    /// // A tool that does not exist is a JSON-RPC error.
    /// let unknown = client.call::<Sum>("subtract", json!({})).await;
    /// let Err(TestError::Rpc(error)) = unknown else { panic!("{unknown:?}") };
    /// assert_eq!(error.code(), -32602);
    /// # });
    /// ```
    pub async fn call<T: DeserializeOwned>(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<T, TestError> {
        let result = complete(self.call_tool(name, arguments).await?)?;
        if is_error(&result) {
            return Err(TestError::Tool(tool_error(&result)));
        }
        decode(result)
    }

    /// Calls a `creates` or `mutates` tool and decodes its outcome.
    ///
    /// Every outcome decodes, `stale_view` and `rejected` included, though the wire marks them
    /// `isError: true`: they are what a stateful tool answers. Only a call the store never
    /// judged is an error: arguments the input schema refuses, a missing precondition or a
    /// store failure ([`TestError::Tool`]), a JSON-RPC error ([`TestError::Rpc`]), a request
    /// to confirm a change by elicitation ([`TestError::Incomplete`]).
    ///
    /// ```
    /// use mcp_tools::store::{Entity, MutationOutcome};
    /// use mcp_tools::testing::{TestClient, TestError};
    /// use mcp_tools::{McpServer, MemoryStore, tool, tools};
    /// use schemars::JsonSchema;
    /// use serde::{Deserialize, Serialize};
    /// use serde_json::json;
    ///
    /// #[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
    /// #[entity(kind = "counter", prefix = "ctr")]
    /// struct Counter {
    ///     count: u64,
    /// }
    ///
    /// /// Makes a counter at zero.
    /// #[tool(creates = Counter)]
    /// fn counter_create() -> Counter {
    ///     Counter { count: 0 }
    /// }
    ///
    /// /// Adds one to a counter.
    /// #[tool(mutates = Counter)]
    /// fn counter_bump(counter: &mut Counter) -> u64 {
    ///     counter.count += 1;
    ///     counter.count
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let server = McpServer::builder("test", "0.0.0")
    ///     .tools(tools![counter_create, counter_bump])
    ///     .store(MemoryStore::default())
    ///     .build()
    ///     .unwrap();
    /// let client = TestClient::new(server);
    /// let created = client
    ///     .mutate("counter_create", json!({ "operation_id": client.operation_id() }))
    ///     .await
    ///     .unwrap();
    /// let handle = created.committed_handle().unwrap().to_owned();
    /// let bump = |version: u64| {
    ///     json!({ "counter_id": handle, "expected_version": version, "operation_id": client.operation_id() })
    /// };
    ///
    /// let outcome = client.mutate("counter_bump", bump(1)).await.unwrap();
    /// let MutationOutcome::Applied(applied) = outcome else { panic!("{outcome:?}") };
    /// assert_eq!((applied.version, applied.result), (2, json!(1)));
    ///
    /// // Planned from version 1 again: a stale view, decoded as the outcome it is.
    /// let outcome = client.mutate("counter_bump", bump(1)).await.unwrap();
    /// let MutationOutcome::StaleView(stale) = outcome else { panic!("{outcome:?}") };
    /// assert_eq!((stale.current_version, stale.delta[0].path.as_str()), (2, "/count"));
    ///
    /// // No precondition at all: the store never judged it.
    /// let refused = client.mutate("counter_bump", json!({ "counter_id": handle, "operation_id": client.operation_id() })).await;
    /// let Err(TestError::Tool(error)) = refused else { panic!("{refused:?}") };
    /// assert_eq!(error.code(), "INVALID_ARGUMENTS");
    /// # });
    /// ```
    pub async fn mutate(&self, name: &str, arguments: Value) -> Result<MutationOutcome, TestError> {
        self.outcome(name, arguments).await
    }

    /// Calls a `reads` tool and decodes its outcome: `current`, or `rejected` (`NOT_FOUND`,
    /// `EXPIRED`), which decodes too. Errors as for [`mutate`](Self::mutate).
    ///
    /// ```
    /// use mcp_tools::store::{Entity, ReadOutcome};
    /// use mcp_tools::testing::{TestClient, TestError};
    /// use mcp_tools::{McpServer, MemoryStore, tool, tools};
    /// use schemars::JsonSchema;
    /// use serde::{Deserialize, Serialize};
    /// use serde_json::json;
    ///
    /// #[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
    /// #[entity(kind = "counter", prefix = "ctr")]
    /// struct Counter {
    ///     count: u64,
    /// }
    ///
    /// /// Makes a counter at zero.
    /// #[tool(creates = Counter)]
    /// fn counter_create() -> Counter {
    ///     Counter { count: 0 }
    /// }
    ///
    /// /// Reads a counter.
    /// #[tool(reads = Counter)]
    /// fn counter_get(counter: &Counter) -> u64 {
    ///     counter.count
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let server = McpServer::builder("test", "0.0.0")
    ///     .tools(tools![counter_create, counter_get])
    ///     .store(MemoryStore::default())
    ///     .build()
    ///     .unwrap();
    /// let client = TestClient::new(server);
    /// let created = client
    ///     .mutate("counter_create", json!({ "operation_id": client.operation_id() }))
    ///     .await
    ///     .unwrap();
    /// let handle = created.committed_handle().unwrap();
    ///
    /// let outcome = client.read("counter_get", json!({ "counter_id": handle })).await.unwrap();
    /// let ReadOutcome::Current(snapshot) = outcome else { panic!("{outcome:?}") };
    /// assert_eq!((snapshot.version, &*snapshot.state), (1, &json!(0)));
    ///
    /// // An unknown handle is an outcome too.
    /// let outcome = client.read("counter_get", json!({ "counter_id": "ctr_unknown" })).await.unwrap();
    /// let ReadOutcome::Rejected(rejected) = outcome else { panic!("{outcome:?}") };
    /// assert_eq!(rejected.code, "NOT_FOUND");
    ///
    /// // A tool that does not exist is not.
    /// let unknown = client.read("counter_peek", json!({ "counter_id": handle })).await;
    /// assert!(matches!(unknown, Err(TestError::Rpc(_))), "{unknown:?}");
    /// # });
    /// ```
    pub async fn read(&self, name: &str, arguments: Value) -> Result<ReadOutcome, TestError> {
        self.outcome(name, arguments).await
    }

    /// A fresh operation id for a stateful call: at least 22 URL-safe characters of which 32
    /// are random, as the framework requires of anonymous callers, and different on every call
    /// (the client's own count is part of it). Reuse one only to test a retry.
    ///
    /// ```
    /// # use mcp_tools::McpServer;
    /// # use mcp_tools::testing::TestClient;
    /// let client = TestClient::new(McpServer::builder("test", "0.0.0").build().unwrap());
    /// let (first, second) = (client.operation_id(), client.operation_id());
    /// assert_ne!(first, second);
    /// assert!(first.len() >= 22);
    /// assert!(first.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    /// ```
    pub fn operation_id(&self) -> String {
        let count = self.next_operation.fetch_add(1, Ordering::Relaxed);
        let mut random = [0u8; 16];
        if getrandom::fill(&mut random).is_err() {
            // No system randomness: the time still keeps two test runs apart, and the count
            // keeps this client's ids apart.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_nanos());
            random = nanos.to_le_bytes();
        }
        let random: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
        format!("op-{count}-{random}")
    }

    /// A stateful outcome: decoded whether or not the wire marks it an error.
    async fn outcome<T: DeserializeOwned>(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<T, TestError> {
        let result = complete(self.call_tool(name, arguments).await?)?;
        let is_outcome = result
            .get("structuredContent")
            .is_some_and(|content| content.get("outcome").is_some());
        if !is_outcome && is_error(&result) {
            return Err(TestError::Tool(tool_error(&result)));
        }
        decode(result)
    }
}

/// Why a typed call of a [`TestClient`] ([`call`](TestClient::call),
/// [`mutate`](TestClient::mutate), [`read`](TestClient::read)) gave no value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestError {
    /// The request was answered with a JSON-RPC error: an unknown tool, malformed params, a
    /// capability the client did not declare.
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The tool call ended in a tool-level error (`isError: true`): the tool's own, or the
    /// framework's when it refused the call before the tool ran (`INVALID_ARGUMENTS`). Its
    /// [`code`](ToolError::code), [`message`](ToolError::message),
    /// [`recovery`](ToolError::recovery) and [`details`](ToolError::details) are the
    /// `structuredContent`'s; a result without a structured `code` gets
    /// [`ToolError::TOOL_ERROR`] and its text as the message.
    #[error("the tool answered with an error: {0}")]
    Tool(ToolError),
    /// The call did not complete: the tool asked for client input (`resultType:
    /// "input_required"`), or the call became a task (`"task"`). Go on with
    /// [`TestClient::request`].
    #[error("the call did not complete: its result type is {:?}", .result["resultType"])]
    Incomplete {
        /// The whole result.
        result: Value,
    },
    /// The result's `structuredContent` is missing or does not decode as the type asked for.
    #[error("the result's structuredContent is not a {expected}: {source}")]
    Decode {
        /// The type asked for.
        expected: &'static str,
        /// Why it does not decode.
        source: serde_json::Error,
        /// The whole result.
        result: Value,
    },
}

/// The result, unless it is not complete.
fn complete(result: Value) -> Result<Value, TestError> {
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(result),
        Some(_) => Err(TestError::Incomplete { result }),
    }
}

fn is_error(result: &Value) -> bool {
    result.get("isError").and_then(Value::as_bool) == Some(true)
}

/// The tool error an `isError` result carries.
fn tool_error(result: &Value) -> ToolError {
    let structured = result.get("structuredContent");
    let member = |name: &str| {
        structured
            .and_then(|content| content.get(name))
            .and_then(Value::as_str)
    };
    let text = || {
        result
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut error = match member("code") {
        Some(code) => ToolError::new(code, member("message").unwrap_or_default()),
        None => ToolError::new(ToolError::TOOL_ERROR, text()),
    };
    if let Some(recovery) = member("recovery") {
        error = error.with_recovery(crate::protocol::recovery::Recovery::from_name(recovery));
    }
    if let Some(details) = structured.and_then(|content| content.get("details")) {
        error = error.with_details(details.clone());
    }
    error
}

/// The result's `structuredContent` as a `T`.
fn decode<T: DeserializeOwned>(result: Value) -> Result<T, TestError> {
    let decoded = match result.get("structuredContent") {
        Some(content) => T::deserialize(content),
        None => Err(serde::de::Error::custom(
            "the result has no structuredContent",
        )),
    };
    decoded.map_err(|source| TestError::Decode {
        expected: std::any::type_name::<T>(),
        source,
        result,
    })
}

/// The environment variable that makes [`assert_contract`] write the current contract instead
/// of comparing it: `MCP_TOOLS_UPDATE_CONTRACTS=1 cargo test`.
pub const UPDATE_CONTRACTS_ENV: &str = "MCP_TOOLS_UPDATE_CONTRACTS";

/// Asserts that `server`'s [contract](McpServer::contract) is the one committed at `path`, and
/// panics with every difference, classified as breaking, compatible or cosmetic, when it is
/// not (a missing file is a failure too, so CI never passes on a contract nobody committed).
///
/// With [`UPDATE_CONTRACTS_ENV`] set to `1`, the file is (re)written with the current contract
/// instead, and the assertion passes: review the change in the diff and commit it.
///
/// ```no_run
/// # fn server() -> mcp_tools::McpServer { unimplemented!() }
/// #[test]
/// fn the_contract_is_the_committed_one() {
///     mcp_tools::testing::assert_contract(&server(), "contracts/server.json");
/// }
/// ```
#[track_caller]
pub fn assert_contract(server: &McpServer, path: impl AsRef<std::path::Path>) {
    let path = path.as_ref();
    let current = server.contract();
    if std::env::var(UPDATE_CONTRACTS_ENV).is_ok_and(|value| value == "1") {
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|error| panic!("creating {}: {error}", parent.display()));
        }
        std::fs::write(path, current.to_json_string())
            .unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
        return;
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => panic!(
            "the contract file {} cannot be read ({error}); write it with {UPDATE_CONTRACTS_ENV}=1 and commit it",
            path.display()
        ),
    };
    let committed = crate::contract::Contract::parse(&text).unwrap_or_else(|error| {
        panic!(
            "{} is not a contract file ({error}); rewrite it with {UPDATE_CONTRACTS_ENV}=1",
            path.display()
        )
    });
    let diff = committed.diff(&current);
    assert!(
        diff.changes().is_empty(),
        "the server's contract differs from {}:\n{diff}\nIf the changes are intended, rerun with {UPDATE_CONTRACTS_ENV}=1 and commit the file.",
        path.display()
    );
    assert!(
        text == current.to_json_string(),
        "{} holds the server's contract but not in its canonical form; rewrite it with {UPDATE_CONTRACTS_ENV}=1",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;
    use crate::protocol::content::CallToolResult;
    use crate::protocol::input::InputRequired;
    use crate::tools::{NoArgs, Tool, ToolInfo, ToolSet};

    /// A tool that answers with a fixed result, whatever it is asked.
    struct Fixed(&'static str, fn() -> CallToolResult);

    impl Tool for Fixed {
        type Args = NoArgs;
        type Output = CallToolResult;
        fn info(&self) -> ToolInfo {
            ToolInfo::new(self.0, "Answers with a fixed result.")
        }
        async fn call(&self, _: NoArgs, _: Context) -> CallToolResult {
            (self.1)()
        }
    }

    /// A tool that asks the client for its roots.
    struct Asks;

    impl Tool for Asks {
        type Args = NoArgs;
        type Output = InputRequired;
        fn info(&self) -> ToolInfo {
            ToolInfo::new("asks", "Asks for the client's roots.")
        }
        async fn call(&self, _: NoArgs, _: Context) -> InputRequired {
            InputRequired::new().list_roots("where")
        }
    }

    fn client() -> TestClient {
        let tools = ToolSet::new()
            .with(Fixed("point", || {
                CallToolResult::structured(json!({ "x": 1, "y": 2 }))
            }))
            .with(Fixed("text", || CallToolResult::text("plain")))
            .with(Fixed("failing", || {
                CallToolResult::text("it broke").into_error()
            }))
            .with(Asks);
        let server = McpServer::builder("test", "0.0.0")
            .tools(tools)
            .build()
            .unwrap();
        TestClient::new(server).with_capabilities(json!({ "roots": {} }))
    }

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Point {
        x: i64,
        y: i64,
    }

    #[test]
    fn structured_content_decodes_and_a_mismatch_says_what_was_expected() {
        run(async {
            let client = client();
            let point: Point = client.call("point", json!({})).await.unwrap();
            assert_eq!(point, Point { x: 1, y: 2 });
            match client.call::<String>("point", json!({})).await {
                Err(TestError::Decode {
                    expected, result, ..
                }) => {
                    assert_eq!(expected, "alloc::string::String");
                    assert_eq!(result["structuredContent"]["x"], 1);
                }
                other => panic!("{other:?}"),
            }
            match client.call::<Point>("text", json!({})).await {
                Err(error @ TestError::Decode { .. }) => {
                    assert!(
                        error.to_string().contains("no structuredContent"),
                        "{error}"
                    );
                }
                other => panic!("{other:?}"),
            }
        });
    }

    #[test]
    fn an_error_result_without_structured_content_is_a_plain_tool_error() {
        run(async {
            match client().call::<Point>("failing", json!({})).await {
                Err(TestError::Tool(error)) => {
                    assert_eq!(error.code(), ToolError::TOOL_ERROR);
                    assert_eq!(error.message(), "it broke");
                    assert_eq!(error.recovery(), None);
                }
                other => panic!("{other:?}"),
            }
        });
    }

    #[test]
    fn a_request_for_input_is_incomplete_and_unknown_tools_are_rpc_errors() {
        run(async {
            let client = client();
            match client.call::<Point>("asks", json!({})).await {
                Err(TestError::Incomplete { result }) => {
                    assert_eq!(result["resultType"], "input_required");
                    assert!(result["inputRequests"].get("where").is_some());
                }
                other => panic!("{other:?}"),
            }
            for outcome in [
                client.mutate("nothing", json!({})).await.map(|_| ()),
                client.read("nothing", json!({})).await.map(|_| ()),
            ] {
                match outcome {
                    Err(TestError::Rpc(error)) => assert_eq!(error.code(), -32602),
                    other => panic!("{other:?}"),
                }
            }
        });
    }

    #[test]
    fn a_result_that_is_not_an_outcome_does_not_decode_as_one() {
        run(async {
            let outcome = client().mutate("point", json!({})).await;
            assert!(
                matches!(outcome, Err(TestError::Decode { .. })),
                "{outcome:?}"
            );
        });
    }

    /// A tool that answers with the `_meta` its request carried.
    struct Meta;

    impl Tool for Meta {
        type Args = NoArgs;
        type Output = CallToolResult;
        fn info(&self) -> ToolInfo {
            ToolInfo::new("meta", "Shows the request's _meta.")
        }
        async fn call(&self, _: NoArgs, cx: Context) -> CallToolResult {
            CallToolResult::structured(Value::Object(cx.meta().raw().clone()))
        }
    }

    #[test]
    fn entries_of_meta_the_caller_sends_are_kept_next_to_the_clients() {
        run(async {
            let server = McpServer::builder("test", "0.0.0")
                .tools(ToolSet::new().with(Meta))
                .build()
                .unwrap();
            let client = TestClient::new(server).with_capabilities(json!({ "roots": {} }));
            let params = json!({ "name": "meta", "_meta": { "example.com/trace": "t-1" } });
            let result = client.request("tools/call", params).await.unwrap();
            let meta = &result["structuredContent"];
            assert_eq!(meta["example.com/trace"], "t-1");
            assert_eq!(meta[meta_keys::PROTOCOL_VERSION_KEY], PROTOCOL_VERSION);
            assert_eq!(meta[meta_keys::CLIENT_CAPABILITIES], json!({ "roots": {} }));
            let refused = client
                .request("tools/call", json!({ "name": "meta", "_meta": 3 }))
                .await;
            assert_eq!(refused.unwrap_err().code(), -32602);
        });
    }

    /// Operation ids are long and URL-safe enough for anonymous callers, and never repeat,
    /// neither within a client nor between two.
    #[test]
    fn operation_ids_are_unguessable_and_fresh() {
        let server = McpServer::builder("test", "0.0.0").build().unwrap();
        let (one, two) = (TestClient::new(server.clone()), TestClient::new(server));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..500 {
            for id in [one.operation_id(), two.operation_id()] {
                assert!(id.len() >= 22, "{id}");
                assert!(
                    id.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                    "{id}"
                );
                assert!(seen.insert(id.clone()), "{id} repeated");
            }
        }
    }
}
