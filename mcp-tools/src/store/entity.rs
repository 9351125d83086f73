//! The typed side of stored state: resources, their kinds and lifecycles.

use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a resource is in its life. Only `terminal` refuses further mutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// Being assembled; mutable.
    Draft,
    /// In use; mutable.
    Active,
    /// Finished (checked out, closed, cancelled): readable, never mutated again.
    Terminal,
}

impl Lifecycle {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Draft => "draft",
            Lifecycle::Active => "active",
            Lifecycle::Terminal => "terminal",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "draft" => Some(Lifecycle::Draft),
            "active" => Some(Lifecycle::Active),
            "terminal" => Some(Lifecycle::Terminal),
            _ => None,
        }
    }
}

/// A stateful type kept by a store behind a handle.
///
/// The store keeps the type's JSON, so its serde implementation must round-trip: decoding what
/// it encoded gives the same value. (After a typed change, the outcome's view and the recorded
/// lifecycle are computed from the value the tool changed, and later reads from the stored JSON;
/// a field that does not survive the round trip would show in one and not the other.)
///
/// ```
/// use mcp_tools::store::{Lifecycle, Entity};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, Serialize, Deserialize, JsonSchema)]
/// struct Basket { memory_gib: u32, storage_gib: u32, checked_out: bool }
///
/// impl Entity for Basket {
///     const KIND: &'static str = "basket";
///     const PREFIX: &'static str = "bsk";
///     const TTL: Option<std::time::Duration> = Some(std::time::Duration::from_secs(3600));
///     fn lifecycle(&self) -> Lifecycle {
///         if self.checked_out { Lifecycle::Terminal } else { Lifecycle::Active }
///     }
/// }
/// ```
pub trait Entity: Serialize + DeserializeOwned + JsonSchema + Clone + Send + 'static {
    /// The kind name, e.g. `basket`; a handle of another kind is `NOT_FOUND`.
    const KIND: &'static str;
    /// The handle prefix, e.g. `bsk` for `bsk_...`.
    const PREFIX: &'static str;
    /// How long a resource lives after its last applied change; `None` keeps it forever.
    ///
    /// The expiry is rounded up to a step of at most a thousandth of this (1 ms, 10 ms, 100 ms,
    /// 1 s, 10 s or 1 min), so a resource lives at least this long after its last change, and
    /// changes within one step leave the stored expiry as it was.
    const TTL: Option<Duration> = None;

    /// What outcomes show a model of this state, when not the whole state: a basket with
    /// thousands of notes can show their count and the last few. `None` (the default) shows the
    /// whole state. `#[entity(view = method)]` sets it from `fn method(&self) -> impl Serialize`.
    const VIEW: Option<fn(&Self) -> Value> = None;

    /// The JSON Schema of what outcomes show: the view's, when [`Entity::VIEW`] is set, else the
    /// state's. It types `state` and `current_state` in the output schema of the entity's tools;
    /// a hand-written implementation that sets `VIEW` must return its schema here (for example
    /// with [`view_schema`]).
    fn view_schema(generator: &mut SchemaGenerator) -> Schema {
        generator.subschema_for::<Self>()
    }

    /// The lifecycle of this state; resources without one are always active.
    fn lifecycle(&self) -> Lifecycle {
        Lifecycle::Active
    }

    /// The serialized name of the Rust field `field` (the member of the stored JSON it is
    /// written to), or `None` when it has no single name (a flattened field). Identity by
    /// default; `#[derive(Entity)]` follows the type's `#[serde(rename...)]` attributes, and a
    /// hand-written implementation for a type that renames its fields must do the same.
    fn field_key(field: &'static str) -> Option<&'static str> {
        Some(field)
    }

    /// The serialized names of the entity's [`Collection`](super::Collection) fields, whose
    /// items are stored one by one rather than in the entity's document. `#[derive(Entity)]`
    /// lists every field whose type is named `Collection`.
    const COLLECTIONS: &'static [&'static str] = &[];

    /// The collection field stored under `name` (one of [`Entity::COLLECTIONS`]). Not API:
    /// `#[derive(Entity)]` implements it.
    #[doc(hidden)]
    fn collection(&mut self, _name: &str) -> Option<&mut dyn super::collection::Items> {
        None
    }

    /// The untyped descriptor the stores work with.
    fn kind() -> EntityKind {
        EntityKind {
            kind: Self::KIND,
            prefix: Self::PREFIX,
            ttl: Self::TTL,
            collections: Self::COLLECTIONS,
            lifecycle: lifecycle_of::<Self>,
            view: if Self::VIEW.is_some() {
                Some(view_of::<Self>)
            } else {
                None
            },
        }
    }
}

fn lifecycle_of<R: Entity>(state: &Value) -> Lifecycle {
    R::deserialize(state).map_or(Lifecycle::Active, |resource| resource.lifecycle())
}

fn view_of<R: Entity>(state: &Value) -> Value {
    match (R::VIEW, R::deserialize(state)) {
        (Some(view), Ok(resource)) => view(&resource),
        // A state its own type cannot read shows as stored rather than not at all.
        _ => state.clone(),
    }
}

/// The schema of the view a method returns, for [`Entity::view_schema`]:
/// `view_schema(Basket::summary, generator)`. The method may borrow from the entity (a view
/// type with a lifetime), since only its type is looked at.
pub fn view_schema<E: 'static, V: ViewType>(
    _view: fn(&'static E) -> V,
    generator: &mut SchemaGenerator,
) -> Schema {
    generator.subschema_for::<V>()
}

/// Holds for the type an entity's view method returns.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the view of an entity",
    label = "the view method must return a type that implements `Serialize` and `JsonSchema`",
    note = "the view's schema types `state` in the output schema of the entity's tools: add `#[derive(serde::Serialize, schemars::JsonSchema)]` to the view type"
)]
pub trait ViewType: Serialize + JsonSchema {}

impl<T: Serialize + JsonSchema> ViewType for T {}

/// The JSON of an entity's view, for [`Entity::VIEW`]; a view that cannot be serialized shows
/// as `null`.
pub fn view_json<T: Serialize>(view: &T) -> Value {
    serde_json::to_value(view).unwrap_or(Value::Null)
}

/// What a store needs to know about a resource type, without its Rust type.
#[derive(Debug, Clone, Copy)]
pub struct EntityKind {
    /// The kind name.
    pub kind: &'static str,
    /// The handle prefix.
    pub prefix: &'static str,
    /// Time to live after the last applied change (see [`Entity::TTL`] for how the expiry is
    /// rounded).
    pub ttl: Option<Duration>,
    /// Reads the lifecycle from a JSON state.
    pub lifecycle: fn(&Value) -> Lifecycle,
    /// Computes the view outcomes show from a JSON state; `None` shows the whole state.
    pub view: Option<fn(&Value) -> Value>,
    /// The serialized names of the collection fields, whose items are stored one by one.
    pub collections: &'static [&'static str],
}

impl EntityKind {
    /// A kind whose states are always active.
    pub const fn new(kind: &'static str, prefix: &'static str) -> Self {
        EntityKind {
            kind,
            prefix,
            ttl: None,
            lifecycle: always_active,
            view: None,
            collections: &[],
        }
    }

    /// Sets the collection fields, by serialized name.
    pub const fn with_collections(mut self, collections: &'static [&'static str]) -> Self {
        self.collections = collections;
        self
    }

    /// Sets how the view is computed from a state.
    pub const fn with_view(mut self, view: fn(&Value) -> Value) -> Self {
        self.view = Some(view);
        self
    }

    /// The view of `state` that outcomes show.
    pub fn view_of(&self, state: &Value) -> Value {
        match self.view {
            Some(view) => view(state),
            None => state.clone(),
        }
    }

    /// [`view_of`](Self::view_of) a stored state, sharing it when the view is the whole state.
    pub(crate) fn view_shared(&self, state: &std::sync::Arc<Value>) -> std::sync::Arc<Value> {
        match self.view {
            Some(view) => std::sync::Arc::new(view(state)),
            None => std::sync::Arc::clone(state),
        }
    }

    /// Sets the time to live.
    pub const fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets how the lifecycle is read from a state.
    pub const fn with_lifecycle(mut self, lifecycle: fn(&Value) -> Lifecycle) -> Self {
        self.lifecycle = lifecycle;
        self
    }
}

fn always_active(_: &Value) -> Lifecycle {
    Lifecycle::Active
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Clone, Serialize, Deserialize, JsonSchema)]
    struct Job {
        done: bool,
    }

    impl Entity for Job {
        const KIND: &'static str = "job";
        const PREFIX: &'static str = "job";
        fn lifecycle(&self) -> Lifecycle {
            if self.done {
                Lifecycle::Terminal
            } else {
                Lifecycle::Draft
            }
        }
    }

    #[test]
    fn typed_lifecycle_reaches_the_descriptor() {
        let kind = Job::kind();
        assert_eq!(
            (kind.lifecycle)(&json!({"done": true})),
            Lifecycle::Terminal
        );
        assert_eq!((kind.lifecycle)(&json!({"done": false})), Lifecycle::Draft);
        assert_eq!((kind.lifecycle)(&json!("garbage")), Lifecycle::Active);
        for lifecycle in [Lifecycle::Draft, Lifecycle::Active, Lifecycle::Terminal] {
            assert_eq!(Lifecycle::parse(lifecycle.as_str()), Some(lifecycle));
        }
    }
}
