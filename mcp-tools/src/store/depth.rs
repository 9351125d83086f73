//! How deep a stored value may nest, and the bounded walk that measures it.

use serde_json::Value;

/// How many levels of arrays and objects a resource's state, a mutation's result, or the
/// details of a transition's error may nest (`{"a": [1]}` nests two). A deeper one is refused
/// with `INVALID_STATE`, nothing changes and nothing is recorded.
///
/// The stores keep these as JSON text, some inside records of their own (a ledger record wraps
/// a result, an undo patch a part of a state), and read them back with a JSON parser that stops
/// at 127 levels. The bound leaves room for those records' own levels, so every store reads
/// back what it wrote, whichever process reads it, and the walks over a state (copies, deltas)
/// stay shallow.
pub const MAX_DEPTH: usize = 100;

/// Whether `value` nests arrays and objects more than `levels` deep. Never descends past
/// `levels`, so a value of any depth is measured in bounded stack.
pub(crate) fn deeper_than(value: &Value, levels: usize) -> bool {
    match value {
        Value::Array(items) => {
            levels == 0 || items.iter().any(|item| deeper_than(item, levels - 1))
        }
        Value::Object(members) => {
            levels == 0
                || members
                    .values()
                    .any(|member| deeper_than(member, levels - 1))
        }
        _ => false,
    }
}
