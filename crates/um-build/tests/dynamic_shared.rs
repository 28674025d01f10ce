//! A safe launch passes no dynamic shared memory, so a `UM_SAFE_KERNEL` that can reach any is
//! refused: its body, a function it calls, and a function it can call through a pointer (one
//! named in a `__device__` variable's initialiser, or, once it calls through a pointer, any
//! whose address is taken). Each case is a real file compiled by nvcc through `Kernels::build`.
//!
//! Needs nvcc, as every build of um does (`$UM_LOCAL_NVCC` from `.cargo/config.toml` here).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Builds a fresh folder holding `k.cu` = `src`.
fn build(src: &str) -> Result<um_build::Built, um_build::Error> {
    let root: PathBuf = std::env::temp_dir().join(format!(
        "um-build-dynamic-shared-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("kernels")).unwrap();
    std::fs::write(root.join("kernels/k.cu"), src).unwrap();
    let result = um_build::Kernels::new(root.join("kernels"))
        .out_dir(root.join("out"))
        .build();
    let _ = std::fs::remove_dir_all(&root);
    result
}

/// Two device functions, one of which uses dynamic shared memory.
const FUNCTIONS: &str = "#include \"um.cuh\"\n\
    extern __shared__ float dyn[];\n\
    typedef float (*op_t)(float *, unsigned);\n\
    __device__ __noinline__ float uses_dyn(float *x, unsigned i) { dyn[threadIdx.x] = x[i]; return dyn[threadIdx.x ^ 1]; }\n\
    __device__ __noinline__ float plain(float *x, unsigned i) { return x[i]; }\n\
    __device__ __noinline__ float other(float *x, unsigned i) { return x[i] + 1; }\n";

#[test]
fn a_safe_kernel_that_can_call_dynamic_shared_memory_through_a_pointer_is_refused() {
    for (name, rest, why) in [
        (
            "a table with an initialiser",
            "__device__ op_t table[2] = {plain, uses_dyn};\n\
             UM_SAFE_KERNEL void k(float *x, um::len32 n, int which) { for (auto i : um::indices(n)) x[i] = table[which & 1](x, i); }\n",
            "module-scope variable",
        ),
        (
            "one pointer with an initialiser",
            "__device__ op_t one = uses_dyn;\n\
             UM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = one(x, i); }\n",
            "module-scope variable",
        ),
        (
            "a pointer an unsafe kernel stores",
            "__device__ op_t slot;\n\
             extern \"C\" __global__ void setup(int w) { slot = w ? uses_dyn : plain; }\n\
             UM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = slot(x, i); }\n",
            "function pointer",
        ),
    ] {
        let e = build(&format!("{FUNCTIONS}{rest}")).expect_err(name);
        let shown = e.to_string();
        assert!(
            shown.contains("kernel `k`: uses dynamic shared memory")
                && shown.contains("uses_dyn")
                && shown.contains(why),
            "{name}: {shown}"
        );
    }
}

#[test]
fn pointers_to_functions_without_dynamic_shared_memory_are_allowed() {
    // An unsafe kernel uses dynamic shared memory, directly and through `uses_dyn`; the safe
    // kernel calls through pointers to functions that use none.
    let built = build(&format!(
        "{FUNCTIONS}__device__ op_t table[2] = {{plain, other}};\n\
         __device__ op_t slot;\n\
         extern \"C\" __global__ void setup(int w) {{ slot = w ? plain : other; }}\n\
         extern \"C\" __global__ void with_dyn(float *x) {{ x[0] = uses_dyn(x, 0) + dyn[1]; }}\n\
         UM_SAFE_KERNEL void k(float *x, um::len32 n, int which) {{ for (auto i : um::indices(n)) x[i] = table[which & 1](x, i) + slot(x, i); }}\n"
    ))
    .expect("no pointer reaches dynamic shared memory");
    assert_eq!(built.safe_kernels, ["k"]);
    assert_eq!(built.unsafe_kernels, ["setup", "with_dyn"]);
}
