use mcp_tools::state::Resource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Resource)]
#[resource(kind = "basket", prefx = "bsk")]
struct Basket {
    memory_gib: u32,
}

fn main() {}
