use std::collections::BTreeMap;

use mcp_tools::store::{ConflictPolicy, Entity};
use mcp_tools::{tool, tools};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "ord", view = summary)]
#[serde(rename_all = "camelCase")]
struct Order {
    item_count: u32,
    #[serde(rename = "ref")]
    reference: String,
    #[serde(rename(serialize = "shipTo", deserialize = "ship_to_address"))]
    ship_to: String,
    #[serde(rename(deserialize = "legacy_note"))]
    delivery_note: String,
    r#type: String,
    #[serde(flatten)]
    extra: BTreeMap<String, String>,
}

impl Order {
    fn summary(&self) -> usize {
        self.item_count as usize
    }
}

macro_rules! ruled {
    ($name:ident, $rule:literal) => {
        #[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
        #[entity(prefix = "r")]
        #[serde(rename_all = $rule)]
        #[allow(dead_code)]
        struct $name {
            item_count: u32,
            x: u32,
        }
    };
}

ruled!(Lower, "lowercase");
ruled!(Upper, "UPPERCASE");
ruled!(Pascal, "PascalCase");
ruled!(Camel, "camelCase");
ruled!(Snake, "snake_case");
ruled!(ScreamingSnake, "SCREAMING_SNAKE_CASE");
ruled!(Kebab, "kebab-case");
ruled!(ScreamingKebab, "SCREAMING-KEBAB-CASE");

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "s")]
#[serde(rename_all(serialize = "kebab-case", deserialize = "PascalCase"))]
struct SerializeOnly {
    item_count: u32,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "d")]
#[serde(rename_all(deserialize = "PascalCase"))]
struct DeserializeOnly {
    item_count: u32,
}

/// Counts up.
#[tool(mutates = Order, on_conflict = rebase, touches = [item_count, r#type])]
fn order_count(order: &mut Order) -> u32 {
    order.item_count += 1;
    order.item_count
}

fn main() {
    let keys: Vec<Option<&str>> = [
        "item_count",
        "reference",
        "ship_to",
        "delivery_note",
        "type",
        "extra",
    ]
    .into_iter()
    .map(Order::field_key)
    .collect();
    assert_eq!(
        keys,
        [
            Some("itemCount"),
            Some("ref"),
            Some("shipTo"),
            Some("deliveryNote"),
            Some("type"),
            None,
        ]
    );
    let order = Order {
        item_count: 2,
        reference: "r".into(),
        ship_to: "s".into(),
        delivery_note: "n".into(),
        r#type: "t".into(),
        extra: BTreeMap::new(),
    };
    let json = serde_json::to_value(&order).unwrap();
    for key in keys.into_iter().flatten() {
        assert!(json.get(key).is_some(), "{key} is not a member of {json}");
    }
    assert_eq!((Order::VIEW.unwrap())(&order), serde_json::json!(2));

    let rules = [
        (Lower::field_key("item_count"), "item_count"),
        (Upper::field_key("item_count"), "ITEM_COUNT"),
        (Pascal::field_key("item_count"), "ItemCount"),
        (Camel::field_key("item_count"), "itemCount"),
        (Snake::field_key("item_count"), "item_count"),
        (ScreamingSnake::field_key("item_count"), "ITEM_COUNT"),
        (Kebab::field_key("item_count"), "item-count"),
        (ScreamingKebab::field_key("item_count"), "ITEM-COUNT"),
        (Camel::field_key("x"), "x"),
        (Pascal::field_key("x"), "X"),
        (SerializeOnly::field_key("item_count"), "item-count"),
        (DeserializeOnly::field_key("item_count"), "item_count"),
    ];
    for (index, (key, expected)) in rules.into_iter().enumerate() {
        assert_eq!(key, Some(expected), "rule {index}");
    }
    let pascal = serde_json::to_value(Pascal {
        item_count: 1,
        x: 2,
    })
    .unwrap();
    assert_eq!(pascal, serde_json::json!({"ItemCount": 1, "X": 2}));

    assert_eq!(
        ConflictPolicy::rebase::<Order>(&["item_count", "type"]),
        ConflictPolicy::Rebase {
            touches: vec!["itemCount".into(), "type".into()]
        }
    );
    assert_eq!(tools![order_count].len(), 1);
}
