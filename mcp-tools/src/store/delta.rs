//! Field-level deltas between two JSON states, addressed by JSON Pointer (RFC 6901).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// One changed field between two versions of a resource.
///
/// Objects are compared member by member; any other value (arrays included) is compared whole, so a
/// changed list is one change at the list's path.
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
    diff_at(String::new(), before, after, &mut changes);
    changes
}

fn diff_at(path: String, before: &Value, after: &Value, changes: &mut Vec<FieldChange>) {
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                let child = format!("{path}/{}", escape(key));
                match (old.get(key), new.get(key)) {
                    (Some(a), Some(b)) => diff_at(child, a, b, changes),
                    (a, b) => changes.push(FieldChange {
                        path: child,
                        before: a.cloned(),
                        after: b.cloned(),
                    }),
                }
            }
        }
        (a, b) if a == b => {}
        (a, b) => changes.push(FieldChange {
            path,
            before: Some(a.clone()),
            after: Some(b.clone()),
        }),
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
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
            ["/a~1b~0c", "/gone", "/laptop/memory_gib", "/new", "/notes"]
        );
        assert_eq!(changes[0].top_level_field().as_deref(), Some("a/b~c"));
        assert_eq!(changes[1].after, None);
        assert_eq!(changes[2].before, Some(json!(16)));
        assert_eq!(changes[2].after, Some(json!(32)));
        assert_eq!(changes[2].top_level_field().as_deref(), Some("laptop"));
        assert_eq!(changes[3].before, None);
        assert_eq!(changes[3].after, Some(Value::Null));
        assert!(diff(&before, &before).is_empty());
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
