//! History as changes: the undo patch of each version, which takes its state back to the version
//! before. A store keeps the current state once and these patches for the kept versions, so
//! history costs what changed: an append is undone by a length, a changed member by its old value.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::delta::{Changes, Order, unescape, walk};

/// One step of an undo patch, at a JSON Pointer into the newer state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Undo {
    /// Put `value` at `path` (replacing what is there, or adding the member).
    Set { path: String, value: Value },
    /// Remove the member at `path` (it was added).
    Remove { path: String },
    /// Cut the array at `path` back to `len` items (items were appended).
    Truncate { path: String, len: usize },
    /// Append `items` to the array at `path` (they were removed from its end).
    Extend { path: String, items: Vec<Value> },
}

/// The patch that turns `after` back into `before`.
pub(crate) fn undo_patch(before: &Value, after: &Value) -> Vec<Undo> {
    let mut patch = UndoPatch(Vec::new());
    walk(&mut String::new(), before, after, &mut patch);
    patch.0
}

struct UndoPatch(Vec<Undo>);

impl Changes for UndoPatch {
    // Each step of a patch stands alone, so their order does not matter.
    const ORDER: Order = Order::Any;

    fn replaced(&mut self, path: &str, before: Option<&Value>, _: Option<&Value>) {
        let path = path.to_owned();
        self.0.push(match before {
            Some(value) => Undo::Set {
                path,
                value: value.clone(),
            },
            None => Undo::Remove { path },
        });
    }

    fn appended(&mut self, path: &str, len: usize, _: &[Value]) {
        self.0.push(Undo::Truncate {
            path: path.to_owned(),
            len,
        });
    }

    fn truncated(&mut self, path: &str, _: usize, removed: &[Value]) {
        self.0.push(Undo::Extend {
            path: path.to_owned(),
            items: removed.to_vec(),
        });
    }
}

/// Applies an undo patch to the state it was computed against, in place. A patch that does not
/// fit the state means stored history is inconsistent.
pub(crate) fn apply_undo(state: &mut Value, patch: &[Undo]) -> Result<(), String> {
    // Steps were recorded outermost-first within each array; undoing them in reverse restores
    // an array's length before its items are addressed.
    for step in patch.iter().rev() {
        match step {
            Undo::Set { path, value } => set(state, path, value.clone())?,
            Undo::Remove { path } => {
                let (parent, key) = parent_of(state, path)?;
                match parent {
                    Value::Object(map) => {
                        map.remove(&key);
                    }
                    _ => return Err(format!("no member to remove at {path}")),
                }
            }
            Undo::Truncate { path, len } => match state.pointer_mut(path) {
                Some(Value::Array(items)) if items.len() >= *len => items.truncate(*len),
                _ => return Err(format!("no array to truncate at {path}")),
            },
            Undo::Extend { path, items } => match state.pointer_mut(path) {
                Some(Value::Array(kept)) => kept.extend(items.iter().cloned()),
                _ => return Err(format!("no array to extend at {path}")),
            },
        }
    }
    Ok(())
}

fn set(state: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *state = value;
        return Ok(());
    }
    let (parent, key) = parent_of(state, path)?;
    match parent {
        Value::Object(map) => {
            map.insert(key, value);
            Ok(())
        }
        Value::Array(items) => match key.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
            Some(item) => {
                *item = value;
                Ok(())
            }
            None => Err(format!("no item at {path}")),
        },
        _ => Err(format!("no container at {path}")),
    }
}

/// The container holding the last segment of `path`, and that segment unescaped.
fn parent_of<'v>(state: &'v mut Value, path: &str) -> Result<(&'v mut Value, String), String> {
    let split = path
        .rfind('/')
        .ok_or_else(|| format!("not a JSON Pointer: {path:?}"))?;
    let key = unescape(&path[split + 1..]);
    let parent = state
        .pointer_mut(&path[..split])
        .ok_or_else(|| format!("no container at {path}"))?;
    Ok((parent, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(before: Value, after: Value) -> Vec<Undo> {
        let patch = undo_patch(&before, &after);
        let mut state = after.clone();
        apply_undo(&mut state, &patch).unwrap();
        assert_eq!(state, before, "undoing {patch:?}");
        patch
    }

    #[test]
    fn an_append_is_undone_by_a_length() {
        let notes: Vec<Value> = (0..1000).map(|i| json!(format!("note {i}"))).collect();
        let before = json!({"notes": notes, "count": 1});
        let mut after = before.clone();
        after["notes"].as_array_mut().unwrap().push(json!("new"));
        let patch = round_trip(before, after);
        assert_eq!(
            patch,
            [Undo::Truncate {
                path: "/notes".into(),
                len: 1000
            }]
        );
    }

    #[test]
    fn an_item_changed_in_place_is_undone_by_that_item_alone() {
        let before = json!({"notes": ["a", "b", "c"]});
        let after = json!({"notes": ["a", "B", "c"]});
        let patch = round_trip(before, after);
        assert_eq!(
            patch,
            [Undo::Set {
                path: "/notes/1".into(),
                value: json!("b")
            }]
        );
    }

    #[test]
    fn members_items_and_whole_states_round_trip() {
        round_trip(
            json!({"a": {"x": 1, "gone": [1, 2]}, "list": [1, {"k": "v"}, 3], "a/b~c": 0}),
            json!({"a": {"x": 2, "new": null}, "list": [1, {"k": "w"}], "a/b~c": 1}),
        );
        round_trip(json!([1, 2]), json!({"now": "object"}));
        round_trip(json!({"list": [1]}), json!({"list": [2, 3, 4]}));
        round_trip(json!({"list": []}), json!({"list": "text"}));
        assert!(undo_patch(&json!({"a": 1}), &json!({"a": 1})).is_empty());
    }

    #[test]
    fn a_patch_that_does_not_fit_is_refused() {
        let patch = [Undo::Truncate {
            path: "/notes".into(),
            len: 5,
        }];
        assert!(apply_undo(&mut json!({"notes": [1]}), &patch).is_err());
        assert!(apply_undo(&mut json!({}), &patch).is_err());
        let remove = [Undo::Remove {
            path: "/a/b".into(),
        }];
        assert!(apply_undo(&mut json!({"a": [1]}), &remove).is_err());
    }
}
