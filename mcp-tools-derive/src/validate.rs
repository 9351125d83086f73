//! The rules of a well-formed model. Every broken rule is recorded with its span and all of them
//! are reported together, so one build shows them all.

use std::collections::{HashMap, HashSet};

use proc_macro2::Span;
use quote::ToTokens;
use syn::Type;

use crate::attr::Key;
use crate::ctxt::Ctxt;
use crate::model::{
    ConflictPolicy, ErrorCodes, ErrorVariant, Output, Param, ParamKind, Place, Resource,
    StatefulKind, ToolErrorType, ToolFn, ToolKey,
};
use crate::naming::{
    is_reserved_argument, is_scope_token, is_valid_handle_prefix, is_valid_resource_kind,
    is_valid_tool_name, unraw,
};

/// Rules on one tool.
pub fn tool(tool: &ToolFn, cx: &Ctxt) {
    let (name, name_span) = tool.name();
    if !is_valid_tool_name(&name) {
        cx.error_at(
            name_span,
            format!(
                "invalid tool name `{name}`: a tool name is 1 to 64 characters of `A-Z a-z 0-9 _ . / -`; choose another with `#[tool(name = \"...\")]`"
            ),
        );
    }
    if let Some(title) = &tool.attrs.title
        && title.value().trim().is_empty()
    {
        cx.error_spanned_by(title, "the title is empty; remove `title` or give it text");
    }
    match tool.description() {
        None => cx.error_at(
            tool.ident.span(),
            format!(
                "tool `{name}` has no description: models choose tools by it; add a doc comment (`/// What the tool does.`) or `#[tool(description = \"...\")]`"
            ),
        ),
        Some(text) if text.trim().is_empty() => {
            if let Some(description) = &tool.attrs.description {
                cx.error_spanned_by(
                    description,
                    "the description is empty; say what the tool does",
                );
            }
        }
        Some(_) => {}
    }
    if tool.place == Place::Toolbox
        && let Some(receiver) = &tool.receiver
        && !receiver.is_shared_ref
    {
        cx.error_at(
            receiver.span,
            "a tool method takes `&self`: the toolbox is shared between concurrent calls; use `&self` with interior mutability",
        );
    }

    let mut seen: HashMap<String, Span> = HashMap::new();
    let mut context_params = 0;
    let mut effects_params = 0;
    for param in &tool.params {
        let optional = match &param.kind {
            ParamKind::Argument { optional } => *optional,
            ParamKind::Effects { effect, mutable } => {
                effects_params += 1;
                effects_param(tool, param, effect.as_deref(), *mutable, effects_params, cx);
                continue;
            }
            ParamKind::Resource { .. } => {
                if let Some(span) = param.attrs.span {
                    cx.error_at(
                        span,
                        "`#[arg]` does not apply to the entity parameter: the store passes the entity in; remove it",
                    );
                }
                continue;
            }
            ParamKind::Context | ParamKind::ContextRef | ParamKind::Extract => {
                if matches!(param.kind, ParamKind::Context | ParamKind::ContextRef) {
                    context_params += 1;
                    if context_params == 2 {
                        cx.error_spanned_by(
                            &param.ty,
                            "the context is already a parameter of this tool; take it once",
                        );
                    }
                }
                if let Some(span) = param.attrs.span {
                    cx.error_at(
                        span,
                        "`#[arg]` does not apply to a parameter taken from the request context; remove it",
                    );
                }
                continue;
            }
        };
        argument_type(&param.ty, cx);
        let wire = param.wire_name();
        // A task tool's own `operation_id` is its retry key: a retry with it gets the same task.
        let task_key = wire == "operation_id"
            && tool.attrs.task.is_some()
            && !matches!(
                tool.kind(),
                Some(StatefulKind::Creates | StatefulKind::Mutates)
            );
        if is_reserved_argument(&wire) && !task_key {
            cx.error_at(
                param.wire_span(),
                format!(
                    "`{wire}` is a reserved argument name (the runtime uses `expected_version`, `basis_version`, `items_cursor`, `operation_id` and `_meta`); rename the parameter or use `#[arg(rename = \"...\")]`"
                ),
            );
        }
        if wire.is_empty() {
            cx.error_at(param.wire_span(), "an argument name cannot be empty");
        }
        if let Some(first) = seen.get(&wire) {
            cx.error_at(
                param.wire_span(),
                format!(
                    "two parameters have the wire name `{wire}`; give one of them another name with `#[arg(rename = \"...\")]`"
                ),
            );
            cx.error_at(*first, format!("`{wire}` first used here"));
        } else {
            seen.insert(wire, param.wire_span());
        }
        if optional && param.attrs.default.is_some() {
            cx.error_spanned_by(
                &param.ty,
                "an `Option` parameter is already optional (absent means `None`); remove `#[arg(default)]` or use a non-`Option` type",
            );
        }
    }

    if let Some(handle) = tool.handle_name()
        && let Some(first) = seen.get(&handle)
    {
        cx.error_at(
            *first,
            format!(
                "`{handle}` is the handle argument this stateful tool adds; rename the parameter or use `#[arg(rename = \"...\")]`"
            ),
        );
    }
    scopes(tool, cx);
    stateful(tool, cx);
    step(tool, cx);
    task(tool, cx);
    output(&tool.output, cx);
}

/// A task answers before the tool finishes, so it cannot carry a transition's typed outcome:
/// the atomic boundary of `creates` and `mutates` stays synchronous.
fn task(tool: &ToolFn, cx: &Ctxt) {
    let (Some(task), Some(kind @ (StatefulKind::Creates | StatefulKind::Mutates))) =
        (&tool.attrs.task, tool.kind())
    else {
        return;
    };
    cx.error_at(
        task.span,
        format!(
            "a `{}` tool cannot run as a task: its outcome (applied, stale_view, replayed) must reach the caller in the call's answer; remove `task`, or move the slow work into a `reads` or plain tool that runs as a task",
            kind.name()
        ),
    );
}

/// Rules of `scopes = [...]`: the runtime would refuse a bad scope only when the server is
/// built, and an empty or repeated one says something the author did not mean.
fn scopes(tool: &ToolFn, cx: &Ctxt) {
    let Some(scopes) = &tool.attrs.scopes else {
        return;
    };
    if scopes.scopes.is_empty() {
        cx.error_at(
            scopes.span,
            "`scopes` is empty, which requires nothing; remove `scopes` or name at least one scope",
        );
    }
    let mut seen: HashSet<String> = HashSet::new();
    for lit in &scopes.scopes {
        let scope = lit.value();
        if !is_scope_token(&scope) {
            // Scopes joined by spaces, as in an OAuth `scope` parameter, are meant as a list.
            let split = if scope.contains(' ') && scope.split(' ').all(is_scope_token) {
                "; to require several scopes, list each as its own string"
            } else {
                ""
            };
            cx.error_spanned_by(
                lit,
                format!(
                    "invalid scope {scope:?}: use one or more printable ASCII characters without spaces, quotes or backslashes (an RFC 6749 scope token), e.g. \"basket:read\"{split}"
                ),
            );
        } else if seen.contains(&scope) {
            cx.error_spanned_by(
                lit,
                format!("scope {scope:?} is listed twice; remove the repeated one"),
            );
        } else {
            seen.insert(scope);
        }
    }
}

/// Rules of the stateful kinds (`creates`, `reads`, `mutates`) and their keys.
fn stateful(tool: &ToolFn, cx: &Ctxt) {
    for extra in tool.attrs.stateful.iter().skip(1) {
        cx.error_at(
            extra.key_span,
            format!(
                "a tool has one stateful kind, and this one already has `{}`; split it into two tools",
                tool.attrs.stateful[0].kind.name()
            ),
        );
    }
    let kind = tool.kind();
    if kind != Some(StatefulKind::Mutates) {
        let applies = |key: ToolKey| {
            let key = key.name();
            match kind {
                Some(other) => format!(
                    "`{key}` applies to `mutates` tools only, and this tool `{}` its entity; remove `{key}`",
                    other.name()
                ),
                None => format!(
                    "`{key}` applies to `mutates = Resource` tools only; declare `mutates = ...` or remove `{key}`"
                ),
            }
        };
        if let Some(on_conflict) = &tool.attrs.on_conflict {
            cx.error_at(on_conflict.span, applies(ToolKey::OnConflict));
        }
        if let Some(touches) = &tool.attrs.touches {
            cx.error_at(touches.span, applies(ToolKey::Touches));
        }
        if let Some(flag) = &tool.attrs.expected_version {
            cx.error_at(flag.span, applies(ToolKey::ExpectedVersion));
        }
        if let Some(flag) = &tool.attrs.terminal {
            cx.error_at(flag.span, applies(ToolKey::Terminal));
        }
    }
    if tool.is_terminal()
        && let Some(flag) = tool.attrs.destructive.filter(|flag| !flag.value)
    {
        cx.error_at(
            flag.span,
            "a `terminal` transition ends the resource, so it is destructive; remove `destructive = false`",
        );
    }
    if !matches!(
        kind,
        Some(StatefulKind::Creates) | Some(StatefulKind::Mutates)
    ) && let Some(flag) = &tool.attrs.operation_id
    {
        let message = match kind {
            Some(other) => format!(
                "`operation_id` applies to `creates` and `mutates` tools only, and this tool `{}` its entity; remove `operation_id`",
                other.name()
            ),
            None => "`operation_id` applies to `creates = Resource` and `mutates = Resource` tools only; declare one or remove `operation_id`".to_owned(),
        };
        cx.error_at(flag.span, message);
    }
    let Some(stateful) = tool.stateful() else {
        return;
    };
    let ty_text = stateful.ty.to_token_stream().to_string().replace(' ', "");
    let resources: Vec<_> = tool
        .params
        .iter()
        .filter_map(|param| match param.kind {
            ParamKind::Resource { mutable } => Some((param, mutable)),
            _ => None,
        })
        .collect();
    for (extra, _) in resources.iter().skip(1) {
        cx.error_spanned_by(
            &extra.ty,
            format!(
                "a `{}` tool takes one entity; this parameter is a second borrowed value (tool arguments are owned values)",
                stateful.kind.name()
            ),
        );
    }
    match stateful.kind {
        StatefulKind::Creates => {
            if let Some(flag) = &tool.attrs.read_only
                && flag.value
            {
                cx.error_at(
                    flag.span,
                    "a `creates` tool stores a new entity, so it is not read-only; remove `read_only`",
                );
            }
        }
        StatefulKind::Reads => match resources.first() {
            None => cx.error_at(
                tool.ident.span(),
                format!(
                    "a `reads = {ty_text}` tool receives the current state as a `&{ty_text}` parameter; add one, e.g. `entity: &{ty_text}`"
                ),
            ),
            Some((param, true)) => cx.error_spanned_by(
                &param.ty,
                format!(
                    "a `reads` tool cannot change the entity, so it takes `&{ty_text}`, not `&mut {ty_text}`; to change it, declare `mutates = {ty_text}` instead"
                ),
            ),
            Some((_, false)) => {}
        },
        StatefulKind::Mutates => mutation(tool, &ty_text, resources.first().copied(), cx),
    }
}

/// Rules of a `step` over several entities: no stateful kind beside it, two `&mut Entity`
/// parameters or more, a synchronous transition of the entities and its arguments only, and no
/// argument named as an entity's handle or version.
fn step(tool: &ToolFn, cx: &Ctxt) {
    let Some(flag) = tool.attrs.step.filter(|flag| flag.value) else {
        return;
    };
    if let Some(stateful) = tool.stateful() {
        cx.error_at(
            stateful.key_span,
            format!(
                "a `step` changes the entities it takes as `&mut` parameters; remove `{} = ..`",
                stateful.kind.name()
            ),
        );
        return;
    }
    let resources = tool.step_resources();
    if let Some((extra, _)) = resources.get(4) {
        cx.error_spanned_by(
            &extra.ty,
            "a `step` changes at most four entities at once; split the change, or gather what changes together into one entity",
        );
    }
    if resources.len() < 2 {
        cx.error_at(
            flag.span,
            "a `step` changes two entities or more at once: take each as a `&mut Entity` parameter (for one entity, declare `mutates = Entity`)",
        );
    }
    for (param, mutable) in &resources {
        if !mutable {
            cx.error_spanned_by(
                &param.ty,
                "a `step` changes each entity it takes, so it takes `&mut Entity`",
            );
        }
    }
    if let Some(span) = tool.async_span {
        cx.error_at(
            span,
            "a `step` transition cannot be `async`: it runs inside the store's atomic boundary (one transaction); make it a synchronous `fn`",
        );
    }
    if let Some(receiver) = &tool.receiver {
        cx.error_at(
            receiver.span,
            "a `step` transition cannot take `self`: make it an associated function without `self`",
        );
    }
    let injected: Vec<String> = resources
        .iter()
        .flat_map(|(param, _)| {
            let name = unraw(&param.ident);
            [format!("{name}_id"), format!("{name}_expected_version")]
        })
        .collect();
    for param in &tool.params {
        match &param.kind {
            ParamKind::Context | ParamKind::ContextRef | ParamKind::Extract => {
                cx.error_spanned_by(
                    &param.ty,
                    "a `step` transition cannot take request-context values: it runs inside the store's atomic boundary and must depend only on the entities and its arguments; remove this parameter",
                );
            }
            ParamKind::Argument { .. } if injected.contains(&param.wire_name()) => {
                cx.error_at(
                    param.wire_span(),
                    format!(
                        "`{}` names an entity's handle or version in this step; rename the argument",
                        param.wire_name()
                    ),
                );
            }
            _ => {}
        }
    }
}

/// Rules of an `Effects<E>` parameter: the `n`-th of the tool's.
fn effects_param(
    tool: &ToolFn,
    param: &Param,
    effect: Option<&Type>,
    mutable: bool,
    n: usize,
    cx: &Ctxt,
) {
    if let Some(span) = param.attrs.span {
        cx.error_at(
            span,
            "`#[arg]` does not apply to the effects parameter: the runtime passes it in; remove it",
        );
    }
    if tool.kind() != Some(StatefulKind::Mutates) {
        cx.error_spanned_by(
            &param.ty,
            "effects are emitted by a `mutates` transition, stored with the change it commits; declare `mutates = Entity`, or remove this parameter",
        );
        return;
    }
    if n == 2 {
        cx.error_spanned_by(
            &param.ty,
            "the effects are already a parameter of this tool; take `&mut Effects<E>` once (for several kinds of effect, make `E` an enum)",
        );
    }
    match (effect, mutable) {
        (None, _) => cx.error_spanned_by(
            &param.ty,
            "name the effect type: `&mut Effects<E>`, where `E` implements `mcp_tools::effects::Effect`",
        ),
        (Some(effect), false) => {
            let effect = effect.to_token_stream().to_string().replace(' ', "");
            cx.error_spanned_by(
                &param.ty,
                format!(
                    "the transition emits effects into its `Effects`, so it takes `&mut Effects<{effect}>`"
                ),
            );
        }
        (Some(_), true) => {}
    }
}

/// Rules of a `mutates` transition; `resource` is its resource parameter, if it has one, and
/// whether that is `&mut`.
fn mutation(tool: &ToolFn, ty_text: &str, resource: Option<(&Param, bool)>, cx: &Ctxt) {
    if let Some(span) = tool.async_span {
        cx.error_at(
            span,
            "a `mutates` transition cannot be `async`: it runs inside the store's atomic boundary (one transaction) and may run again on rebase; make it a synchronous `fn` and do any I/O in another tool",
        );
    }
    if let Some(receiver) = &tool.receiver {
        cx.error_at(
            receiver.span,
            "a `mutates` transition cannot take `self`: it may run on a store worker and again on rebase; make it an associated function without `self`",
        );
    }
    if let Some(flag) = &tool.attrs.read_only
        && flag.value
    {
        cx.error_at(
            flag.span,
            "a `mutates` tool changes its entity, so it is not read-only; remove `read_only`",
        );
    }
    for param in &tool.params {
        if matches!(
            param.kind,
            ParamKind::Context | ParamKind::ContextRef | ParamKind::Extract
        ) {
            cx.error_spanned_by(
                &param.ty,
                "a `mutates` transition cannot take request-context values: it runs inside the store's atomic boundary and must depend only on the entity and its arguments; remove this parameter",
            );
        }
    }
    match resource {
        None => cx.error_at(
            tool.ident.span(),
            format!(
                "a `mutates = {ty_text}` tool changes the entity it is given: add a `&mut {ty_text}` parameter, e.g. `entity: &mut {ty_text}`"
            ),
        ),
        Some((param, false)) => cx.error_spanned_by(
            &param.ty,
            format!(
                "a `mutates` tool changes the entity, so it takes `&mut {ty_text}`; for a tool that only looks, declare `reads = {ty_text}`"
            ),
        ),
        Some((_, true)) => {}
    }
    let policy = tool.attrs.on_conflict.as_ref();
    match (policy, &tool.attrs.touches) {
        (Some(on_conflict), None) if on_conflict.policy == ConflictPolicy::Rebase => cx.error_at(
            on_conflict.span,
            "`on_conflict = rebase` needs the fields the transition works on: add `touches = [field, ...]`",
        ),
        (_, Some(touches)) if tool.conflict_policy() != ConflictPolicy::Rebase => cx.error_at(
            touches.span,
            "`touches` only matters with `on_conflict = rebase`; add it or remove `touches`",
        ),
        (_, Some(touches)) if touches.fields.is_empty() => cx.error_at(
            touches.span,
            "`touches` is empty: name the top-level fields the transition reads or writes",
        ),
        _ => {}
    }
    if !tool.takes_expected_version()
        && let Some(on_conflict) = policy
    {
        cx.error_at(
            on_conflict.span,
            "without `expected_version` there is no conflict to resolve: remove `on_conflict` or `expected_version = false`",
        );
    }
}

fn argument_type(ty: &Type, cx: &Ctxt) {
    match ty {
        Type::Reference(_) => cx.error_spanned_by(
            ty,
            "a tool parameter cannot be borrowed: arguments are decoded into owned values; use an owned type (`String` for `&str`, `Vec<T>` for `&[T]`)",
        ),
        Type::ImplTrait(_) => cx.error_spanned_by(
            ty,
            "a tool parameter cannot be `impl Trait`: its schema must be known; use a concrete type",
        ),
        Type::Infer(_) | Type::Never(_) | Type::Ptr(_) | Type::FnPtr(_) | Type::TraitObject(_) => {
            cx.error_spanned_by(
                ty,
                "this type cannot be a tool parameter; use a type that implements `Deserialize` and `JsonSchema`",
            )
        }
        _ => {}
    }
}

fn output(output: &Output, cx: &Ctxt) {
    match output {
        Output::Unit(span) => cx.error_at(
            *span,
            "a tool must return a value the model can read; return `String`, a `Serialize + JsonSchema` type, or a `Result` of one",
        ),
        Output::Unsupported(span, reason) => cx.error_at(*span, reason),
        Output::Result { ok, .. } => self::output(ok, cx),
        Output::Plain(_) | Output::Structured(_) => {}
    }
}

/// A `#[toolbox]` impl publishes at least one tool.
pub fn toolbox(tools: &[ToolFn], impl_token: syn::token::Impl, cx: &Ctxt) {
    if tools.is_empty() {
        cx.error_spanned_by(
            impl_token,
            "this `#[toolbox]` impl has no `#[tool]` methods; mark the methods to publish with `#[tool]`",
        );
    }
}

/// Rules on a type deriving `Resource`.
pub fn resource(resource: &Resource, cx: &Ctxt) {
    if let Some(generics) = &resource.generics {
        cx.error_spanned_by(
            generics,
            "an entity cannot be generic: its kind, handle prefix and schema are fixed; use a concrete type",
        );
    }
    if !resource.has_named_fields {
        cx.error_at(
            resource.ident.span(),
            "an entity is a struct with named fields: deltas and `touches = [...]` name its top-level fields",
        );
    }
    for shape in &resource.container_shapes {
        cx.error_spanned_by(
            &shape.attr,
            format!(
                "`#[serde({})]` is not supported on an entity: it is stored and diffed as a JSON object of its fields; remove it",
                shape.key
            ),
        );
    }
    for field in &resource.fields {
        if field.collection && field.key.is_none() {
            cx.error_at(
                field.ident.span(),
                format!(
                    "the collection `{}` cannot be `#[serde(flatten)]`: its items are stored one by one under the field's name; remove `flatten`",
                    field.name
                ),
            );
        }
    }
    match &resource.attrs.prefix {
        Some(prefix) if !is_valid_handle_prefix(&prefix.value()) => cx.error_spanned_by(
            prefix,
            "a handle prefix is 1 to 16 lowercase ASCII letters or digits, e.g. `prefix = \"bsk\"`",
        ),
        Some(_) => {}
        None => cx.error_at(
            resource.ident.span(),
            format!(
                "entity `{}` needs a handle prefix: add `#[entity(prefix = \"...\")]` (handles look like `<prefix>_<random>`)",
                resource.ident
            ),
        ),
    }
    if let Some(kind) = &resource.attrs.kind
        && !is_valid_resource_kind(&kind.value())
    {
        cx.error_spanned_by(
            kind,
            "an entity kind is lowercase ASCII letters, digits and `_`, e.g. `kind = \"basket\"`",
        );
    }
    if let Some(ttl) = &resource.attrs.ttl_secs
        && ttl.secs == 0
    {
        cx.error_at(
            ttl.span,
            "`ttl_secs` must be at least 1; leave it out to keep entities forever",
        );
    }
}

/// Rules on a type deriving `ToolError`: variants may share a code, but a code has one meaning
/// and one hint, since it is declared once.
pub fn tool_error(error: &ToolErrorType, cx: &Ctxt) {
    let ErrorCodes::Enum(variants) = &error.codes else {
        return;
    };
    let mut first_with: HashMap<&str, &ErrorVariant> = HashMap::new();
    for variant in variants {
        let code = variant.code.code.as_str();
        let Some(first) = first_with.get(code) else {
            first_with.insert(code, variant);
            continue;
        };
        let own_code = format!("give `{}` its own `#[code = \"...\"]`", variant.ident);
        if first.code.description != variant.code.description {
            cx.error_at(
                variant.ident.span(),
                format!(
                    "variants `{}` and `{}` share the code `{code}` but not its description (their doc comments differ): give both the same doc comment, or {own_code}",
                    first.ident, variant.ident
                ),
            );
        }
        if first.code.recovery != variant.code.recovery {
            let hint = |variant: &ErrorVariant| match &variant.code.recovery {
                Some(recovery) => format!("`{}`", recovery.name()),
                None => "none".to_owned(),
            };
            cx.error_at(
                variant.ident.span(),
                format!(
                    "variants `{}` and `{}` share the code `{code}` but not its recovery hint ({} and {}): give both the same `#[recovery]`, or {own_code}",
                    first.ident,
                    variant.ident,
                    hint(first),
                    hint(variant)
                ),
            );
        }
    }
}
