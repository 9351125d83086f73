//! The server the fuzz test attacks: every feature the endpoint serves (tools, a tool whose
//! argument is mirrored in a header, one that asks the client for input, one that streams,
//! versioned stateful tools, resources, a template, prompts, completion, logging), plus what a
//! request generator has to know about it to predict every answer.

use mcp_tools::MemoryStore;
use mcp_tools::completion::{CompletionTarget, Completions};
use mcp_tools::prompts::{Prompt, PromptMessage, PromptSet};
use mcp_tools::protocol::{LogLevel, RpcError};
use mcp_tools::resources::{Resource, ResourceContents, ResourceSet, ResourceTemplate};
use mcp_tools::tools::{Content, InputRequired, NoArgs, Tool, ToolInfo, ToolReply};
use mcp_tools::{Context, McpServer};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::basket;
use crate::common::tools::tool_set;

/// Small, so oversized bodies are cheap to send.
pub const BODY_LIMIT: usize = 16 * 1024;

/// Small, so `tools/list` has several pages and a genuine cursor to send.
pub const PAGE_SIZE: usize = 4;

/// Every tool, in listing order.
pub const TOOLS: [&str; 15] = [
    "echo",
    "math/divide",
    "route",
    "confirm",
    "steps",
    "basket_create",
    "basket_get",
    "basket_upgrade_memory",
    "basket_upgrade_storage",
    "basket_replace_configuration",
    "basket_checkout",
    "basket_add_note",
    "basket_edit_note",
    "basket_remove_note",
    "basket_move_note",
];

/// The `x-mcp-header` names of `route`, with the argument each mirrors.
pub const ROUTE_HEADERS: [(&str, &str); 2] = [("Region", "region"), ("Shard", "shard")];

/// The key under which `confirm` asks for (and finds) the user's answer.
pub const CONFIRM_KEY: &str = "ok";

/// Listed resources.
pub const RESOURCES: [&str; 2] = ["docs://readme", "docs://logo"];

/// The one template: `docs://pages/{page}`, one non-empty segment without `/`.
pub const TEMPLATE: &str = "docs://pages/{page}";
pub const TEMPLATE_PREFIX: &str = "docs://pages/";

/// Prompts with their required arguments.
pub const PROMPTS: [(&str, &[&str]); 2] = [("greet", &["name"]), ("plain", &[])];

#[derive(Deserialize, JsonSchema)]
pub struct RouteArgs {
    /// Region to route to; intermediaries read it from `Mcp-Param-Region`.
    #[schemars(extend("x-mcp-header" = "Region"))]
    pub region: String,
    /// Shard within the region, mirrored in `Mcp-Param-Shard`.
    #[schemars(extend("x-mcp-header" = "Shard"))]
    pub shard: Option<i64>,
}

/// Routes by region and shard, both mirrored in headers.
pub struct Route;

impl Tool for Route {
    type Args = RouteArgs;
    type Output = String;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("route", "Routes by region and shard.").read_only()
    }
    async fn call(&self, args: RouteArgs, _cx: Context) -> String {
        format!("{}/{:?}", args.region, args.shard)
    }
}

/// Asks the user to confirm (a form elicitation) unless the retry carries the answer.
pub struct Confirm;

impl Tool for Confirm {
    type Args = NoArgs;
    type Output = ToolReply<String>;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("confirm", "Asks the user to confirm before going on.")
    }
    async fn call(&self, _: NoArgs, cx: Context) -> ToolReply<String> {
        match cx.input_response(CONFIRM_KEY) {
            Some(answer) => ToolReply::Complete(format!("confirmed: {answer}")),
            None => ToolReply::InputRequired(
                InputRequired::new()
                    .elicit(
                        CONFIRM_KEY,
                        "Go on?",
                        json!({ "type": "object",
                            "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] }),
                    )
                    .state(json!({ "round": 1 })),
            ),
        }
    }
}

/// Reports progress and logs, so requests that opt in get a stream with notifications.
pub struct Steps;

impl Tool for Steps {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("steps", "Works in two reported steps.").read_only()
    }
    async fn call(&self, _: NoArgs, cx: Context) -> &'static str {
        cx.progress(1.0, Some(2.0), Some("half way"));
        cx.log(LogLevel::Info, "working");
        cx.progress(2.0, Some(2.0), None);
        "done"
    }
}

fn resources() -> ResourceSet {
    ResourceSet::new()
        .with(
            Resource::text(RESOURCES[0], "Readme", "text/markdown", "# Fixture")
                .description("Read me."),
        )
        .with(Resource::blob(
            RESOURCES[1],
            "Logo",
            "image/png",
            &[0x89, b'P', b'N', b'G'],
        ))
        .with_template(
            ResourceTemplate::new(TEMPLATE, "Pages", |uri, vars, _cx| async move {
                Ok::<_, RpcError>(vec![ResourceContents::text(
                    uri,
                    "text/plain",
                    format!("page {}", vars["page"]),
                )])
            })
            .mime_type("text/plain"),
        )
}

fn prompts() -> PromptSet {
    PromptSet::new()
        .with(
            Prompt::new("greet", "Greets someone.", |args, _cx| async move {
                let name = args["name"].as_str().unwrap_or_default().to_owned();
                Ok::<_, RpcError>(vec![PromptMessage::user(Content::text(format!(
                    "Hello {name}"
                )))])
            })
            .argument("name", "Who to greet", true)
            .argument("tone", "How", false),
        )
        .with(Prompt::new(
            "plain",
            "Says nothing in particular.",
            |_args, _cx| async {
                Ok::<_, RpcError>(vec![PromptMessage::assistant(Content::text("Plain."))])
            },
        ))
}

fn completions() -> Completions {
    let starting = |candidates: &'static [&'static str]| {
        move |value: &str, _: &serde_json::Value, _: &Context| {
            candidates
                .iter()
                .filter(|c| c.starts_with(value))
                .map(|c| (*c).to_owned())
                .collect()
        }
    };
    Completions::new()
        .with(
            CompletionTarget::Prompt("greet".into()),
            "name",
            starting(&["alice", "albert", "bob"]),
        )
        .with(
            CompletionTarget::ResourceTemplate(TEMPLATE.into()),
            "page",
            starting(&["intro", "install"]),
        )
}

/// The fixture server, its baskets in memory.
pub fn server() -> McpServer {
    McpServer::builder("fuzz-fixture", "1.0.0")
        .instructions("Fuzz target.")
        .tools(tool_set(0).with(Route).with(Confirm).with(Steps))
        .tools(basket::tool_set())
        .store(MemoryStore::default())
        .resources(resources())
        .prompts(prompts())
        .completions(completions())
        .logging()
        .page_size(PAGE_SIZE)
        .signing_key(b"fuzz fixture key, padded to thirty-two bytes".to_vec())
        .body_limit(BODY_LIMIT)
        .build()
        .unwrap()
}
