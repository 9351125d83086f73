//! The error collector every phase writes to. A macro reports all its mistakes in one build, so
//! nothing stops at the first error: each one is recorded with its span, and `check` turns them
//! into one compile error at the end. Forgetting `check` panics when the collector is dropped,
//! so no error can be lost on some path that returns early.

use std::cell::RefCell;
use std::fmt::Display;
use std::thread;

use proc_macro2::Span;
use quote::ToTokens;

/// Collects the errors of one macro invocation, in the order they are found (rustc shows them in
/// that order).
pub struct Ctxt {
    /// `None` once `check` has consumed the errors.
    errors: RefCell<Option<Vec<syn::Error>>>,
}

impl Ctxt {
    pub fn new() -> Self {
        Ctxt {
            errors: RefCell::new(Some(Vec::new())),
        }
    }

    /// An error pointing at `span`.
    pub fn error_at(&self, span: Span, message: impl Display) {
        self.syn_error(syn::Error::new(span, message));
    }

    /// An error pointing at the tokens of `tokens`, first to last.
    pub fn error_spanned_by(&self, tokens: impl ToTokens, message: impl Display) {
        self.syn_error(syn::Error::new_spanned(tokens, message));
    }

    /// An error from `syn`, such as a failed parse.
    pub fn syn_error(&self, error: syn::Error) {
        self.errors
            .borrow_mut()
            .as_mut()
            .expect("an error was reported after the errors were checked")
            .push(error);
    }

    /// Consumes the collector: `Err` with every recorded error combined, in order.
    pub fn check(self) -> syn::Result<()> {
        let mut errors = self
            .errors
            .borrow_mut()
            .take()
            .expect("the errors were checked twice")
            .into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined)
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        // While unwinding from another panic, a second one would abort and hide the first.
        if !thread::panicking() && self.errors.borrow().is_some() {
            panic!("the errors of a macro invocation were never checked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_combines_every_error_in_order() {
        let cx = Ctxt::new();
        cx.error_at(Span::call_site(), "first");
        cx.error_spanned_by(quote::quote!(a b), "second");
        cx.syn_error(syn::Error::new(Span::call_site(), "third"));
        let messages: Vec<String> = cx
            .check()
            .unwrap_err()
            .into_iter()
            .map(|error| error.to_string())
            .collect();
        assert_eq!(messages, ["first", "second", "third"]);
    }

    #[test]
    fn check_without_errors_is_ok() {
        assert!(Ctxt::new().check().is_ok());
    }

    #[test]
    #[should_panic(expected = "never checked")]
    fn dropping_unchecked_errors_panics() {
        let cx = Ctxt::new();
        cx.error_at(Span::call_site(), "lost");
    }

    #[test]
    #[should_panic(expected = "never checked")]
    fn dropping_an_unchecked_collector_panics_even_without_errors() {
        let _cx = Ctxt::new();
    }
}
