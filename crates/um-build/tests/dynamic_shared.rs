//! A safe launch passes no dynamic shared memory, so a `UM_SAFE_KERNEL` that can reach any is
//! refused, naming how: its body, a function it calls, and a function it can call through a
//! pointer (one named in a `__device__` variable's initialiser, or, once it calls through a
//! pointer, any whose address is taken). And whatever it reaches, a file with a safe kernel may
//! declare no dynamic shared memory at all (`.extern .shared` anywhere in its PTX): inline asm
//! can declare it where no function names it, and a pointer to it can be stored in memory.
//! Each case is a real file compiled by nvcc through `Kernels::build`.
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
    // The safe kernel calls through pointers to functions that use none, and the file declares
    // none (`uses_dyn` and `dyn` are never used, so nvcc leaves them out).
    let built = build(&format!(
        "{FUNCTIONS}__device__ op_t table[2] = {{plain, other}};\n\
         __device__ op_t slot;\n\
         extern \"C\" __global__ void setup(int w) {{ slot = w ? plain : other; }}\n\
         UM_SAFE_KERNEL void k(float *x, um::len32 n, int which) {{ for (auto i : um::indices(n)) x[i] = table[which & 1](x, i) + slot(x, i); }}\n"
    ))
    .expect("no pointer reaches dynamic shared memory");
    assert_eq!(built.safe_kernels, ["k"]);
    assert_eq!(built.unsafe_kernels, ["setup"]);
}

/// A file with a safe kernel may declare no dynamic shared memory, even where only an unsafe
/// kernel uses it and no pointer the safe kernel can follow leads there; the unsafe kernel
/// builds in a file of its own.
#[test]
fn a_file_with_a_safe_kernel_may_not_declare_dynamic_shared_memory() {
    let unsafe_kernel =
        "extern \"C\" __global__ void with_dyn(float *x) { x[0] = uses_dyn(x, 0) + dyn[1]; }\n";
    let e = build(&format!(
        "{FUNCTIONS}{unsafe_kernel}\
         UM_SAFE_KERNEL void k(float *x, um::len32 n) {{ for (auto i : um::indices(n)) x[i] = plain(x, i); }}\n"
    ))
    .expect_err("a safe kernel beside dynamic shared memory");
    let shown = e.to_string();
    assert!(
        shown.contains("k.cu:8: its PTX declares dynamic shared memory (`.extern .shared")
            && shown.contains("a file with a safe kernel (`k`, here) may not declare any")
            && shown.contains("move the unsafe kernel that uses it")
            && e.kernel_name().is_none(),
        "{shown}"
    );
    let built = build(&format!("{FUNCTIONS}{unsafe_kernel}")).expect("alone, it builds");
    assert_eq!(built.unsafe_kernels, ["with_dyn"]);
}

/// Dynamic shared memory declared by inline PTX: an unsafe kernel's `asm` ends its own body
/// (`}` written `\x7d`) and declares `.extern .shared` at module scope after the brace, on the
/// same line; the safe kernel names the symbol in its own `asm`. ptxas takes the module (one
/// declaration, one use); the PTX has no line that begins `.extern`.
#[test]
fn dynamic_shared_memory_declared_by_inline_asm_is_refused() {
    let src = r#"#include "um.cuh"
extern "C" __global__ void first(float *x) {
    x[0] = 1.0f;
    asm volatile("ret;\n\x7d .extern .shared .align 4 .b8 hid[];\n.func um_rest()\n\x7b");
}
UM_SAFE_KERNEL void k(float *x, um::len32 n) {
    unsigned base;
    asm volatile("mov.u32 %0, hid;" : "=r"(base));
    for (auto i : um::indices(n)) x[i] = *(volatile float *)__cvta_shared_to_generic(base + 4 * threadIdx.x);
}
"#;
    match build(src) {
        Ok(built) => panic!("built: safe {:?}", built.safe_kernels),
        Err(e) => assert!(e.to_string().contains("dynamic shared memory"), "{e}"),
    }
}

/// A generic pointer to dynamic shared memory kept in a `__device__` variable: an unsafe kernel
/// stores it, the safe kernel reads through it. The safe kernel names neither the symbol nor a
/// function that does; the shared window it reads is its own block's, past its static size.
#[test]
fn a_safe_kernel_that_reads_through_a_stored_pointer_to_dynamic_shared_memory_is_refused() {
    let src = "#include \"um.cuh\"\n\
        extern __shared__ float dyn[];\n\
        __device__ float *where;\n\
        extern \"C\" __global__ void setup(float *x) { where = dyn; x[0] = dyn[0]; }\n\
        UM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = where[threadIdx.x]; }\n";
    match build(src) {
        Ok(built) => panic!("built: safe {:?}", built.safe_kernels),
        Err(e) => assert!(e.to_string().contains("dynamic shared memory"), "{e}"),
    }
}

/// Other ways to reach dynamic shared memory from a safe kernel, each refused (by the check or
/// by nvcc): a virtual call on an object an unsafe kernel made (the vtable is a module-scope
/// initialiser), a function pointer passed as a kernel argument (an indirect call, and an
/// unsafe kernel takes the address), the address of the shared array in a `__device__`
/// variable's initialiser.
#[test]
fn dynamic_shared_memory_reached_through_virtual_calls_or_pointer_arguments_is_refused() {
    for (name, rest, says) in [
        (
            "a virtual call",
            "class Op { public: __device__ virtual float run(float *x, unsigned i) { return x[i]; } };\n\
             class Dyn : public Op { public: __device__ float run(float *x, unsigned i) override { return uses_dyn(x, i); } };\n\
             extern \"C\" __global__ void make(unsigned long long *slot, int which) { if (which) new (slot) Dyn(); else new (slot) Op(); }\n\
             UM_SAFE_KERNEL void k(float *x, um::len32 n, const unsigned long long *slot, um::len32 m) {\n\
                 for (auto i : um::indices(n)) x[i] = ((Op *)slot)->run(x, i); }\n",
            "uses dynamic shared memory",
        ),
        (
            "a pointer passed as an argument",
            "extern \"C\" __global__ void address(unsigned long long *out) { *out = (unsigned long long)(op_t)uses_dyn; }\n\
             UM_SAFE_KERNEL void k(float *x, um::len32 n, unsigned long long f) { for (auto i : um::indices(n)) x[i] = ((op_t)f)(x, i); }\n",
            "function pointer",
        ),
        (
            "the array's address in an initialiser",
            "__device__ float *where = dyn;\n\
             UM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = where[i]; }\n",
            "dynamic initialization is not supported",
        ),
    ] {
        let e = build(&format!("{FUNCTIONS}{rest}")).expect_err(name);
        let shown = e.to_string();
        assert!(shown.contains(says), "{name}: {shown}");
    }
}
