//! The layers of `um-core`, checked on its source files (`docs/design.md`, "Layers").
//!
//! Every file of `src/` is a node; every path it names in code (`crate::a::b::C`, with `use
//! crate::{..}` groups expanded, and `super::` / `self::` paths) is an edge to the file that
//! defines the longest module prefix of the path. Comments and string literals are skipped: a
//! doc link is not an import. The checks:
//!
//! * no file reaches itself through its imports (no import cycle), except the `impl` splits
//!   listed in [`ALLOWED_SPLITS`], each for a reason (and the files of a folder listed in
//!   [`ALLOWED_UNITS`] import each other freely, as one unit);
//! * a file imports only from its own folder and from the folders below it ([`LAYERS`]);
//! * no file but `lib.rs` names an item through `lib.rs`'s re-exports (`crate::Error`): the
//!   edge would point at the root and hide the real one;
//! * the state machine (`memory/state.rs`) names no storage, in code or in comments.
//!
//! The checker itself is tested below on made-up sources and on the real graph with one edge
//! added, so that a cycle reintroduced later cannot pass unseen.

// A test: it stops at the first surprise.
#![allow(clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The folders of `src/`, lowest first: a file may import from its own folder and from the
/// folders of a lower rank. `""` is `src/` itself (`error.rs`, `sealed.rs`; `lib.rs` is the
/// root and may import anything).
const LAYERS: &[(&str, u32)] = &[
    ("", 0),
    ("driver", 1),
    ("reclaim", 2),
    ("memory", 3),
    ("launch", 4),
    ("wait", 4),
    ("graph", 5),
    // The counters and switches of the `test-hooks` feature read every layer.
    ("test_hooks", 6),
];

/// Edges that close a cycle on purpose: `(from, to, why)`. Each is an `impl` block of one file's
/// type written in another file, whose type the first file needs back. Listed in
/// `docs/design.md` too.
/// Folders whose files are one unit, free to import each other (the cycle check looks only at
/// the edges that leave or enter them), each for a reason: what is inside imports nothing above
/// its layer all the same.
const ALLOWED_UNITS: &[(&str, &str)] = &[(
    "driver/model/",
    "the CPU model of the driver (feature `model`, never in a default build): one shared state \
     (mod.rs) that its entry points (api.rs), its devices, its kernels and the crates' twins \
     act on, split into files by subject; outside it, only sys.rs (its entry points) and the \
     hooks of launches and host access name it",
)];

const ALLOWED_SPLITS: &[(&str, &str, &str)] = &[
    (
        "driver/context.rs",
        "driver/module.rs",
        "a Context owns its module cache (module.rs), and module.rs adds the Context methods that \
         load modules and find kernels",
    ),
    (
        "driver/sys.rs",
        "driver/model/api.rs",
        "with the feature `model`, sys.rs names the CPU model's entry points in place of its \
         extern block, and the model takes sys.rs's types and constants",
    ),
];

/// The file that must not name a storage, and the names.
const STATE_MACHINE: &str = "memory/state.rs";
const STORAGE_NAMES: &[&str] = &["mirror", "coherent", "unified", "pooled"];
/// Storage types whose name is also an ordinary word of the state machine's text ("device"):
/// found as a whole word, case and all.
const STORAGE_TYPES: &[&str] = &["Device"];

type Graph = BTreeMap<String, BTreeSet<String>>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as a path relative to `src/` with `/` separators.
fn rust_files(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read a source folder")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 file name")
            .to_owned();
        if path.is_dir() {
            rust_files(&path, &format!("{prefix}{name}/"), out);
        } else if name.ends_with(".rs") {
            out.push(format!("{prefix}{name}"));
        }
    }
}

/// The module path of a file: `lib.rs` is `[]`, `a/mod.rs` and `a.rs` are `[a]`, `a/b.rs` is
/// `[a, b]`.
fn module_of(file: &str) -> Vec<String> {
    let stem = file.strip_suffix(".rs").expect("a .rs file");
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// `text` with comments, string literals and char literals blanked out (newlines and columns
/// kept), so that only code is left.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && next == Some(b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r' && (next == Some(b'"') || next == Some(b'#')) && !ident_before(b, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = b[j + 1..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| j + 1 + p + close.len());
            for &x in &b[i..end] {
                blank(&mut out, x);
            }
            i = end;
        } else if c == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    out.push(b' ');
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('s), which stays.
            let end = if next == Some(b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 3 + p)
            } else {
                let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
            };
            match end {
                Some(end) => {
                    for &x in &b[i..end] {
                        blank(&mut out, x);
                    }
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).expect("stripping keeps UTF-8 (only ASCII is replaced)")
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut ident = String::from(c);
            while let Some(&n) = chars.peek() {
                if n.is_alphanumeric() || n == '_' {
                    ident.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(Token::Ident(ident));
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push(Token::PathSep);
        } else if !c.is_whitespace() {
            out.push(Token::Punct(c));
        }
    }
    out
}

/// The paths named at `tokens[i..]`, a path that starts with `crate`, `super` or `self`: one
/// per leaf of a `{..}` group. Returns them (without the start) and the index after the path.
fn parse_tree(t: &[Token], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        match t.get(i) {
            Some(Token::Ident(name)) => {
                if name != "self" || prefix.is_empty() {
                    prefix.push(name.clone());
                }
                i += 1;
            }
            Some(Token::Punct('*')) => return (vec![prefix], i + 1),
            Some(Token::Punct('{')) => {
                let mut paths = Vec::new();
                i += 1;
                loop {
                    match t.get(i) {
                        Some(Token::Punct('}')) | None => return (paths, i + 1),
                        Some(Token::Punct(',')) => i += 1,
                        _ => {
                            let (inner, next) = parse_tree(t, i);
                            for p in inner {
                                let mut full = prefix.clone();
                                full.extend(p.into_iter().filter(|s| s != "self"));
                                paths.push(full);
                            }
                            i = next;
                            // `x as y`
                            if t.get(i) == Some(&Token::Ident("as".to_owned())) {
                                i += 2;
                            }
                        }
                    }
                }
            }
            _ => return (vec![prefix], i),
        }
        if t.get(i) == Some(&Token::PathSep) {
            i += 1;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// The absolute module paths `code` (the stripped text of the file whose module is `module`)
/// names: paths from `crate`, `super` or `self`, and paths from a child module of the current
/// one (`sys::cuInit` in the module that declares `mod sys;`), which `is_module` tells.
fn references(
    code: &str,
    module: &[String],
    is_module: impl Fn(&[String]) -> bool,
) -> Vec<Vec<String>> {
    let t = tokens(code);
    let mut found = Vec::new();
    // The inline modules (`mod name { .. }`) around the current token, with the brace depth
    // inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        match &t[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Ident(kw) if kw == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) =
                    (t.get(i + 1), t.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                }
            }
            Token::Ident(start)
                if ["crate", "super", "self"].contains(&start.as_str())
                    && t.get(i + 1) == Some(&Token::PathSep)
                    && (i == 0
                        || (t[i - 1] != Token::PathSep && t[i - 1] != Token::Punct('$'))) =>
            {
                let mut base: Vec<String> = module.to_vec();
                base.extend(inline.iter().map(|(n, _)| n.clone()));
                let mut j = i;
                let mut root = match start.as_str() {
                    "crate" => Vec::new(),
                    _ => base,
                };
                // `super::super::..`, `self::`
                while let Some(Token::Ident(s)) = t.get(j) {
                    if t.get(j + 1) != Some(&Token::PathSep) {
                        break;
                    }
                    match s.as_str() {
                        "super" => {
                            root.pop();
                        }
                        "self" | "crate" if j == i => {}
                        _ => break,
                    }
                    j += 2;
                }
                let (paths, next) = parse_tree(&t, j);
                for p in paths {
                    let mut full = root.clone();
                    full.extend(p);
                    found.push(full);
                }
                i = next;
                continue;
            }
            Token::Ident(first)
                if t.get(i + 1) == Some(&Token::PathSep)
                    && (i == 0
                        || (t[i - 1] != Token::PathSep && t[i - 1] != Token::Punct('$'))) =>
            {
                let mut base: Vec<String> = module.to_vec();
                base.extend(inline.iter().map(|(n, _)| n.clone()));
                base.push(first.clone());
                if is_module(&base) {
                    base.pop();
                    let (paths, next) = parse_tree(&t, i);
                    for p in paths {
                        let mut full = base.clone();
                        full.extend(p);
                        found.push(full);
                    }
                    i = next;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The file that defines the longest module prefix of `path`.
fn resolve<'a>(path: &[String], modules: &'a BTreeMap<Vec<String>, String>) -> &'a str {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]))
        .expect("the crate root is always a prefix")
}

/// The import graph of the sources (file -> contents), and the files that name an item through
/// the root's re-exports.
fn graph(sources: &BTreeMap<String, String>) -> (Graph, Vec<String>) {
    let modules: BTreeMap<Vec<String>, String> =
        sources.keys().map(|f| (module_of(f), f.clone())).collect();
    let mut g = Graph::new();
    let mut through_root = Vec::new();
    for (file, text) in sources {
        let edges = g.entry(file.clone()).or_default();
        let is_module = |m: &[String]| modules.contains_key(m);
        for path in references(&strip(text), &module_of(file), is_module) {
            let to = resolve(&path, &modules);
            if to == file {
                continue;
            }
            if to == "lib.rs" && file != "lib.rs" {
                through_root.push(format!("{file}: crate::{}", path.join("::")));
            }
            edges.insert(to.to_owned());
        }
    }
    (g, through_root)
}

/// The cycles of `g` once the allowed edges are removed: each strongly connected component of
/// more than one file, as a list of files.
fn cycles(g: &Graph, allowed: &[(&str, &str, &str)]) -> Vec<Vec<String>> {
    let edges = |from: &str| -> Vec<&str> {
        g.get(from)
            .map(|to| {
                to.iter()
                    .map(String::as_str)
                    .filter(|to| !allowed.iter().any(|(f, t, _)| *f == from && t == to))
                    .filter(|to| {
                        !ALLOWED_UNITS
                            .iter()
                            .any(|(u, _)| from.starts_with(u) && to.starts_with(u))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // Tarjan's algorithm, iterative.
    let nodes: Vec<&str> = g.keys().map(String::as_str).collect();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    let mut low: BTreeMap<&str, usize> = BTreeMap::new();
    let mut on_stack: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<&str> = Vec::new();
    let mut found = Vec::new();
    let mut next = 0;
    for &start in &nodes {
        if index.contains_key(start) {
            continue;
        }
        let mut work: Vec<(&str, usize)> = vec![(start, 0)];
        while let Some(&mut (v, ref mut k)) = work.last_mut() {
            if *k == 0 {
                index.insert(v, next);
                low.insert(v, next);
                next += 1;
                stack.push(v);
                on_stack.insert(v);
            }
            let out = edges(v);
            if let Some(&w) = out.get(*k) {
                *k += 1;
                if !index.contains_key(w) {
                    work.push((w, 0));
                } else if on_stack.contains(w) {
                    let lw = index[w].min(low[v]);
                    low.insert(v, lw);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                let lp = low[parent].min(low[v]);
                low.insert(parent, lp);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    found.push(component);
                }
            }
        }
    }
    found
}

fn folder(file: &str) -> &str {
    file.rsplit_once('/')
        .map_or("", |(dir, _)| dir.split('/').next().unwrap_or(""))
}

fn rank(file: &str) -> u32 {
    let f = folder(file);
    LAYERS
        .iter()
        .find(|(name, _)| *name == f)
        .map(|(_, r)| *r)
        .unwrap_or_else(|| panic!("{file}: its folder `{f}` is not in LAYERS"))
}

/// The edges that go from a folder to another folder of the same or a higher rank.
fn upward(g: &Graph) -> Vec<String> {
    let mut bad = Vec::new();
    for (from, to) in g.iter().flat_map(|(f, ts)| ts.iter().map(move |t| (f, t))) {
        if from == "lib.rs" || folder(from) == folder(to) {
            continue;
        }
        if rank(from) <= rank(to) {
            bad.push(format!("{from} -> {to}"));
        }
    }
    bad
}

fn read_sources() -> BTreeMap<String, String> {
    let mut files = Vec::new();
    rust_files(&src_dir(), "", &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(src_dir().join(&f)).expect("read a source file");
            (f, text)
        })
        .collect()
}

#[test]
fn no_file_imports_itself_through_other_files() {
    let (g, _) = graph(&read_sources());
    let found = cycles(&g, ALLOWED_SPLITS);
    assert!(
        found.is_empty(),
        "import cycles among um-core's files (each group imports itself through the others; \
         move the shared item below both, or list a deliberate impl split in ALLOWED_SPLITS \
         and docs/design.md): {found:#?}"
    );
    for (from, to, _) in ALLOWED_SPLITS {
        assert!(
            g.get(*from).is_some_and(|t| t.contains(*to)),
            "ALLOWED_SPLITS lists {from} -> {to}, which is no longer an import: remove it"
        );
    }
}

#[test]
fn folders_import_only_downwards() {
    let (g, _) = graph(&read_sources());
    let bad = upward(&g);
    assert!(
        bad.is_empty(),
        "imports from a folder to one of the same or a higher layer (LAYERS): {bad:#?}"
    );
}

#[test]
fn files_import_from_the_defining_module_not_from_the_root() {
    let (_, through_root) = graph(&read_sources());
    assert!(
        through_root.is_empty(),
        "paths through lib.rs's re-exports (name the module that defines the item): \
         {through_root:#?}"
    );
}

#[test]
fn the_state_machine_names_no_storage() {
    let text = read_sources()
        .remove(STATE_MACHINE)
        .unwrap_or_else(|| panic!("src/{STATE_MACHINE} is missing"));
    let hits: Vec<String> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            let words = line.split(|c: char| !c.is_alphanumeric() && c != '_');
            let lower = line.to_lowercase();
            STORAGE_NAMES.iter().any(|name| lower.contains(name))
                || words.into_iter().any(|w| STORAGE_TYPES.contains(&w))
        })
        .map(|(n, line)| format!("{STATE_MACHINE}:{}: {}", n + 1, line.trim()))
        .collect();
    assert!(
        hits.is_empty(),
        "the state machine must not know which storage it moves (put the behaviour in the \
         storage's file, behind HasParts): {hits:#?}"
    );
}

// The checker's own tests.

fn sources(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(f, t)| ((*f).to_owned(), (*t).to_owned()))
        .collect()
}

#[test]
fn paths_in_groups_inline_modules_and_relative_forms_are_found() {
    let code = strip(
        r#"
use crate::driver::{self, stream::{RawStream, Stream as S}, sys};
use super::sibling::Thing;
// use crate::in_a_comment;
/* crate::in_a_block_comment */
const S: &str = "crate::in_a_string";
const C: char = '"';
fn f<'s>(x: &'s u8) { crate::memory::managed::helper(x); $crate::not_this(); child::g(); }
fn h() { std::mem::drop(0); Self::nothing(); }
mod tests {
    use super::f;
    use self::inner::g;
}
"#,
    );
    let here = ["memory".to_owned(), "state".to_owned()];
    let got = references(&code, &here, |m| m == ["memory", "state", "child"]);
    let got: Vec<String> = got.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        [
            "driver",
            "driver::stream::RawStream",
            "driver::stream::Stream",
            "driver::sys",
            "memory::sibling::Thing",
            "memory::managed::helper",
            "memory::state::child::g",
            "memory::state::f",
            "memory::state::tests::inner::g",
        ]
    );
}

#[test]
fn a_cycle_is_found_and_an_allowed_split_is_not() {
    let src = sources(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::B;"),
        ("b.rs", "use crate::c::C;"),
        ("c.rs", "fn f() { crate::a::g(); }"),
        ("d.rs", "use crate::Reexported;"),
    ]);
    let (g, through_root) = graph(&src);
    assert_eq!(
        cycles(&g, &[]),
        [["a.rs".to_owned(), "b.rs".to_owned(), "c.rs".to_owned()]]
    );
    assert!(cycles(&g, &[("c.rs", "a.rs", "on purpose")]).is_empty());
    assert_eq!(through_root, ["d.rs: crate::Reexported"]);
}

#[test]
fn one_more_import_from_a_lower_layer_to_a_higher_one_fails() {
    let mut src = read_sources();
    let context = src
        .get_mut("driver/context.rs")
        .expect("src/driver/context.rs");
    context.push_str(
        "\nfn reintroduced() { let _ = crate::memory::managed::Managed::<u8>::MAX_ALIGN; }\n",
    );
    let (g, _) = graph(&src);
    assert!(!upward(&g).is_empty(), "the upward import is seen");
    let managed = src
        .get_mut("memory/managed.rs")
        .expect("src/memory/managed.rs");
    managed.push_str("\nfn back() { crate::memory::state::helper(); }\n");
    let (g, _) = graph(&src);
    assert!(
        cycles(&g, ALLOWED_SPLITS)
            .iter()
            .any(|c| c.contains(&"memory/managed.rs".to_owned())),
        "a cycle through managed.rs is seen"
    );
}

/// Prints the graph, one file and what it imports per line:
/// `cargo test -p um-core --test layers -- --ignored --nocapture`.
#[test]
#[ignore = "prints the import graph for a reader"]
fn print_the_import_graph() {
    let (g, _) = graph(&read_sources());
    for (from, to) in &g {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        println!("{from} -> {}", to.join(", "));
    }
}
