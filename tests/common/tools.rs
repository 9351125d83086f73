//! Hand-written tools the end-to-end tests serve.

use mcp_tools::tools::{NoArgs, Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, Structured, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// Text to return.
    pub text: String,
}

pub struct Echo;

impl Tool for Echo {
    type Args = EchoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("echo", "Returns the text unchanged.").read_only()
    }
    async fn call(&self, args: EchoArgs, _cx: Context) -> String {
        args.text
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct DivideArgs {
    /// Dividend.
    pub a: i64,
    /// Divisor, not zero.
    pub b: i64,
    /// Optional rounding note.
    pub note: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub struct Quotient {
    pub quotient: i64,
    pub remainder: i64,
}

pub struct Divide;

impl Tool for Divide {
    type Args = DivideArgs;
    type Output = Result<Structured<Quotient>, ToolError>;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("math/divide", "Integer division with remainder.").title("Divide")
    }
    async fn call(&self, args: DivideArgs, _cx: Context) -> Self::Output {
        if args.b == 0 {
            return Err(ToolError::new("DIVISION_BY_ZERO", "b must not be zero"));
        }
        Ok(Structured(Quotient {
            quotient: args.a / args.b,
            remainder: args.a % args.b,
        }))
    }
}

/// A filler tool with any name.
pub struct Named(pub &'static str);

impl Tool for Named {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        ToolInfo::new(self.0, "Filler tool.")
    }
    async fn call(&self, _args: NoArgs, _cx: Context) -> &'static str {
        self.0
    }
}

const FILLER: [&str; 5] = ["tool_00", "tool_01", "tool_02", "tool_03", "tool_04"];

/// `echo`, `math/divide` and `extra` numbered filler tools.
pub fn tool_set(extra: usize) -> ToolSet {
    FILLER[..extra]
        .iter()
        .fold(ToolSet::new().with(Echo).with(Divide), |set, name| {
            set.with(Named(name))
        })
}

/// `bump`: counts its calls in the shared counter, so a test can tell whether a call ran.
pub struct Bump(pub std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Tool for Bump {
    type Args = NoArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("bump", "Counts its calls.")
    }
    async fn call(&self, _: NoArgs, _: Context) -> String {
        self.0
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            .to_string()
    }
}

/// An `authenticate` hook naming the caller by `Authorization: Bearer <name>`.
#[allow(clippy::result_large_err)]
pub fn bearer_subject(
    headers: &axum::http::HeaderMap,
) -> Result<mcp_tools::auth::Principal, mcp_tools::auth::Unauthorized> {
    match headers.get("authorization").and_then(|v| v.to_str().ok()) {
        Some(token) if token.starts_with("Bearer ") => Ok(mcp_tools::auth::Principal::subject(
            &token["Bearer ".len()..],
        )),
        _ => Err(mcp_tools::auth::Unauthorized::new(
            "Bearer",
            "A bearer token is required",
        )),
    }
}
