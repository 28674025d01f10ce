//! um-build against the compiler, by machine.
//!
//! A deterministic generator (splitmix64, fixed seed) writes several hundred kernel folders:
//! declarations with every const placement, scalar spelling and length type um-build reads,
//! structs with padding, arrays and attributes, `#if 0` decoys beside the real declaration in
//! a macro, lying and honest `#define`s and typedefs, prototypes followed by the `#include` of a
//! `.cuh` that defines the kernel, names that collide with Rust, unsafe kernels, and the forms
//! um-build refuses. Each case carries its ground truth twice: what um-build's text reading
//! should see (`reading`) and what nvcc compiles (`compiled`, with the macros and typedefs of
//! the file applied). An oracle in this file, written from the rules of `docs/kernels.md` and
//! `generate.rs`, classifies each case:
//!
//! * `Honest`: reading and compiled agree and break no rule. `Kernels::build` must succeed, and
//!   the generated Rust must be exactly what the truth implies: every launcher's parameters
//!   (names after Rust mangling, `&`/`&mut`, element, scalar and struct types), the launch
//!   tuple in declaration order, each length's type and the buffers its `common_len` lists, the
//!   structs' fields. All accepted cases are then compiled together, as one crate depending on
//!   `um-core`, with `cargo check`.
//! * `Lying`: the text says something other than what nvcc compiles. It must be refused.
//! * `Invalid`: the reading breaks a rule of um-build (a buffer without a length, a length with
//!   no buffer, an unsupported type or form, a name Rust cannot spell, two names that meet). It
//!   must be refused.
//!
//! A refusal is *clear* when the error names its file (`Error::file`) and either comes from
//! um-build's own reading (not an nvcc failure), whose `Display` then names a line, a kernel, a
//! parameter, a struct or a module; or is an nvcc failure whose compiler output has an error
//! located in um-build's check wrapper (`um-check/`, the `static_assert`s and the kernel's
//! redeclaration) or carries an `um-build:` message, or has a C++ error located in one of the
//! user's files. Beyond clarity, each refusal must come from the stage the generator expects
//! (um-build's reading, its compiler-side check, or a C++ error in the user's file): a case
//! refused for another reason means the generator wrote something other than it meant.
//!
//! Needs nvcc (`$UM_LOCAL_NVCC` from `.cargo/config.toml` here) and cargo, no GPU.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

// ----------------------------------------------------------------------------------------------
// A tiny deterministic PRNG.

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n`.
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next_u64() % n as u64).unwrap()
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

// ----------------------------------------------------------------------------------------------
// The model: what a declaration means.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sc {
    F32,
    F64,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
}

use Sc::{F32, F64, I8, I16, I32, I64, U8, U16, U32, U64};

const SCALARS: [Sc; 10] = [F32, F64, I8, U8, I16, U16, I32, U32, I64, U64];
/// The integers the four length types hold: `len32`, `len64`, `ilen32`, `ilen64`.
const LENGTHS: [Sc; 4] = [U32, U64, I32, I64];

impl Sc {
    fn rust(self) -> &'static str {
        match self {
            F32 => "f32",
            F64 => "f64",
            I8 => "i8",
            U8 => "u8",
            I16 => "i16",
            U16 => "u16",
            I32 => "i32",
            U32 => "u32",
            I64 => "i64",
            U64 => "u64",
        }
    }

    fn size(self) -> usize {
        match self {
            I8 | U8 => 1,
            I16 | U16 => 2,
            F32 | I32 | U32 => 4,
            F64 | I64 | U64 => 8,
        }
    }

    /// Every spelling um-build documents for it.
    fn spellings(self) -> &'static [&'static str] {
        match self {
            F32 => &["float"],
            F64 => &["double"],
            I8 => &["signed char", "int8_t"],
            U8 => &["unsigned char", "uint8_t"],
            I16 => &["short", "short int", "signed short", "int16_t"],
            U16 => &["unsigned short", "unsigned short int", "uint16_t"],
            I32 => &["int", "signed", "signed int", "int32_t"],
            U32 => &["unsigned", "unsigned int", "uint32_t"],
            I64 => &["long long", "long long int", "signed long long", "int64_t"],
            U64 => &[
                "unsigned long long",
                "unsigned long long int",
                "uint64_t",
                "size_t",
            ],
        }
    }

    /// The length type that holds it (`len32` for `U32`, ...).
    fn len_word(self) -> &'static str {
        match self {
            U32 => "len32",
            U64 => "len64",
            I32 => "ilen32",
            _ => "ilen64",
        }
    }
}

fn len_of_word(w: &str) -> Option<Sc> {
    LENGTHS.iter().copied().find(|s| s.len_word() == w)
}

/// The scalar a C spelling names. `reading`: only the spellings um-build documents; otherwise
/// also what C++ accepts that the macros of the generator produce (`signed short int`, ...).
fn sc_of(c: &str, reading: bool) -> Option<Sc> {
    if let Some(s) = SCALARS.iter().copied().find(|s| s.spellings().contains(&c)) {
        return Some(s);
    }
    if reading {
        return None;
    }
    match c {
        "signed short int" | "short signed" => Some(I16),
        "signed long long int" => Some(I64),
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Elem {
    S(Sc),
    St(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// A pointer: element, and whether the pointee is `const`.
    Buf(Elem, bool),
    Val(Sc),
    ByVal(String),
    Len(Sc),
    /// Anything else (a pointer to a pointer, a type um-build does not read).
    Other(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Kernel {
    name: String,
    safe: bool,
    params: Vec<(String, Kind)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Field {
    name: String,
    ty: Option<Sc>,
    array: Option<usize>,
}

/// Layout attributes: `#pragma pack(push, N)`, `__attribute__((aligned(N)))`, `packed`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
struct Attr {
    pack: Option<usize>,
    aligned: Option<usize>,
    packed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Struct {
    name: String,
    fields: Vec<Field>,
    attr: Attr,
}

impl Struct {
    /// Size and alignment as nvcc lays it out.
    fn layout(&self) -> (usize, usize) {
        let mut size = 0usize;
        let mut align = 1usize;
        for f in &self.fields {
            let s = f.ty.map_or(1, Sc::size);
            let mut a = if self.attr.packed { 1 } else { s };
            if let Some(p) = self.attr.pack {
                a = a.min(p);
            }
            align = align.max(a);
            size = size.next_multiple_of(a) + s * f.array.unwrap_or(1);
        }
        if let Some(n) = self.attr.aligned {
            align = align.max(n);
        }
        (size.next_multiple_of(align), align)
    }
}

/// One `.cu` file: its kernels and structs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Unit {
    file: String,
    kernels: Vec<Kernel>,
    structs: Vec<Struct>,
}

/// How a refusal shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// um-build's own reading, before or after nvcc (not an nvcc failure).
    Reading,
    /// nvcc fails on um-build's check wrapper (`static_assert`s, the redeclaration).
    Check,
    /// nvcc fails with a C++ error in the user's file.
    Cxx,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Honest,
    Lying(Why),
    Invalid(Why),
}

struct Case {
    label: String,
    files: Vec<(String, String)>,
    reading: Vec<Unit>,
    compiled: Vec<Unit>,
    expect: Expect,
    /// Kernel declarations in the case.
    decls: usize,
}

// ----------------------------------------------------------------------------------------------
// Rust's side of the names, as `generate.rs` documents it.

const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref",
    "return", "static", "struct", "trait", "true", "type", "unsafe", "use", "where", "while",
    "abstract", "become", "box", "do", "final", "gen", "macro", "override", "priv", "try",
    "typeof", "unsized", "virtual", "yield",
];
const UNSPELLABLE: &[&str] = &["self", "Self", "super", "crate", "_"];
const LAUNCHER_OWN: &[&str] = &[
    "stream", "config", "threads", "KERNEL", "PTX", "__um", "None", "Some", "Ok", "Err",
];
const PRIMITIVES: &[&str] = &[
    "bool", "char", "str", "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
    "u32", "u64", "u128", "usize",
];
const CRATES: &[&str] = &["std", "core", "alloc", "proc_macro", "test"];

fn rust_ident(c: &str) -> Option<String> {
    if UNSPELLABLE.contains(&c) {
        None
    } else if RUST_KEYWORDS.contains(&c) {
        Some(format!("r#{c}"))
    } else if LAUNCHER_OWN.contains(&c) {
        Some(format!("{c}_"))
    } else {
        Some(c.to_owned())
    }
}

fn module_name(stem: &str) -> String {
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
    if RUST_KEYWORDS.contains(&m.as_str()) {
        m.insert_str(0, "r#");
    }
    m
}

fn stem(file: &str) -> &str {
    file.strip_suffix(".cu").unwrap_or(file)
}

// ----------------------------------------------------------------------------------------------
// The oracle.

/// What um-build refuses before nvcc runs: types and forms it does not read, too many
/// parameters, and the length rules of a safe kernel.
fn pre_nvcc_invalid(u: &Unit) -> Option<String> {
    for s in &u.structs {
        if s.fields.iter().any(|f| f.ty.is_none()) {
            return Some(format!(
                "struct {} has a field of a type um-build does not read",
                s.name
            ));
        }
    }
    for k in &u.kernels {
        if let Some((p, Kind::Other(t))) =
            k.params.iter().find(|(_, t)| matches!(t, Kind::Other(_)))
        {
            return Some(format!("{}: parameter {p} of type {t}", k.name));
        }
        if k.params.len() > 12 {
            return Some(format!("{}: {} parameters", k.name, k.params.len()));
        }
        if !k.safe {
            continue;
        }
        let mut uncounted = 0;
        for (p, t) in &k.params {
            match t {
                Kind::Buf(..) => uncounted += 1,
                Kind::Len(_) if uncounted == 0 => {
                    return Some(format!("{}: length {p} counts no buffer", k.name));
                }
                Kind::Len(_) => uncounted = 0,
                _ => {}
            }
        }
        if uncounted > 0 {
            return Some(format!("{}: a buffer without a length", k.name));
        }
    }
    None
}

fn distinct(names: &[Option<String>]) -> bool {
    names
        .iter()
        .enumerate()
        .all(|(i, n)| n.is_some() && !names[..i].contains(n))
}

/// What um-build refuses when it generates: names Rust cannot spell or that meet.
fn names_invalid(units: &[Unit]) -> Option<String> {
    let modules: Vec<Option<String>> = units
        .iter()
        .map(|u| Some(module_name(stem(&u.file))))
        .collect();
    if !distinct(&modules) {
        return Some("two files map to one module".into());
    }
    for u in units {
        let structs: Vec<Option<String>> = u
            .structs
            .iter()
            .map(|s| {
                if PRIMITIVES.contains(&s.name.as_str()) {
                    None
                } else {
                    rust_ident(&s.name)
                }
            })
            .collect();
        if !distinct(&structs) {
            return Some(format!("{}: struct names", u.file));
        }
        for s in &u.structs {
            let fields: Vec<Option<String>> =
                s.fields.iter().map(|f| rust_ident(&f.name)).collect();
            if !distinct(&fields) {
                return Some(format!("{}: fields of {}", u.file, s.name));
            }
        }
        let mut launchers = Vec::new();
        for k in &u.kernels {
            launchers.push(rust_ident(&k.name));
            if k.safe {
                launchers.push(rust_ident(&format!("{}_with", k.name)));
                launchers.push(rust_ident(&format!("{}_node", k.name)));
            }
            let params: Vec<Option<String>> = k.params.iter().map(|(p, _)| rust_ident(p)).collect();
            if !distinct(&params) {
                return Some(format!("{}: parameter names", k.name));
            }
        }
        if !distinct(&launchers) {
            return Some(format!("{}: launcher names", u.file));
        }
    }
    None
}

/// The structs the kernels of `u` use, by name.
fn used_structs(u: &Unit) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for k in &u.kernels {
        for (_, t) in &k.params {
            if let Kind::ByVal(n) | Kind::Buf(Elem::St(n), _) = t {
                if !out.contains(n) {
                    out.push(n.clone());
                }
            }
        }
    }
    out
}

/// Whether the reading is what nvcc compiles: the same kernels, the same parameter kinds in
/// the same positions (names of parameters do not matter), the same structs where used.
fn same(reading: &[Unit], compiled: &[Unit]) -> bool {
    reading.len() == compiled.len()
        && reading.iter().zip(compiled).all(|(r, c)| {
            r.kernels.len() == c.kernels.len()
                && r.kernels.iter().zip(&c.kernels).all(|(a, b)| {
                    a.name == b.name
                        && a.safe == b.safe
                        && a.params.len() == b.params.len()
                        && a.params.iter().zip(&b.params).all(|(p, q)| p.1 == q.1)
                })
                && used_structs(r).iter().all(|n| {
                    let a = r.structs.iter().find(|s| s.name == *n);
                    let b = c.structs.iter().find(|s| s.name == *n);
                    match (a, b) {
                        (Some(a), Some(b)) => a.fields == b.fields && a.layout() == b.layout(),
                        _ => false,
                    }
                })
        })
}

fn classify(reading: &[Unit], compiled: &[Unit], lie: Why) -> Expect {
    if reading.iter().any(|u| pre_nvcc_invalid(u).is_some()) {
        Expect::Invalid(Why::Reading)
    } else if !same(reading, compiled) {
        Expect::Lying(lie)
    } else if names_invalid(reading).is_some() {
        Expect::Invalid(Why::Reading)
    } else {
        Expect::Honest
    }
}

// ----------------------------------------------------------------------------------------------
// Spelling: a declaration as tokens, which macros and typedefs rewrite.

/// Splits `um::len32` into `um`, `::`, `len32`, and words at spaces.
fn toks(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in s.split_whitespace() {
        let mut rest = w;
        while let Some(at) = rest.find("::") {
            if at > 0 {
                out.push(rest[..at].to_owned());
            }
            out.push("::".to_owned());
            rest = &rest[at + 2..];
        }
        if !rest.is_empty() {
            out.push(rest.to_owned());
        }
    }
    out
}

fn join(t: &[String], spaced: bool) -> String {
    let mut s = String::new();
    for (i, w) in t.iter().enumerate() {
        if i > 0 && (spaced || (w != "::" && t[i - 1] != "::")) {
            s.push(' ');
        }
        s.push_str(w);
    }
    s
}

/// One parameter as written: the words before the `*`, the words after it (`None`: no `*`),
/// the name.
#[derive(Clone, Debug)]
struct Decl {
    pre: Vec<String>,
    post: Option<Vec<String>>,
    name: String,
    star: usize,
    spaced: bool,
}

impl Decl {
    fn render(&self) -> String {
        let ty = join(&self.pre, self.spaced);
        match &self.post {
            None => format!("{ty} {}", self.name),
            Some(post) if post.is_empty() && self.star == 3 => format!("{ty}*{}", self.name),
            Some(post) => {
                let tail = if post.is_empty() {
                    self.name.clone()
                } else {
                    format!("{} {}", join(post, false), self.name)
                };
                match self.star % 3 {
                    0 => format!("{ty} *{tail}"),
                    1 => format!("{ty}* {tail}"),
                    _ => format!("{ty} * {tail}"),
                }
            }
        }
    }
}

/// Parses the generator's own shorthand, `const float *x, um::len32 n` (no commas in types).
fn decls(s: &str) -> Vec<Decl> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (pre, post, name) = match p.split_once('*') {
                Some((pre, rest)) => {
                    let mut rest = toks(rest);
                    let name = rest.pop().unwrap();
                    (toks(pre), Some(rest), name)
                }
                None => {
                    let mut all = toks(p);
                    let name = all.pop().unwrap();
                    (all, None, name)
                }
            };
            Decl {
                pre,
                post,
                name,
                star: 0,
                spaced: false,
            }
        })
        .collect()
}

/// The preprocessor's view, as far as the generator uses it: object-like macros of one
/// token, and typedefs.
#[derive(Clone, Debug, Default)]
struct Env {
    macros: Vec<(String, Vec<String>)>,
    typedefs: Vec<(String, Vec<String>)>,
}

impl Env {
    fn expand(&self, t: &[String]) -> Vec<String> {
        t.iter()
            .flat_map(|w| {
                self.macros
                    .iter()
                    .find(|(m, _)| m == w)
                    .map_or_else(|| vec![w.clone()], |(_, b)| b.clone())
            })
            .collect()
    }

    fn name(&self, n: &str) -> String {
        self.expand(&[n.to_owned()]).join(" ")
    }

    fn typedefs(&self, t: Vec<String>) -> Vec<String> {
        t.into_iter()
            .flat_map(|w| {
                self.typedefs
                    .iter()
                    .find(|(m, _)| *m == w)
                    .map_or_else(|| vec![w.clone()], |(_, b)| b.clone())
            })
            .collect()
    }
}

/// What a parameter means: to um-build's reading (`env` = `None`: no preprocessor, only the
/// documented spellings) or to nvcc (`env` = the file's macros and typedefs).
fn meaning(d: &Decl, env: Option<&Env>, structs: &[String]) -> (String, Kind) {
    let (pre, post, name) = match env {
        None => (d.pre.clone(), d.post.clone(), d.name.clone()),
        Some(e) => (
            e.typedefs(e.expand(&d.pre)),
            d.post.as_ref().map(|p| e.expand(p)),
            e.name(&d.name),
        ),
    };
    let stars = post
        .as_ref()
        .map_or(0, |p| 1 + p.iter().filter(|t| *t == "*").count());
    let constant = pre.iter().any(|t| t == "const");
    let mut core: Vec<String> = pre
        .iter()
        .filter(|t| !matches!(t.as_str(), "const" | "volatile" | "struct"))
        .cloned()
        .collect();
    if core.first().is_some_and(|t| t == "::") {
        core.remove(0);
    }
    enum Base {
        S(Sc),
        St(String),
        Len(Sc),
    }
    let base = if core.len() == 3 && core[1] == "::" {
        match (core[0].as_str(), len_of_word(&core[2])) {
            ("um", Some(s)) => Some(Base::Len(s)),
            // `namespace fake`'s typedefs: the integers, not the length types.
            ("fake", Some(s)) if env.is_some() => Some(Base::S(s)),
            _ => None,
        }
    } else if let Some(s) = sc_of(&core.join(" "), env.is_none()) {
        Some(Base::S(s))
    } else if core.len() == 1 && structs.contains(&core[0]) {
        Some(Base::St(core[0].clone()))
    } else {
        None
    };
    let kind = match (base, stars) {
        (Some(Base::S(s)), 0) => Kind::Val(s),
        (Some(Base::S(s)), 1) => Kind::Buf(Elem::S(s), constant),
        (Some(Base::St(n)), 0) => Kind::ByVal(n),
        (Some(Base::St(n)), 1) => Kind::Buf(Elem::St(n), constant),
        (Some(Base::Len(s)), 0) => Kind::Len(s),
        _ => Kind::Other(format!("{}{}", join(&core, false), "*".repeat(stars))),
    };
    (name, kind)
}

/// A kernel as written.
#[derive(Clone, Debug)]
struct KDecl {
    safe: bool,
    name: String,
    params: Vec<Decl>,
    launch_bounds: bool,
    multiline: bool,
    void: bool,
    comment: Option<usize>,
    /// A body other than the generated one.
    body: Option<String>,
}

impl KDecl {
    fn new(safe: bool, name: &str, params: Vec<Decl>) -> KDecl {
        KDecl {
            safe,
            name: name.to_owned(),
            params,
            launch_bounds: false,
            multiline: false,
            void: false,
            comment: None,
            body: None,
        }
    }

    /// The declaration, without a body; `one_line` for a macro's.
    fn render(&self, one_line: bool) -> String {
        let marker = if self.safe {
            "UM_SAFE_KERNEL"
        } else {
            "extern \"C\" __global__"
        };
        let lb = if self.launch_bounds {
            " __launch_bounds__(256)"
        } else {
            ""
        };
        let params = if self.params.is_empty() {
            if self.void { "void" } else { "" }.to_owned()
        } else {
            let sep = if self.multiline && !one_line {
                ",\n    "
            } else {
                ", "
            };
            self.params
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let c = if self.comment == Some(i) {
                        "/* param */ "
                    } else {
                        ""
                    };
                    format!("{c}{}", d.render())
                })
                .collect::<Vec<_>>()
                .join(sep)
        };
        format!("{marker} void{lb} {}({params})", self.name)
    }

    fn meaning(&self, env: Option<&Env>, structs: &[String]) -> Kernel {
        Kernel {
            name: env.map_or_else(|| self.name.clone(), |e| e.name(&self.name)),
            safe: self.safe,
            params: self
                .params
                .iter()
                .map(|d| meaning(d, env, structs))
                .collect(),
        }
    }

    /// A body valid for what nvcc compiles (`compiled`), in this declaration's names: a
    /// grid-stride loop that writes the first written scalar buffer below the length after
    /// it, or nothing.
    fn body(&self, compiled: &Kernel) -> String {
        if let Some(b) = &self.body {
            return format!(" {b}");
        }
        let mut group: Vec<usize> = Vec::new();
        for (i, (_, kind)) in compiled.params.iter().enumerate() {
            match kind {
                Kind::Buf(..) => group.push(i),
                Kind::Len(_) => {
                    if let Some(&b) = group
                        .iter()
                        .find(|&&b| matches!(compiled.params[b].1, Kind::Buf(Elem::S(_), false)))
                    {
                        return format!(
                            " {{\n    for (unsigned long long um_diff_i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n         um_diff_i < (unsigned long long)({n}); um_diff_i += (unsigned long long)gridDim.x * blockDim.x)\n        {b}[um_diff_i] = 0;\n}}",
                            n = self.params[i].name,
                            b = self.params[b].name
                        );
                    }
                    group.clear();
                }
                _ => {}
            }
        }
        " {}".to_owned()
    }
}

/// A field declaration: the type's words and one or more declarators.
#[derive(Clone, Debug)]
struct FDecl {
    pre: Vec<String>,
    names: Vec<(String, Option<usize>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// `struct N { ... };`
    Plain,
    /// `typedef struct { ... } N;`
    Typedef,
    /// `typedef struct N_tag { ... } N;`
    TypedefTag,
}

#[derive(Clone, Debug)]
struct SDecl {
    name: String,
    form: Form,
    fields: Vec<FDecl>,
    attr: Attr,
}

impl SDecl {
    fn render(&self, one_line: bool) -> String {
        let nl = if one_line { " " } else { "\n" };
        let ind = if one_line { "" } else { "    " };
        let body: String = self
            .fields
            .iter()
            .map(|f| {
                let ds: Vec<String> = f
                    .names
                    .iter()
                    .map(|(n, a)| match a {
                        Some(a) => format!("{n}[{a}]"),
                        None => n.clone(),
                    })
                    .collect();
                format!("{ind}{} {};{nl}", join(&f.pre, false), ds.join(", "))
            })
            .collect();
        let attr = match (self.attr.aligned, self.attr.packed) {
            (Some(n), _) => format!(" __attribute__((aligned({n})))"),
            (None, true) => " __attribute__((packed))".to_owned(),
            (None, false) => String::new(),
        };
        let s = match self.form {
            Form::Plain => format!("struct {} {{{nl}{body}}}{attr};", self.name),
            Form::Typedef => format!("typedef struct {{{nl}{body}}} {};", self.name),
            Form::TypedefTag => {
                format!(
                    "typedef struct {}_tag {{{nl}{body}}} {};",
                    self.name, self.name
                )
            }
        };
        match self.attr.pack {
            Some(p) => format!("#pragma pack(push, {p})\n{s}\n#pragma pack(pop)"),
            None => s,
        }
    }

    fn meaning(&self, env: Option<&Env>) -> Struct {
        let name = |n: &str| env.map_or_else(|| n.to_owned(), |e| e.name(n));
        Struct {
            name: name(&self.name),
            fields: self
                .fields
                .iter()
                .flat_map(|f| {
                    let pre: Vec<String> = match env {
                        None => f.pre.clone(),
                        Some(e) => e.typedefs(e.expand(&f.pre)),
                    };
                    let core: Vec<String> = pre.into_iter().filter(|t| t != "const").collect();
                    let ty = sc_of(&core.join(" "), env.is_none());
                    f.names.iter().map(move |(n, a)| Field {
                        name: name(n),
                        ty,
                        array: *a,
                    })
                })
                .collect(),
            attr: if env.is_some() {
                self.attr.clone()
            } else {
                Attr::default()
            },
        }
    }
}

/// A struct of a file: as it is, or an `#if 0` decoy beside the real one in a macro.
#[derive(Clone, Debug)]
enum SItem {
    Plain(SDecl),
    Decoy { decoy: SDecl, real: SDecl },
}

/// A kernel of a file: as it is, an `#if 0` decoy beside the real one in a macro, or a
/// prototype in the `.cu` whose definition is in an included `.cuh`.
#[derive(Clone, Debug)]
enum KItem {
    Plain(KDecl),
    Decoy { decoy: KDecl, real: KDecl },
    Proto { proto: KDecl, def: KDecl },
}

/// One `.cu` file (and the `.cuh` its prototypes include).
#[derive(Clone, Debug, Default)]
struct Src {
    file: String,
    /// `#include <stdint.h>` even where no `uint..._t` needs it (`int32_t` and its kin come
    /// with nvcc's own headers).
    stdint: bool,
    /// Lines after the includes: macros, namespaces.
    prefix: Vec<String>,
    /// Lines after the structs: typedefs.
    typedef_lines: Vec<String>,
    env: Env,
    structs: Vec<SItem>,
    kernels: Vec<KItem>,
}

impl Src {
    fn new(file: &str) -> Src {
        Src {
            file: file.to_owned(),
            ..Src::default()
        }
    }

    fn define(&mut self, name: &str, body: &str) {
        self.prefix.push(format!("#define {name} {body}"));
        self.env.macros.push((name.to_owned(), toks(body)));
    }

    fn typedef(&mut self, name: &str, ty: &str) {
        self.typedef_lines.push(format!("typedef {ty} {name};"));
        self.env.typedefs.push((name.to_owned(), toks(ty)));
    }

    fn reading(&self) -> Unit {
        let structs: Vec<Struct> = self
            .structs
            .iter()
            .map(|s| match s {
                SItem::Plain(d) | SItem::Decoy { decoy: d, .. } => d.meaning(None),
            })
            .collect();
        let names: Vec<String> = structs.iter().map(|s| s.name.clone()).collect();
        Unit {
            file: self.file.clone(),
            kernels: self
                .kernels
                .iter()
                .map(|k| match k {
                    KItem::Plain(d)
                    | KItem::Decoy { decoy: d, .. }
                    | KItem::Proto { proto: d, .. } => d.meaning(None, &names),
                })
                .collect(),
            structs,
        }
    }

    fn compiled(&self) -> Unit {
        let structs: Vec<Struct> = self
            .structs
            .iter()
            .map(|s| match s {
                SItem::Plain(d) | SItem::Decoy { real: d, .. } => d.meaning(Some(&self.env)),
            })
            .collect();
        let names: Vec<String> = structs.iter().map(|s| s.name.clone()).collect();
        Unit {
            file: self.file.clone(),
            kernels: self
                .kernels
                .iter()
                .map(|k| match k {
                    KItem::Plain(d)
                    | KItem::Decoy { real: d, .. }
                    | KItem::Proto { def: d, .. } => d.meaning(Some(&self.env), &names),
                })
                .collect(),
            structs,
        }
    }

    /// The `.cu` text and, with prototypes, the `.cuh` it includes.
    fn render(&self) -> Vec<(String, String)> {
        let compiled = self.compiled();
        let mut cu = String::new();
        for l in &self.prefix {
            let _ = writeln!(cu, "{l}");
        }
        for (i, s) in self.structs.iter().enumerate() {
            match s {
                SItem::Plain(d) => {
                    let _ = writeln!(cu, "{}", d.render(false));
                }
                SItem::Decoy { decoy, real } => {
                    let _ = writeln!(
                        cu,
                        "#if 0\n{}\n#endif\n#define UM_DIFF_S{i} {}\nUM_DIFF_S{i};",
                        decoy.render(false),
                        real.render(true).trim_end_matches(';')
                    );
                }
            }
        }
        for l in &self.typedef_lines {
            let _ = writeln!(cu, "{l}");
        }
        let mut cuh = String::new();
        for (i, (k, c)) in self.kernels.iter().zip(&compiled.kernels).enumerate() {
            match k {
                KItem::Plain(d) => {
                    let _ = writeln!(cu, "{}{}", d.render(false), d.body(c));
                }
                KItem::Decoy { decoy, real } => {
                    let _ = writeln!(
                        cu,
                        "#if 0\n{} {{}}\n#endif\n#define UM_DIFF_K{i} {}\nUM_DIFF_K{i}{}",
                        decoy.render(false),
                        real.render(true),
                        real.body(c)
                    );
                }
                KItem::Proto { proto, def } => {
                    let _ = writeln!(cu, "{};", proto.render(false));
                    let _ = writeln!(cuh, "{}{}", def.render(false), def.body(c));
                }
            }
        }
        let head = if self.stdint || cu.contains("uint") || cuh.contains("uint") {
            "#include \"um.cuh\"\n#include <stdint.h>\n"
        } else {
            "#include \"um.cuh\"\n"
        };
        cu.insert_str(0, head);
        let mut files = Vec::new();
        if !cuh.is_empty() {
            let name = format!("{}_impl.cuh", stem(&self.file));
            let _ = writeln!(cu, "#include \"{name}\"");
            files.push((name, format!("#pragma once\n#include \"um.cuh\"\n{cuh}")));
        }
        files.insert(0, (self.file.clone(), cu));
        files
    }
}

/// A case from `Src`s, classified by the oracle (`lie`: how a lie in it shows).
fn case(label: impl Into<String>, srcs: &[Src], lie: Why) -> Case {
    let reading: Vec<Unit> = srcs.iter().map(Src::reading).collect();
    let compiled: Vec<Unit> = srcs.iter().map(Src::compiled).collect();
    Case {
        label: label.into(),
        files: srcs.iter().flat_map(Src::render).collect(),
        expect: classify(&reading, &compiled, lie),
        decls: compiled.iter().map(|u| u.kernels.len()).sum(),
        reading,
        compiled,
    }
}

// ----------------------------------------------------------------------------------------------
// The generator.

const PARAM_PLAIN: &[&str] = &[
    "x", "y", "z", "a", "b", "v", "w", "out", "src", "dst", "data", "acc", "n", "m", "len",
    "count", "value", "alpha", "beta", "factor", "lo", "hi", "seed", "step", "base", "total",
    "bins", "mask",
];
const PARAM_RUST: &[&str] = &[
    "type",
    "fn",
    "in",
    "match",
    "mod",
    "loop",
    "move",
    "ref",
    "impl",
    "let",
    "use",
    "where",
    "yield",
    "async",
    "await",
    "dyn",
    "gen",
    "box",
    "priv",
    "become",
    "final",
    "override",
    "abstract",
    "macro",
    "unsized",
    "as",
    "pub",
    "mut",
    "trait",
    "stream",
    "config",
    "threads",
    "KERNEL",
    "PTX",
    "__um",
    "std",
    "core",
    "alloc",
    "Storage",
    "K",
    "M0",
    "M1",
    "Managed",
    "StreamOwned",
    "Stream",
    "Linear",
    "Result",
    "Option",
    "Vec",
    "String",
    "s",
    "S",
    "ALL_PTX",
];
const KERNEL_PLAIN: &[&str] = &[
    "k", "axpy", "fill", "scale_by", "sum", "hist", "gather", "reduce", "saxpy", "copy_to",
    "clear", "tally",
];
const KERNEL_RUST: &[&str] = &[
    "type", "fn", "in", "match", "K", "M0", "Storage", "Managed", "stream", "config", "threads",
    "PTX", "KERNEL", "__um", "core", "Stream", "Linear", "s", "impl", "async", "Result", "Option",
    "ALL_PTX", "PTX_ARCH", "loop",
];
const STRUCT_PLAIN: &[&str] = &["P", "Params", "Pair", "Bins", "Range", "Cfg", "Item", "Rec"];
const STRUCT_RUST: &[&str] = &[
    "Storage",
    "K",
    "M0",
    "M1",
    "Managed",
    "type",
    "fn",
    "in",
    "Stream",
    "StreamOwned",
    "Linear",
    "Result",
    "Option",
    "PTX",
    "KERNEL",
    "config",
    "core",
    "DeviceCopy",
    "ByValue",
    "Into",
    "Iterator",
    "Default",
    "Copy",
    "Clone",
    "__um",
    "String",
    "Vec",
];
const FIELD_PLAIN: &[&str] = &[
    "a", "b", "c", "lo", "hi", "w", "tag", "cnt", "factor", "id", "flags", "pad",
];
const FIELD_RUST: &[&str] = &[
    "type", "fn", "in", "match", "stream", "config", "threads", "K", "M0", "std", "core",
    "Storage", "PTX", "KERNEL", "__um", "mod", "ref", "s",
];
/// File names whose modules need care (`_.cu` is `k__`, `std.cu` is `std_`, ...).
const FILE_NAMES: &[&str] = &[
    "_.cu",
    "std.cu",
    "core.cu",
    "alloc.cu",
    "test.cu",
    "proc_macro.cu",
    "Storage.cu",
    "K.cu",
    "M0.cu",
    "Managed.cu",
    "type.cu",
    "fn.cu",
    "in.cu",
    "stream.cu",
    "config.cu",
    "self.cu",
    "Self.cu",
    "super.cu",
    "crate.cu",
    "__um.cu",
    "1d.cu",
    "a-b.cu",
    "a b.cu",
    "ALL_PTX.cu",
    "match.cu",
    "__.cu",
];

/// A fresh name: from `rust` with `rust_pct` percent, else `plain`; never one of `taken`.
fn fresh(
    rng: &mut Rng,
    plain: &[&str],
    rust: &[&str],
    rust_pct: usize,
    taken: &mut Vec<String>,
) -> String {
    loop {
        let pool = if rng.chance(rust_pct) { rust } else { plain };
        let n = (*rng.pick(pool)).to_owned();
        if !taken.contains(&n) {
            taken.push(n.clone());
            return n;
        }
    }
}

fn random_sc(rng: &mut Rng) -> Sc {
    *rng.pick(&SCALARS)
}

/// The tokens of one spelling of `s`.
fn spell_sc(rng: &mut Rng, s: Sc) -> Vec<String> {
    let spelling: &&str = rng.pick(s.spellings());
    toks(spelling)
}

/// An honest spelling of a parameter of kind `kind`. `tagged`: the structs that can be
/// written `struct N`.
fn spell(rng: &mut Rng, name: &str, kind: &Kind, tagged: &[String]) -> Decl {
    let elem = |rng: &mut Rng, e: &Elem| -> Vec<String> {
        match e {
            Elem::S(s) => spell_sc(rng, *s),
            Elem::St(n) if tagged.contains(n) && rng.chance(30) => vec!["struct".into(), n.clone()],
            Elem::St(n) => vec![n.clone()],
        }
    };
    let (pre, post) = match kind {
        Kind::Buf(e, constant) => {
            let base = elem(rng, e);
            let pre = if *constant {
                match rng.below(10) {
                    0..=4 => [vec!["const".to_owned()], base].concat(),
                    5..=8 => [base, vec!["const".to_owned()]].concat(),
                    _ => [vec!["const".to_owned(), "volatile".to_owned()], base].concat(),
                }
            } else if rng.chance(10) {
                [vec!["volatile".to_owned()], base].concat()
            } else {
                base
            };
            let post = match rng.below(12) {
                0..=5 => vec![],
                6 | 7 => toks("__restrict__"),
                8 => toks("__restrict"),
                9 | 10 => toks("const"),
                _ => toks("const __restrict__"),
            };
            (pre, Some(post))
        }
        Kind::Val(s) => {
            let base = spell_sc(rng, *s);
            let pre = if rng.chance(10) {
                [vec!["const".to_owned()], base].concat()
            } else {
                base
            };
            (pre, None)
        }
        Kind::ByVal(n) => {
            let mut pre = elem(rng, &Elem::St(n.clone()));
            if rng.chance(10) {
                pre.insert(0, "const".into());
            }
            (pre, None)
        }
        Kind::Len(s) => {
            let w = s.len_word();
            let pre = match rng.below(10) {
                0..=5 => toks(&format!("um::{w}")),
                6 | 7 => toks(&format!("::um::{w}")),
                8 => toks(&format!("const um::{w}")),
                _ => toks(&format!("um::{w} const")),
            };
            (pre, None)
        }
        Kind::Other(t) => (toks(t), None),
    };
    Decl {
        pre,
        post,
        name: name.to_owned(),
        star: rng.below(4),
        spaced: matches!(kind, Kind::Len(_)) && rng.chance(15),
    }
}

fn random_value(rng: &mut Rng, structs: &[String]) -> Kind {
    if !structs.is_empty() && rng.chance(20) {
        Kind::ByVal(rng.pick(structs).clone())
    } else {
        Kind::Val(random_sc(rng))
    }
}

fn random_buffer(rng: &mut Rng, structs: &[String]) -> Kind {
    let elem = if !structs.is_empty() && rng.chance(15) {
        Elem::St(rng.pick(structs).clone())
    } else {
        Elem::S(random_sc(rng))
    };
    Kind::Buf(elem, rng.chance(50))
}

/// The kinds of a safe kernel's parameters: groups of buffers, each closed by a length, with
/// values anywhere; at most 12.
fn safe_kinds(rng: &mut Rng, structs: &[String]) -> Vec<Kind> {
    loop {
        let groups = match rng.below(20) {
            0 | 1 => 0,
            2..=10 => 1,
            11..=16 => 2,
            _ => 3,
        };
        let mut ks = Vec::new();
        if rng.chance(15) {
            ks.push(random_value(rng, structs));
        }
        for _ in 0..groups {
            for _ in 0..rng.range(1, 3) {
                if rng.chance(15) {
                    ks.push(random_value(rng, structs));
                }
                ks.push(random_buffer(rng, structs));
            }
            if rng.chance(20) {
                ks.push(random_value(rng, structs));
            }
            ks.push(Kind::Len(*rng.pick(&LENGTHS)));
        }
        for _ in 0..rng.below(3) {
            ks.push(random_value(rng, structs));
        }
        if ks.len() <= 12 {
            return ks;
        }
    }
}

fn unsafe_kinds(rng: &mut Rng, structs: &[String]) -> Vec<Kind> {
    (0..rng.below(7))
        .map(|_| match rng.below(20) {
            0..=7 => random_buffer(rng, structs),
            8..=13 => Kind::Val(random_sc(rng)),
            14..=16 => Kind::Len(*rng.pick(&LENGTHS)),
            _ => random_value(rng, structs),
        })
        .collect()
}

/// Spells `kinds` under fresh names.
fn spell_all(
    rng: &mut Rng,
    kinds: &[Kind],
    rust_pct: usize,
    taken: &[String],
    tagged: &[String],
) -> Vec<Decl> {
    let mut names: Vec<String> = taken.to_vec();
    kinds
        .iter()
        .map(|k| {
            let n = fresh(rng, PARAM_PLAIN, PARAM_RUST, rust_pct, &mut names);
            spell(rng, &n, k, tagged)
        })
        .collect()
}

fn random_kdecl(
    rng: &mut Rng,
    name: &str,
    safe: bool,
    kinds: &[Kind],
    rust_pct: usize,
    structs: &[String],
    tagged: &[String],
) -> KDecl {
    let mut k = KDecl::new(safe, name, spell_all(rng, kinds, rust_pct, structs, tagged));
    k.launch_bounds = rng.chance(15);
    k.multiline = rng.chance(30);
    k.void = rng.chance(50);
    if !k.params.is_empty() && rng.chance(10) {
        k.comment = Some(rng.below(k.params.len()));
    }
    k
}

/// A struct with 1 to 5 fields of mixed sizes (padding), arrays, sometimes one of more than
/// 32 elements (no `Default` in Rust).
fn random_sdecl(rng: &mut Rng, name: &str, rust_pct: usize) -> SDecl {
    let mut taken = vec![name.to_owned()];
    let mut fields: Vec<FDecl> = Vec::new();
    let n = rng.range(1, 5);
    while fields.iter().map(|f| f.names.len()).sum::<usize>() < n {
        let s = random_sc(rng);
        let mut pre = spell_sc(rng, s);
        if rng.chance(5) {
            pre.insert(0, "const".into());
        }
        let count = if rng.chance(25) { 2 } else { 1 };
        let names = (0..count)
            .map(|_| {
                let f = fresh(rng, FIELD_PLAIN, FIELD_RUST, rust_pct, &mut taken);
                let array = match rng.below(100) {
                    0..=14 => Some(rng.range(1, 4)),
                    15..=17 => Some(rng.range(33, 40)),
                    _ => None,
                };
                (f, array)
            })
            .collect();
        fields.push(FDecl { pre, names });
    }
    SDecl {
        name: name.to_owned(),
        form: match rng.below(10) {
            0..=5 => Form::Plain,
            6..=8 => Form::Typedef,
            _ => Form::TypedefTag,
        },
        fields,
        attr: Attr::default(),
    }
}

/// An honest file: 0 to 2 structs, 1 to 3 kernels, safe and unsafe.
fn random_src(rng: &mut Rng, file: &str, rust_pct: usize) -> Src {
    let mut src = Src::new(file);
    src.stdint = rng.chance(40);
    let mut taken: Vec<String> = Vec::new();
    let n_structs = match rng.below(10) {
        0..=4 => 0,
        5..=7 => 1,
        _ => 2,
    };
    for _ in 0..n_structs {
        let name = fresh(rng, STRUCT_PLAIN, STRUCT_RUST, rust_pct, &mut taken);
        src.structs
            .push(SItem::Plain(random_sdecl(rng, &name, rust_pct)));
    }
    let structs = taken.clone();
    let tagged = tagged(&src);
    for _ in 0..rng.range(1, 3) {
        let name = fresh(rng, KERNEL_PLAIN, KERNEL_RUST, rust_pct, &mut taken);
        let safe = rng.chance(65);
        let kinds = if safe {
            safe_kinds(rng, &structs)
        } else {
            unsafe_kinds(rng, &structs)
        };
        let k = random_kdecl(rng, &name, safe, &kinds, rust_pct, &structs, &tagged);
        src.kernels.push(KItem::Plain(k));
    }
    src
}

/// The structs of `src` that can be written `struct N`.
fn tagged(src: &Src) -> Vec<String> {
    src.structs
        .iter()
        .filter_map(|s| match s {
            SItem::Plain(d) if d.form == Form::Plain => Some(d.name.clone()),
            _ => None,
        })
        .collect()
}

fn struct_names(src: &Src) -> Vec<String> {
    src.structs
        .iter()
        .map(|s| match s {
            SItem::Plain(d) | SItem::Decoy { decoy: d, .. } => d.name.clone(),
        })
        .collect()
}

fn kernel_names(src: &Src) -> Vec<String> {
    src.kernels
        .iter()
        .map(|k| match k {
            KItem::Plain(d) | KItem::Decoy { decoy: d, .. } | KItem::Proto { proto: d, .. } => {
                d.name.clone()
            }
        })
        .collect()
}

/// The kinds of `k` as read without a preprocessor.
fn kinds_of(k: &KDecl, structs: &[String]) -> Vec<Kind> {
    k.params
        .iter()
        .map(|d| meaning(d, None, structs).1)
        .collect()
}

/// Something other than `kinds` that a declaration could say: a `const` flipped, an element
/// or value of another type, another length type, a length and its neighbour swapped, a
/// pointer read as a 64-bit value, a parameter dropped.
fn mutate(rng: &mut Rng, kinds: &[Kind]) -> Option<Vec<Kind>> {
    if kinds.is_empty() {
        return None;
    }
    let other_sc = |rng: &mut Rng, s: Sc| loop {
        let t = random_sc(rng);
        if t != s {
            return t;
        }
    };
    for _ in 0..20 {
        let mut ks = kinds.to_vec();
        let i = rng.below(ks.len());
        let changed = match (rng.below(6), ks[i].clone()) {
            (0, Kind::Buf(e, c)) => {
                ks[i] = Kind::Buf(e, !c);
                true
            }
            (1, Kind::Buf(Elem::S(s), c)) => {
                ks[i] = Kind::Buf(Elem::S(other_sc(rng, s)), c);
                true
            }
            (1, Kind::Val(s)) => {
                ks[i] = Kind::Val(other_sc(rng, s));
                true
            }
            (2, Kind::Len(s)) => {
                let t = *rng.pick(&LENGTHS);
                ks[i] = Kind::Len(t);
                t != s
            }
            (3, _) if i + 1 < ks.len() && ks[i] != ks[i + 1] => {
                ks.swap(i, i + 1);
                true
            }
            (4, Kind::Buf(..)) => {
                ks[i] = Kind::Val(U64);
                true
            }
            (5, _) => {
                ks.remove(i);
                true
            }
            _ => false,
        };
        if changed {
            return Some(ks);
        }
    }
    None
}

fn random_file(rng: &mut Rng) -> String {
    if rng.chance(25) {
        (*rng.pick(FILE_NAMES)).to_owned()
    } else {
        format!(
            "{}.cu",
            rng.pick(&["k", "kernels", "ops", "math", "lib", "dev"])
        )
    }
}

/// Honest files with mixed names.
fn gen_random(rng: &mut Rng, n: usize, rust_pct: usize, out: &mut Vec<Case>) {
    for _ in 0..n {
        let file = random_file(rng);
        let src = random_src(rng, &file, rust_pct);
        out.push(case(
            format!("random file (names {rust_pct}% Rust-colliding)"),
            &[src],
            Why::Check,
        ));
    }
}

/// Every file name that needs a module name of its own, and pairs of files.
fn gen_files(rng: &mut Rng, out: &mut Vec<Case>) {
    for f in FILE_NAMES {
        let src = random_src(rng, f, 20);
        out.push(case(format!("file name {f:?}"), &[src], Why::Check));
    }
    for (a, b) in [
        ("K.cu", "k.cu"),
        ("a-b.cu", "a_b.cu"),
        ("_.cu", "__.cu"),
        ("std.cu", "std_.cu"),
        ("self.cu", "k_self.cu"),
        ("type.cu", "Type.cu"),
    ] {
        let srcs = [random_src(rng, a, 10), random_src(rng, b, 10)];
        out.push(case(format!("files {a:?} and {b:?}"), &srcs, Why::Check));
    }
    for _ in 0..6 {
        let a = random_file(rng);
        let mut b = random_file(rng);
        while module_name(stem(&b)) == module_name(stem(&a)) {
            b = random_file(rng);
        }
        let srcs = [random_src(rng, &a, 20), random_src(rng, &b, 20)];
        out.push(case(format!("two files {a:?}, {b:?}"), &srcs, Why::Check));
    }
}

/// Length groupings: one length for several buffers, one per buffer, values between, all
/// four types and their spellings, a plain integer that is a value, 12 parameters.
fn gen_lengths(rng: &mut Rng, out: &mut Vec<Case>) {
    let patterns = [
        "const float *x, float *y, float a, um::len32 n",
        "const int *v, um::len32 v_len, int *bins, um::len64 bins_len",
        "double *a, double *b, double *c, um::ilen64 n, float s",
        "unsigned char *img, unsigned int w, unsigned int h, um::ilen32 pixels",
        "float *x, unsigned int n, um::len32 value",
        "const short *a, um :: len64 n, const short *b, ::um::len32 m, short *c, const um::ilen32 k",
        "float v, uint8_t *x, int32_t q, um::len32 const n, long long tail",
        "const size_t *a, size_t *b, size_t c, um::len64 n",
        "float *a, um::len32 na, float *b, um::len32 nb, float *c, um::len32 nc, float *d, um::len32 nd, float *e, um::len32 ne, float *f, um::len32 nf",
        "float *a, float *b, float *c, float *d, float *e, float *f, float *g, float *h, float *i, float *j, float *k2, um::len64 n",
        // Invalid: a buffer without a length; a length before its buffer; two lengths.
        "float *x, unsigned int n",
        "um::len32 n, float *x",
        "float *x, um::len32 n, um::len32 m",
        "float *x, um::len32 n, float *y",
        // 13 parameters.
        "float *a, um::len32 na, float *b, um::len32 nb, float *c, um::len32 nc, float *d, um::len32 nd, float *e, um::len32 ne, float *f, um::len32 nf, int extra",
    ];
    for p in patterns {
        for safe in [true, false] {
            let mut src = Src::new("lengths.cu");
            src.stdint = true;
            let mut k = KDecl::new(safe, "k", decls(p));
            k.multiline = rng.chance(40);
            src.kernels.push(KItem::Plain(k));
            out.push(case(
                format!("lengths ({}): {p}", if safe { "safe" } else { "unsafe" }),
                &[src],
                Why::Check,
            ));
        }
    }
    // Contract mutations of random safe kernels: the last length made a value, a length moved
    // to the front or doubled, a buffer after the last length, a middle length made a value
    // (which merges two groups: still valid).
    for i in 0..16 {
        let mut src = random_src(rng, "contract.cu", 10);
        let structs = struct_names(&src);
        let tagged = tagged(&src);
        let mut kinds = safe_kinds(rng, &structs);
        let lens: Vec<usize> = (0..kinds.len())
            .filter(|&j| matches!(kinds[j], Kind::Len(_)))
            .collect();
        match (i % 5, lens.first(), lens.last()) {
            (0, _, Some(&l)) => {
                let Kind::Len(s) = kinds[l] else {
                    unreachable!()
                };
                kinds[l] = Kind::Val(s);
            }
            (1, _, _) => kinds.insert(0, Kind::Len(U32)),
            (2, Some(&l), _) => kinds.insert(l + 1, Kind::Len(I64)),
            (3, _, _) => kinds.push(Kind::Buf(Elem::S(F32), false)),
            (_, Some(&l), _) => {
                let Kind::Len(s) = kinds[l] else {
                    unreachable!()
                };
                kinds[l] = Kind::Val(s);
            }
            _ => kinds.push(Kind::Len(U64)),
        }
        let mut taken = kernel_names(&src);
        taken.extend(structs.iter().cloned());
        let name = fresh(rng, KERNEL_PLAIN, &[], 0, &mut taken);
        let k = random_kdecl(rng, &name, true, &kinds, 10, &structs, &tagged);
        src.kernels.push(KItem::Plain(k));
        out.push(case(
            format!("length rule mutation {}", i % 5),
            &[src],
            Why::Check,
        ));
    }
}

/// Structs with padding and arrays, honest; with `aligned`, `packed` or `#pragma pack`, which
/// are honest when they change nothing and lies otherwise; and `#if 0` struct decoys.
fn gen_structs(rng: &mut Rng, out: &mut Vec<Case>) {
    for i in 0..40 {
        let mut src = Src::new("structs.cu");
        let name = *rng.pick(&["P", "Padded", "K", "Storage", "M0", "type", "Managed", "in"]);
        let mut s = random_sdecl(rng, name, 40);
        let label;
        match i % 4 {
            0 => label = "struct with padding and arrays".to_owned(),
            1 => {
                s.form = Form::Plain;
                let n = *rng.pick(&[1usize, 2, 4, 8, 16, 32]);
                s.attr.aligned = Some(n);
                label = format!("struct with __attribute__((aligned({n})))");
            }
            2 => {
                let n = *rng.pick(&[1usize, 2, 4, 8, 16]);
                s.attr.pack = Some(n);
                label = format!("struct under #pragma pack({n})");
            }
            _ => {
                s.form = Form::Plain;
                s.attr.packed = true;
                if rng.chance(40) {
                    // All one-byte fields: packed changes nothing.
                    for f in &mut s.fields {
                        let t = *rng.pick(&[I8, U8]);
                        f.pre = spell_sc(rng, t);
                    }
                }
                label = "struct with __attribute__((packed))".to_owned();
            }
        }
        let structs = vec![name.to_owned()];
        let tagged = tagged_of(&s);
        let mut kinds = vec![
            Kind::Buf(Elem::St(name.into()), rng.chance(50)),
            Kind::Len(*rng.pick(&LENGTHS)),
        ];
        if rng.chance(60) {
            kinds.push(Kind::ByVal(name.into()));
        }
        let safe = rng.chance(70);
        if !safe && rng.chance(50) {
            kinds = vec![Kind::ByVal(name.into())];
        }
        let k = random_kdecl(rng, "use_struct", safe, &kinds, 20, &structs, &tagged);
        src.structs.push(SItem::Plain(s));
        src.kernels.push(KItem::Plain(k));
        out.push(case(label, &[src], Why::Check));
    }
    // Decoys: `#if 0` struct beside the real one in a macro; same, or fields swapped, retyped,
    // resized, renamed, added.
    for i in 0..14 {
        let mut src = Src::new("decoy_struct.cu");
        let real = random_sdecl(rng, "P", 10);
        let mut decoy = real.clone();
        decoy.form = Form::Plain;
        let mut real = real;
        real.form = Form::Plain;
        let label = match i % 6 {
            0 => "struct decoy, same fields",
            1 => {
                real.fields.push(FDecl {
                    pre: toks("double"),
                    names: vec![("extra".into(), None)],
                });
                "struct decoy without the last field"
            }
            2 => {
                let f = rng.below(decoy.fields.len());
                let t = random_sc(rng);
                decoy.fields[f].pre = spell_sc(rng, t);
                "struct decoy with a field of another type"
            }
            3 => {
                let f = rng.below(decoy.fields.len());
                decoy.fields[f].names[0].1 = Some(decoy.fields[f].names[0].1.unwrap_or(1) + 1);
                "struct decoy with a longer array"
            }
            4 => {
                decoy.fields[0].names[0].0 = "renamed".into();
                "struct decoy with a field renamed"
            }
            _ => {
                decoy.fields.reverse();
                "struct decoy with the fields reversed"
            }
        };
        let structs = vec!["P".to_owned()];
        let kinds = vec![
            Kind::Buf(Elem::St("P".into()), false),
            Kind::Len(U32),
            Kind::ByVal("P".into()),
        ];
        let k = random_kdecl(rng, "k", true, &kinds, 0, &structs, &[]);
        src.structs.push(SItem::Decoy { decoy, real });
        src.kernels.push(KItem::Plain(k));
        out.push(case(label, &[src], Why::Check));
    }
}

fn tagged_of(s: &SDecl) -> Vec<String> {
    if s.form == Form::Plain {
        vec![s.name.clone()]
    } else {
        Vec::new()
    }
}

/// `#if 0` decoys beside the real declaration in a macro: the same kinds under other names
/// (honest), or something else (a lie).
fn gen_decoys(rng: &mut Rng, out: &mut Vec<Case>) {
    for i in 0..36 {
        let mut src = random_src(rng, "decoy.cu", 15);
        let structs = struct_names(&src);
        let tagged = tagged(&src);
        let at = rng.below(src.kernels.len());
        let KItem::Plain(real) = src.kernels[at].clone() else {
            unreachable!()
        };
        let real_kinds = kinds_of(&real, &structs);
        let (decoy_kinds, label) = if i % 3 == 0 {
            (
                real_kinds.clone(),
                "#if 0 decoy with the same types, other names",
            )
        } else {
            match mutate(rng, &real_kinds) {
                Some(ks) => (ks, "#if 0 decoy that differs from the real declaration"),
                None => (
                    real_kinds.clone(),
                    "#if 0 decoy with the same types, other names",
                ),
            }
        };
        let mut taken = structs.clone();
        taken.extend(real.params.iter().map(|d| d.name.clone()));
        let mut decoy = real.clone();
        decoy.params = spell_all(rng, &decoy_kinds, 15, &taken, &tagged);
        decoy.multiline = rng.chance(30);
        src.kernels[at] = KItem::Decoy { decoy, real };
        out.push(case(label, &[src], Why::Check));
    }
}

/// `#define`s, honest and lying: each with a kernel the macro reaches, in a random file.
fn gen_macros(rng: &mut Rng, out: &mut Vec<Case>) {
    // (macro, body, the victim kernel's parameters)
    let macros: &[(&str, &str, &str)] = &[
        ("const", "", "const float *x, float *y, um::len32 n"),
        ("float", "double", "float *x, float v, um::len32 n"),
        ("double", "float", "const double *x, double *y, um::len64 n"),
        (
            "unsigned",
            "signed",
            "unsigned int *x, unsigned v, um::len32 n",
        ),
        ("uint32_t", "int", "uint32_t *x, um::len32 n"),
        (
            "int32_t",
            "float",
            "const int32_t *x, float *y, um::ilen32 n",
        ),
        ("size_t", "unsigned int", "float *x, size_t v, um::len64 n"),
        ("int64_t", "double", "int64_t *x, um::ilen64 n"),
        ("short", "int", "short *x, um::len32 n"),
        ("len32", "len64", "float *x, um::len32 n"),
        ("len64", "len32", "float *x, um::len64 n"),
        ("ilen32", "len32", "float *x, um::ilen32 n"),
        ("len32", "ilen32", "double *x, um::len32 n"),
        ("ilen64", "len64", "float *x, um::ilen64 n"),
        // A value the preprocessor turns into a length, a length into a value.
        ("uint32_t", "um::len32", "float *x, uint32_t v, um::len32 n"),
        ("um", "fake", "float *x, um::len32 n"),
        // After the `*`: a second `*`.
        ("RESTRICT", "*", "float * RESTRICT x, um::len32 n"),
        // Names: the kernel's, a struct's, a field's.
        ("victim", "victim2", "float *x, um::len32 n"),
        ("VP", "VQ", "const VP *x, um::len32 n, VP p"),
        ("vf", "vg", "const VP *x, um::len32 n"),
        // Honest ones.
        (
            "uint32_t",
            "unsigned int",
            "uint32_t *x, uint32_t v, um::len32 n",
        ),
        ("int64_t", "long long", "const int64_t *x, um::len64 n"),
        (
            "RESTRICT",
            "__restrict__",
            "float * RESTRICT x, um::len32 n",
        ),
        (
            "RESTRICT",
            "const",
            "float * RESTRICT x, const float * RESTRICT y, um::len32 n",
        ),
        ("RESTRICT", "", "float * RESTRICT x, um::len32 n"),
        ("vx", "renamed", "float *vx, const double *y, um::len32 n"),
        ("float", "float", "float *x, float v, um::len32 n"),
        // Read as types um-build does not know.
        ("CONSTQ", "const", "CONSTQ float *x, um::len32 n"),
        ("LEN", "um::len32", "float *x, LEN n"),
    ];
    for (m, body, victim) in macros {
        for _ in 0..2 {
            let mut src = random_src(rng, "macro.cu", 10);
            src.kernels.retain(|k| match k {
                KItem::Plain(d) => d.name != "victim",
                _ => true,
            });
            if *m == "um" {
                src.prefix.push(
                    "namespace fake { typedef unsigned int len32; typedef unsigned long long len64; typedef int ilen32; typedef long long ilen64; }"
                        .into(),
                );
            }
            if victim.contains("VP") {
                let vp = SDecl {
                    name: "VP".into(),
                    form: Form::Plain,
                    fields: vec![
                        FDecl {
                            pre: toks("float"),
                            names: vec![("vf".into(), None)],
                        },
                        FDecl {
                            pre: toks("double"),
                            names: vec![("vd".into(), None)],
                        },
                    ],
                    attr: Attr::default(),
                };
                src.structs.push(SItem::Plain(vp));
            }
            if *m == "short" {
                avoid_short_int(&mut src);
            }
            src.define(m, body);
            let mut k = KDecl::new(rng.chance(75), "victim", decls(victim));
            k.multiline = rng.chance(30);
            let at = rng.below(src.kernels.len() + 1);
            src.kernels.insert(at, KItem::Plain(k));
            out.push(case(format!("#define {m} {body}"), &[src], Why::Check));
        }
    }
}

/// Respells `short int` and `unsigned short int` (which `#define short int` would make
/// `int int`) as `int16_t` and `uint16_t`.
fn avoid_short_int(src: &mut Src) {
    let fix = |pre: &mut Vec<String>| {
        let joined = pre.join(" ");
        if joined.contains("short int") {
            let unsigned = joined.contains("unsigned");
            pre.retain(|t| t == "const" || t == "volatile");
            pre.push(if unsigned { "uint16_t" } else { "int16_t" }.into());
        }
    };
    for s in &mut src.structs {
        if let SItem::Plain(d) = s {
            for f in &mut d.fields {
                fix(&mut f.pre);
            }
        }
    }
    for k in &mut src.kernels {
        if let KItem::Plain(d) = k {
            for p in &mut d.params {
                fix(&mut p.pre);
            }
        }
    }
}

/// Typedefs in the real declaration (in a macro), with an `#if 0` decoy that spells the type
/// out: honest when the typedef names that type, a lie otherwise.
fn gen_typedefs(rng: &mut Rng, out: &mut Vec<Case>) {
    // (typedef name, its type, the real parameters, the decoy's)
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "real_t",
            "float",
            "real_t *x, um::len32 n",
            "float *x, um::len32 n",
        ),
        (
            "real_t",
            "double",
            "real_t *x, um::len32 n",
            "float *x, um::len32 n",
        ),
        (
            "real_t",
            "double",
            "const real_t *x, um::len64 n",
            "const double *x, um::len64 n",
        ),
        (
            "cfloat",
            "const float",
            "cfloat *x, um::len32 n",
            "float *x, um::len32 n",
        ),
        (
            "cfloat",
            "const float",
            "cfloat *x, um::len32 n",
            "const float *x, um::len32 n",
        ),
        (
            "count_t",
            "um::len32",
            "float *x, count_t v, um::len32 n",
            "float *x, unsigned int v, um::len32 n",
        ),
        (
            "count_t",
            "unsigned int",
            "float *x, count_t n",
            "float *x, um::len32 n",
        ),
        (
            "count_t",
            "um::len64",
            "float *x, count_t n",
            "float *x, um::len64 n",
        ),
        (
            "idx_t",
            "long long",
            "int *x, idx_t v, um::ilen64 n",
            "int *x, int64_t v, um::ilen64 n",
        ),
        (
            "byte_t",
            "unsigned char",
            "byte_t *x, um::len32 n",
            "signed char *x, um::len32 n",
        ),
        (
            "byte_t",
            "unsigned char",
            "byte_t *x, um::len32 n",
            "uint8_t *x, um::len32 n",
        ),
        (
            "pair_t",
            "P",
            "const pair_t *x, um::len32 n, pair_t p",
            "const P *x, um::len32 n, P p",
        ),
    ];
    for (name, ty, real, decoy) in cases {
        for safe in [true, false] {
            let mut src = Src::new("typedef.cu");
            if ty.contains('P') {
                src.structs.push(SItem::Plain(random_sdecl(rng, "P", 0)));
            }
            src.typedef(name, ty);
            let real = KDecl::new(safe, "k", decls(real));
            let decoy = KDecl::new(safe, "k", decls(decoy));
            src.kernels.push(KItem::Decoy { decoy, real });
            out.push(case(format!("typedef {ty} {name}"), &[src], Why::Check));
        }
    }
    // A typedef in the text itself: a type um-build does not read.
    let mut src = Src::new("typedef_text.cu");
    src.typedef("real_t", "float");
    src.kernels.push(KItem::Plain(KDecl::new(
        true,
        "k",
        decls("real_t *x, um::len32 n"),
    )));
    out.push(case("typedef read from the text", &[src], Why::Check));
}

/// Prototypes in the `.cu`, the definition in a `.cuh` it includes: the same types under other
/// names (honest: the launcher fills the positions both agree on), or other types or
/// positions (C++ refuses two extern "C" declarations that differ).
fn gen_prototypes(rng: &mut Rng, out: &mut Vec<Case>) {
    for i in 0..30 {
        let mut src = random_src(rng, "proto.cu", 15);
        let structs = struct_names(&src);
        let tagged = tagged(&src);
        let n = src.kernels.len();
        let lie_at = (i % 2 == 1).then(|| rng.below(n));
        for j in 0..n {
            let KItem::Plain(def) = src.kernels[j].clone() else {
                unreachable!()
            };
            let def_kinds = kinds_of(&def, &structs);
            let proto_kinds = if lie_at == Some(j) {
                mutate(rng, &def_kinds).unwrap_or_else(|| vec![Kind::Val(I32)])
            } else {
                def_kinds
            };
            let mut proto = def.clone();
            let mut taken = structs.clone();
            taken.extend(def.params.iter().map(|d| d.name.clone()));
            proto.params = spell_all(rng, &proto_kinds, 15, &taken, &tagged);
            if lie_at != Some(j) {
                // `int64_t` is `long`, `long long` another C type of the same size: C++
                // refuses two extern "C" declarations that differ so. Spell those as the
                // definition does.
                for (p, d) in proto.params.iter_mut().zip(&def.params) {
                    if c_type(p) != c_type(d) {
                        p.pre = d.pre.clone();
                    }
                }
            }
            proto.multiline = rng.chance(30);
            src.kernels[j] = KItem::Proto { proto, def };
        }
        let label = if lie_at.is_some() {
            "prototype that disagrees with the .cuh's definition"
        } else {
            "prototype that agrees by position with the .cuh's definition"
        };
        out.push(case(label, &[src], Why::Cxx));
    }
}

/// The C type a parameter declares, where it matters to C++ but not to um-build: 64-bit
/// integers spelled `int64_t`, `uint64_t` and `size_t` are `long` and `unsigned long`, the
/// others `long long`; a `volatile` pointee.
fn c_type(d: &Decl) -> String {
    let mut core: Vec<&str> = d
        .pre
        .iter()
        .map(String::as_str)
        .filter(|t| !matches!(*t, "const" | "volatile" | "struct"))
        .collect();
    if core.first() == Some(&"::") {
        core.remove(0);
    }
    let ty = match core.join(" ").as_str() {
        "int64_t" => "long".into(),
        "uint64_t" | "size_t" => "unsigned long".into(),
        other => sc_of(other, false).map_or_else(|| other.to_owned(), |s| format!("{s:?}")),
    };
    // `volatile` is part of a pointee's type too (um-build reads it as writable either way).
    let volatile = d.post.is_some() && d.pre.iter().any(|t| t == "volatile");
    format!("{}{ty}", if volatile { "volatile " } else { "" })
}

/// Names Rust cannot spell, or that meet once mangled, put in an honest file.
fn gen_bad_names(rng: &mut Rng, out: &mut Vec<Case>) {
    let bad = ["self", "Self", "super", "crate", "_"];
    for i in 0..30 {
        let mut src = random_src(rng, "names.cu", 10);
        let structs = struct_names(&src);
        let tagged = tagged(&src);
        let label = match i % 10 {
            0 | 1 => {
                let n = bad[rng.below(bad.len())];
                let kinds = safe_kinds(rng, &structs);
                let mut k = random_kdecl(rng, "k_bad_param", true, &kinds, 0, &structs, &tagged);
                if k.params.is_empty() {
                    k.params.push(spell(rng, "v", &Kind::Val(F32), &[]));
                }
                let p = rng.below(k.params.len());
                k.params[p].name = n.into();
                src.kernels.push(KItem::Plain(k));
                format!("parameter named {n}")
            }
            2 => {
                let n = bad[rng.below(bad.len())];
                let kinds = unsafe_kinds(rng, &structs);
                let safe = rng.chance(50);
                src.kernels.push(KItem::Plain(random_kdecl(
                    rng, n, safe, &kinds, 0, &structs, &tagged,
                )));
                format!("kernel named {n}")
            }
            3 => {
                let n = *rng.pick(&[
                    "self", "Self", "super", "crate", "_", "f32", "u8", "usize", "str", "i128",
                    "u64",
                ]);
                let s = random_sdecl(rng, n, 0);
                src.structs.push(SItem::Plain(s));
                format!("struct named {n}")
            }
            4 => {
                let n = bad[rng.below(bad.len())];
                let mut s = random_sdecl(rng, "Q", 0);
                s.fields[0].names[0].0 = n.into();
                src.structs.push(SItem::Plain(s));
                format!("field named {n}")
            }
            5 => {
                let (a, b) = *rng.pick(&[
                    ("stream", "stream_"),
                    ("config", "config_"),
                    ("threads", "threads_"),
                    ("PTX", "PTX_"),
                    ("__um", "__um_"),
                ]);
                let kinds = [
                    Kind::Buf(Elem::S(F32), false),
                    Kind::Val(F32),
                    Kind::Len(U32),
                ];
                let mut k = random_kdecl(rng, "k_pair", true, &kinds, 0, &structs, &tagged);
                k.params[0].name = a.into();
                k.params[1].name = b.into();
                src.kernels.push(KItem::Plain(k));
                format!("parameters {a} and {b}")
            }
            6 => {
                let mut s = random_sdecl(rng, "Q", 0);
                s.fields = vec![
                    FDecl {
                        pre: toks("float"),
                        names: vec![("config".into(), None)],
                    },
                    FDecl {
                        pre: toks("int"),
                        names: vec![("config_".into(), None)],
                    },
                ];
                src.structs.push(SItem::Plain(s));
                "fields config and config_".into()
            }
            7 => {
                let kinds = [Kind::Buf(Elem::S(F32), false), Kind::Len(U32)];
                let names = kernel_names(&src);
                let base = names[0].clone();
                let safe = matches!(&src.kernels[0], KItem::Plain(d) if d.safe);
                src.kernels.push(KItem::Plain(random_kdecl(
                    rng,
                    &format!("{base}_with"),
                    false,
                    &kinds,
                    0,
                    &structs,
                    &tagged,
                )));
                format!(
                    "kernels {base} ({}) and {base}_with",
                    if safe { "safe" } else { "unsafe" }
                )
            }
            8 => {
                let (a, b) = *rng.pick(&[
                    ("PTX", "PTX_"),
                    ("stream", "stream_"),
                    ("KERNEL", "KERNEL_"),
                ]);
                src.kernels.clear();
                for n in [a, b] {
                    let kinds = unsafe_kinds(rng, &structs);
                    src.kernels.push(KItem::Plain(random_kdecl(
                        rng, n, false, &kinds, 0, &structs, &tagged,
                    )));
                }
                format!("kernels {a} and {b}")
            }
            _ => {
                src = Src::new("names.cu");
                for n in ["PTX", "PTX_"] {
                    src.structs.push(SItem::Plain(random_sdecl(rng, n, 0)));
                }
                let kinds = [Kind::Buf(Elem::S(F32), false), Kind::Len(U32)];
                src.kernels.push(KItem::Plain(random_kdecl(
                    rng,
                    "k",
                    true,
                    &kinds,
                    0,
                    &[],
                    &[],
                )));
                "structs PTX and PTX_".into()
            }
        };
        out.push(case(label, &[src], Why::Check));
    }
}

/// Names of the prelude's variants as parameter names (`None`, `Some`, `Ok`, `Err`): C++
/// accepts them, and um-build's rules neither rename nor refuse them. When this test was
/// written, um-build generated `fn k(.., None: f32)`, which Rust reads as a pattern for
/// `Option::None` (E0308; `Some`, `Ok`, `Err`: E0530, "function parameters cannot shadow tuple
/// variants"): these cases fail until um-build renames such names or refuses them. If it
/// refuses them, they become `Invalid` here.
fn gen_prelude_names(rng: &mut Rng, out: &mut Vec<Case>) {
    for n in ["None", "Some", "Ok", "Err"] {
        let mut src = Src::new("prelude.cu");
        let kinds = [
            Kind::Buf(Elem::S(F32), false),
            Kind::Val(F32),
            Kind::Len(U32),
        ];
        let mut k = random_kdecl(rng, "k", true, &kinds, 0, &[], &[]);
        k.params[1].name = n.into();
        src.kernels.push(KItem::Plain(k));
        out.push(case(format!("parameter named {n}"), &[src], Why::Check));
    }
}

/// Forms um-build refuses, and a few it reads, written out.
fn gen_forms(out: &mut Vec<Case>) {
    let h = "#include \"um.cuh\"\n";
    let refused: &[(&str, &str, Expect, usize)] = &[
        (
            "no extern \"C\"",
            "__global__ void k(float *x, um::len32 n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "extern \"C\" block",
            "extern \"C\" {\n__global__ void k(float *x, unsigned n) {}\n}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "template",
            "template <typename T> __global__ void k(T *x, unsigned n) {}\ntemplate __global__ void k<float>(float *, unsigned);",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "static kernel",
            "static __global__ void k(float *x) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "unnamed parameter",
            "extern \"C\" __global__ void k(float *, unsigned n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "reference",
            "extern \"C\" __global__ void k(float &x) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "array parameter",
            "extern \"C\" __global__ void k(float x[4], unsigned n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "default argument",
            "extern \"C\" __global__ void k(float *x, unsigned n = 4) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "pointer to pointer",
            "UM_SAFE_KERNEL void k(float **x, um::len32 n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "pointer to a length",
            "UM_SAFE_KERNEL void k(float *x, um::len32 *n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "non-void kernel",
            "extern \"C\" __global__ int k() { return 0; }",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "__launch_bounds__ before void",
            "extern \"C\" __global__ __launch_bounds__(128) void k(float *x) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "declared twice",
            "UM_SAFE_KERNEL void k(float *x, um::len32 n);\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "13 parameters, unsafe",
            "extern \"C\" __global__ void k(int a, int b, int c, int d, int e, int f, int g, int h, int i, int j, int l, int m, int o) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "struct with a pointer field",
            "struct P { float *p; };\nextern \"C\" __global__ void k(P p) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "struct with a bit-field",
            "struct P { unsigned int a : 3; };\nextern \"C\" __global__ void k(P p) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "nested struct",
            "struct A { float a; };\nstruct B { A a; };\nextern \"C\" __global__ void k(B b) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "array length from a macro",
            "#define N 4\nstruct P { float a[N]; };\nextern \"C\" __global__ void k(P p) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "struct defined in #if and #else",
            "#if 1\nstruct R { float a[8]; };\n#else\nstruct R { float a[2]; };\n#endif\nUM_SAFE_KERNEL void k(R *x, um::len32 n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "struct with a method",
            "struct P { float a; __device__ float get() const { return a; } };\nextern \"C\" __global__ void k(P p) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "struct with alignas",
            "struct alignas(16) P { float a; };\nextern \"C\" __global__ void k(P p) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "struct with __align__",
            "struct __align__(16) P { float a; };\nextern \"C\" __global__ void k(P *x, um::len32 n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "field with aligned attribute",
            "struct P { float a __attribute__((aligned(16))); };\nextern \"C\" __global__ void k(P p) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type char",
            "extern \"C\" __global__ void k(char *x, unsigned n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type long",
            "extern \"C\" __global__ void k(long v) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type unsigned long",
            "extern \"C\" __global__ void k(unsigned long *x) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type long int",
            "extern \"C\" __global__ void k(long int v) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type bool",
            "extern \"C\" __global__ void k(bool v) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type float2",
            "extern \"C\" __global__ void k(float2 *x, unsigned n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type ptrdiff_t",
            "extern \"C\" __global__ void k(ptrdiff_t v) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type __half",
            "#include <cuda_fp16.h>\nUM_SAFE_KERNEL void k(__half *x, um::len32 n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "type wchar_t",
            "extern \"C\" __global__ void k(wchar_t v) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "length type through using",
            "using um::len32;\nUM_SAFE_KERNEL void k(float *x, len32 n) {}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "dynamic shared memory in a safe kernel",
            "extern __shared__ float um_diff_sm[];\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {\n    um_diff_sm[threadIdx.x] = 1.0f;\n    __syncthreads();\n    if (threadIdx.x < n) x[threadIdx.x] = um_diff_sm[threadIdx.x ^ 1];\n}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "dynamic shared memory beside a safe kernel",
            "extern __shared__ float um_diff_sm[];\nextern \"C\" __global__ void d(float *x) { x[threadIdx.x] = um_diff_sm[threadIdx.x]; }\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}",
            Expect::Invalid(Why::Reading),
            2,
        ),
        // Lies about which kernels exist.
        (
            "kernel only in #if 0",
            "#if 0\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}\n#endif",
            Expect::Lying(Why::Check),
            1,
        ),
        (
            "prototype without a definition",
            "UM_SAFE_KERNEL void k(float *x, um::len32 n);",
            Expect::Lying(Why::Reading),
            1,
        ),
        (
            // Refused by the reading, before nvcc; hidden in a macro, it is the
            // check's (the case after this one).
            "kernel in a namespace",
            "namespace ns {\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}\n}",
            Expect::Invalid(Why::Reading),
            1,
        ),
        (
            "C++ function named like the kernel",
            "#if 0\nUM_SAFE_KERNEL void k(const float *x, um::len32 n) {}\n#endif\n#define REAL extern \"C\" __global__ void k(float *x, um::len32 n)\nnamespace hidden { REAL { for (auto i : um::indices(n)) x[i] = 1.0f; } }\nvoid k(const float *x, um::len32 n) {}",
            Expect::Lying(Why::Check),
            1,
        ),
        (
            "declaration hidden by a comment opened in a string",
            "__device__ const char *a = \"/*\";\nUM_SAFE_KERNEL void k(float *x, um::len32 n) { for (auto i : um::indices(n)) x[i] = 1.0f; }\n__device__ const char *b = \"*/; UM_SAFE_KERNEL void k(const float *x, um::len32 n) {}\";",
            Expect::Lying(Why::Check),
            1,
        ),
        (
            "own um::len32",
            "#define OWN namespace um { struct len32 { unsigned value; }; }\nOWN;\nUM_SAFE_KERNEL void k(float *x, um::len32 n) {}",
            Expect::Lying(Why::Cxx),
            1,
        ),
    ];
    for (label, text, expect, n) in refused {
        out.push(Case {
            label: format!("form: {label}"),
            files: vec![("k.cu".into(), format!("{h}{text}\n"))],
            reading: Vec::new(),
            compiled: Vec::new(),
            expect: *expect,
            decls: *n,
        });
    }
    // A struct defined in an included header only: the text has no `struct P`.
    out.push(Case {
        label: "form: struct defined in an included header".into(),
        files: vec![
            (
                "k.cu".into(),
                format!("{h}#include \"p.cuh\"\nextern \"C\" __global__ void k(P p) {{}}\n"),
            ),
            (
                "p.cuh".into(),
                "#pragma once\nstruct P { float a; };\n".into(),
            ),
        ],
        reading: Vec::new(),
        compiled: Vec::new(),
        expect: Expect::Invalid(Why::Reading),
        decls: 1,
    });
    // A prototype whose `int64_t` (`long`) the definition spells `long long`: the same to
    // um-build, two C types to C++.
    out.push(Case {
        label: "form: prototype with int64_t, definition with long long".into(),
        files: vec![
            ("k.cu".into(), format!("{h}#include <stdint.h>\nUM_SAFE_KERNEL void k(float *x, int64_t v, um::len32 n);\n#include \"k_impl.cuh\"\n")),
            ("k_impl.cuh".into(), "#pragma once\n#include \"um.cuh\"\nUM_SAFE_KERNEL void k(float *x, long long v, um::len32 n) {}\n".into()),
        ],
        reading: Vec::new(),
        compiled: Vec::new(),
        expect: Expect::Invalid(Why::Cxx),
        decls: 1,
    });
    // Forms it reads, through the model: dynamic shared memory in an unsafe kernel, empty
    // parameter lists, `__launch_bounds__(256, 2)`, a macro after the kernels.
    let mut src = Src::new("forms.cu");
    src.prefix
        .push("extern __shared__ float um_diff_sm[];".into());
    let mut k = KDecl::new(false, "dynamic", decls("float *x, unsigned n"));
    k.body = Some("{\n    um_diff_sm[threadIdx.x] = 1.0f;\n    __syncthreads();\n    if (threadIdx.x < n) x[threadIdx.x] = um_diff_sm[threadIdx.x ^ 1];\n}".into());
    src.kernels.push(KItem::Plain(k));
    src.kernels
        .push(KItem::Plain(KDecl::new(false, "empty_unsafe", Vec::new())));
    // The safe kernel in a file of its own: a file with a safe kernel declares no dynamic
    // shared memory.
    let mut empty = Src::new("empty.cu");
    let mut e = KDecl::new(true, "empty", Vec::new());
    e.void = true;
    empty.kernels.push(KItem::Plain(e));
    out.push(case(
        "forms: dynamic shared in an unsafe kernel, empty lists",
        &[src, empty],
        Why::Check,
    ));
    let mut src = Src::new("bounds.cu");
    let mut k = KDecl::new(true, "k", decls("const float *x, float *y, um::len32 n"));
    k.launch_bounds = true;
    src.kernels.push(KItem::Plain(k));
    src.kernels.push(KItem::Plain(KDecl::new(
        true,
        "k2",
        decls("double *x, um::len64 n"),
    )));
    let mut c = case(
        "forms: __launch_bounds__, a macro after the last kernel",
        &[src],
        Why::Check,
    );
    c.files[0].1.push_str("#define k2 k3\n");
    out.push(c);
}

/// Every case, in a fixed order.
fn generate() -> Vec<Case> {
    let mut rng = Rng(0x00d1_ff18_5eed_0018);
    let mut out = Vec::new();
    gen_random(&mut rng, 70, 10, &mut out);
    gen_random(&mut rng, 30, 60, &mut out);
    gen_files(&mut rng, &mut out);
    gen_lengths(&mut rng, &mut out);
    gen_structs(&mut rng, &mut out);
    gen_decoys(&mut rng, &mut out);
    gen_macros(&mut rng, &mut out);
    gen_typedefs(&mut rng, &mut out);
    gen_prototypes(&mut rng, &mut out);
    gen_bad_names(&mut rng, &mut out);
    gen_prelude_names(&mut rng, &mut out);
    gen_forms(&mut out);
    out
}

// ----------------------------------------------------------------------------------------------
// The generated Rust: what it must be, and what it is.

#[derive(Clone, Debug, PartialEq, Eq)]
struct GenStruct {
    name: String,
    fields: Vec<String>,
    default: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct GenLen {
    name: String,
    ty: String,
    /// The C name, as a string literal.
    c: String,
    /// The buffers `common_len` lists: (C name literal, Rust expression).
    buffers: Vec<(String, String)>,
    rest: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
struct GenFn {
    name: String,
    is_unsafe: bool,
    generics: String,
    params: Vec<String>,
    kernel_const: Option<String>,
    default_config: Option<String>,
    calls: Option<String>,
    threads: bool,
    lens: Vec<GenLen>,
    /// `launch_ptx`'s first three arguments.
    launch: Vec<String>,
    tuple: Vec<String>,
    /// A `_node` launcher's node type (`launch_ptx_node`'s turbofish) and scalar positions.
    scalars: Option<String>,
    positions: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
struct GenModule {
    name: String,
    ptx: String,
    structs: Vec<GenStruct>,
    fns: Vec<GenFn>,
}

fn quoted(s: &str) -> String {
    format!("{s:?}")
}

fn elem_rust(e: &Elem) -> String {
    match e {
        Elem::S(s) => s.rust().to_owned(),
        Elem::St(n) => format!("self::{}", rust_ident(n).unwrap()),
    }
}

/// The module um-build must generate for an honest file.
fn expected(u: &Unit) -> GenModule {
    let module = module_name(stem(&u.file));
    let structs = u
        .structs
        .iter()
        .map(|s| GenStruct {
            name: rust_ident(&s.name).unwrap(),
            fields: s
                .fields
                .iter()
                .map(|f| {
                    let ty = f.ty.unwrap().rust();
                    let ty = match f.array {
                        Some(n) => format!("[{ty}; {n}]"),
                        None => ty.to_owned(),
                    };
                    format!("{}: {ty}", rust_ident(&f.name).unwrap())
                })
                .collect(),
            default: s.fields.iter().all(|f| f.array.unwrap_or(0) <= 32),
        })
        .collect();
    let mut fns = Vec::new();
    for k in &u.kernels {
        let r = |c: &str| rust_ident(c).unwrap();
        let buffers: Vec<&(String, Kind)> = k
            .params
            .iter()
            .filter(|(_, t)| matches!(t, Kind::Buf(..)))
            .collect();
        let generics = format!(
            "<'s, K: __um::StreamKind{}>",
            (0..buffers.len())
                .map(|i| format!(", M{i}: __um::Storage"))
                .collect::<String>()
        );
        let mut buffer_index = 0;
        let mut param = |c: &str, t: &Kind, safe: bool| -> Option<String> {
            let ty = match t {
                Kind::Buf(e, constant) => {
                    let i = buffer_index;
                    buffer_index += 1;
                    format!(
                        "&{}__um::Managed<[{}], __um::StreamOwned<'s, K>, M{i}>",
                        if *constant { "" } else { "mut " },
                        elem_rust(e)
                    )
                }
                Kind::Val(s) => s.rust().to_owned(),
                Kind::Len(_) if safe => return None,
                Kind::Len(s) => s.rust().to_owned(),
                Kind::ByVal(n) => format!("self::{}", r(n)),
                Kind::Other(_) => unreachable!(),
            };
            Some(format!("{}: {ty}", r(c)))
        };
        let own: Vec<String> = k
            .params
            .iter()
            .filter_map(|(c, t)| param(c, t, k.safe))
            .collect();
        let tuple: Vec<String> = k
            .params
            .iter()
            .map(|(c, t)| match t {
                Kind::ByVal(_) => format!("__um::ByValue({})", r(c)),
                _ => r(c),
            })
            .collect();
        let stream = "stream: &__um::Stream<'s, K>".to_owned();
        if k.safe {
            let with = r(&format!("{}_with", k.name));
            let args: String = own
                .iter()
                .map(|p| format!(", {}", p.split(':').next().unwrap()))
                .collect();
            let default_config = if buffers.is_empty() {
                "__um::Linear::new(1, 1)?".to_owned()
            } else {
                format!(
                    "__um::Linear::for_len(stream, [{}].into_iter().max().unwrap_or(0))",
                    buffers
                        .iter()
                        .map(|(c, _)| format!("{}.len()", r(c)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            fns.push(GenFn {
                name: r(&k.name),
                generics: generics.clone(),
                params: [vec![stream.clone()], own.clone()].concat(),
                default_config: Some(default_config),
                calls: Some(format!("self::{with}(stream, config{args})")),
                ..GenFn::default()
            });
            let mut lens = Vec::new();
            let mut group: Vec<(String, String)> = Vec::new();
            for (c, t) in &k.params {
                match t {
                    Kind::Buf(..) => group.push((quoted(c), format!("{}.len()", r(c)))),
                    Kind::Len(s) => lens.push(GenLen {
                        name: r(c),
                        ty: s.rust().to_owned(),
                        c: quoted(c),
                        buffers: std::mem::take(&mut group),
                        rest: vec!["KERNEL".into(), "threads".into()],
                    }),
                    _ => {}
                }
            }
            // The `_node` form: the capture stream, the same buffers owned by it, and the node
            // of the parameters that are neither buffers nor lengths.
            let scalars: Vec<(usize, String)> = k
                .params
                .iter()
                .enumerate()
                .filter_map(|(i, (_, t))| match t {
                    Kind::Val(s) => Some((i, s.rust().to_owned())),
                    Kind::ByVal(n) => Some((i, format!("self::{}", r(n)))),
                    _ => None,
                })
                .collect();
            let node_ty = match scalars.as_slice() {
                [] => "()".to_owned(),
                [(_, t)] => format!("({t},)"),
                many => format!(
                    "({})",
                    many.iter()
                        .map(|(_, t)| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let node_generics = format!(
                "<'s{}>",
                (0..buffers.len())
                    .map(|i| format!(", M{i}: __um::Storage"))
                    .collect::<String>()
            );
            let node_params: Vec<String> = own
                .iter()
                .map(|p| p.replace("StreamOwned<'s, K>", "StreamOwned<'s, __um::Capture>"))
                .collect();
            fns.push(GenFn {
                name: with,
                generics,
                params: [vec![stream, "config: __um::Linear".to_owned()], own].concat(),
                kernel_const: Some(quoted(&k.name)),
                threads: !lens.is_empty(),
                lens: lens.clone(),
                launch: vec!["self::PTX".into(), "KERNEL".into(), "config.into()".into()],
                tuple: tuple.clone(),
                ..GenFn::default()
            });
            fns.push(GenFn {
                name: r(&format!("{}_node", k.name)),
                generics: node_generics,
                params: [
                    vec![
                        "stream: &__um::Stream<'s, __um::Capture>".to_owned(),
                        "config: __um::Linear".to_owned(),
                    ],
                    node_params,
                ]
                .concat(),
                kernel_const: Some(quoted(&k.name)),
                threads: !lens.is_empty(),
                lens,
                launch: vec!["self::PTX".into(), "KERNEL".into(), "config.into()".into()],
                tuple,
                scalars: Some(node_ty),
                positions: Some(format!(
                    "&[{}]",
                    scalars
                        .iter()
                        .map(|(i, _)| i.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                ..GenFn::default()
            });
        } else {
            fns.push(GenFn {
                name: r(&k.name),
                is_unsafe: true,
                generics,
                params: [vec![stream, "config: __um::LaunchConfig".to_owned()], own].concat(),
                launch: vec!["self::PTX".into(), quoted(&k.name), "config".into()],
                tuple,
                ..GenFn::default()
            });
        }
    }
    GenModule {
        // The checked copy's path; the caller puts its text, as a literal, in its place.
        ptx: format!("um-ptx/{}.ptx", module.trim_start_matches("r#")),
        name: module,
        structs,
        fns,
    }
}

/// Splits at the commas outside `<>`, `[]` and `()`; trims; drops empty pieces.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    let mut prev = ' ';
    for c in s.chars() {
        match c {
            '<' | '[' | '(' => depth += 1,
            // `->` is no bracket.
            '>' if prev == '-' => {}
            '>' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                prev = c;
                continue;
            }
            _ => {}
        }
        cur.push(c);
        prev = c;
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The text inside the parenthesis that opens at `open` (a byte offset of `(`).
fn inside(s: &str, open: usize) -> Option<&str> {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&s[open + 1..open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

fn parse_signature(line: &str) -> Option<GenFn> {
    let (is_unsafe, rest) = match line.strip_prefix("pub unsafe fn ") {
        Some(r) => (true, r),
        None => (false, line.strip_prefix("pub fn ")?),
    };
    let lt = rest.find('<')?;
    let gt = lt + rest[lt..].find('>')?;
    let open = gt + 1;
    if !rest[open..].starts_with('(') {
        return None;
    }
    Some(GenFn {
        name: rest[..lt].to_owned(),
        is_unsafe,
        generics: rest[lt..=gt].to_owned(),
        params: split_top(inside(rest, open)?),
        ..GenFn::default()
    })
}

/// `let n: u32 = __um::codegen::count(KERNEL, "n", __um::codegen::common_len(KERNEL, &[("x", x.len())])?, threads)?;`
fn parse_len(line: &str) -> Option<GenLen> {
    let rest = line.strip_prefix("let ")?;
    let (name, rest) = rest.split_once(": ")?;
    let (ty, rest) = rest.split_once(" = ")?;
    let args = split_top(
        rest.strip_prefix("__um::codegen::count(")?
            .strip_suffix(")?;")?,
    );
    let [kernel, c, common, threads] = args.as_slice() else {
        return None;
    };
    let common = split_top(
        common
            .strip_prefix("__um::codegen::common_len(")?
            .strip_suffix(")?")?,
    );
    let [kernel2, list] = common.as_slice() else {
        return None;
    };
    let mut buffers = Vec::new();
    for item in split_top(list.strip_prefix("&[")?.strip_suffix(']')?) {
        let pair = split_top(item.strip_prefix('(')?.strip_suffix(')')?);
        let [b, e] = pair.as_slice() else {
            return None;
        };
        buffers.push((b.clone(), e.clone()));
    }
    let rest = if kernel == kernel2 {
        vec![kernel.clone(), threads.clone()]
    } else {
        vec![kernel.clone(), kernel2.clone(), threads.clone()]
    };
    Some(GenLen {
        name: name.to_owned(),
        ty: ty.to_owned(),
        c: c.clone(),
        buffers,
        rest,
    })
}

/// Reads the generated file back: its modules, their structs and launchers. Line-oriented,
/// as `generate.rs` writes it.
fn parse_generated(code: &str) -> Result<Vec<GenModule>, String> {
    let mut modules: Vec<GenModule> = Vec::new();
    let mut module: Option<GenModule> = None;
    let mut st: Option<GenStruct> = None;
    let mut f: Option<GenFn> = None;
    let mut default = false;
    for (no, line) in code.lines().enumerate() {
        let bad = || format!("line {}: cannot read `{line}`", no + 1);
        if let Some(s) = &mut st {
            if line == "}" {
                module
                    .as_mut()
                    .ok_or_else(bad)?
                    .structs
                    .push(st.take().unwrap());
            } else if let Some(field) = line.trim().strip_prefix("pub ") {
                s.fields.push(field.trim_end_matches(',').to_owned());
            }
            continue;
        }
        if let Some(g) = &mut f {
            let t = line.trim();
            if line == "}" {
                module.as_mut().ok_or_else(bad)?.fns.push(f.take().unwrap());
            } else if let Some(k) = t.strip_prefix("const KERNEL: &str = ") {
                g.kernel_const = Some(k.trim_end_matches(';').to_owned());
            } else if let Some(c) = t.strip_prefix("let config = ") {
                g.default_config = Some(c.trim_end_matches(';').to_owned());
            } else if t == "let threads = config.total_threads();" {
                g.threads = true;
            } else if t.starts_with("let ") {
                g.lens.push(parse_len(t).ok_or_else(bad)?);
            } else if t.starts_with("self::") {
                g.calls = Some(t.to_owned());
            } else if let Some(at) = t.find("stream.launch_ptx_node::<_, ") {
                let from = at + "stream.launch_ptx_node::<_, ".len();
                let end = from + t[from..].find(">(").ok_or_else(bad)?;
                g.scalars = Some(t[from..end].to_owned());
                let args = split_top(inside(t, end + 1).ok_or_else(bad)?);
                let [first @ .., tuple, positions] = args.as_slice() else {
                    return Err(bad());
                };
                g.launch = first.to_vec();
                g.positions = Some(positions.clone());
                let tuple = tuple
                    .strip_prefix('(')
                    .and_then(|x| x.strip_suffix(')'))
                    .ok_or_else(bad)?;
                g.tuple = split_top(tuple);
            } else if let Some(at) = t.find("stream.launch_ptx(") {
                let open = at + "stream.launch_ptx".len();
                let args = split_top(inside(t, open).ok_or_else(bad)?);
                let (tuple, first) = args.split_last().ok_or_else(bad)?;
                g.launch = first.to_vec();
                let tuple = tuple
                    .strip_prefix('(')
                    .and_then(|x| x.strip_suffix(')'))
                    .ok_or_else(bad)?;
                g.tuple = split_top(tuple);
            }
            continue;
        }
        if let Some(m) = &mut module {
            if line == "}" {
                modules.push(module.take().unwrap());
            } else if let Some(p) = line.strip_prefix("pub static PTX: &str = ") {
                // The checked PTX as a string literal, on one line.
                m.ptx = p.strip_suffix(';').ok_or_else(bad)?.to_owned();
            } else if line.starts_with("#[derive(") {
                default = line.contains("Default");
            } else if let Some(s) = line.strip_prefix("pub struct ") {
                st = Some(GenStruct {
                    name: s.strip_suffix(" {").ok_or_else(bad)?.to_owned(),
                    fields: Vec::new(),
                    default,
                });
            } else if line.starts_with("pub fn ") || line.starts_with("pub unsafe fn ") {
                f = Some(parse_signature(line).ok_or_else(bad)?);
            }
            continue;
        }
        if let Some(m) = line.strip_prefix("pub mod ") {
            module = Some(GenModule {
                name: m.strip_suffix(" {").ok_or_else(bad)?.to_owned(),
                ..GenModule::default()
            });
        }
    }
    if module.is_some() || st.is_some() || f.is_some() {
        return Err("the generated file ends inside an item".into());
    }
    Ok(modules)
}

/// Differences between what was generated and what the truth implies, as text.
fn compare(want: &[GenModule], got: &[GenModule]) -> Vec<String> {
    let mut diffs = Vec::new();
    let names = |ms: &[GenModule]| ms.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
    if names(want) != names(got) {
        diffs.push(format!(
            "modules: want {:?}, got {:?}",
            names(want),
            names(got)
        ));
        return diffs;
    }
    for (w, g) in want.iter().zip(got) {
        if w.ptx != g.ptx {
            diffs.push(format!(
                "mod {}: the embedded PTX is not the checked copy in um-ptx/",
                w.name
            ));
        }
        if w.structs != g.structs {
            diffs.push(format!(
                "mod {}: structs:\n  want {:?}\n  got  {:?}",
                w.name, w.structs, g.structs
            ));
        }
        if w.fns.len() != g.fns.len() {
            diffs.push(format!(
                "mod {}: launchers: want {:?}, got {:?}",
                w.name,
                w.fns.iter().map(|f| &f.name).collect::<Vec<_>>(),
                g.fns.iter().map(|f| &f.name).collect::<Vec<_>>()
            ));
            continue;
        }
        for (a, b) in w.fns.iter().zip(&g.fns) {
            if a != b {
                diffs.push(format!(
                    "mod {}: launcher {}:\n  want {a:?}\n  got  {b:?}",
                    w.name, a.name
                ));
            }
        }
    }
    diffs
}

// ----------------------------------------------------------------------------------------------
// Running the cases.

enum Got {
    Built(um_build::Built, String),
    Refused(um_build::Error),
}

fn run_case(dir: &Path, case: &Case) -> Got {
    let kernels = dir.join("kernels");
    let out = dir.join("out");
    fs::create_dir_all(&kernels).unwrap();
    fs::create_dir_all(&out).unwrap();
    for (name, text) in &case.files {
        fs::write(kernels.join(name), text).unwrap();
    }
    match um_build::Kernels::new(&kernels).out_dir(&out).build() {
        Ok(built) => {
            let code = fs::read_to_string(&built.generated).unwrap();
            Got::Built(built, code)
        }
        Err(e) => Got::Refused(e),
    }
}

/// How a refusal shows, if it is clear (see the top of this file); else why not. (When this
/// test was written, um-build's errors about a struct's or a field's name, and about two
/// launchers that meet, named no file: those cases fail here.)
fn refusal(e: &um_build::Error, kernels: &Path) -> Result<Why, String> {
    if e.file().is_none() {
        return Err("the error names no file".into());
    }
    let shown = e.to_string();
    if !e.message().starts_with("nvcc failed") {
        let names_something = e.line().is_some()
            || e.kernel_name().is_some()
            || e.param_name().is_some()
            || shown.contains("struct `")
            || shown.contains("module `");
        return if names_something {
            Ok(Why::Reading)
        } else {
            Err("um-build's error names no line, kernel, parameter, struct or module".into())
        };
    }
    let errors: Vec<&str> = e
        .message()
        .lines()
        .filter(|l| l.contains("): error"))
        .collect();
    let user = kernels.display().to_string();
    if errors.iter().any(|l| l.starts_with(&user)) {
        Ok(Why::Cxx)
    } else if errors.iter().any(|l| l.contains("/um-check/")) || e.message().contains("um-build:") {
        Ok(Why::Check)
    } else {
        Err("nvcc failed, but neither in um-build's checks nor at the user's file".into())
    }
}

fn show_case(id: usize, case: &Case) -> String {
    let mut s = format!("case {id} ({}), expected {:?}:\n", case.label, case.expect);
    for (name, text) in &case.files {
        let _ = writeln!(s, "--- {name}\n{text}");
    }
    if !case.compiled.is_empty() {
        let _ = writeln!(s, "--- nvcc compiles: {:?}", case.compiled);
        let _ = writeln!(s, "--- um-build should read: {:?}", case.reading);
    }
    s
}

/// Compiles the generated Rust of every accepted case in one crate that depends on um-core.
/// Returns the compiler's errors by case.
fn compile_all(root: &Path, accepted: &[(usize, String)]) -> Result<(), Vec<(usize, String)>> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("crate");
    let gen_dir = dir.join("gen");
    let _ = fs::remove_dir_all(&gen_dir);
    fs::create_dir_all(&gen_dir).unwrap();
    fs::create_dir_all(dir.join("src")).unwrap();
    let mut lib = String::from(
        "//! The generated launchers of every case of um-build's differential test.\n#![allow(warnings)]\n",
    );
    for (id, code) in accepted {
        let file = gen_dir.join(format!("case_{id}.rs"));
        // Self-contained: the PTX is a literal of the generated file.
        fs::write(&file, code).unwrap();
        let _ = writeln!(
            lib,
            "pub mod case_{id} {{\n    #[allow(unused_imports)]\n    use ::um_core as __um;\n    include!({:?});\n}}",
            file.display().to_string()
        );
    }
    fs::write(dir.join("src/lib.rs"), lib).unwrap();
    let manifest = format!(
        "[package]\nname = \"um-differential\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\num-core = {{ path = {:?} }}\n\n# Not part of any workspace around it.\n[workspace]\n",
        workspace.join("crates/um-core").display().to_string()
    );
    fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["check", "--offline", "--quiet", "--message-format=short"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", root.join("target"))
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo");
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut errors: Vec<(usize, String)> = Vec::new();
    for line in stderr
        .lines()
        .filter(|l| l.contains("error") && !l.contains("could not compile"))
    {
        let id = line
            .find("case_")
            .and_then(|at| {
                let digits: String = line[at + 5..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
            .unwrap_or(usize::MAX);
        errors.push((id, line.to_owned()));
    }
    if errors.is_empty() {
        errors.push((usize::MAX, stderr.into_owned()));
    }
    Err(errors)
}

fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[test]
fn um_build_reads_exactly_what_nvcc_compiles_or_refuses_clearly() {
    let cases = generate();
    let total: usize = cases.iter().map(|c| c.decls).sum();
    assert!(cases.len() >= 300, "{} cases", cases.len());
    assert!(total >= 300, "{total} declarations");

    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("um-build-differential");
    let case_root = root.join("cases");
    let _ = fs::remove_dir_all(&case_root);

    // nvcc, in parallel over the cases.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
    let next = AtomicUsize::new(0);
    let mut results: Vec<(usize, Got)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(case) = cases.get(i) else {
                            return mine;
                        };
                        mine.push((i, run_case(&case_root.join(format!("case_{i}")), case)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);

    let mut failures: Vec<(usize, String)> = Vec::new();
    let mut accepted: Vec<(usize, String)> = Vec::new();
    let mut refused = 0;
    for (i, got) in &results {
        let case = &cases[*i];
        let kernels = case_root.join(format!("case_{i}")).join("kernels");
        match (got, case.expect) {
            (Got::Built(built, code), Expect::Honest) => {
                let mut units = case.reading.clone();
                units.sort_by(|a, b| a.file.as_bytes().cmp(b.file.as_bytes()));
                // Each module embeds, as a literal, the text of the PTX um-build checked.
                let out = built.generated.parent().unwrap();
                let want: Vec<GenModule> = units
                    .iter()
                    .map(|u| {
                        let mut m = expected(u);
                        m.ptx = fs::read_to_string(out.join(&m.ptx))
                            .map_or_else(|e| format!("{}: {e}", m.ptx), |t| format!("{t:?}"));
                        m
                    })
                    .collect();
                let mut diffs = match parse_generated(code) {
                    Ok(got) => compare(&want, &got),
                    Err(e) => vec![e],
                };
                let (safe, unsafe_): (Vec<&Kernel>, Vec<&Kernel>) =
                    units.iter().flat_map(|u| &u.kernels).partition(|k| k.safe);
                let names = |ks: Vec<&Kernel>| ks.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
                if built.safe_kernels != names(safe) || built.unsafe_kernels != names(unsafe_) {
                    diffs.push(format!(
                        "Built lists safe {:?}, unsafe {:?}",
                        built.safe_kernels, built.unsafe_kernels
                    ));
                }
                if diffs.is_empty() {
                    accepted.push((*i, code.clone()));
                } else {
                    failures.push((
                        *i,
                        format!(
                            "MISMATCH: um-build built it, but not as nvcc compiled it:\n{}\n{}",
                            diffs.join("\n"),
                            show_case(*i, case)
                        ),
                    ));
                }
            }
            (Got::Built(_, code), expect) => failures.push((
                *i,
                format!(
                    "MISMATCH: built a case that must be refused ({expect:?}):\n{}--- generated\n{code}",
                    show_case(*i, case)
                ),
            )),
            (Got::Refused(e), Expect::Honest) => failures.push((
                *i,
                format!("MISMATCH: refused an honest case:\n{e}\n{}", show_case(*i, case)),
            )),
            (Got::Refused(e), Expect::Lying(why) | Expect::Invalid(why)) => {
                match refusal(e, &kernels) {
                    Ok(w) if w == why => refused += case.decls,
                    Ok(w) => failures.push((
                        *i,
                        format!(
                            "refused, but by {w:?} where the generator expected {why:?} (did the generator write what it meant?):\n{e}\n{}",
                            show_case(*i, case)
                        ),
                    )),
                    Err(why) => failures.push((
                        *i,
                        format!("refused without a clear message ({why}):\n{e}\n{}", show_case(*i, case)),
                    )),
                }
            }
        }
    }

    // The generated Rust of every accepted case, compiled in one go.
    if let Err(errors) = compile_all(&root, &accepted) {
        let mut by_case: Vec<usize> = errors.iter().map(|(id, _)| *id).collect();
        by_case.sort_unstable();
        by_case.dedup();
        for id in by_case {
            let lines: Vec<&str> = errors
                .iter()
                .filter(|(i, _)| *i == id)
                .map(|(_, l)| l.as_str())
                .collect();
            let shown = cases.get(id).map_or_else(String::new, |c| {
                let code = accepted
                    .iter()
                    .find(|(i, ..)| *i == id)
                    .map_or("", |(_, code)| code.as_str());
                format!("{}--- generated\n{code}", show_case(id, c))
            });
            failures.push((
                id,
                format!(
                    "MISMATCH: the generated Rust does not compile:\n{}\n{shown}",
                    lines.join("\n")
                ),
            ));
        }
    }
    failures.sort_by_key(|(i, _)| *i);
    let mut failed: Vec<usize> = failures.iter().map(|(i, _)| *i).collect();
    failed.dedup();
    let failed_decls: usize = failed
        .iter()
        .filter_map(|i| cases.get(*i))
        .map(|c| c.decls)
        .sum();
    let built: usize = accepted
        .iter()
        .filter(|(i, ..)| !failed.contains(i))
        .map(|(i, ..)| cases[*i].decls)
        .sum();
    // In full for the first few; the first line of each of the rest.
    for (n, (_, f)) in failures.iter().enumerate() {
        if n < 12 {
            say(&format!("\n{f}"));
        } else {
            say(&format!(
                "\n{}",
                f.lines().take(2).collect::<Vec<_>>().join("\n")
            ));
        }
    }
    say(&format!(
        "differential: {total} declarations tried: {built} built and matched nvcc, {refused} refused with a clear message, {failed_decls} mismatches"
    ));
    assert!(
        failures.is_empty(),
        "{} of {} cases failed: {failed:?}",
        failed.len(),
        cases.len()
    );
}
