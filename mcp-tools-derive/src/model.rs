//! The typed model of what the macros read: tools (`#[tool]` functions and `#[toolbox]` methods),
//! resources (`#[derive(Entity)]`) and tool errors (`#[derive(IntoToolError)]`). `parse` builds it,
//! `validate` checks its rules, `codegen` turns it into code. Attribute values are already typed
//! here: nothing downstream looks at an attribute's tokens again.

use proc_macro2::Span;
use syn::{Attribute, Expr, Generics, Ident, LitBool, LitStr, Path, Type, Visibility};

use crate::attr::Key;
use crate::naming::{handle_argument, snake_case, unraw};

/// The keys of `#[tool(...)]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ToolKey {
    Name,
    Title,
    Description,
    ReadOnly,
    Destructive,
    Idempotent,
    OpenWorld,
    Scopes,
    Stateful(StatefulKind),
    OnConflict,
    Touches,
    ExpectedVersion,
    OperationId,
    Terminal,
    Step,
    Task,
}

impl Key for ToolKey {
    const ATTR: &'static str = "tool";
    const NAMES: &'static [(&'static str, Self)] = &[
        ("name", ToolKey::Name),
        ("title", ToolKey::Title),
        ("description", ToolKey::Description),
        ("read_only", ToolKey::ReadOnly),
        ("destructive", ToolKey::Destructive),
        ("idempotent", ToolKey::Idempotent),
        ("open_world", ToolKey::OpenWorld),
        ("scopes", ToolKey::Scopes),
        ("creates", ToolKey::Stateful(StatefulKind::Creates)),
        ("reads", ToolKey::Stateful(StatefulKind::Reads)),
        ("mutates", ToolKey::Stateful(StatefulKind::Mutates)),
        ("on_conflict", ToolKey::OnConflict),
        ("touches", ToolKey::Touches),
        ("expected_version", ToolKey::ExpectedVersion),
        ("operation_id", ToolKey::OperationId),
        ("terminal", ToolKey::Terminal),
        ("step", ToolKey::Step),
        ("task", ToolKey::Task),
    ];
}

/// The keys of `#[arg(...)]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ArgKey {
    Default,
    Rename,
    Description,
}

impl Key for ArgKey {
    const ATTR: &'static str = "arg";
    const NAMES: &'static [(&'static str, Self)] = &[
        ("default", ArgKey::Default),
        ("rename", ArgKey::Rename),
        ("description", ArgKey::Description),
    ];
}

/// The keys of `#[entity(...)]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ResourceKey {
    Kind,
    Prefix,
    TtlSecs,
    Lifecycle,
    View,
}

impl Key for ResourceKey {
    const ATTR: &'static str = "entity";
    const NAMES: &'static [(&'static str, Self)] = &[
        ("kind", ResourceKey::Kind),
        ("prefix", ResourceKey::Prefix),
        ("ttl_secs", ResourceKey::TtlSecs),
        ("lifecycle", ResourceKey::Lifecycle),
        ("view", ResourceKey::View),
    ];
}

/// One tool: a free function or a method of a `#[toolbox]` impl.
pub struct ToolFn {
    pub place: Place,
    pub attrs: ToolAttrs,
    /// The doc comment, whole, with the one leading space of each line removed.
    pub doc: Option<String>,
    pub vis: Visibility,
    pub ident: Ident,
    pub is_async: bool,
    /// The `async` keyword, where errors about it point.
    pub async_span: Option<Span>,
    pub receiver: Option<Receiver>,
    pub params: Vec<Param>,
    pub output: Output,
    /// The return type, where errors about it point.
    pub return_span: Span,
}

/// Where the function sits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A free function with `#[tool]`.
    Free,
    /// A method of an impl marked `#[toolbox]`.
    Toolbox,
}

/// The `self` of a method.
pub struct Receiver {
    pub span: Span,
    /// Whether it is `&self`, the only form a tool method may take.
    pub is_shared_ref: bool,
}

/// The keys of `#[tool(...)]`.
#[derive(Default)]
pub struct ToolAttrs {
    pub name: Option<LitStr>,
    pub title: Option<LitStr>,
    pub description: Option<LitStr>,
    pub read_only: Option<Flag>,
    pub destructive: Option<Flag>,
    pub idempotent: Option<Flag>,
    pub open_world: Option<Flag>,
    /// `scopes = ["...", ...]`: the OAuth scopes a caller's token must grant.
    pub scopes: Option<Scopes>,
    /// `creates = T`, `reads = T`, `mutates = T`, in the order written (more than one is an error).
    pub stateful: Vec<Stateful>,
    pub on_conflict: Option<OnConflict>,
    pub touches: Option<Touches>,
    /// `expected_version = false` opts out of the version precondition.
    pub expected_version: Option<Flag>,
    /// `operation_id = false` opts out of the idempotency key (`creates` and `mutates`).
    pub operation_id: Option<Flag>,
    /// `terminal`: the transition ends the resource's life (published `destructiveHint: true`).
    pub terminal: Option<Flag>,
    /// `step`: the tool changes several entities at once, each a `&mut Entity` parameter.
    pub step: Option<Flag>,
    /// `task = optional | required`: calls may (or must) run as tasks of the Tasks extension.
    pub task: Option<TaskMode>,
}

/// `task = optional | required`.
pub struct TaskMode {
    /// Whether a client must take the call as a task.
    pub required: bool,
    /// The mode as written, where errors about it point.
    pub span: Span,
}

/// A boolean key: `key` alone is `true`, `key = false` is explicit.
#[derive(Clone, Copy)]
pub struct Flag {
    pub value: bool,
    /// The `true`/`false` literal, or the key when written alone.
    pub span: Span,
}

impl From<LitBool> for Flag {
    fn from(lit: LitBool) -> Self {
        Flag {
            value: lit.value,
            span: lit.span,
        }
    }
}

impl Flag {
    /// The literal, spanned where the user wrote it.
    pub fn lit(self) -> LitBool {
        LitBool::new(self.value, self.span)
    }
}

/// What a stateful tool does with its resource.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum StatefulKind {
    Creates,
    Reads,
    Mutates,
}

impl StatefulKind {
    /// The key that declares it, as users write it.
    pub fn name(self) -> &'static str {
        ToolKey::Stateful(self).name()
    }
}

/// One of `creates = T`, `reads = T`, `mutates = T`.
pub struct Stateful {
    pub kind: StatefulKind,
    /// The key, where errors about a second kind point.
    pub key_span: Span,
    pub ty: Type,
    /// The last segment of `ty` without `r#`, which names the handle argument; `None` when
    /// `ty` is not a path.
    pub type_name: Option<String>,
}

/// How a mutation resolves a change that happened since the caller's version.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ConflictPolicy {
    /// Any intervening change refuses the call.
    Reject,
    /// Re-run on the newer version when the change touched none of `touches`.
    Rebase,
    /// The caller must confirm again.
    Reconfirm,
    /// Only a change of the collection items the transition reaches refuses the call.
    Items,
}

impl ConflictPolicy {
    const NAMES: &[(&str, ConflictPolicy)] = &[
        ("reject", ConflictPolicy::Reject),
        ("rebase", ConflictPolicy::Rebase),
        ("reconfirm", ConflictPolicy::Reconfirm),
        ("items", ConflictPolicy::Items),
    ];

    /// The policy called `name` in `on_conflict = name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, policy)| *policy)
    }
}

/// `on_conflict = reject | rebase | reconfirm | items`.
pub struct OnConflict {
    pub policy: ConflictPolicy,
    /// The policy as written, where errors about it point.
    pub span: Span,
}

/// `touches = [field, ...]`.
pub struct Touches {
    /// The key, where errors about it point.
    pub span: Span,
    pub fields: Vec<Ident>,
}

/// `scopes = ["...", ...]`.
pub struct Scopes {
    /// The brackets, where an error about an empty list points.
    pub span: Span,
    /// The scopes as written, in order; each literal is where errors about it point.
    pub scopes: Vec<LitStr>,
}

/// One parameter of the function.
pub struct Param {
    /// The binding, `r#` kept, as the arguments struct field.
    pub ident: Ident,
    pub ty: Type,
    pub kind: ParamKind,
    pub attrs: ArgAttrs,
    /// The doc comment on the parameter.
    pub doc: Option<String>,
}

/// Where a parameter's value comes from.
pub enum ParamKind {
    /// The tool's arguments: a property of the input schema. `optional` for an `Option<T>`.
    Argument { optional: bool },
    /// The request context, by value.
    Context,
    /// The request context, by reference.
    ContextRef,
    /// Another value taken from the request context, such as `State<T>`.
    Extract,
    /// The resource of a `reads` (`&T`) or `mutates` (`&mut T`) tool.
    Resource { mutable: bool },
    /// The effects a `mutates` transition emits: `&mut Effects<E>`. `effect` is `E` when the
    /// type names exactly one; `mutable` whether it is a `&mut` reference.
    Effects {
        effect: Option<Box<Type>>,
        mutable: bool,
    },
}

/// The keys of `#[arg(...)]`.
#[derive(Default)]
pub struct ArgAttrs {
    /// The first `#[arg]` attribute, for spans.
    pub span: Option<Span>,
    pub rename: Option<LitStr>,
    pub description: Option<LitStr>,
    pub default: Option<ArgDefault>,
}

/// `#[arg(default)]` or `#[arg(default = expr)]`.
pub enum ArgDefault {
    Trait,
    Expr(Box<Expr>),
}

/// What the function returns, and how it becomes a result.
pub enum Output {
    /// No return type: rejected by validation.
    Unit(Span),
    /// A value that already converts into a result (text, content, `CallToolResult`, `Structured`).
    Plain(Type),
    /// A `Serialize + JsonSchema` value, wrapped in `Structured`.
    Structured(Type),
    /// `Result<T, E>`, `T` following the two rules above.
    Result { ok: Box<Output>, err: Type },
    /// A form the macro cannot handle, with the reason.
    Unsupported(Span, &'static str),
}

/// The hints of `ToolAnnotations`, each `None` when it is not published.
pub struct Hints {
    pub read_only: Option<Flag>,
    pub destructive: Option<Flag>,
    pub idempotent: Option<Flag>,
    pub open_world: Option<Flag>,
}

impl Param {
    /// The property name in the input schema.
    pub fn wire_name(&self) -> String {
        match &self.attrs.rename {
            Some(rename) => rename.value(),
            None => unraw(&self.ident),
        }
    }

    /// The span a mistake about the wire name points at.
    pub fn wire_span(&self) -> Span {
        match &self.attrs.rename {
            Some(rename) => rename.span(),
            None => self.ident.span(),
        }
    }
}

impl ToolFn {
    /// The tool name: `name = "..."` or the function name.
    pub fn name(&self) -> (String, Span) {
        match &self.attrs.name {
            Some(name) => (name.value(), name.span()),
            None => (unraw(&self.ident), self.ident.span()),
        }
    }

    /// The description: `description = "..."` or the doc comment.
    pub fn description(&self) -> Option<String> {
        match &self.attrs.description {
            Some(description) => Some(description.value()),
            None => self.doc.clone(),
        }
    }

    /// The stateful kind, if the tool declares one.
    pub fn stateful(&self) -> Option<&Stateful> {
        self.attrs.stateful.first()
    }

    pub fn kind(&self) -> Option<StatefulKind> {
        self.stateful().map(|stateful| stateful.kind)
    }

    /// The effect type of the `&mut Effects<E>` parameter, if the tool takes one.
    pub fn effect_type(&self) -> Option<&Type> {
        self.params.iter().find_map(|param| match &param.kind {
            ParamKind::Effects {
                effect: Some(effect),
                mutable: true,
            } => Some(&**effect),
            _ => None,
        })
    }

    /// The wire name of the handle argument of a `reads` or `mutates` tool.
    pub fn handle_name(&self) -> Option<String> {
        let stateful = self.stateful()?;
        if stateful.kind == StatefulKind::Creates {
            return None;
        }
        Some(handle_argument(
            stateful.type_name.as_deref().unwrap_or("entity"),
        ))
    }

    /// Whether the input schema has `expected_version`: mutations, unless opted out.
    pub fn takes_expected_version(&self) -> bool {
        self.kind() == Some(StatefulKind::Mutates)
            && self.attrs.expected_version.is_none_or(|flag| flag.value)
    }

    /// The Rust names of the fields `touches = [..]` lists, without `r#`.
    pub fn touched_fields(&self) -> Vec<String> {
        self.attrs
            .touches
            .iter()
            .flat_map(|touches| touches.fields.iter().map(unraw))
            .collect()
    }

    /// Whether the tool is a step over several entities (`step`).
    pub fn is_step(&self) -> bool {
        self.attrs.step.is_some_and(|flag| flag.value)
    }

    /// A step's entity parameters, in order: each one's parameter and whether it is `&mut`.
    pub fn step_resources(&self) -> Vec<(&Param, bool)> {
        self.params
            .iter()
            .filter_map(|param| match param.kind {
                ParamKind::Resource { mutable } => Some((param, mutable)),
                _ => None,
            })
            .collect()
    }

    /// Whether the tool declares that its transition ends the resource's life.
    pub fn is_terminal(&self) -> bool {
        self.attrs.terminal.is_some_and(|flag| flag.value)
    }

    /// Whether the input schema has `operation_id`: creates and mutations, unless opted out.
    pub fn takes_operation_id(&self) -> bool {
        matches!(
            self.kind(),
            Some(StatefulKind::Creates | StatefulKind::Mutates)
        ) && self.attrs.operation_id.is_none_or(|flag| flag.value)
    }

    /// The conflict policy of a mutation: `reject` unless written otherwise.
    pub fn conflict_policy(&self) -> ConflictPolicy {
        self.attrs
            .on_conflict
            .as_ref()
            .map_or(ConflictPolicy::Reject, |on_conflict| on_conflict.policy)
    }

    /// The published hints: an explicit key wins; otherwise reads are read-only, and creates
    /// and mutations with an operation id are idempotent (a retry with the same id replays).
    pub fn hints(&self) -> Hints {
        let derived = |flag: Option<Flag>, derive: bool| {
            flag.or(derive.then_some(Flag {
                value: true,
                span: Span::call_site(),
            }))
        };
        Hints {
            read_only: derived(
                self.attrs.read_only,
                self.kind() == Some(StatefulKind::Reads),
            ),
            destructive: derived(self.attrs.destructive, self.is_terminal()),
            idempotent: derived(
                self.attrs.idempotent,
                self.takes_operation_id() || self.is_step(),
            ),
            open_world: self.attrs.open_world,
        }
    }
}

/// A type deriving `Resource`.
pub struct Resource {
    pub ident: Ident,
    pub attrs: ResourceAttrs,
    /// The generics, when there are any (rejected by validation).
    pub generics: Option<Generics>,
    /// Whether it is a struct with named fields, the only shape a resource can have.
    pub has_named_fields: bool,
    /// The named fields and the members of the stored JSON they are written to.
    pub fields: Vec<EntityField>,
    /// `#[serde(...)]` keys on the type that make its state something else than an object of
    /// its fields.
    pub container_shapes: Vec<SerdeUse>,
}

/// A named field of an entity.
pub struct EntityField {
    /// The Rust name, without `r#`, as `touches = [...]` names it.
    pub name: String,
    /// The serialized name serde writes it under; `None` when it is flattened into the parent.
    pub key: Option<String>,
    /// The field as written, for the generated code to reach it.
    pub ident: Ident,
    /// Its type is named `Collection`: its items are stored one by one.
    pub collection: bool,
}

/// A `#[serde(...)]` attribute and the first unsupported key in it.
pub struct SerdeUse {
    pub attr: Attribute,
    pub key: String,
}

/// The keys of `#[entity(...)]`.
#[derive(Default)]
pub struct ResourceAttrs {
    pub kind: Option<LitStr>,
    pub prefix: Option<LitStr>,
    pub ttl_secs: Option<TtlSecs>,
    /// A method `fn(&self) -> Lifecycle`.
    pub lifecycle: Option<Ident>,
    /// `view = method`: a method `fn(&self) -> impl Serialize`, or the path of a function
    /// `fn(&Self) -> impl Serialize`.
    pub view: Option<Path>,
}

/// `ttl_secs = N`.
pub struct TtlSecs {
    pub secs: u64,
    /// The number as written, where errors about it point.
    pub span: Span,
}

impl Resource {
    /// The kind: `kind = "..."` or the type name in `snake_case`.
    pub fn kind(&self) -> String {
        match &self.attrs.kind {
            Some(kind) => kind.value(),
            None => snake_case(&unraw(&self.ident)),
        }
    }
}

/// A type deriving `ToolError`.
pub struct ToolErrorType {
    pub ident: Ident,
    pub generics: Generics,
    pub codes: ErrorCodes,
}

/// Where the code of each value comes from.
pub enum ErrorCodes {
    /// One code per variant.
    Enum(Vec<ErrorVariant>),
    /// One code for the struct.
    Struct(ErrorCode),
}

/// A variant of an error enum.
pub struct ErrorVariant {
    pub ident: Ident,
    pub fields: VariantFields,
    pub code: ErrorCode,
}

/// What a value of the error type declares about its code.
pub struct ErrorCode {
    pub code: String,
    /// The doc comment of the variant (or struct).
    pub description: Option<String>,
    /// `#[recovery = "..."]` or `#[recovery(custom = "...")]`.
    pub recovery: Option<RecoveryHint>,
}

/// A recovery hint as `#[recovery]` names it.
#[derive(Clone, PartialEq, Eq)]
pub enum RecoveryHint {
    /// One the framework knows, by the name of its `mcp_tools::Recovery` variant.
    Known(&'static str),
    /// `#[recovery(custom = "...")]`.
    Custom(String),
}

/// The hints of `mcp_tools::Recovery` (the derive cannot depend on the runtime crate): each
/// wire name with its variant, in the order of `Recovery::known_names()`.
pub const KNOWN_RECOVERIES: &[(&str, &str)] = &[
    ("refresh_and_replan", "RefreshAndReplan"),
    ("reconfirm", "Reconfirm"),
    ("stop", "Stop"),
    ("create_new", "CreateNew"),
    ("new_operation_id", "NewOperationId"),
    ("retry_later", "RetryLater"),
];

impl RecoveryHint {
    /// The wire name.
    pub fn name(&self) -> &str {
        match self {
            RecoveryHint::Known(variant) => KNOWN_RECOVERIES
                .iter()
                .find(|(_, known)| known == variant)
                .map(|(name, _)| *name)
                .expect("every known hint has a name"),
            RecoveryHint::Custom(name) => name,
        }
    }
}

/// The keys of `#[recovery(...)]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RecoveryKey {
    Custom,
}

impl Key for RecoveryKey {
    const ATTR: &'static str = "recovery";
    const NAMES: &'static [(&'static str, Self)] = &[("custom", RecoveryKey::Custom)];
}

/// The shape of a variant, for its match pattern.
#[derive(Clone, Copy)]
pub enum VariantFields {
    Named,
    Unnamed,
    Unit,
}
