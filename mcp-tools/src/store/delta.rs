//! Field-level deltas between two JSON states, addressed by JSON Pointer (RFC 6901).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// One changed field between two versions of a resource.
///
/// Objects are compared member by member and arrays item by item: an item appended to a list is
/// one change at the item's path (`/notes/5`, with no `before`), an item removed from its end one
/// change with no `after`. Arrays are compared by position, so an item inserted at the front
/// shows as every later item changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FieldChange {
    /// JSON Pointer of the changed field (`""` is the whole state).
    pub path: String,
    /// The value in the version the caller saw; absent when the field was added since.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(with = "Value")]
    pub before: Option<Value>,
    /// The value now; absent when the field was removed since.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(with = "Value")]
    pub after: Option<Value>,
}

impl FieldChange {
    /// The top-level field this change lies under, or `None` when the whole state changed.
    pub fn top_level_field(&self) -> Option<String> {
        let rest = self.path.strip_prefix('/')?;
        let segment = rest.split('/').next().unwrap_or(rest);
        Some(unescape(segment))
    }
}

/// A present field, even when its value is `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// The changes that turn `before` into `after`, in a stable order (sorted by key at each level).
pub fn diff(before: &Value, after: &Value) -> Vec<FieldChange> {
    let mut changes = Vec::new();
    walk(&mut String::new(), before, after, &mut changes);
    changes
}

/// The order [`walk`] reports the members of an object in.
pub(crate) enum Order {
    /// Sorted by key: what a delta shown to a model needs to be stable.
    Sorted,
    /// Whatever order the maps iterate in, without sorting: enough for an undo patch.
    Any,
}

/// What [`walk`] finds, at the path it is at.
pub(crate) trait Changes {
    /// The order members must be reported in.
    const ORDER: Order = Order::Sorted;
    /// The value at `path` was replaced (or a member was added or removed: `None` on that side).
    fn replaced(&mut self, path: &str, before: Option<&Value>, after: Option<&Value>);
    /// The array at `path` had `len` items and gained `added` at its end.
    fn appended(&mut self, path: &str, len: usize, added: &[Value]);
    /// The array at `path` lost `removed` from its end and now has `len` items.
    fn truncated(&mut self, path: &str, len: usize, removed: &[Value]);
}

/// Walks two states side by side: objects member by member, arrays item by item (positionally,
/// with what one has past the other's end as an append or a truncation), anything else whole.
/// `path` is the JSON Pointer of the values, restored on return.
pub(crate) fn walk<O: Changes>(path: &mut String, before: &Value, after: &Value, out: &mut O) {
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let mut member = |key: &String, a: Option<&Value>, b: Option<&Value>| {
                let len = path.len();
                push_segment(path, key);
                match (a, b) {
                    (Some(a), Some(b)) => walk(path, a, b, out),
                    (a, b) => out.replaced(path, a, b),
                }
                path.truncate(len);
            };
            match O::ORDER {
                Order::Sorted => {
                    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
                    keys.sort_unstable();
                    keys.dedup();
                    for key in keys {
                        member(key, old.get(key), new.get(key));
                    }
                }
                Order::Any => {
                    for (key, a) in old {
                        member(key, Some(a), new.get(key));
                    }
                    for (key, b) in new {
                        if !old.contains_key(key) {
                            member(key, None, Some(b));
                        }
                    }
                }
            }
        }
        (Value::Array(old), Value::Array(new)) => {
            let common = old.len().min(new.len());
            for (index, (a, b)) in old.iter().zip(new).enumerate() {
                if a != b {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&index.to_string());
                    walk(path, a, b, out);
                    path.truncate(len);
                }
            }
            if new.len() > common {
                out.appended(path, common, &new[common..]);
            } else if old.len() > common {
                out.truncated(path, common, &old[common..]);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.replaced(path, Some(a), Some(b)),
    }
}

impl Changes for Vec<FieldChange> {
    fn replaced(&mut self, path: &str, before: Option<&Value>, after: Option<&Value>) {
        self.push(FieldChange {
            path: path.to_owned(),
            before: before.cloned(),
            after: after.cloned(),
        });
    }

    fn appended(&mut self, path: &str, len: usize, added: &[Value]) {
        for (offset, item) in added.iter().enumerate() {
            self.push(FieldChange {
                path: format!("{path}/{}", len + offset),
                before: None,
                after: Some(item.clone()),
            });
        }
    }

    fn truncated(&mut self, path: &str, len: usize, removed: &[Value]) {
        for (offset, item) in removed.iter().enumerate() {
            self.push(FieldChange {
                path: format!("{path}/{}", len + offset),
                before: Some(item.clone()),
                after: None,
            });
        }
    }
}

fn push_segment(path: &mut String, key: &str) {
    path.push('/');
    if key.contains(['~', '/']) {
        path.push_str(&escape(key));
    } else {
        path.push_str(key);
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

pub(crate) fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_fields_added_removed_and_changed() {
        let before = json!({"laptop": {"memory_gib": 16, "storage_gib": 512}, "notes": ["a"], "gone": 1, "a/b~c": 0});
        let after = json!({"laptop": {"memory_gib": 32, "storage_gib": 512}, "notes": ["a", "b"], "new": null, "a/b~c": 1});
        let changes = diff(&before, &after);
        let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/a~1b~0c",
                "/gone",
                "/laptop/memory_gib",
                "/new",
                "/notes/1"
            ]
        );
        assert_eq!(changes[0].top_level_field().as_deref(), Some("a/b~c"));
        assert_eq!(changes[1].after, None);
        assert_eq!(changes[2].before, Some(json!(16)));
        assert_eq!(changes[2].after, Some(json!(32)));
        assert_eq!(changes[2].top_level_field().as_deref(), Some("laptop"));
        assert_eq!(changes[3].before, None);
        assert_eq!(changes[3].after, Some(Value::Null));
        assert_eq!(changes[4].before, None);
        assert_eq!(changes[4].after, Some(json!("b")));
        assert_eq!(changes[4].top_level_field().as_deref(), Some("notes"));
        assert!(diff(&before, &before).is_empty());
    }

    #[test]
    fn arrays_are_compared_item_by_item() {
        let before = json!({"items": [{"n": 1}, "b", "c"]});
        let after = json!({"items": [{"n": 2}, "b"]});
        let changes = diff(&before, &after);
        assert_eq!(
            changes,
            [
                FieldChange {
                    path: "/items/0/n".into(),
                    before: Some(json!(1)),
                    after: Some(json!(2)),
                },
                FieldChange {
                    path: "/items/2".into(),
                    before: Some(json!("c")),
                    after: None,
                },
            ]
        );
        let grown = diff(&json!([1]), &json!([1, 2, 3]));
        let paths: Vec<&str> = grown.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["/1", "/2"]);
    }

    #[test]
    fn whole_state_and_null_round_trip() {
        let changes = diff(&json!(1), &json!({"a": 1}));
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, "");
        assert_eq!(changes[0].top_level_field(), None);

        let change = FieldChange {
            path: "/x".into(),
            before: Some(Value::Null),
            after: None,
        };
        let text = serde_json::to_value(&change).unwrap();
        assert_eq!(text, json!({"path": "/x", "before": null}));
        assert_eq!(serde_json::from_value::<FieldChange>(text).unwrap(), change);
    }
}
