//! The compile-fail catalogue (`tests/ui/<area>/<misuse>.rs`, each with the compiler's
//! `.stderr` checked in) and the passing twins (`tests/ui-pass/<area>.rs`).
//!
//! The `.stderr` files are what rustc [`BLESSED_WITH`] prints. Another compiler may word a
//! diagnostic differently, so the text is compared only on that version (any patch release of
//! it, stable channel). On every other compiler each case must still fail to compile, and each
//! passing twin must still compile and run: the cases are copied to a scratch folder and run
//! there with the text comparison switched off (`TRYBUILD=overwrite`, whose output lands in the
//! scratch copy, never in `tests/ui`). The test prints which of the two it did.
//!
//! After a toolchain upgrade (`docs/building.md`): set [`BLESSED_WITH`] to the new version,
//! regenerate with `TRYBUILD=overwrite cargo test --test ui`, and read `git diff tests/ui`.
//! Whenever `TRYBUILD` is set, the suite runs on `tests/ui` itself, whatever the compiler.

// Helpers of a test, not library code: they stop at the first surprise, like the tests.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `major.minor` of the rustc that wrote the `.stderr` files.
const BLESSED_WITH: &str = "1.95";

/// The version of the rustc that cargo (and so trybuild) compiles with: `$RUSTC`, else `rustc`
/// on `PATH` (under rustup, the toolchain of this `cargo test`, which rustup passes on in
/// `RUSTUP_TOOLCHAIN`). `rustc 1.95.0 (59807616e 2026-04-14)` gives `1.95.0`; a beta or
/// nightly keeps its suffix (`1.96.0-nightly`).
fn rustc_version() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {rustc:?} --version: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("unexpected `rustc --version` output: {text:?}"))
        .to_owned()
}

/// Whether `version` is a stable release of `blessed` (`1.95.0`, `1.95.2`; not `1.95.0-beta.1`).
fn is_release_of(version: &str, blessed: &str) -> bool {
    match version
        .strip_prefix(blessed)
        .and_then(|r| r.strip_prefix('.'))
    {
        Some(patch) => !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

#[test]
fn blessed_version_check() {
    assert!(is_release_of("1.95.0", "1.95"));
    assert!(is_release_of("1.95.3", "1.95"));
    assert!(!is_release_of("1.95.0-nightly", "1.95"));
    assert!(!is_release_of("1.96.0", "1.95"));
    assert!(!is_release_of("1.951.0", "1.95"));
    assert!(!is_release_of("1.9", "1.95"));
}

#[test]
fn ui() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-unblessed");
    if std::env::var_os(CHILD).is_some() {
        // The child of the branch below: the scratch copy, TRYBUILD=overwrite.
        let t = trybuild::TestCases::new();
        t.compile_fail(scratch.join("*/*.rs"));
        t.pass("tests/ui-pass/*.rs");
        return;
    }
    let version = rustc_version();
    if is_release_of(&version, BLESSED_WITH) || std::env::var_os("TRYBUILD").is_some() {
        say(&format!(
            "ui: rustc {version}: comparing every .stderr with the compiler's output"
        ));
        let t = trybuild::TestCases::new();
        t.compile_fail("tests/ui/*/*.rs");
        t.pass("tests/ui-pass/*.rs");
        return;
    }
    say(&format!(
        "ui: rustc {version}, but the .stderr files are rustc {BLESSED_WITH}'s: checking only that \
         every case fails to compile (and every passing twin compiles and runs); the diagnostic \
         text is NOT compared"
    ));
    let cases = copy_cases(Path::new("tests/ui"), &scratch);
    assert!(!cases.is_empty(), "no compile-fail cases found in tests/ui");
    // TRYBUILD=overwrite turns a text mismatch into a rewrite of the scratch copy's `.stderr`
    // (never of tests/ui); a case that compiles still fails the run. trybuild reads the
    // variable, so it runs in a child process: this one's environment stays untouched.
    // Its output is passed on indented, so that its own `test result:` line is not counted
    // as a second harness by scripts that sum those lines.
    let child = Command::new(std::env::current_exe().expect("test binary path"))
        .args(["ui", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("TRYBUILD", "overwrite")
        .output()
        .expect("rerun the ui test");
    for stream in [&child.stdout, &child.stderr] {
        for line in String::from_utf8_lossy(stream).lines() {
            say(&format!("    | {line}"));
        }
    }
    assert!(
        child.status.success(),
        "a compile-fail case compiled, or a passing twin failed, on rustc {version} (see the \
         output above)"
    );
    report_error_codes(&cases, &scratch);
}

/// Set in the child that runs trybuild with `TRYBUILD=overwrite`.
const CHILD: &str = "UM_UI_UNBLESSED_CHILD";

/// Copies every `tests/ui/<area>/<case>.rs` (not the `.stderr`) to `to`, fresh; returns the
/// cases as `<area>/<case>` paths without extension.
fn copy_cases(from: &Path, to: &Path) -> Vec<PathBuf> {
    let _ = std::fs::remove_dir_all(to);
    let mut cases = Vec::new();
    for area in std::fs::read_dir(from).expect("read tests/ui") {
        let area = area.expect("dir entry").path();
        if !area.is_dir() {
            continue;
        }
        let name = area.file_name().expect("area name").to_owned();
        for file in std::fs::read_dir(&area).expect("read area") {
            let file = file.expect("dir entry").path();
            if file.extension().is_some_and(|e| e == "rs") {
                let dest = to.join(&name).join(file.file_name().expect("case name"));
                std::fs::create_dir_all(dest.parent().expect("area dir")).expect("mkdir");
                std::fs::copy(&file, &dest).expect("copy case");
                cases.push(Path::new(&name).join(file.file_stem().expect("stem")));
            }
        }
    }
    cases.sort();
    cases
}

/// The error codes (`E0608`) a diagnostic text names, in order.
fn error_codes(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("error[")?.split(']').next())
        .collect()
}

/// Prints, per case, whether this compiler names the same error codes as the blessed output:
/// a note for whoever blesses the files next, not a failure (codes are stable, but the suite
/// must not fail a user's build over a compiler's choice).
fn report_error_codes(cases: &[PathBuf], scratch: &Path) {
    let mut differ = 0;
    for case in cases {
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        let blessed = read(Path::new("tests/ui").join(case).with_extension("stderr"));
        let now = read(scratch.join(case).with_extension("stderr"));
        let (want, got) = (error_codes(&blessed), error_codes(&now));
        if want != got {
            differ += 1;
            say(&format!(
                "ui: note: {} names error codes {got:?} here, {want:?} with rustc {BLESSED_WITH}",
                case.display()
            ));
        }
    }
    say(&format!(
        "ui: {} compile-fail cases failed to compile as required; {} of them with other error \
         codes than the blessed output",
        cases.len(),
        differ
    ));
}

/// Writes a line to the real stderr: the test harness captures `println!` of a passing test,
/// and which comparison ran must show in every run.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}
