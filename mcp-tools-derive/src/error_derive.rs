//! `#[derive(ToolError)]`: a stable code per variant (`#[code = "..."]`, or the variant name in
//! `UPPER_SNAKE_CASE`), the message from `Display`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Attribute, Data, DeriveInput, Expr, ExprLit, Fields, Ident, Lit, LitStr, Meta};

use crate::validate::Errors;

pub fn derive(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(error) => return error.into_compile_error(),
    };
    let mut errors = Errors::default();
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let code = match &input.data {
        Data::Enum(data) => {
            let arms = data.variants.iter().map(|variant| {
                let code = code_attr(&variant.attrs, &mut errors)
                    .map(|lit| lit.value())
                    .unwrap_or_else(|| upper_snake(&variant.ident));
                let name = &variant.ident;
                let pattern = match variant.fields {
                    Fields::Named(_) => quote!(#ident::#name { .. }),
                    Fields::Unnamed(_) => quote!(#ident::#name(..)),
                    Fields::Unit => quote!(#ident::#name),
                };
                quote!(#pattern => #code,)
            });
            quote!(match &self { #(#arms)* })
        }
        Data::Struct(_) => {
            let code = code_attr(&input.attrs, &mut errors)
                .map(|lit| lit.value())
                .unwrap_or_else(|| upper_snake(ident));
            quote!(#code)
        }
        Data::Union(_) => {
            errors.spanned(ident, "`ToolError` cannot be derived for a union");
            quote!("")
        }
    };
    if let Err(error) = errors.finish() {
        return error.into_compile_error();
    }
    quote! {
        #[automatically_derived]
        impl #impl_generics ::mcp_tools::IntoToolError for #ident #ty_generics #where_clause {
            fn into_tool_error(self) -> ::mcp_tools::ToolError {
                let code: &'static str = #code;
                ::mcp_tools::ToolError::new(code, ::std::string::ToString::to_string(&self))
            }
        }
    }
}

fn code_attr(attrs: &[Attribute], errors: &mut Errors) -> Option<LitStr> {
    let attr = attrs.iter().find(|attr| attr.path().is_ident("code"))?;
    if let Meta::NameValue(nv) = &attr.meta
        && let Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) = &nv.value
    {
        return Some(lit.clone());
    }
    errors.spanned(attr, "write the code as `#[code = \"NOT_FOUND\"]`");
    None
}

fn upper_snake(ident: &Ident) -> String {
    let mut out = String::new();
    for (i, c) in crate::parse::unraw(ident).chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(c.to_uppercase());
    }
    out
}
