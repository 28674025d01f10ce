//! Red-team attacks on um-build's reading of declarations, without nvcc: each either reads the
//! declaration correctly (the launcher's mutability and types follow what the kernel may do)
//! or refuses it clearly. The attacks that need the compiler's view (macros, `#if 0`, struct
//! attributes) are in `redteam_nvcc.rs`.
#![allow(clippy::expect_used, clippy::unwrap_used)]

/// A PTX text with one `.entry name` of the given parameter types (`u64` for a pointer).
fn ptx(name: &str, params: &[&str]) -> String {
    let list: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, t)| format!("\t.param {t} {name}_param_{i}"))
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

const WRITE: &str = "&mut Managed<[f32], StreamOwned<'s, K>, M0>";
const READ: &str = "&Managed<[f32], StreamOwned<'s, K>, M0>";

#[test]
fn const_placements_are_read_as_what_the_kernel_may_write() {
    let k = ptx("k", &[".u64", ".u32"]);
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
        let src =
            format!("#include \"um.cuh\"\nUM_SAFE_KERNEL void k({decl}, unsigned int n) {{}}");
        let code = um_build::generate_for("m", &src, &k).unwrap_or_else(|e| panic!("{decl}: {e}"));
        assert_eq!(launcher_param(&code, "k", "x"), want, "{decl}");
    }
}

#[test]
fn count_types_and_their_spellings() {
    for (c, ptx_ty, rust) in [
        ("unsigned", ".u32", "u32"),
        ("unsigned int", ".u32", "u32"),
        ("int", ".u32", "i32"),
        ("signed", ".u32", "i32"),
        ("long long", ".u64", "i64"),
        ("size_t", ".u64", "u64"),
        ("uint64_t", ".u64", "u64"),
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
    // Counts that cannot carry a length, and types it does not know, are refused.
    for c in [
        "short",
        "unsigned char",
        "long",
        "unsigned long",
        "bool",
        "float",
    ] {
        let src = format!("UM_SAFE_KERNEL void k(float *x, {c} n) {{}}");
        let e = um_build::generate_for("m", &src, &ptx("k", &[".u64", ".u32"])).expect_err(c);
        assert!(e.kernel_name() == Some("k"), "{c}: {e}");
    }
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
            "struct {name} {{ unsigned char a; }};\nUM_SAFE_KERNEL void k({elem} *x, unsigned int n) {{}}"
        );
        let e = um_build::generate_for("m", &src, &ptx("k", &[ptx_ty, ".u32"])).expect_err(name);
        assert_eq!(e.line(), Some(1), "{e}");
        assert!(e.message().contains("Rust primitive"), "{e}");
    }
}

#[test]
fn names_that_are_rust_keywords_or_the_launchers_own_are_renamed() {
    let src = "UM_SAFE_KERNEL void type(float *stream, const float *config, float threads, \
               float KERNEL, unsigned int n) {}";
    let code = um_build::generate_for(
        "fn",
        src,
        &ptx("type", &[".u64", ".u64", ".f32", ".f32", ".u32"]),
    )
    .expect("generates");
    assert!(code.contains("pub mod fn_ {"), "{code}");
    assert!(
        code.contains("pub fn type_<'s, K: StreamKind, M0: Storage, M1: Storage>(stream: &Stream<'s, K>, stream_: &mut"),
        "{code}"
    );
    assert!(code.contains("config_: &Managed<[f32]"), "{code}");
    assert!(code.contains("threads_: f32, KERNEL_: f32)"), "{code}");
    // The launch passes the renamed values in declaration order, the count last.
    assert!(
        code.contains("(stream_, config_, threads_, KERNEL_, n, )"),
        "{code}"
    );
    // The count lookup names the C parameter, the Rust value its renamed form.
    assert!(
        code.contains("(\"stream\", stream_.len()), (\"config\", config_.len())"),
        "{code}"
    );
}

#[test]
fn file_names_that_are_not_identifiers_become_modules() {
    let k = ptx("k", &[".u64", ".u32"]);
    let src = "UM_SAFE_KERNEL void k(float *x, unsigned int n) {}";
    for (file, module) in [
        ("9lives", "k_9lives"),
        ("my-kernels.v2", "my_kernels_v2"),
        ("", "k_"),
        ("self", "self_"),
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
    let k2 = ptx("k", &[".u64", ".u32"]);
    for (src, says) in [
        // A default argument.
        (
            "UM_SAFE_KERNEL void k(float *x, unsigned int n = 4) {}",
            "default values",
        ),
        // A prototype and a definition (even with the same const-ness: it reads each once).
        (
            "UM_SAFE_KERNEL void k(const float *x, unsigned int n);\nUM_SAFE_KERNEL void k(const float *x, unsigned int n) {}",
            "declared twice",
        ),
        // An array parameter (a pointer in C, but no place for const to be read).
        (
            "UM_SAFE_KERNEL void k(float x[], unsigned int n) {}",
            "arrays",
        ),
        // A template.
        (
            "template <class T> UM_SAFE_KERNEL void k(T *x, unsigned int n) {}",
            "not a form",
        ),
        // `extern \"C\" { ... }` block.
        (
            "extern \"C\" { __global__ void k(float *x, unsigned int n) {} }",
            "not a form",
        ),
        // A typedef'd element type is not guessed.
        (
            "typedef float real;\nUM_SAFE_KERNEL void k(real *x, unsigned int n) {}",
            "`real` is not supported",
        ),
        // A macro in the declaration is not expanded.
        (
            "#define RO const\nUM_SAFE_KERNEL void k(RO float *x, unsigned int n) {}",
            "not supported",
        ),
        // A struct with an attribute before its name.
        (
            "struct __align__(16) P { float a; };\nUM_SAFE_KERNEL void k(P *x, unsigned int n) {}",
            "`P` is not supported",
        ),
        // Bit fields, pointers and nested structs in a struct.
        ("struct P { unsigned int a : 4; };", "struct `P`"),
        ("struct P { float a, *b; };", "struct `P`"),
        ("struct P { struct Q { float a; } q; };", "struct `P`"),
        ("struct P { float a[2][2]; };", "struct `P`"),
        ("#define N 4\nstruct P { float a[N]; };", "array length"),
        // A by-value struct or buffer element named like one of um's types.
        ("struct Linear { float a; };", "`Linear`"),
        ("struct StreamOwned { float a; };", "`StreamOwned`"),
    ] {
        let e = um_build::generate_for("m", src, &k2).expect_err(src);
        assert!(e.to_string().contains(says), "{src}: {e}");
    }
}

#[test]
fn the_default_launch_covers_the_longest_buffer_and_counts_come_from_buffers() {
    // Buffers of different lengths: x has its own count, y and z share n.
    let src = "UM_SAFE_KERNEL void k(const float *x, float *y, const float *z, unsigned int n, int x_len) {}";
    let code = um_build::generate_for(
        "m",
        src,
        &ptx("k", &[".u64", ".u64", ".u64", ".u32", ".u32"]),
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
    // Neither count is a launcher argument.
    let sig = code
        .lines()
        .find(|l| l.starts_with("pub fn k_with<"))
        .unwrap();
    assert!(!sig.contains(" n:") && !sig.contains("x_len:"), "{sig}");
}

#[test]
fn a_struct_with_a_long_array_still_compiles() {
    // `[f32; 64]: Default` does not hold, so `#[derive(Default)]` broke the user's build.
    let k = ptx("k", &[".u64", ".u32"]);
    let code = um_build::generate_for(
        "m",
        "struct Big { float w[64]; };\nstruct Small { float w[32]; };\nUM_SAFE_KERNEL void k(const Big *b, unsigned int n) {}",
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
