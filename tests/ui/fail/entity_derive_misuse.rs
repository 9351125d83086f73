use mcp_tools::store::Entity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "basket")]
struct NoPrefix {
    memory_gib: u32,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "Bsk_", ttl = 60)]
#[serde(rename_all = "camelCase")]
struct Renamed {
    memory_gib: u32,
    #[serde(rename = "disk")]
    storage_gib: u32,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "tpl")]
struct Tuple(u32);

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "wrp")]
#[serde(transparent)]
struct Wrapped {
    inner: Vec<u32>,
}

fn main() {}
