//! README's quick start, built as written: its `Cargo.toml`, `build.rs`, `kernels/saxpy.cu` and
//! `src/main.rs` blocks become a fresh crate (the two `0.1` dependencies pointed at this
//! workspace, its `Cargo.lock` copied so that nothing new is resolved), which must build with
//! nvcc through um-build and run: `[12.0, 24.0, 36.0]` on a GPU, `Error::NoDevice` without one,
//! as the README says. README is also the crate's front page (`src/lib.rs`), where these blocks
//! are not compiled; this test is what keeps them true.
#![allow(clippy::expect_used)] // a test stops at the first surprise

use std::fs;
use std::path::Path;
use std::process::Command;

/// The fenced block whose first line is `first` (the block's body, without its fences).
fn block<'a>(readme: &'a str, first: &str) -> &'a str {
    let at = readme
        .find(&format!("\n{first}\n"))
        .unwrap_or_else(|| panic!("README has no block beginning `{first}`"));
    let body = &readme[at + 1..];
    let end = body.find("\n```").expect("the block ends");
    &body[..end + 1]
}

#[test]
fn the_quick_start_builds_and_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md");
    let manifest = block(&readme, "# Cargo.toml");
    let build = block(
        &readme,
        "// build.rs: compiles kernels/*.cu to PTX and generates a launcher per kernel.",
    );
    let kernel = block(&readme, "// kernels/saxpy.cu");
    let main = block(&readme, "// src/main.rs");
    for (what, dependency) in [
        ("um-cuda", "um-cuda = \"0.1\""),
        ("um-build", "um-build = \"0.1\""),
    ] {
        assert!(
            manifest.contains(dependency),
            "README's Cargo.toml names {what} 0.1"
        );
    }
    // The README's Cargo.toml, after `cargo new saxpy`'s [package], with the dependencies on
    // this workspace's crates; its own [workspace], since it sits inside this one's folder.
    let manifest = manifest
        .replace(
            "um-cuda = \"0.1\"",
            &format!("um-cuda = {{ path = {:?} }}", root.display().to_string()),
        )
        .replace(
            "um-build = \"0.1\"",
            &format!(
                "um-build = {{ path = {:?} }}",
                root.join("crates/um-build").display().to_string()
            ),
        );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-quick-start");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("src")).expect("mkdir");
    fs::create_dir_all(dir.join("kernels")).expect("mkdir");
    fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"saxpy\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n{manifest}\n[workspace]\n"
        ),
    )
    .expect("Cargo.toml");
    fs::write(dir.join("build.rs"), build).expect("build.rs");
    fs::write(dir.join("kernels/saxpy.cu"), kernel).expect("saxpy.cu");
    fs::write(dir.join("src/main.rs"), main).expect("main.rs");
    fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("Cargo.lock");
    // A target folder of its own: this test's cargo holds the workspace's.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-quick-start-target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = Command::new(&cargo)
        .args(["build", "--offline", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo");
    assert!(
        built.status.success(),
        "README's quick start does not build as written:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = Command::new(target.join("debug/saxpy"))
        .output()
        .expect("run the quick start");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr),
    );
    if ran.status.success() {
        assert_eq!(
            stdout.trim(),
            "[12.0, 24.0, 36.0]",
            "what README says it prints"
        );
    } else {
        assert!(
            stderr.contains("NoDevice"),
            "without a GPU, README says it stops at Context::new with Error::NoDevice: {stderr}"
        );
    }
}
