//! Compile-time contract of `#[tool]`: each case under `tests/ui/fail` pins the error the user
//! sees (message, fix hint and span) in its `.stderr`; the cases under `tests/ui/pass` must build.
//!
//! Regenerate the expectations with `TRYBUILD=overwrite cargo test --test ui` and read the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
