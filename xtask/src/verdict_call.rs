//! One call of a GPU verdict split across calls of the device tool, from the repository root on
//! the GPU machine, with target/gpu-bundle carried:
//!
//!   bash scripts/verdict-call.sh LIMIT_S [run.sh options]   (execs um-xtask verdict-call)
//!
//! Runs `target/gpu-bundle/run.sh --all target/all --resume target/all/verdict.txt` for at most
//! LIMIT_S seconds (then stops it and every program it started: it runs under setsid, apart
//! from the caller), prints the parts done so far and what failed, and copies target/all to $OUT/all.
//! target/ is ignored, so on a machine that stays warm between calls target/all stays too, and
//! the next call goes on where this one stopped; on a fresh machine it starts over (carry an
//! earlier OUT/all as target/all to go on).

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether a verdict line tells of a failure: `ERRORS|own run under the tool failed|[1-9][0-9]*
/// failed|of [0-9]+ runs passed`, less those ending in `: 0 failed` or `N of N runs passed`.
fn worth_showing(l: &str) -> bool {
    let digits_before = |at: usize| -> &str {
        let head = &l[..at];
        &head[head.len() - head.bytes().rev().take_while(u8::is_ascii_digit).count()..]
    };
    let failed = l
        .match_indices(" failed")
        .any(|(i, _)| digits_before(i).bytes().any(|b| b != b'0'));
    let runs = l.match_indices(" runs passed").find_map(|(i, _)| {
        let n = digits_before(i);
        let before = l[..i - n.len()].strip_suffix(" of ")?;
        let head =
            &before[before.len() - before.bytes().rev().take_while(u8::is_ascii_digit).count()..];
        (!n.is_empty() && !head.is_empty()).then_some((head, n, i + " runs passed".len()))
    });
    let shown = l.contains("ERRORS")
        || l.contains("own run under the tool failed")
        || failed
        || runs.is_some();
    let all_runs_passed = runs.is_some_and(|(head, n, end)| end == l.len() && head.ends_with(n));
    shown && !l.ends_with(": 0 failed") && !all_runs_passed
}

/// `verdict-call LIMIT_S [run.sh options]`, from the repository root; the exit status.
pub(crate) fn main(args: Vec<String>) -> i32 {
    let Some(limit) = args.first().and_then(|l| l.parse::<u64>().ok()) else {
        eprintln!("verdict-call: usage: verdict-call.sh LIMIT_S [run.sh options]");
        return 127;
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let dir = cwd.join("target/all"); // absolute: run.sh works from the bundle folder
    let _ = fs::create_dir_all(&dir);
    let t0 = Instant::now();
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log.txt"));
    let Some((log, log2)) = log.ok().and_then(|f| f.try_clone().ok().map(|g| (f, g))) else {
        eprintln!(
            "verdict-call: cannot write {}",
            dir.join("log.txt").display()
        );
        return 1;
    };
    // Under setsid (its own process group and sid), so that every process it starts can be stopped at
    // once: `timeout`, which run.sh starts every program under, moves itself into a process
    // group of its own, so the group alone would miss it and its program.
    let child = Command::new("setsid")
        .args(["bash", "target/gpu-bundle/run.sh", "--all"])
        .arg(&dir)
        .arg("--resume")
        .arg(dir.join("verdict.txt"))
        .args(&args[1..])
        .stdout(log)
        .stderr(log2)
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("verdict-call: cannot start setsid");
        return 1;
    };
    let pid = child.id().to_string();
    let mut status = None;
    while status.is_none() && t0.elapsed() < Duration::from_secs(limit) {
        status = child.try_wait().ok().flatten();
        if status.is_none() {
            std::thread::sleep(Duration::from_secs(2).min(
                Duration::from_secs(limit).saturating_sub(t0.elapsed()) + Duration::from_millis(50),
            ));
        }
    }
    if status.is_none() {
        println!(
            "verdict-call: stopped at {limit}s; the next call goes on from {}",
            dir.display()
        );
        // Every process under the new sid (run.sh's pid, `pkill -s`).
        let _ = Command::new("pkill").args(["-TERM", "-s", &pid]).status();
        std::thread::sleep(Duration::from_secs(5));
        let _ = Command::new("pkill").args(["-KILL", "-s", &pid]).status();
    }
    let rc = child.wait().map(crate::run::status_code).unwrap_or(127);
    println!(
        "verdict-call: run.sh exit {rc} after {}s",
        t0.elapsed().as_secs()
    );
    let verdict = fs::read_to_string(dir.join("verdict.txt")).unwrap_or_default();
    for l in verdict.lines().filter(|l| {
        ["device:", "commit:", "gpus:", "== part"]
            .iter()
            .any(|k| l.starts_with(k))
    }) {
        println!("{l}");
    }
    for l in verdict.lines().filter(|l| worth_showing(l)) {
        println!("{}", l.chars().take(400).collect::<String>());
    }
    let mut partials: Vec<_> = fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("partial-"))
                .collect()
        })
        .unwrap_or_default();
    partials.sort();
    for p in partials {
        let n = fs::read_to_string(dir.join(&p))
            .unwrap_or_default()
            .matches('\n')
            .count();
        println!("verdict-call: {p}: {n} programs done");
    }
    if let Ok(out) = std::env::var("OUT") {
        if !out.is_empty() {
            copy_tree(&dir, &Path::new(&out).join("all"));
        }
    }
    0
}

/// `cp -r FROM/. TO/`.
fn copy_tree(from: &Path, to: &Path) {
    let _ = fs::create_dir_all(to);
    let Ok(rd) = fs::read_dir(from) else { return };
    for e in rd.filter_map(Result::ok) {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            let _ = fs::copy(&src, &dst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::worth_showing;

    #[test]
    fn the_lines_shown_are_those_of_failures() {
        assert!(worth_showing("test gpu_a: 1 passed, 2 failed; x"));
        assert!(!worth_showing("test gpu_a: 3 passed, 0 failed"));
        assert!(worth_showing("example ex1: 1 of 3 runs passed"));
        assert!(!worth_showing("example ex1: 3 of 3 runs passed"));
        assert!(worth_showing("racecheck gpu_b: ERRORS: rc=99"));
        assert!(!worth_showing("memcheck gpu_b: clean"));
    }
}
