//! From tokens to the typed model. Attribute syntax is checked here (unknown and duplicate keys,
//! value types); rules about the function as a whole live in `validate`.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Ident, Lit, LitBool, LitStr, Meta, Pat,
    PathArguments, ReceiverKind, ReturnType, Signature, Type, Visibility,
};

use crate::model::{
    ArgAttrs, ArgDefault, Output, Param, ParamKind, Receiver, StatefulAttr, StatefulKind,
    ToolAttrs, ToolFn,
};
use crate::validate::Errors;

/// The keys `#[tool(...)]` accepts.
pub const TOOL_KEYS: &[&str] = &[
    "name",
    "title",
    "description",
    "read_only",
    "destructive",
    "idempotent",
    "open_world",
    "creates",
    "reads",
    "mutates",
    "on_conflict",
    "touches",
    "expected_version",
    "operation_id",
];

/// The keys `#[arg(...)]` accepts.
pub const ARG_KEYS: &[&str] = &["default", "rename", "description"];

/// An identifier as written, without `r#`.
pub fn unraw(ident: &Ident) -> String {
    let text = ident.to_string();
    match text.strip_prefix("r#") {
        Some(rest) => rest.to_owned(),
        None => text,
    }
}

/// The whole doc comment of `attrs`: one leading space per line removed, outer blank lines
/// trimmed. `None` when there is no text.
pub fn doc_text(attrs: &[Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        if let Meta::NameValue(nv) = &attr.meta
            && let Expr::Lit(ExprLit {
                lit: Lit::Str(text),
                ..
            }) = &nv.value
        {
            for line in text.value().split('\n') {
                lines.push(line.strip_prefix(' ').unwrap_or(line).trim_end().to_owned());
            }
        }
    }
    let text = lines.join("\n");
    let text = text.trim_matches('\n').trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Parses the arguments of `#[tool(...)]`, recording every mistake.
pub fn tool_attrs(tokens: TokenStream, errors: &mut Errors) -> ToolAttrs {
    let mut attrs = ToolAttrs::default();
    let parser = syn::meta::parser(|meta| tool_key(&meta, &mut attrs, errors));
    if let Err(error) = parser.parse2(tokens) {
        errors.push(error);
    }
    attrs
}

fn tool_key(meta: &ParseNestedMeta, attrs: &mut ToolAttrs, errors: &mut Errors) -> syn::Result<()> {
    let key = meta.path.get_ident().map(unraw).unwrap_or_default();
    match key.as_str() {
        "name" => set(meta, &mut attrs.name, "name", errors, string_value),
        "title" => set(meta, &mut attrs.title, "title", errors, string_value),
        "description" => set(
            meta,
            &mut attrs.description,
            "description",
            errors,
            string_value,
        ),
        "read_only" => set(meta, &mut attrs.read_only, "read_only", errors, flag_value),
        "destructive" => set(
            meta,
            &mut attrs.destructive,
            "destructive",
            errors,
            flag_value,
        ),
        "idempotent" => set(
            meta,
            &mut attrs.idempotent,
            "idempotent",
            errors,
            flag_value,
        ),
        "open_world" => set(
            meta,
            &mut attrs.open_world,
            "open_world",
            errors,
            flag_value,
        ),
        "creates" | "reads" | "mutates" => {
            let kind = match key.as_str() {
                "creates" => StatefulKind::Creates,
                "reads" => StatefulKind::Reads,
                _ => StatefulKind::Mutates,
            };
            if !meta.input.peek(syn::Token![=]) {
                return Err(meta.error(format!("expected the resource type: `{key} = Basket`")));
            }
            let ty: Type = meta.value()?.parse()?;
            let ident = meta
                .path
                .get_ident()
                .cloned()
                .unwrap_or_else(|| Ident::new(&key, meta.path.span()));
            attrs.stateful.push(StatefulAttr {
                key: ident,
                kind,
                ty,
            });
            Ok(())
        }
        "on_conflict" => set(
            meta,
            &mut attrs.on_conflict,
            "on_conflict",
            errors,
            |meta| {
                if !meta.input.peek(syn::Token![=]) {
                    return Err(meta.error(
                        "expected a policy: `on_conflict = reject`, `rebase` or `reconfirm`",
                    ));
                }
                meta.value()?.parse::<Ident>().map_err(|error| {
                    syn::Error::new(
                        error.span(),
                        "expected a policy: `on_conflict = reject`, `rebase` or `reconfirm`",
                    )
                })
            },
        ),
        "touches" => set(meta, &mut attrs.touches, "touches", errors, |meta| {
            let span = meta.path.span();
            if !meta.input.peek(syn::Token![=]) {
                return Err(meta.error("expected a list of fields: `touches = [field, ...]`"));
            }
            let input = meta.value()?;
            let content;
            syn::bracketed!(content in input);
            let fields =
                syn::punctuated::Punctuated::<Ident, syn::Token![,]>::parse_terminated(&content)?;
            Ok((span, fields.into_iter().collect()))
        }),
        "expected_version" => set(
            meta,
            &mut attrs.expected_version,
            "expected_version",
            errors,
            flag_value,
        ),
        "operation_id" => set(
            meta,
            &mut attrs.operation_id,
            "operation_id",
            errors,
            flag_value,
        ),
        _ => unknown_key(meta, "tool", TOOL_KEYS, errors),
    }
}

/// Reads one key's value into `slot`, reporting a repeated key.
fn set<T>(
    meta: &ParseNestedMeta,
    slot: &mut Option<T>,
    key: &str,
    errors: &mut Errors,
    value: fn(&ParseNestedMeta) -> syn::Result<T>,
) -> syn::Result<()> {
    let parsed = value(meta)?;
    if slot.is_some() {
        errors.spanned(
            &meta.path,
            format!("`{key}` specified more than once; remove the repeated `{key}`"),
        );
    } else {
        *slot = Some(parsed);
    }
    Ok(())
}

fn string_value(meta: &ParseNestedMeta) -> syn::Result<LitStr> {
    let key = meta.path.get_ident().map(unraw).unwrap_or_default();
    if !meta.input.peek(syn::Token![=]) {
        return Err(meta.error(format!("expected a string: `{key} = \"...\"`")));
    }
    let expr: Expr = meta.value()?.parse()?;
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new_spanned(
            other,
            format!("expected a string literal: `{key} = \"...\"`"),
        )),
    }
}

/// `key` alone means `true`; `key = true` / `key = false` are explicit.
fn flag_value(meta: &ParseNestedMeta) -> syn::Result<LitBool> {
    if !meta.input.peek(syn::Token![=]) {
        return Ok(LitBool::new(true, meta.path.span()));
    }
    let expr: Expr = meta.value()?.parse()?;
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            ..
        }) => Ok(lit),
        other => {
            let key = meta.path.get_ident().map(unraw).unwrap_or_default();
            Err(syn::Error::new_spanned(
                other,
                format!("expected `true` or `false`: write `{key}` or `{key} = false`"),
            ))
        }
    }
}

/// Records an unknown key with a did-you-mean, then skips its value so parsing goes on.
fn unknown_key(
    meta: &ParseNestedMeta,
    attr: &str,
    known: &[&str],
    errors: &mut Errors,
) -> syn::Result<()> {
    let key = meta.path.get_ident().map(unraw).unwrap_or_else(|| {
        let path = &meta.path;
        quote::quote!(#path).to_string()
    });
    let hint = match did_you_mean(&key, known) {
        Some(best) => format!("did you mean `{best}`?"),
        None => format!(
            "expected one of {}",
            known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    errors.spanned(
        &meta.path,
        format!("unknown key `{key}` in `#[{attr}(...)]`: {hint}"),
    );
    if meta.input.peek(syn::Token![=]) {
        let _: Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _content;
        syn::parenthesized!(_content in meta.input);
    }
    Ok(())
}

/// The known key closest to `key`, if close enough to be a likely typo.
fn did_you_mean<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|candidate| (levenshtein(key, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len().max(3) / 3).max(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// Parses every `#[arg(...)]` of a parameter.
fn arg_attrs(attrs: &[Attribute], errors: &mut Errors) -> ArgAttrs {
    let mut out = ArgAttrs::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("arg")) {
        out.span.get_or_insert(attr.span());
        let result = attr.parse_nested_meta(|meta| {
            let key = meta.path.get_ident().map(unraw).unwrap_or_default();
            match key.as_str() {
                "rename" => set(&meta, &mut out.rename, "rename", errors, string_value),
                "description" => set(
                    &meta,
                    &mut out.description,
                    "description",
                    errors,
                    string_value,
                ),
                "default" => set(&meta, &mut out.default, "default", errors, default_value),
                _ => unknown_key(&meta, "arg", ARG_KEYS, errors),
            }
        });
        if let Err(error) = result {
            errors.push(error);
        }
    }
    out
}

fn default_value(meta: &ParseNestedMeta) -> syn::Result<ArgDefault> {
    if meta.input.peek(syn::Token![=]) {
        Ok(ArgDefault::Expr(Box::new(meta.value()?.parse()?)))
    } else {
        Ok(ArgDefault::Trait)
    }
}

/// The last segment of a path type, with its generic arguments.
pub fn last_segment(ty: &Type) -> Option<(&Ident, &PathArguments)> {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .map(|segment| (&segment.ident, &segment.arguments)),
        Type::Paren(inner) => last_segment(&inner.elem),
        Type::Group(inner) => last_segment(&inner.elem),
        _ => None,
    }
}

/// The type arguments of `Name<...>`.
pub fn type_arguments(arguments: &PathArguments) -> Vec<&Type> {
    match arguments {
        PathArguments::AngleBracketed(angle) => angle
            .args
            .iter()
            .filter_map(|arg| match arg {
                GenericArgument::Type(ty) => Some(ty),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn param_kind(ty: &Type) -> ParamKind {
    if let Type::Reference(reference) = ty
        && reference.mutability.is_none()
        && matches!(last_segment(&reference.elem), Some((ident, PathArguments::None)) if ident == "Context")
    {
        return ParamKind::ContextRef;
    }
    match last_segment(ty) {
        Some((ident, PathArguments::None)) if ident == "Context" => ParamKind::Context,
        Some((ident, PathArguments::AngleBracketed(_))) if ident == "State" => ParamKind::Extract,
        _ => ParamKind::Argument,
    }
}

/// Classifies the return type.
pub fn output(ret: &ReturnType, fn_span: Span) -> Output {
    match ret {
        ReturnType::Default => Output::Unit(fn_span),
        ReturnType::Type(_, ty) => {
            if let Some((ident, arguments)) = last_segment(ty)
                && ident == "Result"
            {
                let arguments = type_arguments(arguments);
                return match arguments.as_slice() {
                    [ok, err] => Output::Result {
                        ok: Box::new(value_output(ok)),
                        err: (*err).clone(),
                    },
                    _ => Output::Unsupported(
                        ty.span(),
                        "write the error type out: `Result<T, E>` (a `Result` alias hides the error type the tool needs)",
                    ),
                };
            }
            value_output(ty)
        }
    }
}

fn value_output(ty: &Type) -> Output {
    match ty {
        Type::Tuple(tuple) if tuple.elems.is_empty() => Output::Unit(ty.span()),
        Type::ImplTrait(_) => Output::Unsupported(
            ty.span(),
            "`impl Trait` cannot be described by an output schema; return a concrete type",
        ),
        Type::Reference(reference) => match &*reference.elem {
            Type::Path(path) if path.path.is_ident("str") => Output::Plain(ty.clone()),
            _ => Output::Unsupported(
                ty.span(),
                "a tool cannot return a reference; return an owned value (e.g. `String` for `&str`)",
            ),
        },
        _ => match last_segment(ty) {
            Some((ident, PathArguments::None))
                if ident == "String"
                    || ident == "Content"
                    || ident == "CallToolResult"
                    || ident == "InputRequired" =>
            {
                Output::Plain(ty.clone())
            }
            Some((ident, _)) if ident == "Structured" || ident == "ToolReply" => {
                Output::Plain(ty.clone())
            }
            Some((ident, arguments)) if ident == "Vec" => {
                match type_arguments(arguments).as_slice() {
                    [inner] if matches!(last_segment(inner), Some((i, _)) if i == "Content") => {
                        Output::Plain(ty.clone())
                    }
                    _ => Output::Structured(ty.clone()),
                }
            }
            Some((ident, _)) if ident == "Result" => Output::Unsupported(
                ty.span(),
                "nested `Result`s are not supported; flatten them into one `Result<T, E>`",
            ),
            _ => Output::Structured(ty.clone()),
        },
    }
}

/// Builds the model of a function, removing the `#[arg]` attributes and doc comments of its
/// parameters from `sig` (rustc accepts neither on parameters) so it can be re-emitted as is.
pub fn tool_fn(
    attrs: ToolAttrs,
    fn_attrs: &[Attribute],
    vis: &Visibility,
    sig: &mut Signature,
    errors: &mut Errors,
) -> ToolFn {
    let mut receiver = None;
    let mut params = Vec::new();
    let takes_resource = attrs
        .stateful
        .first()
        .is_some_and(|stateful| stateful.kind != StatefulKind::Creates);
    for input in sig.inputs.iter_mut() {
        match input {
            FnArg::Receiver(recv) => {
                receiver = Some(Receiver {
                    span: recv.self_token.span,
                    is_shared_ref: matches!(recv.kind, ReceiverKind::Reference(_, _, None))
                        && recv.mutability.is_none(),
                });
            }
            FnArg::Typed(pat_type) => {
                let attrs = arg_attrs(&pat_type.attrs, errors);
                let doc = doc_text(&pat_type.attrs);
                pat_type
                    .attrs
                    .retain(|attr| !attr.path().is_ident("arg") && !attr.path().is_ident("doc"));
                let ident = match &*pat_type.pat {
                    Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                        pat.ident.clone()
                    }
                    other => {
                        errors.spanned(
                            other,
                            "a tool parameter must be a plain name, because it becomes a named property of the input schema; bind it to a name and destructure it in the body",
                        );
                        continue;
                    }
                };
                let mut kind = param_kind(&pat_type.ty);
                if takes_resource
                    && matches!(kind, ParamKind::Argument)
                    && let Type::Reference(reference) = &*pat_type.ty
                {
                    kind = ParamKind::Resource {
                        mutable: reference.mutability.is_some(),
                    };
                }
                params.push(Param {
                    ident,
                    kind,
                    ty: (*pat_type.ty).clone(),
                    attrs,
                    doc,
                });
            }
        }
    }
    ToolFn {
        attrs,
        doc: doc_text(fn_attrs),
        vis: vis.clone(),
        ident: sig.ident.clone(),
        is_async: sig.asyncness.is_some(),
        async_span: sig.asyncness.map(|token| token.span),
        receiver,
        params,
        output: output(&sig.output, sig.ident.span()),
        return_span: match &sig.output {
            ReturnType::Default => sig.ident.span(),
            ReturnType::Type(_, ty) => ty.span(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_key() {
        assert_eq!(did_you_mean("readonly", TOOL_KEYS), Some("read_only"));
        assert_eq!(did_you_mean("titel", TOOL_KEYS), Some("title"));
        assert_eq!(did_you_mean("renmae", ARG_KEYS), Some("rename"));
        assert_eq!(did_you_mean("frobnicate", TOOL_KEYS), None);
    }

    #[test]
    fn keeps_the_whole_doc_comment() {
        let item: syn::ItemFn = syn::parse_quote! {
            /// Summary line.
            ///
            ///   Indented detail.
            fn f() {}
        };
        assert_eq!(
            doc_text(&item.attrs).as_deref(),
            Some("Summary line.\n\n  Indented detail.")
        );
        let bare: syn::ItemFn = syn::parse_quote!(
            fn f() {}
        );
        assert_eq!(doc_text(&bare.attrs), None);
    }

    #[test]
    fn classifies_return_types() {
        let plain: ReturnType = syn::parse_quote!(-> Vec<Content>);
        assert!(matches!(
            output(&plain, Span::call_site()),
            Output::Plain(_)
        ));
        let structured: ReturnType = syn::parse_quote!(-> Vec<u32>);
        assert!(matches!(
            output(&structured, Span::call_site()),
            Output::Structured(_)
        ));
        let result: ReturnType = syn::parse_quote!(-> Result<String, MyError>);
        assert!(matches!(
            output(&result, Span::call_site()),
            Output::Result { ok, .. } if matches!(*ok, Output::Plain(_))
        ));
        let alias: ReturnType = syn::parse_quote!(-> io::Result<String>);
        assert!(matches!(
            output(&alias, Span::call_site()),
            Output::Unsupported(..)
        ));
    }
}
