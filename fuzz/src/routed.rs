//! A stateless server whose `routed` tool mirrors four arguments in `Mcp-Param-*` headers (one
//! nested), beside an `echo` tool and a prompt: what the envelope and routing-header targets send
//! their requests to.

use mcp_tools::tools::{Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, McpServer, tool, tools};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where a call is routed inside a region.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[schemars(inline)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// The zone, mirrored in `Mcp-Param-Zone`.
    #[schemars(extend("x-mcp-header" = "Zone"))]
    pub zone: Option<String>,
    /// Not mirrored.
    pub rack: Option<u32>,
}

/// The arguments of `routed`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoutedArgs {
    /// The region, mirrored in `Mcp-Param-Region`.
    #[schemars(extend("x-mcp-header" = "Region"))]
    pub region: String,
    /// A count, mirrored in `Mcp-Param-Count`.
    #[schemars(extend("x-mcp-header" = "Count"))]
    pub count: Option<i64>,
    /// A flag, mirrored in `Mcp-Param-Dry-Run`.
    #[schemars(extend("x-mcp-header" = "Dry-Run"))]
    pub dry_run: Option<bool>,
    /// The placement, whose zone is mirrored.
    pub placement: Option<Placement>,
    /// Not mirrored.
    pub note: Option<String>,
}

/// The mirrored arguments: header name, path from the arguments' root.
pub const MIRRORED: &[(&str, &[&str])] = &[
    ("mcp-param-region", &["region"]),
    ("mcp-param-count", &["count"]),
    ("mcp-param-dry-run", &["dry_run"]),
    ("mcp-param-zone", &["placement", "zone"]),
];

/// Routes by region; answers with the arguments it received.
pub struct Routed;

impl Tool for Routed {
    type Args = RoutedArgs;
    type Output = String;

    fn info(&self) -> ToolInfo {
        ToolInfo::new("routed", "Routes by region; answers with the arguments it received.")
    }

    async fn call(&self, args: RoutedArgs, _cx: Context) -> String {
        serde_json::to_string(&args).expect("arguments serialize")
    }
}

/// Returns its input.
#[tool(read_only)]
pub fn echo(
    /// The text to send back.
    text: String,
) -> String {
    text
}

/// The server: `routed` and `echo`, logging on, any `Host`.
pub fn server() -> McpServer {
    let tools: ToolSet = tools![echo].with(Routed);
    McpServer::builder("fuzz-routed", "0.0.0")
        .tools(tools)
        .logging()
        .signing_key(crate::SIGNING_KEY.to_vec())
        .build()
        .expect("the routed server builds")
}

/// A header value that carries `text` exactly: as it is when it is visible ASCII that the server
/// reads back unchanged, else in the `=?base64?...?=` form.
pub fn mirror(text: &str) -> Vec<u8> {
    use base64::Engine;
    let plain = !text.is_empty()
        && text.bytes().all(|b| (0x21..=0x7e).contains(&b) || b == b' ')
        && !text.starts_with(' ')
        && !text.ends_with(' ')
        && !(text.starts_with("=?base64?") && text.ends_with("?="));
    if plain || text.is_empty() {
        return text.as_bytes().to_vec();
    }
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(text)
    )
    .into_bytes()
}

/// The text a header must carry to mirror an argument `value`, if one can.
pub fn mirror_value(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The arguments at `path`.
pub fn lookup<'a>(arguments: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(arguments, |value, key| value.as_object()?.get(*key))
}

/// A routed call's arguments that every header can mirror.
pub fn sample_arguments() -> Value {
    json!({ "region": "eu-west", "count": 3, "dry_run": true, "placement": { "zone": "b" } })
}
