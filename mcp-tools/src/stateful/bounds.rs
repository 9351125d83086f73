//! The bounds `#[tool]`'s generated code asserts, each spanned at the user's own tokens with a
//! message that says what to change.

use serde::Serialize;
use serde_json::Value;

use crate::store::Entity;

/// Holds for the type of an argument with a default of a `creates` or `mutates` tool.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has a default in a tool with an operation id, so it must implement `Serialize`",
    label = "this parameter's type must implement `Serialize`",
    note = "a retry that sends the default and one that leaves the argument out are the same request: the operation-id fingerprint compares the argument with the JSON of its default",
    note = "derive `serde::Serialize` for the type, or remove `#[arg(default)]`"
)]
pub trait DefaultArgument: Serialize {}

impl<T: Serialize> DefaultArgument for T {}

/// The JSON of an argument's default; spanned at the parameter's type by the generated code.
pub fn default_json<T: DefaultArgument>(default: &T) -> Option<Value> {
    serde_json::to_value(default).ok()
}

/// Holds for every parameter type of a `mutates` tool besides the resource.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a parameter of a `mutates` tool",
    label = "this parameter's type must implement `Clone`",
    note = "the transition may run again on a newer version of the entity (`on_conflict = rebase`), so it receives a fresh copy of each argument every time"
)]
pub trait TransitionArgument: Clone + Send + 'static {}

impl<T: Clone + Send + 'static> TransitionArgument for T {}

/// A fresh copy of a `mutates` tool's argument for one run of the transition; spanned at the
/// parameter's type by the generated code.
pub fn fresh<T: TransitionArgument>(value: &T) -> T {
    value.clone()
}

/// Holds for the type named by `creates = `, `reads = ` and `mutates = `.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an entity",
    label = "`creates`, `reads` and `mutates` name a type that implements `mcp_tools::store::Entity`",
    note = "add `#[derive(mcp_tools::store::Entity)]` and `#[entity(kind = \"...\", prefix = \"...\")]` to the type"
)]
pub trait IsEntity: Entity {}

impl<R: Entity> IsEntity for R {}

/// Compile-time assertion, spanned at the type named by the tool kind.
pub const fn assert_resource<R: IsEntity>() {}

/// Compile-time assertion for `on_conflict = items`: the entity has collections to version.
pub const fn assert_has_collections<R: IsEntity>() {
    if R::COLLECTIONS.is_empty() {
        panic!(
            "`on_conflict = items` versions the items of the entity's `Collection` fields, and this entity has none: add a `Collection<T>` field, or use `reject`, `rebase` or `reconfirm`"
        );
    }
}
