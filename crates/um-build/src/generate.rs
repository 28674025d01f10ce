//! The Rust that `um::include_kernels!()` includes: per `.cu` file, a module with its PTX, its
//! by-value structs in C layout, and a typed launcher per kernel.
//!
//! The generated code names `um-core` only as `super::__um` (the alias the macro defines), so
//! it works in any crate, whatever that crate calls `um`.

use std::fmt::Write as _;

use crate::contract::{self, Count};
use crate::error::Result;
use crate::source::{Elem, Kernel, Source, Struct, Type};

/// One compiled `.cu` file.
pub(crate) struct Unit<'a> {
    /// The module the launchers go in (the file stem, made an identifier).
    pub(crate) module: String,
    /// The file as the user names it (for documentation).
    pub(crate) shown_path: String,
    /// The PTX's file name inside `$OUT_DIR`.
    pub(crate) ptx_file: String,
    pub(crate) source: &'a Source,
}

/// A Rust identifier for a C name: keywords and the launchers' own names get a `_`.
pub(crate) fn rust_name(c: &str) -> String {
    const TAKEN: &[&str] = &[
        "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else",
        "enum", "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match",
        "mod", "move", "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super",
        "trait", "true", "type", "unsafe", "use", "where", "while", "yield", "try", "abstract",
        "become", "do", "final", "macro", "override", "priv", "typeof", "unsized", "virtual",
        "stream", "config", "threads", "longest", "PTX", "KERNEL", "__um",
    ];
    if TAKEN.contains(&c) {
        format!("{c}_")
    } else {
        c.to_owned()
    }
}

/// A module name for a file stem.
pub(crate) fn module_name(stem: &str) -> String {
    let mut m: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if m.is_empty() || m.starts_with(|c: char| c.is_ascii_digit()) {
        m.insert_str(0, "k_");
    }
    rust_name(&m)
}

fn elem_rust(e: &Elem) -> String {
    match e {
        Elem::Scalar(s) => s.rust().to_owned(),
        Elem::Struct(name) => rust_name(name),
    }
}

/// The Rust parameter for a C parameter, or `None` for a count the launcher fills in.
fn rust_param(k: &Kernel, p: &crate::source::Param, counts: &[Count]) -> Option<String> {
    let r = rust_name(&p.name);
    match &p.ty {
        _ if counts.iter().any(|c| c.name == p.name) => None,
        Type::Pointer { elem, constant } => Some(format!(
            "{r}: &{}Managed<[{}], StreamOwned<'s, K>, M{}>",
            if *constant { "" } else { "mut " },
            elem_rust(elem),
            storage_index(k, &p.name)
        )),
        Type::Scalar(s) => Some(format!("{r}: {}", s.rust())),
        Type::Struct(name) => Some(format!("{r}: {}", rust_name(name))),
    }
}

/// The position of buffer `name` among the kernel's buffers: its storage parameter is `M{i}`.
fn storage_index(k: &Kernel, name: &str) -> usize {
    k.params
        .iter()
        .filter(|p| matches!(p.ty, Type::Pointer { .. }))
        .position(|p| p.name == name)
        .unwrap_or(0)
}

/// The generic parameters of a launcher: the stream's brand and kind, and a storage (unified or
/// mirrored) per buffer, so that storages mix freely in one launch.
fn generics(k: &Kernel) -> String {
    let buffers = k
        .params
        .iter()
        .filter(|p| matches!(p.ty, Type::Pointer { .. }))
        .count();
    let storages: String = (0..buffers).map(|i| format!(", M{i}: Storage")).collect();
    format!("<'s, K: StreamKind{storages}>")
}

/// The value the launch passes for a parameter.
fn launch_value(p: &crate::source::Param) -> String {
    let r = rust_name(&p.name);
    match p.ty {
        Type::Struct(_) => format!("__um::ByValue({r})"),
        _ => r,
    }
}

fn names(k: &Kernel, want: impl Fn(&Type) -> bool) -> Vec<&str> {
    k.params
        .iter()
        .filter(|p| want(&p.ty))
        .map(|p| p.name.as_str())
        .collect()
}

fn shown(list: &[&str]) -> String {
    if list.is_empty() {
        "nothing".to_owned()
    } else {
        list.iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Rust's primitive types. A generated struct of one of these names would shadow the primitive
/// in its module, so that `f64` in a launcher (a `double *` buffer, a `double` value) meant the
/// struct: a `Managed<[f64]>` of 4-byte elements for a kernel that indexes 8-byte ones.
const PRIMITIVES: &[&str] = &[
    "bool", "char", "str", "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
    "u32", "u64", "u128", "usize",
];

/// Names the generated module imports from `um-core`: a struct may not take one.
const IMPORTED: &[&str] = &[
    "LaunchConfig",
    "Linear",
    "Managed",
    "Result",
    "Stream",
    "StreamKind",
    "StreamOwned",
];

fn write_struct(out: &mut String, s: &Struct, file: &str) {
    let (size, align) = s.layout();
    let name = rust_name(&s.name);
    let fields: String = s
        .fields
        .iter()
        .map(|f| {
            let ty = match f.array {
                Some(n) => format!("[{}; {n}]", f.ty.rust()),
                None => f.ty.rust().to_owned(),
            };
            format!(
                "    /// `{}` of the C struct.\n    pub {}: {ty},\n",
                f.name,
                rust_name(&f.name)
            )
        })
        .collect();
    let _ = write!(
        out,
        "/// `struct {c}` of `{file}` (line {line}), in the same C layout: {size} bytes, aligned to\n\
         /// {align}. um-build checked both against the kernel's PTX parameter.\n\
         #[repr(C)]\n#[derive(Debug, Clone, Copy, PartialEq{default})]\n\
         pub struct {name} {{\n{fields}}}\n\
         // SAFETY: plain numbers in C layout, no pointers and no invalid bit patterns: the bytes\n\
         // are copied to the kernel as they are.\n\
         unsafe impl __um::DeviceCopy for {name} {{}}\n\n",
        c = s.name,
        line = s.line,
        // The standard library implements `Default` for arrays of at most 32 elements.
        default = if s.fields.iter().all(|f| f.array.unwrap_or(0) <= 32) {
            ", Default"
        } else {
            ""
        },
    );
}

fn write_safe(out: &mut String, k: &Kernel, counts: &[Count]) {
    let name = rust_name(&k.name);
    let params: Vec<String> = k
        .params
        .iter()
        .filter_map(|p| rust_param(k, p, counts))
        .collect();
    let args: String = params
        .iter()
        .map(|p| format!(", {}", p.split(':').next().unwrap_or_default()))
        .collect();
    let params: String = params.iter().map(|p| format!(", {p}")).collect();
    let buffers = names(k, |t| matches!(t, Type::Pointer { .. }));
    let reads = names(k, |t| matches!(t, Type::Pointer { constant: true, .. }));
    let writes = names(k, |t| {
        matches!(
            t,
            Type::Pointer {
                constant: false,
                ..
            }
        )
    });
    let default_config = if buffers.is_empty() {
        "__um::Linear::new(1, 1)?".to_owned()
    } else {
        let lens: Vec<String> = buffers
            .iter()
            .map(|b| format!("{}.len()", rust_name(b)))
            .collect();
        format!(
            "__um::Linear::for_len(stream, [{}].into_iter().max().unwrap_or(0))",
            lens.join(", ")
        )
    };
    let count_doc: String = counts
        .iter()
        .map(|c| {
            let b: Vec<&str> = c.buffers.iter().map(String::as_str).collect();
            format!(" `{}` = the length of {}.", c.name, shown(&b))
        })
        .collect();
    let count_lets: String = counts
        .iter()
        .map(|c| {
            let lens: Vec<String> = c
                .buffers
                .iter()
                .map(|b| format!("({b:?}, {}.len())", rust_name(b)))
                .collect();
            format!(
                "    let {}: {} = __um::codegen::count(KERNEL, {:?}, __um::codegen::common_len(KERNEL, &[{}])?, threads)?;\n",
                c.name,
                c.ty.rust(),
                c.name,
                lens.join(", ")
            )
        })
        .collect();
    let tuple: String = k
        .params
        .iter()
        .map(|p| format!("{}, ", launch_value(p)))
        .collect();
    let threads_let = if counts.is_empty() {
        ""
    } else {
        "    let threads = config.total_threads();\n"
    };
    let _ = write!(
        out,
        "/// Launches `{decl}` on `stream`, with [`Linear::for_len`] of\n\
         /// its longest buffer.\n///\n\
         /// Reads {reads}; writes {writes}.{count_doc} See [`{name}_with`] for the errors.\n\
         #[allow(clippy::too_many_arguments)]\n\
         pub fn {name}{generics}(stream: &Stream<'s, K>{params}) -> Result<()> {{\n\
         \x20   let config = {default_config};\n\
         \x20   {name}_with(stream, config{args})\n}}\n\n\
         /// [`{name}`] with an explicit one-dimensional launch. `{kname}` keeps the contract of\n\
         /// `UM_SAFE_KERNEL` (docs/kernels.md) under every [`Linear`] launch, so\n\
         /// any `config` is safe.\n///\n\
         /// Errors: [`LengthMismatch`](__um::Error::LengthMismatch) if buffers that share a count\n\
         /// differ in length; [`LengthTooLarge`](__um::Error::LengthTooLarge) or\n\
         /// [`IndexOverflow`](__um::Error::IndexOverflow) if a length, or a length plus the\n\
         /// grid's threads, does not fit a count's type; the driver's refusal as\n\
         /// [`Driver`](__um::Error::Driver).\n\
         #[allow(clippy::too_many_arguments)]\n\
         pub fn {name}_with{generics}(stream: &Stream<'s, K>, config: Linear{params}) -> Result<()> {{\n\
         \x20   const KERNEL: &str = {kname:?};\n\
         {threads_let}{count_lets}\
         \x20   // SAFETY: the tuple follows the declaration, which um-build checked against the PTX\n\
         \x20   // `.entry` (count, widths, pointers, struct layouts); `const` buffers are `&`, the others\n\
         \x20   // `&mut`, all owned by `stream` (brand 's); each count is its buffers' length, and with\n\
         \x20   // the grid's threads it fits the count's type; `config` is one-dimensional. The author\n\
         \x20   // of the `UM_SAFE_KERNEL` body promised the rest (docs/kernels.md).\n\
         \x20   unsafe {{ stream.launch_ptx(PTX, KERNEL, config.into(), ({tuple})) }}\n}}\n\n",
        decl = k.decl,
        generics = generics(k),
        kname = k.name,
        reads = shown(&reads),
        writes = shown(&writes),
    );
}

fn write_unsafe(out: &mut String, k: &Kernel) {
    let name = rust_name(&k.name);
    let params: String = k
        .params
        .iter()
        .filter_map(|p| rust_param(k, p, &[]))
        .map(|p| format!(", {p}"))
        .collect();
    let tuple: String = k
        .params
        .iter()
        .map(|p| format!("{}, ", launch_value(p)))
        .collect();
    let reads = names(k, |t| matches!(t, Type::Pointer { constant: true, .. }));
    let writes = names(k, |t| {
        matches!(
            t,
            Type::Pointer {
                constant: false,
                ..
            }
        )
    });
    let _ = write!(
        out,
        "/// Launches `{decl}` on `stream` with `config`.\n///\n\
         /// Takes {reads} to read and {writes} to write, all owned by `stream`; the compiler\n\
         /// checks that, and um-build checked the declaration against the PTX.\n///\n\
         /// # Safety\n\
         /// `{kname}` is not declared `UM_SAFE_KERNEL`, so nothing vouches for its body. Under\n\
         /// `config`, and with these arguments, the kernel must (docs/kernels.md, \"unsafe\n\
         /// launchers\"):\n\
         /// * read and write each buffer only at indices below its length;\n\
         /// * write no `&` buffer, and write each element of a `&mut` buffer from at most one\n\
         ///   thread, or atomically: no data race, whatever the grid and block;\n\
         /// * touch no memory other than these buffers, its own local memory, and its shared\n\
         ///   memory within the static size plus `config.shared_mem_bytes`;\n\
         /// * reach every `__syncthreads()` from all threads of a block, or from none;\n\
         /// * have no other undefined behaviour for these scalar values.\n\
         #[allow(clippy::too_many_arguments)]\n\
         pub unsafe fn {name}{generics}(stream: &Stream<'s, K>, config: LaunchConfig{params}) -> Result<()> {{\n\
         \x20   // SAFETY: the tuple follows the declaration, which um-build checked against the PTX\n\
         \x20   // `.entry`; `const` buffers are `&`, the others `&mut`, all owned by `stream`; the\n\
         \x20   // caller guarantees what the body does (# Safety).\n\
         \x20   unsafe {{ stream.launch_ptx(PTX, {kname:?}, config, ({tuple})) }}\n}}\n\n",
        decl = k.decl,
        generics = generics(k),
        kname = k.name,
        reads = shown(&reads),
        writes = shown(&writes),
    );
}

/// The whole generated file.
pub(crate) fn generate(units: &[Unit<'_>], arch: &str) -> Result<String> {
    let mut out = String::from(
        "// Generated by um-build: do not edit. Included by `um::include_kernels!()`.\n\n",
    );
    for u in units {
        let _ = write!(
            out,
            "/// Kernels of `{path}`: its PTX, its by-value structs, and a launcher per kernel.\n\
             #[allow(unused_imports, clippy::all)]\n\
             pub mod {module} {{\n\
             use super::__um::{{self, LaunchConfig, Linear, Managed, Result, Storage, Stream, StreamKind, StreamOwned}};\n\n\
             /// The PTX of `{path}`, built for `{arch}`. A `static`: one address for every user,\n\
             /// which is what the per-context module cache looks up first.\n\
             pub static PTX: &str = include_str!(concat!(env!(\"OUT_DIR\"), \"/{ptx}\"));\n\n",
            path = u.shown_path,
            module = u.module,
            ptx = u.ptx_file,
        );
        for s in &u.source.structs {
            if IMPORTED.contains(&s.name.as_str()) {
                return Err(crate::error::Error::new(format!(
                    "struct `{}` has the name of a type of um's that the launchers use",
                    s.name
                ))
                .at(s.line)
                .help("rename the struct"));
            }
            if PRIMITIVES.contains(&s.name.as_str()) {
                return Err(crate::error::Error::new(format!(
                    "struct `{}` has the name of a Rust primitive type: in the generated module \
                     it would stand for every `{}` of the launchers",
                    s.name, s.name
                ))
                .at(s.line)
                .help("rename the struct"));
            }
            write_struct(&mut out, s, &u.shown_path);
        }
        for k in &u.source.kernels {
            if k.safe {
                let counts = contract::counts(k)?;
                write_safe(&mut out, k, &counts);
            } else {
                contract::check_any(k)?;
                write_unsafe(&mut out, k);
            }
        }
        out.push_str("}\n\n");
    }
    let all: String = units
        .iter()
        .map(|u| format!("    ({:?}, {}::PTX),\n", u.module, u.module))
        .collect();
    let _ = write!(
        out,
        "/// Every module's PTX, as `(module, PTX)`.\npub static ALL_PTX: &[(&str, &str)] = &[\n{all}];\n\n\
         /// The virtual architecture the PTX was built for.\npub const PTX_ARCH: &str = {arch:?};\n"
    );
    Ok(out)
}
