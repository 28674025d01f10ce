//! The `.entry` parameter lists of the PTX that nvcc wrote, and the check of each declaration
//! against them: what the launcher will pass is what the compiled kernel takes.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::source::{Scalar, Source, Type};

/// One `.param` of a PTX `.entry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PtxParam {
    /// The type without its dot: `u64`, `f32`, `b8`, ...
    pub(crate) ty: String,
    /// `.align N`, where given.
    pub(crate) align: Option<usize>,
    /// `[N]` for a by-value aggregate.
    pub(crate) array: Option<usize>,
}

/// A PTX text as ptxas reads it, for every scan of this module: its comments (`// ...` to the end
/// of the line, `/* ... */`) and the contents of its string literals (`"..."`, as in `.file 1
/// "k.cu"`) blanked out, byte for byte, newlines kept. ptxas reads a string from `"` to the next
/// `"`, newlines included and with no escapes, and a comment only outside strings; so does
/// [`Code::new`]. No comment or string can then hold an `.entry`, a directive or a name that
/// counts: nvcc copies source lines into comments (`-src-in-ptx`), and an inline `asm` can write
/// any text into the PTX.
pub(crate) struct Code(String);

impl Code {
    /// `ptx` with its comments and the contents of its strings blanked.
    pub(crate) fn new(ptx: &str) -> Code {
        #[derive(PartialEq)]
        enum In {
            Code,
            Line,
            Block,
            Str,
        }
        let mut out = String::with_capacity(ptx.len());
        let mut state = In::Code;
        let mut chars = ptx.chars().peekable();
        let blank = |out: &mut String, c: char| {
            if c == '\n' {
                out.push('\n');
            } else {
                out.extend(std::iter::repeat_n(' ', c.len_utf8()));
            }
        };
        while let Some(c) = chars.next() {
            match state {
                In::Code => match (c, chars.peek()) {
                    ('/', Some('/')) => {
                        state = In::Line;
                        blank(&mut out, c);
                    }
                    ('/', Some('*')) => {
                        state = In::Block;
                        blank(&mut out, c);
                        chars.next();
                        blank(&mut out, '*');
                    }
                    ('"', _) => {
                        state = In::Str;
                        out.push(c);
                    }
                    _ => out.push(c),
                },
                In::Line => {
                    if c == '\n' {
                        state = In::Code;
                    }
                    blank(&mut out, c);
                }
                In::Block => {
                    if c == '*' && chars.peek() == Some(&'/') {
                        state = In::Code;
                        chars.next();
                        blank(&mut out, '/');
                    }
                    blank(&mut out, c);
                }
                In::Str => {
                    if c == '"' {
                        state = In::Code;
                        out.push(c);
                    } else {
                        blank(&mut out, c);
                    }
                }
            }
        }
        Code(out)
    }

    /// The blanked text.
    pub(crate) fn text(&self) -> &str {
        &self.0
    }
}

/// Where `directive` (`.entry`, `.extern`, `.reqntid`, ...) stands in `code` as a token of its
/// own: not followed by a character of a name (`.entry` in `.entryx` is no token). A `.` always
/// begins a token, so one glued to the one before counts (`.visible.entry`, `.extern.shared`,
/// `).reqntid`), and so does a modifier of an instruction (`.shared` in `ld.shared.f32`).
fn tokens<'a>(code: &'a str, directive: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(directive)
        .map(|(at, _)| at)
        .filter(move |at| {
            !code[at + directive.len()..]
                .chars()
                .next()
                .is_some_and(is_ptx_ident)
        })
}

/// Whether `directive` stands in `code` as a token of its own ([`tokens`]).
fn has_token(code: &str, directive: &str) -> bool {
    tokens(code, directive).next().is_some()
}

/// The `.entry` kernels of a PTX text, with their parameters.
pub(crate) fn entries(code: &Code) -> Vec<(String, Vec<PtxParam>)> {
    let code = code.text();
    let mut entries = Vec::new();
    for at in tokens(code, ".entry") {
        let after = &code[at + ".entry".len()..];
        let open = after.find('(').unwrap_or(after.len());
        let name = after[..open].trim().to_owned();
        let close = after.find(')').unwrap_or(after.len());
        let params = after[open.min(close)..close]
            .split(',')
            .filter_map(|p| {
                let words: Vec<&str> = p
                    .split_whitespace()
                    .skip_while(|w| !w.starts_with(".param"))
                    .skip(1)
                    .collect();
                let mut align = None;
                let mut ty = None;
                let mut iter = words.iter();
                while let Some(w) = iter.next() {
                    if *w == ".align" {
                        align = iter.next().and_then(|n| n.parse().ok());
                    } else if w.starts_with(".ptr") || w.starts_with(".global") {
                        continue;
                    } else if let Some(t) = w.strip_prefix('.') {
                        ty = Some(t.to_owned());
                    } else {
                        let array = w
                            .split_once('[')
                            .and_then(|(_, n)| n.trim_end_matches(']').parse().ok());
                        return ty.map(|ty| PtxParam { ty, align, array });
                    }
                }
                ty.map(|ty| PtxParam {
                    ty,
                    align,
                    array: None,
                })
            })
            .collect();
        entries.push((name, params));
    }
    entries
}

/// The virtual architecture a PTX text was built for, from its `.target` directive:
/// `.target sm_75` was built with `-arch=compute_75`.
pub(crate) fn target_arch(code: &Code) -> Result<String> {
    code.text()
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(".target")
                .filter(|t| t.starts_with(char::is_whitespace))
                .map(str::trim_start)
        })
        .and_then(|t| t.split([',', ' ']).next())
        .and_then(|t| t.trim().strip_prefix("sm_"))
        .map(|sm| format!("compute_{sm}"))
        .ok_or_else(|| {
            Error::new("the PTX has no `.target sm_NN` line")
                .help("is it a PTX file that nvcc wrote?")
        })
}

/// Whether `c` may appear in a PTX identifier.
fn is_ptx_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// Whether `text` mentions `name` as a whole PTX identifier.
fn mentions(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(is_ptx_ident) && !after.is_some_and(is_ptx_ident)
    })
}

/// The statements of `code` that declare dynamic shared memory: those (between `;`, `{` and
/// `}`) that hold both the tokens `.extern` and `.shared`, in any order and with any space or
/// line break between them (`.extern .shared .align 16 .b8 sm[]`, `} .extern.shared ...`), each
/// from the first of the two, with whitespace collapsed.
fn dynamic_shared_declarations(code: &str) -> Vec<String> {
    code.split([';', '{', '}'])
        .filter_map(|st| {
            let from = tokens(st, ".extern").next()?;
            let shared = tokens(st, ".shared").next()?;
            // From the first of the two: directives without a `;` (`.target`) may come before.
            let st = &st[from.min(shared)..];
            Some(st.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .collect()
}

/// The symbols of dynamic shared memory: the name each of `declarations` (from
/// [`dynamic_shared_declarations`]) declares (`sm` of `.extern .shared .align 16 .b8 sm[]`).
fn dynamic_shared(declarations: &[String]) -> Vec<String> {
    declarations
        .iter()
        .filter_map(|st| {
            let declarator = st.split('[').next()?.trim_end();
            let name: String = declarator
                .chars()
                .rev()
                .take_while(|c| is_ptx_ident(*c) || *c == '%')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// A function of the PTX (`.entry` or `.func`) with its body, braces included.
struct Body<'a> {
    name: String,
    entry: bool,
    /// From the name to the body: the parameter list, then the performance directives
    /// (`.maxntid`, `.reqntid`, `.blocksareclusters`, ...).
    header: &'a str,
    text: &'a str,
}

/// Every `.entry` and `.func` directive: where it is in `ptx` (from the directive to the end of
/// its body, or to the `;` of a prototype), and its body where it has one.
fn functions(ptx: &str) -> Vec<(Range<usize>, Option<Body<'_>>)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = [".entry", ".func"]
        .iter()
        .filter_map(|d| tokens(&ptx[from..], d).next().map(|i| (from + i, *d)))
        .min()
    {
        let (at, directive) = found;
        from = at + directive.len();
        let header_end = ptx[from..].find(['{', ';']).map_or(ptx.len(), |i| from + i);
        if !ptx[header_end..].starts_with('{') {
            // A prototype.
            out.push((at..(header_end + 1).min(ptx.len()), None));
            continue;
        }
        // The name is the identifier before the parameter list (after a `.func`'s return list).
        let mut header = ptx[from..header_end].trim();
        if header.starts_with('(') {
            header = header
                .find(')')
                .map_or("", |i| header[i + 1..].trim_start());
        }
        let name: String = header.chars().take_while(|c| is_ptx_ident(*c)).collect();
        let mut depth = 0usize;
        let mut end = ptx.len();
        for (i, c) in ptx[header_end..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = header_end + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((
            at..end,
            Some(Body {
                name,
                entry: directive == ".entry",
                header: &ptx[from..header_end],
                text: &ptx[header_end..end],
            }),
        ));
        from = end;
    }
    out
}

/// Every `.entry` and `.func` that has a body.
fn bodies(ptx: &str) -> Vec<Body<'_>> {
    functions(ptx).into_iter().filter_map(|(_, b)| b).collect()
}

/// What is left of `ptx` outside its functions: the module-scope declarations, among them
/// the initialisers of `.global` and `.const` variables (`= {f, generic(g)}`).
fn module_scope(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut from = 0;
    for (span, _) in functions(ptx) {
        out.push_str(&ptx[from..span.start]);
        out.push('\n');
        from = span.end;
    }
    out.push_str(&ptx[from..]);
    out
}

/// The calls of a function body: where it names the function it calls directly (the target of
/// `call` or `call.uni`), and whether it calls through a register (a function pointer:
/// `call (ret), %rd7, (params), prototype_0;`).
fn calls(text: &str) -> (Vec<Range<usize>>, bool) {
    let mut direct = Vec::new();
    let mut indirect = false;
    for (at, _) in text.match_indices("call") {
        let before = text[..at].chars().next_back();
        let after = text[at + "call".len()..].chars().next();
        if before.is_some_and(|c| is_ptx_ident(c) || c == '.' || c == '%')
            || !after.is_some_and(|c| c == '.' || c.is_whitespace())
        {
            continue; // not the instruction: `.callprototype`, `callseq`, a name
        }
        // After the opcode and its modifiers, an optional return list `(...)` and a comma,
        // then the target.
        let base = at + "call".len();
        let tail = &text[base..];
        let mut i = tail.find(char::is_whitespace).unwrap_or(tail.len());
        let skip_space = |i: usize| {
            tail[i..]
                .find(|c: char| !c.is_whitespace())
                .map_or(tail.len(), |j| i + j)
        };
        i = skip_space(i);
        if tail[i..].starts_with('(') {
            i = tail[i..].find(')').map_or(tail.len(), |j| i + j + 1);
            i = skip_space(i);
            if tail[i..].starts_with(',') {
                i = skip_space(i + 1);
            }
        }
        let name_len = tail[i..]
            .find(|c: char| !is_ptx_ident(c))
            .unwrap_or(tail.len() - i);
        if name_len == 0 || tail[i..].starts_with(|c: char| c.is_ascii_digit()) {
            // `%rd7`, or anything that is not a name: through a pointer, as far as we know.
            indirect = true;
        } else {
            direct.push(base + i..base + i + name_len);
        }
    }
    (direct, indirect)
}

/// How a function came to be reached from a kernel, for the error.
#[derive(Clone, Copy)]
enum Why {
    /// The kernel itself.
    Entry,
    /// Named (called or its address taken) by a function reached already.
    Named,
    /// Named in a module-scope initialiser: its address is data any kernel can load and call.
    Initialiser,
    /// Its address is taken, and a function reached calls through a pointer.
    Indirect,
}

/// Refuses a safe kernel that can reach dynamic shared memory (`extern __shared__`, which PTX
/// declares `.extern .shared`): its own body, or any `.func` it can reach, mentions such a
/// symbol. A safe launch passes no dynamic shared memory, so every access to it would be out
/// of bounds.
///
/// What a kernel can reach, conservatively: every `.func` named in a function it reaches (a
/// call, or an address taken); every `.func` named in a module-scope initialiser (`.global
/// .u64 table[2] = {f, g};`: any kernel may load it and call through it); and, once a function
/// it reaches calls through a register, every `.func` whose address is taken anywhere.
///
/// Then, whatever a safe kernel reaches: a file that has a safe kernel may declare no dynamic
/// shared memory at all ([`dynamic_shared_declarations`]: inline `asm` can declare it where no
/// function names it, and another kernel can store its address in a `__device__` pointer that
/// the safe kernel reads).
pub(crate) fn check_dynamic_shared(source: &Source, code: &Code) -> Result<()> {
    let ptx = code.text();
    let declared = dynamic_shared_declarations(ptx);
    if declared.is_empty() {
        return Ok(());
    }
    let symbols = dynamic_shared(&declared);
    let bodies = bodies(ptx);
    // The `.func`s, by index into `bodies`.
    let funcs: Vec<usize> = (0..bodies.len()).filter(|i| !bodies[*i].entry).collect();
    let module = module_scope(ptx);
    let in_initialisers: Vec<usize> = funcs
        .iter()
        .copied()
        .filter(|i| mentions(&module, &bodies[*i].name))
        .collect();
    // Each body without the targets of its direct calls: a name left in it is an address taken.
    let taking: Vec<String> = bodies
        .iter()
        .map(|b| {
            let mut text = b.text.to_owned();
            for target in calls(b.text).0 {
                text.replace_range(target.clone(), &" ".repeat(target.len()));
            }
            text
        })
        .collect();
    let address_taken: Vec<usize> = funcs
        .iter()
        .copied()
        .filter(|i| {
            in_initialisers.contains(i) || taking.iter().any(|t| mentions(t, &bodies[*i].name))
        })
        .collect();
    for k in source.kernels.iter().filter(|k| k.safe) {
        let Some(entry) = bodies.iter().position(|b| b.entry && b.name == k.name) else {
            continue; // the entry check of `check` reports it
        };
        let mut reached: Vec<(usize, Why)> = vec![(entry, Why::Entry)];
        let add = |reached: &mut Vec<(usize, Why)>, f: usize, why: Why| {
            if !reached.iter().any(|(r, _)| *r == f) {
                reached.push((f, why));
            }
        };
        for f in &in_initialisers {
            add(&mut reached, *f, Why::Initialiser);
        }
        let mut through_pointers = false;
        let mut i = 0;
        while let Some((body, _)) = reached.get(i).copied() {
            let text = bodies[body].text;
            for f in &funcs {
                if mentions(text, &bodies[*f].name) {
                    add(&mut reached, *f, Why::Named);
                }
            }
            if !through_pointers && calls(text).1 {
                through_pointers = true;
                for f in &address_taken {
                    add(&mut reached, *f, Why::Indirect);
                }
            }
            i += 1;
        }
        let found = symbols.iter().find_map(|s| {
            reached
                .iter()
                .find(|(b, _)| mentions(bodies[*b].text, s))
                .map(|(b, why)| (s, &bodies[*b].name, *why))
        });
        if let Some((symbol, name, why)) = found {
            let via = match why {
                Why::Entry => ",".to_owned(),
                Why::Named => format!(" in `{name}`, which it calls,"),
                Why::Initialiser => format!(
                    " in `{name}`, whose address a module-scope variable holds (any kernel may \
                     call it through that),"
                ),
                Why::Indirect => format!(
                    " in `{name}`, whose address is taken (the kernel calls through a function \
                     pointer),"
                ),
            };
            return Err(Error::new(format!(
                "uses dynamic shared memory (`extern __shared__`, PTX `.extern .shared {symbol}`){via} \
                 but a safe launch passes none"
            ))
            .kernel(&k.name)
            .at(k.line)
            .help(
                "use a `__shared__` array of fixed size, or declare the kernel \
                 `extern \"C\" __global__` (an unsafe launcher, whose `LaunchConfig` sets \
                 `shared_mem_bytes`)",
            ));
        }
    }
    if let (Some(declaration), Some(k)) = (declared.first(), source.kernels.iter().find(|k| k.safe))
    {
        return Err(Error::new(format!(
            "its PTX declares dynamic shared memory (`{declaration}`), and a file with a safe \
             kernel (`{}`, here) may not declare any: a safe launch passes none, and a pointer \
             to it kept in memory (or a symbol named by inline asm) can reach the safe kernel",
            k.name
        ))
        .at(k.line)
        .help(
            "move the unsafe kernel that uses it (`extern \"C\" __global__`, whose LaunchConfig \
             sets `shared_mem_bytes`) to a .cu file of its own, or use a `__shared__` array of \
             fixed size",
        ));
    }
    Ok(())
}

fn scalar_matches(s: Scalar, p: &PtxParam) -> bool {
    if p.array.is_some() {
        return false;
    }
    let t = p.ty.as_str();
    match s {
        Scalar::F32 => t == "f32",
        Scalar::F64 => t == "f64",
        // nvcc widens 8- and 16-bit parameters in some versions; accept the declared width.
        Scalar::I8 | Scalar::U8 => matches!(t, "u8" | "s8" | "b8"),
        Scalar::I16 | Scalar::U16 => matches!(t, "u16" | "s16" | "b16"),
        Scalar::I32 | Scalar::U32 => matches!(t, "u32" | "s32" | "b32"),
        Scalar::I64 | Scalar::U64 => matches!(t, "u64" | "s64" | "b64"),
    }
}

/// Checks every kernel of `source` against its `.entry` in `ptx`: one `.entry` of each name, the
/// same parameter count, pointers as 64-bit values, scalars of the same class and width, structs
/// of the same size and alignment; that no safe kernel reaches dynamic shared memory, nor shares
/// its file with any; and that no safe kernel's block shape is fixed. Every scan reads the PTX
/// as ptxas does, without its comments and strings ([`Code`]).
pub(crate) fn check(source: &Source, ptx: &str) -> Result<()> {
    let code = Code::new(ptx);
    check_entries(source, &code)?;
    check_dynamic_shared(source, &code)?;
    check_launch_directives(source, &code)
}

/// The entry directives that fix the shape of a block, which a safe launch cannot honour: a
/// `Linear` launch has blocks of its own size, one-dimensional. `__block_size__((x, y, z))`
/// compiles to `.reqntid x, y, z` and `.blocksareclusters`, under which the grid counts
/// clusters and the GPU runs blocks of the compiled shape whatever the launch says: a
/// y-extended block (two threads per index) or 1024 times the threads `Linear` counted (an
/// index past 2^31).
const SHAPE_DIRECTIVES: [&str; 2] = [".blocksareclusters", ".reqntid"];

/// Refuses a safe kernel whose PTX entry fixes its block shape ([`SHAPE_DIRECTIVES`]), however
/// the declaration got there (a prototype with the attribute on the definition in a header, a
/// redefined marker). `.maxntid` (`__launch_bounds__`), `.maxnreg`, `.minnctapersm` and cluster
/// dimensions (`__cluster_dims__`: a grid they do not divide is refused by the driver) change no
/// thread's index and stay allowed.
pub(crate) fn check_launch_directives(source: &Source, code: &Code) -> Result<()> {
    let bodies = bodies(code.text());
    for k in source.kernels.iter().filter(|k| k.safe) {
        let Some(entry) = bodies.iter().find(|b| b.entry && b.name == k.name) else {
            continue; // the entry check of `check` reports it
        };
        // The directives come after the parameter list.
        let directives = entry
            .header
            .rfind(')')
            .map_or("", |at| &entry.header[at + 1..]);
        if let Some(d) = SHAPE_DIRECTIVES.iter().find(|d| has_token(directives, d)) {
            return Err(Error::new(format!(
                "its PTX entry fixes the block's shape (`{d}`, from `__block_size__`), which a \
                 safe launch cannot honour: a `Linear` launch decides the block"
            ))
            .kernel(&k.name)
            .at(k.line)
            .help(
                "remove `__block_size__` from the kernel, or declare it `extern \"C\" __global__` \
                 (an unsafe launcher, whose caller guarantees the launch)",
            ));
        }
    }
    Ok(())
}

fn check_entries(source: &Source, code: &Code) -> Result<()> {
    let entries = entries(code);
    // ptxas refuses a second `.entry` of one name; without it (prebuilt PTX), so does this.
    if let Some((_, (name, _))) = entries
        .iter()
        .enumerate()
        .find(|(i, (name, _))| entries[..*i].iter().any(|(n, _)| n == name))
    {
        return Err(Error::new(format!(
            "the PTX declares `.entry {name}` twice, and PTX declares each kernel once"
        ))
        .help("is it PTX that nvcc wrote, unchanged?"));
    }
    for k in &source.kernels {
        let err = |msg: String| Error::new(msg).kernel(&k.name).at(k.line);
        let (_, ptx_params) = entries.iter().find(|(n, _)| *n == k.name).ok_or_else(|| {
            err(format!("no `.entry {}` in the PTX nvcc wrote", k.name))
                .help("is the kernel compiled out by the preprocessor, or declared without a body?")
        })?;
        if ptx_params.len() != k.params.len() {
            return Err(err(format!(
                "the declaration has {} parameters, the PTX entry {}",
                k.params.len(),
                ptx_params.len()
            ))
            .help("declare the kernel exactly as it is defined"));
        }
        for (p, got) in k.params.iter().zip(ptx_params) {
            let (ok, wanted) = match &p.ty {
                Type::Pointer { .. } => (
                    got.array.is_none() && matches!(got.ty.as_str(), "u64" | "b64"),
                    "a 64-bit pointer".to_owned(),
                ),
                Type::Scalar(s) => (scalar_matches(*s, got), format!("`{}`", s.rust())),
                // A struct of one unsigned integer: `.align N .b8 [N]`.
                Type::Len(s) => (
                    got.ty == "b8" && got.array == Some(s.size()) && got.align == Some(s.size()),
                    format!("a length (`{}`)", crate::source::len_c(*s)),
                ),
                Type::Struct(name) => {
                    let st = source.structs.iter().find(|s| s.name == *name);
                    let (size, align) = st.map_or((0, 0), |s| s.layout());
                    (
                        got.ty == "b8" && got.array == Some(size) && got.align == Some(align),
                        format!("struct `{name}` of {size} bytes aligned to {align}"),
                    )
                }
            };
            if !ok {
                let shown = match (got.align, got.array) {
                    (Some(a), Some(n)) => format!(".align {a} .{}[{n}]", got.ty),
                    (None, Some(n)) => format!(".{}[{n}]", got.ty),
                    _ => format!(".{}", got.ty),
                };
                return Err(err(format!(
                    "the declaration says {wanted}, the PTX has `{shown}`"
                ))
                .param(&p.name)
                .help("declare the parameter with the type the kernel is defined with"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::parse;

    const PTX: &str = r#"
.version 9.0
.target sm_75
.address_size 64
.visible .entry axpy(
	.param .u64 .ptr .align 1 axpy_param_0,
	.param .u64 .ptr .align 1 axpy_param_1,
	.param .f32 axpy_param_2,
	.param .u32 axpy_param_3
)
{ ret; }
.visible .entry hist(
	.param .align 4 .b8 hist_param_0[12],
	.param .u64 hist_param_1
)
{ ret; }
"#;

    /// What nvcc 13.0 wrote for a file with dynamic shared memory used by an entry directly
    /// (`a`), through a `__noinline__` function (`b`), and not at all (`c`: static only).
    const DYNAMIC: &str = r#"
.extern .shared .align 16 .b8 sm[];
.extern .shared .align 16 .b8 s[];
.func  (.param .b32 func_retval0) _Z6helperi(
	.param .b32 _Z6helperi_param_0
)
{
	mov.u32 	%r3, sm;
	ld.shared.f32 	%f1, [%r4];
	ret;
}
.visible .entry a(
	.param .u64 a_param_0
)
{
	ld.shared.f32 	%f1, [s];
	ret;
}
.visible .entry b(
	.param .u64 b_param_0
)
{
	{ // callseq 0, 0
	call.uni (retval0), 
	_Z6helperi, 
	(
	param0
	);
	} // callseq 0
	ret;
}
.visible .entry c(
	.param .u64 c_param_0
)
{
	.shared .align 4 .b8 _ZZ1cE1t[128];
	ld.shared.f32 	%f1, [_ZZ1cE1t+4];
	ret;
}
"#;

    /// Whether `got` is the refusal of a file that declares dynamic shared memory beside a safe
    /// kernel, which names no kernel (none reaches it as far as the reading of calls can tell).
    fn refused_for_the_file(got: &Result<()>) -> bool {
        got.as_ref().is_err_and(|e| {
            e.kernel_name().is_none()
                && e.message().contains("a file with a safe")
                && e.message().contains("declares dynamic shared memory")
        })
    }

    /// Each safe kernel that reaches dynamic shared memory is named, with the way it reaches
    /// it; one that does not is refused all the same, for the file.
    #[test]
    fn a_safe_kernel_that_reaches_dynamic_shared_memory_is_refused() {
        let decl = |name: &str, safe: bool| {
            let marker = if safe {
                "UM_SAFE_KERNEL"
            } else {
                "extern \"C\" __global__"
            };
            parse(&format!("{marker} void {name}(float *x) {{}}")).expect("parses")
        };
        let code = Code::new(DYNAMIC);
        for (name, reaches) in [("a", true), ("b", true), ("c", false)] {
            let got = check_dynamic_shared(&decl(name, true), &code);
            if reaches {
                let e = got.expect_err(name);
                assert!(e.message().contains("dynamic shared memory"), "{e}");
                assert_eq!(e.kernel_name(), Some(name));
            } else {
                assert!(refused_for_the_file(&got), "{name}: {got:?}");
            }
            // An unsafe kernel may use it: its LaunchConfig says how much.
            assert_eq!(check_dynamic_shared(&decl(name, false), &code), Ok(()));
        }
    }

    /// What nvcc 13.0 wrote (bodies shortened) for device functions reached through pointers
    /// kept in `__device__` variables with initialisers: `table[2] = {plain, uses_dyn}` (read
    /// by `k`), `one = uses_dyn` (read by `k2`); `k3` calls `plain` directly.
    const TABLES: &str = r#"
.version 9.0
.target sm_75
.address_size 64
.func  (.param .b32 func_retval0) _Z5plainPfj
(
	.param .b64 _Z5plainPfj_param_0,
	.param .b32 _Z5plainPfj_param_1
)
;
.func  (.param .b32 func_retval0) _Z8uses_dynPfj
(
	.param .b64 _Z8uses_dynPfj_param_0,
	.param .b32 _Z8uses_dynPfj_param_1
)
;
.global .align 8 .u64 table[2] = {_Z5plainPfj, _Z8uses_dynPfj};
.global .align 8 .u64 one = _Z8uses_dynPfj;
.extern .shared .align 16 .b8 dyn[];
.func  (.param .b32 func_retval0) _Z5plainPfj(
	.param .b64 _Z5plainPfj_param_0,
	.param .b32 _Z5plainPfj_param_1
)
{
	ld.f32 	%f1, [%rd3];
	st.param.f32 	[func_retval0+0], %f1;
	ret;
}
.func  (.param .b32 func_retval0) _Z8uses_dynPfj(
	.param .b64 _Z8uses_dynPfj_param_0,
	.param .b32 _Z8uses_dynPfj_param_1
)
{
	mov.u32 	%r3, dyn;
	add.s32 	%r4, %r3, %r2;
	st.shared.f32 	[%r4], %f1;
	ret;
}
	// .globl	k
.visible .entry k(
	.param .u64 k_param_0
)
{
	mov.u64 	%rd5, table;
	add.s64 	%rd6, %rd5, %rd4;
	ld.global.u64 	%rd7, [%rd6];
	{ // callseq 0, 0
	.param .b32 retval0;
	prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _, .param .b32 _);
	call (retval0), 
	%rd7, 
	(
	param0, 
	param1
	)
	, prototype_0;
	} // callseq 0
	ret;
}
	// .globl	k2
.visible .entry k2(
	.param .u64 k2_param_0
)
{
	ld.global.u64 	%rd3, [one];
	{ // callseq 1, 0
	prototype_1 : .callprototype (.param .b32 _) _ (.param .b64 _, .param .b32 _);
	call (retval0), 
	%rd3, 
	(
	param0, 
	param1
	)
	, prototype_1;
	} // callseq 1
	ret;
}
.visible .entry k3(
	.param .u64 k3_param_0
)
{
	{ // callseq 2, 0
	call.uni (retval0), 
	_Z5plainPfj, 
	(
	param0, 
	param1
	);
	} // callseq 2
	ret;
}
"#;

    /// What nvcc 13.0 wrote (bodies shortened) for a pointer stored by one kernel (`setup`:
    /// `slot = w ? uses_dyn : plain`) and called through by another (`call_slot`); `direct`
    /// calls `plain` directly; `mentions` names `uses_dyn` in a comment only.
    const SLOT: &str = r#"
.version 9.0
.target sm_75
.address_size 64
.global .align 8 .u64 slot;
.extern .shared .align 16 .b8 dyn[];
.func  (.param .b32 func_retval0) _Z8uses_dynPfj(
	.param .b64 _Z8uses_dynPfj_param_0,
	.param .b32 _Z8uses_dynPfj_param_1
)
{
	mov.u32 	%r3, dyn;
	st.shared.f32 	[%r4], %f1;
	ret;
}
.func  (.param .b32 func_retval0) _Z5plainPfj(
	.param .b64 _Z5plainPfj_param_0,
	.param .b32 _Z5plainPfj_param_1
)
{
	ld.f32 	%f1, [%rd3];
	ret;
}
	// .globl	setup
.visible .entry setup(
	.param .u32 setup_param_0
)
{
	mov.u64 	%rd1, _Z8uses_dynPfj;
	mov.u64 	%rd2, _Z5plainPfj;
	selp.b64 	%rd3, %rd2, %rd1, %p1;
	st.global.u64 	[slot], %rd3;
	ret;
}
	// .globl	call_slot
.visible .entry call_slot(
	.param .u64 call_slot_param_0
)
{
	ld.global.u64 	%rd3, [slot];
	{ // callseq 0, 0
	prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _, .param .b32 _);
	@%p2 call (retval0), 
	%rd3, 
	(
	param0, 
	param1
	)
	, prototype_0;
	} // callseq 0
	ret;
}
	// .globl	direct
.visible .entry direct(
	.param .u64 direct_param_0
)
{
	{ // callseq 1, 0
	call.uni (retval0), 
	_Z5plainPfj, 
	(
	param0, 
	param1
	);
	} // callseq 1
	ret;
}
.visible .entry mentions(
	.param .u64 mentions_param_0
)
{
	// _Z8uses_dynPfj /* dyn */
	ret;
}
"#;

    #[test]
    fn functions_reached_through_pointers_count_as_reached() {
        let safe = |name: &str| {
            parse(&format!("UM_SAFE_KERNEL void {name}(float *x) {{}}")).expect("parses")
        };
        let check = |ptx: &str, name: &str| check_dynamic_shared(&safe(name), &Code::new(ptx));
        for (ptx, name, why) in [
            // Named in an initialiser: any kernel may load and call it.
            (TABLES, "k", Some("module-scope variable")),
            (TABLES, "k2", Some("module-scope variable")),
            (TABLES, "k3", Some("module-scope variable")),
            // Its address taken (by `setup`), and the kernel calls through a pointer.
            (SLOT, "call_slot", Some("function pointer")),
            // No call through a pointer, no initialiser: `plain` only, which has none.
            (SLOT, "direct", None),
            // A name in a comment is no use.
            (SLOT, "mentions", None),
        ] {
            let got = check(ptx, name);
            match why {
                Some(why) => {
                    let message = got.expect_err(name).message().to_owned();
                    assert!(
                        message.contains("dynamic shared memory")
                            && message.contains("_Z8uses_dynPfj")
                            && message.contains(why),
                        "{name}: {message}"
                    );
                }
                // Not reached: refused for the file that declares it.
                None => assert!(refused_for_the_file(&got), "{name}: {got:?}"),
            }
        }
        // Only functions whose address is taken: with `setup` taking `plain`'s alone, a call
        // through a pointer cannot reach `uses_dyn`.
        let plain_only = SLOT.replace(
            "mov.u64 \t%rd1, _Z8uses_dynPfj;",
            "mov.u64 \t%rd1, _Z5plainPfj;",
        );
        assert!(refused_for_the_file(&check(&plain_only, "call_slot")));
        // An unsafe kernel may: its LaunchConfig says how much.
        let unsafe_slot =
            parse("extern \"C\" __global__ void call_slot(float *x) {}").expect("parses");
        assert_eq!(check_dynamic_shared(&unsafe_slot, &Code::new(SLOT)), Ok(()));
    }

    /// A file with a safe kernel may declare no dynamic shared memory, however the declaration
    /// is spelled: after a brace on one line (inline asm), across lines, glued, anywhere; one
    /// in a comment or a string declares nothing.
    #[test]
    fn a_file_with_a_safe_kernel_declares_no_dynamic_shared_memory() {
        let safe = parse("UM_SAFE_KERNEL void k(float *x) {}").expect("parses");
        let unsafe_only = parse("extern \"C\" __global__ void k(float *x) {}").expect("parses");
        let module = |decl: &str| {
            format!(
                ".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry first(\n\t.param .u64 p\n)\n\
                 {{\n\tret;\n{decl}\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n{{\n\tret;\n}}\n"
            )
        };
        for decl in [
            "}\n.extern .shared .align 16 .b8 sm[];\n.func rest()\n{",
            "} .extern .shared .align 4 .b8 hid[];\n.func um_rest()\n{",
            "}\n.extern\n\t.shared\n.align 4 .b8 d[];\n.func r()\n{",
            "}\n.extern.shared .align 4 .b8 d[];\n.func r()\n{",
            "}\n.extern/* */.shared .b8 d[];\n.func r()\n{",
            "\t.extern .shared .align 4 .b8 inner[];",
        ] {
            let got = check_dynamic_shared(&safe, &Code::new(&module(decl)));
            assert!(refused_for_the_file(&got), "{decl}: {got:?}");
            assert_eq!(
                check_dynamic_shared(&unsafe_only, &Code::new(&module(decl))),
                Ok(())
            );
        }
        for decl in [
            "// .extern .shared .align 4 .b8 d[];\n}",
            "/* .extern\n.shared .b8 d[]; */ }",
            "}\n.file 9 \".extern .shared .b8 d[];\"\n.func r()\n{",
            "\tld.shared.u32 %r1, [s];\n\tmov.u32 %r2, extern_shared;\n}",
        ] {
            assert_eq!(
                check_dynamic_shared(&safe, &Code::new(&module(decl))),
                Ok(()),
                "{decl}"
            );
        }
    }

    #[test]
    fn calls_are_told_apart_from_other_uses_of_a_name() {
        let text = "{ call.uni (retval0), \n\t_Z5plainPfj, \n\t(\n\tparam0\n\t);\n\tcall.uni _Z3endv, ();\n\
             \tcall _Z3nopv;\n\tmov.u64 %rd1, _Z4callv;\n\t.callprototype x; // callseq 0\n}";
        let (direct, indirect) = calls(text);
        let named: Vec<&str> = direct.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(named, ["_Z5plainPfj", "_Z3endv", "_Z3nopv"]);
        assert!(!indirect);
        assert!(calls("\t@%p1 call (retval0), %rd7, (param0), prototype_0;").1);
        assert!(calls("\tcall %rd7, (param0), prototype_0;").1);
    }

    #[test]
    fn comments_and_strings_are_blanked_byte_for_byte() {
        let blank = |text: &str| {
            let code = Code::new(text);
            assert_eq!(code.text().len(), text.len(), "{text}");
            code.0
        };
        assert_eq!(blank("a // b\nc /* d\ne */ f"), "a     \nc     \n     f");
        // ptxas reads a string to the next quote (no escapes, line breaks included), and no
        // comment inside one: `/*` in a `.file` name opens none.
        assert_eq!(
            blank(".file 1 \"/a/*/k.cu\"\n.reqntid 1 // */\n"),
            ".file 1 \"         \"\n.reqntid 1      \n"
        );
        assert_eq!(blank("\"a\\\" // x\n\"b"), "\"  \"     \n\" ");
        assert_eq!(blank("x /* \" */ y"), "x         y");
        assert_eq!(blank("é // é\n"), "é      \n");
    }

    /// A comment or a string that reads like an entry counts for nothing: not as an entry, not
    /// as the place of a directive; two entries of one name are refused.
    #[test]
    fn entries_and_directives_are_read_outside_comments_and_strings() {
        let safe = parse("UM_SAFE_KERNEL void put(float *x, um::len32 n) {}").expect("parses");
        let real = ".visible .entry put(\n\t.param .u64 put_param_0,\n\t.param .align 4 .b8 put_param_1[4]\n)\n\
                    .reqntid 32, 4, 1\n{\n\tret;\n}\n";
        let fake = ".entry put( .param .u64 a, .param .align 4 .b8 b[4] ) {}";
        for before in [
            format!("// {fake}\n"),
            format!("/* {fake} */\n"),
            format!(".file 2 \"{fake}\"\n"),
        ] {
            let ptx = format!(".version 9.0\n.target sm_90\n.address_size 64\n{before}{real}");
            let e = check(&safe, &ptx).expect_err(&before);
            assert!(
                e.message().contains("fixes the block's shape"),
                "{before}: {e}"
            );
            assert_eq!(entries(&Code::new(&ptx)).len(), 1, "{before}");
        }
        // Glued to the directive before it, `.entry` and `.reqntid` still count.
        let glued = real
            .replace(".visible .entry", ".visible.entry")
            .replace(")\n.reqntid", ").reqntid");
        let e = check(&safe, &glued).expect_err(&glued);
        assert!(e.message().contains("fixes the block's shape"), "{e}");
        // Two entries of one name.
        let twice = format!("{}{}", real.replace(".reqntid 32, 4, 1\n", ""), real);
        let e = check(&safe, &twice).expect_err("twice");
        assert!(e.message().contains("`.entry put` twice"), "{e}");
    }

    /// What nvcc 13.0 wrote for `__block_size__((32,4,1))`, `__launch_bounds__(64)`,
    /// `__cluster_dims__(2,1,1)` and `__maxnreg__(32)` (compute_90).
    const SHAPES: &str = r#"
.visible .entry bump(
	.param .u64 bump_param_0
)
.blocksareclusters
.reqntid 32, 4, 1
.reqnctapercluster 1, 1, 1
{
	ret;
}
.visible .entry lb(
	.param .u64 lb_param_0
)
.maxntid 64, 1, 1
{
	ret;
}
.visible .entry cl(
	.param .u64 cl_param_0
)
.explicitcluster
.reqnctapercluster 2, 1, 1
{
	ret;
}
.visible .entry mr(
	.param .u64 mr_param_0
)
.maxnreg 32
{
	ret;
}
"#;

    #[test]
    fn a_safe_kernel_whose_block_shape_is_fixed_is_refused() {
        let decl = |name: &str, safe: bool| {
            let marker = if safe {
                "UM_SAFE_KERNEL"
            } else {
                "extern \"C\" __global__"
            };
            parse(&format!("{marker} void {name}(float *x) {{}}")).expect("parses")
        };
        for (name, refused) in [("bump", true), ("lb", false), ("cl", false), ("mr", false)] {
            let got = check_launch_directives(&decl(name, true), &Code::new(SHAPES));
            assert_eq!(got.is_err(), refused, "{name}: {got:?}");
            if let Err(e) = got {
                assert!(e.message().contains("__block_size__"), "{e}");
                assert_eq!(e.kernel_name(), Some(name));
            }
            assert_eq!(
                check_launch_directives(&decl(name, false), &Code::new(SHAPES)),
                Ok(())
            );
        }
    }

    #[test]
    fn the_target_names_the_virtual_architecture() {
        let arch = |text: &str| target_arch(&Code::new(text)).map_err(|e| e.message().to_owned());
        assert_eq!(
            arch(".version 9.0\n.target sm_75\n"),
            Ok("compute_75".into())
        );
        assert_eq!(arch(".target sm_90a, debug\n"), Ok("compute_90a".into()));
        assert!(arch(".version 9.0\n").is_err());
    }

    #[test]
    fn entries_with_aggregates() {
        let e = entries(&Code::new(PTX));
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].1.len(), 4);
        assert_eq!(
            e[1].1[0],
            PtxParam {
                ty: "b8".into(),
                align: Some(4),
                array: Some(12)
            }
        );
    }

    #[test]
    fn a_declaration_that_disagrees_with_the_ptx_is_caught() {
        let good = "struct P { float lo; float hi; unsigned int bins; };\n\
                    UM_SAFE_KERNEL void axpy(const float *x, float *y, float a, unsigned int n) {}\n\
                    extern \"C\" __global__ void hist(P p, unsigned int *h) {}";
        assert_eq!(check(&parse(good).expect("parses"), PTX), Ok(()));
        for (wrong, param) in [
            // a parameter missing
            (
                "UM_SAFE_KERNEL void axpy(const float *x, float *y, unsigned int n) {}",
                None,
            ),
            // a pointer where the PTX has a float
            (
                "UM_SAFE_KERNEL void axpy(const float *x, float *y, float *a, unsigned int n) {}",
                Some("a"),
            ),
            // a 64-bit count where the PTX has 32 bits
            (
                "UM_SAFE_KERNEL void axpy(const float *x, float *y, float a, unsigned long long n) {}",
                Some("n"),
            ),
            // a float where the PTX has an integer
            (
                "UM_SAFE_KERNEL void axpy(const float *x, float *y, float a, float n) {}",
                Some("n"),
            ),
            // no such entry
            (
                "UM_SAFE_KERNEL void axpy2(const float *x, float *y, float a, unsigned int n) {}",
                None,
            ),
            // a struct of another size
            (
                "struct P { float lo; unsigned int bins; };\nextern \"C\" __global__ void hist(P p, unsigned int *h) {}",
                Some("p"),
            ),
            // a struct of another alignment
            (
                "struct P { unsigned short a, b, c, d, e, f; };\nextern \"C\" __global__ void hist(P p, unsigned int *h) {}",
                Some("p"),
            ),
        ] {
            let e = check(&parse(wrong).expect("parses"), PTX).expect_err(wrong);
            assert_eq!(e.param_name(), param, "{wrong}: {e}");
            assert!(e.kernel_name().is_some() && e.line().is_some(), "{e}");
        }
    }
}
