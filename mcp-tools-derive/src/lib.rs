//! Attribute macros for `mcp-tools`. Use them through the `mcp_tools` crate, which re-exports
//! them and documents them: `#[tool]`, `#[toolbox]` and `#[derive(IntoToolError)]`.
//!
//! Every macro runs the same pipeline (`expand`): `parse` builds the typed `model` (attribute
//! lists through the shared `attr` parser), `validate` checks its rules, and `codegen` runs only
//! when the `ctxt` collector holds no error, so all mistakes are reported in one build.

#![forbid(unsafe_code)]

mod attr;
mod codegen;
mod ctxt;
mod expand;
mod model;
mod naming;
mod parse;
mod validate;

use proc_macro::TokenStream;

/// Turns a plain function into an MCP tool.
///
/// ```
/// use mcp_tools::{ToolError, tool, tools};
/// # #[derive(serde::Serialize, schemars::JsonSchema)]
/// # struct Sum { sum: i64 }
///
/// /// Adds two integers.
/// ///
/// /// The whole doc comment is the tool description.
/// #[tool(title = "Add", read_only)]
/// fn add(
///     /// The first addend.
///     a: i64,
///     #[arg(default = 1, description = "The second addend.")] b: i64,
/// ) -> Result<Sum, ToolError> {
///     let sum = a.checked_add(b).ok_or_else(|| ToolError::new("OVERFLOW", "too large"))?;
///     Ok(Sum { sum })
/// }
///
/// let set = tools![add]; // or ToolSet::new().with(add::tool())
/// ```
///
/// * **Name** from the function (without `r#`) or `name = "..."`, checked at compile time against
///   `^[A-Za-z0-9_./-]{1,64}$`. **Description** from the doc comment, whole, or
///   `description = "..."`; one of them is required. Optional `title = "..."`.
/// * **Annotations**: `read_only`, `destructive`, `idempotent`, `open_world` (alone for `true`,
///   or `= false`); left out, the hint is not published.
/// * **Scopes**: `scopes = ["basket:read", "audit"]` lists the OAuth scopes the caller's token
///   must grant, every one of them, to see the tool in `tools/list` and to call it. They are
///   enforced when the server is an OAuth resource server (`McpServerBuilder::oauth`) and
///   published in the tool's `_meta` under `io.github.mcp-tools/scopes`. Each is an RFC 6749
///   scope token (printable ASCII without spaces, quotes or backslashes), checked at compile
///   time; the list cannot be empty or name a scope twice.
/// * **Parameters** become the properties of the input schema (a hidden struct deriving
///   `Deserialize` and `JsonSchema`, unknown properties rejected). `Option<T>` is optional;
///   `#[arg(default)]` / `#[arg(default = expr)]` give a default; `#[arg(rename = "...")]` sets
///   the wire name; doc comments on parameters or `#[arg(description = "...")]` describe them.
///   A parameter of type `Context` or `&Context` receives the request context and `State<T>`
///   the state registered with `McpServerBuilder::state`; neither is part of the schema. Types
///   are recognised by their last path segment (`Context`, `State<..>`).
/// * **Return type**: `String`, `&'static str`, `Content`, `Vec<Content>`, `CallToolResult` or
///   `Structured<T>` give content without an output schema; any other type must implement
///   `Serialize + JsonSchema` and is returned as `structuredContent` with an output schema and
///   a text mirror. `Result<T, E>` follows the same rule for `T`; `E: IntoToolError` becomes an
///   `isError` result with a stable `code`.
/// * **Registration**: the function stays as written and callable; the attribute adds a
///   zero-sized type of the same name (types and functions live in different namespaces) whose
///   `tool()` constructor returns the `Tool`. `mcp_tools::tools![a, b]` builds a `ToolSet`.
///
/// * **Stateful kinds**: `creates = R`, `reads = R` (a `&R` parameter) and `mutates = R` (a
///   synchronous transition over a `&mut R` parameter) run the function against the state store
///   registered with `McpServerBuilder::store(..)`, where `R` derives
///   `mcp_tools::store::Entity`. A mutation takes `on_conflict = reject | rebase | reconfirm |
///   items` (`items`: only a change of the `Collection` items the transition reaches since
///   `expected_version` refuses it), `touches = [field, ...]` (with `rebase`),
///   `expected_version = false` (the change commutes: no precondition),
///   `operation_id = false` and `terminal` (the transition ends the resource: published
///   `destructiveHint: true`); a create takes `operation_id = false`. The macro adds the handle
///   argument (`basket_id` for `Basket`), `expected_version` (a version number or a validator)
///   and `operation_id` (to creates too), and to reads an optional `basis_version` that asks
///   what changed since (and, for an entity with collections, `items_cursor` for the next page
///   of items). It publishes the tool's own outcome union as the output schema (the
///   entity's view in `state`, the function's type in `result`, every code with its recovery
///   hint, from `#[derive(IntoToolError)]` on the error type), the concurrency contract in `_meta`
///   under `io.github.mcp-tools/state`, marks reads read-only and creates and mutations with an
///   operation id idempotent. A `creates` tool's
///   function runs only once the store has claimed the operation id, so a retry replays
///   without running it again. The payload fingerprint of an operation id leaves out an
///   optional argument sent as `null` and an argument sent as its default (whose type must then
///   implement `Serialize`), and writes whole floats as integers, so retries from clients that
///   write arguments differently still replay.
///
/// Mistakes are compile errors pointing at the offending token, all reported in one build; the
/// function is still emitted so the rest of the crate keeps compiling. `self` is only accepted
/// inside an impl marked [`macro@toolbox`].
#[proc_macro_attribute]
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::tool(args.into(), input.into()).into()
}

/// Publishes the `#[tool]` methods of an inherent impl block as tools sharing one server value.
///
/// ```
/// use std::sync::{Arc, Mutex};
///
/// use mcp_tools::{tool, toolbox};
///
/// #[derive(Default)]
/// struct Notes { notes: Mutex<Vec<String>> }
///
/// #[toolbox]
/// impl Notes {
///     /// Stores a note.
///     #[tool(name = "notes.add")]
///     fn add(&self, text: String) -> String {
///         let mut notes = self.notes.lock().unwrap();
///         notes.push(text);
///         format!("{} notes", notes.len())
///     }
/// }
///
/// let set = Arc::new(Notes::default()).tool_set();
/// ```
///
/// Adds `fn tool_set(self: Arc<Self>) -> ToolSet`. The `#[tool]` attributes inside are read by
/// `#[toolbox]`, which names them as they are written: `tool` must be in scope, as above, or be
/// written `#[mcp_tools::tool]`. Tool methods take `&self` (or no receiver);
/// their parameters and return types follow the rules of [`macro@tool`]. Methods without
/// `#[tool]` are left alone. The impl cannot be generic or a trait impl.
#[proc_macro_attribute]
pub fn toolbox(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::toolbox(args.into(), input.into()).into()
}

/// Implements `IntoToolError` for an error type that implements `Display`, declaring its codes.
///
/// ```
/// use mcp_tools::IntoToolError;
///
/// #[derive(Debug, IntoToolError)]
/// enum BookingError {
///     /// The room is taken for those nights.
///     #[recovery = "refresh_and_replan"]
///     RoomTaken { room: String },
///     /// The hotel does not know that room.
///     #[code = "NOT_FOUND"]
///     #[recovery = "stop"]
///     NoSuchRoom,
///     /// The booking needs the manager's approval; ask them, then book again.
///     #[recovery(custom = "ask_the_manager")]
///     NeedsApproval,
/// }
///
/// impl std::fmt::Display for BookingError {
///     // The message the model reads.
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         match self {
///             BookingError::RoomTaken { room } => write!(f, "room {room} is taken"),
///             BookingError::NoSuchRoom => f.write_str("no such room"),
///             BookingError::NeedsApproval => f.write_str("the manager must approve"),
///         }
///     }
/// }
/// ```
///
/// * **Code**: each enum variant's is `#[code = "..."]` or, without it, the variant name in
///   `UPPER_SNAKE_CASE` (`ROOM_TAKEN` above); a struct's is its `#[code = "..."]` or its name.
/// * **Description**: the doc comment of the variant (or struct), whole.
/// * **Recovery hint** (optional): `#[recovery = "..."]` with a hint the framework knows
///   (`refresh_and_replan`, `reconfirm`, `stop`, `create_new`, `new_operation_id`,
///   `retry_later`), or `#[recovery(custom = "...")]` with a `snake_case` hint of your own that
///   the description explains. `into_tool_error` attaches it with `ToolError::with_recovery`.
/// * **Declared codes**: `IntoToolError::declared_codes()` lists one `DomainCode` per distinct
///   code, in declaration order. Variants may share a code if they give it the same doc comment
///   and hint.
///
/// The message is the `Display` text. Mistakes (an unknown hint, a custom hint that is not
/// `snake_case`, a shared code declared two ways) are compile errors at the offending token.
#[proc_macro_derive(IntoToolError, attributes(code, recovery))]
pub fn derive_tool_error(input: TokenStream) -> TokenStream {
    expand::tool_error(input.into()).into()
}

/// Implements `mcp_tools::store::Entity` for a struct kept by a state store behind a handle.
///
/// ```
/// use mcp_tools::store::{Entity, Lifecycle};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
/// #[entity(kind = "basket", prefix = "bsk", ttl_secs = 86400, lifecycle = lifecycle)]
/// struct Basket { memory_gib: u32, storage_gib: u32, checked_out: bool }
///
/// impl Basket {
///     fn lifecycle(&self) -> Lifecycle {
///         if self.checked_out { Lifecycle::Terminal } else { Lifecycle::Active }
///     }
/// }
/// ```
///
/// * `prefix` (required): the handle prefix, 1 to 16 lowercase letters or digits; handles look
///   like `bsk_<160 random bits>`.
/// * `kind`: the kind name (default: the type name in `snake_case`); a handle of another kind is
///   `NOT_FOUND`.
/// * `ttl_secs`: how long a resource lives after its last applied change (default: forever);
///   the expiry is rounded up to a step of at most a thousandth of it (one minute for a day).
/// * `lifecycle`: a method `fn(&self) -> Lifecycle`; only `Terminal` refuses further changes
///   (default: always active).
/// * `view`: a method `fn(&self) -> impl Serialize` giving what outcomes show of the state
///   (`Entity::VIEW`), e.g. a count and the last few of a long list (default: the whole state).
///
/// The type must be a non-generic struct with named fields. Its serde names are followed:
/// `#[serde(rename_all = "...")]` (or `rename_all(serialize = "...")`) on the type and
/// `#[serde(rename = "...")]` on a field give `Entity::field_key`, which maps the Rust names
/// of `#[tool(mutates = .., touches = [..])]` to the stored members; a `#[serde(flatten)]`
/// field has no single member, so a rebase that touches it refuses every intervening change.
#[proc_macro_derive(Entity, attributes(entity))]
pub fn derive_entity(input: TokenStream) -> TokenStream {
    expand::resource(input.into()).into()
}

/// The recovery hints the macros know, as `[(wire name, variant name), ..]`: the runtime's test
/// compares them with `mcp_tools::Recovery`'s, so the two lists cannot drift apart. Not API.
#[doc(hidden)]
#[proc_macro]
pub fn __known_recoveries(_: TokenStream) -> TokenStream {
    let pairs = model::KNOWN_RECOVERIES.iter().map(|(name, variant)| {
        let variant = proc_macro2::Ident::new(variant, proc_macro2::Span::call_site());
        quote::quote!((#name, ::mcp_tools::Recovery::#variant))
    });
    quote::quote!([#(#pairs),*]).into()
}
