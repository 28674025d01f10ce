//! The layers of the foreign calls of the crates that load a C library at run time, checked on
//! their source files: `sys.rs` declares the entry points (a struct of function pointers), the
//! loader loads them, `result.rs` is the only other file that calls them (each as a `Result`),
//! and every other file goes through `result.rs` (`docs/design.md`, "Layers"). No GPU, cuBLAS or
//! NCCL is needed.
#![allow(clippy::expect_used)] // a test stops at the first surprise

use std::path::Path;

/// One crate's layers: where its entry points are declared, how code reaches one (`api.sgemm`,
/// `nccl.fns.comm_abort`), and the files that may.
struct Layers {
    krate: &'static str,
    /// The struct of function pointers in `sys.rs`, as it opens.
    table: &'static str,
    /// What each of its fields begins with.
    field: &'static str,
    /// What a call reaches an entry point through, before its name.
    through: &'static str,
    /// The files that may call entry points: `sys.rs`, the loader, `result.rs`.
    callers: &'static [&'static str],
    /// At least this many entry points.
    least: usize,
}

const CRATES: [Layers; 4] = [
    Layers {
        krate: "um-cublas",
        table: "pub struct Api {",
        field: "pub ",
        through: "api.",
        callers: &["sys.rs", "result.rs"],
        least: 9,
    },
    Layers {
        krate: "um-curand",
        table: "pub struct Api {",
        field: "pub ",
        through: "api.",
        callers: &["sys.rs", "result.rs"],
        least: 11,
    },
    Layers {
        krate: "um-cusparse",
        table: "pub struct Api {",
        field: "pub ",
        through: "api.",
        callers: &["sys.rs", "result.rs"],
        least: 16,
    },
    Layers {
        krate: "um-nccl",
        table: "pub(crate) struct Fns {",
        field: "pub(crate) ",
        through: "fns.",
        callers: &["sys.rs", "result.rs"],
        least: 18,
    },
];

/// The field names of the table: the entry points.
fn entry_points(sys: &str, layers: &Layers) -> Vec<String> {
    let start = sys
        .find(layers.table)
        .unwrap_or_else(|| panic!("{}'s sys.rs declares `{}`", layers.krate, layers.table));
    let body = &sys[start..];
    let end = body.find("\n}").expect("the struct ends");
    body[..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix(layers.field))
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_owned()))
        .collect()
}

/// Where `text` reaches an entry point through `through`, other than in a comment: the line
/// numbers and what they name.
fn calls(text: &str, through: &str, entries: &[String]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for entry in entries {
            let pattern = format!("{through}{entry}");
            if let Some(at) = code.find(&pattern) {
                let after = code[at + pattern.len()..].chars().next();
                if after.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
                    found.push((n + 1, pattern));
                }
            }
        }
    }
    found
}

#[test]
fn only_the_result_layer_calls_an_entry_point() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut wrong = Vec::new();
    for layers in &CRATES {
        let src = root.join("crates").join(layers.krate).join("src");
        let read =
            |name: &str| std::fs::read_to_string(src.join(name)).expect("read a source file");
        let entries = entry_points(&read("sys.rs"), layers);
        assert!(
            entries.len() >= layers.least,
            "{}: entry points read from sys.rs: {entries:?}",
            layers.krate
        );
        let mut files: Vec<String> = std::fs::read_dir(&src)
            .expect("src/")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".rs"))
            .collect();
        files.sort();
        for file in files
            .iter()
            .filter(|f| !layers.callers.contains(&f.as_str()))
        {
            for (line, what) in calls(&read(file), layers.through, &entries) {
                wrong.push(format!("{}/src/{file}:{line}: {what}", layers.krate));
            }
        }
        // The check sees the calls where they are.
        assert!(
            !calls(&read("result.rs"), layers.through, &entries).is_empty(),
            "{}: result.rs makes the calls",
            layers.krate
        );
    }
    assert!(
        wrong.is_empty(),
        "entry points reached outside result.rs (add a function there instead):\n{}",
        wrong.join("\n")
    );
    let entries = vec!["comm_abort".to_owned()];
    let planted = "    let rc = unsafe { (nccl.fns.comm_abort)(raw) }; // a call\n";
    assert_eq!(calls(planted, "fns.", &entries).len(), 1);
    assert!(calls("    // (fns.comm_abort) in a comment\n", "fns.", &entries).is_empty());
    assert!(calls("    fns.comm_aborted\n", "fns.", &entries).is_empty());
}
