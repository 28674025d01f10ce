//! Common mistakes of a kernel file, each said in one line that names the fix, before nvcc runs.
//! Without these, the first thing a user saw was tens of lines of nvcc errors, or
//! no error at all where the mistake still built:
//!
//! * a file that uses `UM_SAFE_KERNEL` or a `um::` name without `#include "um.cuh"`
//!   ([`missing_include`]). It builds with um-build, whose check wrapper compiles um.cuh's
//!   namespace ahead of the file (`check.rs`), but with nothing else: nvcc alone, an editor or
//!   another build system stop at `this declaration has no storage class or type specifier`;
//! * a kernel declared inside a named namespace ([`enclosing_namespace`], called by
//!   `source::parse`): the check wrapper cannot name it as `::k`, and nvcc's error came first;
//! * a length declared as a plain integer (`int n`), which is a value the caller passes.
//!   `contract::counts` refuses it where it leaves a buffer without a length, naming the
//!   integer and the length type to write ([`count_like`], [`length_type`]); where every buffer
//!   has a length anyway, the integer may well be a value, and [`warnings`] only warns, for
//!   the names that read as one buffer's length (`ny` beside a buffer `y`).
//!
//! The text is read as `source.rs` reads it: without a preprocessor. Each check errs towards
//! silence where it cannot tell (an `#include` of another header of the user's, which may
//! include um.cuh; a namespace written in an unusual form), leaving the case to nvcc and the
//! compiler-side check as before.

use crate::error::{Error, Result};
use crate::source::{self, Scalar, Source, Type};

/// Refuses a file that uses `UM_SAFE_KERNEL` or a `um::` name and cannot include um.cuh: no
/// `#include` of `"um.cuh"` or `<um.cuh>` (in any folder), of another quoted header (the
/// user's own, which may include it), or through a macro.
pub(crate) fn missing_include(src: &str) -> Result<()> {
    if source::without_comments(src)
        .lines()
        .any(may_include_um_cuh)
    {
        return Ok(());
    }
    let code = blank_literals(&source::clean(src));
    let marker = source::find_word(&code, source::SAFE_MARKER)
        .first()
        .map(|&at| (at, source::SAFE_MARKER.to_owned()));
    // `um::len32`, `::um::indices`, `um :: len64`: the word `um` followed by `::`.
    let um_name = source::find_word(&code, "um").into_iter().find_map(|at| {
        let rest = code[at + 2..].trim_start().strip_prefix("::")?.trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        Some((at, format!("um::{}", &rest[..end])))
    });
    let first = match (marker, um_name) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    };
    match first {
        None => Ok(()),
        Some((at, name)) => Err(Error::new(format!(
            "`{name}` is defined in um.cuh, which this file does not include: add \
             `#include \"um.cuh\"` at its top"
        ))
        .at(source::line_of(&code, at))),
    }
}

/// Whether a line of the file, comments removed, is an `#include` that may bring um.cuh.
fn may_include_um_cuh(line: &str) -> bool {
    let Some(directive) = line.trim_start().strip_prefix('#') else {
        return false;
    };
    let Some(target) = directive.trim_start().strip_prefix("include") else {
        return false;
    };
    match target.trim_start().strip_prefix('<') {
        // `<um.cuh>` (um-build puts it on nvcc's include path); any other angle-bracket header
        // is the toolkit's or the system's (`<stdint.h>`, `<cuda_fp16.h>`).
        Some(path) => {
            let path = path.split('>').next().unwrap_or_default().trim();
            path == "um.cuh" || path.ends_with("/um.cuh")
        }
        // `"um.cuh"`, another header of the user's, or a macro: it may.
        None => true,
    }
}

/// `text` with the inside of every string and character literal replaced by spaces, byte for
/// byte (offsets keep their meaning), so that braces and names inside literals count for
/// nothing. A literal ends at its line's end at the latest; a `'` after a hex digit is a digit
/// separator (`1'000'000`), not a character literal.
pub(crate) fn blank_literals(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut prev = ' ';
    for c in text.chars() {
        match quote {
            Some(q) if c != '\n' => {
                if !escaped && c == q {
                    quote = None;
                    out.push(c);
                } else {
                    out.extend(std::iter::repeat_n(' ', c.len_utf8()));
                }
                escaped = !escaped && c == '\\';
            }
            _ => {
                quote = match c {
                    '"' => Some(c),
                    '\'' if !prev.is_ascii_hexdigit() => Some(c),
                    _ => None,
                };
                escaped = false;
                out.push(c);
            }
        }
        prev = c;
    }
    out
}

/// The named namespaces around offset `at` of `code` (comments, directives and literals
/// blanked), outermost first, joined with `::`; `None` at global scope. An unnamed
/// (`namespace { }`) or `inline` namespace does not count: `::k` still finds a kernel declared
/// in it, so um-build's check can name it, and nvcc compiles it to `.entry k`.
pub(crate) fn enclosing_namespace(code: &str, at: usize) -> Option<String> {
    // One entry per open brace: the namespace's name where the brace opens a named one.
    let mut blocks: Vec<Option<&str>> = Vec::new();
    let mut statement = 0;
    for (i, c) in code.get(..at)?.char_indices() {
        match c {
            '{' => {
                let head: Vec<&str> = code[statement..i].split_whitespace().collect();
                blocks.push(match head.as_slice() {
                    ["namespace", name] => Some(name),
                    _ => None,
                });
                statement = i + 1;
            }
            '}' => {
                blocks.pop();
                statement = i + 1;
            }
            ';' => statement = i + 1,
            _ => {}
        }
    }
    let names: Vec<&str> = blocks.into_iter().flatten().collect();
    (!names.is_empty()).then(|| names.join("::"))
}

/// Names of a count in general: a plain integer so named, where a buffer has no length, was
/// meant as its length. (Compared without case or `_`: `N`, `numElements`, `n_elems`.)
const COUNT_NAMES: [&str; 12] = [
    "n",
    "nb",
    "num",
    "len",
    "length",
    "size",
    "count",
    "numel",
    "nelem",
    "nelems",
    "nelements",
    "numelements",
];

/// What makes a buffer's name into the name of its length: `n_x`, `nx`, `num_x`, `len_x`, ...
const PREFIXES: [&str; 6] = ["n", "nb", "num", "len", "size", "count"];
/// ... and `x_n`, `x_len`, `x_length`, `x_size`, `x_count`.
const SUFFIXES: [&str; 5] = ["n", "len", "length", "size", "count"];

/// `name` in lower case without `_`.
fn squash(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The buffer among `buffers` whose length `name` reads as: `y` for `ny`, `n_y`, `y_len`.
pub(crate) fn length_of_buffer<'a>(name: &str, buffers: &[&'a str]) -> Option<&'a str> {
    let name = squash(name);
    buffers.iter().copied().find(|b| {
        let b = squash(b);
        PREFIXES.iter().any(|p| name == format!("{p}{b}"))
            || SUFFIXES.iter().any(|s| name == format!("{b}{s}"))
    })
}

/// Whether `name` reads as a count: one of [`COUNT_NAMES`], or the length of one of `buffers`.
pub(crate) fn count_like(name: &str, buffers: &[&str]) -> bool {
    COUNT_NAMES.contains(&squash(name).as_str()) || length_of_buffer(name, buffers).is_some()
}

/// The length type that holds what the plain integer `s` held, so that the body reads the same:
/// `int` becomes `um::ilen32`, `unsigned int` `um::len32`, `size_t` `um::len64`. (8- and 16-bit
/// integers become the 32-bit length of their signedness.)
pub(crate) fn length_type(s: Scalar) -> &'static str {
    match s {
        Scalar::I8 | Scalar::I16 | Scalar::I32 => "um::ilen32",
        Scalar::I64 => "um::ilen64",
        Scalar::U64 => "um::len64",
        _ => "um::len32",
    }
}

/// Advice on safe kernels that build, for `cargo:warning`: a plain integer named for the length
/// of one of the kernel's buffers (`ny` beside `y`, `x_len`). It is a value the caller passes;
/// if it was meant as that length, the launcher fills another length in (or refuses unequal
/// buffers that share one). Renaming the parameter silences it. A count's general name (`n`,
/// `count`) is left alone here: every buffer has a length, and such a name is a common value.
pub(crate) fn warnings(source: &Source) -> Vec<Error> {
    let mut out = Vec::new();
    for k in source.kernels.iter().filter(|k| k.safe) {
        let buffers: Vec<&str> = k
            .params
            .iter()
            .filter(|p| matches!(p.ty, Type::Pointer { .. }))
            .map(|p| p.name.as_str())
            .collect();
        for p in &k.params {
            let Type::Scalar(s) = p.ty else { continue };
            let Some(buffer) = length_of_buffer(&p.name, &buffers).filter(|_| s.is_integer())
            else {
                continue;
            };
            out.push(
                Error::new(format!(
                    "`{} {}` is a value the caller passes, not the length of `{buffer}`: to make \
                     it that length, declare it `{} {}`, after `{buffer}`",
                    p.written,
                    p.name,
                    length_type(s),
                    p.name
                ))
                .kernel(&k.name)
                .param(&p.name)
                .at(k.line)
                .help(format!(
                    "a length counts the buffers declared since the previous length \
                     (docs/kernels.md); if `{}` is a value, rename it and this warning goes away",
                    p.name
                )),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_that_may_bring_um_cuh() {
        for line in [
            "#include \"um.cuh\"",
            "  #  include <um.cuh>",
            "#include <vendor/um.cuh>",
            "#include \"common.cuh\"",
            "#include HEADER",
        ] {
            assert!(may_include_um_cuh(line), "{line}");
        }
        for line in [
            "#include <stdint.h>",
            "#include <cuda_fp16.h>",
            "#define X 1",
            "int x;",
        ] {
            assert!(!may_include_um_cuh(line), "{line}");
        }
        // An include in a comment is no include.
        let e = missing_include(
            "// #include \"um.cuh\"\n/* #include \"um.cuh\" */\nUM_SAFE_KERNEL void k() {}",
        )
        .expect_err("commented out");
        assert_eq!(e.line(), Some(3));
        // Names in strings and comments are no use of um.cuh.
        assert!(missing_include("// UM_SAFE_KERNEL\nconst char *s = \"um::len32\";").is_ok());
        // The first use is named, whichever comes first.
        let e = missing_include("__device__ um::len32 f();\nUM_SAFE_KERNEL void k() {}")
            .expect_err("um::");
        assert!(
            e.message().starts_with("`um::len32` is defined in um.cuh"),
            "{e}"
        );
        let e = missing_include("int a;\n::um :: indices(3);").expect_err("um ::");
        assert_eq!(
            (e.line(), e.message().split(' ').next()),
            (Some(2), Some("`um::indices`"))
        );
    }

    #[test]
    fn literals_are_blanked_byte_for_byte() {
        let text = "a = \"{é\\\"}\"; c = '{'; d = 1'000; e = '\\''; f = \"unterminated {\ng {";
        let blank = blank_literals(text);
        assert_eq!(blank.len(), text.len());
        assert_eq!(
            blank,
            "a = \"      \"; c = ' '; d = 1'000; e = '  '; f = \"              \ng {"
        );
    }

    #[test]
    fn named_namespaces_around_an_offset() {
        let at = |code: &str| enclosing_namespace(code, code.find("K").expect("K"));
        assert_eq!(at("namespace ns {\nK"), Some("ns".into()));
        assert_eq!(
            at("namespace a { namespace { namespace b::c{ K"),
            Some("a::b::c".into())
        );
        assert_eq!(at("namespace a { int x; } struct S { int y; }; K"), None);
        assert_eq!(at("namespace { K"), None);
        assert_eq!(at("inline namespace v1 { K"), None);
        assert_eq!(at("extern \"C\" { K"), None);
        assert_eq!(
            at("namespace a { } namespace b { void f() { if (1) { } } K"),
            Some("b".into())
        );
        // A brace in a literal was blanked before: `"{"` opens nothing.
        let code = blank_literals("namespace a { const char *s = \"{\"; } K");
        assert_eq!(at(&code), None);
    }

    #[test]
    fn count_like_names() {
        let buffers = ["x", "in_data"];
        for name in [
            "n",
            "N",
            "nb",
            "len",
            "length",
            "size",
            "count",
            "num",
            "numElements",
            "n_elems",
        ] {
            assert!(count_like(name, &buffers), "{name}");
        }
        for name in [
            "nx",
            "n_x",
            "NX",
            "x_len",
            "xLen",
            "x_size",
            "len_x",
            "num_in_data",
            "in_data_count",
        ] {
            assert!(count_like(name, &buffers), "{name}");
            assert!(length_of_buffer(name, &buffers).is_some(), "{name}");
        }
        for name in [
            "value",
            "ns",
            "stride",
            "block_size",
            "ny",
            "seed",
            "slot",
            "bins",
        ] {
            assert!(!count_like(name, &buffers), "{name}");
        }
        assert_eq!(length_of_buffer("n_in_data", &buffers), Some("in_data"));
    }
}
