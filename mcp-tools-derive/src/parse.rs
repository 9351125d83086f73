//! From tokens to the typed model. Mistakes found here are the ones the model cannot hold:
//! attribute syntax (unknown and repeated keys, values of the wrong form) and forms the macros
//! do not accept at all (generic, `const`, `unsafe`, `extern` or variadic functions, `self`
//! outside a toolbox, parameters that are patterns, unions). Rules about a well-formed model
//! live in `validate`.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{
    Attribute, Data, DeriveInput, Expr, ExprLit, Fields, FnArg, GenericArgument, ItemImpl, Lit,
    LitStr, Meta, Pat, PathArguments, ReceiverKind, ReturnType, Safety, Signature, Type,
    Visibility,
};

use crate::attr::{self, Key};
use crate::ctxt::Ctxt;
use crate::model::{
    ArgAttrs, ArgDefault, ArgKey, ConflictPolicy, EntityField, ErrorCode, ErrorCodes, ErrorVariant,
    KNOWN_RECOVERIES, OnConflict, Output, Param, ParamKind, Place, Receiver, RecoveryHint,
    RecoveryKey, Resource, ResourceAttrs, ResourceKey, Scopes, SerdeUse, Stateful, StatefulKind,
    TaskMode, ToolAttrs, ToolErrorType, ToolFn, ToolKey, Touches, TtlSecs, VariantFields,
};
use crate::naming::{did_you_mean, snake_case, unraw, upper_snake_case};

/// Builds the model of a tool from the arguments of its `#[tool(...)]` and the function.
pub fn tool_fn(
    args: TokenStream,
    fn_attrs: &[Attribute],
    vis: &Visibility,
    sig: &Signature,
    place: Place,
    cx: &Ctxt,
) -> ToolFn {
    let attrs = tool_attrs(args, cx);
    signature(sig, place, cx);
    let takes_resource = attrs
        .stateful
        .first()
        .is_some_and(|stateful| stateful.kind != StatefulKind::Creates)
        || attrs.step.is_some_and(|flag| flag.value);
    let mut receiver = None;
    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(recv) => {
                receiver = Some(Receiver {
                    span: recv.self_token.span,
                    is_shared_ref: matches!(recv.kind, ReceiverKind::Reference(_, _, None))
                        && recv.mutability.is_none(),
                });
            }
            FnArg::Typed(pat_type) => {
                let attrs = arg_attrs(&pat_type.attrs, cx);
                let doc = doc_text(&pat_type.attrs);
                let ident = match &*pat_type.pat {
                    Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                        pat.ident.clone()
                    }
                    other => {
                        cx.error_spanned_by(
                            other,
                            "a tool parameter must be a plain name, because it becomes a named property of the input schema; bind it to a name and destructure it in the body",
                        );
                        continue;
                    }
                };
                let mut kind = param_kind(&pat_type.ty);
                if takes_resource
                    && matches!(kind, ParamKind::Argument { .. })
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
        place,
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

/// Function forms no tool can have: the model has no room for them.
fn signature(sig: &Signature, place: Place, cx: &Ctxt) {
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        let span = if sig.generics.params.is_empty() {
            sig.generics.where_clause.span()
        } else {
            sig.generics.span()
        };
        cx.error_at(
            span,
            "a tool function cannot be generic: its input and output schemas must be known when the server is built; use concrete types",
        );
    }
    if let Some(constness) = &sig.constness {
        cx.error_spanned_by(
            constness,
            "a tool function cannot be `const`; remove `const`",
        );
    }
    if let Safety::Unsafe(unsafety) = &sig.safety {
        cx.error_spanned_by(
            unsafety,
            "a tool function cannot be `unsafe`: the runtime calls it with arguments from the network; wrap the unsafe code in a safe function",
        );
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(
            abi,
            "a tool function cannot have an `extern` ABI; remove it",
        );
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, "a tool function cannot be variadic");
    }
    if place == Place::Free
        && let Some(receiver) = sig.receiver()
    {
        cx.error_spanned_by(
            receiver,
            "`self` is only allowed in `#[tool]` methods of an impl block marked `#[mcp_tools::toolbox]`; add `#[mcp_tools::toolbox]` to the impl block, or make this a free function",
        );
    }
}

/// The arguments of `#[tool(...)]`.
fn tool_attrs(tokens: TokenStream, cx: &Ctxt) -> ToolAttrs {
    let mut attrs = ToolAttrs::default();
    attr::parse_tokens(cx, tokens, |key, meta| tool_key(key, meta, &mut attrs, cx));
    attrs
}

fn tool_key(
    key: ToolKey,
    meta: &ParseNestedMeta,
    attrs: &mut ToolAttrs,
    cx: &Ctxt,
) -> syn::Result<()> {
    match key {
        ToolKey::Name => attr::set(cx, meta, key, &mut attrs.name, attr::string(meta)?),
        ToolKey::Title => attr::set(cx, meta, key, &mut attrs.title, attr::string(meta)?),
        ToolKey::Description => {
            attr::set(cx, meta, key, &mut attrs.description, attr::string(meta)?)
        }
        ToolKey::ReadOnly => attr::set(
            cx,
            meta,
            key,
            &mut attrs.read_only,
            attr::flag(meta)?.into(),
        ),
        ToolKey::Destructive => attr::set(
            cx,
            meta,
            key,
            &mut attrs.destructive,
            attr::flag(meta)?.into(),
        ),
        ToolKey::Idempotent => attr::set(
            cx,
            meta,
            key,
            &mut attrs.idempotent,
            attr::flag(meta)?.into(),
        ),
        ToolKey::OpenWorld => attr::set(
            cx,
            meta,
            key,
            &mut attrs.open_world,
            attr::flag(meta)?.into(),
        ),
        ToolKey::Scopes => {
            let (span, scopes) = attr::string_list(
                meta,
                "expected a list of OAuth scopes: `scopes = [\"basket:read\", ...]`",
            )?;
            attr::set(cx, meta, key, &mut attrs.scopes, Scopes { span, scopes })
        }
        ToolKey::Stateful(kind) => {
            let ty = attr::ty(
                meta,
                format!("expected the entity type: `{} = Basket`", key.name()),
            )?;
            attrs.stateful.push(Stateful {
                kind,
                key_span: meta.path.span(),
                type_name: last_segment(&ty).map(|(ident, _)| unraw(ident)),
                ty,
            });
            Ok(())
        }
        ToolKey::OnConflict => {
            let policy = attr::ident(
                meta,
                "expected a policy: `on_conflict = reject`, `rebase`, `reconfirm` or `items`",
            )?;
            let name = policy.to_string();
            let Some(known) = ConflictPolicy::named(&name) else {
                cx.error_spanned_by(
                    &policy,
                    format!(
                        "unknown conflict policy `{name}`: expected `reject` (any intervening change refuses), `rebase` (re-run when the change touched none of `touches`) `reconfirm` (consequential: the caller must confirm again) or `items` (only a change of the collection items the transition reaches refuses)"
                    ),
                );
                return Ok(());
            };
            let on_conflict = OnConflict {
                policy: known,
                span: policy.span(),
            };
            attr::set(cx, meta, key, &mut attrs.on_conflict, on_conflict)
        }
        ToolKey::Task => {
            let mode = attr::ident(
                meta,
                "expected a task mode: `task = optional` or `task = required`",
            )?;
            let required = match mode.to_string().as_str() {
                "optional" => false,
                "required" => true,
                other => {
                    cx.error_spanned_by(
                        &mode,
                        format!(
                            "unknown task mode `{other}`: expected `optional` (a task when the client supports tasks, a plain call otherwise) or `required` (only as a task)"
                        ),
                    );
                    return Ok(());
                }
            };
            let task = TaskMode {
                required,
                span: mode.span(),
            };
            attr::set(cx, meta, key, &mut attrs.task, task)
        }
        ToolKey::Touches => {
            let fields =
                attr::ident_list(meta, "expected a list of fields: `touches = [field, ...]`")?;
            let touches = Touches {
                span: meta.path.span(),
                fields,
            };
            attr::set(cx, meta, key, &mut attrs.touches, touches)
        }
        ToolKey::ExpectedVersion => attr::set(
            cx,
            meta,
            key,
            &mut attrs.expected_version,
            attr::flag(meta)?.into(),
        ),
        ToolKey::OperationId => attr::set(
            cx,
            meta,
            key,
            &mut attrs.operation_id,
            attr::flag(meta)?.into(),
        ),
        ToolKey::Terminal => {
            attr::set(cx, meta, key, &mut attrs.terminal, attr::flag(meta)?.into())
        }
        ToolKey::Step => attr::set(cx, meta, key, &mut attrs.step, attr::flag(meta)?.into()),
    }
}

/// Every `#[arg(...)]` of a parameter.
fn arg_attrs(attrs: &[Attribute], cx: &Ctxt) -> ArgAttrs {
    let mut out = ArgAttrs::default();
    for arg in attrs.iter().filter(|attr| attr.path().is_ident("arg")) {
        out.span.get_or_insert(arg.span());
        attr::parse_attr(cx, arg, |key, meta| match key {
            ArgKey::Rename => attr::set(cx, meta, key, &mut out.rename, attr::string(meta)?),
            ArgKey::Description => {
                attr::set(cx, meta, key, &mut out.description, attr::string(meta)?)
            }
            ArgKey::Default => {
                let default = match attr::optional_expr(meta)? {
                    Some(expr) => ArgDefault::Expr(Box::new(expr)),
                    None => ArgDefault::Trait,
                };
                attr::set(cx, meta, key, &mut out.default, default)
            }
        });
    }
    out
}

/// Whether `attr` is `#[tool]`, under any path (`#[mcp_tools::tool]`).
pub fn is_tool_attr(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "tool")
}

/// The arguments of a `#[tool]` or `#[tool(...)]` method attribute inside a toolbox.
pub fn method_tool_args(attr: &Attribute, cx: &Ctxt) -> TokenStream {
    match &attr.meta {
        Meta::Path(_) => TokenStream::new(),
        Meta::List(list) => list.tokens.clone(),
        Meta::NameValue(nv) => {
            cx.error_spanned_by(nv, "write `#[tool]` or `#[tool(key = value, ...)]`");
            TokenStream::new()
        }
    }
}

/// Impl forms no toolbox can have.
pub fn toolbox_impl(args: &TokenStream, item: &ItemImpl, cx: &Ctxt) {
    if !args.is_empty() {
        cx.error_spanned_by(args, "`#[toolbox]` takes no arguments; remove them");
    }
    if !item.generics.params.is_empty() {
        cx.error_spanned_by(
            &item.generics,
            "a `#[toolbox]` impl cannot be generic: tool schemas must be known when the server is built",
        );
    }
    if let Some((path, _)) = &item.trait_ {
        cx.error_spanned_by(
            path,
            "`#[toolbox]` goes on an inherent impl (`impl MyServer { ... }`), not a trait impl",
        );
    }
}

/// The whole doc comment of `attrs`: one leading space per line removed, outer blank lines
/// trimmed. `None` when there is no text.
fn doc_text(attrs: &[Attribute]) -> Option<String> {
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

/// The last segment of a path type, with its generic arguments.
fn last_segment(ty: &Type) -> Option<(&syn::Ident, &PathArguments)> {
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
fn type_arguments(arguments: &PathArguments) -> Vec<&Type> {
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

/// Where a parameter's value comes from, by its type's last path segment.
fn param_kind(ty: &Type) -> ParamKind {
    // Only a borrowed `Effects`: an argument whose own type is named so stays an argument.
    if let Type::Reference(reference) = ty
        && let Some((ident, arguments)) = last_segment(&reference.elem)
        && ident == "Effects"
    {
        let effect = match type_arguments(arguments).as_slice() {
            [effect] => Some(Box::new((*effect).clone())),
            _ => None,
        };
        let mutable = reference.mutability.is_some();
        return ParamKind::Effects { effect, mutable };
    }
    if let Type::Reference(reference) = ty
        && reference.mutability.is_none()
        && matches!(last_segment(&reference.elem), Some((ident, PathArguments::None)) if ident == "Context")
    {
        return ParamKind::ContextRef;
    }
    match last_segment(ty) {
        Some((ident, PathArguments::None)) if ident == "Context" => ParamKind::Context,
        Some((ident, PathArguments::AngleBracketed(_))) if ident == "State" => ParamKind::Extract,
        Some((ident, _)) if ident == "Option" => ParamKind::Argument { optional: true },
        _ => ParamKind::Argument { optional: false },
    }
}

/// Classifies the return type.
fn output(ret: &ReturnType, fn_span: Span) -> Output {
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

/// Builds the model of a type deriving `Resource`.
pub fn resource(input: &DeriveInput, cx: &Ctxt) -> Resource {
    let attrs = resource_attrs(&input.attrs, cx);
    let generics = (!input.generics.params.is_empty() || input.generics.where_clause.is_some())
        .then(|| input.generics.clone());
    let mut has_named_fields = false;
    let mut fields = Vec::new();
    if let Data::Struct(data) = &input.data
        && let Fields::Named(named) = &data.fields
    {
        has_named_fields = true;
        let rule = serde_container(&input.attrs);
        for field in &named.named {
            let Some(ident) = &field.ident else { continue };
            let name = unraw(ident);
            let serde = serde_field(&field.attrs);
            let key = (!serde.flatten).then(|| match serde.rename {
                Some(rename) => rename,
                None => rename_field(rule.as_deref(), &name),
            });
            let collection =
                matches!(last_segment(&field.ty), Some((ident, _)) if ident == "Collection");
            fields.push(EntityField {
                name,
                key,
                ident: ident.clone(),
                collection,
            });
        }
    }
    Resource {
        ident: input.ident.clone(),
        attrs,
        generics,
        has_named_fields,
        fields,
        container_shapes: serde_uses(&input.attrs, &["tag", "untagged", "transparent"]),
    }
}

fn resource_attrs(attrs: &[Attribute], cx: &Ctxt) -> ResourceAttrs {
    let mut out = ResourceAttrs::default();
    for resource in attrs.iter().filter(|a| a.path().is_ident("entity")) {
        attr::parse_attr(cx, resource, |key, meta| match key {
            ResourceKey::Kind => attr::set(cx, meta, key, &mut out.kind, attr::string(meta)?),
            ResourceKey::Prefix => attr::set(cx, meta, key, &mut out.prefix, attr::string(meta)?),
            ResourceKey::TtlSecs => {
                let lit = attr::int(meta, "expected a number of seconds: `ttl_secs = 3600`")?;
                match lit.base10_parse::<u64>() {
                    Ok(secs) => {
                        let ttl = TtlSecs {
                            secs,
                            span: lit.span(),
                        };
                        attr::set(cx, meta, key, &mut out.ttl_secs, ttl)
                    }
                    Err(error) => {
                        cx.syn_error(error);
                        Ok(())
                    }
                }
            }
            ResourceKey::Lifecycle => {
                let method = attr::ident(
                    meta,
                    "expected the name of a method `fn(&self) -> mcp_tools::store::Lifecycle`: `lifecycle = method_name`",
                )?;
                attr::set(cx, meta, key, &mut out.lifecycle, method)
            }
            ResourceKey::View => {
                let method = attr::path(
                    meta,
                    "expected the name of a method `fn(&self) -> impl Serialize` that builds what outcomes show: `view = summary`",
                )?;
                attr::set(cx, meta, key, &mut out.view, method)
            }
        });
    }
    out
}

/// What serde's `#[serde(...)]` on a field says about its serialized name.
#[derive(Default)]
struct SerdeField {
    /// `rename = "..."` or `rename(serialize = "...")`.
    rename: Option<String>,
    flatten: bool,
}

/// The serialize side of `#[serde(rename_all = "...")]` / `rename_all(serialize = "...")` on
/// the type.
fn serde_container(attrs: &[Attribute]) -> Option<String> {
    let mut rule = None;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("serde")) {
        // serde reports its own syntax errors; what does not parse here is left to it.
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename_all") {
                if let Some(value) = serialize_name(&meta)? {
                    rule = Some(value);
                }
                Ok(())
            } else {
                skip_serde_value(&meta)
            }
        });
    }
    rule
}

fn serde_field(attrs: &[Attribute]) -> SerdeField {
    let mut out = SerdeField::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                if let Some(value) = serialize_name(&meta)? {
                    out.rename = Some(value);
                }
                Ok(())
            } else if meta.path.is_ident("flatten") {
                out.flatten = true;
                skip_serde_value(&meta)
            } else {
                skip_serde_value(&meta)
            }
        });
    }
    out
}

/// The serialize name of `key = "..."` (both directions) or `key(serialize = "...", ...)`.
fn serialize_name(meta: &ParseNestedMeta) -> syn::Result<Option<String>> {
    if meta.input.peek(syn::Token![=]) {
        let value: LitStr = meta.value()?.parse()?;
        return Ok(Some(value.value()));
    }
    let mut name = None;
    meta.parse_nested_meta(|inner| {
        if inner.path.is_ident("serialize") {
            let value: LitStr = inner.value()?.parse()?;
            name = Some(value.value());
            Ok(())
        } else {
            skip_serde_value(&inner)
        }
    })?;
    Ok(name)
}

/// Skips the value of a serde key this macro has no use for.
fn skip_serde_value(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        let _: Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        let _: TokenStream = content.parse()?;
    }
    Ok(())
}

/// A field name under a serde `rename_all` rule, as serde renames fields (a field name is taken
/// to be `snake_case`). An unknown rule leaves the name alone; serde refuses it anyway.
pub fn rename_field(rule: Option<&str>, field: &str) -> String {
    let pascal = || {
        let mut pascal = String::new();
        let mut capitalize = true;
        for ch in field.chars() {
            if ch == '_' {
                capitalize = true;
            } else if capitalize {
                pascal.push(ch.to_ascii_uppercase());
                capitalize = false;
            } else {
                pascal.push(ch);
            }
        }
        pascal
    };
    match rule {
        Some("UPPERCASE" | "SCREAMING_SNAKE_CASE") => field.to_ascii_uppercase(),
        Some("PascalCase") => pascal(),
        Some("camelCase") => {
            let pascal = pascal();
            let mut chars = pascal.chars();
            match chars.next() {
                Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
                None => pascal,
            }
        }
        Some("kebab-case") => field.replace('_', "-"),
        Some("SCREAMING-KEBAB-CASE") => field.to_ascii_uppercase().replace('_', "-"),
        _ => field.to_owned(),
    }
}

/// Each `#[serde(...)]` of `attrs` that uses one of `keys`, with the first such key.
fn serde_uses(attrs: &[Attribute], keys: &[&str]) -> Vec<SerdeUse> {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("serde"))
        .filter_map(|attr| {
            find_key(attr, keys).map(|key| SerdeUse {
                attr: attr.clone(),
                key,
            })
        })
        .collect()
}

/// The first of `keys` used as a key inside `#[serde(...)]`.
fn find_key(attr: &Attribute, keys: &[&str]) -> Option<String> {
    let Meta::List(list) = &attr.meta else {
        return None;
    };
    let mut expect_key = true;
    for token in list.tokens.clone() {
        match &token {
            TokenTree::Ident(ident) if expect_key && keys.iter().any(|k| ident == k) => {
                return Some(ident.to_string());
            }
            TokenTree::Punct(punct) if punct.as_char() == ',' => expect_key = true,
            _ => expect_key = false,
        }
    }
    None
}

/// Builds the model of a type deriving `ToolError`; `None` for a union, which has no variant to
/// take a code from.
pub fn tool_error(input: &DeriveInput, cx: &Ctxt) -> Option<ToolErrorType> {
    let ident = &input.ident;
    let codes = match &input.data {
        Data::Enum(data) => {
            if let Some(attr) = input
                .attrs
                .iter()
                .find(|attr| attr.path().is_ident("recovery"))
            {
                cx.error_spanned_by(
                    attr,
                    "on an enum, `#[recovery]` goes on each variant it applies to; move it there",
                );
            }
            ErrorCodes::Enum(
                data.variants
                    .iter()
                    .map(|variant| ErrorVariant {
                        ident: variant.ident.clone(),
                        fields: match variant.fields {
                            Fields::Named(_) => VariantFields::Named,
                            Fields::Unnamed(_) => VariantFields::Unnamed,
                            Fields::Unit => VariantFields::Unit,
                        },
                        code: error_code(&variant.attrs, &variant.ident, cx),
                    })
                    .collect(),
            )
        }
        Data::Struct(_) => ErrorCodes::Struct(error_code(&input.attrs, ident, cx)),
        Data::Union(_) => {
            cx.error_spanned_by(ident, "`ToolError` cannot be derived for a union");
            return None;
        }
    };
    Some(ToolErrorType {
        ident: ident.clone(),
        generics: input.generics.clone(),
        codes,
    })
}

/// The code, description and hint a variant (or struct) declares; the code defaults to the
/// name in `UPPER_SNAKE_CASE`.
fn error_code(attrs: &[Attribute], ident: &syn::Ident, cx: &Ctxt) -> ErrorCode {
    ErrorCode {
        code: code_attr(attrs, cx)
            .map(|lit| lit.value())
            .unwrap_or_else(|| upper_snake_case(ident)),
        description: doc_text(attrs),
        recovery: recovery_attr(attrs, cx),
    }
}

/// `#[code = "..."]`.
fn code_attr(attrs: &[Attribute], cx: &Ctxt) -> Option<LitStr> {
    let attr = attrs.iter().find(|attr| attr.path().is_ident("code"))?;
    if let Meta::NameValue(nv) = &attr.meta
        && let Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) = &nv.value
    {
        return Some(lit.clone());
    }
    cx.error_spanned_by(attr, "write the code as `#[code = \"NOT_FOUND\"]`");
    None
}

const RECOVERY_FORMS: &str = "write a known hint as `#[recovery = \"stop\"]` or one of your own as `#[recovery(custom = \"ask_the_owner\")]`";

/// `#[recovery = "stop"]` or `#[recovery(custom = "ask_the_owner")]`, at most once.
fn recovery_attr(attrs: &[Attribute], cx: &Ctxt) -> Option<RecoveryHint> {
    let mut recovery_attrs = attrs.iter().filter(|attr| attr.path().is_ident("recovery"));
    let first = recovery_attrs.next()?;
    for repeated in recovery_attrs {
        cx.error_spanned_by(
            repeated,
            "`#[recovery]` specified more than once: a code has one hint; remove the repeated one",
        );
    }
    match &first.meta {
        Meta::NameValue(nv) => match &nv.value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => known_recovery(lit, cx),
            other => {
                cx.error_spanned_by(
                    other,
                    format!("expected the hint as a string: {RECOVERY_FORMS}"),
                );
                None
            }
        },
        Meta::List(list) => {
            if list.tokens.is_empty() {
                cx.error_spanned_by(
                    first,
                    format!("`#[recovery()]` names no hint: {RECOVERY_FORMS}"),
                );
                return None;
            }
            // `#[recovery(stop)]` reads like a hint, not like a key that is merely unknown.
            if let Ok(name) = syn::parse2::<syn::Ident>(list.tokens.clone())
                && name != "custom"
            {
                let name = unraw(&name);
                let message = if KNOWN_RECOVERIES.iter().any(|(known, _)| *known == name) {
                    format!("write the hint as a string: `#[recovery = \"{name}\"]`")
                } else {
                    format!(
                        "`{name}` is not a key of `#[recovery(...)]`: for a hint of your own, write `#[recovery(custom = \"{}\")]`; the known hints are {}, written `#[recovery = \"...\"]`",
                        own_recovery_name(&name),
                        known_recoveries()
                    )
                };
                cx.error_spanned_by(&list.tokens, message);
                return None;
            }
            let mut custom = None;
            attr::parse_attr(cx, first, |key, meta| match key {
                RecoveryKey::Custom => attr::set(cx, meta, key, &mut custom, attr::string(meta)?),
            });
            // Without a value, `parse_attr` has reported why.
            custom_recovery(&custom?, cx)
        }
        Meta::Path(_) => {
            cx.error_spanned_by(
                first,
                format!("`#[recovery]` needs a hint: {RECOVERY_FORMS}"),
            );
            None
        }
    }
}

/// The hint of `#[recovery = "..."]`, which must be one the framework knows.
fn known_recovery(lit: &LitStr, cx: &Ctxt) -> Option<RecoveryHint> {
    let name = lit.value();
    if let Some((_, variant)) = KNOWN_RECOVERIES.iter().find(|(known, _)| *known == name) {
        return Some(RecoveryHint::Known(variant));
    }
    let guess = did_you_mean(&name, KNOWN_RECOVERIES.iter().map(|(name, _)| *name))
        .map(|best| format!("did you mean `{best}`? "))
        .unwrap_or_default();
    cx.error_spanned_by(
        lit,
        format!(
            "unknown recovery hint `{name}`: {guess}the known hints are {}; for a hint of your own, write `#[recovery(custom = \"{}\")]` and explain it in the doc comment",
            known_recoveries(),
            own_recovery_name(&name)
        ),
    );
    None
}

/// The known hints, for a message.
fn known_recoveries() -> String {
    KNOWN_RECOVERIES
        .iter()
        .map(|(name, _)| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `name` as a custom hint in a suggestion, when it is a valid one.
fn own_recovery_name(name: &str) -> &str {
    if is_recovery_name(name) {
        name
    } else {
        "ask_the_owner"
    }
}

/// The hint of `#[recovery(custom = "...")]`: `snake_case`, as clients read it, and not one of
/// the known names (those have their own `Recovery` variant).
fn custom_recovery(lit: &LitStr, cx: &Ctxt) -> Option<RecoveryHint> {
    let name = lit.value();
    if KNOWN_RECOVERIES.iter().any(|(known, _)| *known == name) {
        cx.error_spanned_by(
            lit,
            format!("`{name}` is a hint the framework knows: write `#[recovery = \"{name}\"]`"),
        );
        return None;
    }
    if !is_recovery_name(&name) {
        let suggestion = if name.bytes().any(|b| b.is_ascii_lowercase()) {
            snake_case(&name)
        } else {
            name.to_lowercase()
        }
        .replace(['-', ' '], "_");
        let hint = if is_recovery_name(&suggestion) {
            format!("write `custom = \"{suggestion}\"`")
        } else {
            "e.g. `custom = \"ask_the_owner\"`".to_owned()
        };
        cx.error_spanned_by(
            lit,
            format!(
                "a custom recovery hint is snake_case (`^[a-z][a-z0-9_]*$`), the form clients expect: {hint}"
            ),
        );
        return None;
    }
    Some(RecoveryHint::Custom(name))
}

/// `^[a-z][a-z0-9_]*$`, the pattern the runtime's `Recovery` schema publishes.
fn is_recovery_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn attribute_values_are_typed_once() {
        let cx = Ctxt::new();
        let attrs = tool_attrs(
            quote::quote!(
                mutates = crate::m::ShoppingCart,
                on_conflict = rebase,
                touches = [a],
                operation_id = false
            ),
            &cx,
        );
        cx.check().unwrap();
        let stateful = &attrs.stateful[0];
        assert!(stateful.kind == StatefulKind::Mutates);
        assert_eq!(stateful.type_name.as_deref(), Some("ShoppingCart"));
        assert!(attrs.on_conflict.unwrap().policy == ConflictPolicy::Rebase);
        assert_eq!(attrs.touches.unwrap().fields.len(), 1);
        assert!(!attrs.operation_id.unwrap().value);
    }

    #[test]
    fn scopes_are_typed_as_the_literals_written() {
        let cx = Ctxt::new();
        let attrs = tool_attrs(
            quote::quote!(read_only, scopes = ["basket:read", "audit"]),
            &cx,
        );
        cx.check().unwrap();
        let scopes: Vec<String> = attrs
            .scopes
            .expect("`scopes` is read")
            .scopes
            .iter()
            .map(LitStr::value)
            .collect();
        assert_eq!(scopes, ["basket:read", "audit"]);
        assert!(attrs.read_only.is_some());
    }

    #[test]
    fn scopes_that_are_not_a_list_of_strings_get_the_form_to_write() {
        let messages = |tokens| {
            let cx = Ctxt::new();
            let attrs = tool_attrs(tokens, &cx);
            assert!(attrs.scopes.is_none());
            cx.check()
                .unwrap_err()
                .into_iter()
                .map(|error| error.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            messages(quote::quote!(scopes = "basket:read")),
            ["expected a list of strings, even for one: write `scopes = [\"basket:read\"]`"]
        );
        assert_eq!(
            messages(quote::quote!(scopes = ["a", basket, 3])),
            [
                "expected a string literal: `scopes = [\"...\", ...]`",
                "expected a string literal: `scopes = [\"...\", ...]`",
            ],
            "every element that is not a string is reported"
        );
        assert_eq!(
            messages(quote::quote!(scopes)),
            ["expected a list of OAuth scopes: `scopes = [\"basket:read\", ...]`"]
        );
    }

    #[test]
    fn an_unknown_policy_is_refused_where_it_is_written() {
        let cx = Ctxt::new();
        let attrs = tool_attrs(quote::quote!(on_conflict = last_write_wins), &cx);
        assert!(attrs.on_conflict.is_none());
        let message = cx.check().unwrap_err().to_string();
        assert!(
            message.starts_with("unknown conflict policy `last_write_wins`"),
            "{message}"
        );
    }

    #[test]
    fn resource_keys_get_the_shared_hints() {
        let input: DeriveInput = syn::parse_quote! {
            #[entity(prefx = "bsk", ttl_secs = 60)]
            struct Basket { a: u32 }
        };
        let cx = Ctxt::new();
        let resource = resource(&input, &cx);
        assert_eq!(resource.attrs.ttl_secs.map(|ttl| ttl.secs), Some(60));
        assert_eq!(
            cx.check().unwrap_err().to_string(),
            "unknown key `prefx` in `#[entity(...)]`: did you mean `prefix`?"
        );
    }
}
