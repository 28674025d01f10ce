//! Reading a `.cu` file: its kernel declarations and the `struct`s they take by value.
//!
//! This is not a C++ parser. It reads the forms [`docs/kernels.md`](https://github.com/um-rs/um/blob/main/docs/kernels.md) documents, line-accurately,
//! and refuses anything else with an error that says what to write instead:
//!
//! * `UM_SAFE_KERNEL void name(params)`: a kernel whose author promises the contract of
//!   [`docs/kernels.md`](https://github.com/um-rs/um/blob/main/docs/kernels.md); it gets a safe launcher;
//! * `extern "C" __global__ void name(params)`: any other kernel; it gets an `unsafe` launcher;
//! * `struct Name { fields; };` (or `typedef struct { fields; } Name;`) with scalar and
//!   fixed-size array fields, for parameters passed by value.

use crate::error::{Error, Result};
use crate::mistakes;

/// A scalar type of a parameter, a pointer's element, or a struct field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
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

impl Scalar {
    pub(crate) fn from_c(ty: &str) -> Option<Scalar> {
        Some(match ty {
            "float" => Scalar::F32,
            "double" => Scalar::F64,
            "signed char" | "int8_t" => Scalar::I8,
            "unsigned char" | "uint8_t" => Scalar::U8,
            "short" | "short int" | "signed short" | "int16_t" => Scalar::I16,
            "unsigned short" | "unsigned short int" | "uint16_t" => Scalar::U16,
            "int" | "signed" | "signed int" | "int32_t" => Scalar::I32,
            "unsigned" | "unsigned int" | "uint32_t" => Scalar::U32,
            "long long" | "long long int" | "signed long long" | "int64_t" => Scalar::I64,
            "unsigned long long" | "unsigned long long int" | "uint64_t" | "size_t" => Scalar::U64,
            _ => return None,
        })
    }

    pub(crate) fn rust(self) -> &'static str {
        match self {
            Scalar::F32 => "f32",
            Scalar::F64 => "f64",
            Scalar::I8 => "i8",
            Scalar::U8 => "u8",
            Scalar::I16 => "i16",
            Scalar::U16 => "u16",
            Scalar::I32 => "i32",
            Scalar::U32 => "u32",
            Scalar::I64 => "i64",
            Scalar::U64 => "u64",
        }
    }

    /// An integer, signed or not (not a float).
    pub(crate) fn is_integer(self) -> bool {
        !matches!(self, Scalar::F32 | Scalar::F64)
    }

    pub(crate) fn size(self) -> usize {
        match self {
            Scalar::I8 | Scalar::U8 => 1,
            Scalar::I16 | Scalar::U16 => 2,
            Scalar::F32 | Scalar::I32 | Scalar::U32 => 4,
            Scalar::F64 | Scalar::I64 | Scalar::U64 => 8,
        }
    }
}

/// What a pointer points to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Elem {
    Scalar(Scalar),
    Struct(String),
}

/// The type of one kernel parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Type {
    Scalar(Scalar),
    /// A `struct` of the same file, by value.
    Struct(String),
    /// `T *` (the kernel may write) or `const T *` (it only reads).
    Pointer {
        elem: Elem,
        constant: bool,
    },
    /// A length of `um.cuh`: `um::len32` (`U32`), `um::len64` (`U64`), `um::ilen32` (`I32`) or
    /// `um::ilen64` (`I64`). In a safe kernel the launcher fills it with the length of the
    /// buffers declared since the previous length (`contract.rs`); in another kernel it is a
    /// value like any integer.
    Len(Scalar),
}

/// The length types of `um.cuh`, by spelling, with the integer each one holds.
const LENGTHS: [(&str, Scalar); 4] = [
    ("um::len32", Scalar::U32),
    ("um::len64", Scalar::U64),
    ("um::ilen32", Scalar::I32),
    ("um::ilen64", Scalar::I64),
];

/// The length type spelled `ty` (`um::len32`, `::um::len32`, ...), as the integer it holds.
pub(crate) fn len_type(ty: &str) -> Option<Scalar> {
    let ty = ty.strip_prefix("::").unwrap_or(ty);
    LENGTHS.iter().find(|(c, _)| *c == ty).map(|(_, s)| *s)
}

/// How C spells the length type that holds `s` (one of the four integers of [`LENGTHS`]).
pub(crate) fn len_c(s: Scalar) -> &'static str {
    LENGTHS
        .iter()
        .find(|(_, t)| *t == s)
        .map_or("um::len32", |(c, _)| *c)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) ty: Type,
    /// The type as written, qualifiers left out (`unsigned int`, `size_t`): for messages.
    pub(crate) written: String,
}

/// One kernel declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kernel {
    pub(crate) name: String,
    pub(crate) params: Vec<Param>,
    /// Declared `UM_SAFE_KERNEL`.
    pub(crate) safe: bool,
    /// 1-based line of the declaration.
    pub(crate) line: usize,
    /// The declaration as written, whitespace collapsed.
    pub(crate) decl: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) ty: Scalar,
    /// `Some(n)` for `ty name[n]`.
    pub(crate) array: Option<usize>,
}

/// A `struct` passed to kernels by value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Struct {
    pub(crate) name: String,
    pub(crate) fields: Vec<Field>,
    pub(crate) line: usize,
}

impl Struct {
    /// Size and alignment under C's layout rules (each scalar aligned to its size).
    pub(crate) fn layout(&self) -> (usize, usize) {
        let mut size: usize = 0;
        let mut align: usize = 1;
        for f in &self.fields {
            let a = f.ty.size();
            align = align.max(a);
            size = size.next_multiple_of(a) + a * f.array.unwrap_or(1);
        }
        (size.next_multiple_of(align), align)
    }
}

/// Everything read from one `.cu` file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Source {
    pub(crate) kernels: Vec<Kernel>,
    pub(crate) structs: Vec<Struct>,
}

/// The marker of a kernel that gets a safe launcher (defined in `um.cuh`).
pub(crate) const SAFE_MARKER: &str = "UM_SAFE_KERNEL";

/// Comments and preprocessor lines replaced by spaces, newlines kept, so that offsets still
/// give line numbers.
pub(crate) fn clean(src: &str) -> String {
    strip(src, false)
}

/// Comments replaced by spaces, preprocessor lines kept: where `#include`s are read.
pub(crate) fn without_comments(src: &str) -> String {
    strip(src, true)
}

/// Comments, and unless `keep_directives` preprocessor lines, replaced by spaces.
fn strip(src: &str, keep_directives: bool) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    let mut at_line_start = true;
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                    out.push(' ');
                }
                at_line_start = true;
                continue;
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                out.push_str("  ");
                let mut prev = ' ';
                for c in chars.by_ref() {
                    out.push(if c == '\n' { '\n' } else { ' ' });
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
                continue;
            }
            '#' if at_line_start => {
                // A directive, with its backslash continuations.
                out.push(if keep_directives { '#' } else { ' ' });
                let mut prev = '#';
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        if prev != '\\' {
                            break;
                        }
                    } else {
                        out.push(if keep_directives { c } else { ' ' });
                    }
                    if !c.is_whitespace() || c == '\n' {
                        prev = c;
                    }
                }
                at_line_start = true;
                continue;
            }
            _ => {}
        }
        if c == '\n' {
            at_line_start = true;
        } else if !c.is_whitespace() {
            at_line_start = false;
        }
        out.push(c);
    }
    out
}

pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit()) && s.chars().all(is_ident_char)
}

/// Offsets of `word` in `text` as a whole identifier.
pub(crate) fn find_word(text: &str, word: &str) -> Vec<usize> {
    text.match_indices(word)
        .filter(|(at, _)| {
            let before = text[..*at].chars().next_back();
            let after = text[at + word.len()..].chars().next();
            !before.is_some_and(is_ident_char) && !after.is_some_and(is_ident_char)
        })
        .map(|(at, _)| at)
        .collect()
}

/// The text after an opening parenthesis up to its matching close, and the offset after it.
fn balanced(text: &str, open: usize) -> Option<(&str, usize)> {
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some((&text[open + 1..open + i], open + i + 1));
                }
            }
            _ => {}
        }
    }
    None
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

const SUPPORTED: &str = "float, double, (unsigned) char, short, int, long long, their \
                         <stdint.h> names, size_t, a length (um::len32, um::len64, um::ilen32, \
                         um::ilen64), or a struct defined in the same file";

/// Reads the kernels and structs of a `.cu` file's text.
pub(crate) fn parse(src: &str) -> Result<Source> {
    let text = clean(src);
    // The same text with string and character literals blanked, for the namespace check.
    let code = mistakes::blank_literals(&text);
    let structs = parse_structs(&text)?;
    let mut kernels = Vec::new();
    let mut starts: Vec<(usize, bool)> = find_word(&text, SAFE_MARKER)
        .into_iter()
        .map(|at| (at, true))
        .chain(
            find_word(&text, "__global__")
                .into_iter()
                .map(|at| (at, false)),
        )
        .collect();
    starts.sort_unstable();
    for (at, safe) in starts {
        let line = line_of(&text, at);
        let marker = if safe { SAFE_MARKER } else { "__global__" };
        let statement_start = text[..at].rfind([';', '}', '{']).map_or(0, |i| i + 1);
        let before = collapse(&text[statement_start..at]);
        let wanted_before = if safe { "" } else { "extern \"C\"" };
        if before != wanted_before {
            let shown = collapse(&format!("{before} {marker}"));
            return Err(Error::new(format!(
                "`{shown}` is not a form um-build reads"
            ))
            .at(line)
            .help(
                "declare `UM_SAFE_KERNEL void name(...)` (from \"um.cuh\"; a safe launcher, see \
                 docs/kernels.md) or `extern \"C\" __global__ void name(...)` (an unsafe \
                 launcher); templates, C++ linkage and `extern \"C\" { ... }` blocks are not read",
            ));
        }
        let kernel = parse_kernel(&text, at + marker.len(), safe, &structs)
            .map_err(|e| if e.line().is_none() { e.at(line) } else { e })?;
        // Said here, in one line, rather than by nvcc after the check wrapper cannot name it.
        if let Some(namespace) = mistakes::enclosing_namespace(&code, at) {
            return Err(Error::new(format!(
                "declared inside `namespace {namespace}`: move the kernel out of the namespace, \
                 to global scope"
            ))
            .kernel(&kernel.name)
            .at(line)
            .help(format!(
                "um-build's compiler-side check names the kernel `::{}` (the `.entry {}` of the \
                 PTX), which does not find a kernel in a named namespace. Device functions it \
                 calls may stay in the namespace; an unnamed or `inline` namespace is global \
                 scope for this",
                kernel.name, kernel.name
            )));
        }
        if kernels.iter().any(|k: &Kernel| k.name == kernel.name) {
            return Err(Error::new("declared twice")
                .kernel(&kernel.name)
                .at(line)
                .help("declare each kernel once, with its body"));
        }
        kernels.push(Kernel { line, ..kernel });
    }
    Ok(Source { kernels, structs })
}

fn parse_kernel(text: &str, from: usize, safe: bool, structs: &[Struct]) -> Result<Kernel> {
    let open = text[from..]
        .find('(')
        .map(|i| from + i)
        .ok_or_else(|| Error::new("a kernel declaration without a parameter list"))?;
    // `void`, then maybe `__launch_bounds__(...)`, then the name.
    let mut head = collapse(&text[from..open]);
    let mut open = open;
    if head == "void __launch_bounds__" {
        let (_, after) = balanced(text, open)
            .ok_or_else(|| Error::new("unbalanced parentheses after `__launch_bounds__`"))?;
        let next = text[after..]
            .find('(')
            .map(|i| after + i)
            .ok_or_else(|| Error::new("a kernel declaration without a parameter list"))?;
        head = format!("void {}", collapse(&text[after..next]));
        open = next;
    }
    let words: Vec<&str> = head.split(' ').collect();
    let name = match words.as_slice() {
        ["void", name] if is_ident(name) => (*name).to_owned(),
        _ => {
            return Err(Error::new(format!(
                "`{head}`: a kernel returns `void` and has a plain name"
            ))
            .help("write `void name(...)` after the marker"));
        }
    };
    let (params_raw, _) = balanced(text, open)
        .ok_or_else(|| Error::new("unterminated parameter list").kernel(&name))?;
    let params_text = params_raw.trim();
    let params = if params_text.is_empty() || params_text == "void" {
        Vec::new()
    } else {
        let mut params: Vec<Param> = Vec::new();
        let mut offset = open + 1;
        for p in params_raw.split(',') {
            let lead = p.len() - p.trim_start().len();
            let line = line_of(text, offset + lead);
            offset += p.len() + 1;
            let param = parse_param(p, structs).map_err(|e| e.kernel(&name).at(line))?;
            if params.iter().any(|q| q.name == param.name) {
                return Err(Error::new("appears twice")
                    .kernel(&name)
                    .param(&param.name)
                    .at(line));
            }
            params.push(param);
        }
        params
    };
    let marker = if safe {
        SAFE_MARKER.to_owned()
    } else {
        "extern \"C\" __global__".to_owned()
    };
    Ok(Kernel {
        decl: format!("{marker} void {name}({})", collapse(params_text)),
        name,
        params,
        safe,
        line: 0,
    })
}

fn parse_param(text: &str, structs: &[Struct]) -> Result<Param> {
    // `um :: len32` is `um::len32`.
    let text = collapse(text).replace(" ::", "::").replace(":: ", "::");
    if text.contains('&') || text.contains('[') || text.contains('<') || text.contains('=') {
        return Err(Error::new(format!(
            "`{text}`: references, arrays, templates and default values are not read"
        ))
        .help("pass buffers as `T *name` (written) or `const T *name` (read only)"));
    }
    let spaced = text.replace('*', " * ");
    let mut words: Vec<&str> = spaced
        .split_whitespace()
        .filter(|w| !matches!(*w, "__restrict__" | "__restrict" | "restrict"))
        .collect();
    let name = match words.pop() {
        Some(w) if is_ident(w) && !words.is_empty() => w.to_owned(),
        _ => {
            return Err(Error::new(format!("`{text}` has no name"))
                .help("name every parameter: the launcher's arguments take these names"));
        }
    };
    let stars = words.iter().filter(|w| **w == "*").count();
    if stars > 1 {
        return Err(
            Error::new(format!("`{text}`: pointers to pointers are not supported"))
                .param(&name)
                .help("pass each buffer as its own `T *` parameter"),
        );
    }
    // `const` before the `*` makes the pointee read-only; after it, only the pointer itself.
    let star = words.iter().position(|w| *w == "*");
    let pointee = &words[..star.unwrap_or(words.len())];
    let constant = pointee.contains(&"const");
    let ty_words: Vec<&str> = pointee
        .iter()
        .copied()
        .filter(|w| !matches!(*w, "const" | "volatile" | "struct"))
        .collect();
    let ty = ty_words.join(" ");
    if let Some(width) = len_type(&ty) {
        if star.is_some() {
            return Err(Error::new(format!(
                "`{text}`: a pointer to a length is not a buffer um-build reads"
            ))
            .param(&name)
            .help("pass a length by value: `um::len32 n`"));
        }
        return Ok(Param {
            name,
            ty: Type::Len(width),
            written: ty,
        });
    }
    let elem = if let Some(s) = Scalar::from_c(&ty) {
        Elem::Scalar(s)
    } else if structs.iter().any(|s| s.name == ty) {
        Elem::Struct(ty.clone())
    } else {
        return Err(Error::new(format!("type `{ty}` is not supported"))
            .param(&name)
            .help(format!("use {SUPPORTED}")));
    };
    let written = ty;
    let ty = match (star, elem) {
        (Some(_), elem) => Type::Pointer { elem, constant },
        (None, Elem::Scalar(s)) => Type::Scalar(s),
        (None, Elem::Struct(s)) => Type::Struct(s),
    };
    Ok(Param { name, ty, written })
}

fn parse_structs(text: &str) -> Result<Vec<Struct>> {
    let mut structs: Vec<Struct> = Vec::new();
    for at in find_word(text, "struct") {
        let line = line_of(text, at);
        let rest = &text[at + "struct".len()..];
        let Some(brace) = rest.find(['{', ';', '(', ')', ',']) else {
            continue;
        };
        if !rest[brace..].starts_with('{') {
            continue; // `struct Name` used as a type, or declared without a body
        }
        let tag = collapse(&rest[..brace]);
        let Some(close) = rest[brace..].find('}').map(|i| brace + i) else {
            return Err(Error::new("unterminated struct").at(line));
        };
        let body = &rest[brace + 1..close];
        let typedef = collapse(&text[text[..at].rfind([';', '}']).map_or(0, |i| i + 1)..at]);
        let name = if typedef == "typedef" {
            let after = &rest[close + 1..];
            let end = after.find(';').unwrap_or(after.len());
            collapse(&after[..end])
        } else {
            tag
        };
        if !is_ident(&name) {
            return Err(Error::new(format!("struct `{name}`: cannot tell its name"))
                .at(line)
                .help("write `struct Name { ... };` or `typedef struct { ... } Name;`"));
        }
        let mut fields = Vec::new();
        for decl in body.split(';').map(str::trim).filter(|d| !d.is_empty()) {
            let decl_c = collapse(decl);
            let words: Vec<&str> = decl_c.split(' ').collect();
            let err = |msg: String| {
                Error::new(format!("struct `{name}`: {msg}"))
                    .at(line)
                    .help("fields of a by-value struct are scalars or fixed-size arrays of scalars")
            };
            // The longest run of leading words that names a scalar type; declarators follow.
            let split = (1..words.len()).rev().find_map(|k| {
                let ty: Vec<&str> = words[..k]
                    .iter()
                    .copied()
                    .filter(|w| *w != "const")
                    .collect();
                Scalar::from_c(&ty.join(" ")).map(|s| (s, k))
            });
            let Some((ty, k)) = split else {
                let shown = words[..words.len().saturating_sub(1)].join(" ");
                return Err(err(format!(
                    "field `{decl_c}`: type `{shown}` is not supported"
                )));
            };
            let declarators = words[k..].join(" ");
            for d in declarators.split(',').map(str::trim) {
                let (fname, array) =
                    match d.split_once('[') {
                        Some((n, rest)) => {
                            let len = rest.trim_end_matches(']').trim().parse::<usize>().map_err(
                                |_| err(format!("field `{d}`: array length must be a number")),
                            )?;
                            (n.trim(), Some(len))
                        }
                        None => (d, None),
                    };
                if !is_ident(fname) || d.contains('*') {
                    return Err(err(format!("field `{decl_c}` is not `type name;`")));
                }
                fields.push(Field {
                    name: fname.to_owned(),
                    ty,
                    array,
                });
            }
        }
        if fields.is_empty() {
            return Err(Error::new(format!("struct `{name}` has no fields")).at(line));
        }
        if structs.iter().any(|s| s.name == name) {
            return Err(Error::new(format!("struct `{name}` is defined twice")).at(line));
        }
        structs.push(Struct { name, fields, line });
    }
    Ok(structs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_directives_keep_line_numbers() {
        let src = "#include \"um.cuh\"\n/* a\n b */ // c\n#define X \\\n  1\nUM_SAFE_KERNEL void k(float *x, unsigned n) {}\n";
        let s = parse(src).expect("parses");
        assert_eq!(s.kernels.len(), 1);
        assert_eq!(s.kernels[0].line, 6);
        assert!(s.kernels[0].safe);
    }

    #[test]
    fn both_markers_and_their_types() {
        let src = "struct P { float lo, hi; unsigned int bins; double w[3]; };\n\
                   UM_SAFE_KERNEL void a(const float *__restrict__ x, float *y, P p, unsigned int n) {}\n\
                   extern \"C\" __global__ void __launch_bounds__(256, 2) b(int *h, const P *ps, long long m) {}\n";
        let s = parse(src).expect("parses");
        assert_eq!(s.structs.len(), 1);
        assert_eq!(s.structs[0].layout(), (40, 8));
        let a = &s.kernels[0];
        assert_eq!((a.name.as_str(), a.safe, a.line), ("a", true, 2));
        assert_eq!(
            a.params.iter().map(|p| p.ty.clone()).collect::<Vec<_>>(),
            [
                Type::Pointer {
                    elem: Elem::Scalar(Scalar::F32),
                    constant: true
                },
                Type::Pointer {
                    elem: Elem::Scalar(Scalar::F32),
                    constant: false
                },
                Type::Struct("P".into()),
                Type::Scalar(Scalar::U32),
            ]
        );
        let b = &s.kernels[1];
        assert_eq!((b.name.as_str(), b.safe, b.line), ("b", false, 3));
        assert_eq!(
            b.params[1].ty,
            Type::Pointer {
                elem: Elem::Struct("P".into()),
                constant: true
            }
        );
    }

    #[test]
    fn typedef_structs_and_padding() {
        let s = parse("typedef struct { unsigned char c; double d; short s; } T;").expect("parses");
        assert_eq!(s.structs[0].name, "T");
        assert_eq!(s.structs[0].layout(), (24, 8));
    }

    fn error_of(src: &str) -> Error {
        parse(src).expect_err("must be refused")
    }

    #[test]
    fn each_refusal_names_line_kernel_parameter_and_a_fix() {
        let e = error_of("\n__global__ void k(float *x, int n) {}");
        assert_eq!(e.line(), Some(2));
        assert!(e.help_text().is_some_and(|h| h.contains("UM_SAFE_KERNEL")));

        let e = error_of("UM_SAFE_KERNEL void k(\n  float *x,\n  char *c, int n) {}");
        assert_eq!(
            (e.kernel_name(), e.param_name(), e.line()),
            (Some("k"), Some("c"), Some(3))
        );
        assert!(e.message().contains("`char`"), "{e}");

        let e = error_of("UM_SAFE_KERNEL void k(float **x, int n) {}");
        assert_eq!(e.param_name(), Some("x"));
        assert!(e.message().contains("pointers to pointers"), "{e}");

        let e = error_of("UM_SAFE_KERNEL void k(float *, int n) {}");
        assert!(e.message().contains("has no name"), "{e}");

        let e = error_of("UM_SAFE_KERNEL void k(float &x) {}");
        assert!(e.message().contains("references"), "{e}");

        let e = error_of("UM_SAFE_KERNEL int k(float *x, int n) {}");
        assert!(e.message().contains("returns `void`"), "{e}");

        let e = error_of("UM_SAFE_KERNEL void k(float *x, float *x) {}");
        assert_eq!(e.param_name(), Some("x"));

        let e = error_of("UM_SAFE_KERNEL void k(Q q) {}");
        assert!(e.message().contains("`Q` is not supported"), "{e}");

        let e = error_of("struct S { float *p; };");
        assert!(e.message().contains("struct `S`"), "{e}");

        let e = error_of("template <typename T> __global__ void k(T *x) {}");
        assert!(e.message().contains("not a form"), "{e}");

        let e = error_of("UM_SAFE_KERNEL void k(int n) {}\nUM_SAFE_KERNEL void k(int n) {}");
        assert_eq!((e.kernel_name(), e.line()), (Some("k"), Some(2)));
    }
}
