//! The pipeline of each macro: parse into the model, validate it, and generate code only when
//! no error was found. Errors go out as `compile_error!`s next to the item as written, so the
//! rest of the crate keeps compiling and every mistake shows in one build.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, ImplItem, ItemFn, ItemImpl};

use crate::codegen;
use crate::ctxt::Ctxt;
use crate::model::Place;
use crate::parse;
use crate::validate;

/// `#[tool]` on a free function.
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    // A function that does not parse is given back untouched: rustc then reports the real
    // syntax error and IDEs keep working.
    let Ok(mut item) = syn::parse2::<ItemFn>(input.clone()) else {
        return input;
    };
    let cx = Ctxt::new();
    let tool = parse::tool_fn(args, &item.attrs, &item.vis, &item.sig, Place::Free, &cx);
    validate::tool(&tool, &cx);
    codegen::strip_param_attrs(&mut item.sig);
    match cx.check() {
        Ok(()) => codegen::tool_item(&item, &tool),
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#item #error)
        }
    }
}

/// `#[toolbox]` on an impl block whose `#[tool]` methods become tools sharing one `Arc<Self>`.
pub fn toolbox(args: TokenStream, input: TokenStream) -> TokenStream {
    let Ok(mut item) = syn::parse2::<ItemImpl>(input.clone()) else {
        return input;
    };
    let cx = Ctxt::new();
    parse::toolbox_impl(&args, &item, &cx);
    let mut tools = Vec::new();
    let mut used_paths = Vec::new();
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        let Some(position) = method.attrs.iter().position(parse::is_tool_attr) else {
            continue;
        };
        let attr = method.attrs.remove(position);
        // The attribute is consumed here; re-import its path so the user's `use` of it counts
        // as used.
        let path = attr.path();
        used_paths.push(quote!(#[allow(unused_imports)] use #path as _;));
        let args = parse::method_tool_args(&attr, &cx);
        let tool = parse::tool_fn(
            args,
            &method.attrs,
            &method.vis,
            &method.sig,
            Place::Toolbox,
            &cx,
        );
        // Each method is validated as it is read, so its errors stay together.
        validate::tool(&tool, &cx);
        codegen::strip_param_attrs(&mut method.sig);
        tools.push(tool);
    }
    validate::toolbox(&tools, item.impl_token, &cx);
    match cx.check() {
        Ok(()) => codegen::toolbox_item(&item, &tools, &used_paths),
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#item const _: () = { #(#used_paths)* }; #error)
        }
    }
}

/// `#[derive(Entity)]`.
pub fn resource(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(error) => return error.into_compile_error(),
    };
    let cx = Ctxt::new();
    let resource = parse::resource(&input, &cx);
    validate::resource(&resource, &cx);
    match cx.check() {
        Ok(()) => codegen::resource(&resource),
        Err(error) => error.into_compile_error(),
    }
}

/// `#[derive(IntoToolError)]`.
pub fn tool_error(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(error) => return error.into_compile_error(),
    };
    let cx = Ctxt::new();
    let error = parse::tool_error(&input, &cx);
    if let Some(error) = &error {
        validate::tool_error(error, &cx);
    }
    if let Err(errors) = cx.check() {
        return errors.into_compile_error();
    }
    // `None` (a union) always records an error, so it never gets here.
    error.map_or_else(TokenStream::new, |error| codegen::tool_error(&error))
}
