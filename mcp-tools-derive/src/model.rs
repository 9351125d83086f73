//! The typed model of a `#[tool]` function, built by `parse` and read by `validate` and `expand`.

use proc_macro2::Span;
use syn::{Expr, Ident, LitBool, LitStr, Type, Visibility};

/// One tool: a free function or a method of a `#[toolbox]` impl.
pub struct ToolFn {
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
    pub read_only: Option<LitBool>,
    pub destructive: Option<LitBool>,
    pub idempotent: Option<LitBool>,
    pub open_world: Option<LitBool>,
    /// `creates = T`, `reads = T`, `mutates = T`, in the order written (more than one is an error).
    pub stateful: Vec<StatefulAttr>,
    /// `on_conflict = reject | rebase | reconfirm`.
    pub on_conflict: Option<Ident>,
    /// `touches = [field, ...]`, with the span of the key.
    pub touches: Option<(Span, Vec<Ident>)>,
    /// `expected_version = false` opts out of the version precondition.
    pub expected_version: Option<LitBool>,
    /// `operation_id = false` opts out of the idempotency key (`creates` and `mutates`).
    pub operation_id: Option<LitBool>,
}

/// What a stateful tool does with its resource.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum StatefulKind {
    Creates,
    Reads,
    Mutates,
}

impl StatefulKind {
    pub fn key(self) -> &'static str {
        match self {
            StatefulKind::Creates => "creates",
            StatefulKind::Reads => "reads",
            StatefulKind::Mutates => "mutates",
        }
    }
}

/// One of `creates = T`, `reads = T`, `mutates = T`.
pub struct StatefulAttr {
    pub key: Ident,
    pub kind: StatefulKind,
    pub ty: Type,
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
    /// The tool's arguments: a property of the input schema.
    Argument,
    /// The request context, by value.
    Context,
    /// The request context, by reference.
    ContextRef,
    /// Another value taken from the request context, such as `State<T>`.
    Extract,
    /// The resource of a `reads` (`&T`) or `mutates` (`&mut T`) tool.
    Resource { mutable: bool },
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

impl Param {
    /// The property name in the input schema.
    pub fn wire_name(&self) -> String {
        match &self.attrs.rename {
            Some(rename) => rename.value(),
            None => crate::parse::unraw(&self.ident),
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
            None => (crate::parse::unraw(&self.ident), self.ident.span()),
        }
    }

    /// The description: `description = "..."` or the doc comment.
    pub fn description(&self) -> Option<String> {
        match &self.attrs.description {
            Some(description) => Some(description.value()),
            None => self.doc.clone(),
        }
    }
}

impl ToolFn {
    /// The stateful kind, if the tool declares one.
    pub fn stateful(&self) -> Option<&StatefulAttr> {
        self.attrs.stateful.first()
    }

    /// The wire name of the handle argument: the resource type's name in `snake_case` + `_id`.
    pub fn handle_name(&self) -> Option<String> {
        let stateful = self.stateful()?;
        if stateful.kind == StatefulKind::Creates {
            return None;
        }
        let name = crate::parse::last_segment(&stateful.ty)
            .map(|(ident, _)| crate::parse::unraw(ident))
            .unwrap_or_else(|| "resource".to_owned());
        Some(format!("{}_id", crate::resource_derive::snake_case(&name)))
    }

    /// Whether a `mutates` tool takes `expected_version`.
    pub fn takes_expected_version(&self) -> bool {
        self.attrs
            .expected_version
            .as_ref()
            .is_none_or(|flag| flag.value)
    }

    /// Whether a `creates` or `mutates` tool takes `operation_id`.
    pub fn takes_operation_id(&self) -> bool {
        self.attrs
            .operation_id
            .as_ref()
            .is_none_or(|flag| flag.value)
    }
}
