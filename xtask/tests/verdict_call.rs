//! `um-xtask verdict-call` through `scripts/verdict-call.sh` (one call of a verdict split across
//! device calls), run here without a GPU: a stand-in bundle whose `run.sh` writes a verdict
//! and a partial part as the runner does, so that CI checks the time limit, the stop of every
//! process the run started, what the call prints and the copy to `$OUT/all`.
#![allow(clippy::expect_used)] // a test stops at the first surprise

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/stand_in.rs"]
mod stand_in;
use stand_in::{Scratch, executable, place_tool};

const VERDICT_CALL: &str = include_str!("../../scripts/verdict-call.sh");
/// The tool that the script execs, as the bundle holds it.
const TOOL: &str = env!("CARGO_BIN_EXE_xtask");

/// A `run.sh --all DIR --resume DIR/verdict.txt` that writes DIR/verdict.txt and a partial
/// part, starts a child that writes its pid, and then runs `$STAND_IN_SECONDS` seconds.
const RUN_SH: &str = r#"#!/usr/bin/env bash
dir=$2
echo "args: $*"
cat >"$dir/verdict.txt" <<'V'
# um GPU verdict (run.sh --all)
device: Stand-in
gpus: 1
commit: test
== part normal: 3 passed, 1 failed (1s)
test gpu_a: 2 passed, 0 failed
test gpu_b: 1 passed, 1 failed; gpu_b::slow
example ex1: 3 of 3 runs passed
example ex2: 2 of 3 runs passed
== part racecheck: 1 programs clean, 1 with errors (1s)
racecheck gpu_a: clean
racecheck gpu_b: ERRORS: racecheck gpu_b: rc=99 ========= RACECHECK SUMMARY: 1 hazard
V
printf 'memcheck gpu_a: clean\nmemcheck gpu_b: clean\n' >"$dir/partial-memcheck.txt"
sleep "$STAND_IN_SECONDS" &
echo $! >"$dir/child.pid"
wait
exit 1
"#;

/// A repository root with a stand-in bundle: (its scratch, the root).
fn repo(name: &str) -> (Scratch, PathBuf) {
    let scratch = Scratch::new(&format!("um-verdict-call-{name}"));
    let root = scratch.dir.join("repo");
    let bundle = root.join("target/gpu-bundle");
    fs::create_dir_all(&bundle).expect("mkdir");
    executable(&bundle.join("run.sh"), RUN_SH);
    place_tool(TOOL, &bundle.join("um-xtask"));
    fs::write(root.join("verdict-call.sh"), VERDICT_CALL).expect("script");
    (scratch, root)
}

fn call(root: &PathBuf, limit: &str, seconds: &str, out: &PathBuf) -> (i32, String) {
    let mut cmd = Command::new("bash");
    cmd.current_dir(root)
        .args(["verdict-call.sh", limit, "--parts", "normal"])
        .env("STAND_IN_SECONDS", seconds)
        .env("OUT", out);
    stand_in::run(&mut cmd, "verdict-call.sh")
}

/// A run past the limit is stopped with every process it started (under its sid), the call
/// says so and where the next goes on, prints the parts and the failing lines only, counts
/// each partial part, and copies the folder to `$OUT/all`.
#[test]
fn a_run_past_its_limit_is_stopped_with_its_children_and_reported() {
    let (scratch, root) = repo("stopped");
    let out = scratch.dir.join("out");
    let started = Instant::now();
    let (status, text) = call(&root, "3", "60", &out);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status, 0, "{text}");
    assert!(
        text.contains("verdict-call: stopped at 3s; the next call goes on from ")
            && text.contains("target/all"),
        "{text}"
    );
    assert!(text.contains("verdict-call: run.sh exit "), "{text}");
    assert!(
        text.contains("== part normal: 3 passed, 1 failed (1s)\n")
            && text.contains("device: Stand-in\n")
            && text.contains("test gpu_b: 1 passed, 1 failed; gpu_b::slow\n")
            && text.contains("example ex2: 2 of 3 runs passed\n")
            && text.contains("racecheck gpu_b: ERRORS: "),
        "{text}"
    );
    assert!(
        !text.contains("test gpu_a: ") && !text.contains("example ex1: "),
        "passing lines are not shown: {text}"
    );
    assert!(
        text.contains("verdict-call: partial-memcheck.txt: 2 programs done"),
        "{text}"
    );
    let pid = fs::read_to_string(root.join("target/all/child.pid")).expect("child.pid");
    let alive = Command::new("kill")
        .args(["-0", pid.trim()])
        .status()
        .expect("kill")
        .success();
    assert!(!alive, "the run's child {pid} is stopped too");
    let log = fs::read_to_string(root.join("target/all/log.txt")).expect("log.txt");
    assert!(
        log.contains("--resume ") && log.contains("target/all/verdict.txt --parts normal"),
        "{log}"
    );
    assert!(
        out.join("all/verdict.txt").is_file() && out.join("all/partial-memcheck.txt").is_file(),
        "copied to $OUT/all"
    );
}

/// A run that ends within the limit is waited for, and its exit status is said.
#[test]
fn a_run_within_its_limit_ends_by_itself_and_its_status_is_said() {
    let (scratch, root) = repo("ends");
    let out = scratch.dir.join("out");
    let (status, text) = call(&root, "60", "0", &out);
    assert_eq!(status, 0, "{text}");
    assert!(!text.contains("stopped at"), "{text}");
    assert!(
        text.contains("verdict-call: run.sh exit 1 after "),
        "{text}"
    );
}
