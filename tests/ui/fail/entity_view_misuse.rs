use mcp_tools::store::Entity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk", view = summary, view = summary)]
struct Twice {
    notes: Vec<String>,
}

impl Twice {
    fn summary(&self) -> usize {
        self.notes.len()
    }
}

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk", view = "summary")]
struct Quoted {
    notes: Vec<String>,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk", view = |basket| basket.notes.len())]
struct Closure {
    notes: Vec<String>,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk", view)]
struct Bare {
    notes: Vec<String>,
}

fn main() {}
