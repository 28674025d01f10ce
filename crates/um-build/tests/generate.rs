//! `generate_for` end to end, without nvcc: what a declaration becomes, and the errors a user
//! sees (file-independent parts; `Kernels::build` adds the file).
#![allow(clippy::expect_used, clippy::unwrap_used)]

const PTX: &str = r#"
.version 9.0
.visible .entry hist(
	.param .u64 .ptr .align 1 hist_param_0,
	.param .align 4 .b8 hist_param_1[4],
	.param .u64 .ptr .align 1 hist_param_2,
	.param .align 4 .b8 hist_param_3[4],
	.param .align 4 .b8 hist_param_4[12]
)
{ ret; }
.visible .entry scatter(
	.param .u64 .ptr .align 1 scatter_param_0,
	.param .u64 .ptr .align 1 scatter_param_1,
	.param .f32 scatter_param_2,
	.param .u32 scatter_param_3
)
{ ret; }
"#;

const SOURCE: &str = r#"
#include "um.cuh"
struct Binning { float lo; float width; unsigned int bins; };
UM_SAFE_KERNEL void hist(const float *values, um::len32 n, unsigned int *counts,
                         um::len32 counts_len, Binning b) {}
extern "C" __global__ void scatter(float *x, const unsigned int *idx, float value, unsigned int n) {}
"#;

#[test]
fn safe_and_unsafe_launchers_and_structs_are_generated() {
    let code = um_build::generate_for("my-kernels", SOURCE, PTX).expect("generates");
    // One module per file, named for it.
    assert!(code.contains("pub mod my_kernels {"), "{code}");
    // The struct in C layout, copied to the device as it is.
    assert!(code.contains("#[repr(C)]"));
    assert!(code.contains("pub struct Binning {"));
    assert!(code.contains("pub lo: f32,") && code.contains("pub bins: u32,"));
    assert!(code.contains("unsafe impl __um::DeviceCopy for self::Binning {}"));
    // A safe launcher, and a `_with` that takes only a one-dimensional launch; lengths are not
    // parameters: they come from the buffers.
    assert!(code.contains(
        "pub fn hist<'s, K: __um::StreamKind, M0: __um::Storage, M1: __um::Storage>(stream: &__um::Stream<'s, K>, values: &__um::Managed<[f32], __um::StreamOwned<'s, K>, M0>, counts: &mut __um::Managed<[u32], __um::StreamOwned<'s, K>, M1>, b: self::Binning) -> __um::Result<()>"
    ), "{code}");
    assert!(
        code.contains(
            "pub fn hist_with<'s, K: __um::StreamKind, M0: __um::Storage, M1: __um::Storage>(stream: &__um::Stream<'s, K>, config: __um::Linear,"
        )
    );
    assert!(code.contains("let n: u32 = __um::codegen::count(KERNEL, \"n\""));
    assert!(code.contains("let counts_len: u32 = __um::codegen::count(KERNEL, \"counts_len\""));
    assert!(code.contains("__um::ByValue(b)"));
    // The other kernel: an `unsafe fn` with a full LaunchConfig and every scalar explicit.
    assert!(code.contains(
        "pub unsafe fn scatter<'s, K: __um::StreamKind, M0: __um::Storage, M1: __um::Storage>(stream: &__um::Stream<'s, K>, config: __um::LaunchConfig, x: &mut __um::Managed<[f32], __um::StreamOwned<'s, K>, M0>, idx: &__um::Managed<[u32], __um::StreamOwned<'s, K>, M1>, value: f32, n: u32)"
    ), "{code}");
    assert!(code.contains("/// # Safety"));
    assert!(!code.contains("pub fn scatter"));
    assert!(code.contains("pub static ALL_PTX"));
}

#[test]
fn generator_errors_name_line_kernel_parameter_and_fix() {
    // A buffer of a safe kernel with no length: a plain integer is a value, whatever its name.
    // One named like a count (`n`) was meant as the length: the error names it, and its type.
    let src = "UM_SAFE_KERNEL void scatter(float *x, const unsigned int *idx, float value, unsigned int n) {}";
    let e = um_build::generate_for("k", src, PTX.replace("hist", "zzz").as_str())
        .expect_err("uncounted buffers");
    assert_eq!(
        (e.kernel_name(), e.param_name(), e.line()),
        (Some("scatter"), Some("n"), Some(1))
    );
    let shown = e.to_string();
    assert_eq!(
        shown.lines().next(),
        Some(
            "line 1: kernel `scatter`: parameter `n`: write `um::len32 n`, not `unsigned int n`: a plain integer is a value the caller passes, so the buffer `x` has no length"
        ),
        "{shown}"
    );
    // Any other name: the buffer has no length after it.
    let src = src.replace("unsigned int n", "unsigned int m");
    let e = um_build::generate_for("k", &src, PTX.replace("hist", "zzz").as_str())
        .expect_err("uncounted buffers");
    assert_eq!(e.param_name(), Some("x"));
    let shown = e.to_string();
    assert!(
        shown.contains("help: declare `um::len32 x_len` after `x`"),
        "{shown}"
    );

    // A struct named like a Rust primitive.
    let src = "struct f32 { float a; };\nextern \"C\" __global__ void scatter(float *x, const unsigned int *idx, float value, unsigned int n) {}";
    let e = um_build::generate_for("k", src, PTX).expect_err("name taken");
    assert_eq!(e.line(), Some(1));
    assert!(e.message().contains("`f32`"), "{e}");

    // A declaration the PTX disagrees with names the parameter.
    let src = "extern \"C\" __global__ void scatter(float *x, const unsigned int *idx, double value, unsigned int n) {}";
    let e = um_build::generate_for("k", src, PTX).expect_err("width");
    assert_eq!(
        (e.kernel_name(), e.param_name()),
        (Some("scatter"), Some("value"))
    );
    assert!(e.to_string().contains("the PTX has `.f32`"), "{e}");
}
