//! The Rust that `um::include_kernels!()` includes: per `.cu` file, a module with its PTX, its
//! by-value structs in C layout, and a typed launcher per kernel.
//!
//! The generated code must mean the same wherever it is included and whatever the `.cu` file
//! names things, so it takes no name from its surroundings that a C name could shadow:
//! * `um-core` is reached only as `super::__um` (the alias the macro defines), every item of
//!   it by its full path (`__um::Managed`), never imported: a struct named `Storage` or
//!   `Managed` then shadows nothing;
//! * the file's own structs are named `self::Name`, so the launchers' generic parameters (`K`,
//!   `M0`, ...) never stand for a struct of the same name, nor a struct for them;
//! * the module's own items are named `self::PTX`, `self::k_with`, so no parameter shadows them;
//! * macros are `::core::include_str!` and friends, so no `macro_rules!` of the user's does;
//! * the PTX is a string literal of the generated file, the very text um-build checked, not a
//!   path: no file read when `rustc` compiles it can stand in for it (with `include_str!` of
//!   `$OUT_DIR/um-ptx/<m>.ptx`, two kernel folders built into two output folders of one crate
//!   embedded each other's PTX; with a path beside the generated file, a build that failed
//!   after writing the PTX left it under an earlier build's launchers);
//! * every C name becomes a Rust identifier one to one ([`rust_ident`]): Rust keywords become
//!   raw identifiers (`r#type`), the launchers' own parameter names get a `_`, and two C names
//!   that would still meet are refused, as are names Rust cannot spell at all (`self`, `_`);
//! * a file whose module would shadow a crate (`std.cu`) or cannot be a module (`_.cu`) gets
//!   another module name.

use std::fmt::Write as _;

use crate::contract::{self, Count};
use crate::error::{Error, Result};
use crate::source::{Elem, Kernel, Source, Struct, Type};

/// One compiled `.cu` file.
pub(crate) struct Unit<'a> {
    /// The file, for errors.
    pub(crate) file: std::path::PathBuf,
    /// The module the launchers go in, as Rust spells it (`r#type` for `type.cu`).
    pub(crate) module: String,
    /// The file as the user names it (for documentation).
    pub(crate) shown_path: String,
    /// The PTX um-build checked, which the module embeds as it is.
    pub(crate) ptx: &'a str,
    pub(crate) source: &'a Source,
}

/// Rust's keywords, strict and reserved (edition 2024): a C name among them is written as a
/// raw identifier.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref",
    "return", "static", "struct", "trait", "true", "type", "unsafe", "use", "where", "while",
    "abstract", "become", "box", "do", "final", "gen", "macro", "override", "priv", "try",
    "typeof", "unsized", "virtual", "yield",
];

/// Names Rust cannot spell even as raw identifiers.
const UNSPELLABLE: &[&str] = &["self", "Self", "super", "crate", "_"];

/// Names a C name must not take as it is, and gets a `_`: the launchers' own parameters and
/// locals, and the prelude's variants (`None`, `Some`, `Ok`, `Err`), which a parameter or
/// `let` would match as a pattern rather than bind (E0308, E0530: found by the differential
/// test).
const LAUNCHER_OWN: &[&str] = &[
    "stream", "config", "threads", "KERNEL", "PTX", "__um", "None", "Some", "Ok", "Err",
];

/// The Rust identifier of a C name, one to one: a keyword becomes `r#name`, a name the
/// launchers use themselves gets a `_`; `self`, `Self`, `super`, `crate` and `_` are refused.
/// Callers check that no two C names of one scope meet ([`distinct`]).
pub(crate) fn rust_ident(c: &str, what: &str) -> Result<String> {
    if UNSPELLABLE.contains(&c) {
        return Err(
            Error::new(format!("{what} `{c}` has a name Rust cannot spell")).help(format!(
                "rename it: `{c}` is a Rust path keyword, which even a raw identifier cannot name"
            )),
        );
    }
    Ok(if KEYWORDS.contains(&c) {
        format!("r#{c}")
    } else if LAUNCHER_OWN.contains(&c) {
        format!("{c}_")
    } else {
        c.to_owned()
    })
}

/// Refuses two C names of one scope that became the same Rust identifier (`stream` and
/// `stream_`, say).
fn distinct(what: &str, names: &[(&str, String)]) -> Result<()> {
    for (i, (c, r)) in names.iter().enumerate() {
        if let Some((other, _)) = names[..i].iter().find(|(_, s)| s == r) {
            return Err(Error::new(format!(
                "{what} `{other}` and `{c}` would both be `{r}` in Rust"
            ))
            .help("rename one of them"));
        }
    }
    Ok(())
}

/// The crates a module of the include site could shadow (`std::` in the user's code would
/// then be ambiguous).
const CRATES: &[&str] = &["std", "core", "alloc", "proc_macro", "test"];

/// A module name for a file stem: lowercase letters, digits and `_`; `k_` before one that would
/// start with a digit, be empty or be only underscores (`_.cu`) or be `self`, `super` or
/// `crate`; `_` after one that would shadow a crate (`std.cu` is `std_`); a keyword is a raw
/// identifier (`type.cu` is `r#type`).
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
    if m.chars().all(|c| c == '_')
        || m.starts_with(|c: char| c.is_ascii_digit())
        || UNSPELLABLE.contains(&m.as_str())
    {
        m.insert_str(0, "k_");
    }
    if CRATES.contains(&m.as_str()) || m == "__um" {
        m.push('_');
    }
    if KEYWORDS.contains(&m.as_str()) {
        m.insert_str(0, "r#");
    }
    m
}

/// The plain name of a Rust identifier (`type` for `r#type`).
fn plain(ident: &str) -> &str {
    ident.strip_prefix("r#").unwrap_or(ident)
}

/// An intra-doc link to the module's item `ident`: `` [`k`] ``, or for a raw identifier
/// `` [`type`](self::r#type) `` (rustdoc refuses an explicit target that repeats the label).
fn doc_link(ident: &str) -> String {
    if ident.starts_with("r#") {
        format!("[`{}`](self::{ident})", plain(ident))
    } else {
        format!("[`{ident}`]")
    }
}

/// Rust's primitive types. A generated struct of one of these names would shadow the primitive
/// in its module, so that `f64` in a launcher (a `double *` buffer, a `double` value) meant the
/// struct: a `Managed<[f64]>` of 4-byte elements for a kernel that indexes 8-byte ones.
const PRIMITIVES: &[&str] = &[
    "bool", "char", "str", "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
    "u32", "u64", "u128", "usize",
];

/// A kernel's parameters, as Rust names them.
struct Names<'k> {
    kernel: &'k Kernel,
    params: Vec<String>,
    /// The Rust paths of the file's structs, by C name.
    structs: &'k [(String, String)],
}

impl<'k> Names<'k> {
    fn new(kernel: &'k Kernel, structs: &'k [(String, String)]) -> Result<Names<'k>> {
        let params = kernel
            .params
            .iter()
            .map(|p| {
                rust_ident(&p.name, "parameter").map_err(|e| e.kernel(&kernel.name).param(&p.name))
            })
            .collect::<Result<Vec<_>>>()?;
        let pairs: Vec<(&str, String)> = kernel
            .params
            .iter()
            .map(|p| p.name.as_str())
            .zip(params.iter().cloned())
            .collect();
        distinct("parameters", &pairs).map_err(|e| e.kernel(&kernel.name).at(kernel.line))?;
        Ok(Names {
            kernel,
            params,
            structs,
        })
    }

    /// The Rust name of the C parameter `c` (every caller passes one of the kernel's).
    fn of(&self, c: &str) -> String {
        self.kernel
            .params
            .iter()
            .position(|p| p.name == c)
            .and_then(|i| self.params.get(i))
            .map_or_else(|| c.to_owned(), String::clone)
    }

    fn struct_path(&self, c: &str) -> String {
        self.structs
            .iter()
            .find(|(name, _)| name == c)
            .map_or_else(|| format!("self::{c}"), |(_, path)| path.clone())
    }

    fn elem(&self, e: &Elem) -> String {
        match e {
            Elem::Scalar(s) => s.rust().to_owned(),
            Elem::Struct(name) => self.struct_path(name),
        }
    }

    /// The Rust parameter for a C parameter, or `None` for a length the launcher fills in.
    fn param(&self, p: &crate::source::Param, counts: &[Count]) -> Option<String> {
        let r = self.of(&p.name);
        match &p.ty {
            _ if counts.iter().any(|c| c.name == p.name) => None,
            Type::Pointer { elem, constant } => Some(format!(
                "{r}: &{}__um::Managed<[{}], __um::StreamOwned<'s, K>, M{}>",
                if *constant { "" } else { "mut " },
                self.elem(elem),
                storage_index(self.kernel, &p.name)
            )),
            Type::Scalar(s) | Type::Len(s) => Some(format!("{r}: {}", s.rust())),
            Type::Struct(name) => Some(format!("{r}: {}", self.struct_path(name))),
        }
    }

    /// The value the launch passes for a parameter.
    fn value(&self, p: &crate::source::Param) -> String {
        let r = self.of(&p.name);
        match p.ty {
            Type::Struct(_) => format!("__um::ByValue({r})"),
            _ => r,
        }
    }

    fn listed(&self, want: impl Fn(&Type) -> bool) -> Vec<&str> {
        self.kernel
            .params
            .iter()
            .filter(|p| want(&p.ty))
            .map(|p| p.name.as_str())
            .collect()
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

/// The generic parameters of a launcher: the stream's brand and kind, and a storage (unified,
/// coherent or mirrored) per buffer, so that storages mix freely in one launch.
fn generics(k: &Kernel) -> String {
    let buffers = k
        .params
        .iter()
        .filter(|p| matches!(p.ty, Type::Pointer { .. }))
        .count();
    let storages: String = (0..buffers)
        .map(|i| format!(", M{i}: __um::Storage"))
        .collect();
    format!("<'s, K: __um::StreamKind{storages}>")
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

fn is_read(t: &Type) -> bool {
    matches!(t, Type::Pointer { constant: true, .. })
}

fn is_written(t: &Type) -> bool {
    matches!(
        t,
        Type::Pointer {
            constant: false,
            ..
        }
    )
}

/// The Rust name of a struct, checked: not a primitive, and spellable.
fn struct_ident(s: &Struct) -> Result<String> {
    if PRIMITIVES.contains(&s.name.as_str()) {
        return Err(Error::new(format!(
            "struct `{}` has the name of a Rust primitive type: in the generated module it would \
             stand for every `{}` of the launchers",
            s.name, s.name
        ))
        .at(s.line)
        .help("rename the struct"));
    }
    rust_ident(&s.name, "struct").map_err(|e| e.at(s.line))
}

fn write_struct(out: &mut String, s: &Struct, name: &str, file: &str) -> Result<()> {
    let (size, align) = s.layout();
    let idents = s
        .fields
        .iter()
        .map(|f| {
            rust_ident(&f.name, &format!("field of struct `{}`", s.name)).map_err(|e| e.at(s.line))
        })
        .collect::<Result<Vec<_>>>()?;
    let pairs: Vec<(&str, String)> = s
        .fields
        .iter()
        .map(|f| f.name.as_str())
        .zip(idents.iter().cloned())
        .collect();
    distinct(&format!("fields of struct `{}`", s.name), &pairs).map_err(|e| e.at(s.line))?;
    let fields: String = s
        .fields
        .iter()
        .zip(&idents)
        .map(|(f, ident)| {
            let ty = match f.array {
                Some(n) => format!("[{}; {n}]", f.ty.rust()),
                None => f.ty.rust().to_owned(),
            };
            format!(
                "    /// `{}` of the C struct.\n    pub {ident}: {ty},\n",
                f.name
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
         unsafe impl __um::DeviceCopy for self::{name} {{}}\n\n",
        c = s.name,
        line = s.line,
        // The standard library implements `Default` for arrays of at most 32 elements.
        default = if s.fields.iter().all(|f| f.array.unwrap_or(0) <= 32) {
            ", Default"
        } else {
            ""
        },
    );
    Ok(())
}

/// The `_node` form of a safe launcher: the launch recorded in a capture, returning its node,
/// whose scalars (the parameters that are neither buffers nor lengths) change between replays.
fn write_node(out: &mut String, names: &Names<'_>, counts: &[Count], with: &str, node: &str) {
    let k = names.kernel;
    let params: String = k
        .params
        .iter()
        .filter_map(|p| names.param(p, counts))
        .map(|p| {
            format!(
                ", {}",
                p.replace(
                    "__um::StreamOwned<'s, K>",
                    "__um::StreamOwned<'s, __um::Capture>"
                )
            )
        })
        .collect();
    let scalars: Vec<(usize, String, &str)> = k
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| !counts.iter().any(|c| c.name == p.name))
        .filter_map(|(i, p)| match &p.ty {
            Type::Scalar(s) => Some((i, s.rust().to_owned(), p.name.as_str())),
            Type::Struct(name) => Some((i, names.struct_path(name), p.name.as_str())),
            _ => None,
        })
        .collect();
    let tuple_ty = match scalars.as_slice() {
        [] => "()".to_owned(),
        [(_, t, _)] => format!("({t},)"),
        many => format!(
            "({})",
            many.iter()
                .map(|(_, t, _)| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let positions: Vec<String> = scalars.iter().map(|(i, _, _)| i.to_string()).collect();
    let shown_scalars: Vec<&str> = scalars.iter().map(|(_, _, n)| *n).collect();
    let count_lets: String = counts
        .iter()
        .map(|c| {
            let lens: Vec<String> = c
                .buffers
                .iter()
                .map(|b| format!("({b:?}, {}.len())", names.of(b)))
                .collect();
            format!(
                "    let {}: {} = __um::codegen::count(KERNEL, {:?}, __um::codegen::common_len(KERNEL, &[{}])?, threads)?;\n",
                names.of(&c.name),
                c.ty.rust(),
                c.name,
                lens.join(", ")
            )
        })
        .collect();
    let threads_let = if counts.is_empty() {
        ""
    } else {
        "    let threads = config.total_threads();\n"
    };
    let tuple: String = k
        .params
        .iter()
        .map(|p| format!("{}, ", names.value(p)))
        .collect();
    let storages: String = (0..k
        .params
        .iter()
        .filter(|p| matches!(p.ty, Type::Pointer { .. }))
        .count())
        .map(|i| format!(", M{i}: __um::Storage"))
        .collect();
    let _ = write!(
        out,
        "/// {link_with} inside a capture ([`Stream::capture`](__um::Stream::capture)): records the\n\
         /// launch and returns its node, whose scalars ({shown}, as the tuple `{tuple_ty}`)\n\
         /// [`Graph::set`](__um::Graph::set) changes for later replays. Buffers, lengths and\n\
         /// `config` stay as recorded. Errors as {link_with}.\n\
         #[allow(clippy::too_many_arguments)]\n\
         pub fn {node}<'s{storages}>(stream: &__um::Stream<'s, __um::Capture>, config: __um::Linear{params}) -> __um::Result<__um::Node<{tuple_ty}>> {{\n\
         \x20   const KERNEL: &str = {kname:?};\n\
         {threads_let}{count_lets}\
         \x20   // SAFETY: as in {with}: the tuple follows the declaration um-build checked against the PTX,\n\
         \x20   // buffers owned by `stream`, lengths from the buffers, a one-dimensional `config`. The\n\
         \x20   // positions are the parameters that are neither buffers nor lengths, of the node's tuple\n\
         \x20   // types in order; the author of the `UM_SAFE_KERNEL` body promised its contract for every\n\
         \x20   // value of them (docs/kernels.md).\n\
         \x20   unsafe {{ stream.launch_ptx_node::<_, {tuple_ty}>(self::PTX, KERNEL, config.into(), ({tuple}), &[{positions}]) }}\n}}\n\n",
        link_with = doc_link(with),
        shown = shown(&shown_scalars),
        kname = k.name,
        positions = positions.join(", "),
    );
}

fn write_safe(out: &mut String, names: &Names<'_>, counts: &[Count], fn_names: &(String, String)) {
    let k = names.kernel;
    let (name, with) = fn_names;
    let params: Vec<String> = k
        .params
        .iter()
        .filter_map(|p| names.param(p, counts))
        .collect();
    let args: String = params
        .iter()
        .map(|p| format!(", {}", p.split(':').next().unwrap_or_default()))
        .collect();
    let params: String = params.iter().map(|p| format!(", {p}")).collect();
    let buffers = names.listed(|t| matches!(t, Type::Pointer { .. }));
    let default_config = if buffers.is_empty() {
        "__um::Linear::new(1, 1)?".to_owned()
    } else {
        let lens: Vec<String> = buffers
            .iter()
            .map(|b| format!("{}.len()", names.of(b)))
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
                .map(|b| format!("({b:?}, {}.len())", names.of(b)))
                .collect();
            format!(
                "    let {}: {} = __um::codegen::count(KERNEL, {:?}, __um::codegen::common_len(KERNEL, &[{}])?, threads)?;\n",
                names.of(&c.name),
                c.ty.rust(),
                c.name,
                lens.join(", ")
            )
        })
        .collect();
    let tuple: String = k
        .params
        .iter()
        .map(|p| format!("{}, ", names.value(p)))
        .collect();
    let threads_let = if counts.is_empty() {
        ""
    } else {
        "    let threads = config.total_threads();\n"
    };
    let _ = write!(
        out,
        "/// Launches `{decl}` on `stream`, with [`Linear::for_len`](__um::Linear::for_len) of\n\
         /// its longest buffer.\n///\n\
         /// Reads {reads}; writes {writes}.{count_doc} See {link_with} for the errors.\n\
         #[allow(clippy::too_many_arguments)]\n\
         pub fn {name}{generics}(stream: &__um::Stream<'s, K>{params}) -> __um::Result<()> {{\n\
         \x20   let config = {default_config};\n\
         \x20   self::{with}(stream, config{args})\n}}\n\n\
         /// {link_name} with an explicit one-dimensional launch. `{kname}` keeps the\n\
         /// contract of `UM_SAFE_KERNEL` ([docs/kernels.md](https://github.com/um-rs/um/blob/main/docs/kernels.md)) under every\n\
         /// [`Linear`](__um::Linear) launch, so any `config` is safe.\n///\n\
         /// Errors: [`LengthMismatch`](__um::Error::LengthMismatch) if buffers that share a length\n\
         /// differ in length; [`LengthTooLarge`](__um::Error::LengthTooLarge) or\n\
         /// [`IndexOverflow`](__um::Error::IndexOverflow) if a length, or a length plus the\n\
         /// grid's threads, does not fit its type; [`BlockTooLarge`](__um::Error::BlockTooLarge)\n\
         /// if the kernel allows fewer threads per block than `config` has; the driver's\n\
         /// refusal as [`Driver`](__um::Error::Driver).\n\
         #[allow(clippy::too_many_arguments)]\n\
         pub fn {with}{generics}(stream: &__um::Stream<'s, K>, config: __um::Linear{params}) -> __um::Result<()> {{\n\
         \x20   const KERNEL: &str = {kname:?};\n\
         {threads_let}{count_lets}\
         \x20   // SAFETY: the tuple follows the declaration, which um-build checked against the PTX\n\
         \x20   // `.entry` (count, widths, pointers, struct layouts) and had the compiler check (every\n\
         \x20   // position's type, `const` and length types included); `const` buffers are `&`, the\n\
         \x20   // others `&mut`, all owned by `stream` (brand 's); each length is its buffers' length,\n\
         \x20   // and with the grid's threads it fits its type; `config` is one-dimensional. The author\n\
         \x20   // of the `UM_SAFE_KERNEL` body promised the rest (docs/kernels.md).\n\
         \x20   unsafe {{ stream.launch_ptx(self::PTX, KERNEL, config.into(), ({tuple})) }}\n}}\n\n",
        decl = k.decl,
        generics = generics(k),
        kname = k.name,
        link_name = doc_link(name),
        link_with = doc_link(with),
        reads = shown(&names.listed(is_read)),
        writes = shown(&names.listed(is_written)),
    );
}

fn write_unsafe(out: &mut String, names: &Names<'_>, name: &str) {
    let k = names.kernel;
    let params: String = k
        .params
        .iter()
        .filter_map(|p| names.param(p, &[]))
        .map(|p| format!(", {p}"))
        .collect();
    let tuple: String = k
        .params
        .iter()
        .map(|p| format!("{}, ", names.value(p)))
        .collect();
    let _ = write!(
        out,
        "/// Launches `{decl}` on `stream` with `config`.\n///\n\
         /// Takes {reads} to read and {writes} to write, all owned by `stream`; the compiler\n\
         /// checks that, and um-build checked the declaration against the PTX.\n///\n\
         /// # Safety\n\
         /// `{kname}` is not declared `UM_SAFE_KERNEL`, so nothing vouches for its body. Under\n\
         /// `config`, and with these arguments, the kernel must ([docs/kernels.md](https://github.com/um-rs/um/blob/main/docs/kernels.md#unsafe-launchers), \"Unsafe\n\
         /// launchers\"):\n\
         /// * read and write each buffer only at indices below its length;\n\
         /// * write no `&` buffer, and write each element of a `&mut` buffer from at most one\n\
         ///   thread, or atomically: no data race, whatever the grid and block;\n\
         /// * touch no memory other than these buffers, its own local memory, and its shared\n\
         ///   memory within the static size plus `config.shared_mem_bytes`;\n\
         /// * reach every `__syncthreads()` from all threads of a block, or from none;\n\
         /// * have no other undefined behaviour for these scalar values.\n\
         #[allow(clippy::too_many_arguments)]\n\
         pub unsafe fn {name}{generics}(stream: &__um::Stream<'s, K>, config: __um::LaunchConfig{params}) -> __um::Result<()> {{\n\
         \x20   // SAFETY: the tuple follows the declaration, which um-build checked against the PTX\n\
         \x20   // `.entry`; `const` buffers are `&`, the others `&mut`, all owned by `stream`; the\n\
         \x20   // caller guarantees what the body does (# Safety).\n\
         \x20   unsafe {{ stream.launch_ptx(self::PTX, {kname:?}, config, ({tuple})) }}\n}}\n\n",
        decl = k.decl,
        generics = generics(k),
        kname = k.name,
        reads = shown(&names.listed(is_read)),
        writes = shown(&names.listed(is_written)),
    );
}

/// The Rust names of a kernel's launchers: `k`, `k_with` and `k_node` for a safe kernel, `k`
/// alone for another.
fn launcher_names(k: &Kernel) -> Result<Vec<(String, String)>> {
    let mut names = vec![(k.name.clone(), rust_ident(&k.name, "kernel")?)];
    if k.safe {
        let with = format!("{}_with", k.name);
        names.push((with.clone(), rust_ident(&with, "kernel")?));
        let node = format!("{}_node", k.name);
        names.push((node.clone(), rust_ident(&node, "kernel")?));
    }
    Ok(names)
}

/// One file's module.
fn write_unit(out: &mut String, u: &Unit<'_>, arch: &str) -> Result<()> {
    let _ = write!(
        out,
        "/// Kernels of `{path}`: its PTX, its by-value structs, and a launcher per kernel.\n\
         #[allow(unused_imports, clippy::all)]\n\
         pub mod {module} {{\n\
         use super::__um;\n\n\
         /// The PTX of `{path}`, built for `{arch}`: the text um-build checked, held here rather\n\
         /// than read from a file, so that no other file can stand in for it (a copy is\n\
         /// `um-ptx/{stem}.ptx` beside this file). A `static`: one address for every user, which\n\
         /// is what the per-context module cache looks up first.\n\
         pub static PTX: &str = {ptx:?};\n\n",
        path = u.shown_path,
        module = u.module,
        stem = plain(&u.module),
        ptx = u.ptx,
    );
    let mut structs: Vec<(String, String)> = Vec::new();
    for s in &u.source.structs {
        let ident = struct_ident(s)?;
        structs.push((s.name.clone(), format!("self::{ident}")));
    }
    let pairs: Vec<(&str, String)> = structs
        .iter()
        .map(|(c, r)| (c.as_str(), r.clone()))
        .collect();
    distinct("structs", &pairs).map_err(|e| {
        let line = u.source.structs.last().map_or(0, |s| s.line);
        e.at(line)
    })?;
    for (s, (_, path)) in u.source.structs.iter().zip(&structs) {
        write_struct(out, s, path.trim_start_matches("self::"), &u.shown_path)?;
    }
    // Every launcher's name, across the file: `k_with` of `k` must not meet a kernel `k_with`.
    let mut fn_names: Vec<(String, String)> = Vec::new();
    for k in &u.source.kernels {
        fn_names.extend(launcher_names(k).map_err(|e| e.kernel(&k.name).at(k.line))?);
        let pairs: Vec<(&str, String)> = fn_names
            .iter()
            .map(|(c, r)| (c.as_str(), r.clone()))
            .collect();
        distinct("launchers", &pairs).map_err(|e| {
            e.kernel(&k.name).at(k.line).help(
                "rename the kernel: a safe kernel `k` has the launchers `k`, `k_with` and `k_node`",
            )
        })?;
    }
    for k in &u.source.kernels {
        let names = Names::new(k, &structs)?;
        let own = launcher_names(k)?;
        let name = own[0].1.clone();
        if k.safe {
            let counts = contract::counts(k)?;
            let with = own.get(1).map_or_else(String::new, |w| w.1.clone());
            let node = own.get(2).map_or_else(String::new, |w| w.1.clone());
            write_safe(out, &names, &counts, &(name, with.clone()));
            write_node(out, &names, &counts, &with, &node);
        } else {
            contract::check_any(k)?;
            write_unsafe(out, &names, &name);
        }
    }
    out.push_str("}\n\n");
    Ok(())
}

/// The whole generated file.
pub(crate) fn generate(units: &[Unit<'_>], arch: &str) -> Result<String> {
    let mut out = String::from(
        "// Generated by um-build: do not edit. Included by `um::include_kernels!()`.\n\n",
    );
    for u in units {
        // Every error names the file it is about (struct and launcher errors name no kernel).
        write_unit(&mut out, u, arch).map_err(|e| {
            if e.file().is_none() {
                e.in_file(&u.file)
            } else {
                e
            }
        })?;
    }
    let all: String = units
        .iter()
        .map(|u| format!("    ({:?}, self::{}::PTX),\n", plain(&u.module), u.module))
        .collect();
    let _ = write!(
        out,
        "/// Every module's PTX, as `(module, PTX)`.\npub static ALL_PTX: &[(&str, &str)] = &[\n{all}];\n\n\
         /// The virtual architecture the PTX was built for.\npub const PTX_ARCH: &str = {arch:?};\n"
    );
    Ok(out)
}
