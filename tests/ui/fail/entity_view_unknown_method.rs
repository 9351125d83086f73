use mcp_tools::store::Entity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "bsk", view = summry)]
struct Basket {
    notes: Vec<String>,
}

impl Basket {
    fn summary(&self) -> usize {
        self.notes.len()
    }
}

struct Opaque;

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "crt", view = opaque)]
struct Cart {
    items: Vec<String>,
}

impl Cart {
    fn opaque(&self) -> Opaque {
        Opaque
    }
}

fn main() {}
