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

/// PTX that ptxas reads with `.reqntid` on the safe kernel's entry, after text that a reader of
/// comments and strings could get wrong (each form checked against ptxas 13.0): a string with a
/// backslash before its closing quote (ptxas takes no escapes: `"a\"` is a whole string), a
/// string holding `//` and a line break (ptxas lets a string run over lines), a `//` comment
/// with a carriage return (which does not end it for ptxas) followed by a line break, a block
/// comment holding a quote, and a line comment ending in a backslash (no continuation in PTX).
/// Each must be refused as a fixed block shape.
#[test]
fn a_fixed_block_shape_after_strings_and_comments_ptxas_reads_its_own_way_is_refused() {
    let src = "#include \"um.cuh\"\nUM_SAFE_KERNEL void put(float *x, um::len32 n) {}\n";
    let head = ".version 8.0\n.target sm_75\n.address_size 64\n";
    let entry = |before: &str, between: &str| {
        format!(
            "{head}{before}\n.visible .entry put(\n\t.param .u64 put_param_0,\n\t\
             .param .align 4 .b8 put_param_1[4]\n){between}\n.reqntid 32, 4, 1\n{{\n\tret;\n}}\n"
        )
    };
    let mut failures = Vec::new();
    for (name, ptx) in [
        (
            "a backslash before a closing quote",
            entry(".file 1 \"a\\\"", ""),
        ),
        (
            "a string over lines holding //",
            entry(".file 1 \"a //\nb\"", ""),
        ),
        ("a carriage return in a line comment", entry("", " // c\r")),
        ("a quote in a block comment", entry("/* \" */", "")),
        ("a backslash ending a line comment", entry("// c \\", "")),
    ] {
        match um_build::generate_for("k", src, &ptx) {
            Ok(_) => failures.push(format!("{name}: built")),
            Err(e) if !e.to_string().contains("fixes the block's shape") => {
                failures.push(format!("{name}: refused for another reason: {e}"));
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
