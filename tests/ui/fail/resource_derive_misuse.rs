use mcp_tools::state::Resource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Resource)]
#[resource(kind = "basket")]
struct NoPrefix {
    memory_gib: u32,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema, Resource)]
#[resource(prefix = "Bsk_", ttl = 60)]
#[serde(rename_all = "camelCase")]
struct Renamed {
    memory_gib: u32,
    #[serde(rename = "disk")]
    storage_gib: u32,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema, Resource)]
#[resource(prefix = "tpl")]
struct Tuple(u32);

fn main() {}
