//! Crates outside this workspace, as users write them, that depend on `um-cuda` and `um-build`
//! through the dependency lines of the docs (`um-cuda = "0.1"`, `um-build = "0.1"`), redirected
//! to this workspace by `[patch.crates-io]`:
//!
//! * one that brings its own kernels must build with nothing but its own `build.rs` (no GPU
//!   needed), and a kernel that breaks the safe-launcher convention must fail that build with a
//!   message that names the file, the line and the parameter, as the first line of the build
//!   script's output;
//! * the rustdoc front page of `um` is README, whose quick start `cargo xtask readme-check`
//!   builds (`.ci/run`: README's blocks and commands, run in a fresh `HOME` against the packaged
//!   crates);
//! * one with no kernels of its own must build without nvcc.
//!
//! Needs cargo and nvcc (but the last), no GPU; not part of the GPU bundle. `.ci/run` builds a
//! crate with no kernels against the packaged crates too (`scripts/package-check.sh`).
#![allow(clippy::expect_used)]

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BUILD_RS: &str = r#"fn main() {
    um_build::Kernels::new("kernels").arch("compute_75").build_or_exit();
}
"#;

const KERNELS: &str = r#"#include "um.cuh"

// x[i] *= a
UM_SAFE_KERNEL void scale(float *x, float a, um::len32 n) {
    for (auto i : um::indices(n)) {
        x[i] *= a;
    }
}

// Whatever `perm` holds decides where it writes: an unsafe launcher.
extern "C" __global__ void permute(float *out, const float *in, const unsigned int *perm, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[perm[i]] = in[i];
}
"#;

const MAIN_RS: &str = r#"use um::{Context, LaunchConfig, Managed, StreamOptions};

um::include_kernels!();

fn main() {
    let ctx = match Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) => {
            println!("user-crate: {e}");
            std::process::exit(2);
        }
    };
    let x = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0]).unwrap();
    let perm = Managed::from_slice(&ctx, &[2u32, 0, 1]).unwrap();
    let out = Managed::<[f32]>::zeroed_slice(&ctx, 3).unwrap();
    let (x, out) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut x, perm, mut out) = (x.attach(s)?, perm.attach(s)?, out.attach(s)?);
            scale::scale(s, &mut x, 2.0)?;
            // SAFETY: `perm` is a permutation of 0..3, the length of `out`: every write is in
            // bounds and no two threads write one element.
            unsafe { scale::permute(s, LaunchConfig::grid_1d(1, 32), &mut out, &x, &perm, 3)? };
            let (x, out, _perm) = s.sync_all((x, out, perm))?;
            Ok((x, out))
        })
        .unwrap();
    assert_eq!((&x[..], &out[..]), (&[2.0, 4.0, 6.0][..], &[4.0, 6.0, 2.0][..]));
    println!("user-crate: ok");
}
"#;

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `[package]` of a fresh crate, then `dependencies` as the user writes them, then what points
/// them at this workspace instead of crates.io.
fn manifest(name: &str, dependencies: &str) -> String {
    let root = root();
    format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n{dependencies}\n\n\
         # This workspace, as if it were published.\n[patch.crates-io]\n\
         um-cuda = {{ path = {:?} }}\num-build = {{ path = {:?} }}\n\n\
         # Not part of any workspace around it.\n[workspace]\n",
        root.display().to_string(),
        root.join("crates/um-build").display().to_string(),
    )
}

/// A fresh crate in a temporary directory: `files` are (path, text).
fn fresh_crate(name: &str, dependencies: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("um-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    write(&dir, "Cargo.toml", &manifest(name, dependencies));
    for (rel, text) in files {
        write(&dir, rel, text);
    }
    // The versions this workspace was tested with.
    fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");
    dir
}

const USER_DEPENDENCIES: &str =
    "[dependencies]\num-cuda = \"0.1\"\n\n[build-dependencies]\num-build = \"0.1\"";

/// A user's crate with its own kernels, as a user would lay it out.
fn user_crate(name: &str, kernels: &str) -> PathBuf {
    fresh_crate(
        name,
        USER_DEPENDENCIES,
        &[
            ("build.rs", BUILD_RS),
            ("kernels/scale.cu", kernels),
            ("src/main.rs", MAIN_RS),
        ],
    )
}

/// `cargo build` in `dir`, with a target directory kept between runs (dependencies compile
/// once), and `env` set (a `None` value removes the variable). The CUDA paths come from the
/// environment cargo gives this test (`.cargo/config.toml` of the workspace:
/// `CUDA_LIBRARY_PATH`, `UM_LOCAL_NVCC`) unless `env` says otherwise.
fn cargo_build_with(dir: &Path, env: &[(&str, Option<OsString>)]) -> Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", root().join("target/out-of-workspace"))
        .env_remove("RUSTFLAGS");
    for (key, value) in env {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    cmd.output().expect("run cargo")
}

fn cargo_build(dir: &Path) -> Output {
    cargo_build_with(dir, &[])
}

/// Runs what `cargo_build` built: without a GPU it must stop at the context with um's error
/// (exit `no_gpu_exit`, `no_gpu_says` on stdout or stderr); with one, exit 0 saying `ok_says`.
fn run_up_to_the_gpu(exe_name: &str, no_gpu_exit: i32, no_gpu_says: &str, ok_says: &str) {
    let exe = root().join("target/out-of-workspace/debug").join(exe_name);
    let run = Command::new(&exe).output().expect("run the user's program");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    match run.status.code() {
        Some(code) if code == no_gpu_exit => assert!(said.contains(no_gpu_says), "{said}"),
        Some(0) => assert!(said.contains(ok_says), "{said}"),
        other => panic!("exit {other:?}: {said}"),
    }
}

#[test]
fn a_user_crate_outside_the_workspace_builds_and_runs_up_to_the_gpu() {
    let dir = user_crate("user-crate", KERNELS);
    let out = cargo_build(&dir);
    assert!(
        out.status.success(),
        "the user's crate did not build:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without a GPU it stops at the context, with um's own error; with one it checks results.
    run_up_to_the_gpu("user-crate", 2, "no CUDA-capable device", "user-crate: ok");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_convention_error_fails_the_users_build_naming_file_line_and_parameter() {
    // `scale` loses its count: the safe launcher could not know the buffer's bounds.
    let broken = KERNELS.replace(
        "UM_SAFE_KERNEL void scale(float *x, float a, um::len32 n) {",
        "UM_SAFE_KERNEL void scale(float *x, float a, unsigned int len) {\n    unsigned int n = len;",
    );
    let dir = user_crate("user-crate-broken", &broken);
    let out = cargo_build(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the broken crate built");
    // What the build script printed (cargo indents it under `--- stderr`): um-build's message
    // from its first line, with no panic or `Result::unwrap()` around it (`build_or_exit`).
    let script = stderr
        .split_once("--- stderr\n")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no `--- stderr` section:\n{stderr}"));
    let first = script.lines().next().unwrap_or_default().trim();
    // The plain integer named like a length is the one named, with the type to write
    // (not `x`, which would read "has no length after it").
    assert_eq!(
        first,
        format!(
            "{}/kernels/scale.cu:4: kernel `scale`: parameter `len`: write `um::len32 len`, not `unsigned int len`: a plain integer is a value the caller passes, so the buffer `x` has no length",
            dir.display()
        ),
        "{stderr}"
    );
    assert!(
        script.contains("help: a length has a type of um.cuh"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("unwrap()"),
        "{stderr}"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// The fenced blocks of `text` whose first line is a comment naming a file (`// build.rs`,
/// `# Cargo.toml: ...`), as (file, block).
fn named_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if !line.trim().starts_with("```") {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let first = body.first().copied().unwrap_or_default();
        let name = first
            .strip_prefix("// ")
            .or_else(|| first.strip_prefix("# "))
            .and_then(|rest| rest.split_whitespace().next())
            .map(|n| n.trim_end_matches(':').to_owned());
        if let Some(name) = name.filter(|n| n.contains('.')) {
            blocks.push((name, body.join("\n") + "\n"));
        }
    }
    blocks
}

/// README's "Quick start" section.
fn readme_quick_start() -> Vec<(String, String)> {
    let readme = fs::read_to_string(root().join("README.md")).expect("README.md");
    let start = readme
        .find("\n## Quick start")
        .expect("README has a Quick start");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    named_blocks(&rest[..end])
}

/// The crate's front page is README itself (`src/lib.rs` includes it), so the quick start that
/// docs.rs shows is the one `cargo xtask readme-check` builds.
#[test]
fn the_rustdoc_front_page_is_the_readme() {
    let lib = fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    assert!(
        lib.starts_with("#![doc = include_str!(\"../README.md\")]\n"),
        "src/lib.rs's documentation begins with README.md"
    );
    let readme = readme_quick_start();
    assert!(
        readme.iter().any(|(name, _)| name == "src/main.rs"),
        "README's quick start shows src/main.rs: {readme:?}"
    );
}

const NO_KERNELS_MAIN: &str = r#"use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let input = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0])?;
    let data = Managed::<[f32]>::zeroed_slice(&ctx, 3)?;
    let data = ctx.with_stream(StreamOptions::new(), |s| {
        let (input, mut data) = (input.attach(s)?, data.attach(s)?);
        um::kernels::run_task::transform(s, &input, &mut data)?; // data[i] += 2 * input[i]
        data.sync()
    })?;
    println!("{:?}", &data[..]);
    Ok(())
}
"#;

/// `PATH` without the folders that hold an `nvcc`.
fn path_without_nvcc() -> OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::env::split_paths(&path).filter(|d| !d.join("nvcc").exists()))
        .expect("PATH")
}

#[test]
fn a_crate_with_no_kernels_of_its_own_builds_without_nvcc() {
    if Path::new("/usr/local/cuda/bin/nvcc").exists() {
        eprintln!("skipped: /usr/local/cuda/bin/nvcc exists, and um-build would find it");
        return;
    }
    let dir = fresh_crate(
        "no-kernels",
        "[dependencies]\num-cuda = \"0.1\"",
        &[("src/main.rs", NO_KERNELS_MAIN)],
    );
    // No nvcc anywhere um-build looks: `NVCC`, `CUDA_PATH` and `UM_LOCAL_NVCC` (which this
    // test has from the workspace's `[env]`) unset, `PATH` without one, and a `HOME` of its own
    // (README installs nvcc under `~/.local/share/um-cuda/`); cargo and rustup keep theirs.
    // `CUDA_LIBRARY_PATH` stays: the link needs the driver library.
    let home = dir.join("home");
    fs::create_dir_all(&home).expect("mkdir home");
    let real_home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let cargo_home =
        std::env::var_os("CARGO_HOME").unwrap_or_else(|| real_home.join(".cargo").into());
    let rustup_home =
        std::env::var_os("RUSTUP_HOME").unwrap_or_else(|| real_home.join(".rustup").into());
    let out = cargo_build_with(
        &dir,
        &[
            ("NVCC", None),
            ("CUDA_PATH", None),
            ("UM_LOCAL_NVCC", None),
            ("PATH", Some(path_without_nvcc())),
            ("HOME", Some(home.into())),
            ("CARGO_HOME", Some(cargo_home)),
            ("RUSTUP_HOME", Some(rustup_home)),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "it did not build:\n{stderr}");
    assert!(
        stderr.contains("um-build: nvcc not found: using the prebuilt PTX of"),
        "um-kernels did not say that it used its shipped PTX:\n{stderr}"
    );
    run_up_to_the_gpu("no-kernels", 1, "NoDevice", "[2.0, 4.0, 6.0]");
    let _ = fs::remove_dir_all(&dir);
}
