use mcp_tools::store::Entity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "basket", prefx = "bsk")]
struct Basket {
    memory_gib: u32,
}

fn main() {}
