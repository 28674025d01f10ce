//! A safe kernel runs with the block its launch gives it: a `UM_SAFE_KERNEL` whose PTX entry
//! fixes the block's shape (`__block_size__`: `.reqntid`, `.blocksareclusters`) is refused,
//! whatever else the PTX holds. Each case is a real file compiled by nvcc through
//! `Kernels::build`.
//!
//! Needs nvcc, as every build of um does (`$UM_LOCAL_NVCC` from `.cargo/config.toml` here).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Builds a fresh folder holding `k.cu` = `src` with `flags`.
fn build(src: &str, flags: &[&str]) -> Result<um_build::Built, um_build::Error> {
    let root: PathBuf = std::env::temp_dir().join(format!(
        "um-build-block-shape-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("kernels")).unwrap();
    std::fs::write(root.join("kernels/k.cu"), src).unwrap();
    let mut k = um_build::Kernels::new(root.join("kernels")).out_dir(root.join("out"));
    for f in flags {
        k = k.flag(f);
    }
    let result = k.build();
    let _ = std::fs::remove_dir_all(&root);
    result
}

/// `__block_size__` through a redefined marker, and a comment that reads like a PTX entry of the
/// same name without the directive, placed in the PTX before the real `.entry`: by nvcc under
/// `-lineinfo -src-in-ptx`, which copies the kernel's source line (its `//` comment included)
/// into the PTX as a comment; or, with no flag, by an inline `asm` in a function defined
/// earlier that ends that function's body, writes the comment, and opens a `.func` for the
/// rest (ptxas takes it). A PTX scan that does not skip comments finds the comment's entry first.
#[test]
fn a_fixed_block_shape_is_refused_whatever_the_ptx_comments_say() {
    const FAKE: &str = ".entry put( .param .u64 a, .param .align 4 .b8 b[4] ) {}";
    let marker = "#include \"um.cuh\"\n#undef UM_SAFE_KERNEL\n\
         #define UM_SAFE_KERNEL extern \"C\" __global__ __block_size__((32, 4, 1))\n";
    let body = "\n    for (auto i : um::indices(n)) x[i] = 1.0f;\n}\n";
    let in_source =
        format!("{marker}UM_SAFE_KERNEL void put(float *x, um::len32 n) {{ // {FAKE}{body}");
    // The same comment in a C string between functions, spelled with escapes (`\x2f` is `/`,
    // `\x7b` and `\x7d` are braces) so that um-build's reading of the file sees a plain string.
    let escaped = FAKE.replace("{}", "\\x7b\\x7d");
    let in_asm = format!(
        "{marker}extern \"C\" __global__ void first(float *x) {{ x[0] = 0.0f; asm volatile(\"ret;\\n\\x7d\\n\\x2f\\x2f {escaped}\\n.func um_rest()\\n\\x7b\"); }}\n\
         UM_SAFE_KERNEL void put(float *x, um::len32 n) {{{body}"
    );
    // Without the comment in the PTX, the shape is refused.
    let e = build(&in_source, &["-arch=compute_90"]).expect_err("__block_size__");
    assert!(e.to_string().contains("fixes the block's shape"), "{e}");
    let mut failures = Vec::new();
    for (name, src, flags) in [
        (
            "a source comment under -src-in-ptx",
            &in_source,
            &["-arch=compute_90", "-lineinfo", "-src-in-ptx"][..],
        ),
        ("an inline asm comment", &in_asm, &["-arch=compute_90"][..]),
    ] {
        match build(src, flags) {
            Ok(built) => failures.push(format!("{name}: built, safe {:?}", built.safe_kernels)),
            Err(e) if !e.to_string().contains("fixes the block's shape") => {
                failures.push(format!("{name}: refused for another reason: {e}"));
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
