//! The `.entry` parameter lists of the PTX that nvcc wrote, and the check of each declaration
//! against them: what the launcher will pass is what the compiled kernel takes.

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

/// Every `.entry` and `.func` that has a body.
fn bodies(ptx: &str) -> Vec<Body<'_>> {
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
            continue; // a prototype
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
                    depth -= 1;
                    if depth == 0 {
                        end = header_end + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push(Body {
            name,
            entry: directive == ".entry",
            header: &ptx[from..header_end],
            text: &ptx[header_end..end],
        });
        from = end;
    }
    out
}

/// Refuses a safe kernel that can reach dynamic shared memory (`extern __shared__`, which PTX
/// declares `.extern .shared`): its own body, or any `.func` it names, directly or through other
/// functions, mentions such a symbol. A safe launch passes no dynamic shared memory, so every
/// access to it would be out of bounds.
pub(crate) fn check_dynamic_shared(source: &Source, ptx: &str) -> Result<()> {
    let symbols = dynamic_shared(ptx);
    if symbols.is_empty() {
        return Ok(());
    }
    let bodies = bodies(ptx);
    for k in source.kernels.iter().filter(|k| k.safe) {
        let Some(entry) = bodies.iter().find(|b| b.entry && b.name == k.name) else {
            continue; // the entry check of `check` reports it
        };
        // Every function the entry can reach, by name.
        let mut reached: Vec<&Body<'_>> = vec![entry];
        let mut i = 0;
        while let Some(body) = reached.get(i).copied() {
            for f in bodies.iter().filter(|f| !f.entry) {
                if !reached.iter().any(|r| std::ptr::eq(*r, f)) && mentions(body.text, &f.name) {
                    reached.push(f);
                }
            }
            i += 1;
        }
        if let Some(symbol) = symbols
            .iter()
            .find(|s| reached.iter().any(|b| mentions(b.text, s)))
        {
            return Err(Error::new(format!(
                "uses dynamic shared memory (`extern __shared__`, PTX `.extern .shared {symbol}`), \
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
