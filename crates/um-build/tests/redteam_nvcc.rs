//! Red-team attacks that need the compiler: files whose text says one thing and whose compiled
//! kernel another (macros, `#if 0`, `#define const`, struct attributes, `#pragma pack`, flags).
//! nvcc compiles each, and the PTX `.entry` matches the text (a pointer is a `.u64` whether its
//! pointee is const or not, 4 or 16 bytes), so only the compiler-side check (`check.rs`) can
//! refuse them. Each builds a folder with `Kernels::build`, as a build script does.
//!
//! Needs nvcc, as every build of um does (`$UM_LOCAL_NVCC` from `.cargo/config.toml` here).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Builds a fresh folder holding `files`; the generated Rust or the error.
fn build_with(files: &[(&str, &str)], flags: &[&str]) -> Result<String, um_build::Error> {
    let root: PathBuf = std::env::temp_dir().join(format!(
        "um-build-redteam-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let dir = root.join("kernels");
    let out = root.join("out");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let mut k = um_build::Kernels::new(&dir).out_dir(&out);
    for f in flags {
        k = k.flag(f);
    }
    let result = k
        .build()
        .map(|b| std::fs::read_to_string(b.generated).unwrap());
    let _ = std::fs::remove_dir_all(&root);
    result
}

fn build(src: &str) -> Result<String, um_build::Error> {
    build_with(&[("k.cu", src)], &[])
}

fn refused(src: &str, says: &str) {
    let e = build(src).expect_err(src);
    let shown = e.to_string();
    assert!(shown.contains(says), "{src}\n---\n{shown}");
    assert!(e.file().is_some(), "{shown}");
}

const WRITES_X: &str = "{ for (auto i : um::indices(n)) x[i] = 1.0f; }";

#[test]
fn a_declaration_hidden_in_if_0_with_the_real_one_in_a_macro_is_refused() {
    // The parser reads the `#if 0` declaration (x const: a `&` buffer); nvcc compiles the macro's
    // (x written). Before the compiler-side check this built, with a safe launcher taking `&x`
    // for a kernel that writes x: a data race with any other reader of x, a write through `&`.
    refused(
        &format!(
            "#include \"um.cuh\"\n#if 0\nUM_SAFE_KERNEL void k(const float *x, unsigned int n) {{}}\n#endif\n\
             #define DECLARE_K UM_SAFE_KERNEL void k(float *x, unsigned int n)\nDECLARE_K {WRITES_X}\n"
        ),
        "parameter 'x': read as a pointer to const f32",
    );
}

#[test]
fn define_const_as_nothing_is_refused() {
    refused(
        &format!(
            "#include \"um.cuh\"\n#define const\nUM_SAFE_KERNEL void k(const float *x, unsigned int n) {WRITES_X}\n"
        ),
        "parameter 'x'",
    );
    // The same through a build flag.
    let e = build_with(
        &[(
            "k.cu",
            &format!("#include \"um.cuh\"\nUM_SAFE_KERNEL void k(const float *x, unsigned int n) {WRITES_X}\n"),
        )],
        &["-Dconst="],
    )
    .expect_err("-Dconst=");
    assert!(e.to_string().contains("parameter 'x'"), "{e}");
}

#[test]
fn a_declaration_hidden_by_a_comment_opened_in_a_string_is_refused() {
    // The parser does not know string literals: "/*" in a string hides the real kernel from it,
    // and a fake declaration in another string is what it reads.
    refused(
        &format!(
            "#include \"um.cuh\"\n__device__ const char *a = \"/*\";\n\
             UM_SAFE_KERNEL void k(float *x, unsigned int n) {WRITES_X}\n\
             __device__ const char *b = \"*/; UM_SAFE_KERNEL void k(const float *x, unsigned int n) {{}}\";\n"
        ),
        "parameter 'x'",
    );
}

#[test]
fn element_types_redefined_by_macros_are_refused() {
    // uint32_t is read as 4 bytes; the kernel indexes 8-byte doubles: a buffer of n u32 is half
    // the memory the kernel touches.
    refused(
        "#include \"um.cuh\"\n#define uint32_t double\n\
         UM_SAFE_KERNEL void k(uint32_t *x, unsigned int n) { for (auto i : um::indices(n)) x[i] = 1.0; }\n",
        "parameter 'x': read as a pointer to non-const u32",
    );
    // A count whose signedness a macro changes.
    refused(
        "#include \"um.cuh\"\n#define unsigned signed\n\
         UM_SAFE_KERNEL void k(float *x, unsigned n) { for (auto i : um::indices(n)) x[i] = 1.0f; }\n",
        "parameter 'n'",
    );
}

#[test]
fn struct_layouts_changed_by_attributes_or_pragmas_are_refused() {
    // Read as 4 bytes; nvcc lays it out in 16. Used only through a pointer, so the PTX has no
    // size to compare: the launcher took `&mut Managed<[P]>` of 4-byte elements and the kernel
    // strode 16 bytes per index, 4x past the end.
    refused(
        "#include \"um.cuh\"\nstruct P { float a; } __attribute__((aligned(16)));\n\
         UM_SAFE_KERNEL void k(P *x, unsigned int n) { for (auto i : um::indices(n)) x[i].a = 1.0f; }\n",
        "struct 'P' (line 2): read as 4 bytes aligned to 4",
    );
    // #pragma pack: 9 bytes in nvcc, 16 as read (misaligned doubles on the device).
    refused(
        "#include \"um.cuh\"\n#pragma pack(push, 1)\nstruct Q { unsigned char c; double d; };\n#pragma pack(pop)\n\
         UM_SAFE_KERNEL void k(const Q *x, double *y, unsigned int n) { for (auto i : um::indices(n)) y[i] = x[i].d; }\n",
        "struct 'Q'",
    );
    // An array length a macro sets differently from what the text says is refused by the
    // parser already; one an #if changes is caught by the compiler.
    refused(
        "#include \"um.cuh\"\n#if 1\nstruct R { float a[8]; };\n#else\nstruct R { float a[2]; };\n#endif\n\
         UM_SAFE_KERNEL void k(R *x, unsigned int n) { for (auto i : um::indices(n)) x[i].a[7] = 1.0f; }\n",
        "defined twice",
    );
}

#[test]
fn a_cpp_function_named_like_the_kernel_cannot_stand_in_for_it() {
    // The real kernel is extern "C" in a namespace (still `.entry k`), hidden from the parser by
    // a macro; `::k` is an ordinary C++ function with the `#if 0` reading's types. The asserts
    // on `decltype(&::k)` alone passed; the extern "C" redeclaration of `::k` refuses it.
    refused(
        &format!(
            "#include \"um.cuh\"\n#if 0\nUM_SAFE_KERNEL void k(const float *x, unsigned int n) {{}}\n#endif\n\
             #define REAL extern \"C\" __global__ void k(float *x, unsigned int n)\n\
             namespace hidden {{ REAL {WRITES_X} }}\nvoid k(const float *x, unsigned int n) {{}}\n"
        ),
        "linkage specification is incompatible",
    );
}

#[test]
fn macros_defined_at_the_end_of_the_file_cannot_switch_the_checks_off() {
    let fake = "#include \"um.cuh\"\n#if 0\nUM_SAFE_KERNEL void k(const float *x, unsigned int n) {}\n#endif\n\
                #define DECLARE_K UM_SAFE_KERNEL void k(float *x, unsigned int n)\n\
                DECLARE_K { for (auto i : um::indices(n)) x[i] = 1.0f; }\n";
    for tail in [
        // The asserts vanish.
        "#define static_assert(...)\n",
        // `::k` becomes another kernel, one that does take a const x.
        "extern \"C\" __global__ void k2(const float *x, unsigned int n) {}\n#define k k2\n",
        // The traits' members are renamed.
        "#define read_only is\n",
        "#define decltype(x) int\n#define sizeof(x) 4\n",
    ] {
        let e = build(&format!("{fake}{tail}")).expect_err(tail);
        assert!(e.to_string().contains("parameter 'x'"), "{tail}\n---\n{e}");
    }
    // Specializations of the traits' templates: the file cannot name their namespace.
    // (Behind a macro, which the parser does not read.)
    let e = build(&format!(
        "#define SPEC namespace um_build_check {{ template <class T> struct pointer; \\\n\
         template <> struct pointer<float *> {{ enum {{ is = 1, read_only = 1 }}; typedef float elem; }}; }}\nSPEC;\n{fake}"
    ))
    .expect_err("specialization");
    assert!(e.to_string().contains("parameter 'x'"), "{e}");
}

#[test]
fn a_kernel_in_a_namespace_is_refused_with_a_reason() {
    refused(
        &format!(
            "#include \"um.cuh\"\nnamespace ns {{\nUM_SAFE_KERNEL void k(float *x, unsigned int n) {WRITES_X}\n}}\n"
        ),
        "the global scope has no \"k\"",
    );
    let e = build("#include \"um.cuh\"\nnamespace ns {\nUM_SAFE_KERNEL void k(float *x, unsigned int n) {}\n}\n")
        .expect_err("namespace");
    assert!(
        e.help_text().is_some_and(|h| h.contains("global scope")),
        "{e}"
    );
}

#[test]
fn honest_files_in_every_form_it_reads_still_build() {
    let code = build(
        "#include \"um.cuh\"\n#include <stddef.h>\n#include <stdint.h>\n\
         // A struct with padding, an array and a typedef'd twin.\n\
         struct Bins { unsigned char tag; double scale; short s[3]; };\n\
         typedef struct { float lo, hi; } Range;\n\
         #define UNUSED_MACRO 1\n\
         UM_SAFE_KERNEL void k(float const *__restrict__ a, float * const b, const Bins *bins,\n\
                               /* the outputs */ Range *r, Bins by_value, size_t n,\n\
                               unsigned bins_len, int r_len) {\n\
             for (auto i : um::indices(n)) b[i] = a[i] * (float)by_value.scale;\n\
             for (auto i : um::indices(r_len)) r[i].lo = (float)bins[0].s[2] * (bins_len > 0);\n\
         }\n\
         extern \"C\" __global__ void u(int8_t *p, const uint16_t *q, long long m) {}\n",
    )
    .expect("an honest file builds");
    assert!(code.contains("a: &Managed<[f32]"), "{code}");
    assert!(code.contains("b: &mut Managed<[f32]"), "{code}");
    assert!(code.contains("bins: &Managed<[Bins]"), "{code}");
    assert!(code.contains("r: &mut Managed<[Range]"), "{code}");
    assert!(code.contains("let n: u64 = "), "{code}");
    assert!(code.contains("pub unsafe fn u<"), "{code}");
    // The check adds nothing to the kernel: the PTX has both entries, with their parameters.
    assert!(code.contains("pub static PTX"), "{code}");
}

#[test]
fn two_files_mapping_to_one_module_are_refused() {
    let src = "#include \"um.cuh\"\nUM_SAFE_KERNEL void k(float *x, unsigned int n) {}\n";
    let e = build_with(&[("a-b.cu", src), ("a_b.cu", src)], &[]).expect_err("two files");
    assert!(e.to_string().contains("maps to module `a_b`"), "{e}");
}

#[test]
fn user_macros_named_like_the_checks_words_still_work_in_the_file() {
    // File macros that share names with the check's own identifiers (trait members, template
    // parameters), and a `-D` flag: the file sees them, the check does not.
    let code = build_with(
        &[(
            "k.cu",
            "#include \"um.cuh\"\n#define value 2.0f\n#define count 7\n#define read_only 0\n\
             #define T 1\n#define N 4\n#define type float\n\
             UM_SAFE_KERNEL void k(float *x, unsigned int n) { for (auto i : um::indices(n)) x[i] = (type)(value * N + T + count + read_only + SCALE); }\n",
        )],
        &["-DSCALE=3"],
    )
    .expect("builds");
    assert!(code.contains("x: &mut Managed<[f32]"), "{code}");
}

#[test]
fn a_file_name_with_a_line_break_or_quote_injects_nothing() {
    // Such a name would end the wrapper's `#include "..."` (the text after it compiled as the
    // wrapper's own) or a doc comment of the generated Rust (the rest compiled as Rust).
    let src = "#include \"um.cuh\"\nUM_SAFE_KERNEL void k(float *x, unsigned int n) {}\n";
    for name in [
        "x\"\n#define static_assert(...) .cu",
        "y\n pub fn injected() {} .cu",
        "z`.cu",
    ] {
        let e = build_with(&[(name, src)], &[]).expect_err(name);
        assert!(e.to_string().contains("quote"), "{name:?}: {e}");
    }
}
