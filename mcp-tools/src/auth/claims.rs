//! The claim shapes JWTs and introspection answers share.

use serde::Deserialize;

/// A claim that is one string or a list of them (`aud`, `scp`). RFC 7519: a string `aud` is
/// one value, spaces and all.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(one) => vec![one],
            OneOrMany::Many(many) => many,
        }
    }
}

/// The scopes of space-separated `scope` values, empty entries left out.
pub(crate) fn scope_list<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    values
        .into_iter()
        .flat_map(|value| value.split(' '))
        .filter(|scope| !scope.is_empty())
        .map(str::to_owned)
        .collect()
}
