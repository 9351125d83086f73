//! Names: how identifiers become wire names, codes and kinds, which names the runtime keeps for
//! itself, which names it accepts, and the closest known name for a typo.

use syn::Ident;

/// Argument names the runtime keeps for itself (optimistic concurrency, operation resumption,
/// protocol metadata).
const RESERVED_ARGUMENTS: &[&str] = &[
    "expected_version",
    "basis_version",
    "items_cursor",
    "operation_id",
    "_meta",
];

/// An identifier as written, without `r#`.
pub fn unraw(ident: &Ident) -> String {
    let text = ident.to_string();
    match text.strip_prefix("r#") {
        Some(rest) => rest.to_owned(),
        None => text,
    }
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

/// `NotFound` → `NOT_FOUND`, the default code of a `ToolError` variant.
pub fn upper_snake_case(ident: &Ident) -> String {
    let mut out = String::new();
    for (index, ch) in unraw(ident).chars().enumerate() {
        if ch.is_uppercase() && index > 0 {
            out.push('_');
        }
        out.extend(ch.to_uppercase());
    }
    out
}

/// The handle argument a `reads` or `mutates` tool adds for `resource` (the type's name):
/// `Basket` → `basket_id`.
pub fn handle_argument(resource: &str) -> String {
    format!("{}_id", snake_case(resource))
}

pub fn is_reserved_argument(name: &str) -> bool {
    RESERVED_ARGUMENTS.contains(&name)
}

/// `^[A-Za-z0-9_./-]{1,64}$`, the rule the runtime enforces when the server is built.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-'))
}

/// An RFC 6749 scope token: printable ASCII without space, `"` or `\`, the rule the runtime
/// enforces when the server is built.
pub fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E))
}

/// A handle prefix: 1 to 16 lowercase ASCII letters or digits, so handles stay readable.
pub fn is_valid_handle_prefix(prefix: &str) -> bool {
    (1..=16).contains(&prefix.len())
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A resource kind: lowercase ASCII letters, digits and `_`.
pub fn is_valid_resource_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The known name closest to `name`, if close enough to be a likely typo.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|candidate| (levenshtein(name, candidate), candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len().max(3) / 3).max(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_name() {
        let keys = ["name", "title", "read_only", "rename"];
        assert_eq!(did_you_mean("readonly", keys), Some("read_only"));
        assert_eq!(did_you_mean("titel", keys), Some("title"));
        assert_eq!(did_you_mean("renmae", keys), Some("rename"));
        assert_eq!(did_you_mean("frobnicate", keys), None);
    }

    #[test]
    fn tool_names() {
        assert!(is_valid_tool_name("math/add.v2-beta_1"));
        assert!(is_valid_tool_name(&"a".repeat(64)));
        assert!(!is_valid_tool_name(&"a".repeat(65)));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("read file"));
    }

    #[test]
    fn scope_tokens_are_printable_ascii_without_space_quote_or_backslash() {
        assert!(is_scope_token("basket:read"));
        assert!(is_scope_token("!#[]~https://api.example/x"));
        for bad in [
            "",
            "basket read",
            "say\"hi",
            "back\\slash",
            "caf\u{e9}",
            "tab\t",
            "\u{7f}",
        ] {
            assert!(!is_scope_token(bad), "{bad:?} is not a scope token");
        }
    }

    #[test]
    fn cases() {
        assert_eq!(snake_case("ShoppingCart"), "shopping_cart");
        assert_eq!(handle_argument("Basket"), "basket_id");
        let ident: Ident = syn::parse_quote!(DivisionByZero);
        assert_eq!(upper_snake_case(&ident), "DIVISION_BY_ZERO");
        let raw: Ident = syn::parse_quote!(r#type);
        assert_eq!(unraw(&raw), "type");
    }

    #[test]
    fn resource_names() {
        assert!(is_valid_handle_prefix("bsk2"));
        assert!(!is_valid_handle_prefix("Bsk_"));
        assert!(!is_valid_handle_prefix(""));
        assert!(!is_valid_handle_prefix(&"a".repeat(17)));
        assert!(is_valid_resource_kind("shopping_cart"));
        assert!(!is_valid_resource_kind("Bad-Kind"));
        assert!(!is_valid_resource_kind(""));
    }
}
