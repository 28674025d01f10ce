//! The layers of `um-nccl`'s foreign calls, checked on its source files: `sys.rs` declares the
//! entry points (the `Fns` struct of function pointers), loads them and reads NCCL's error
//! texts; `result.rs` is the only other file that calls them (each as a `Result`), and every
//! other file goes through `result.rs`. No GPU or NCCL is needed.
#![allow(clippy::expect_used)] // a test stops at the first surprise

use std::path::Path;

/// The field names of `sys.rs`'s `Fns`: the entry points.
fn entry_points(sys: &str) -> Vec<String> {
    let start = sys
        .find("pub(crate) struct Fns {")
        .expect("sys.rs declares `pub(crate) struct Fns`");
    let body = &sys[start..];
    let end = body.find("\n}").expect("the struct ends");
    body[..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub(crate) "))
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_owned()))
        .collect()
}

/// Where `text` reaches an entry point through a `Fns` value (`fns.all_reduce`,
/// `self.nccl.fns.comm_abort`), other than in a comment: the line numbers and what they name.
fn calls(text: &str, entries: &[String]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for entry in entries {
            let pattern = format!("fns.{entry}");
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
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let read = |name: &str| std::fs::read_to_string(src.join(name)).expect("read a source file");
    let entries = entry_points(&read("sys.rs"));
    assert!(
        entries.len() >= 18,
        "entry points read from sys.rs: {entries:?}"
    );
    let mut files: Vec<String> = std::fs::read_dir(&src)
        .expect("src/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    files.sort();
    let mut wrong = Vec::new();
    for file in files
        .iter()
        .filter(|f| !["sys.rs", "result.rs"].contains(&f.as_str()))
    {
        for (line, what) in calls(&read(file), &entries) {
            wrong.push(format!("src/{file}:{line}: {what}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "entry points reached outside result.rs (add a function there instead):\n{}",
        wrong.join("\n")
    );
    // The check sees a call where there is one.
    assert!(
        !calls(&read("result.rs"), &entries).is_empty(),
        "result.rs makes the calls"
    );
    let planted = "    let rc = unsafe { (nccl.fns.comm_abort)(raw) }; // a call\n";
    assert_eq!(calls(planted, &entries).len(), 1);
    assert!(calls("    // (fns.comm_abort) in a comment\n", &entries).is_empty());
}
