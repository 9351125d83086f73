//! OAuth scopes: what an operation needs, what a token grants, and which scopes imply others.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

/// Whether `scope` is an RFC 6749 scope token: printable ASCII without space, `"` or `\`.
pub(crate) fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E))
}

/// The scopes one operation (a tool, a resource, a prompt) needs: every one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Required(pub(crate) Vec<Cow<'static, str>>);

impl Required {
    /// Requires nothing: an item's own requirement when it names no scope.
    pub(crate) fn none() -> &'static Required {
        static NONE: Required = Required(Vec::new());
        &NONE
    }

    pub(crate) fn new<I, S>(scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        let mut scopes: Vec<Cow<'static, str>> = scopes.into_iter().map(Into::into).collect();
        scopes.sort();
        scopes.dedup();
        Required(scopes)
    }

    /// These scopes and `more`.
    pub(crate) fn and<I, S>(self, more: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        Required::new(self.0.into_iter().chain(more.into_iter().map(Into::into)))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|scope| scope.as_ref())
    }

    /// The first scope that is not a valid scope token.
    pub(crate) fn first_invalid(&self) -> Option<&str> {
        self.iter().find(|scope| !is_scope_token(scope))
    }

    /// `"a b c"`, the form of a `scope` parameter.
    pub(crate) fn joined(&self) -> String {
        self.0.join(" ")
    }
}

/// Which scopes grant which others ("a broader scope satisfies a narrower one"), closed under
/// implication once, when the server is built.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hierarchy {
    implied: HashMap<String, BTreeSet<String>>,
}

impl Hierarchy {
    pub(crate) fn add(&mut self, broader: &str, narrower: impl IntoIterator<Item = String>) {
        self.implied
            .entry(broader.to_owned())
            .or_default()
            .extend(narrower);
    }

    /// Makes implication transitive: if `a` implies `b` and `b` implies `c`, `a` implies `c`.
    pub(crate) fn close(&mut self) {
        loop {
            let mut grew = false;
            let snapshot = self.implied.clone();
            for implied in self.implied.values_mut() {
                let reachable: Vec<String> = implied
                    .iter()
                    .filter_map(|scope| snapshot.get(scope))
                    .flatten()
                    .cloned()
                    .collect();
                for scope in reachable {
                    grew |= implied.insert(scope);
                }
            }
            if !grew {
                return;
            }
        }
    }

    /// Every scope mentioned, broader or narrower.
    pub(crate) fn scopes(&self) -> impl Iterator<Item = &str> {
        self.implied
            .iter()
            .flat_map(|(broader, narrower)| std::iter::once(broader).chain(narrower))
            .map(String::as_str)
    }

    /// `granted` with every scope it implies.
    pub(crate) fn expand(&self, granted: Vec<String>) -> Granted {
        let mut all: BTreeSet<String> = BTreeSet::new();
        for scope in granted {
            if let Some(implied) = self.implied.get(&scope) {
                all.extend(implied.iter().cloned());
            }
            all.insert(scope);
        }
        Granted(all)
    }
}

/// The scopes a caller's token grants, with every scope they imply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted(BTreeSet<String>);

impl Granted {
    /// Whether the token grants `scope` (directly or through a broader scope).
    pub fn contains(&self, scope: &str) -> bool {
        self.0.contains(scope)
    }

    /// Every granted scope, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    pub(crate) fn satisfies(&self, required: &Required) -> bool {
        required.iter().all(|scope| self.contains(scope))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_tokens_follow_rfc_6749() {
        for good in ["basket:read", "a", "https://x.example/scope", "!#[]~"] {
            assert!(is_scope_token(good), "{good}");
        }
        for bad in ["", "two words", "quo\"te", "back\\slash", "tab\t", "é"] {
            assert!(!is_scope_token(bad), "{bad}");
        }
    }

    #[test]
    fn implication_is_transitive_and_a_narrow_scope_implies_nothing_broader() {
        let mut hierarchy = Hierarchy::default();
        hierarchy.add("admin", ["basket:write".to_owned()]);
        hierarchy.add("basket:write", ["basket:read".to_owned()]);
        hierarchy.close();
        let admin = hierarchy.expand(vec!["admin".into()]);
        assert!(admin.satisfies(&Required::new(["basket:read", "basket:write"])));
        let read = hierarchy.expand(vec!["basket:read".into()]);
        assert!(!read.satisfies(&Required::new(["basket:write"])));
        assert!(read.satisfies(&Required::new(["basket:read"])));
        assert!(read.satisfies(&Required::default()));
    }

    #[test]
    fn required_scopes_are_sorted_and_deduplicated() {
        let required = Required::new(["b", "a", "b"]);
        assert_eq!(required.joined(), "a b");
        assert_eq!(
            Required::new(["ok", "not ok"]).first_invalid(),
            Some("not ok")
        );
    }
}
