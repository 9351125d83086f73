//! `#[derive(Resource)]`: implements `mcp_tools::state::Resource` from
//! `#[resource(kind = "...", prefix = "...", ttl_secs = N, lifecycle = method)]`.

use proc_macro2::{TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use syn::{Attribute, Data, DeriveInput, Expr, ExprLit, Fields, Ident, Lit, LitInt, LitStr};

use crate::parse::unraw;
use crate::validate::Errors;

/// The keys `#[resource(...)]` accepts.
const RESOURCE_KEYS: &[&str] = &["kind", "prefix", "ttl_secs", "lifecycle"];

#[derive(Default)]
struct ResourceAttrs {
    kind: Option<LitStr>,
    prefix: Option<LitStr>,
    ttl_secs: Option<LitInt>,
    lifecycle: Option<Ident>,
}

pub fn derive(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(error) => return error.into_compile_error(),
    };
    let mut errors = Errors::default();
    let attrs = resource_attrs(&input.attrs, &mut errors);
    let ident = &input.ident;

    if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
        errors.spanned(
            &input.generics,
            "a resource cannot be generic: its kind, handle prefix and schema are fixed; use a concrete type",
        );
    }
    match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(fields) => {
                for field in &fields.named {
                    for attr in field.attrs.iter().filter(|a| a.path().is_ident("serde")) {
                        if let Some(key) = find_key(attr, &["rename", "flatten", "alias"]) {
                            errors.spanned(
                                attr,
                                format!(
                                    "`#[serde({key})]` is not supported on a resource field: deltas and `touches` name the top-level fields by their Rust names; remove it"
                                ),
                            );
                        }
                    }
                }
            }
            _ => errors.at(
                ident.span(),
                "a resource is a struct with named fields: deltas and `touches = [...]` name its top-level fields",
            ),
        },
        _ => errors.at(
            ident.span(),
            "a resource is a struct with named fields: deltas and `touches = [...]` name its top-level fields",
        ),
    }
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("serde")) {
        if let Some(key) = find_key(
            attr,
            &["rename_all", "rename", "tag", "untagged", "transparent"],
        ) {
            errors.spanned(
                attr,
                format!(
                    "`#[serde({key})]` is not supported on a resource: it is stored and diffed as a JSON object whose keys are its field names; remove it"
                ),
            );
        }
    }

    let prefix = match &attrs.prefix {
        Some(prefix) => {
            let value = prefix.value();
            if value.is_empty()
                || value.len() > 16
                || !value
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            {
                errors.spanned(
                    prefix,
                    "a handle prefix is 1 to 16 lowercase ASCII letters or digits, e.g. `prefix = \"bsk\"`",
                );
            }
            value
        }
        None => {
            errors.at(
                ident.span(),
                format!(
                    "resource `{ident}` needs a handle prefix: add `#[resource(prefix = \"...\")]` (handles look like `<prefix>_<random>`)"
                ),
            );
            String::new()
        }
    };
    let kind = match &attrs.kind {
        Some(kind) => {
            let value = kind.value();
            if value.is_empty()
                || !value
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                errors.spanned(
                    kind,
                    "a resource kind is lowercase ASCII letters, digits and `_`, e.g. `kind = \"basket\"`",
                );
            }
            value
        }
        None => snake_case(&unraw(ident)),
    };
    let ttl = match &attrs.ttl_secs {
        Some(ttl) => match ttl.base10_parse::<u64>() {
            Ok(0) => {
                errors.spanned(
                    ttl,
                    "`ttl_secs` must be at least 1; leave it out to keep resources forever",
                );
                quote!(::core::option::Option::None)
            }
            Ok(secs) => {
                quote!(::core::option::Option::Some(::core::time::Duration::from_secs(#secs)))
            }
            Err(error) => {
                errors.push(error);
                quote!(::core::option::Option::None)
            }
        },
        None => quote!(::core::option::Option::None),
    };
    if let Err(error) = errors.finish() {
        return error.into_compile_error();
    }
    let lifecycle = attrs.lifecycle.as_ref().map(|method| {
        quote_spanned! {method.span()=>
            fn lifecycle(&self) -> ::mcp_tools::state::Lifecycle {
                #ident::#method(self)
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl ::mcp_tools::state::Resource for #ident {
            const KIND: &'static str = #kind;
            const PREFIX: &'static str = #prefix;
            const TTL: ::core::option::Option<::core::time::Duration> = #ttl;
            #lifecycle
        }
    }
}

fn resource_attrs(attrs: &[Attribute], errors: &mut Errors) -> ResourceAttrs {
    let mut out = ResourceAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("resource")) {
        let result = attr.parse_nested_meta(|meta| {
            let key = meta.path.get_ident().map(unraw).unwrap_or_default();
            let repeated = |errors: &mut Errors| {
                errors.spanned(
                    &meta.path,
                    format!("`{key}` specified more than once; remove the repeated `{key}`"),
                )
            };
            match key.as_str() {
                "kind" | "prefix" => {
                    let lit = match meta.value()?.parse::<Expr>()? {
                        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => lit,
                        other => {
                            return Err(syn::Error::new_spanned(
                                other,
                                format!("expected a string literal: `{key} = \"...\"`"),
                            ));
                        }
                    };
                    let slot = if key == "kind" { &mut out.kind } else { &mut out.prefix };
                    if slot.is_some() {
                        repeated(errors);
                    }
                    *slot = Some(lit);
                }
                "ttl_secs" => {
                    let lit = match meta.value()?.parse::<Expr>()? {
                        Expr::Lit(ExprLit { lit: Lit::Int(lit), .. }) => lit,
                        other => {
                            return Err(syn::Error::new_spanned(
                                other,
                                "expected a number of seconds: `ttl_secs = 3600`",
                            ));
                        }
                    };
                    if out.ttl_secs.is_some() {
                        repeated(errors);
                    }
                    out.ttl_secs = Some(lit);
                }
                "lifecycle" => {
                    let method: Ident = meta.value()?.parse().map_err(|error| {
                        syn::Error::new(
                            error.span(),
                            "expected the name of a method `fn(&self) -> mcp_tools::state::Lifecycle`: `lifecycle = method_name`",
                        )
                    })?;
                    if out.lifecycle.is_some() {
                        repeated(errors);
                    }
                    out.lifecycle = Some(method);
                }
                _ => {
                    errors.spanned(
                        &meta.path,
                        format!(
                            "unknown key `{key}` in `#[resource(...)]`: expected one of {}",
                            RESOURCE_KEYS
                                .iter()
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                    if meta.input.peek(syn::Token![=]) {
                        let _: Expr = meta.value()?.parse()?;
                    }
                }
            }
            Ok(())
        });
        if let Err(error) = result {
            errors.push(error);
        }
    }
    out
}

/// The first of `keys` used as a key inside `#[serde(...)]`.
fn find_key(attr: &Attribute, keys: &[&str]) -> Option<String> {
    let syn::Meta::List(list) = &attr.meta else {
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

/// `ShoppingCart` → `shopping_cart`.
pub fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (index, ch) in name.chars().enumerate() {
        if ch.is_uppercase() {
            if index > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.extend(ch.to_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}
