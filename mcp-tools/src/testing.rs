//! Calling a server in-process, through the same request path HTTP uses, to test tool contracts
//! without sockets.
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

use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::{Map, Value, json};

use crate::auth::Principal;
use crate::dispatch::{Outcome, Transport};
use crate::protocol::error::RpcError;
use crate::protocol::{Envelope, PROTOCOL_VERSION, RequestId, meta_keys};
use crate::server::McpServer;

/// An in-process client. Every call builds a complete 2026-07-28 request (with `_meta`) and runs
/// it through the server's request path; only the HTTP layer is skipped.
pub struct TestClient {
    server: McpServer,
    principal: Principal,
    scopes: Option<Vec<String>>,
    capabilities: Value,
    next_id: AtomicI64,
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

    /// Sends `method` with `params` (an object; `_meta` is added) and returns the `result`.
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
        params.insert(
            "_meta".into(),
            json!({
                meta_keys::PROTOCOL_VERSION_KEY: PROTOCOL_VERSION,
                meta_keys::CLIENT_CAPABILITIES: self.capabilities,
            }),
        );
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
