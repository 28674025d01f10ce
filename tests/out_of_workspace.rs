//! A user's crate, outside this workspace, that depends on `um` and `um-build` by path and
//! brings its own kernels: it must build with nothing but its own `build.rs` (no GPU needed),
//! and a kernel that breaks the safe-launcher convention must fail that build with a message
//! that names the file, the line and the parameter.
//!
//! Needs cargo and nvcc (as every build of `um` does); not part of the GPU bundle.
#![allow(clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BUILD_RS: &str = r#"fn main() {
    um_build::Kernels::new("kernels").arch("compute_75").build().unwrap();
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
            unsafe { scale::permute(s, LaunchConfig::linear(1, 32), &mut out, &x, &perm, 3)? };
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

/// A fresh crate in a temporary directory, as a user would lay it out.
fn user_crate(name: &str, kernels: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("um-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [dependencies]\num = {{ path = {:?} }}\n\n\
         [build-dependencies]\num-build = {{ path = {:?} }}\n\n\
         # Not part of any workspace around it.\n[workspace]\n",
        root.display().to_string(),
        root.join("crates/um-build").display().to_string(),
    );
    write(&dir, "Cargo.toml", &manifest);
    write(&dir, "build.rs", BUILD_RS);
    write(&dir, "kernels/scale.cu", kernels);
    write(&dir, "src/main.rs", MAIN_RS);
    // The versions this workspace was tested with.
    fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");
    dir
}

/// `cargo build` in `dir`, with a target directory kept between runs (dependencies compile
/// once). The CUDA paths come from the environment cargo gives this test (`.cargo/config.toml`
/// of the workspace: `CUDA_LIBRARY_PATH`, `UM_LOCAL_NVCC`), as a user sets them for theirs.
fn cargo_build(dir: &Path) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    Command::new(cargo)
        .arg("build")
        .arg("--quiet")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", root.join("target/out-of-workspace"))
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo")
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
    let exe =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/out-of-workspace/debug/user-crate");
    let run = Command::new(&exe).output().expect("run the user's program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    // Without a GPU it stops at the context, with um's own error; with one it checks results.
    match run.status.code() {
        Some(2) => assert!(stdout.contains("no CUDA-capable device"), "{stdout}"),
        Some(0) => assert!(stdout.contains("user-crate: ok"), "{stdout}"),
        other => panic!(
            "exit {other:?}: {stdout}{}",
            String::from_utf8_lossy(&run.stderr)
        ),
    }
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
    assert!(
        stderr.contains("kernels/scale.cu:4: kernel `scale`: parameter `x`: the buffer `x` of a safe kernel has no length after it"),
        "{stderr}"
    );
    assert!(
        stderr.contains("help: declare `um::len32 x_len` after `x`"),
        "{stderr}"
    );
    let _ = fs::remove_dir_all(&dir);
}
