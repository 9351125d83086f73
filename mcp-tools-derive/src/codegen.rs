//! Code generation from a validated model. Every runtime item is named by absolute path
//! (`::mcp_tools::...`); serde and schemars are reached through `::mcp_tools::__private`, so users
//! need not depend on them.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, ItemImpl, Signature, Type};

use crate::model::{
    ArgDefault, ConflictPolicy, ErrorCodes, Flag, Output, ParamKind, Resource, Stateful,
    StatefulKind, ToolErrorType, ToolFn, VariantFields,
};
use crate::naming::unraw;

/// Removes the `#[arg]` attributes and doc comments of the parameters, which rustc accepts on
/// neither, so the function can be emitted as written.
pub fn strip_param_attrs(sig: &mut Signature) {
    for input in sig.inputs.iter_mut() {
        if let FnArg::Typed(pat_type) = input {
            pat_type
                .attrs
                .retain(|attr| !attr.path().is_ident("arg") && !attr.path().is_ident("doc"));
        }
    }
}

/// `#[tool]` on a free function: the function, a zero-sized type of the same name and its
/// `Tool` impl.
pub fn tool_item(item: &ItemFn, tool: &ToolFn) -> TokenStream {
    let ident = &tool.ident;
    let vis = &tool.vis;
    let (name, _) = tool.name();
    let struct_doc = format!(
        "The `{name}` tool: register it with `tools![{ident}]` or `ToolSet::new().with({ident}::tool())`."
    );
    let body = tool_impl(tool, &quote!(#ident), &quote!(#ident));
    quote! {
        #item

        #[doc = #struct_doc]
        #[allow(non_camel_case_types, dead_code)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #ident {}

        #[doc(hidden)]
        const _: () = {
            #[automatically_derived]
            impl #ident {
                /// The tool, to add to a `ToolSet`.
                pub const fn tool() -> Self {
                    #ident {}
                }
            }

            #body
        };
    }
}

/// `#[toolbox]`: the impl, one wrapper type per tool method holding the shared `Arc<Self>`,
/// their `Tool` impls and `tool_set()`. `used_paths` re-imports the consumed `#[tool]` paths.
pub fn toolbox_item(item: &ItemImpl, tools: &[ToolFn], used_paths: &[TokenStream]) -> TokenStream {
    let self_ty = &item.self_ty;
    let wrappers: Vec<_> = tools
        .iter()
        .map(|tool| format_ident!("__McpTool_{}", unraw(&tool.ident)))
        .collect();
    let bodies = tools.iter().zip(&wrappers).map(|(tool, wrapper)| {
        let method = &tool.ident;
        let callee = if tool.receiver.is_some() {
            quote!(self.0.#method)
        } else {
            quote!(<#self_ty>::#method)
        };
        let body = tool_impl(tool, &quote!(#wrapper), &callee);
        quote!(const _: () = { #body };)
    });
    quote! {
        #item

        #[doc(hidden)]
        const _: () = {
            #(#used_paths)*

            #(
                #[allow(non_camel_case_types)]
                pub struct #wrappers(::std::sync::Arc<#self_ty>);
            )*

            #[automatically_derived]
            impl #self_ty {
                /// The `#[tool]` methods of this impl as a `ToolSet`, all sharing `self`.
                pub fn tool_set(self: ::std::sync::Arc<Self>) -> ::mcp_tools::tools::ToolSet {
                    ::mcp_tools::tools::ToolSet::new()
                        #(.with(#wrappers(::std::sync::Arc::clone(&self))))*
                }
            }

            #(#bodies)*
        };
    }
}

/// What the parameters become: fields of the arguments struct, assertions and helpers, values
/// extracted from the request context, and the arguments of the call.
struct Arguments {
    fields: Vec<TokenStream>,
    helpers: Vec<TokenStream>,
    extractions: Vec<TokenStream>,
    call_args: Vec<TokenStream>,
}

/// `cx` is an expression of type `&Context`: the function of a `creates` tool runs inside a
/// future that only borrows the context.
fn arguments(tool: &ToolFn, cx: &TokenStream) -> Arguments {
    let mutates = tool.kind() == Some(StatefulKind::Mutates) || tool.is_step();
    let step = tool.is_step();
    let mut resources = 0usize;
    let mut out = Arguments {
        fields: Vec::new(),
        helpers: Vec::new(),
        extractions: Vec::new(),
        call_args: Vec::new(),
    };
    for (index, param) in tool.params.iter().enumerate() {
        let ty = &param.ty;
        let ident = &param.ident;
        match param.kind {
            ParamKind::Resource { .. } if step => {
                let resource = format_ident!("__mcp_resource_{}", resources);
                resources += 1;
                out.call_args.push(quote!(#resource));
            }
            ParamKind::Resource { .. } => out.call_args.push(quote!(__mcp_resource)),
            ParamKind::Effects { .. } => out.call_args.push(quote!(__mcp_effects)),
            ParamKind::Context => out.call_args.push(quote!(::core::clone::Clone::clone(#cx))),
            ParamKind::ContextRef => out.call_args.push(quote!(#cx)),
            ParamKind::Extract => {
                let var = format_ident!("__mcp_extracted_{}", index);
                let refused = quote! {
                    ::core::convert::From::from(error.into_result())
                };
                out.extractions.push(quote_spanned! {ty.span()=>
                    let #var = match <#ty as ::mcp_tools::__private::FromContext>::from_context(&__mcp_cx) {
                        ::core::result::Result::Ok(value) => value,
                        ::core::result::Result::Err(error) => {
                            return #refused;
                        }
                    };
                });
                out.call_args.push(quote!(#var));
            }
            ParamKind::Argument { .. } => {
                out.helpers.push(quote_spanned! {ty.span()=>
                    const _: () = ::mcp_tools::__private::assert_parameter::<#ty>();
                });
                let mut attrs = Vec::new();
                let doc = param
                    .attrs
                    .description
                    .as_ref()
                    .map(|d| d.value())
                    .or_else(|| param.doc.clone());
                if let Some(doc) = doc {
                    attrs.push(quote!(#[doc = #doc]));
                }
                let wire = param.wire_name();
                if *ident != wire {
                    attrs.push(quote!(#[serde(rename = #wire)]));
                }
                match &param.attrs.default {
                    Some(ArgDefault::Trait) => attrs.push(quote!(#[serde(default)])),
                    Some(ArgDefault::Expr(expr)) => {
                        let function = format_ident!("__mcp_default_{}", index);
                        let path = function.to_string();
                        out.helpers.push(quote! {
                            fn #function() -> #ty {
                                #expr
                            }
                        });
                        attrs.push(quote!(#[serde(default = #path)]));
                    }
                    None => {}
                }
                out.fields.push(quote!(#(#attrs)* pub #ident: #ty));
                if mutates {
                    // The transition may run again on rebase: each run gets its own copy.
                    out.call_args.push(quote_spanned! {ty.span()=>
                        ::mcp_tools::__private::stateful::fresh::<#ty>(&__mcp_args.#ident)
                    });
                } else {
                    out.call_args.push(quote!(__mcp_args.#ident));
                }
            }
        }
    }
    out
}

/// `T` of a `&mut T` (or `&T`) entity parameter.
fn entity_type(ty: &syn::Type) -> &syn::Type {
    match ty {
        syn::Type::Reference(reference) => &reference.elem,
        other => other,
    }
}

/// A `step` over several entities: each `&mut Entity` parameter gets a handle argument
/// (`<name>_id`) and a version argument (`<name>_expected_version`), and the call runs the
/// function as one step in the store's atomic boundary. Adds the injected arguments to
/// `fields`.
fn step_parts(
    tool: &ToolFn,
    call: &TokenStream,
    fields: &mut Vec<TokenStream>,
    helpers: &mut Vec<TokenStream>,
) -> ImplParts {
    let name = tool.name().0;
    let resources: Vec<(String, &syn::Type)> = tool
        .step_resources()
        .into_iter()
        .map(|(param, _)| (unraw(&param.ident), entity_type(&param.ty)))
        .collect();
    let mut injected = Vec::new();
    let mut parts = Vec::new();
    let mut published = Vec::new();
    let mut typed = Vec::new();
    for (index, (param, ty)) in resources.iter().enumerate() {
        helpers.push(quote_spanned! {ty.span()=>
            const _: () = ::mcp_tools::__private::stateful::assert_resource::<#ty>();
        });
        let (handle, version) = (format!("{param}_id"), format!("{param}_expected_version"));
        let handle_doc = format!(
            "Which entity is `{param}`: its handle, as returned in `handle` and `resumption.handle` by any result about it."
        );
        let version_doc = format!(
            "The version of `{param}` you based this change on (a number, or the `validator` of a result about it). If it changed since, nothing changes and the result (`stale_view`) says what moved."
        );
        let (handle_field, version_field) = (
            format_ident!("__mcp_handle_{}", index),
            format_ident!("__mcp_expected_{}", index),
        );
        injected.push(quote! {
            #[doc = #handle_doc]
            #[serde(rename = #handle)]
            pub #handle_field: ::std::string::String
        });
        // Required in the schema; a call without it is answered with what to send.
        injected.push(quote! {
            #[doc = #version_doc]
            #[serde(rename = #version)]
            #[schemars(with = "::mcp_tools::stateful::ExpectedVersion")]
            pub #version_field: ::core::option::Option<::mcp_tools::stateful::ExpectedVersion>
        });
        parts.push(quote! {
            ::mcp_tools::stateful::StepPartSpec {
                kind: <#ty as ::mcp_tools::store::Entity>::kind(),
                handle: ::core::mem::take(&mut __mcp_args.#handle_field),
                expected_version: __mcp_args.#version_field.take(),
                precondition: true,
            }
        });
        published.push(quote! {
            ::mcp_tools::__private::serde_json::json!({
                "name": #param,
                "resource": <#ty as ::mcp_tools::store::Entity>::KIND,
                "handle": #handle,
                "precondition": #version,
            })
        });
        let resource = format_ident!("__mcp_resource_{}", index);
        typed.push(quote!(#resource: &mut #ty));
    }
    let operation_doc = "A new UUID you generate for this change (or another unguessable id of at least 22 URL-safe characters). To retry after a lost or interrupted response, send the same id with the same arguments: the recorded outcome comes back and nothing is applied twice.";
    injected.push(quote! {
        #[doc = #operation_doc]
        #[serde(rename = "operation_id")]
        #[schemars(length(min = 1, max = 200))]
        pub __mcp_operation_id: ::std::string::String
    });
    injected.append(fields);
    *fields = injected;

    let as_result = match &tool.output {
        Output::Result { err, .. } => {
            helpers.push(assert_error(err));
            quote!(#call.map_err(::mcp_tools::stateful::tool_error))
        }
        Output::Plain(ty) | Output::Structured(ty) => {
            helpers.push(quote_spanned! {tool.return_span=>
                const _: () = ::mcp_tools::__private::assert_output::<#ty>();
            });
            quote!(::core::result::Result::Ok::<_, ::mcp_tools::ToolError>(#call))
        }
        Output::Unit(_) | Output::Unsupported(..) => quote!(#call),
    };
    let payload = payload_description(tool, true, helpers);
    helpers.push(quote! {
        const __MCP_PAYLOAD: &[::mcp_tools::stateful::PayloadArgument] = #payload;
    });
    let typed_fn = format_ident!("typed{}", resources.len());
    ImplParts {
        args: quote!(::mcp_tools::stateful::WithRaw<__McpArgs>),
        output: quote!(::mcp_tools::stateful::StatefulReply),
        input_schema: quote!(::mcp_tools::__private::input_schema::<__McpArgs>(generator)),
        output_generator: format_ident!("_generator"),
        output_schema: quote!(::core::option::Option::Some(
            ::mcp_tools::store::StepOutcome::json_schema()
        )),
        info_meta: Some(quote! {
            .with_meta(
                ::mcp_tools::protocol::framework::STATE_META_KEY,
                ::mcp_tools::__private::serde_json::json!({
                    "tool": "step",
                    "resources": [#(#published),*],
                    "idempotency": "operation_id",
                    "concurrency": "versioned",
                }),
            )
        }),
        call_lints: quote!(unused_variables, unused_mut),
        input: format_ident!("__mcp_input"),
        call_body: quote! {
            let ::mcp_tools::stateful::WithRaw { raw: __mcp_raw, args: mut __mcp_args } = __mcp_input;
            let __mcp_spec = ::mcp_tools::stateful::StepSpec {
                tool: #name,
                arguments: __MCP_PAYLOAD,
                parts: ::std::vec![#(#parts),*],
                operation_id: ::core::option::Option::Some(::core::mem::take(
                    &mut __mcp_args.__mcp_operation_id,
                )),
            };
            let __mcp_transition = ::mcp_tools::store::StepTransition::#typed_fn(
                move |#(#typed),*| #as_result,
            );
            ::mcp_tools::stateful::mutate_step(
                &__mcp_cx,
                __mcp_spec,
                &__mcp_raw,
                __mcp_transition,
            ).await
        },
    }
}

/// What differs between the `Tool` impl of a plain tool and of a stateful one.
struct ImplParts {
    /// `type Args`, also the type of the `call` input.
    args: TokenStream,
    /// `type Output`, also what `call` returns.
    output: TokenStream,
    /// The body of `input_schema`, with `generator` in scope.
    input_schema: TokenStream,
    /// The generator parameter of `output_schema`: `_generator` where the schema is fixed.
    output_generator: Ident,
    output_schema: TokenStream,
    /// What `info` adds to the tool's `_meta`, if anything.
    info_meta: Option<TokenStream>,
    /// The lints `call` allows.
    call_lints: TokenStream,
    /// The name of the `call` input.
    input: Ident,
    call_body: TokenStream,
}

/// The arguments struct, the assertions and the `Tool` impl for `target`, whose `call` invokes
/// `callee(...)`.
fn tool_impl(tool: &ToolFn, target: &TokenStream, callee: &TokenStream) -> TokenStream {
    let cx = if tool.kind() == Some(StatefulKind::Creates) {
        quote!(__mcp_cx_ref)
    } else {
        quote!(&__mcp_cx)
    };
    let Arguments {
        mut fields,
        mut helpers,
        extractions,
        call_args,
    } = arguments(tool, &cx);
    let await_ = tool.is_async.then(|| quote!(.await));
    let call = quote!(#callee(#(#call_args),*) #await_);
    let parts = match tool.stateful() {
        None if tool.is_step() => step_parts(tool, &call, &mut fields, &mut helpers),
        None => plain_parts(tool, &call, &extractions, &mut helpers),
        Some(stateful) => stateful_parts(
            tool,
            stateful,
            &call,
            &extractions,
            &mut fields,
            &mut helpers,
        ),
    };
    let ImplParts {
        args,
        output,
        input_schema,
        output_generator,
        output_schema,
        info_meta,
        call_lints,
        input,
        call_body,
    } = parts;
    let info = info(tool);
    let info = match info_meta {
        Some(meta) => quote!(#info #meta),
        None => info,
    };
    let step_entity = tool
        .is_step()
        .then(|| {
            tool.step_resources()
                .first()
                .map(|(param, _)| entity_type(&param.ty))
        })
        .flatten();
    let entity_kind = tool
        .stateful()
        .map(|stateful| &stateful.ty)
        .or(step_entity)
        .map(|ty| {
            quote! {
                fn entity_kind(&self) -> ::core::option::Option<&'static str> {
                    ::core::option::Option::Some(
                        <#ty as ::mcp_tools::store::Entity>::KIND,
                    )
                }
            }
        });
    let effect_kinds = tool.effect_type().map(|effect| {
        quote! {
            fn effect_kinds(&self) -> &'static [&'static str] {
                const KINDS: &[&str] = &[<#effect as ::mcp_tools::effects::Effect>::KIND];
                KINDS
            }
        }
    });
    let args_struct = args_struct(&fields);
    quote! {
        #args_struct

        #(#helpers)*

        #[automatically_derived]
        impl ::mcp_tools::tools::Tool for #target {
            type Args = #args;
            type Output = #output;

            fn info(&self) -> ::mcp_tools::tools::ToolInfo {
                #info
            }

            fn input_schema(
                &self,
                generator: &mut ::mcp_tools::__private::schemars::SchemaGenerator,
            ) -> ::mcp_tools::__private::serde_json::Value {
                #input_schema
            }

            fn output_schema(
                &self,
                #output_generator: &mut ::mcp_tools::__private::schemars::SchemaGenerator,
            ) -> ::core::option::Option<::mcp_tools::__private::serde_json::Value> {
                #output_schema
            }

            #entity_kind

            #effect_kinds

            #[allow(#call_lints)]
            async fn call(
                &self,
                #input: #args,
                __mcp_cx: ::mcp_tools::Context,
            ) -> #output {
                #call_body
            }
        }
    }
}

/// The `ToolInfo`: name, description, title, annotations and required scopes.
fn info(tool: &ToolFn) -> TokenStream {
    let (name, _) = tool.name();
    let description = tool.description().unwrap_or_default();
    let title = tool
        .attrs
        .title
        .as_ref()
        .map(|title| quote!(.title(#title)));
    let annotations = annotations(tool);
    let scopes = tool.attrs.scopes.as_ref().map(|scopes| {
        let scopes = &scopes.scopes;
        quote!(.scopes([#(#scopes),*]))
    });
    let task = tool.attrs.task.as_ref().map(|task| {
        let mode = if task.required {
            quote!(Required)
        } else {
            quote!(Optional)
        };
        quote!(.task_support(::mcp_tools::tools::TaskSupport::#mode))
    });
    quote! {
        ::mcp_tools::tools::ToolInfo::new(#name, #description)
            #title
            .annotations(#annotations)
            #scopes
            #task
    }
}

/// The published hints (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`).
fn annotations(tool: &ToolFn) -> TokenStream {
    let hint = |flag: Option<Flag>| match flag {
        Some(flag) => {
            let value = flag.lit();
            quote!(::core::option::Option::Some(#value))
        }
        None => quote!(::core::option::Option::None),
    };
    let hints = tool.hints();
    let read_only = hint(hints.read_only);
    let destructive = hint(hints.destructive);
    let idempotent = hint(hints.idempotent);
    let open_world = hint(hints.open_world);
    quote! {
        ::mcp_tools::tools::ToolAnnotations {
            title: ::core::option::Option::None,
            read_only_hint: #read_only,
            destructive_hint: #destructive,
            idempotent_hint: #idempotent,
            open_world_hint: #open_world,
        }
    }
}

/// A plain tool: the function's value converts into the result.
fn plain_parts(
    tool: &ToolFn,
    call: &TokenStream,
    extractions: &[TokenStream],
    helpers: &mut Vec<TokenStream>,
) -> ImplParts {
    let (out_ty, convert) = output_type(&tool.output, helpers);
    let ret = tool.return_span;
    let output_schema = quote_spanned! {ret=>
        <#out_ty as ::mcp_tools::tools::IntoCallToolResult>::output_schema(generator)
    };
    let into_result = quote_spanned! {ret=>
        ::mcp_tools::__private::Outcome(::mcp_tools::tools::IntoCallToolResult::into_reply(__mcp_out))
    };
    ImplParts {
        args: quote!(__McpArgs),
        output: quote!(::mcp_tools::__private::Outcome),
        input_schema: quote!(::mcp_tools::__private::input_schema::<__McpArgs>(generator)),
        output_generator: format_ident!("generator"),
        output_schema,
        info_meta: None,
        call_lints: quote!(unused_variables),
        input: format_ident!("__mcp_args"),
        call_body: quote! {
            #(#extractions)*
            let __mcp_out = #call;
            let __mcp_out: #out_ty = #convert;
            #into_result
        },
    }
}

/// The type the return value converts into and the conversion of `__mcp_out`; pushes the
/// assertions that point at the return type when it cannot be a result.
fn output_type(output: &Output, helpers: &mut Vec<TokenStream>) -> (TokenStream, TokenStream) {
    match output {
        Output::Plain(ty) => (quote!(#ty), quote!(__mcp_out)),
        Output::Structured(ty) => {
            helpers.push(assert_output(ty));
            (
                quote!(::mcp_tools::Structured<#ty>),
                quote!(::mcp_tools::Structured(__mcp_out)),
            )
        }
        Output::Result { ok, err } => {
            helpers.push(assert_error(err));
            match &**ok {
                Output::Structured(ty) => {
                    helpers.push(assert_output(ty));
                    (
                        quote!(::core::result::Result<::mcp_tools::Structured<#ty>, #err>),
                        quote!(__mcp_out.map(::mcp_tools::Structured)),
                    )
                }
                Output::Plain(ty) => (quote!(::core::result::Result<#ty, #err>), quote!(__mcp_out)),
                // Rejected by validation.
                _ => (
                    quote!(::mcp_tools::tools::CallToolResult),
                    quote!(__mcp_out),
                ),
            }
        }
        // Rejected by validation.
        Output::Unit(_) | Output::Unsupported(..) => (
            quote!(::mcp_tools::tools::CallToolResult),
            quote!(__mcp_out),
        ),
    }
}

fn assert_output(ty: &Type) -> TokenStream {
    quote_spanned! {ty.span()=>
        const _: () = ::mcp_tools::__private::assert_output::<#ty>();
    }
}

fn assert_error(err: &Type) -> TokenStream {
    quote_spanned! {err.span()=>
        const _: () = ::mcp_tools::__private::assert_error::<#err>();
    }
}

/// A `creates`, `reads` or `mutates` tool: the function's result goes through the registered
/// state store, and the outcome is the tool result. Adds the injected arguments to `fields`.
fn stateful_parts(
    tool: &ToolFn,
    stateful: &Stateful,
    call: &TokenStream,
    extractions: &[TokenStream],
    fields: &mut Vec<TokenStream>,
    helpers: &mut Vec<TokenStream>,
) -> ImplParts {
    let resource = &stateful.ty;
    let kind = stateful.kind;
    let name = tool.name().0;
    helpers.push(quote_spanned! {resource.span()=>
        const _: () = ::mcp_tools::__private::stateful::assert_resource::<#resource>();
    });

    let handle = tool.handle_name().unwrap_or_default();
    let expected_version = tool.takes_expected_version();
    let operation_id = tool.takes_operation_id();
    let mut injected = Vec::new();
    if kind != StatefulKind::Creates {
        injected.push(quote! {
            #[serde(rename = #handle)]
            pub __mcp_handle: ::std::string::String
        });
    }
    // A version by number or by validator; optional in the schema, since a validator may come
    // in `_meta` instead (the runtime says what is missing).
    let version_argument = |wire: &str, field: Ident| {
        quote! {
            #[serde(rename = #wire, default)]
            #[schemars(with = "::mcp_tools::stateful::ExpectedVersion")]
            pub #field: ::core::option::Option<
                ::mcp_tools::stateful::ExpectedVersion,
            >
        }
    };
    let basis_version = kind == StatefulKind::Reads;
    if basis_version {
        injected.push(version_argument(
            "basis_version",
            format_ident!("__mcp_basis_version"),
        ));
        // Left out of the schema when the entity has no collections.
        injected.push(quote! {
            #[serde(rename = "items_cursor", default)]
            pub __mcp_items_cursor: ::core::option::Option<::std::string::String>
        });
    }
    if expected_version {
        injected.push(version_argument(
            "expected_version",
            format_ident!("__mcp_expected_version"),
        ));
    }
    if operation_id {
        injected.push(quote! {
            #[serde(rename = "operation_id")]
            #[schemars(length(min = 1, max = 200))]
            pub __mcp_operation_id: ::std::string::String
        });
    }
    injected.append(fields);
    *fields = injected;

    if let Some(on_conflict) = &tool.attrs.on_conflict
        && on_conflict.policy == ConflictPolicy::Items
    {
        helpers.push(quote_spanned! {on_conflict.span=>
            const _: () = ::mcp_tools::__private::stateful::assert_has_collections::<#resource>();
        });
    }

    // `touches = [field, ...]`: each must be a field of the resource. A field access in dead code
    // makes rustc name the bad field and list the real ones.
    if let Some(touches) = &tool.attrs.touches {
        let accesses = touches.fields.iter().map(|field| {
            quote_spanned! {field.span()=>
                let _ = &__mcp_resource.#field;
            }
        });
        helpers.push(quote! {
            #[allow(dead_code, unreachable_code)]
            fn __mcp_touches_are_fields(__mcp_resource: &#resource) {
                #(#accesses)*
            }
        });
    }

    let ret = tool.return_span;
    // The function's value as `Result<T, ToolError>` / `Result<T, E>`.
    let (ok_ty, as_result) = match &tool.output {
        Output::Result { ok, err } => {
            helpers.push(assert_error(err));
            let ok_ty = match &**ok {
                Output::Plain(ty) | Output::Structured(ty) => quote!(#ty),
                _ => quote!(()),
            };
            (
                ok_ty,
                quote!(#call.map_err(::mcp_tools::stateful::tool_error)),
            )
        }
        Output::Plain(ty) | Output::Structured(ty) => (
            quote!(#ty),
            quote!(::core::result::Result::Ok::<_, ::mcp_tools::ToolError>(#call)),
        ),
        Output::Unit(_) | Output::Unsupported(..) => (quote!(()), quote!(#call)),
    };
    if kind != StatefulKind::Creates {
        helpers.push(quote_spanned! {ret=>
            const _: () = ::mcp_tools::__private::assert_output::<#ok_ty>();
        });
    }

    let operation = if operation_id {
        // Taken rather than moved: the function of a `creates` tool moves the arguments whole.
        quote!(::core::option::Option::Some(::core::mem::take(
            &mut __mcp_args.__mcp_operation_id
        )))
    } else {
        quote!(::core::option::Option::None)
    };
    if kind != StatefulKind::Reads {
        let payload = payload_description(tool, operation_id, helpers);
        helpers.push(quote! {
            const __MCP_PAYLOAD: &[::mcp_tools::stateful::PayloadArgument] = #payload;
        });
    }
    let contract = published_contract(tool, kind, &tool.output);
    helpers.push(quote! {
        const __MCP_CONTRACT: ::mcp_tools::stateful::StatefulContract = #contract;
    });
    let (output_schema, body) = match kind {
        StatefulKind::Creates => (
            quote!(__MCP_CONTRACT.mutation_schema::<#resource, ()>(generator)),
            quote! {
                let __mcp_spec = ::mcp_tools::stateful::CreateSpec::<#resource> {
                    tool: #name,
                    arguments: __MCP_PAYLOAD,
                    operation_id: #operation,
                    resource: ::core::marker::PhantomData,
                };
                #(#extractions)*
                let __mcp_cx_ref = &__mcp_cx;
                // The store runs the function only once it has claimed the operation id, so a
                // retry of a create that happened never runs it again.
                let __mcp_creation = ::mcp_tools::store::Creation::typed::<
                    #resource,
                    ::mcp_tools::ToolError,
                >(async move {
                    let __mcp_made: ::core::result::Result<#resource, ::mcp_tools::ToolError> =
                        #as_result;
                    __mcp_made
                });
                ::mcp_tools::stateful::create::<#resource>(
                    &__mcp_cx,
                    __mcp_spec,
                    &__mcp_raw,
                    __mcp_creation,
                ).await
            },
        ),
        StatefulKind::Reads => (
            quote!(__MCP_CONTRACT.read_schema::<#ok_ty>(generator)),
            quote! {
                #(#extractions)*
                let (__mcp_snapshot, __mcp_current) = match ::mcp_tools::stateful::read::<#resource>(
                    &__mcp_cx,
                    __mcp_args.__mcp_handle,
                    __mcp_args.__mcp_basis_version,
                    __mcp_args.__mcp_items_cursor,
                ).await {
                    ::core::result::Result::Ok(read) => read,
                    ::core::result::Result::Err(result) => return ::core::convert::From::from(result),
                };
                let __mcp_resource = &__mcp_current;
                let __mcp_view: ::core::result::Result<#ok_ty, ::mcp_tools::ToolError> = #as_result;
                ::mcp_tools::stateful::read_result(__mcp_snapshot, __mcp_view)
            },
        ),
        StatefulKind::Mutates => {
            let policy = match tool.conflict_policy() {
                ConflictPolicy::Rebase => {
                    let touches = tool.touched_fields();
                    // The store compares serialized names: the entity maps its fields to them.
                    quote! {
                        ::mcp_tools::store::ConflictPolicy::rebase::<#resource>(&[#(#touches),*])
                    }
                }
                ConflictPolicy::Reconfirm => {
                    quote!(::mcp_tools::store::ConflictPolicy::Reconfirm)
                }
                ConflictPolicy::Items => {
                    quote!(::mcp_tools::store::ConflictPolicy::Items)
                }
                ConflictPolicy::Reject => {
                    quote!(::mcp_tools::store::ConflictPolicy::Reject)
                }
            };
            let expected = if expected_version {
                quote!(__mcp_args.__mcp_expected_version)
            } else {
                quote!(::core::option::Option::None)
            };
            let transition = match tool.effect_type() {
                Some(effect) => quote! {
                    ::mcp_tools::store::Transition::typed_with_effects(
                        move |__mcp_resource: &mut #resource,
                              __mcp_effects: &mut ::mcp_tools::effects::Effects<#effect>| #as_result,
                    )
                },
                None => quote! {
                    ::mcp_tools::store::Transition::typed(
                        move |__mcp_resource: &mut #resource| #as_result,
                    )
                },
            };
            (
                quote!(__MCP_CONTRACT.mutation_schema::<#resource, #ok_ty>(generator)),
                quote! {
                        let __mcp_spec = ::mcp_tools::stateful::MutationSpec {
                        tool: #name,
                        arguments: __MCP_PAYLOAD,
                        policy: #policy,
                        handle: __mcp_args.__mcp_handle,
                        precondition: #expected_version,
                        expected_version: #expected,
                        operation_id: #operation,
                        resource: ::core::marker::PhantomData,
                    };
                    let __mcp_transition = #transition;
                    ::mcp_tools::stateful::mutate::<#resource>(
                        &__mcp_cx,
                        __mcp_spec,
                        &__mcp_raw,
                        __mcp_transition,
                    ).await
                },
            )
        }
    };

    ImplParts {
        args: quote!(::mcp_tools::stateful::WithRaw<__McpArgs>),
        // The reply as the store's outcome made it (a mutation may ask for a confirmation first).
        output: quote!(::mcp_tools::stateful::StatefulReply),
        input_schema: quote! {
            ::mcp_tools::stateful::input_schema::<__McpArgs, #resource>(
                generator,
                ::mcp_tools::stateful::Injected {
                    handle: #handle,
                    expected_version: #expected_version,
                    operation_id: #operation_id,
                    basis_version: #basis_version,
                    items_cursor: #basis_version,
                },
            )
        },
        output_generator: format_ident!("generator"),
        output_schema: quote!(::core::option::Option::Some(#output_schema)),
        info_meta: Some(quote! {
            .with_meta(
                ::mcp_tools::protocol::framework::STATE_META_KEY,
                __MCP_CONTRACT.meta::<#resource>(),
            )
        }),
        call_lints: quote!(unused_variables, unused_mut),
        input: format_ident!("__mcp_input"),
        call_body: quote! {
            let ::mcp_tools::stateful::WithRaw { raw: __mcp_raw, args: mut __mcp_args } = __mcp_input;
            #body
        },
    }
}

/// The `StatefulContract` constant of a stateful tool: what it publishes of its concurrency
/// contract and which codes its outcomes can carry.
fn published_contract(tool: &ToolFn, kind: StatefulKind, output: &Output) -> TokenStream {
    let support = quote!(::mcp_tools::stateful);
    let kind_path = match kind {
        StatefulKind::Creates => quote!(#support::ToolKind::Creates),
        StatefulKind::Reads => quote!(#support::ToolKind::Reads),
        StatefulKind::Mutates => quote!(#support::ToolKind::Mutates),
    };
    let policy = match tool.conflict_policy() {
        ConflictPolicy::Reject => quote!(#support::PublishedPolicy::Reject),
        ConflictPolicy::Rebase => quote!(#support::PublishedPolicy::Rebase),
        ConflictPolicy::Reconfirm => quote!(#support::PublishedPolicy::Reconfirm),
        ConflictPolicy::Items => quote!(#support::PublishedPolicy::Items),
    };
    let handle = tool.handle_name().unwrap_or_default();
    let expected_version = tool.takes_expected_version();
    let operation_id = tool.takes_operation_id();
    let touches = tool.touched_fields();
    let terminal = tool.is_terminal();
    let effects: Vec<TokenStream> = tool
        .effect_type()
        .map(|effect| quote!(<#effect as ::mcp_tools::effects::Effect>::KIND))
        .into_iter()
        .collect();
    let domain_codes = match output {
        Output::Result { err, .. } => {
            quote!(<#err as ::mcp_tools::IntoToolError>::declared_codes)
        }
        _ => quote!(#support::no_domain_codes),
    };
    quote! {
        #support::StatefulContract {
            kind: #kind_path,
            handle: #handle,
            expected_version: #expected_version,
            operation_id: #operation_id,
            policy: #policy,
            touches: &[#(#touches),*],
            terminal: #terminal,
            effects: &[#(#effects),*],
            domain_codes: #domain_codes,
        }
    }
}

/// What the operation-id fingerprint needs to know of the tool's own arguments: which are
/// optional and which have a default, so a retry that leaves one out and a retry that sends its
/// `null` or its default are one request. Empty without an operation id.
fn payload_description(
    tool: &ToolFn,
    operation_id: bool,
    helpers: &mut Vec<TokenStream>,
) -> TokenStream {
    if !operation_id {
        return quote!(&[]);
    }
    let entries = tool.params.iter().enumerate().filter_map(|(index, param)| {
        let ParamKind::Argument { optional } = param.kind else {
            return None;
        };
        let name = param.wire_name();
        let ty = &param.ty;
        let default = match &param.attrs.default {
            None => quote!(::core::option::Option::None),
            Some(default) => {
                let value = match default {
                    ArgDefault::Trait => quote!(<#ty as ::core::default::Default>::default()),
                    ArgDefault::Expr(_) => {
                        let function = format_ident!("__mcp_default_{}", index);
                        quote!(#function())
                    }
                };
                let function = format_ident!("__mcp_default_json_{}", index);
                let json = quote_spanned! {ty.span()=>
                    ::mcp_tools::__private::stateful::default_json::<#ty>(&#value)
                };
                helpers.push(quote! {
                    fn #function() -> ::core::option::Option<::mcp_tools::__private::serde_json::Value> {
                        #json
                    }
                });
                quote!(::core::option::Option::Some(#function))
            }
        };
        Some(quote! {
            ::mcp_tools::stateful::PayloadArgument {
                name: #name,
                optional: #optional,
                default: #default,
            }
        })
    });
    quote!(&[#(#entries),*])
}

/// The hidden struct the arguments decode into: serde names the field in decode errors and
/// schemars sees the parameters' docs.
fn args_struct(fields: &[TokenStream]) -> TokenStream {
    quote! {
        #[derive(::mcp_tools::__private::serde::Deserialize, ::mcp_tools::__private::schemars::JsonSchema)]
        #[serde(crate = "::mcp_tools::__private::serde", deny_unknown_fields)]
        #[schemars(crate = "::mcp_tools::__private::schemars")]
        #[allow(non_camel_case_types, non_snake_case)]
        pub struct __McpArgs {
            #(#fields,)*
        }
    }
}

/// `impl Resource` for a validated resource.
pub fn resource(resource: &Resource) -> TokenStream {
    let ident = &resource.ident;
    let kind = resource.kind();
    let prefix = resource
        .attrs
        .prefix
        .as_ref()
        .map(|prefix| prefix.value())
        .unwrap_or_default();
    let ttl = match &resource.attrs.ttl_secs {
        Some(ttl) => {
            let secs = ttl.secs;
            quote!(::core::option::Option::Some(::core::time::Duration::from_secs(#secs)))
        }
        None => quote!(::core::option::Option::None),
    };
    let lifecycle = resource.attrs.lifecycle.as_ref().map(|method| {
        quote_spanned! {method.span()=>
            fn lifecycle(&self) -> ::mcp_tools::store::Lifecycle {
                #ident::#method(self)
            }
        }
    });
    let view = resource.attrs.view.as_ref().map(|path| {
        // A bare name is a method of the type; errors about it point at the name as written.
        let function = match path.get_ident() {
            Some(method) => {
                let mut ty = ident.clone();
                ty.set_span(method.span());
                quote!(#ty::#method)
            }
            None => quote!(#path),
        };
        let span = path.span();
        let call = quote_spanned! {span=>
            ::mcp_tools::__private::view_json(&#function(__mcp_entity))
        };
        let schema = quote_spanned! {span=>
            ::mcp_tools::__private::view_schema(#function, __mcp_generator)
        };
        quote! {
            fn view_schema(
                __mcp_generator: &mut ::mcp_tools::__private::schemars::SchemaGenerator,
            ) -> ::mcp_tools::__private::schemars::Schema {
                #schema
            }
            const VIEW: ::core::option::Option<
                fn(&Self) -> ::mcp_tools::__private::serde_json::Value,
            > = ::core::option::Option::Some({
                fn __mcp_view(__mcp_entity: &#ident) -> ::mcp_tools::__private::serde_json::Value {
                    #call
                }
                __mcp_view
            });
        }
    });
    let field_key = field_key(resource);
    let collections = collections(resource);
    quote! {
        #[automatically_derived]
        impl ::mcp_tools::store::Entity for #ident {
            const KIND: &'static str = #kind;
            const PREFIX: &'static str = #prefix;
            const TTL: ::core::option::Option<::core::time::Duration> = #ttl;
            #view
            #lifecycle
            #field_key
            #collections
        }
    }
}

/// `Entity::COLLECTIONS` and `Entity::collection` for the fields whose type is a `Collection`.
fn collections(resource: &Resource) -> Option<TokenStream> {
    let fields: Vec<(&String, &Ident)> = resource
        .fields
        .iter()
        .filter(|field| field.collection)
        .filter_map(|field| Some((field.key.as_ref()?, &field.ident)))
        .collect();
    if fields.is_empty() {
        return None;
    }
    let keys = fields.iter().map(|(key, _)| key);
    let arms = fields.iter().map(|(key, ident)| {
        quote_spanned! {ident.span()=>
            #key => ::core::option::Option::Some(&mut self.#ident),
        }
    });
    Some(quote! {
        const COLLECTIONS: &'static [&'static str] = &[#(#keys),*];
        fn collection(
            &mut self,
            name: &str,
        ) -> ::core::option::Option<&mut dyn ::mcp_tools::__private::Items> {
            match name {
                #(#arms)*
                _ => ::core::option::Option::None,
            }
        }
    })
}

/// `Entity::field_key` from the serde names of the fields, when any differs from its Rust name.
fn field_key(resource: &Resource) -> Option<TokenStream> {
    let arms: Vec<TokenStream> = resource
        .fields
        .iter()
        .filter(|field| field.key.as_deref() != Some(field.name.as_str()))
        .map(|field| {
            let name = &field.name;
            match &field.key {
                Some(key) => quote!(#name => ::core::option::Option::Some(#key),),
                None => quote!(#name => ::core::option::Option::None,),
            }
        })
        .collect();
    if arms.is_empty() {
        return None;
    }
    Some(quote! {
        fn field_key(field: &'static str) -> ::core::option::Option<&'static str> {
            match field {
                #(#arms)*
                _ => ::core::option::Option::Some(field),
            }
        }
    })
}

/// `impl IntoToolError`: the code of each value, the message from `Display`.
pub fn tool_error(error: &ToolErrorType) -> TokenStream {
    use crate::model::{ErrorCode, RecoveryHint};

    fn recovery(hint: &RecoveryHint) -> TokenStream {
        match hint {
            RecoveryHint::Known(variant) => {
                let variant = format_ident!("{variant}");
                quote!(::mcp_tools::Recovery::#variant)
            }
            RecoveryHint::Custom(name) => {
                quote!(::mcp_tools::Recovery::Other(::std::borrow::Cow::Borrowed(#name)))
            }
        }
    }

    fn to_tool_error(declared: &ErrorCode) -> TokenStream {
        let code = &declared.code;
        let with_recovery = declared.recovery.as_ref().map(|hint| {
            let hint = recovery(hint);
            quote!(.with_recovery(#hint))
        });
        quote!(::mcp_tools::ToolError::new(#code, message) #with_recovery)
    }

    let ident = &error.ident;
    let (impl_generics, ty_generics, where_clause) = error.generics.split_for_impl();
    let (convert, declared): (TokenStream, Vec<&ErrorCode>) = match &error.codes {
        ErrorCodes::Enum(variants) => {
            let arms = variants.iter().map(|variant| {
                let name = &variant.ident;
                let pattern = match variant.fields {
                    VariantFields::Named => quote!(#ident::#name { .. }),
                    VariantFields::Unnamed => quote!(#ident::#name(..)),
                    VariantFields::Unit => quote!(#ident::#name),
                };
                let convert = to_tool_error(&variant.code);
                quote!(#pattern => #convert,)
            });
            // Variants sharing a code declare it alike (validated), so the first one speaks
            // for all.
            let mut declared: Vec<&ErrorCode> = Vec::new();
            for variant in variants {
                if !declared.iter().any(|code| code.code == variant.code.code) {
                    declared.push(&variant.code);
                }
            }
            (quote!(match &self { #(#arms)* }), declared)
        }
        ErrorCodes::Struct(code) => (to_tool_error(code), vec![code]),
    };
    let declared = declared.into_iter().map(|declared| {
        let code = &declared.code;
        let description = declared.description.as_deref().unwrap_or_default();
        let hint = match &declared.recovery {
            Some(hint) => {
                let hint = recovery(hint);
                quote!(::std::option::Option::Some(#hint))
            }
            None => quote!(::std::option::Option::None),
        };
        quote! {
            ::mcp_tools::tools::DomainCode {
                code: #code,
                description: #description,
                recovery: #hint,
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #impl_generics ::mcp_tools::IntoToolError for #ident #ty_generics #where_clause {
            fn into_tool_error(self) -> ::mcp_tools::ToolError {
                let message = ::std::string::ToString::to_string(&self);
                #convert
            }

            fn declared_codes() -> ::std::option::Option<&'static [::mcp_tools::tools::DomainCode]> {
                const CODES: &[::mcp_tools::tools::DomainCode] = &[#(#declared),*];
                ::std::option::Option::Some(CODES)
            }
        }
    }
}
