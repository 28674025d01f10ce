//! `um-xtask nccl-call` through `scripts/nccl-call.sh` (the NCCL GPU runs in one device call),
//! run here without a GPU: a
//! stand-in `nvidia-smi` and a bundle of stand-in programs that print how they were called,
//! so that CI checks the steps, their order, the summary and the budget before a 4x H200
//! machine spends time on them.
#![allow(clippy::expect_used)] // a test stops at the first surprise

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "common/stand_in.rs"]
mod stand_in;
use stand_in::{Scratch, executable, nvidia_smi, path_with, place_tool};

const NCCL_CALL: &str = include_str!("../../scripts/nccl-call.sh");
/// The tool that the script execs, as the bundle holds it.
const TOOL: &str = env!("CARGO_BIN_EXE_xtask");

/// A program that prints its name and arguments; `data_parallel --launch --socket` fails and
/// `data_parallel --storage coherent` runs for 30 s.
const PROGRAM: &str = r#"#!/usr/bin/env bash
echo "ran: $(basename "$0") $* ${UM_SANITIZE_ONLY:+(only: $UM_SANITIZE_ONLY)}"
[ "$*" = "--launch --socket" ] && exit 3
[ "$*" = "--storage coherent" ] && exec sleep 30
exit 0
"#;

struct Machine {
    dir: PathBuf,
    _scratch: Scratch,
}

impl Machine {
    fn new(name: &str, gpus: usize) -> Machine {
        let scratch = Scratch::new(&format!("um-nccl-call-{name}"));
        let dir = scratch.dir.clone();
        let bundle = dir.join("repo/target/gpu-bundle");
        for d in ["tests", "examples", "bench"] {
            fs::create_dir_all(bundle.join(d)).expect("mkdir");
        }
        fs::create_dir_all(dir.join("bin")).expect("mkdir");
        fs::write(bundle.join("COMMIT"), "test\n").expect("COMMIT");
        for p in [
            "tests/gpu_devices",
            "examples/data_parallel",
            "bench/um_bench",
            "run.sh",
            "bench.sh",
        ] {
            executable(&bundle.join(p), PROGRAM);
        }
        executable(&dir.join("bin/nvidia-smi"), &nvidia_smi(gpus));
        place_tool(TOOL, &bundle.join("um-xtask"));
        fs::write(dir.join("repo/nccl-call.sh"), NCCL_CALL).expect("script");
        Machine {
            dir,
            _scratch: scratch,
        }
    }

    /// `bash nccl-call.sh out BUDGET` from the repository root: (exit status, output, the
    /// folder `out`).
    fn run(&self, budget: &str, steps: Option<&str>) -> (i32, String, PathBuf) {
        let repo = self.dir.join("repo");
        let path = path_with(&self.dir.join("bin"));
        let mut cmd = Command::new("bash");
        cmd.current_dir(&repo)
            .args(["nccl-call.sh", "out", budget])
            .env("PATH", path)
            .env_remove("NCCL_CALL_STEPS");
        if let Some(s) = steps {
            cmd.env("NCCL_CALL_STEPS", s);
        }
        let (status, text) = stand_in::run(&mut cmd, "nccl-call.sh");
        (status, text, repo.join("out"))
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Each step runs what it names, in order; a failure and a timeout are said and fail the call;
/// the steps after the budget are skipped, said, and fail it too.
#[test]
fn every_step_runs_in_order_and_the_budget_stops_the_rest() {
    let m = Machine::new("all", 4);
    let started = std::time::Instant::now();
    let (status, text, out) = m.run("20", None);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(40),
        "the budget bounds the call: {:?}",
        started.elapsed()
    );
    assert_ne!(status, 0, "{text}");
    let summary = read(&out.join("summary.txt"));
    let verdicts: Vec<(&str, &str)> = summary
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_at(l.len().min(57));
            (l.len() > 57).then(|| (name.trim_end(), rest.trim()))
        })
        .collect();
    let verdict = |name: &str| -> &str {
        verdicts
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no line for {name:?} in\n{summary}"))
    };
    assert!(summary.contains("gpus: 4 "), "{summary}");
    assert!(verdict("tests gpu_nccl").ends_with(" ok"), "{summary}");
    assert!(
        verdict("examples data_parallel --single-process").ends_with(" ok"),
        "{summary}"
    );
    assert!(
        verdict("examples data_parallel --launch --socket").ends_with("FAILED (exit 3)"),
        "{summary}"
    );
    // The coherent run sleeps past what is left of the 20 s: stopped at the budget.
    assert!(
        verdict("examples data_parallel --storage coherent").contains("TIMEOUT (limit "),
        "{summary}"
    );
    for later in [
        "memcheck gpu_nccl data_parallel",
        "host um_bench --only nccl --quick",
        "bench bench.sh --only nccl",
    ] {
        assert_eq!(verdict(later), "SKIPPED (budget of 20s spent)", "{summary}");
    }
    assert!(summary.contains("2 step(s) failed, 3 skipped"), "{summary}");
    let examples = read(&out.join("examples.log"));
    let order: Vec<&str> = examples
        .lines()
        .filter_map(|l| l.strip_prefix("ran: data_parallel "))
        .map(str::trim)
        .collect();
    assert_eq!(
        order,
        [
            "--single-process",
            "--launch",
            "--launch --socket",
            "--single-process --socket",
            "--storage unified --blocking",
            "--storage coherent"
        ]
    );
    assert!(
        read(&out.join("tests.log"))
            .contains("ran: gpu_devices --include-ignored --test-threads=1 gpu_nccl::"),
        "{text}"
    );
}

/// `NCCL_CALL_STEPS` picks steps: the host-time step alone, then memcheck and the section-10
/// benchmark, each called as documented; every chosen step passing passes the call.
#[test]
fn chosen_steps_run_alone_and_pass_the_call() {
    let m = Machine::new("chosen", 2);
    let (status, text, out) = m.run("120", Some("host"));
    assert_eq!(status, 0, "{text}");
    let summary = read(&out.join("summary.txt"));
    assert!(
        summary.contains("0 step(s) failed, 0 skipped") && !summary.contains("tests gpu_nccl"),
        "{summary}"
    );
    let host = read(&out.join("host.log"));
    assert!(
        host.contains(&format!(
            "ran: um_bench --out {} --only nccl --quick",
            out.join("host").display()
        )),
        "{host}"
    );
    let (status, text, out) = m.run("120", Some("memcheck bench"));
    assert_eq!(status, 0, "{text}");
    assert!(
        read(&out.join("memcheck.log")).contains(
            "ran: run.sh --sanitize memcheck (only: tests/gpu_nccl examples/data_parallel)"
        ),
        "{text}"
    );
    assert!(
        read(&out.join("bench.log")).contains(&format!(
            "ran: bench.sh {} --only nccl --base bench/performance.md",
            out.join("bench").display()
        )),
        "{text}"
    );
}

/// One GPU: nothing runs, and the call says why.
#[test]
fn one_gpu_is_refused() {
    let m = Machine::new("one", 1);
    let (status, text, _) = m.run("60", None);
    assert_eq!(status, 2, "{text}");
    assert!(
        text.contains("needs two or more GPUs; this machine has 1"),
        "{text}"
    );
}
