//! Code generation. Every runtime item is named by absolute path (`::mcp_tools::...`); serde and
//! schemars are reached through `::mcp_tools::__private`, so users need not depend on them.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{ImplItem, ItemFn, ItemImpl, Type};

use crate::model::{ArgDefault, Output, ParamKind, StatefulAttr, StatefulKind, ToolFn};
use crate::parse;
use crate::validate::{self, Errors, Place};

/// `#[tool]` on a free function.
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    // A function that does not parse is given back untouched: rustc then reports the real
    // syntax error and IDEs keep working.
    let Ok(mut item) = syn::parse2::<ItemFn>(input.clone()) else {
        return input;
    };
    let mut errors = Errors::default();
    let attrs = parse::tool_attrs(args, &mut errors);
    validate::signature(&item.sig, Place::Free, &mut errors);
    let model = parse::tool_fn(attrs, &item.attrs, &item.vis, &mut item.sig, &mut errors);
    validate::tool(&model, Place::Free, &mut errors);
    if let Err(error) = errors.finish() {
        let error = error.into_compile_error();
        return quote!(#item #error);
    }

    let ident = &model.ident;
    let vis = &model.vis;
    let (name, _) = model.name();
    let struct_doc = format!(
        "The `{name}` tool: register it with `tools![{ident}]` or `ToolSet::new().with({ident}::tool())`."
    );
    let body = tool_impl(&model, &quote!(#ident), &quote!(#ident));
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

/// `#[toolbox]` on an impl block whose `#[tool]` methods become tools sharing one `Arc<Self>`.
pub fn toolbox(args: TokenStream, input: TokenStream) -> TokenStream {
    let Ok(mut item) = syn::parse2::<ItemImpl>(input.clone()) else {
        return input;
    };
    let mut errors = Errors::default();
    if !args.is_empty() {
        errors.spanned(&args, "`#[toolbox]` takes no arguments; remove them");
    }
    if !item.generics.params.is_empty() {
        errors.spanned(
            &item.generics,
            "a `#[toolbox]` impl cannot be generic: tool schemas must be known when the server is built",
        );
    }
    if let Some((path, _)) = &item.trait_ {
        errors.spanned(
            path,
            "`#[toolbox]` goes on an inherent impl (`impl MyServer { ... }`), not a trait impl",
        );
    }
    let self_ty = (*item.self_ty).clone();
    let mut tools = Vec::new();
    let mut used_paths = Vec::new();
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        let Some(position) = method.attrs.iter().position(is_tool_attr) else {
            continue;
        };
        let attr = method.attrs.remove(position);
        // The attribute is consumed here; re-import its path so the user's `use` of it counts
        // as used.
        let path = attr.path();
        used_paths.push(quote!(#[allow(unused_imports)] use #path as _;));
        let args = match &attr.meta {
            syn::Meta::Path(_) => TokenStream::new(),
            syn::Meta::List(list) => list.tokens.clone(),
            syn::Meta::NameValue(nv) => {
                errors.spanned(nv, "write `#[tool]` or `#[tool(key = value, ...)]`");
                TokenStream::new()
            }
        };
        let attrs = parse::tool_attrs(args, &mut errors);
        validate::signature(&method.sig, Place::Toolbox, &mut errors);
        let model = parse::tool_fn(
            attrs,
            &method.attrs,
            &method.vis,
            &mut method.sig,
            &mut errors,
        );
        validate::tool(&model, Place::Toolbox, &mut errors);
        tools.push(model);
    }
    if tools.is_empty() {
        errors.spanned(
            item.impl_token,
            "this `#[toolbox]` impl has no `#[tool]` methods; mark the methods to publish with `#[tool]`",
        );
    }
    if let Err(error) = errors.finish() {
        let error = error.into_compile_error();
        return quote!(#item const _: () = { #(#used_paths)* }; #error);
    }

    let wrappers: Vec<_> = tools
        .iter()
        .map(|tool| format_ident!("__McpTool_{}", parse::unraw(&tool.ident)))
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
                pub fn tool_set(self: ::std::sync::Arc<Self>) -> ::mcp_tools::ToolSet {
                    ::mcp_tools::ToolSet::new()
                        #(.with(#wrappers(::std::sync::Arc::clone(&self))))*
                }
            }

            #(#bodies)*
        };
    }
}

fn is_tool_attr(attr: &syn::Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "tool")
}

/// The arguments struct, the assertions and the `Tool` impl for `target`, whose `call` invokes
/// `callee(...)`.
fn tool_impl(tool: &ToolFn, target: &TokenStream, callee: &TokenStream) -> TokenStream {
    let (name, _) = tool.name();
    let description = tool.description().unwrap_or_default();
    let title = tool
        .attrs
        .title
        .as_ref()
        .map(|title| quote!(.title(#title)));
    let hint = |flag: &Option<syn::LitBool>| match flag {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    };
    let stateful = tool.stateful();
    let stateful_kind = stateful.map(|stateful| stateful.kind);
    let mutates = stateful_kind == Some(StatefulKind::Mutates);
    // Derived hints: reads are read-only; creates and mutations with an operation id are
    // idempotent. An explicit key wins.
    let derived = |flag: &Option<syn::LitBool>, derive: bool| match flag {
        Some(_) => hint(flag),
        None if derive => quote!(::core::option::Option::Some(true)),
        None => hint(flag),
    };
    let read_only = derived(
        &tool.attrs.read_only,
        stateful_kind == Some(StatefulKind::Reads),
    );
    let destructive = hint(&tool.attrs.destructive);
    let creates = stateful_kind == Some(StatefulKind::Creates);
    let idempotent = derived(
        &tool.attrs.idempotent,
        (creates || mutates) && tool.takes_operation_id(),
    );
    let open_world = hint(&tool.attrs.open_world);

    let mut fields = Vec::new();
    let mut helpers = Vec::new();
    let mut extractions = Vec::new();
    let mut call_args = Vec::new();
    for (index, param) in tool.params.iter().enumerate() {
        let ty = &param.ty;
        let ident = &param.ident;
        match param.kind {
            ParamKind::Resource { .. } => call_args.push(quote!(__mcp_resource)),
            ParamKind::Context => call_args.push(quote!(::core::clone::Clone::clone(&__mcp_cx))),
            ParamKind::ContextRef => call_args.push(quote!(&__mcp_cx)),
            ParamKind::Extract => {
                let var = format_ident!("__mcp_extracted_{}", index);
                extractions.push(quote_spanned! {ty.span()=>
                    let #var = match <#ty as ::mcp_tools::__private::FromContext>::from_context(&__mcp_cx) {
                        ::core::result::Result::Ok(value) => value,
                        ::core::result::Result::Err(error) => {
                            return ::mcp_tools::__private::Outcome(
                                ::mcp_tools::IntoCallToolResult::into_reply(error.into_result()),
                            );
                        }
                    };
                });
                call_args.push(quote!(#var));
            }
            ParamKind::Argument => {
                helpers.push(quote_spanned! {ty.span()=>
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
                        helpers.push(quote! {
                            fn #function() -> #ty {
                                #expr
                            }
                        });
                        attrs.push(quote!(#[serde(default = #path)]));
                    }
                    None => {}
                }
                fields.push(quote!(#(#attrs)* pub #ident: #ty));
                if mutates {
                    // The transition may run again on rebase: each run gets its own copy.
                    call_args.push(quote_spanned! {ty.span()=>
                        ::mcp_tools::__private::stateful::fresh::<#ty>(&__mcp_args.#ident)
                    });
                } else {
                    call_args.push(quote!(__mcp_args.#ident));
                }
            }
        }
    }

    if let Some(stateful) = stateful {
        let parts = Parts {
            name: &name,
            description: &description,
            title,
            annotations: quote! {
                ::mcp_tools::ToolAnnotations {
                    title: ::core::option::Option::None,
                    read_only_hint: #read_only,
                    destructive_hint: #destructive,
                    idempotent_hint: #idempotent,
                    open_world_hint: #open_world,
                }
            },
            fields,
            helpers,
            extractions,
            call_args,
        };
        return stateful_impl(tool, stateful, parts, target, callee);
    }

    let (out_ty, convert) = output_type(&tool.output, &mut helpers);
    let await_ = tool.is_async.then(|| quote!(.await));
    let ret = tool.return_span;
    let call = quote!(#callee(#(#call_args),*) #await_);
    let output_schema = quote_spanned! {ret=>
        <#out_ty as ::mcp_tools::IntoCallToolResult>::output_schema(generator)
    };
    let into_result = quote_spanned! {ret=>
        ::mcp_tools::__private::Outcome(::mcp_tools::IntoCallToolResult::into_reply(__mcp_out))
    };

    let args_struct = args_struct(&fields);
    quote! {
        #args_struct

        #(#helpers)*

        #[automatically_derived]
        impl ::mcp_tools::Tool for #target {
            type Args = __McpArgs;
            type Output = ::mcp_tools::__private::Outcome;

            fn info(&self) -> ::mcp_tools::ToolInfo {
                ::mcp_tools::ToolInfo::new(#name, #description)
                    #title
                    .annotations(::mcp_tools::ToolAnnotations {
                        title: ::core::option::Option::None,
                        read_only_hint: #read_only,
                        destructive_hint: #destructive,
                        idempotent_hint: #idempotent,
                        open_world_hint: #open_world,
                    })
            }

            fn input_schema(
                &self,
                generator: &mut ::mcp_tools::__private::schemars::SchemaGenerator,
            ) -> ::mcp_tools::__private::serde_json::Value {
                ::mcp_tools::__private::input_schema::<__McpArgs>(generator)
            }

            fn output_schema(
                &self,
                generator: &mut ::mcp_tools::__private::schemars::SchemaGenerator,
            ) -> ::core::option::Option<::mcp_tools::__private::serde_json::Value> {
                #output_schema
            }

            #[allow(unused_variables)]
            async fn call(
                &self,
                __mcp_args: __McpArgs,
                __mcp_cx: ::mcp_tools::Context,
            ) -> ::mcp_tools::__private::Outcome {
                #(#extractions)*
                let __mcp_out = #call;
                let __mcp_out: #out_ty = #convert;
                #into_result
            }
        }
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
            helpers.push(quote_spanned! {err.span()=>
                const _: () = ::mcp_tools::__private::assert_error::<#err>();
            });
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
                _ => (quote!(::mcp_tools::CallToolResult), quote!(__mcp_out)),
            }
        }
        // Rejected by validation.
        Output::Unit(_) | Output::Unsupported(..) => {
            (quote!(::mcp_tools::CallToolResult), quote!(__mcp_out))
        }
    }
}

fn assert_output(ty: &Type) -> TokenStream {
    quote_spanned! {ty.span()=>
        const _: () = ::mcp_tools::__private::assert_output::<#ty>();
    }
}

/// What `tool_impl` computed before the stateful kinds take over.
struct Parts<'a> {
    name: &'a str,
    description: &'a str,
    title: Option<TokenStream>,
    annotations: TokenStream,
    fields: Vec<TokenStream>,
    helpers: Vec<TokenStream>,
    extractions: Vec<TokenStream>,
    call_args: Vec<TokenStream>,
}

/// The `Tool` impl of a `creates`, `reads` or `mutates` tool: the function's result goes through
/// the registered state store, and the outcome is the tool result.
fn stateful_impl(
    tool: &ToolFn,
    stateful: &StatefulAttr,
    parts: Parts<'_>,
    target: &TokenStream,
    callee: &TokenStream,
) -> TokenStream {
    let Parts {
        name,
        description,
        title,
        annotations,
        mut fields,
        mut helpers,
        extractions,
        call_args,
    } = parts;
    let resource = &stateful.ty;
    let kind = stateful.kind;
    helpers.push(quote_spanned! {resource.span()=>
        const _: () = ::mcp_tools::__private::stateful::assert_resource::<#resource>();
    });

    let handle = tool.handle_name().unwrap_or_default();
    let expected_version = kind == StatefulKind::Mutates && tool.takes_expected_version();
    let operation_id = kind != StatefulKind::Reads && tool.takes_operation_id();
    let mut injected = Vec::new();
    if kind != StatefulKind::Creates {
        injected.push(quote! {
            #[serde(rename = #handle)]
            pub __mcp_handle: ::std::string::String
        });
    }
    if expected_version {
        injected.push(quote! {
            #[serde(rename = "expected_version")]
            #[schemars(range(min = 1))]
            pub __mcp_expected_version: u64
        });
    }
    if operation_id {
        injected.push(quote! {
            #[serde(rename = "operation_id")]
            #[schemars(length(min = 1, max = 200))]
            pub __mcp_operation_id: ::std::string::String
        });
    }
    injected.append(&mut fields);
    let fields = injected;

    // `touches = [field, ...]`: each must be a field of the resource. A field access in dead code
    // makes rustc name the bad field and list the real ones.
    if let Some((_, touched)) = &tool.attrs.touches {
        let accesses = touched.iter().map(|field| {
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
    let touches: Vec<String> = tool
        .attrs
        .touches
        .as_ref()
        .map(|(_, fields)| fields.iter().map(parse::unraw).collect())
        .unwrap_or_default();

    let await_ = tool.is_async.then(|| quote!(.await));
    let ret = tool.return_span;
    let call = quote!(#callee(#(#call_args),*) #await_);
    // The function's value as `Result<T, ToolError>` / `Result<T, E>`.
    let (ok_ty, as_result) = match &tool.output {
        Output::Result { ok, err } => {
            helpers.push(quote_spanned! {err.span()=>
                const _: () = ::mcp_tools::__private::assert_error::<#err>();
            });
            let ok_ty = match &**ok {
                Output::Plain(ty) | Output::Structured(ty) => quote!(#ty),
                _ => quote!(()),
            };
            (
                ok_ty,
                quote!(#call.map_err(::mcp_tools::__private::stateful::tool_error)),
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

    let store = quote! {
        let __mcp_store = match ::mcp_tools::__private::stateful::store(&__mcp_cx) {
            ::core::result::Result::Ok(store) => store,
            ::core::result::Result::Err(result) => return result,
        };
    };
    let operation = if operation_id {
        quote!(::core::option::Option::Some(__mcp_args.__mcp_operation_id))
    } else {
        quote!(::core::option::Option::None)
    };
    let (output_schema, body) = match kind {
        StatefulKind::Creates => (
            quote!(::mcp_tools::__private::stateful::mutation_output_schema()),
            quote! {
                #store
                let __mcp_spec = ::mcp_tools::__private::stateful::CreateSpec::<#resource> {
                    tool: #name,
                    operation_id: #operation,
                    resource: ::core::marker::PhantomData,
                };
                #(#extractions)*
                let __mcp_made: ::core::result::Result<#resource, ::mcp_tools::ToolError> =
                    #as_result;
                ::mcp_tools::__private::stateful::create::<#resource>(
                    &__mcp_store,
                    &__mcp_cx,
                    __mcp_spec,
                    &__mcp_raw,
                    __mcp_made,
                ).await
            },
        ),
        StatefulKind::Reads => (
            quote!(::mcp_tools::__private::stateful::read_output_schema()),
            quote! {
                #store
                #(#extractions)*
                let (__mcp_snapshot, __mcp_current) = match ::mcp_tools::__private::stateful::read::<#resource>(
                    &__mcp_store,
                    &__mcp_cx,
                    __mcp_args.__mcp_handle,
                ).await {
                    ::core::result::Result::Ok(read) => read,
                    ::core::result::Result::Err(result) => return result,
                };
                let __mcp_resource = &__mcp_current;
                let __mcp_view: ::core::result::Result<#ok_ty, ::mcp_tools::ToolError> = #as_result;
                ::mcp_tools::__private::stateful::read_result(__mcp_snapshot, __mcp_view)
            },
        ),
        StatefulKind::Mutates => {
            let policy = match tool
                .attrs
                .on_conflict
                .as_ref()
                .map(|p| p.to_string())
                .as_deref()
            {
                Some("rebase") => quote! {
                    ::mcp_tools::__private::stateful::ConflictPolicy::Rebase {
                        touches: ::std::vec![#(::std::string::String::from(#touches)),*],
                    }
                },
                Some("reconfirm") => {
                    quote!(::mcp_tools::__private::stateful::ConflictPolicy::Reconfirm)
                }
                _ => quote!(::mcp_tools::__private::stateful::ConflictPolicy::Reject),
            };
            let expected = if expected_version {
                quote!(::core::option::Option::Some(
                    __mcp_args.__mcp_expected_version
                ))
            } else {
                quote!(::core::option::Option::None)
            };
            (
                quote!(::mcp_tools::__private::stateful::mutation_output_schema()),
                quote! {
                    #store
                    let __mcp_spec = ::mcp_tools::__private::stateful::MutationSpec {
                        tool: #name,
                        policy: #policy,
                        handle: __mcp_args.__mcp_handle,
                        expected_version: #expected,
                        operation_id: #operation,
                        resource: ::core::marker::PhantomData,
                    };
                    let __mcp_transition = ::mcp_tools::__private::stateful::Transition::typed(
                        move |__mcp_resource: &mut #resource| #as_result,
                    );
                    ::mcp_tools::__private::stateful::mutate::<#resource>(
                        &__mcp_store,
                        &__mcp_cx,
                        __mcp_spec,
                        &__mcp_raw,
                        __mcp_transition,
                    ).await
                },
            )
        }
    };

    let args_struct = args_struct(&fields);
    quote! {
        #args_struct

        #(#helpers)*

        #[automatically_derived]
        impl ::mcp_tools::Tool for #target {
            type Args = ::mcp_tools::__private::stateful::WithRaw<__McpArgs>;
            type Output = ::mcp_tools::CallToolResult;

            fn info(&self) -> ::mcp_tools::ToolInfo {
                ::mcp_tools::ToolInfo::new(#name, #description)
                    #title
                    .annotations(#annotations)
            }

            fn input_schema(
                &self,
                generator: &mut ::mcp_tools::__private::schemars::SchemaGenerator,
            ) -> ::mcp_tools::__private::serde_json::Value {
                ::mcp_tools::__private::stateful::input_schema::<__McpArgs, #resource>(
                    generator,
                    ::mcp_tools::__private::stateful::Injected {
                        handle: #handle,
                        expected_version: #expected_version,
                        operation_id: #operation_id,
                    },
                )
            }

            fn output_schema(
                &self,
                _generator: &mut ::mcp_tools::__private::schemars::SchemaGenerator,
            ) -> ::core::option::Option<::mcp_tools::__private::serde_json::Value> {
                ::core::option::Option::Some(#output_schema)
            }

            #[allow(unused_variables, unused_mut)]
            async fn call(
                &self,
                __mcp_input: ::mcp_tools::__private::stateful::WithRaw<__McpArgs>,
                __mcp_cx: ::mcp_tools::Context,
            ) -> ::mcp_tools::CallToolResult {
                let ::mcp_tools::__private::stateful::WithRaw { raw: __mcp_raw, args: __mcp_args } = __mcp_input;
                #body
            }
        }
    }
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
