//! The registry of tools: collected by the user, compiled once when the server is built.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::context::Context;
use crate::protocol::content::CallToolResult;
use crate::protocol::param_headers::{ParamHeader, publish};
use crate::protocol::reply::Reply;
use crate::protocol::tool_error::ToolError;
use crate::tools::{Erased, ErasedTool, Tool, ToolDefinition};

/// An ordered collection of tools, in the order `tools/list` returns them.
///
/// ```
/// # use mcp_tools::Context;
/// # use mcp_tools::tools::{NoArgs, Tool, ToolInfo, ToolSet};
/// # struct Hello;
/// # impl Tool for Hello {
/// #     type Args = NoArgs;
/// #     type Output = &'static str;
/// #     fn info(&self) -> ToolInfo { ToolInfo::new("hello", "Says hello.") }
/// #     async fn call(&self, _: NoArgs, _: Context) -> &'static str { "hello" }
/// # }
/// let tools = ToolSet::new().with(Hello);
/// assert_eq!(tools.len(), 1);
/// ```
#[derive(Clone, Default)]
pub struct ToolSet {
    entries: Vec<Entry>,
    /// The handlers of the effects the tools emit, delivered by the server that serves them.
    handlers: Vec<crate::effects::Handler>,
}

#[derive(Clone)]
struct Entry {
    definition: ToolDefinition,
    /// The entity kind of a stateful tool.
    entity_kind: Option<&'static str>,
    /// The kinds of the effects it emits.
    effect_kinds: &'static [&'static str],
    tool: Arc<dyn ErasedTool>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool.
    pub fn with<T: Tool>(mut self, tool: T) -> Self {
        self.add(tool);
        self
    }

    /// Adds a tool.
    pub fn add<T: Tool>(&mut self, tool: T) -> &mut Self {
        let info = tool.info();
        let mut input_schema = tool.input_schema(&mut crate::protocol::schema_generator());
        crate::tools::formats::standardize(&mut input_schema);
        let output_schema = tool
            .output_schema(&mut crate::protocol::schema_generator())
            .map(with_error_branch)
            .map(|mut schema| {
                crate::tools::formats::standardize(&mut schema);
                schema
            });
        let scopes = crate::auth::scope::Required::new(info.scopes);
        let mut meta = info.meta;
        if !scopes.is_empty() {
            meta.get_or_insert_with(Default::default).insert(
                crate::protocol::framework::SCOPES_META_KEY.into(),
                scopes.iter().collect::<Vec<_>>().into(),
            );
        }
        if let Some(mode) = info.task_support.published() {
            meta.get_or_insert_with(Default::default).insert(
                crate::protocol::framework::TASK_SUPPORT_META_KEY.into(),
                mode.into(),
            );
        }
        self.entries.push(Entry {
            definition: ToolDefinition {
                name: info.name,
                title: info.title,
                description: info.description,
                input_schema,
                output_schema,
                annotations: info.annotations,
                meta,
                scopes,
                task_support: info.task_support,
            },
            entity_kind: tool.entity_kind(),
            effect_kinds: tool.effect_kinds(),
            tool: Arc::new(Erased(tool)),
        });
        self
    }

    /// Every scope some tool requires, with repeats.
    pub(crate) fn scopes(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().flat_map(|e| e.definition.scopes.iter())
    }

    /// The tool names, in order.
    pub fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| e.definition.name.to_string())
            .collect()
    }

    /// Removes the tool named `name`; whether there was one.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|entry| entry.definition.name != name);
        self.entries.len() != before
    }

    /// Registers the handler of effects of type `E`, which tools of this set emit (see
    /// [`effects`](crate::effects)): the server's delivery worker calls it with each effect a
    /// committed change emitted, until it succeeds, fails for good
    /// ([`EffectError::permanent`](crate::effects::EffectError::permanent)) or runs out of
    /// attempts. It may be called more than once for one effect (a retry, a replica that died
    /// mid-delivery), always with the same
    /// [idempotency key](crate::effects::Delivery::idempotency_key): pass that key on to the
    /// external service. What it returns is what reads report as the effect's `result`.
    ///
    /// A server whose tools emit a kind of effect with no handler, or with two, does not build.
    pub fn effect_handler<E, F, Fut, T>(mut self, handler: F) -> Self
    where
        E: crate::effects::Effect,
        F: Fn(crate::effects::Delivery<E>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<T, crate::effects::EffectError>> + Send + 'static,
        T: serde::Serialize,
    {
        self.handlers.push(crate::effects::Handler::new(handler));
        self
    }

    /// The effect handlers registered on the set.
    pub(crate) fn effect_handlers(&self) -> Vec<crate::effects::Handler> {
        self.handlers.clone()
    }

    /// Appends every tool of `other`, and its effect handlers.
    pub fn merge(mut self, other: ToolSet) -> Self {
        self.handlers.extend(other.handlers);
        self.entries.extend(other.entries);
        self
    }

    /// The names of the stateful tools, which need a store.
    pub fn stateful(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|entry| entry.entity_kind.is_some())
            .map(|entry| entry.definition.name.to_string())
            .collect()
    }

    /// Each tool that emits effects: its name, its entity kind and an effect kind, once per
    /// effect kind.
    pub(crate) fn effects(&self) -> Vec<(String, &'static str, &'static str)> {
        let mut effects = Vec::new();
        for entry in &self.entries {
            for effect in entry.effect_kinds {
                effects.push((
                    entry.definition.name.to_string(),
                    entry.entity_kind.unwrap_or_default(),
                    *effect,
                ));
            }
        }
        effects
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tool definitions as `tools/list` publishes them, as one JSON array.
    pub fn definitions(&self) -> Value {
        Value::Array(
            self.entries
                .iter()
                .map(|entry| {
                    let mut definition = entry.definition.clone();
                    // As `compile` publishes it; a tool it refuses is shown as written.
                    let _ = publish(&mut definition.input_schema);
                    serde_json::to_value(&definition).expect("definitions serialize")
                })
                .collect(),
        )
    }

    /// Checks every tool and compiles its argument validator.
    pub(crate) fn compile(&self) -> Result<Catalog, InvalidTool> {
        let mut index = HashMap::with_capacity(self.entries.len());
        let mut tools = Vec::with_capacity(self.entries.len());
        for entry in &self.entries {
            let mut definition = entry.definition.clone();
            let name = definition.name.to_string();
            if !is_valid_tool_name(&name) {
                return Err(InvalidTool::Name(name));
            }
            if definition.description.trim().is_empty() {
                return Err(InvalidTool::MissingDescription(name));
            }
            if let Some(scope) = definition.scopes.first_invalid() {
                return Err(InvalidTool::Scope {
                    tool: name,
                    scope: scope.to_owned(),
                });
            }
            if definition.input_schema.get("type") != Some(&json!("object")) {
                return Err(InvalidTool::InputSchemaNotObject(name));
            }
            let validator = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .build(&definition.input_schema)
                .map_err(|error| InvalidTool::Schema {
                    tool: name.clone(),
                    reason: error.to_string(),
                })?;
            if let Some(output) = &definition.output_schema {
                jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .build(output)
                    .map_err(|error| InvalidTool::Schema {
                        tool: name.clone(),
                        reason: error.to_string(),
                    })?;
            }
            if index.insert(name.clone(), tools.len()).is_some() {
                return Err(InvalidTool::Duplicate(name));
            }
            // After the validator is compiled, which keeps the schema as written.
            let param_headers = publish(&mut definition.input_schema).map_err(|reason| {
                InvalidTool::ParamHeader {
                    tool: name.clone(),
                    reason,
                }
            })?;
            tools.push(CompiledTool {
                param_headers,
                definition,
                validator,
                tool: entry.tool.clone(),
            });
        }
        Ok(Catalog { tools, index })
    }
}

/// Why a tool set cannot be served, found when it is compiled; the server reports it as a
/// [`BuildError`](crate::BuildError) naming what to fix.
#[derive(Debug)]
pub(crate) enum InvalidTool {
    /// Not 1 to 64 characters of `[A-Za-z0-9_./-]`.
    Name(String),
    /// Two tools share this name.
    Duplicate(String),
    MissingDescription(String),
    InputSchemaNotObject(String),
    /// A schema that is not valid JSON Schema 2020-12.
    Schema {
        tool: String,
        reason: String,
    },
    /// An `x-mcp-header` clients would drop the tool for.
    ParamHeader {
        tool: String,
        reason: String,
    },
    /// A required scope that is not a scope token.
    Scope {
        tool: String,
        scope: String,
    },
}

/// `^[A-Za-z0-9_./-]{1,64}$`: the names every client and the conformance suite accept.
pub(crate) fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-'))
}

/// Output schemas also admit the tool-error payload, since any call may end in one (invalid
/// arguments, a domain error) and `structuredContent` must always match the published schema.
fn with_error_branch(mut success: Value) -> Value {
    let Some(object) = success.as_object_mut() else {
        return success;
    };
    object.remove("$schema");
    let mut defs = match object.remove("$defs") {
        Some(Value::Object(defs)) => defs,
        _ => Default::default(),
    };
    defs.insert("McpToolError".into(), ToolError::schema());
    // `structuredContent` is always an object, and clients (the TypeScript SDK's among them)
    // refuse an output schema whose root does not say so.
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": defs,
        "anyOf": [success, { "$ref": "#/$defs/McpToolError" }]
    })
}

/// The compiled, immutable registry the request path reads.
pub(crate) struct Catalog {
    pub(crate) tools: Vec<CompiledTool>,
    index: HashMap<String, usize>,
}

pub(crate) struct CompiledTool {
    pub(crate) definition: ToolDefinition,
    pub(crate) param_headers: Vec<ParamHeader>,
    validator: jsonschema::Validator,
    tool: Arc<dyn ErasedTool>,
}

impl Catalog {
    /// Where the tool called `name` sits in [`Catalog::tools`].
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }
}

/// At most this many schema violations are reported back in one result.
const MAX_REPORTED_VIOLATIONS: usize = 8;

impl CompiledTool {
    /// Validates the arguments against the input schema, then runs the tool.
    pub(crate) async fn call(&self, arguments: &Value, cx: Context) -> Reply {
        if let Err(result) = self.validate(arguments) {
            return Reply::Complete(result);
        }
        self.tool.call(arguments, cx).await
    }

    fn validate(&self, arguments: &Value) -> Result<(), CallToolResult> {
        if self.validator.is_valid(arguments) {
            return Ok(());
        }
        let violations: Vec<Value> = self
            .validator
            .iter_errors(arguments)
            .take(MAX_REPORTED_VIOLATIONS)
            .map(|error| {
                let path = error.instance_path().to_string();
                json!({ "path": if path.is_empty() { "/".to_owned() } else { path }, "message": error.to_string() })
            })
            .collect();
        let summary = violations
            .iter()
            .map(|v| {
                format!(
                    "at {}: {}",
                    v["path"].as_str().unwrap_or("/"),
                    v["message"].as_str().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        Err(ToolError::new(
            ToolError::INVALID_ARGUMENTS,
            format!(
                "Invalid arguments for tool {}: {summary}. Fix the arguments to match the tool's input schema and call again.",
                self.definition.name
            ),
        )
        .with_details(json!({ "violations": violations }))
        .into_result())
    }
}
