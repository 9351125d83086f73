//! Every supported form, without depending on serde or schemars directly for arguments.
use std::sync::Arc;

use mcp_tools::tools::{CallToolResult, Content};
use mcp_tools::{Context, State, tool, toolbox, ToolError, tools};

/// Adds two integers.
#[tool(name = "math/add", title = "Add", read_only, idempotent = true, open_world = false)]
pub async fn add(
    /// The first addend.
    a: i64,
    #[arg(default = 1, description = "The second addend.")] b: i64,
    maybe: Option<String>,
    #[arg(default)] flags: Vec<bool>,
) -> Result<CallToolResult, ToolError> {
    let _ = (maybe, flags);
    Ok(CallToolResult::text((a + b).to_string()))
}

/// Returns content blocks.
#[tool(destructive)]
fn blocks(r#type: String, mut count: u8, cx: Context) -> Vec<Content> {
    count += 1;
    vec![Content::text(format!("{type} {count} {}", cx.method()))]
}

#[derive(Clone)]
struct Config(Arc<str>);

/// Reads the configuration.
#[tool]
fn config(config: State<Config>, _cx: &Context) -> Content {
    Content::text(config.0.0.to_string())
}

/// Returns numbers as structured output.
#[tool]
fn numbers(count: usize) -> Vec<u32> {
    (0..count as u32).collect()
}

struct Server;

#[toolbox]
impl Server {
    /// Says hello.
    #[mcp_tools::tool(name = "server.hello")]
    async fn hello(&self, name: String) -> String {
        format!("hello {name}")
    }
}

mod nested {
    /// Private tools work inside modules.
    #[mcp_tools::tool]
    pub(crate) fn ping() -> String {
        "pong".into()
    }
}

fn main() {
    let set = tools![add, blocks, config, numbers, nested::ping].merge(Arc::new(Server).tool_set());
    assert_eq!(set.len(), 6);
    // The functions keep their signatures.
    let _blocks: fn(String, u8, Context) -> Vec<Content> = blocks;
    assert_eq!(numbers(2), vec![0, 1]);
}
