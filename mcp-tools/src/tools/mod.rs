//! Tools written by hand: the [`Tool`] trait and its [`ToolInfo`], the [`ToolSet`] a server
//! serves, and what a tool may return ([`IntoCallToolResult`]: text, [`Content`] blocks,
//! [`CallToolResult`], [`Structured`](crate::Structured) output, a [`ToolReply`] that may ask the
//! client for input). `#[tool]` functions generate all of it; see [`macro@crate::tool`].

pub(crate) mod docs;
pub(crate) mod extract;
pub(crate) mod formats;
pub(crate) mod reply;
pub(crate) mod set;

pub use crate::protocol::content::{CallToolResult, Content};
pub use crate::protocol::input::InputRequired;
pub use crate::protocol::recovery::DomainCode;
pub use extract::FromContext;
pub use reply::{IntoCallToolResult, ToolReply};
pub use set::ToolSet;

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use schemars::{JsonSchema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::context::Context;
use crate::protocol::reply::Reply;
use crate::protocol::tool_error::ToolError;

/// A tool: a name, a description, typed arguments and an async call.
///
/// The input schema comes from `Args` and the output schema from `Output`, so the contract a
/// model sees is the one the code compiles against. The `#[tool]` attribute generates this
/// implementation from a plain function; writing it by hand looks like this:
///
/// ```
/// use mcp_tools::Context;
/// use mcp_tools::tools::{Tool, ToolInfo};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct AddArgs {
///     /// The first addend.
///     a: i64,
///     /// The second addend.
///     b: i64,
/// }
///
/// struct Add;
///
/// impl Tool for Add {
///     type Args = AddArgs;
///     type Output = String;
///
///     fn info(&self) -> ToolInfo {
///         ToolInfo::new("add", "Adds two integers.").read_only()
///     }
///
///     async fn call(&self, args: AddArgs, _cx: Context) -> String {
///         (args.a + args.b).to_string()
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tool",
    note = "implement `mcp_tools::Tool` for it, or annotate a function with `#[mcp_tools::tool]`"
)]
pub trait Tool: Send + Sync + 'static {
    /// The decoded arguments. Their JSON Schema is the tool's input schema.
    type Args: DeserializeOwned + JsonSchema + Send + 'static;
    /// What the call returns.
    type Output: IntoCallToolResult + Send + 'static;

    /// Name, description and hints. Read once, when the server is built.
    fn info(&self) -> ToolInfo;

    /// The input schema. Defaults to the JSON Schema of `Args`; read once at build time.
    fn input_schema(&self, generator: &mut SchemaGenerator) -> Value {
        generator.root_schema_for::<Self::Args>().to_value()
    }

    /// The output schema of successful results. Defaults to the one `Output` declares.
    fn output_schema(&self, generator: &mut SchemaGenerator) -> Option<Value> {
        Self::Output::output_schema(generator)
    }

    /// The kind of entity this tool keeps in the server's store, if it is stateful (`#[tool(creates
    /// | reads | mutates = ..)]` says so). A server with a stateful tool and no
    /// [`store`](crate::McpServerBuilder::store) does not build. Read once, when the server is
    /// built.
    fn entity_kind(&self) -> Option<&'static str> {
        None
    }

    /// The kinds of the effects this tool emits ([`Effect::KIND`](crate::effects::Effect::KIND)
    /// of the `Effects<E>` a `mutates` tool takes). A server without a
    /// [handler](crate::tools::ToolSet::effect_handler) for each does not build. Read once,
    /// when the tool is added.
    fn effect_kinds(&self) -> &'static [&'static str] {
        &[]
    }

    /// Runs the tool.
    fn call(&self, args: Self::Args, cx: Context) -> impl Future<Output = Self::Output> + Send;
}

/// Whether a tool may run as a task of the Tasks extension (see [`tasks`](crate::tasks)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskSupport {
    /// Never a task (the default): every call is answered when the tool finishes.
    #[default]
    Forbidden,
    /// A task when the client declares the extension; synchronous otherwise.
    Optional,
    /// Only as a task: a client that does not declare the extension gets `-32021`.
    Required,
}

impl TaskSupport {
    /// How [`TASK_SUPPORT_META_KEY`] publishes it; `None` for a tool that never runs as a task.
    pub(crate) fn published(self) -> Option<&'static str> {
        match self {
            TaskSupport::Forbidden => None,
            TaskSupport::Optional => Some("optional"),
            TaskSupport::Required => Some("required"),
        }
    }
}

/// Arguments of a tool that takes none: accepts `{}` or no `arguments` at all.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Behaviour hints a client may show or use for confirmation prompts. Hints only: clients must
/// not trust them for security.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Display title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Repeating the call with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    fn is_empty(&self) -> bool {
        *self == ToolAnnotations::default()
    }
}

/// What a tool says about itself.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolInfo {
    /// Unique name, 1 to 64 characters of `[A-Za-z0-9_./-]`.
    pub name: Cow<'static, str>,
    /// Display name.
    pub title: Option<Cow<'static, str>>,
    /// What the tool does, for the model. Required: models choose tools by it.
    pub description: Cow<'static, str>,
    /// Behaviour hints.
    pub annotations: ToolAnnotations,
    /// Tool metadata (`_meta`).
    pub meta: Option<Map<String, Value>>,
    /// The OAuth scopes a caller's token must grant, every one of them, to see and call the
    /// tool. Enforced only when the server is an OAuth resource server
    /// ([`McpServerBuilder::oauth`](crate::McpServerBuilder::oauth)).
    pub scopes: Vec<Cow<'static, str>>,
    /// Whether calls may run as tasks (the Tasks extension); never by default.
    pub task_support: TaskSupport,
}

impl ToolInfo {
    /// A tool with a name and a description.
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
    ) -> Self {
        ToolInfo {
            name: name.into(),
            title: None,
            description: description.into(),
            annotations: ToolAnnotations::default(),
            meta: None,
            scopes: Vec::new(),
            task_support: TaskSupport::Forbidden,
        }
    }

    /// Lets calls run as tasks of the Tasks extension: the client gets a task id at once and
    /// polls for the result (see [`tasks`](crate::tasks)).
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// Requires these OAuth scopes (all of them) to see and call the tool, adding to any
    /// required already. Each is an RFC 6749 scope token (printable ASCII, no spaces, quotes or
    /// backslashes); [`build`](crate::McpServerBuilder::build) refuses one that is not.
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        self.scopes.extend(scopes.into_iter().map(Into::into));
        self
    }

    /// Sets the display title.
    pub fn title(mut self, title: impl Into<Cow<'static, str>>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Replaces the annotations.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// Adds an entry to the tool's `_meta` in `tools/list`. Keys follow the `_meta` key grammar
    /// and carry a prefix of your own; `io.modelcontextprotocol/` and `STATE_META_KEY`
    /// are taken.
    pub fn with_meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.meta
            .get_or_insert_with(Map::new)
            .insert(key.into(), value);
        self
    }

    /// Marks the tool read-only (which also makes it non-destructive and idempotent).
    pub fn read_only(mut self) -> Self {
        self.annotations.read_only_hint = Some(true);
        self
    }
}

/// The wire form of a tool in `tools/list`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolDefinition {
    pub name: Cow<'static, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<Cow<'static, str>>,
    pub description: Cow<'static, str>,
    pub input_schema: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(skip_serializing_if = "ToolAnnotations::is_empty")]
    pub annotations: ToolAnnotations,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
    /// Published in `_meta` under [`SCOPES_META_KEY`](crate::auth::SCOPES_META_KEY).
    #[serde(skip)]
    pub scopes: crate::auth::scope::Required,
    /// Published in `_meta` under [`TASK_SUPPORT_META_KEY`].
    #[serde(skip)]
    pub task_support: TaskSupport,
}

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The input schema of an arguments struct a macro generated, without the struct's internal
/// name (its `title`).
pub fn arguments_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    let mut schema = generator.root_schema_for::<T>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
    }
    schema
}

/// A tool with its types erased, so tools of different types share one registry.
pub(crate) trait ErasedTool: Send + Sync {
    fn call(&self, arguments: &Value, cx: Context) -> BoxFuture<'_, Reply>;
}

pub(crate) struct Erased<T>(pub T);

impl<T: Tool> ErasedTool for Erased<T> {
    fn call(&self, arguments: &Value, cx: Context) -> BoxFuture<'_, Reply> {
        // The arguments already passed schema validation; decoding can still fail on rules the
        // schema cannot express (custom `Deserialize` impls), and that failure goes to the model.
        // Decoding from a borrowed value leaves the arguments with the request, which a multi-round
        // answer binds its state to, without copying them.
        match T::Args::deserialize(arguments) {
            Ok(args) => Box::pin(async move { self.0.call(args, cx).await.into_reply() }),
            Err(error) => {
                let path = failing_argument::<T::Args>(arguments).unwrap_or_else(|| "/".into());
                let result = ToolError::new(
                    ToolError::INVALID_ARGUMENTS,
                    format!("Invalid arguments: at {path}: {error}"),
                )
                .with_details(serde_json::json!({
                    "violations": [{ "path": path, "message": error.to_string() }]
                }))
                .into_result();
                Box::pin(std::future::ready(Reply::Complete(result)))
            }
        }
    }
}

/// The JSON pointer of the top-level argument whose value `T` fails to decode, if the failure is
/// in one: serde's errors from a `Value` name no field, so the failing decode is run again through
/// a map that remembers which entry it was handing out.
fn failing_argument<T: DeserializeOwned>(arguments: &Value) -> Option<String> {
    let Value::Object(map) = arguments else {
        return None;
    };
    let at = std::cell::Cell::new(None);
    let decoded = T::deserialize(Arguments { map, at: &at });
    let key = decoded.err().and_then(|_| at.get())?;
    Some(format!("/{}", key.replace('~', "~0").replace('/', "~1")))
}

/// The arguments object as a deserializer that records, in `at`, the key of the entry being
/// decoded (`None` once every entry was handed out). An enum is decoded from the object as it is,
/// without recording.
struct Arguments<'de, 'a> {
    map: &'de Map<String, Value>,
    at: &'a std::cell::Cell<Option<&'de str>>,
}

impl<'de> serde::Deserializer<'de> for Arguments<'de, '_> {
    type Error = serde_json::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_map(Entries {
            entries: self.map.iter(),
            value: None,
            at: self.at,
        })
    }

    fn deserialize_enum<V: serde::de::Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        serde::de::IntoDeserializer::into_deserializer(self.map)
            .deserialize_enum(name, variants, visitor)
    }

    fn deserialize_option<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

struct Entries<'de, 'a> {
    entries: serde_json::map::Iter<'de>,
    value: Option<&'de Value>,
    at: &'a std::cell::Cell<Option<&'de str>>,
}

impl<'de> serde::de::MapAccess<'de> for Entries<'de, '_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.entries.next() else {
            self.at.set(None);
            return Ok(None);
        };
        self.at.set(Some(key));
        self.value = Some(value);
        seed.deserialize(serde::de::value::BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let value = self
            .value
            .take()
            .ok_or_else(|| serde::de::Error::custom("a value was asked for before its key"))?;
        seed.deserialize(value)
    }
}
