//! The compile-fail catalogue (`tests/ui/<area>/<misuse>.rs`, each with the compiler's
//! `.stderr` checked in) and the passing twins (`tests/ui-pass/<area>.rs`).
//!
//! The `.stderr` files are what rustc 1.95 prints; after a toolchain change, regenerate them
//! with `TRYBUILD=overwrite cargo test --test ui` and read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*/*.rs");
    t.pass("tests/ui-pass/*.rs");
}
