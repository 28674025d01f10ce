//! The mistakes of a first kernel file, each said in one line with its fix before nvcc
//! runs: a file without `#include "um.cuh"`, a kernel in a namespace, a length declared as a
//! plain integer. Each test checks the first line of the error's `Display`, which is what
//! `build_or_exit` prints first.
//!
//! Refusals are built with an "nvcc" that fails whenever it runs: an error that is um-build's own
//! was said before nvcc ran, and a file the checks let through fails with `nvcc failed`. The
//! warnings, which come with a successful build, need the real nvcc (`$UM_LOCAL_NVCC` from
//! `.cargo/config.toml` here).
#![cfg(unix)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A fresh folder under the temporary directory.
fn fresh() -> PathBuf {
    let root = std::env::temp_dir().join(format!(
        "um-build-diagnostics-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(root.join("kernels")).unwrap();
    std::fs::create_dir_all(root.join("out")).unwrap();
    root
}

/// Builds `root/kernels/k.cu` holding `src` with `nvcc` (`None`: the one um-build finds).
fn build_in(
    root: &Path,
    src: &str,
    nvcc: Option<&Path>,
) -> Result<um_build::Built, um_build::Error> {
    std::fs::write(root.join("kernels/k.cu"), src).unwrap();
    let mut k = um_build::Kernels::new(root.join("kernels")).out_dir(root.join("out"));
    if let Some(nvcc) = nvcc {
        k = k.nvcc(nvcc);
    }
    k.build()
}

/// The error um-build gives `src` before any nvcc runs, as its `Display`'s first line with the
/// folder's path replaced by `DIR`; or `nvcc ran` when the checks let it through.
fn first_line(src: &str) -> String {
    let root = fresh();
    let nvcc = root.join("failing-nvcc");
    std::fs::write(&nvcc, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = build_in(&root, src, Some(&nvcc)).expect_err("the failing nvcc builds nothing");
    let _ = std::fs::remove_dir_all(&root);
    if e.message().starts_with("nvcc failed") {
        return "nvcc ran".to_owned();
    }
    let shown = e.to_string();
    let first = shown.lines().next().unwrap_or_default();
    first.replace(&root.join("kernels").display().to_string(), "DIR")
}

const BODY: &str = "{ for (auto i : um::indices(n)) x[i] = 1.0f; }";

#[test]
fn a_file_without_um_cuh_is_told_to_include_it() {
    // Before: um-build built it (its check wrapper compiles um.cuh's namespace ahead of the
    // file), and the file compiled nowhere else: nvcc alone, an editor or another build system
    // say "this declaration has no storage class or type specifier" and more.
    assert_eq!(
        first_line(&format!(
            "// scale.cu\n\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n"
        )),
        "DIR/k.cu:3: `UM_SAFE_KERNEL` is defined in um.cuh, which this file does not include: add `#include \"um.cuh\"` at its top"
    );
    // A `um::` name in an unsafe kernel, after a system header.
    assert_eq!(
        first_line(
            "#include <stdint.h>\nextern \"C\" __global__ void k(float *x, um::len32 n) {}\n"
        ),
        "DIR/k.cu:2: `um::len32` is defined in um.cuh, which this file does not include: add `#include \"um.cuh\"` at its top"
    );
    // An include in a comment is none.
    assert_eq!(
        first_line(&format!(
            "// #include \"um.cuh\"\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n"
        )),
        "DIR/k.cu:2: `UM_SAFE_KERNEL` is defined in um.cuh, which this file does not include: add `#include \"um.cuh\"` at its top"
    );
    // Passed to nvcc: um.cuh in either form, or a header of the user's that may include it,
    // and a file that uses nothing of um.cuh.
    for src in [
        format!("#include \"um.cuh\"\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n"),
        format!("#include <um.cuh>\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n"),
        format!("#include \"common.cuh\"\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n"),
        "extern \"C\" __global__ void k(float *x, unsigned int n) {}\n".to_owned(),
    ] {
        assert_eq!(first_line(&src), "nvcc ran", "{src}");
    }
}

#[test]
fn a_kernel_in_a_namespace_is_told_to_move_to_global_scope() {
    // Before: nvcc's errors at the check wrapper (35 lines for this file), then a `help:`.
    assert_eq!(
        first_line(&format!(
            "#include \"um.cuh\"\nnamespace ops {{\n\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n}}\n"
        )),
        "DIR/k.cu:4: kernel `k`: declared inside `namespace ops`: move the kernel out of the namespace, to global scope"
    );
    assert_eq!(
        first_line(
            "#include \"um.cuh\"\nnamespace a { namespace {\nextern \"C\" __global__ void k(float *x, unsigned int n) {}\n} }\n"
        ),
        "DIR/k.cu:3: kernel `k`: declared inside `namespace a`: move the kernel out of the namespace, to global scope"
    );
    // Global scope for the check: an unnamed or inline namespace (nvcc builds both), a closed
    // namespace before the kernel, a brace in a string.
    for src in [
        format!(
            "#include \"um.cuh\"\nnamespace {{\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n}}\n"
        ),
        format!(
            "#include \"um.cuh\"\ninline namespace v1 {{\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n}}\n"
        ),
        format!(
            "#include \"um.cuh\"\nnamespace detail {{ __device__ const char *s = \"{{\"; }}\n\
             UM_SAFE_KERNEL void k(float *x, um::len32 n) {BODY}\n"
        ),
    ] {
        assert_eq!(first_line(&src), "nvcc ran", "{src}");
    }
}

#[test]
fn a_length_declared_as_a_plain_integer_is_named_with_its_fix() {
    // Before: "parameter `x`: the buffer `x` of a safe kernel has no length after it", about
    // the buffer rather than the integer meant as its length.
    let kernel =
        |params: &str| format!("#include \"um.cuh\"\nUM_SAFE_KERNEL void k({params}) {{ }}\n");
    assert_eq!(
        first_line(&kernel("float *x, int nb")),
        "DIR/k.cu:2: kernel `k`: parameter `nb`: write `um::ilen32 nb`, not `int nb`: a plain integer is a value the caller passes, so the buffer `x` has no length"
    );
    assert_eq!(
        first_line(&kernel(
            "const float *x, float *y, float a, unsigned int count"
        )),
        "DIR/k.cu:2: kernel `k`: parameter `count`: write `um::len32 count`, not `unsigned int count`: a plain integer is a value the caller passes, so the buffer `x` has no length"
    );
    assert_eq!(
        first_line(&kernel("float *x, um::len32 n, double *y, size_t n_y")),
        "DIR/k.cu:2: kernel `k`: parameter `n_y`: write `um::len64 n_y`, not `size_t n_y`: a plain integer is a value the caller passes, so the buffer `y` has no length"
    );
    // An integer named like no count: the buffer's own error, as before.
    assert_eq!(
        first_line(&kernel("float *x, int seed")),
        "DIR/k.cu:2: kernel `k`: parameter `x`: the buffer `x` of a safe kernel has no length after it"
    );
}

#[test]
fn a_plain_integer_named_for_a_buffers_length_is_a_warning_not_an_error() {
    // Every buffer has a length, so the kernel is sound and builds; `ny` is a value the caller
    // passes, which is what the warning says, in case it was meant as `y`'s length.
    let root = fresh();
    let built = build_in(
        &root,
        "#include \"um.cuh\"\n\
         UM_SAFE_KERNEL void k(const float *x, float *y, um::len32 n, int ny, int count) {\n\
             for (auto i : um::indices(n)) y[i] = x[i] * (float)(ny + count);\n}\n",
        None,
    )
    .expect("a sound kernel builds");
    let _ = std::fs::remove_dir_all(&root);
    // `count` is a count's general name, but no buffer lacks a length: no warning for it.
    assert_eq!(built.warnings.len(), 1, "{:?}", built.warnings);
    let shown = built.warnings[0].to_string();
    assert_eq!(
        shown
            .lines()
            .next()
            .unwrap()
            .replace(&root.join("kernels").display().to_string(), "DIR"),
        "DIR/k.cu:2: kernel `k`: parameter `ny`: `int ny` is a value the caller passes, not the length of `y`: to make it that length, declare it `um::ilen32 ny`, after `y`"
    );
    assert!(
        shown.contains("rename it and this warning goes away"),
        "{shown}"
    );
}
