//! Semantic rules, checked on the model. Every mistake is recorded with its span and all of them
//! are reported together, so one build shows them all.

use std::collections::HashMap;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Safety, Signature, Type};

use crate::model::{ArgDefault, Output, ParamKind, StatefulKind, ToolFn};

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
            ParamKind::Resource { .. } => {
                if let Some(span) = param.attrs.span {
                    errors.at(
                        span,
                        "`#[arg]` does not apply to the resource parameter: the store passes the resource in; remove it",
                    );
                }
                continue;
            }
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

    if let Some(handle) = tool.handle_name()
        && let Some(first) = seen.get(&handle)
    {
        errors.at(
            *first,
            format!(
                "`{handle}` is the handle argument this stateful tool adds; rename the parameter or use `#[arg(rename = \"...\")]`"
            ),
        );
    }
    stateful(tool, errors);
    check_output(&tool.output, errors);
}

/// Rules of the stateful kinds (`creates`, `reads`, `mutates`) and their keys.
fn stateful(tool: &ToolFn, errors: &mut Errors) {
    for extra in tool.attrs.stateful.iter().skip(1) {
        errors.spanned(
            &extra.key,
            format!(
                "a tool has one stateful kind, and this one already has `{}`; split it into two tools",
                tool.attrs.stateful[0].kind.key()
            ),
        );
    }
    let kind = tool.stateful().map(|stateful| stateful.kind);
    if kind != Some(StatefulKind::Mutates) {
        let applies = |key: &str| match kind {
            Some(other) => format!(
                "`{key}` applies to `mutates` tools only, and this tool `{}` its resource; remove `{key}`",
                other.key()
            ),
            None => format!(
                "`{key}` applies to `mutates = Resource` tools only; declare `mutates = ...` or remove `{key}`"
            ),
        };
        if let Some(policy) = &tool.attrs.on_conflict {
            errors.spanned(policy, applies("on_conflict"));
        }
        if let Some((span, _)) = &tool.attrs.touches {
            errors.at(*span, applies("touches"));
        }
        if let Some(flag) = &tool.attrs.expected_version {
            errors.spanned(flag, applies("expected_version"));
        }
    }
    if !matches!(
        kind,
        Some(StatefulKind::Creates) | Some(StatefulKind::Mutates)
    ) && let Some(flag) = &tool.attrs.operation_id
    {
        let message = match kind {
            Some(other) => format!(
                "`operation_id` applies to `creates` and `mutates` tools only, and this tool `{}` its resource; remove `operation_id`",
                other.key()
            ),
            None => "`operation_id` applies to `creates = Resource` and `mutates = Resource` tools only; declare one or remove `operation_id`".to_owned(),
        };
        errors.spanned(flag, message);
    }
    let Some(stateful) = tool.stateful() else {
        return;
    };
    let ty = &stateful.ty;
    let ty_text = ty.to_token_stream().to_string().replace(' ', "");
    let resources: Vec<_> = tool
        .params
        .iter()
        .filter_map(|param| match param.kind {
            ParamKind::Resource { mutable } => Some((param, mutable)),
            _ => None,
        })
        .collect();
    for (extra, _) in resources.iter().skip(1) {
        errors.spanned(
            &extra.ty,
            format!(
                "a `{}` tool takes one resource; this parameter is a second borrowed value (tool arguments are owned values)",
                stateful.kind.key()
            ),
        );
    }
    match stateful.kind {
        StatefulKind::Creates => {
            if let Some(flag) = &tool.attrs.read_only
                && flag.value
            {
                errors.spanned(flag, "a `creates` tool stores a new resource, so it is not read-only; remove `read_only`");
            }
        }
        StatefulKind::Reads => match resources.first() {
            None => errors.at(
                tool.ident.span(),
                format!(
                    "a `reads = {ty_text}` tool receives the current state as a `&{ty_text}` parameter; add one, e.g. `resource: &{ty_text}`"
                ),
            ),
            Some((param, true)) => errors.spanned(
                &param.ty,
                format!(
                    "a `reads` tool cannot change the resource, so it takes `&{ty_text}`, not `&mut {ty_text}`; to change it, declare `mutates = {ty_text}` instead"
                ),
            ),
            Some((_, false)) => {}
        },
        StatefulKind::Mutates => {
            if let Some(span) = tool.async_span {
                errors.at(
                    span,
                    "a `mutates` transition cannot be `async`: it runs inside the store's atomic boundary (one transaction) and may run again on rebase; make it a synchronous `fn` and do any I/O in another tool",
                );
            }
            if let Some(receiver) = &tool.receiver {
                errors.at(
                    receiver.span,
                    "a `mutates` transition cannot take `self`: it may run on a store worker and again on rebase; make it an associated function without `self`",
                );
            }
            if let Some(flag) = &tool.attrs.read_only
                && flag.value
            {
                errors.spanned(flag, "a `mutates` tool changes its resource, so it is not read-only; remove `read_only`");
            }
            for param in &tool.params {
                if matches!(
                    param.kind,
                    ParamKind::Context | ParamKind::ContextRef | ParamKind::Extract
                ) {
                    errors.spanned(
                        &param.ty,
                        "a `mutates` transition cannot take request-context values: it runs inside the store's atomic boundary and must depend only on the resource and its arguments; remove this parameter",
                    );
                }
            }
            match resources.first() {
                None => errors.at(
                    tool.ident.span(),
                    format!(
                        "a `mutates = {ty_text}` tool changes the resource it is given: add a `&mut {ty_text}` parameter, e.g. `resource: &mut {ty_text}`"
                    ),
                ),
                Some((param, false)) => errors.spanned(
                    &param.ty,
                    format!(
                        "a `mutates` tool changes the resource, so it takes `&mut {ty_text}`; for a tool that only looks, declare `reads = {ty_text}`"
                    ),
                ),
                Some((_, true)) => {}
            }
            let policy = tool.attrs.on_conflict.as_ref().map(|p| p.to_string());
            if let Some(name) = &policy
                && !matches!(name.as_str(), "reject" | "rebase" | "reconfirm")
            {
                errors.spanned(
                    tool.attrs.on_conflict.as_ref(),
                    format!(
                        "unknown conflict policy `{name}`: expected `reject` (any intervening change refuses), `rebase` (re-run when the change touched none of `touches`) or `reconfirm` (consequential: the caller must confirm again)"
                    ),
                );
            }
            match (&policy, &tool.attrs.touches) {
                (Some(name), None) if name == "rebase" => errors.spanned(
                    tool.attrs.on_conflict.as_ref(),
                    "`on_conflict = rebase` needs the fields the transition works on: add `touches = [field, ...]`",
                ),
                (policy, Some((span, _))) if policy.as_deref() != Some("rebase") => errors.at(
                    *span,
                    "`touches` only matters with `on_conflict = rebase`; add it or remove `touches`",
                ),
                (_, Some((span, fields))) if fields.is_empty() => errors.at(
                    *span,
                    "`touches` is empty: name the top-level fields the transition reads or writes",
                ),
                _ => {}
            }
            if !tool.takes_expected_version()
                && let Some(policy) = &tool.attrs.on_conflict
            {
                errors.spanned(
                    policy,
                    "without `expected_version` there is no conflict to resolve: remove `on_conflict` or `expected_version = false`",
                );
            }
        }
    }
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
