//! `docs/rules.md` is a checked index. For every row of its rule tables (`| # | rule | enforced
//! | shown by |`), each citation in the "shown by" column must name something that exists: a
//! compile-fail case, a passing twin, a `#[test]` fn in the file the citation names, or a file
//! of the repository. And every compile-fail case (`tests/ui/<area>/<case>.rs`) and every GPU
//! test (each `#[test]` fn of `tests/gpu_*.rs` and of the modules `gpu_*.rs` of the GPU test
//! binaries `tests/gpu*/`) must be cited by at least one row.
//!
//! The citation grammar is written at the top of `docs/rules.md`. This test reads source text
//! only: it builds, runs and asks nothing of a GPU, nvcc or the compiler.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The crates whose name, cited alone, names the crate of the unit tests cited after it.
const CRATES: [&str; 7] = [
    "um-core",
    "um-build",
    "um-kernels",
    "um-cublas",
    "um-curand",
    "um-cusparse",
    "um-nccl",
];

#[test]
fn every_citation_exists_and_every_gpu_test_and_ui_case_is_cited() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = read(&root.join("docs/rules.md"));
    let rows = rule_rows(&text);
    let mut repo = Repo::new(root);
    let mut problems = Vec::new();
    let mut seen_rows = BTreeMap::new();
    let mut citations = 0;
    for row in &rows {
        if let Some(line) = seen_rows.insert(row.number.clone(), row.line) {
            problems.push(format!(
                "line {}: row {}: the number is also the row of line {line}",
                row.line, row.number
            ));
        }
        for problem in &row.problems {
            problems.push(format!("line {}: row {}: {problem}", row.line, row.number));
        }
        let n = repo.check_cell(&row.shown_by, &mut |p| {
            problems.push(format!("line {}: row {}: {p}", row.line, row.number));
        });
        if n == 0 {
            let lower = row.shown_by.to_lowercase();
            if !(lower.starts_with("documented") || lower.starts_with("untested")) {
                problems.push(format!(
                    "line {}: row {}: \"shown by\" cites nothing; a row without a citation \
                     begins it with \"documented\" or \"untested\" and says why",
                    row.line, row.number
                ));
            }
        }
        citations += n;
    }

    let ui_cases = ui_cases(root);
    let uncited_ui: Vec<_> = ui_cases
        .iter()
        .filter(|c| !repo.cited_ui.contains(*c))
        .collect();
    let gpu_tests = repo.gpu_tests();
    let uncited_gpu: Vec<_> = gpu_tests
        .iter()
        .filter(|t| !repo.cited_gpu.contains(*t))
        .collect();

    eprintln!(
        "rule_index: {} rows, {citations} citations; {} GPU tests ({} uncited), {} ui cases ({} \
         uncited)",
        rows.len(),
        gpu_tests.len(),
        uncited_gpu.len(),
        ui_cases.len(),
        uncited_ui.len()
    );
    let mut report = String::new();
    if !problems.is_empty() {
        let _ = writeln!(
            report,
            "docs/rules.md: {} bad rows or citations:",
            problems.len()
        );
        for p in &problems {
            let _ = writeln!(report, "  {p}");
        }
    }
    if !uncited_gpu.is_empty() {
        let _ = writeln!(
            report,
            "{} GPU tests cited by no row of docs/rules.md (cite each under the rule it holds):",
            uncited_gpu.len()
        );
        for (stem, name) in &uncited_gpu {
            let _ = writeln!(report, "  {stem}::{name}");
        }
    }
    if !uncited_ui.is_empty() {
        let _ = writeln!(
            report,
            "{} compile-fail cases cited by no row of docs/rules.md:",
            uncited_ui.len()
        );
        for case in &uncited_ui {
            let _ = writeln!(report, "  {case}");
        }
    }
    assert!(report.is_empty(), "\n{report}");
    assert!(
        rows.len() > 100,
        "only {} rule rows found in docs/rules.md",
        rows.len()
    );
}

/// The product names the rules and behaviours it guarantees, never the history of how they were
/// found: no review round, reviewer, finding, attempt, issue number or work session is named in
/// the sources, tests, docs, scripts or benchmarks (git keeps that history). This file is left
/// out, since it spells the words it looks for.
#[test]
fn the_product_names_rules_not_its_review_history() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        "crates",
        "src",
        "tests",
        "docs",
        "examples",
        "kernels-ptx",
        "scripts",
        "bench",
        "benches",
        "xtask",
    ] {
        text_files_deep(&root.join(dir), &mut files);
    }
    for file in ["README.md", "CHANGELOG.md", "Cargo.toml"] {
        files.push(root.join(file));
    }
    let me = root.join("tests/rule_index.rs");
    let mut found = Vec::new();
    for file in files.iter().filter(|f| **f != me) {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(word) = history_word(line) {
                let shown = file
                    .strip_prefix(root)
                    .unwrap_or(file)
                    .display()
                    .to_string();
                found.push(format!("{shown}:{}: \"{word}\": {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} line(s) name review history instead of a rule or behaviour:\n{}",
        found.len(),
        found.join("\n")
    );
    // The check itself: each form is seen, and words that merely contain them are not.
    for line in [
        "the red team found",
        "a red-team reviewer",
        "Redteam 4's case",
        "finding 3",
        "attempt 12 of the review",
        "as issue 40 asks",
        "issues 19 and 20",
        "see issue #7",
        "this session's run",
        "the next review round",
    ] {
        assert!(history_word(line).is_some(), "not seen: {line}");
    }
    for line in [
        "a rank that retries its attempt",
        "the issue is a leak",
        "findings of the tool",
        "`pkill -s` kills a process group",
        "a sessionless stream",
    ] {
        assert_eq!(history_word(line), None, "seen in: {line}");
    }
}

/// The documentation names where its rules and scenarios come from by document and section (the
/// CUDA Programming Guide's "Stream Attach With Multithreaded Host Programs", the
/// `cuStreamAttachMemAsync` reference, ...), linked to NVIDIA's pages: no file outside the
/// repository (`../shared/...`, which a clone does not have), and no number that only such a
/// file explains ("seed 004"). Checked in what a reader of the crate or the repository reads:
/// the README, docs, sources, examples and benchmarks.
#[test]
fn the_docs_name_their_sources_not_files_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["crates", "src", "docs", "examples", "bench", "benches"] {
        text_files_deep(&root.join(dir), &mut files);
    }
    files.push(root.join("README.md"));
    let mut found = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = outside_source(line) {
                let shown = file
                    .strip_prefix(root)
                    .unwrap_or(file)
                    .display()
                    .to_string();
                found.push(format!("{shown}:{}: {what}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} line(s) name a source by a file outside the repository, or by its number:\n{}",
        found.len(),
        found.join("\n")
    );
    for line in [
        "the CUDA documentation in `../shared/seeds/`",
        "## default_streams (seed 004, \"a multi-stream example\")",
        "* the seed-000 loop (transform, host pass, convert)",
        "the seeds' rules stay literal",
        "| # | rule (seed) | enforced | shown by |",
    ] {
        assert!(outside_source(line).is_some(), "not seen: {line}");
    }
    for line in [
        "one kind and seed give one sequence",
        "`--seed S` gives the sample's tasks",
        "a fixed seed (2022)",
        "see ../docs/design.md",
    ] {
        assert_eq!(outside_source(line), None, "seen in: {line}");
    }
}

/// What in `line` names a source outside the repository, if anything (case-insensitive): a
/// path into `../shared/`, a numbered seed ("seed 004", "seed-000"), or the seeds as a whole.
fn outside_source(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    if lower.contains("../shared/") || lower.contains("shared/seeds") {
        return Some("a path outside the repository");
    }
    if lower.contains("seeds'") || lower.contains("rule (seed)") {
        return Some("the seeds");
    }
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("seed") {
        let tail = &rest[at + "seed".len()..];
        let number = tail
            .strip_prefix(' ')
            .or_else(|| tail.strip_prefix('-'))
            .unwrap_or("");
        if number.len() >= 3 && number[..3].bytes().all(|b| b.is_ascii_digit()) {
            return Some("a numbered seed");
        }
        rest = tail;
    }
    None
}

/// The first word of review history in `line`, if any (case-insensitive).
fn history_word(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    let words = [
        "red team",
        "red-team",
        "redteam",
        "reviewer",
        "review round",
    ];
    if let Some(w) = words.iter().find(|w| lower.contains(**w)) {
        return Some(w);
    }
    // A word followed by a number: "finding 3", "attempt 2", "issue 40", "issues 19", "issue #7".
    for word in ["finding ", "attempt ", "issue ", "issues ", "issue #"] {
        let mut rest = lower.as_str();
        while let Some(at) = rest.find(word) {
            let before = rest[..at].chars().next_back();
            let after = rest[at + word.len()..].chars().next();
            let starts_word = before.is_none_or(|c| !c.is_alphanumeric());
            if starts_word && after.is_some_and(|c| c.is_ascii_digit() || c == '#') {
                return Some(word.trim_end());
            }
            rest = &rest[at + word.len()..];
        }
    }
    // "session" as a word of its own, or "sessions".
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("session") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at + "session".len()..];
        let after = tail.strip_prefix('s').unwrap_or(tail).chars().next();
        if before.is_none_or(|c| !c.is_alphanumeric()) && after.is_none_or(|c| !c.is_alphanumeric())
        {
            return Some("session");
        }
        rest = tail;
    }
    None
}

/// The text files (sources, docs, scripts, expected outputs) in `dir` and below, build outputs
/// left out.
fn text_files_deep(dir: &Path, out: &mut Vec<PathBuf>) {
    const TEXT: [&str; 13] = [
        "rs", "md", "sh", "py", "cu", "cuh", "cpp", "h", "toml", "stderr", "txt", "json", "ptx",
    ];
    for path in entries(dir) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                text_files_deep(&path, out);
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| TEXT.contains(&e))
        {
            out.push(path);
        }
    }
}

/// The checker's own grammar: what it accepts and refuses, on a small tree of its own.
#[test]
fn the_grammar_accepts_each_form_and_refuses_what_does_not_exist() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rule-index-grammar");
    let _ = std::fs::remove_dir_all(&root);
    let files: [(&str, &str); 6] = [
        ("tests/ui/area/case.rs", "fn main() {}\n"),
        ("tests/ui-pass/area.rs", "fn main() {}\n"),
        (
            "tests/gpu/gpu_x.rs",
            "#[test]\n#[ignore = \"needs a CUDA device\"]\nfn a() {}\n\n/// Doc.\n#[test]\nfn b() {}\n\nfn not_a_test() {}\n",
        ),
        ("tests/cpu_y.rs", "#[test]\nfn c() {}\n"),
        (
            "crates/um-core/src/m/n.rs",
            "fn f() {}\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn d() {}\n}\n",
        ),
        ("crates/um-core/tests/t.rs", "#[test]\nfn e() {}\n"),
    ];
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap_or(&root))
            .unwrap_or_else(|e| panic!("mkdir for {}: {e}", path.display()));
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
    let check = |cell: &str| {
        let mut repo = Repo::new(&root);
        let mut problems = Vec::new();
        let n = repo.check_cell(cell, &mut |p| problems.push(p));
        (n, problems, repo.cited_gpu.len(), repo.cited_ui.len())
    };
    let good = "`ui/area/case`, `ui-pass/area`; `gpu_x::a`, `::b` (a note with `anything`); \
                `cpu_y::*`; `um-core` tests `m::n::tests::d`, `d`, `t::e`, `t`; \
                `crates/um-core/src/m/n.rs`";
    assert_eq!(check(good), (10, vec![], 2, 1));
    for bad in [
        "`ui/area/none`",
        "`ui-pass/none`",
        "`gpu_x::not_a_test`",
        "`gpu_x::not_a_test`, `::a` (the file is still known to `::a`)",
        "`gpu_x::*`",
        "`::a`",
        "`um-core` `m::n::tests::c`",
        "`m::n::tests::d`",
        "`um-core` `nowhere::d`",
        "`um-core` `e2`",
        "`crates/none.rs`",
        "`gpu_x::a` (unbalanced",
        "`two words`",
    ] {
        let (_, problems, _, _) = check(bad);
        assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
    }
}

/// One row of a rule table.
struct Row {
    line: usize,
    number: String,
    shown_by: String,
    problems: Vec<String>,
}

/// The rows of every table whose header is `| # | rule ... | enforced | shown by |`. A line
/// that looks like a rule row outside such a table is reported as a row with a problem.
fn rule_rows(text: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_rule_table = false;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if !line.starts_with('|') {
            in_rule_table = false;
            continue;
        }
        let cells = cells(line);
        if cells.first().is_some_and(|c| c == "#") {
            in_rule_table = cells.len() == 4
                && cells[1].starts_with("rule")
                && cells[2] == "enforced"
                && cells[3] == "shown by";
            continue;
        }
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        let numbered = cells
            .first()
            .is_some_and(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()));
        if !in_rule_table {
            if numbered {
                rows.push(Row {
                    line: line_no,
                    number: cells[0].clone(),
                    shown_by: "documented".into(),
                    problems: vec![
                        "a numbered row outside a `| # | rule | enforced | shown by |` table"
                            .into(),
                    ],
                });
            }
            continue;
        }
        let mut problems = Vec::new();
        if !numbered {
            problems.push(format!(
                "the first cell {:?} is not a rule number",
                cells[0]
            ));
        }
        if cells.len() != 4 {
            problems.push(format!("{} cells, not 4 (an unescaped `|`?)", cells.len()));
        }
        rows.push(Row {
            line: line_no,
            number: cells.first().cloned().unwrap_or_default(),
            shown_by: cells.get(3).cloned().unwrap_or_default(),
            problems,
        });
    }
    rows
}

/// The cells of a table line, split at `|` outside code spans.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut code = false;
    for ch in inner.chars() {
        match ch {
            '`' => {
                code = !code;
                cell.push(ch);
            }
            '|' if !code => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(ch),
        }
    }
    cells.push(cell.trim().to_owned());
    cells
}

/// The code spans of a cell outside parentheses (the citations), in order; `Err` where the
/// cell's backquotes or parentheses do not pair up.
fn citations(cell: &str) -> Result<Vec<String>, String> {
    let mut spans = Vec::new();
    let mut depth = 0usize;
    let mut rest = cell;
    while let Some(i) = rest.find(['`', '(', ')']) {
        let ch = rest.as_bytes()[i];
        rest = &rest[i + 1..];
        match ch {
            b'(' => depth += 1,
            b')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "a `)` without its `(`".to_owned())?;
            }
            _ => {
                let end = rest
                    .find('`')
                    .ok_or_else(|| "a backquote without its pair".to_owned())?;
                if depth == 0 {
                    spans.push(rest[..end].to_owned());
                }
                rest = &rest[end + 1..];
            }
        }
    }
    if depth != 0 {
        return Err("a `(` without its `)`".into());
    }
    Ok(spans)
}

/// The source tree, read as needed.
struct Repo {
    root: PathBuf,
    /// Integration-test files by stem: `tests/*.rs` and `crates/*/tests/*.rs`.
    stems: HashMap<String, Vec<PathBuf>>,
    /// The `#[test]` fns of each file read so far.
    tests: HashMap<PathBuf, BTreeSet<String>>,
    cited_ui: BTreeSet<String>,
    cited_gpu: BTreeSet<(String, String)>,
}

impl Repo {
    fn new(root: &Path) -> Self {
        let mut stems: HashMap<String, Vec<PathBuf>> = HashMap::new();
        let mut dirs = vec![root.join("tests")];
        dirs.extend(gpu_binaries(root));
        dirs.extend(
            subdirs(&root.join("crates"))
                .into_iter()
                .map(|c| c.join("tests")),
        );
        for dir in dirs {
            for file in rs_files(&dir) {
                if let Some(stem) = file.file_stem().and_then(|s| s.to_str()) {
                    stems.entry(stem.to_owned()).or_default().push(file.clone());
                }
            }
        }
        Repo {
            root: root.to_owned(),
            stems,
            tests: HashMap::new(),
            cited_ui: BTreeSet::new(),
            cited_gpu: BTreeSet::new(),
        }
    }

    /// Checks every citation of a "shown by" cell, reporting each problem; returns how many
    /// citations it holds (crate names are context, not citations).
    fn check_cell(&mut self, cell: &str, problem: &mut dyn FnMut(String)) -> usize {
        let spans = match citations(cell) {
            Ok(spans) => spans,
            Err(e) => {
                problem(e);
                return 0;
            }
        };
        let mut krate: Option<&str> = None;
        let mut previous: Option<PathBuf> = None;
        let mut n = 0;
        for span in &spans {
            if let Some(c) = CRATES.iter().find(|c| *c == span) {
                krate = Some(c);
                continue;
            }
            n += 1;
            let mut file = None;
            if let Err(e) = self.resolve(span, krate, previous.as_deref(), &mut file) {
                problem(format!("`{span}`: {e}"));
            }
            previous = file;
        }
        n
    }

    /// Checks one citation. Sets `file` to the test file it names, for a `::name` after it,
    /// as soon as that file is known (also where the test is then not found in it).
    fn resolve(
        &mut self,
        span: &str,
        krate: Option<&str>,
        previous: Option<&Path>,
        file: &mut Option<PathBuf>,
    ) -> Result<(), String> {
        if span.is_empty() || span.contains(char::is_whitespace) {
            return Err("not a citation (a note goes in parentheses)".into());
        }
        if let Some(case) = span.strip_prefix("ui/") {
            let path = self.root.join("tests/ui").join(format!("{case}.rs"));
            if !is_ident_path(case, '/') || case.split('/').count() != 2 || !path.is_file() {
                return Err(format!("no compile-fail case {}", self.show(&path)));
            }
            self.cited_ui.insert(span.to_owned());
            return Ok(());
        }
        if let Some(twin) = span.strip_prefix("ui-pass/") {
            let path = self.root.join("tests/ui-pass").join(format!("{twin}.rs"));
            if !is_ident(twin) || !path.is_file() {
                return Err(format!("no passing twin {}", self.show(&path)));
            }
            return Ok(());
        }
        if let Some(name) = span.strip_prefix("::") {
            let previous =
                previous.ok_or("`::name` follows no citation of a test file in this cell")?;
            *file = Some(previous.to_owned());
            return self.test_in(previous, name);
        }
        if span.contains('/') {
            let path = self.root.join(span);
            let example = self.root.join(format!("{span}.rs"));
            if path.exists() || (span.starts_with("examples/") && example.is_file()) {
                return Ok(());
            }
            return Err(format!("no file {span}"));
        }
        let segments: Vec<&str> = span.split("::").collect();
        let (last, module) = segments.split_last().ok_or("empty")?;
        if !(is_ident(last) || *last == "*") || !module.iter().all(|s| is_ident(s)) {
            return Err("not a citation of the grammar at the top of docs/rules.md".into());
        }
        // `<stem>::<test>`: an integration-test file.
        if let [stem] = module {
            if let Some(files) = self.stems.get(*stem) {
                let [one] = files.as_slice() else {
                    return Err(format!(
                        "{} integration-test files are named {stem}.rs",
                        files.len()
                    ));
                };
                let one = one.clone();
                *file = Some(one.clone());
                return self.test_in(&one, last);
            }
        }
        let krate = krate.ok_or_else(|| {
            format!(
                "no integration-test file {}.rs, and no crate (`um-core`, ...) named before it \
                 in the cell",
                module.first().unwrap_or(last)
            )
        })?;
        let dir = self.root.join("crates").join(krate);
        if module.is_empty() {
            // `<test>` after a crate: a test of that crate, anywhere, or one of its test files.
            let mut found = Vec::new();
            let mut files = rs_files_deep(&dir.join("src"));
            files.extend(rs_files(&dir.join("tests")));
            for f in files {
                if self.tests_of(&f).contains(*last) {
                    found.push(f);
                }
            }
            let stem = dir.join("tests").join(format!("{last}.rs"));
            return match found.as_slice() {
                [one] => {
                    *file = Some(one.clone());
                    Ok(())
                }
                [] if stem.is_file() => {
                    *file = Some(stem);
                    Ok(())
                }
                [] => Err(format!("no #[test] fn {last} in {}", self.show(&dir))),
                _ => Err(format!(
                    "{} tests of {krate} are named {last}: give its module path",
                    found.len()
                )),
            };
        }
        // `<module>::...::<test>` after a crate: a unit test in the module's source file; the
        // segments after the file are modules inline in it (`tests`).
        for take in (1..=module.len()).rev() {
            let rel = module[..take].join("/");
            for source in [
                dir.join("src").join(format!("{rel}.rs")),
                dir.join("src").join(rel.as_str()).join("mod.rs"),
            ] {
                if source.is_file() {
                    let text = read(&source);
                    for inline in &module[take..] {
                        if !text.contains(&format!("mod {inline} ")) {
                            return Err(format!("no mod {inline} in {}", self.show(&source)));
                        }
                    }
                    *file = Some(source.clone());
                    return self.test_in(&source, last);
                }
            }
        }
        Err(format!(
            "no module {} in {}",
            module.join("::"),
            self.show(&dir.join("src"))
        ))
    }

    /// `Ok` where `name` is a `#[test]` fn of `file`; `*` where the file has a test, and it is
    /// not a GPU file (GPU tests are cited one by one). Records the GPU tests cited.
    fn test_in(&mut self, file: &Path, name: &str) -> Result<(), String> {
        let gpu = self.gpu_stem(file);
        let tests = self.tests_of(file);
        if name == "*" {
            if gpu.is_some() {
                return Err("a GPU test file's tests are cited one by one, not with `*`".into());
            }
            if tests.is_empty() {
                return Err(format!("no #[test] fn in {}", self.show(file)));
            }
            return Ok(());
        }
        if !is_ident(name) || !tests.contains(name) {
            return Err(format!("no #[test] fn {name} in {}", self.show(file)));
        }
        if let Some(stem) = gpu {
            self.cited_gpu.insert((stem, name.to_owned()));
        }
        Ok(())
    }

    /// The stem of a GPU test file: `tests/gpu_*.rs`, or a module `gpu_*.rs` of a GPU test
    /// binary's folder (`tests/gpu/`, `tests/gpu_devices/`).
    fn gpu_stem(&self, file: &Path) -> Option<String> {
        let rel = file.strip_prefix(&self.root).ok()?;
        let stem = rel.file_stem()?.to_str()?;
        let parent = rel.parent()?;
        let in_tests = parent == Path::new("tests")
            || (parent.parent() == Some(Path::new("tests"))
                && parent.file_name()?.to_str()?.starts_with("gpu"));
        (in_tests && stem.starts_with("gpu_")).then(|| stem.into())
    }

    /// Every `(stem, test)` of the GPU test files.
    fn gpu_tests(&mut self) -> BTreeSet<(String, String)> {
        let mut all = BTreeSet::new();
        let mut files = rs_files(&self.root.join("tests"));
        for dir in gpu_binaries(&self.root) {
            files.extend(rs_files(&dir));
        }
        for file in files {
            if let Some(stem) = self.gpu_stem(&file) {
                for name in self.tests_of(&file).clone() {
                    all.insert((stem.clone(), name));
                }
            }
        }
        all
    }

    fn tests_of(&mut self, file: &Path) -> &BTreeSet<String> {
        self.tests
            .entry(file.to_owned())
            .or_insert_with(|| test_fns(&read(file)))
    }

    fn show(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// The names of the fns of `source` that carry `#[test]` among the attributes and comments
/// right above them.
fn test_fns(source: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut tests = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let above = lines[..i].iter().rev().map(|l| l.trim());
        let attributes = above.take_while(|l| l.starts_with("#[") || l.starts_with("//"));
        if attributes.into_iter().any(|l| l == "#[test]") {
            tests.insert(name.to_owned());
        }
    }
    tests
}

/// The name of the fn a line declares (`fn x(`, `pub fn x<`, `async fn x(`).
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in ["pub(crate) ", "pub ", "async ", "unsafe "] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// Every `ui/<area>/<case>` of `tests/ui`.
fn ui_cases(root: &Path) -> BTreeSet<String> {
    let mut cases = BTreeSet::new();
    for area in subdirs(&root.join("tests/ui")) {
        for file in rs_files(&area) {
            if let (Some(a), Some(c)) = (area.file_name(), file.file_stem()) {
                cases.insert(format!(
                    "ui/{}/{}",
                    a.to_string_lossy(),
                    c.to_string_lossy()
                ));
            }
        }
    }
    cases
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_ident_path(s: &str, sep: char) -> bool {
    s.split(sep).all(is_ident)
}

/// The folders of the GPU test binaries that hold their tests in modules: `tests/gpu*/`.
fn gpu_binaries(root: &Path) -> Vec<PathBuf> {
    subdirs(&root.join("tests"))
        .into_iter()
        .filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("gpu"))
        })
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(list) => list.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    all.sort();
    all
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    entries(dir).into_iter().filter(|p| p.is_dir()).collect()
}

/// The `.rs` files directly in `dir`.
fn rs_files(dir: &Path) -> Vec<PathBuf> {
    entries(dir)
        .into_iter()
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .collect()
}

/// The `.rs` files in `dir` and below.
fn rs_files_deep(dir: &Path) -> Vec<PathBuf> {
    let mut files = rs_files(dir);
    for sub in subdirs(dir) {
        files.extend(rs_files_deep(&sub));
    }
    files
}
