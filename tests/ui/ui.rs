//! Compile-time contract of `#[tool]`: each case under `fail/` pins the error the user sees
//! (message, fix hint and span) in its `.stderr`; the cases under `pass/` must build.
//!
//! Regenerate the expectations with `TRYBUILD=overwrite cargo test -p mcp-tools-ui` and read
//! the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("fail/*.rs");
    cases.pass("pass/*.rs");
}
