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

/// The `.entry` kernels of a PTX text, with their parameters.
pub(crate) fn entries(ptx: &str) -> Vec<(String, Vec<PtxParam>)> {
    let mut entries = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + ".entry ".len()..];
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
        rest = &after[close..];
    }
    entries
}

/// The virtual architecture a PTX text was built for, from its `.target` directive:
/// `.target sm_75` was built with `-arch=compute_75`.
pub(crate) fn target_arch(ptx: &str) -> Result<String> {
    ptx.lines()
        .find_map(|l| l.trim().strip_prefix(".target "))
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

/// The symbols of dynamic shared memory: `.extern .shared ... name[];` at module scope.
fn dynamic_shared(ptx: &str) -> Vec<String> {
    ptx.lines()
        .map(str::trim)
        .filter(|l| l.starts_with(".extern") && l.contains(".shared"))
        .filter_map(|l| {
            let declarator = l.trim_end_matches(';').split_whitespace().last()?;
            let name = declarator.split('[').next()?;
            (!name.is_empty()).then(|| name.to_owned())
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
        .filter_map(|d| ptx[from..].find(d).map(|i| (from + i, *d)))
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

/// `ptx` with its comments (`// ...` to the end of the line, `/* ... */`) blanked out, byte for
/// byte, so that no name in a comment counts as a use.
fn without_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut rest = ptx;
    while let Some(at) = rest.find("//").into_iter().chain(rest.find("/*")).min() {
        out.push_str(&rest[..at]);
        let end = if rest[at..].starts_with("//") {
            rest[at..].find('\n').map_or(rest.len(), |i| at + i)
        } else {
            rest[at + 2..]
                .find("*/")
                .map_or(rest.len(), |i| at + 2 + i + 2)
        };
        out.extend(
            rest[at..end]
                .chars()
                .map(|c| if c == '\n' { '\n' } else { ' ' }),
        );
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
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
pub(crate) fn check_dynamic_shared(source: &Source, ptx: &str) -> Result<()> {
    let ptx = without_comments(ptx);
    let symbols = dynamic_shared(&ptx);
    if symbols.is_empty() {
        return Ok(());
    }
    let bodies = bodies(&ptx);
    // The `.func`s, by index into `bodies`.
    let funcs: Vec<usize> = (0..bodies.len()).filter(|i| !bodies[*i].entry).collect();
    let module = module_scope(&ptx);
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

/// Checks every kernel of `source` against its `.entry` in `ptx`: same parameter count,
/// pointers as 64-bit values, scalars of the same class and width, structs of the same size
/// and alignment; and that no safe kernel reaches dynamic shared memory.
pub(crate) fn check(source: &Source, ptx: &str) -> Result<()> {
    check_entries(source, ptx)?;
    check_dynamic_shared(source, ptx)?;
    check_launch_directives(source, ptx)
}

/// The entry directives that fix the shape of a block, which a safe launch cannot honour: a
/// `Linear` launch has blocks of its own size, one-dimensional. `__block_size__((x, y, z))`
/// compiles to `.reqntid x, y, z` and `.blocksareclusters`, under which the grid counts
/// clusters and the GPU runs blocks of the compiled shape whatever the launch says: a
/// y-extended block (two threads per index) or 1024 times the threads `Linear` counted (an
/// index past 2^31). Found by issue 18's red team.
const SHAPE_DIRECTIVES: [&str; 2] = [".blocksareclusters", ".reqntid"];

/// Refuses a safe kernel whose PTX entry fixes its block shape ([`SHAPE_DIRECTIVES`]), however
/// the declaration got there (a prototype with the attribute on the definition in a header, a
/// redefined marker). `.maxntid` (`__launch_bounds__`), `.maxnreg`, `.minnctapersm` and cluster
/// dimensions (`__cluster_dims__`: a grid they do not divide is refused by the driver) change no
/// thread's index and stay allowed.
pub(crate) fn check_launch_directives(source: &Source, ptx: &str) -> Result<()> {
    let bodies = bodies(ptx);
    for k in source.kernels.iter().filter(|k| k.safe) {
        let Some(entry) = bodies.iter().find(|b| b.entry && b.name == k.name) else {
            continue; // the entry check of `check` reports it
        };
        // The directives come after the parameter list.
        let directives = entry
            .header
            .rfind(')')
            .map_or("", |at| &entry.header[at + 1..]);
        if let Some(d) = SHAPE_DIRECTIVES.iter().find(|d| {
            directives
                .split_whitespace()
                .any(|w| w.trim_end_matches(',') == **d)
        }) {
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

fn check_entries(source: &Source, ptx: &str) -> Result<()> {
    let entries = entries(ptx);
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
        for (name, refused) in [("a", true), ("b", true), ("c", false)] {
            let got = check_dynamic_shared(&decl(name, true), DYNAMIC);
            assert_eq!(got.is_err(), refused, "{name}: {got:?}");
            if let Err(e) = got {
                assert!(e.message().contains("dynamic shared memory"), "{e}");
                assert_eq!(e.kernel_name(), Some(name));
            }
            // An unsafe kernel may use it: its LaunchConfig says how much.
            assert_eq!(check_dynamic_shared(&decl(name, false), DYNAMIC), Ok(()));
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
        let says = |ptx: &str, name: &str| {
            check_dynamic_shared(&safe(name), ptx)
                .err()
                .map(|e| e.message().to_owned())
        };
        for (ptx, name, refused, why) in [
            // Named in an initialiser: any kernel may load and call it.
            (TABLES, "k", true, "module-scope variable"),
            (TABLES, "k2", true, "module-scope variable"),
            (TABLES, "k3", true, "module-scope variable"),
            // Its address taken (by `setup`), and the kernel calls through a pointer.
            (SLOT, "call_slot", true, "function pointer"),
            // No call through a pointer, no initialiser: `plain` only, which has none.
            (SLOT, "direct", false, ""),
            // A name in a comment is no use.
            (SLOT, "mentions", false, ""),
        ] {
            let got = says(ptx, name);
            assert_eq!(got.is_some(), refused, "{name}: {got:?}");
            if let Some(message) = got {
                assert!(
                    message.contains("dynamic shared memory")
                        && message.contains("_Z8uses_dynPfj")
                        && message.contains(why),
                    "{name}: {message}"
                );
            }
        }
        // Only functions whose address is taken: with `setup` taking `plain`'s alone, a call
        // through a pointer cannot reach `uses_dyn`.
        let plain_only = SLOT.replace(
            "mov.u64 \t%rd1, _Z8uses_dynPfj;",
            "mov.u64 \t%rd1, _Z5plainPfj;",
        );
        assert_eq!(says(&plain_only, "call_slot"), None);
        // An unsafe kernel may: its LaunchConfig says how much.
        let unsafe_slot =
            parse("extern \"C\" __global__ void call_slot(float *x) {}").expect("parses");
        assert_eq!(check_dynamic_shared(&unsafe_slot, SLOT), Ok(()));
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
    fn comments_are_blanked_byte_for_byte() {
        let text = "a // b\nc /* d\ne */ f";
        let blank = without_comments(text);
        assert_eq!(blank.len(), text.len());
        assert_eq!(blank, "a     \nc     \n     f");
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
            let got = check_launch_directives(&decl(name, true), SHAPES);
            assert_eq!(got.is_err(), refused, "{name}: {got:?}");
            if let Err(e) = got {
                assert!(e.message().contains("__block_size__"), "{e}");
                assert_eq!(e.kernel_name(), Some(name));
            }
            assert_eq!(check_launch_directives(&decl(name, false), SHAPES), Ok(()));
        }
    }

    #[test]
    fn the_target_names_the_virtual_architecture() {
        let arch = |text: &str| target_arch(text).map_err(|e| e.message().to_owned());
        assert_eq!(
            arch(".version 9.0\n.target sm_75\n"),
            Ok("compute_75".into())
        );
        assert_eq!(arch(".target sm_90a, debug\n"), Ok("compute_90a".into()));
        assert!(arch(".version 9.0\n").is_err());
    }

    #[test]
    fn entries_with_aggregates() {
        let e = entries(PTX);
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
