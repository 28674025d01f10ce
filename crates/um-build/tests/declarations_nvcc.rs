//! Declarations whose check needs the compiler: files whose text says one thing and whose compiled
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
        "um-build-declarations-{}-{}",
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
            "#include \"um.cuh\"\n#if 0\nUM_SAFE_KERNEL void k(const float *x, um::len32 n) {{}}\n#endif\n\
             #define DECLARE_K UM_SAFE_KERNEL void k(float *x, um::len32 n)\nDECLARE_K {WRITES_X}\n"
        ),
        "parameter 'x': read as a pointer to const f32",
    );
}

#[test]
fn define_const_as_nothing_is_refused() {
    refused(
        &format!(
            "#include \"um.cuh\"\n#define const\nUM_SAFE_KERNEL void k(const float *x, um::len32 n) {WRITES_X}\n"
        ),
        "parameter 'x'",
    );
    // The same through a build flag.
    let e = build_with(
        &[(
            "k.cu",
            &format!("#include \"um.cuh\"\nUM_SAFE_KERNEL void k(const float *x, um::len32 n) {WRITES_X}\n"),
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
             UM_SAFE_KERNEL void k(float *x, um::len32 n) {WRITES_X}\n\
             __device__ const char *b = \"*/; UM_SAFE_KERNEL void k(const float *x, um::len32 n) {{}}\";\n"
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
         UM_SAFE_KERNEL void k(uint32_t *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = 1.0; }\n",
        "parameter 'x': read as a pointer to non-const u32",
    );
    // A value whose signedness a macro changes.
    refused(
        "#include \"um.cuh\"\n#define unsigned signed\n\
         UM_SAFE_KERNEL void k(float *x, unsigned v, um::len32 n) { for (auto i : um::indices(n)) x[i] = v; }\n",
        "parameter 'v'",
    );
    // A length whose type a macro changes: the launcher would fill 8 bytes where the kernel
    // reads 4 (or the reverse).
    refused(
        "#include \"um.cuh\"\n#define len32 len64\n\
         UM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = 1.0f; }\n",
        "parameter 'n'",
    );
    // The file cannot bring its own `um::len32` (a redefinition of the genuine one, which is
    // compiled ahead of the file), so a length always converts to the value the launcher passed.
    // The file does not include um.cuh; the include of a header of its own gets it past
    // um-build's missing-include check, which does not look into other headers.
    let e = build_with(
        &[
            (
                "k.cu",
                "#include \"defs.cuh\"\n\
                 #define OWN namespace um { struct len32 { unsigned value; __device__ operator unsigned() const { return 2 * value; } }; }\nOWN;\n\
                 UM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = 1.0f; }\n",
            ),
            ("defs.cuh", "#pragma once\n"),
        ],
        &[],
    )
    .expect_err("own len32");
    assert!(e.to_string().contains("has already been defined"), "{e}");
}

#[test]
fn struct_layouts_changed_by_attributes_or_pragmas_are_refused() {
    // Read as 4 bytes; nvcc lays it out in 16. Used only through a pointer, so the PTX has no
    // size to compare: the launcher took `&mut Managed<[P]>` of 4-byte elements and the kernel
    // strode 16 bytes per index, 4x past the end.
    refused(
        "#include \"um.cuh\"\nstruct P { float a; } __attribute__((aligned(16)));\n\
         UM_SAFE_KERNEL void k(P *x, um::len32 n) { for (auto i : um::indices(n)) x[i].a = 1.0f; }\n",
        "struct 'P' (line 2): read as 4 bytes aligned to 4",
    );
    // #pragma pack: 9 bytes in nvcc, 16 as read (misaligned doubles on the device).
    refused(
        "#include \"um.cuh\"\n#pragma pack(push, 1)\nstruct Q { unsigned char c; double d; };\n#pragma pack(pop)\n\
         UM_SAFE_KERNEL void k(const Q *x, double *y, um::len32 n) { for (auto i : um::indices(n)) y[i] = x[i].d; }\n",
        "struct 'Q'",
    );
    // An array length a macro sets differently from what the text says is refused by the
    // parser already; one an #if changes is caught by the compiler.
    refused(
        "#include \"um.cuh\"\n#if 1\nstruct R { float a[8]; };\n#else\nstruct R { float a[2]; };\n#endif\n\
         UM_SAFE_KERNEL void k(R *x, um::len32 n) { for (auto i : um::indices(n)) x[i].a[7] = 1.0f; }\n",
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
            "#include \"um.cuh\"\n#if 0\nUM_SAFE_KERNEL void k(const float *x, um::len32 n) {{}}\n#endif\n\
             #define REAL extern \"C\" __global__ void k(float *x, um::len32 n)\n\
             namespace hidden {{ REAL {WRITES_X} }}\nvoid k(const float *x, um::len32 n) {{}}\n"
        ),
        "linkage specification is incompatible",
    );
}

#[test]
fn macros_defined_at_the_end_of_the_file_cannot_switch_the_checks_off() {
    let fake = "#include \"um.cuh\"\n#if 0\nUM_SAFE_KERNEL void k(const float *x, um::len32 n) {}\n#endif\n\
                #define DECLARE_K UM_SAFE_KERNEL void k(float *x, um::len32 n)\n\
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
    // Said before nvcc runs (`diagnostics.rs` has its first line). A kernel that a
    // macro hides in a namespace still meets the compiler-side check:
    // `a_cpp_function_named_like_the_kernel_cannot_stand_in_for_it`.
    refused(
        &format!(
            "#include \"um.cuh\"\nnamespace ns {{\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {WRITES_X}\n}}\n"
        ),
        "kernel `k`: declared inside `namespace ns`: move the kernel out of the namespace, to global scope",
    );
    let e = build(
        "#include \"um.cuh\"\nnamespace ns {\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}\n}\n",
    )
    .expect_err("namespace");
    assert!(e.help_text().is_some_and(|h| h.contains("`::k`")), "{e}");
}

#[test]
fn honest_files_in_every_form_it_reads_still_build() {
    let code = build(
        "#include \"um.cuh\"\n#include <stddef.h>\n#include <stdint.h>\n\
         // A struct with padding, an array and a typedef'd twin.\n\
         struct Bins { unsigned char tag; double scale; short s[3]; };\n\
         typedef struct { float lo, hi; } Range;\n\
         #define UNUSED_MACRO 1\n\
         UM_SAFE_KERNEL void k(float const *__restrict__ a, float * const b, um::len64 n,\n\
                               const Bins *bins, ::um::len32 bins_len,\n\
                               /* the outputs */ Range *r, um :: ilen32 r_len, Bins by_value) {\n\
             for (auto i : um::indices(n)) b[i] = a[i] * (float)by_value.scale;\n\
             for (auto i : um::indices(r_len)) r[i].lo = (float)bins[0].s[2] * (bins_len > 0);\n\
         }\n\
         extern \"C\" __global__ void u(int8_t *p, const uint16_t *q, long long m) {}\n",
    )
    .expect("an honest file builds");
    assert!(code.contains("a: &__um::Managed<[f32]"), "{code}");
    assert!(code.contains("b: &mut __um::Managed<[f32]"), "{code}");
    assert!(code.contains("bins: &__um::Managed<[self::Bins]"), "{code}");
    assert!(
        code.contains("r: &mut __um::Managed<[self::Range]"),
        "{code}"
    );
    assert!(code.contains("let n: u64 = "), "{code}");
    assert!(code.contains("let bins_len: u32 = "), "{code}");
    assert!(code.contains("let r_len: i32 = "), "{code}");
    assert!(
        code.contains("(a, b, n, bins, bins_len, r, r_len, __um::ByValue(by_value), )"),
        "{code}"
    );
    assert!(code.contains("pub unsafe fn u<"), "{code}");
    // The check adds nothing to the kernel: the PTX has both entries, with their parameters.
    assert!(code.contains("pub static PTX"), "{code}");
}

#[test]
fn two_files_mapping_to_one_module_are_refused() {
    let src = "#include \"um.cuh\"\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}\n";
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
             UM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = (type)(value * N + T + count + read_only + SCALE); }\n",
        )],
        &["-DSCALE=3"],
    )
    .expect("builds");
    assert!(code.contains("x: &mut __um::Managed<[f32]"), "{code}");
}

#[test]
fn a_file_name_with_a_line_break_or_quote_injects_nothing() {
    // Such a name would end the wrapper's `#include "..."` (the text after it compiled as the
    // wrapper's own) or a doc comment of the generated Rust (the rest compiled as Rust).
    let src = "#include \"um.cuh\"\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}\n";
    for name in [
        "x\"\n#define static_assert(...) .cu",
        "y\n pub fn injected() {} .cu",
        "z`.cu",
    ] {
        let e = build_with(&[(name, src)], &[]).expect_err(name);
        assert!(e.to_string().contains("quote"), "{name:?}: {e}");
    }
}

/// The launcher used to choose a kernel's counts by parameter *name* (`n`,
/// `x_len`), which the compiler never checks. A prototype that named the parameters otherwise
/// than the definition (or an `#if 0` reading beside a macro) made `fill(s, &mut y16, 1 << 30)`
/// pass `1 << 30` where the kernel read its count: an out-of-bounds write from safe code. Now a
/// length is a *type* (`um::len32`), checked at every position, and counts the buffers before it.
#[test]
fn a_prototype_whose_length_is_elsewhere_than_the_definitions_is_refused() {
    let definition = "#pragma once\n#include \"um.cuh\"\n\
        UM_SAFE_KERNEL void fill(float *y, um::len32 n, unsigned int value) {\n\
            for (auto i : um::indices(n)) y[i] = (float)value;\n}\n";
    // The prototype says the length is third, the definition second.
    let e = build_with(
        &[
            (
                "k.cu",
                "#include \"um.cuh\"\n\
                 UM_SAFE_KERNEL void fill(float *y, unsigned int value, um::len32 n);\n\
                 #include \"fill_impl.cuh\"\n",
            ),
            ("fill_impl.cuh", definition),
        ],
        &[],
    )
    .expect_err("prototype and definition disagree");
    assert!(e.file().is_some(), "{e}");
    // The same with the old names: both positions plain integers in the prototype.
    let e = build_with(
        &[
            (
                "k.cu",
                "#include \"um.cuh\"\n\
                 UM_SAFE_KERNEL void fill(float *y, unsigned int value, unsigned int n);\n\
                 #include \"fill_impl.cuh\"\n",
            ),
            ("fill_impl.cuh", definition),
        ],
        &[],
    )
    .expect_err("no length in the prototype");
    assert!(e.to_string().contains("has no length"), "{e}");
    // An `#if 0` reading with the real definition in a macro.
    refused(
        "#include \"um.cuh\"\n#if 0\nUM_SAFE_KERNEL void fill(float *y, unsigned int value, um::len32 n) {}\n#endif\n\
         #define REAL UM_SAFE_KERNEL void fill(float *y, um::len32 n, unsigned int value)\n\
         REAL { for (auto i : um::indices(n)) y[i] = (float)value; }\n",
        "parameter 'value'",
    );
    // A plain integer whose type the preprocessor turns into a length.
    refused(
        "#include \"um.cuh\"\n#define LEN um::len32\n\
         UM_SAFE_KERNEL void fill(float *y, LEN value, um::len32 n) { for (auto i : um::indices(n)) y[i] = 0; }\n",
        "not supported",
    );
    refused(
        "#include \"um.cuh\"\n#define uint32_t um::len32\n\
         UM_SAFE_KERNEL void fill(float *y, uint32_t value, um::len32 n) { for (auto i : um::indices(n)) y[i] = 0; }\n",
        "parameter 'value'",
    );
}

#[test]
fn a_prototype_that_agrees_by_position_builds_whatever_its_names() {
    // Names differ between the prototype and the definition (even `n` and `value` swapped):
    // the launcher fills the position whose type is the length, which both agree on.
    let code = build_with(
        &[
            (
                "k.cu",
                "#include \"um.cuh\"\n\
                 UM_SAFE_KERNEL void fill(float *y, unsigned int n, um::len32 value);\n\
                 #include \"fill_impl.cuh\"\n",
            ),
            (
                "fill_impl.cuh",
                "#pragma once\n#include \"um.cuh\"\n\
                 UM_SAFE_KERNEL void fill(float *out, unsigned int value, um::len32 n) {\n\
                     for (auto i : um::indices(n)) out[i] = (float)value;\n}\n",
            ),
        ],
        &[],
    )
    .expect("builds");
    // The launcher takes the prototype's names, but passes the buffer's length third.
    assert!(
        code.contains("y: &mut __um::Managed<[f32], __um::StreamOwned<'s, K>, M0>, n: u32) -> __um::Result<()>"),
        "{code}"
    );
    assert!(code.contains("(y, n, value, )"), "{code}");
    assert!(
        code.contains("let value: u32 = __um::codegen::count(KERNEL, \"value\", __um::codegen::common_len(KERNEL, &[(\"y\", y.len())])"),
        "{code}"
    );
}

/// Generator bugs, each a Rust compile error in the user's crate before:
/// here they must build (the generated Rust is compiled in `tests/out_of_workspace.rs` and the
/// differential test).
#[test]
fn file_and_struct_names_that_collided_with_rust_build() {
    let src = "#include \"um.cuh\"\n\
               struct Storage { float a; };\nstruct K { float b; };\nstruct M0 { int c; };\n\
               UM_SAFE_KERNEL void k(const Storage *s, um::len32 n, K by_value, M0 m) {}\n";
    let code = build_with(&[("_.cu", src), ("std.cu", src)], &[]).expect("builds");
    assert!(code.contains("pub mod k__ {"), "{code}");
    assert!(code.contains("pub mod std_ {"), "{code}");
    assert!(
        code.contains("s: &__um::Managed<[self::Storage], __um::StreamOwned<'s, K>, M0>, by_value: self::K, m: self::M0)"),
        "{code}"
    );
}

/// `__block_size__((x, y, z))` on a safe kernel's definition, out
/// of um-build's reading (a prototype with the definition in a header, or a redefined marker),
/// fixes the block's shape (`.reqntid`, `.blocksareclusters`): the GPU then ran y-extended blocks
/// (a data race through `um::indices`) or 1024 times the threads `Linear` counted (an index past
/// 2^31). Refused from the PTX entry, however it got there. Needs an architecture that has the
/// attribute (compute_90).
#[test]
fn a_safe_kernel_whose_definition_fixes_its_block_shape_is_refused() {
    let header = "#pragma once\n#include \"um.cuh\"\n\
        extern \"C\" __global__ void __block_size__((32, 4, 1)) bump(float *x, um::len32 n) {\n\
            for (auto i : um::indices(n)) x[i] += 1.0f;\n}\n";
    let e = build_with(
        &[
            (
                "race.cu",
                "#include \"um.cuh\"\nUM_SAFE_KERNEL void bump(float *x, um::len32 n);\n#include \"race_impl.cuh\"\n",
            ),
            ("race_impl.cuh", header),
        ],
        &["-arch=compute_90"],
    )
    .expect_err("__block_size__ behind a prototype");
    assert!(e.to_string().contains("__block_size__"), "{e}");
    assert_eq!(e.kernel_name(), Some("bump"), "{e}");
    // The marker redefined after um.cuh.
    let e = build_with(
        &[(
            "race.cu",
            "#include \"um.cuh\"\n#undef UM_SAFE_KERNEL\n\
             #define UM_SAFE_KERNEL extern \"C\" __global__ __block_size__((1024, 1, 1))\n\
             UM_SAFE_KERNEL void put(float *x, float v, um::ilen32 n) {\n\
                 int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }\n",
        )],
        &["-arch=compute_90"],
    )
    .expect_err("__block_size__ through the marker");
    assert!(e.to_string().contains("fixes the block's shape"), "{e}");
    // `__launch_bounds__` and `__cluster_dims__` change no index: still safe.
    build_with(
        &[(
            "ok.cu",
            "#include \"um.cuh\"\n\
             UM_SAFE_KERNEL void __launch_bounds__(64) a(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = 1.0f; }\n",
        )],
        &["-arch=compute_90"],
    )
    .expect("__launch_bounds__ is allowed");
}

/// The generated `PTX` static read
/// `$OUT_DIR/um-ptx/<m>.ptx`, not the file um-build checked in `Kernels::out_dir`: two kernel
/// folders built into two output folders of one crate embedded each other's PTX (an f64 kernel
/// behind an f32 launcher). The static now holds the text um-build checked (a copy of which it
/// writes to `um-ptx/` of its own output folder).
#[test]
fn each_output_folder_embeds_its_own_ptx() {
    let root = std::env::temp_dir().join(format!("um-build-outdir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut generated = Vec::new();
    for (folder, ty) in [("kernels_f64", "double"), ("kernels_f32", "float")] {
        let dir = root.join(folder);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("twice.cu"),
            format!(
                "#include \"um.cuh\"\nUM_SAFE_KERNEL void twice({ty} *x, um::len32 n) {{ for (auto i : um::indices(n)) x[i] *= 2; }}\n"
            ),
        )
        .unwrap();
        let out = root.join("out").join(folder);
        let built = um_build::Kernels::new(&dir)
            .out_dir(&out)
            .build()
            .expect("builds");
        let code = std::fs::read_to_string(&built.generated).unwrap();
        // The static is the text of the checked copy beside the generated file, this folder's.
        let ptx = std::fs::read_to_string(out.join("um-ptx/twice.ptx")).unwrap();
        assert!(
            code.contains(&format!("pub static PTX: &str = {ptx:?};")),
            "{code}"
        );
        generated.push(ptx.contains(".f64"));
    }
    assert_eq!(generated, [true, false]);
    let _ = std::fs::remove_dir_all(&root);
}
