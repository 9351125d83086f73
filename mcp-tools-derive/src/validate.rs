//! Semantic rules, checked on the model. Every mistake is recorded with its span and all of them
//! are reported together, so one build shows them all.

use std::collections::HashMap;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Safety, Signature, Type};

use crate::model::{ArgDefault, Output, ParamKind, ToolFn};

/// Accumulates errors; `finish` combines them into one.
#[derive(Default)]
pub struct Errors(Option<syn::Error>);

impl Errors {
    pub fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(first) => first.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub fn at(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    pub fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub fn finish(self) -> Result<(), syn::Error> {
        match self.0 {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// Argument names the runtime keeps for itself (optimistic concurrency, operation resumption,
/// protocol metadata).
pub const RESERVED_NAMES: &[&str] = &["expected_version", "operation_id", "_meta"];

/// Where the function sits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A free function with `#[tool]`.
    Free,
    /// A method of an impl marked `#[toolbox]`.
    Toolbox,
}

/// Rules on the signature itself.
pub fn signature(sig: &Signature, place: Place, errors: &mut Errors) {
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        let span = if sig.generics.params.is_empty() {
            sig.generics.where_clause.span()
        } else {
            sig.generics.span()
        };
        errors.at(
            span,
            "a tool function cannot be generic: its input and output schemas must be known when the server is built; use concrete types",
        );
    }
    if let Some(constness) = &sig.constness {
        errors.spanned(
            constness,
            "a tool function cannot be `const`; remove `const`",
        );
    }
    if let Safety::Unsafe(unsafety) = &sig.safety {
        errors.spanned(
            unsafety,
            "a tool function cannot be `unsafe`: the runtime calls it with arguments from the network; wrap the unsafe code in a safe function",
        );
    }
    if let Some(abi) = &sig.abi {
        errors.spanned(
            abi,
            "a tool function cannot have an `extern` ABI; remove it",
        );
    }
    if let Some(variadic) = &sig.variadic {
        errors.spanned(variadic, "a tool function cannot be variadic");
    }
    if place == Place::Free
        && let Some(receiver) = sig.receiver()
    {
        errors.spanned(
            receiver,
            "`self` is only allowed in `#[tool]` methods of an impl block marked `#[mcp_tools::toolbox]`; add `#[mcp_tools::toolbox]` to the impl block, or make this a free function",
        );
    }
}

/// Rules on the modelled tool.
pub fn tool(tool: &ToolFn, place: Place, errors: &mut Errors) {
    let (name, name_span) = tool.name();
    if !is_valid_tool_name(&name) {
        errors.at(
            name_span,
            format!(
                "invalid tool name `{name}`: a tool name is 1 to 64 characters of `A-Z a-z 0-9 _ . / -`; choose another with `#[tool(name = \"...\")]`"
            ),
        );
    }
    if let Some(title) = &tool.attrs.title
        && title.value().trim().is_empty()
    {
        errors.spanned(title, "the title is empty; remove `title` or give it text");
    }
    match tool.description() {
        None => errors.at(
            tool.ident.span(),
            format!(
                "tool `{name}` has no description: models choose tools by it; add a doc comment (`/// What the tool does.`) or `#[tool(description = \"...\")]`"
            ),
        ),
        Some(text) if text.trim().is_empty() => {
            if let Some(description) = &tool.attrs.description {
                errors.spanned(
                    description,
                    "the description is empty; say what the tool does",
                );
            }
        }
        Some(_) => {}
    }
    if place == Place::Toolbox
        && let Some(receiver) = &tool.receiver
        && !receiver.is_shared_ref
    {
        errors.at(
            receiver.span,
            "a tool method takes `&self`: the toolbox is shared between concurrent calls; use `&self` with interior mutability",
        );
    }

    let mut seen: HashMap<String, Span> = HashMap::new();
    let mut context_params = 0;
    for param in &tool.params {
        match param.kind {
            ParamKind::Argument => {}
            ParamKind::Context | ParamKind::ContextRef | ParamKind::Extract => {
                if matches!(param.kind, ParamKind::Context | ParamKind::ContextRef) {
                    context_params += 1;
                    if context_params == 2 {
                        errors.spanned(
                            &param.ty,
                            "the context is already a parameter of this tool; take it once",
                        );
                    }
                }
                if let Some(span) = param.attrs.span {
                    errors.at(
                        span,
                        "`#[arg]` does not apply to a parameter taken from the request context; remove it",
                    );
                }
                continue;
            }
        }
        check_argument_type(&param.ty, errors);
        let wire = param.wire_name();
        if RESERVED_NAMES.contains(&wire.as_str()) {
            errors.at(
                param.wire_span(),
                format!(
                    "`{wire}` is a reserved argument name (the runtime uses `expected_version`, `operation_id` and `_meta`); rename the parameter or use `#[arg(rename = \"...\")]`"
                ),
            );
        }
        if wire.is_empty() {
            errors.at(param.wire_span(), "an argument name cannot be empty");
        }
        if let Some(first) = seen.get(&wire) {
            let mut error = syn::Error::new(
                param.wire_span(),
                format!(
                    "two parameters have the wire name `{wire}`; give one of them another name with `#[arg(rename = \"...\")]`"
                ),
            );
            error.combine(syn::Error::new(*first, format!("`{wire}` first used here")));
            errors.push(error);
        } else {
            seen.insert(wire, param.wire_span());
        }
        if let (Some(ArgDefault::Trait | ArgDefault::Expr(_)), Some((ident, _))) =
            (&param.attrs.default, crate::parse::last_segment(&param.ty))
            && ident == "Option"
        {
            errors.spanned(
                &param.ty,
                "an `Option` parameter is already optional (absent means `None`); remove `#[arg(default)]` or use a non-`Option` type",
            );
        }
    }

    check_output(&tool.output, errors);
}

fn check_argument_type(ty: &Type, errors: &mut Errors) {
    match ty {
        Type::Reference(_) => errors.spanned(
            ty,
            "a tool parameter cannot be borrowed: arguments are decoded into owned values; use an owned type (`String` for `&str`, `Vec<T>` for `&[T]`)",
        ),
        Type::ImplTrait(_) => errors.spanned(
            ty,
            "a tool parameter cannot be `impl Trait`: its schema must be known; use a concrete type",
        ),
        Type::Infer(_) | Type::Never(_) | Type::Ptr(_) | Type::FnPtr(_) | Type::TraitObject(_) => {
            errors.spanned(
                ty,
                "this type cannot be a tool parameter; use a type that implements `Deserialize` and `JsonSchema`",
            )
        }
        _ => {}
    }
}

fn check_output(output: &Output, errors: &mut Errors) {
    match output {
        Output::Unit(span) => errors.at(
            *span,
            "a tool must return a value the model can read; return `String`, a `Serialize + JsonSchema` type, or a `Result` of one",
        ),
        Output::Unsupported(span, reason) => errors.at(*span, reason),
        Output::Result { ok, .. } => check_output(ok, errors),
        Output::Plain(_) | Output::Structured(_) => {}
    }
}

/// `^[A-Za-z0-9_./-]{1,64}$`, the rule the runtime enforces when the server is built.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names() {
        assert!(is_valid_tool_name("math/add.v2-beta_1"));
        assert!(is_valid_tool_name(&"a".repeat(64)));
        assert!(!is_valid_tool_name(&"a".repeat(65)));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("read file"));
    }

    #[test]
    fn errors_accumulate() {
        let mut errors = Errors::default();
        assert!(Errors::default().finish().is_ok());
        errors.at(Span::call_site(), "first");
        errors.at(Span::call_site(), "second");
        let combined = errors.finish().unwrap_err();
        assert_eq!(combined.into_iter().count(), 2);
    }
}
