//! The NCCL GPU runs, in one or two calls of the device tool (every step takes about 560 s on
//! 2x H200: run "tests examples memcheck", then "bench"): on a machine with two or more GPUs
//! (the 2x and 4x H200 kinds), from the repository root, with target/gpu-bundle carried:
//!
//! `bash scripts/nccl-call.sh OUT [BUDGET_S]` (execs `target/gpu-bundle/um-xtask nccl-call`)
//!
//! Runs these steps in order, each under `timeout`, and starts none after BUDGET_S seconds
//! (default 540, to end within one call of 600 s); NCCL_CALL_STEPS="tests examples ..." picks
//! some (the default is every one):
//!   tests      tests/gpu_devices gpu_nccl:: (collectives, refusals, processes, a killed rank)
//!   examples   data_parallel on every GPU: one process (a Group per step), one process per GPU,
//!              both over sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), unified memory with
//!              blocking communicators, coherent memory
//!   memcheck   run.sh --sanitize memcheck of gpu_nccl and data_parallel (single process; the
//!              ranks gpu_nccl starts run under the tool too)
//!   host       um_bench --only nccl --quick: the host time per collective (the full 16,000
//!              rounds) and one round of bus bandwidth, about 125 s on 2x H200
//!   bench      bench.sh OUT/bench --only nccl --base bench/performance.md: section 10 of
//!              docs/performance.md on this machine's GPUs (copy OUT/bench/docs over docs/)
//! Every step's output goes to OUT/STEP.log; OUT/summary.txt has one line per step (ok, FAILED
//! with its exit status, TIMEOUT, or SKIPPED) with its seconds, and is printed at the end. The
//! exit status is 0 only when every step chosen ran and passed. xtask/tests/nccl_call.rs runs
//! it with stand-ins.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// One step's run: the bundle, the summary, the budget and the counts so far.
struct Call {
    bundle: PathBuf,
    out: PathBuf,
    summary: PathBuf,
    budget: u64,
    t0: Instant,
    failed: u32,
    skipped: u32,
}

fn append(path: &Path, text: &str) {
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(text.as_bytes());
    }
}

fn first_line(c: &mut Command) -> String {
    c.output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

impl Call {
    /// Runs COMMAND from the bundle under `timeout`, unless the budget is spent; one summary
    /// line.
    fn step(&mut self, name: &str, limit: u64, cmd: &[&str]) {
        let spent = self.t0.elapsed().as_secs();
        let left = self.budget.saturating_sub(spent);
        if self.budget < spent || left < 10 {
            append(
                &self.summary,
                &format!("{name:<56} SKIPPED (budget of {}s spent)\n", self.budget),
            );
            self.skipped += 1;
            return;
        }
        let limit = limit.min(left);
        let first = name.split(' ').next().unwrap_or(name);
        let log = self.out.join(format!("{first}.log"));
        append(&log, &format!("== {name}: {}\n", cmd.join(" ")));
        let s0 = Instant::now();
        let rc = match OpenOptions::new().create(true).append(true).open(&log) {
            Ok(f) => match f.try_clone() {
                Ok(f2) => Command::new("timeout")
                    .args(["-k", "10", &limit.to_string()])
                    .args(cmd)
                    .current_dir(&self.bundle)
                    .env("NCCL_NVLS_ENABLE", "0")
                    .stdout(f)
                    .stderr(f2)
                    .status()
                    .map(crate::run::status_code)
                    .unwrap_or(127),
                Err(_) => 127,
            },
            Err(_) => 127,
        };
        let verdict = match rc {
            0 => "ok".to_string(),
            124 | 137 => {
                self.failed += 1;
                format!("TIMEOUT (limit {limit}s)")
            }
            _ => {
                self.failed += 1;
                format!("FAILED (exit {rc})")
            }
        };
        let secs = format!("{}s", s0.elapsed().as_secs());
        append(&self.summary, &format!("{name:<56} {secs:<6} {verdict}\n"));
    }
}

/// `nccl-call OUT [BUDGET_S]`, from the repository root; the exit status.
pub(crate) fn main(args: Vec<String>) -> i32 {
    let Some(out) = args.first() else {
        eprintln!("nccl-call: usage: nccl-call.sh OUT [BUDGET_S]");
        return 127;
    };
    let budget: u64 = args.get(1).and_then(|b| b.parse().ok()).unwrap_or(540);
    let _ = fs::create_dir_all(out);
    let out = std::path::absolute(out).unwrap_or_else(|_| PathBuf::from(out));
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let bundle = cwd.join("target/gpu-bundle");
    if !bundle.is_dir() {
        println!(
            "nccl-call: no {} (build it with scripts/gpu-bundle.sh and carry it)",
            bundle.display()
        );
        return 2;
    }
    let gpus = Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with("GPU "))
                .count()
        })
        .unwrap_or(0);
    let steps = format!(
        " {} ",
        std::env::var("NCCL_CALL_STEPS")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "tests examples memcheck host bench".to_string())
    );
    let t0 = Instant::now();
    let summary = out.join("summary.txt");
    let commit = fs::read_to_string(bundle.join("COMMIT"))
        .map(|c| c.trim_end_matches('\n').to_string())
        .unwrap_or_else(|_| "unknown".to_string());
    let date = first_line(Command::new("date").args(["-u", "+%FT%TZ"]));
    let device = first_line(
        Command::new("nvidia-smi")
            .args(["--query-gpu=name,driver_version", "--format=csv,noheader"]),
    );
    let _ = fs::write(
        &summary,
        format!("nccl-call, {date}, commit {commit}\ngpus: {gpus} ({device})\n"),
    );
    if gpus < 2 {
        let line = format!("nccl-call: needs two or more GPUs; this machine has {gpus}\n");
        print!("{line}");
        append(&summary, &line);
        return 2;
    }
    let mut call = Call {
        bundle,
        out: out.clone(),
        summary: summary.clone(),
        budget,
        t0,
        failed: 0,
        skipped: 0,
    };
    let chosen = |s: &str| steps.contains(&format!(" {s} "));
    if chosen("tests") {
        call.step(
            "tests gpu_nccl",
            300,
            &[
                "./tests/gpu_devices",
                "--include-ignored",
                "--test-threads=1",
                "gpu_nccl::",
            ],
        );
    }
    if chosen("examples") {
        for mode in [
            "--single-process",
            "--launch",
            "--launch --socket",
            "--single-process --socket",
            "--storage unified --blocking",
            "--storage coherent",
        ] {
            let mut cmd = vec!["./examples/data_parallel"];
            cmd.extend(mode.split(' '));
            call.step(&format!("examples data_parallel {mode}"), 120, &cmd);
        }
    }
    if chosen("memcheck") {
        call.step(
            "memcheck gpu_nccl data_parallel",
            400,
            &[
                "env",
                "UM_SANITIZE_ONLY=tests/gpu_nccl examples/data_parallel",
                "bash",
                "./run.sh",
                "--sanitize",
                "memcheck",
            ],
        );
    }
    if chosen("host") {
        let host = out.join("host").display().to_string();
        call.step(
            "host um_bench --only nccl --quick",
            240,
            &[
                "./bench/um_bench",
                "--out",
                &host,
                "--only",
                "nccl",
                "--quick",
            ],
        );
    }
    if chosen("bench") {
        let bench = out.join("bench").display().to_string();
        call.step(
            "bench bench.sh --only nccl",
            540,
            &[
                "bash",
                "./bench.sh",
                &bench,
                "--only",
                "nccl",
                "--base",
                "bench/performance.md",
            ],
        );
    }
    append(
        &summary,
        &format!(
            "total {}s; {} step(s) failed, {} skipped\n",
            t0.elapsed().as_secs(),
            call.failed,
            call.skipped
        ),
    );
    print!("{}", fs::read_to_string(&summary).unwrap_or_default());
    // The host-time table, where that step ran.
    let page = fs::read_to_string(out.join("host/docs/performance.md")).unwrap_or_default();
    let lines: Vec<&str> = page.lines().collect();
    if let Some(i) = lines
        .iter()
        .position(|l| l.starts_with("### Host time per step"))
    {
        for l in &lines[i..lines.len().min(i + 9)] {
            println!("{l}");
        }
    }
    i32::from(call.failed != 0 || call.skipped != 0)
}
