//! The one parser of `#[name(key = value, flag, ...)]` lists, shared by `#[tool]`, `#[arg]` and
//! `#[resource]`: it looks keys up in the attribute's table, reports an unknown key with the
//! closest known one, reports a repeated key, and reads values with a hint of the expected form.
//! What a key means is the caller's business; this module only knows syntax.

use std::fmt::Display;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, ExprPath, Ident, Lit, LitBool, LitInt, LitStr, Path, Token, Type,
};

use crate::ctxt::Ctxt;
use crate::naming::{did_you_mean, unraw};

/// The keys of one attribute. Each name is written once, in `NAMES`; callers match on the enum.
pub trait Key: Copy + Eq + 'static {
    /// The attribute the keys belong to, as in `#[tool(...)]`.
    const ATTR: &'static str;
    /// Every key with its name, in the order an "expected one of" hint lists them.
    const NAMES: &'static [(&'static str, Self)];

    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, key)| *key == self)
            .map(|(name, _)| *name)
            .expect("every key has a name")
    }
}

/// Parses the arguments of an attribute macro, `#[tool(<tokens>)]`, calling `each` with every
/// known key. Unknown keys are reported and skipped; a value that does not parse stops the list
/// (the tokens after it cannot be trusted) and is reported.
pub fn parse_tokens<K: Key>(
    cx: &Ctxt,
    tokens: TokenStream,
    mut each: impl FnMut(K, &ParseNestedMeta) -> syn::Result<()>,
) {
    let parser = syn::meta::parser(|meta| dispatch(cx, &meta, &mut each));
    if let Err(error) = parser.parse2(tokens) {
        cx.syn_error(error);
    }
}

/// Parses one `#[attr(...)]` of an item, like `parse_tokens`.
pub fn parse_attr<K: Key>(
    cx: &Ctxt,
    attr: &Attribute,
    mut each: impl FnMut(K, &ParseNestedMeta) -> syn::Result<()>,
) {
    if let Err(error) = attr.parse_nested_meta(|meta| dispatch(cx, &meta, &mut each)) {
        cx.syn_error(error);
    }
}

fn dispatch<K: Key>(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    each: &mut impl FnMut(K, &ParseNestedMeta) -> syn::Result<()>,
) -> syn::Result<()> {
    let key = key_text(meta);
    match K::NAMES.iter().find(|(name, _)| *name == key) {
        Some((_, key)) => each(*key, meta),
        None => unknown_key::<K>(cx, meta),
    }
}

/// The key as written, without `r#`; empty for a path such as `a::b`.
fn key_text(meta: &ParseNestedMeta) -> String {
    meta.path.get_ident().map(unraw).unwrap_or_default()
}

/// Records an unknown key with a did-you-mean, then skips its value so parsing goes on.
fn unknown_key<K: Key>(cx: &Ctxt, meta: &ParseNestedMeta) -> syn::Result<()> {
    let key = meta.path.get_ident().map(unraw).unwrap_or_else(|| {
        let path = &meta.path;
        quote::quote!(#path).to_string()
    });
    let names = || K::NAMES.iter().map(|(name, _)| *name);
    let hint = match did_you_mean(&key, names()) {
        Some(best) => format!("did you mean `{best}`?"),
        None => format!(
            "expected one of {}",
            names()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    cx.error_spanned_by(
        &meta.path,
        format!("unknown key `{key}` in `#[{}(...)]`: {hint}", K::ATTR),
    );
    if meta.input.peek(Token![=]) {
        let _: Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        // Tokens left in `content` would be reported as unexpected.
        let _: TokenStream = content.parse()?;
    }
    Ok(())
}

/// Stores the value of `key` in `slot`, or reports that the key is repeated (the first value
/// stays).
pub fn set<K: Key, T>(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    key: K,
    slot: &mut Option<T>,
    value: T,
) -> syn::Result<()> {
    if slot.is_some() {
        let key = key.name();
        cx.error_spanned_by(
            &meta.path,
            format!("`{key}` specified more than once; remove the repeated `{key}`"),
        );
    } else {
        *slot = Some(value);
    }
    Ok(())
}

/// `key = "..."`.
pub fn string(meta: &ParseNestedMeta) -> syn::Result<LitStr> {
    let key = key_text(meta);
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(format!("expected a string: `{key} = \"...\"`")));
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new_spanned(
            other,
            format!("expected a string literal: `{key} = \"...\"`"),
        )),
    }
}

/// `key = 123`; `expected` shows the form.
pub fn int(meta: &ParseNestedMeta, expected: impl Display) -> syn::Result<LitInt> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(expected));
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new_spanned(other, expected)),
    }
}

/// `key` alone means `true`; `key = true` / `key = false` are explicit.
pub fn flag(meta: &ParseNestedMeta) -> syn::Result<LitBool> {
    if !meta.input.peek(Token![=]) {
        return Ok(LitBool::new(true, meta.path.span()));
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            ..
        }) => Ok(lit),
        other => {
            let key = key_text(meta);
            Err(syn::Error::new_spanned(
                other,
                format!("expected `true` or `false`: write `{key}` or `{key} = false`"),
            ))
        }
    }
}

/// `key = name`; `expected` shows the form.
pub fn ident(meta: &ParseNestedMeta, expected: impl Display + Copy) -> syn::Result<Ident> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(expected));
    }
    meta.value()?
        .parse::<Ident>()
        .map_err(|error| syn::Error::new(error.span(), expected))
}

/// `key = name` or `key = path::to::item`; `expected` shows the form.
pub fn path(meta: &ParseNestedMeta, expected: impl Display) -> syn::Result<Path> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(expected));
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Path(ExprPath {
            attrs, qself, path, ..
        }) if attrs.is_empty() && qself.is_none() => Ok(path),
        other => Err(syn::Error::new_spanned(other, expected)),
    }
}

/// `key = [name, ...]`; `expected` shows the form.
pub fn ident_list(meta: &ParseNestedMeta, expected: impl Display) -> syn::Result<Vec<Ident>> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(expected));
    }
    let input = meta.value()?;
    let content;
    syn::bracketed!(content in input);
    let names = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?;
    Ok(names.into_iter().collect())
}

/// `key = ["...", ...]`, with the span of the brackets; `expected` shows the form. A lone string
/// gets the bracketed form of itself as the hint, and every element that is not a string
/// literal is reported, not only the first.
pub fn string_list(
    meta: &ParseNestedMeta,
    expected: impl Display,
) -> syn::Result<(Span, Vec<LitStr>)> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(expected));
    }
    let array = match meta.value()?.parse::<Expr>()? {
        Expr::Array(array) => array,
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            let key = key_text(meta);
            let written = lit.to_token_stream();
            return Err(syn::Error::new_spanned(
                &lit,
                format!("expected a list of strings, even for one: write `{key} = [{written}]`"),
            ));
        }
        other => return Err(syn::Error::new_spanned(other, expected)),
    };
    let key = key_text(meta);
    let mut strings = Vec::with_capacity(array.elems.len());
    let mut errors: Option<syn::Error> = None;
    for elem in &array.elems {
        match elem {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => strings.push(lit.clone()),
            other => {
                let error = syn::Error::new_spanned(
                    other,
                    format!("expected a string literal: `{key} = [\"...\", ...]`"),
                );
                match &mut errors {
                    Some(errors) => errors.combine(error),
                    None => errors = Some(error),
                }
            }
        }
    }
    match errors {
        Some(errors) => Err(errors),
        None => Ok((array.bracket_token.span.join(), strings)),
    }
}

/// `key = Type`; `expected` shows the form.
pub fn ty(meta: &ParseNestedMeta, expected: impl Display) -> syn::Result<Type> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(expected));
    }
    meta.value()?.parse()
}

/// `key` alone (`None`) or `key = expr`.
pub fn optional_expr(meta: &ParseNestedMeta) -> syn::Result<Option<Expr>> {
    if meta.input.peek(Token![=]) {
        Ok(Some(meta.value()?.parse()?))
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum TestKey {
        Name,
        ReadOnly,
    }

    impl Key for TestKey {
        const ATTR: &'static str = "test";
        const NAMES: &'static [(&'static str, Self)] =
            &[("name", TestKey::Name), ("read_only", TestKey::ReadOnly)];
    }

    fn messages(tokens: TokenStream) -> (Vec<TestKey>, Vec<String>) {
        let cx = Ctxt::new();
        let mut seen = Vec::new();
        let mut name = None;
        parse_tokens(&cx, tokens, |key, meta| {
            seen.push(key);
            match key {
                TestKey::Name => set(&cx, meta, key, &mut name, string(meta)?),
                TestKey::ReadOnly => flag(meta).map(drop),
            }
        });
        let errors = match cx.check() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        };
        (seen, errors)
    }

    #[test]
    fn unknown_keys_get_a_hint_and_parsing_goes_on() {
        let (seen, errors) = messages(quote::quote!(
            readonly,
            frob(x),
            name = "a",
            name = "b",
            read_only
        ));
        assert_eq!(
            seen,
            [TestKey::Name, TestKey::Name, TestKey::ReadOnly],
            "the keys after the unknown ones are still read"
        );
        assert_eq!(
            errors,
            [
                "unknown key `readonly` in `#[test(...)]`: did you mean `read_only`?",
                "unknown key `frob` in `#[test(...)]`: expected one of `name`, `read_only`",
                "`name` specified more than once; remove the repeated `name`",
            ]
        );
    }

    #[test]
    fn a_bad_value_names_the_expected_form() {
        let (_, errors) = messages(quote::quote!(read_only = "yes"));
        assert_eq!(
            errors,
            ["expected `true` or `false`: write `read_only` or `read_only = false`"]
        );
    }
}
