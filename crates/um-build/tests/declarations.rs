//! Declarations um-build reads without nvcc, in forms chosen to mislead it: each either reads the
//! declaration correctly (the launcher's mutability and types follow what the kernel may do)
//! or refuses it clearly. The forms that need the compiler's view (macros, `#if 0`, struct
//! attributes) are in `declarations_nvcc.rs`.
#![allow(clippy::expect_used, clippy::unwrap_used)]

/// A PTX text with one `.entry name` of the given parameter types (`.u64` for a pointer,
/// `len32`/`len64` for a length: a 4- or 8-byte struct).
fn ptx(name: &str, params: &[&str]) -> String {
    let list: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, t)| match *t {
            "len32" => format!("\t.param .align 4 .b8 {name}_param_{i}[4]"),
            "len64" => format!("\t.param .align 8 .b8 {name}_param_{i}[8]"),
            t => format!("\t.param {t} {name}_param_{i}"),
        })
        .collect();
    format!(
        ".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry {name}(\n{}\n)\n{{ ret; }}\n",
        list.join(",\n")
    )
}

/// The Rust type the safe launcher `k_with` takes for parameter `param`.
fn launcher_param(code: &str, kernel: &str, param: &str) -> String {
    let sig = code
        .lines()
        .find(|l| l.starts_with(&format!("pub fn {kernel}_with<")))
        .unwrap_or_else(|| panic!("no {kernel}_with in\n{code}"));
    let at = sig
        .find(&format!(" {param}: "))
        .unwrap_or_else(|| panic!("no parameter {param} in {sig}"));
    let rest = &sig[at + param.len() + 3..];
    // A buffer's type ends with its storage parameter: `..., StreamOwned<'s, K>, M0>`.
    let end = match rest.find("StreamOwned<'s, K>, M") {
        Some(at) => {
            let storage = at + "StreamOwned<'s, K>, M".len();
            storage + rest[storage..].find('>').unwrap() + 1
        }
        None => rest.find([',', ')']).unwrap(),
    };
    rest[..end].to_owned()
}

const WRITE: &str = "&mut __um::Managed<[f32], __um::StreamOwned<'s, K>, M0>";
const READ: &str = "&__um::Managed<[f32], __um::StreamOwned<'s, K>, M0>";

#[test]
fn const_placements_are_read_as_what_the_kernel_may_write() {
    let k = ptx("k", &[".u64", "len32"]);
    for (decl, want) in [
        // The pointer is const, the floats are not: the kernel may write them.
        ("float * const x", WRITE),
        ("float *const x", WRITE),
        ("float* const __restrict__ x", WRITE),
        ("float * __restrict__ const x", WRITE),
        // The floats are const.
        ("const float * const x", READ),
        ("float const *x", READ),
        ("float const * const x", READ),
        ("const float *__restrict__ x", READ),
        ("const float * __restrict x", READ),
        ("const volatile float *x", READ),
        ("volatile float *x", WRITE),
        // A comment that says const is not const; one that hides a const is a const.
        ("/* const */ float *x", WRITE),
        ("const /* float? */ float *x", READ),
        ("float // const\n *x", WRITE),
    ] {
        let src = format!("#include \"um.cuh\"\nUM_SAFE_KERNEL void k({decl}, um::len32 n) {{}}");
        let code = um_build::generate_for("m", &src, &k).unwrap_or_else(|e| panic!("{decl}: {e}"));
        assert_eq!(launcher_param(&code, "k", "x"), want, "{decl}");
    }
}

#[test]
fn lengths_are_types_and_their_spellings() {
    for (c, ptx_ty, rust) in [
        ("um::len32", "len32", "u32"),
        ("::um::len32", "len32", "u32"),
        ("um :: len64", "len64", "u64"),
        ("const um::len64", "len64", "u64"),
        ("um::ilen32", "len32", "i32"),
        ("um::ilen64", "len64", "i64"),
    ] {
        let src = format!("UM_SAFE_KERNEL void k(float *x, {c} n) {{}}");
        let code =
            um_build::generate_for("m", &src, &ptx("k", &[".u64", ptx_ty])).expect("generates");
        assert!(
            code.contains(&format!(
                "let n: {rust} = __um::codegen::count(KERNEL, \"n\""
            )),
            "{c}: {code}"
        );
    }
    // A plain integer is a value, whatever its name: `x` then has no length.
    for (c, ptx_ty) in [
        ("unsigned int n", ".u32"),
        ("int n", ".u32"),
        ("size_t x_len", ".u64"),
        ("unsigned long long n", ".u64"),
        ("short n", ".u16"),
        ("float n", ".f32"),
    ] {
        let src = format!("UM_SAFE_KERNEL void k(float *x, {c}) {{}}");
        let e = um_build::generate_for("m", &src, &ptx("k", &[".u64", ptx_ty])).expect_err(c);
        assert_eq!(e.kernel_name(), Some("k"), "{c}: {e}");
        assert!(e.message().contains("has no length"), "{c}: {e}");
    }
    // A pointer to a length is no buffer.
    let e = um_build::generate_for(
        "m",
        "UM_SAFE_KERNEL void k(um::len32 *x, um::len32 n) {}",
        &ptx("k", &[".u64", "len32"]),
    )
    .expect_err("pointer to a length");
    assert!(e.message().contains("pointer to a length"), "{e}");
}

#[test]
fn a_struct_named_like_a_rust_primitive_is_refused() {
    // `struct f64 { float a; }` would be generated as `pub struct f64` in the kernel's module,
    // where it shadows the primitive: the launcher of `k(double *x, ...)` took
    // `&mut Managed<[f64]>` of 4-byte structs, and the kernel wrote 8 bytes per element, past
    // the end of the allocation. nvcc compiles this file, and the PTX check passes.
    for (name, elem, ptx_ty) in [
        ("f64", "double", ".u64"),
        ("u32", "unsigned int", ".u64"),
        ("f32", "float", ".u64"),
        ("usize", "float", ".u64"),
    ] {
        let src = format!(
            "struct {name} {{ unsigned char a; }};\nUM_SAFE_KERNEL void k({elem} *x, um::len32 n) {{}}"
        );
        let e = um_build::generate_for("m", &src, &ptx("k", &[ptx_ty, "len32"])).expect_err(name);
        assert_eq!(e.line(), Some(1), "{e}");
        assert!(e.message().contains("Rust primitive"), "{e}");
    }
}

#[test]
fn names_that_are_rust_keywords_or_the_launchers_own_are_renamed() {
    let src = "UM_SAFE_KERNEL void type(float *stream, const float *config, float threads, \
               float KERNEL, um::len32 in) {}";
    let code = um_build::generate_for(
        "fn",
        src,
        &ptx("type", &[".u64", ".u64", ".f32", ".f32", "len32"]),
    )
    .expect("generates");
    // Keywords are raw identifiers; the launchers' own names get a `_`.
    assert!(code.contains("pub mod r#fn {"), "{code}");
    assert!(
        code.contains("pub fn r#type<'s, K: __um::StreamKind, M0: __um::Storage, M1: __um::Storage>(stream: &__um::Stream<'s, K>, stream_: &mut"),
        "{code}"
    );
    assert!(code.contains("pub fn type_with<"), "{code}");
    assert!(code.contains("config_: &__um::Managed<[f32]"), "{code}");
    assert!(code.contains("threads_: f32, KERNEL_: f32)"), "{code}");
    // The launch passes the renamed values in declaration order, the length last.
    assert!(
        code.contains("(stream_, config_, threads_, KERNEL_, r#in, )"),
        "{code}"
    );
    // The length lookup names the C parameter, the Rust value its renamed form.
    assert!(
        code.contains("let r#in: u32 = __um::codegen::count(KERNEL, \"in\", __um::codegen::common_len(KERNEL, &[(\"stream\", stream_.len()), (\"config\", config_.len())])"),
        "{code}"
    );
}

#[test]
fn names_rust_cannot_tell_apart_or_spell_are_refused() {
    let k = ptx("k", &[".u64", ".f32", ".f32", "len32"]);
    for (src, says) in [
        // `stream` becomes `stream_`, which another parameter already is.
        (
            "UM_SAFE_KERNEL void k(float *stream, float stream_, float b, um::len32 n) {}",
            "would both be `stream_`",
        ),
        // Names Rust cannot spell, even raw.
        (
            "UM_SAFE_KERNEL void k(float *self, float a, float b, um::len32 n) {}",
            "Rust cannot spell",
        ),
        (
            "UM_SAFE_KERNEL void k(float *_, float a, float b, um::len32 n) {}",
            "Rust cannot spell",
        ),
        ("struct Self { float a; };", "Rust cannot spell"),
        ("struct P { float crate; };", "Rust cannot spell"),
        // The safe kernel `k` has a launcher `k_with`: a kernel of that name would meet it.
        (
            "UM_SAFE_KERNEL void k(float *x, float a, float b, um::len32 n) {}\n\
             extern \"C\" __global__ void k_with(float *x, float a, float b, um::len32 n) {}",
            "would both be `k_with`",
        ),
    ] {
        let mut ptx_text = k.clone();
        ptx_text.push_str(&ptx("k_with", &[".u64", ".f32", ".f32", "len32"]));
        let e = um_build::generate_for("m", src, &ptx_text).expect_err(src);
        assert!(e.to_string().contains(says), "{src}: {e}");
    }
}

#[test]
fn parameters_named_like_the_preludes_variants_are_renamed() {
    // Found by the differential test: `None` as a parameter is the pattern `Option::None`
    // (E0308), `Some`/`Ok`/`Err` cannot be shadowed by a parameter (E0530).
    let code = um_build::generate_for(
        "m",
        "UM_SAFE_KERNEL void k(float *x, float None, float Some, float Ok, um::len32 Err) {}",
        &ptx("k", &[".u64", ".f32", ".f32", ".f32", "len32"]),
    )
    .expect("generates");
    assert!(code.contains("None_: f32, Some_: f32, Ok_: f32)"), "{code}");
    assert!(code.contains("let Err_: u32 = "), "{code}");
}

#[test]
fn every_generation_error_names_its_file_and_line() {
    // Found by the differential test: errors about structs and launchers named no file.
    for (src, line) in [
        (
            "struct self { float a; };\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}",
            1,
        ),
        (
            "UM_SAFE_KERNEL void k(float *x, um::len32 n) {}\nextern \"C\" __global__ void k_with(float *x, um::len32 n) {}",
            2,
        ),
    ] {
        let mut k = ptx("k", &[".u64", "len32"]);
        k.push_str(&ptx("k_with", &[".u64", "len32"]));
        let e = um_build::generate_for("m", src, &k).expect_err(src);
        assert!(e.file().is_some(), "{src}: {e}");
        assert_eq!(e.line(), Some(line), "{src}: {e}");
    }
}

#[test]
fn structs_named_like_the_launchers_types_or_generics_are_named_by_path() {
    // The launchers name um's types by full path and the file's structs as `self::Name`: a
    // struct called `Storage`, `K` or `M0` shadows nothing (they were Rust compile errors:
    // a missing import, and a generic parameter standing for the struct).
    for name in [
        "Storage",
        "K",
        "M0",
        "Managed",
        "Linear",
        "StreamOwned",
        "Result",
    ] {
        let src = format!(
            "struct {name} {{ float a; }};\nUM_SAFE_KERNEL void k(const {name} *x, {name} v, um::len32 n) {{}}"
        );
        let code = um_build::generate_for(
            "m",
            &src,
            &ptx("k", &[".u64", ".align 4 .b8", "len32"])
                .replace(".align 4 .b8 k_param_1", ".align 4 .b8 k_param_1[4]"),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            code.contains(&format!(
                "x: &__um::Managed<[self::{name}], __um::StreamOwned<'s, K>, M0>, v: self::{name})"
            )),
            "{name}: {code}"
        );
        assert!(
            !code.contains("use super::__um::{"),
            "nothing is imported by name"
        );
    }
}

#[test]
fn file_names_that_are_not_identifiers_become_modules() {
    let k = ptx("k", &[".u64", "len32"]);
    let src = "UM_SAFE_KERNEL void k(float *x, um::len32 n) {}";
    for (file, module) in [
        ("9lives", "k_9lives"),
        ("my-kernels.v2", "my_kernels_v2"),
        ("", "k_"),
        ("_", "k__"),
        ("--", "k___"),
        ("self", "k_self"),
        ("crate", "k_crate"),
        ("std", "std_"),
        ("core", "core_"),
        ("__um", "__um_"),
        ("type", "r#type"),
        ("Ünïcode", "_n_code"),
    ] {
        let code = um_build::generate_for(file, src, &k).expect(file);
        assert!(
            code.contains(&format!("pub mod {module} {{")),
            "{file}: {code}"
        );
    }
}

#[test]
fn forms_it_cannot_read_are_refused_not_guessed() {
    let k2 = ptx("k", &[".u64", "len32"]);
    for (src, says) in [
        // A default argument.
        (
            "UM_SAFE_KERNEL void k(float *x, um::len32 n = 4) {}",
            "default values",
        ),
        // A prototype and a definition (even with the same const-ness: it reads each once).
        (
            "UM_SAFE_KERNEL void k(const float *x, um::len32 n);\nUM_SAFE_KERNEL void k(const float *x, um::len32 n) {}",
            "declared twice",
        ),
        // An array parameter (a pointer in C, but no place for const to be read).
        ("UM_SAFE_KERNEL void k(float x[], um::len32 n) {}", "arrays"),
        // A template.
        (
            "template <class T> UM_SAFE_KERNEL void k(T *x, um::len32 n) {}",
            "not a form",
        ),
        // `extern \"C\" { ... }` block.
        (
            "extern \"C\" { __global__ void k(float *x, unsigned int n) {} }",
            "not a form",
        ),
        // A typedef'd element type is not guessed.
        (
            "typedef float real;\nUM_SAFE_KERNEL void k(real *x, um::len32 n) {}",
            "`real` is not supported",
        ),
        // A macro in the declaration is not expanded.
        (
            "#define RO const\nUM_SAFE_KERNEL void k(RO float *x, um::len32 n) {}",
            "not supported",
        ),
        // A struct with an attribute before its name.
        (
            "struct __align__(16) P { float a; };\nUM_SAFE_KERNEL void k(P *x, um::len32 n) {}",
            "`P` is not supported",
        ),
        // Bit fields, pointers and nested structs in a struct.
        ("struct P { unsigned int a : 4; };", "struct `P`"),
        ("struct P { float a, *b; };", "struct `P`"),
        ("struct P { struct Q { float a; } q; };", "struct `P`"),
        ("struct P { float a[2][2]; };", "struct `P`"),
        ("#define N 4\nstruct P { float a[N]; };", "array length"),
    ] {
        let e = um_build::generate_for("m", src, &k2).expect_err(src);
        assert!(e.to_string().contains(says), "{src}: {e}");
    }
}

#[test]
fn the_default_launch_covers_the_longest_buffer_and_lengths_come_from_buffers() {
    // Buffers of different lengths: x has its own length, y and z share n.
    let src = "UM_SAFE_KERNEL void k(const float *x, um::ilen32 x_len, float *y, const float *z, um::len32 n) {}";
    let code = um_build::generate_for(
        "m",
        src,
        &ptx("k", &[".u64", "len32", ".u64", ".u64", "len32"]),
    )
    .expect("generates");
    assert!(
        code.contains("[x.len(), y.len(), z.len()].into_iter().max()"),
        "{code}"
    );
    assert!(
        code.contains("common_len(KERNEL, &[(\"y\", y.len()), (\"z\", z.len())])"),
        "{code}"
    );
    assert!(code.contains("let x_len: i32 = __um::codegen::count(KERNEL, \"x_len\", __um::codegen::common_len(KERNEL, &[(\"x\", x.len())])?, threads)?;"), "{code}");
    // Neither length is a launcher argument, and the launch passes each at its position.
    let sig = code
        .lines()
        .find(|l| l.starts_with("pub fn k_with<"))
        .unwrap();
    assert!(!sig.contains(" n:") && !sig.contains("x_len:"), "{sig}");
    assert!(code.contains("(x, x_len, y, z, n, )"), "{code}");
}

#[test]
fn a_struct_with_a_long_array_still_compiles() {
    // `[f32; 64]: Default` does not hold, so `#[derive(Default)]` broke the user's build.
    let k = ptx("k", &[".u64", "len32"]);
    let code = um_build::generate_for(
        "m",
        "struct Big { float w[64]; };\nstruct Small { float w[32]; };\nUM_SAFE_KERNEL void k(const Big *b, um::len32 n) {}",
        &k,
    )
    .expect("generates");
    let derive_before = |name: &str| {
        let at = code.find(&format!("pub struct {name} ")).unwrap();
        code[..at]
            .rfind("#[derive(")
            .map(|d| code[d..at].lines().next().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(
        derive_before("Big"),
        "#[derive(Debug, Clone, Copy, PartialEq)]"
    );
    assert_eq!(
        derive_before("Small"),
        "#[derive(Debug, Clone, Copy, PartialEq, Default)]"
    );
}
