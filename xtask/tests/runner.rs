//! The GPU runner (`um-xtask run`, the bundle's `run.sh`), run here without a GPU: stand-ins
//! for `nvidia-smi`, `compute-sanitizer` and `nvcc`, and test programs that only exit, so that
//! CI checks what the GPU machines run (the verdict lines, the NCCL classifier, the programs
//! side by side on two GPUs, `--resume`) without one. The stand-ins print what the real tools
//! print in the cases the runner tells apart (2x H200 runs, 2026-11-22).
#![allow(clippy::expect_used)] // a test stops at the first surprise

use std::fs;
use std::path::PathBuf;
use std::process::Command;

#[path = "common/stand_in.rs"]
mod stand_in;
use stand_in::{Scratch, executable, nvidia_smi, path_with, place_tool};

/// The runner as the bundle holds it: the binary under test beside the shim that execs it.
const RUNNER: &str = env!("CARGO_BIN_EXE_xtask");
/// The bundle's `run.sh`.
const RUN_SH: &str = include_str!("../run.sh");
/// The bundle's `stall-stacks.sh`, which the runner runs every program through.
const STALL_STACKS: &str = include_str!("../../scripts/stall-stacks.sh");

/// A `compute-sanitizer` that logs each run (`FAKE_LOG`: program, tool, `CUDA_VISIBLE_DEVICES`,
/// whether NCCL's kernels were left out) and answers by the program's name.
const SANITIZER: &str = r#"#!/usr/bin/env bash
case "$1" in
  --help) echo "  --kernel-name-exclude arg   key1=val1,..."; exit 0 ;;
  --version) echo "Version 0.0 (stand-in)"; exit 0 ;;
esac
tool="" prog="" exclude=no args="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift ;;
    --kernel-name-exclude) exclude=yes ;;
    ./*) prog=$(basename "$1") ;;
    */racecheck_repro) prog=racecheck_repro ;;
    */racecheck_cusparse) prog=racecheck_cusparse ;;
  esac
  shift
done
echo "$prog $tool visible=${CUDA_VISIBLE_DEVICES:-all} exclude=$exclude" >>"$FAKE_LOG"
echo "$args" >>"$FAKE_LOG.args"
echo "$prog start $(date +%s%N) visible=${CUDA_VISIBLE_DEVICES:-all}" >>"$FAKE_LOG.times"
sleep 0.3
echo "$prog end $(date +%s%N)" >>"$FAKE_LOG.times"
echo "========= COMPUTE-SANITIZER"
case "$prog" in
  gpu_nccl)
    if [ "$exclude" = yes ]; then echo "========= ERROR SUMMARY: 0 errors"; exit 0; fi
    # Three whole records and one whose first line another rank's output tore.
    for i in 1 2 3; do
      echo "========= Barrier error detected. Divergent thread(s) in block."
      echo "=========     at ncclDevFunc_AllReduce_Sum_f32_RING_SIMPLE()"
    done
    echo "==rank1 output== Barrier error detected."
    echo "=========     at ncclDevFunc_AllReduce_Sum_f32_RING_SIMPLE()"
    echo "========= ERROR SUMMARY: 4 errors"
    exit 99 ;;
  gpu_bad)
    echo "========= Invalid __global__ read of size 4 bytes"
    echo "=========     at my_kernel()"
    echo "========= ERROR SUMMARY: 1 error"
    exit 99 ;;
  gpu_hang)
    exec sleep 60 ;;
  cufft_user | cufft_and_own_leak)
    # cuFFT's work area, which no cuFFT call frees, as memcheck reported it (2x H200,
    # 2026-11-28); and beside it, in the second program, a leak of the program's own.
    if [ "$tool" = memcheck ]; then
      n=1
      echo "========= Leaked 6,967,984 bytes at 0x7fa4a6c00000"
      echo "=========     Saved host backtrace up to driver entry point at allocation time"
      echo "=========         Host Frame: cuMemAlloc_v2 [0x32b91f] in libcuda.so.1"
      echo "=========         Host Frame: cufftPlan1d [0x343423] in libcufft.so.12"
      echo "========= "
      if [ "$prog" = cufft_and_own_leak ]; then
        n=2
        echo "========= Leaked 256 bytes at 0x7f63ae000600"
        echo "=========         Host Frame: cuMemAllocManaged [0x32bfdf] in libcuda.so.1"
        echo "=========         Host Frame: um_core::memory::storage::parts::allocate [0x388d39] in cufft_and_own_leak"
        echo "========= "
      fi
      echo "========= ERROR SUMMARY: $n errors"
      exit 99
    fi
    echo "========= ERROR SUMMARY: 0 errors"
    exit 0 ;;
  gpu_track_once | gpu_track_always | racecheck_repro)
    # Racecheck's own failure to track a launch, as the tool printed it (2x H200, 2026-11-23):
    # gpu_track_once in its first run only, the others in every run.
    runs=$(grep -c "^$prog " "$FAKE_LOG")
    if [ "$prog" = gpu_track_once ] && [ "$runs" -gt 1 ]; then
      echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
      exit 0
    fi
    echo "========= Internal Sanitizer Error: Detected a failure to track a kernel launch. Future records might be incomplete"
    echo "========= "
    echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
    exit 99 ;;
  gpu_track_after_test_name)
    # The harness's "test NAME ... " without its newline, then the tool's line after it on the
    # same line (H100, 2026-11-28); in the first run only.
    if [ "$(grep -c "^$prog " "$FAKE_LOG")" -gt 1 ]; then
      echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
      exit 0
    fi
    printf 'test gpu_capture_frees::every_free_is_captured ... '
    echo "========= Internal Sanitizer Error: Detected a failure to track a kernel launch. Future records might be incomplete"
    echo "========= "
    echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
    exit 99 ;;
  gpu_track_and_race)
    echo "========= Internal Sanitizer Error: Detected a failure to track a kernel launch. Future records might be incomplete"
    echo "========= Error: Race reported between Write access at my_kernel()+0x90"
    echo "=========     and Read access at my_kernel()+0xa0 [4 hazards]"
    echo "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"
    exit 99 ;;
  gpu_cusparse_user | gpu_cusparse_and_own_race | racecheck_cusparse)
    # Hazards inside cuSPARSE's SpMV kernel, as racecheck printed them (1 of 4 H200,
    # 2026-11-28), the first after a test's name on its line; in the second program, beside
    # them, a race in a kernel of the program's own; the reproducer's own result line, and no
    # hazard at all where FAKE_CUSPARSE_REPRO=clean.
    k="void cusparse::csrmv_v3_kernel<std::integral_constant<bool, (bool)0>, int, int, double>(cusparse::KernelCoeffs<T7>, const T3 *)"
    if [ "$prog" = racecheck_cusparse ] && [ "${FAKE_CUSPARSE_REPRO:-}" = clean ]; then
      echo "racecheck_cusparse: 32 products, 0 of 19044 values wrong"
      echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
      exit 0
    fi
    n=2 e=1
    printf 'test gpu_cusparse::spmv ... '
    echo "========= Error: Race reported between Write access at $k+0x3bc0"
    echo "=========     and Write access at $k+0x3bf0 [4396 hazards]"
    echo "========= "
    echo "========= Warning: Race reported between Write access at $k+0x3bb0"
    echo "=========     and Write access at $k+0x3be0 [2230 hazards]"
    echo "========= "
    if [ "$prog" = gpu_cusparse_and_own_race ]; then
      n=3 e=2
      echo "========= Error: Race reported between Write access at my_kernel()+0x90"
      echo "=========     and Read access at my_kernel()+0xa0 [4 hazards]"
      echo "========= "
    fi
    [ "$prog" = racecheck_cusparse ] && echo "racecheck_cusparse: 32 products, 0 of 19044 values wrong"
    echo "========= RACECHECK SUMMARY: $n hazards displayed ($e errors, 1 warnings)"
    [ "$prog" = racecheck_cusparse ] && exit 0
    exit 99 ;;
  gpu_own_test_fails)
    echo "test slow_one ... FAILED"
    echo "---- slow_one stdout ----"
    echo "thread 'slow_one' panicked at the deadline"
    echo "========= ERROR SUMMARY: 0 errors"
    exit 101 ;;
  *)
    echo "========= ERROR SUMMARY: 0 errors"
    exit 0 ;;
esac
"#;

/// A machine of `gpus` GPUs with the stand-ins, and a bundle of the programs named.
struct Machine {
    dir: PathBuf,
    _scratch: Scratch,
}

impl Machine {
    fn new(name: &str, gpus: usize, tests: &[&str], examples: &[&str]) -> Machine {
        let scratch = Scratch::new(&format!("um-xtask-run-{name}"));
        let dir = scratch.dir.clone();
        let (bin, bundle) = (dir.join("bin"), dir.join("bundle"));
        for d in [&bin, &bundle.join("tests"), &bundle.join("examples")] {
            fs::create_dir_all(d).expect("mkdir");
        }
        executable(&bin.join("nvidia-smi"), &nvidia_smi(gpus));
        executable(&bin.join("compute-sanitizer"), SANITIZER);
        executable(&bin.join("nvcc"), "#!/usr/bin/env bash\nexit 1\n");
        executable(&bundle.join("run.sh"), RUN_SH);
        place_tool(RUNNER, &bundle.join("um-xtask"));
        executable(&bundle.join("stall-stacks.sh"), STALL_STACKS);
        // A debugger that names the process it was pointed at (cuda-gdb on the GPU machines).
        executable(
            &bin.join("stand-in-gdb"),
            "#!/usr/bin/env bash\necho \"Thread 1 (LWP $2): #0 stand_in_frame ()\"\n",
        );
        fs::write(bundle.join("COMMIT"), "test\n").expect("COMMIT");
        for t in tests {
            executable(
                &bundle.join("tests").join(t),
                "#!/usr/bin/env bash\nexit 0\n",
            );
        }
        for e in examples {
            executable(
                &bundle.join("examples").join(e),
                "#!/usr/bin/env bash\nexit 0\n",
            );
        }
        Machine {
            dir,
            _scratch: scratch,
        }
    }

    /// An nvcc that builds: a C++ reproducer "exists" and runs under the stand-in sanitizer.
    fn nvcc_that_builds(&self) {
        executable(
            &self.dir.join("bin/nvcc"),
            "#!/usr/bin/env bash\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && o=$2; shift; done\n\
             printf '#!/bin/sh\\nexit 0\\n' >\"$o\"; chmod +x \"$o\"\n",
        );
    }

    /// `run.sh ARGS` on this machine: (exit status, output, verdict.txt of OUT, the tool's log).
    fn run(&self, out: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String, String) {
        let log = self.dir.join(format!("{out}.tool-log"));
        let path = path_with(&self.dir.join("bin"));
        let mut cmd = Command::new("bash");
        cmd.arg(self.dir.join("bundle/run.sh"))
            .args(["--all", &self.dir.join(out).display().to_string()])
            .args(args)
            .env("PATH", path)
            .env("FAKE_LOG", &log)
            .env_remove("UM_SANITIZE_ONLY")
            .env_remove("UM_SANITIZE_GPUS")
            .env("UM_SANITIZE_PER_GPU", "1")
            .env_remove("CUDA_VISIBLE_DEVICES");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let (status, text) = stand_in::run(&mut cmd, &format!("run.sh {args:?}"));
        let verdict =
            fs::read_to_string(self.dir.join(out).join("verdict.txt")).unwrap_or_default();
        let tool_log = fs::read_to_string(&log).unwrap_or_default();
        (status, text, verdict, tool_log)
    }
}

/// The GPUs `program` saw under `tool`, as the stand-in logged them (`visible=0`, `visible=all`),
/// or "not run".
fn visible_under(log: &str, tool: &str, program: &str) -> String {
    log.lines()
        .find(|l| l.starts_with(&format!("{program} {tool} ")))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("visible=")))
        .unwrap_or("not run")
        .to_string()
}

/// The verdict's line of `program` under `tool`.
fn line<'a>(verdict: &'a str, tool: &str, program: &str) -> &'a str {
    let head = format!("{tool} {program}: ");
    verdict
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no line for {head} in\n{verdict}"))
}

/// A test binary whose tests live in modules (`tests/gpu`: `gpu_one::a`, `gpu_two::c`), as the
/// GPU tests are built: it lists its tests and logs each run with its arguments.
const MODULES: &str = r#"#!/usr/bin/env bash
filter=""
for a in "$@"; do case "$a" in gpu_*::) filter=$a ;; esac; done
case " $* " in
  *" --list "*)
    for t in gpu_one::a gpu_one::b_leaks_x gpu_two::c; do
      case "$t" in "$filter"*) echo "$t: test" ;; esac
    done
    exit 0 ;;
esac
echo "ran: $*" >>"$FAKE_LOG.modules"
case "$filter" in
  gpu_one::) echo "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out" ;;
  gpu_two::) echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 2 filtered out" ;;
esac
"#;

/// Such a binary is one program per module: each module's own verdict line in the normal part
/// (the binary run with the filter `<module>::`), and under memcheck each module checked alone,
/// its `leaks_` tests (named one by one) in a second run without leak checking.
#[test]
fn a_binary_of_feature_modules_runs_as_one_program_per_module() {
    let m = Machine::new("modules", 2, &["gpu_x"], &["ex1"]);
    executable(&m.dir.join("bundle/tests/gpu"), MODULES);
    let (status, text, verdict, log) = m.run("out", &["--parts", "normal,memcheck"], &[]);
    assert_eq!(status, 0, "{text}");
    assert!(
        verdict.contains("test gpu_one: 2 passed, 0 failed\n"),
        "{verdict}"
    );
    assert!(
        verdict.contains("test gpu_two: 1 passed, 0 failed\n"),
        "{verdict}"
    );
    assert!(
        !verdict.contains("test gpu: "),
        "the binary is no program of its own: {verdict}"
    );
    assert_eq!(
        line(&verdict, "memcheck", "gpu_one"),
        "memcheck gpu_one: clean"
    );
    assert_eq!(
        line(&verdict, "memcheck", "gpu_two"),
        "memcheck gpu_two: clean"
    );
    let runs = fs::read_to_string(m.dir.join("out.tool-log.modules")).unwrap_or_default();
    assert!(runs.contains("ran: gpu_one:: --include-ignored"), "{runs}");
    assert!(runs.contains("ran: gpu_two:: --include-ignored"), "{runs}");
    // Under memcheck: gpu_one, gpu_two, and gpu_one's leaks_ test alone.
    let memcheck_runs = log
        .lines()
        .filter(|l| l.starts_with("gpu memcheck "))
        .count();
    assert_eq!(memcheck_runs, 3, "{log}");
}

/// A test binary of feature modules that also holds a test outside them (`stray`, at its
/// root): the binary honours its filter and `--skip`s, as the harness does, and logs each run.
const MODULES_AND_A_STRAY_TEST: &str = r#"#!/usr/bin/env bash
filter="" skips="" prev=""
for a in "$@"; do
  if [ "$prev" = --skip ]; then skips="$skips $a"
  else case "$a" in gpu_*::) filter=$a ;; esac
  fi
  prev=$a
done
selected() {
  for t in gpu_one::a stray; do
    case "$t" in *"$filter"*) ;; *) continue ;; esac
    keep=yes
    for s in $skips; do case "$t" in *"$s"*) keep=no ;; esac; done
    [ "$keep" = yes ] && echo "$t"
  done
}
case " $* " in
  *" --list "*) selected | sed 's/$/: test/'; exit 0 ;;
esac
echo "ran: $*" >>"$FAKE_LOG.modules"
echo "test result: ok. $(selected | wc -l) passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"
"#;

/// A test the binary holds outside its feature modules still runs, in a program of its own
/// named for the binary, which skips the modules (each runs once, in its own program); under
/// the sanitizers too.
#[test]
fn a_test_outside_the_feature_modules_runs_once_in_a_program_of_its_own() {
    let m = Machine::new("stray", 1, &[], &["ex1"]);
    executable(&m.dir.join("bundle/tests/gpu"), MODULES_AND_A_STRAY_TEST);
    let (status, text, verdict, _) = m.run("out", &["--parts", "normal,memcheck"], &[]);
    assert_eq!(status, 0, "{text}");
    assert!(
        verdict.contains("test gpu_one: 1 passed, 0 failed\n"),
        "{verdict}"
    );
    assert!(
        verdict.contains("test gpu: 1 passed, 0 failed\n"),
        "the stray test ran, and only it: {verdict}"
    );
    assert_eq!(line(&verdict, "memcheck", "gpu"), "memcheck gpu: clean");
    assert_eq!(
        line(&verdict, "memcheck", "gpu_one"),
        "memcheck gpu_one: clean"
    );
}

/// A test binary whose `--list` fails (exit 101, as a harness that panics) and that runs 3
/// tests.
const CANNOT_LIST: &str = r#"#!/usr/bin/env bash
case " $* " in *" --list "*) exit 101 ;; esac
echo "ran: $*" >>"$FAKE_LOG.modules"
echo "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"
"#;

/// A test binary that cannot list its tests (it crashes, or its list outlasts the limit) is
/// one program, run whole: its failure is seen in every part, and a GPU binary is never left
/// out of the sanitizer parts unseen.
#[test]
fn a_binary_that_cannot_list_its_tests_runs_whole_in_every_part() {
    let m = Machine::new("unlisted", 1, &[], &["ex1"]);
    executable(&m.dir.join("bundle/tests/gpu"), CANNOT_LIST);
    let (status, text, verdict, log) = m.run("out", &["--parts", "normal,memcheck"], &[]);
    assert_eq!(status, 0, "{text}");
    assert!(
        verdict.contains("test gpu: 3 passed, 0 failed\n"),
        "{verdict}"
    );
    assert_eq!(line(&verdict, "memcheck", "gpu"), "memcheck gpu: clean");
    assert!(log.contains("gpu memcheck "), "{log}");
}

/// `tests/gpu_devices` as built: the two-GPU modules, whose tests the sanitizer parts skip by
/// name.
const TWO_GPU_MODULES: &str = r#"#!/usr/bin/env bash
case " $* " in
  *" --list "*)
    filter=""
    for a in "$@"; do case "$a" in gpu_*::) filter=$a ;; esac; done
    for t in gpu_nccl::a_rank_killed_mid_collective_is_an_error gpu_nccl::one_leaks_x \
      gpu_nccl::meets gpu_two_devices::memory_handed_to_device_1_and_back gpu_two_devices::copies; do
      case "$t" in "$filter"*) echo "$t: test" ;; esac
    done
    exit 0 ;;
esac
"#;

/// A module keeps what the sanitizers ask of its feature: the binary runs with the module's
/// filter and the module's skip list (gpu_nccl's killed-rank test, gpu_two_devices' reads
/// across devices under memcheck), and memcheck's run of the `leaks_` tests names them, with
/// their module, one by one.
#[test]
fn a_module_under_a_sanitizer_keeps_its_filter_and_its_skip_list() {
    let m = Machine::new("module-skips", 2, &[], &["ex1"]);
    executable(&m.dir.join("bundle/tests/gpu_devices"), TWO_GPU_MODULES);
    let (status, text, verdict, _) = m.run("out", &["--parts", "memcheck"], &[]);
    assert_eq!(status, 0, "{text}");
    assert!(
        line(&verdict, "memcheck", "gpu_nccl").starts_with("memcheck gpu_nccl: clean"),
        "{verdict}"
    );
    let args = fs::read_to_string(m.dir.join("out.tool-log.args")).unwrap_or_default();
    let runs: Vec<&str> = args
        .lines()
        .filter(|l| l.contains("./tests/gpu_devices"))
        .collect();
    let nccl = runs
        .iter()
        .find(|l| l.contains("./tests/gpu_devices gpu_nccl:: --include-ignored --skip ::fault_"))
        .unwrap_or_else(|| panic!("gpu_nccl's run: {args}"));
    assert!(
        nccl.contains("--skip a_rank_killed_mid_collective") && nccl.ends_with("--skip leaks_"),
        "{nccl}"
    );
    let leaks = runs
        .iter()
        .find(|l| l.contains("--exact"))
        .unwrap_or_else(|| panic!("the leaks_ run: {args}"));
    assert!(
        leaks.ends_with("--exact gpu_nccl::one_leaks_x"),
        "only gpu_nccl's leaks_ test, by its full name: {leaks}"
    );
    let two = runs
        .iter()
        .find(|l| l.contains("./tests/gpu_devices gpu_two_devices:: "))
        .unwrap_or_else(|| panic!("gpu_two_devices' run: {args}"));
    assert!(
        two.contains("--skip memory_handed_to_device_1") && !two.contains("--skip a_rank_killed"),
        "{two}"
    );
    assert_eq!(runs.len(), 3, "two modules and one leaks_ run: {args}");
    // What those arguments select, as libtest reads them (a filter or a skip matches anywhere
    // in a name, unless --exact): the fault tests are left out, a test whose name merely holds
    // `fault_` (as `default_` does) is not.
    let selects = |run: &str, test: &str| -> bool {
        let words: Vec<&str> = run.split_whitespace().collect();
        let exact = words.contains(&"--exact");
        let matches = |pat: &str| {
            if exact {
                test == pat
            } else {
                test.contains(pat)
            }
        };
        let mut filters = Vec::new();
        let mut i = 0;
        while i < words.len() {
            match words[i] {
                "--skip" => {
                    if words.get(i + 1).is_some_and(|w| matches(w)) {
                        return false;
                    }
                    i += 1;
                }
                w if w.starts_with("--") || w.starts_with("./") => {}
                w => filters.push(w),
            }
            i += 1;
        }
        filters.is_empty() || filters.iter().any(|f| matches(f))
    };
    assert!(
        !selects(nccl, "gpu_nccl::fault_in_a_rank_is_its_err"),
        "{nccl}"
    );
    assert!(selects(nccl, "gpu_nccl::default_streams_reduce"), "{nccl}");
    assert!(
        !selects(nccl, "gpu_nccl::a_rank_killed_mid_collective_is_an_err"),
        "{nccl}"
    );
    assert!(!selects(nccl, "gpu_nccl::one_leaks_x"), "{nccl}");
}

#[test]
fn two_gpus_run_the_one_gpu_programs_side_by_side_and_the_rest_alone() {
    let m = Machine::new(
        "side-by-side",
        2,
        &[
            "gpu_a",
            "gpu_b",
            "gpu_c",
            "gpu_nccl",
            "gpu_own_test_fails",
            "gpu_faults",
        ],
        &["ex1", "pipeline"],
    );
    let (status, _, verdict, log) = m.run("out", &["--parts", "synccheck"], &[]);
    // Every program clean for the tool, but one failed its own tests under it: the part says
    // so, and the run fails.
    assert!(
        verdict
            .contains("== part synccheck: 7 programs clean, 0 with errors, 1 whose own run failed"),
        "{verdict}"
    );
    assert_ne!(status, 0, "an own run that failed fails the run");
    // One GPU each for the programs of one GPU, both GPUs used; every GPU for the others.
    let visible = |prog: &str| visible_under(&log, "synccheck", prog);
    let singles: Vec<String> = ["gpu_a", "gpu_b", "gpu_c", "gpu_own_test_fails", "ex1"]
        .iter()
        .map(|p| visible(p))
        .collect();
    assert!(
        singles.iter().all(|v| v == "visible=0" || v == "visible=1"),
        "{singles:?}"
    );
    assert!(
        singles.iter().any(|v| v == "visible=0") && singles.iter().any(|v| v == "visible=1"),
        "both GPUs used: {singles:?}"
    );
    assert_eq!(visible("gpu_nccl"), "visible=all");
    assert_eq!(visible("pipeline"), "visible=all");
    assert_eq!(
        visible("gpu_faults"),
        "not run",
        "the fault tests are skipped"
    );
    // A program whose own tests failed under the tool says so; the tool's verdict counts.
    assert_eq!(
        line(&verdict, "synccheck", "gpu_own_test_fails"),
        "synccheck gpu_own_test_fails: clean; its own run under the tool failed (exit 101: slow_one)"
    );
    // Every report inside NCCL's kernels, one of them with a torn first line: counted by its
    // "at" line.
    let nccl = line(&verdict, "synccheck", "gpu_nccl");
    assert!(
        nccl.contains("clean outside NCCL's kernels")
            && nccl.contains("4 reports, every one inside NCCL's own kernels"),
        "{nccl}"
    );
}

/// Each program's run under the stand-in tool, from its log of starts and ends: (program, GPU,
/// start, end) in nanoseconds.
fn intervals(times: &str) -> Vec<(String, String, u128, u128)> {
    let mut out = Vec::new();
    for l in times.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.get(1) == Some(&"start") {
            let end = times
                .lines()
                .map(|e| e.split_whitespace().collect::<Vec<_>>())
                .find(|e| e.first() == w.first() && e.get(1) == Some(&"end"))
                .and_then(|e| e.get(2).and_then(|t| t.parse().ok()))
                .expect("every run ends");
            let start = w[2].parse().expect("a time");
            out.push((w[0].to_string(), w[3].to_string(), start, end));
        }
    }
    out
}

#[test]
fn a_program_listed_as_using_a_second_device_gets_every_gpu_under_a_sanitizer() {
    let m = Machine::new(
        "second-device",
        2,
        &["gpu_a", "gpu_second", "gpu_b"],
        &["ex1", "pipeline"],
    );
    fs::write(
        m.dir.join("bundle/gpu-every.txt"),
        "# programs that use a second device\ntests/gpu_second\nexamples/ex1\n",
    )
    .expect("list");
    let (status, _, verdict, log) = m.run("out", &["--parts", "synccheck"], &[]);
    assert_eq!(status, 0, "{verdict}");
    let visible = |prog: &str| visible_under(&log, "synccheck", prog);
    // Listed: every GPU, so that its tests of device 1 run under the tool too.
    assert_eq!(visible("gpu_second"), "visible=all");
    assert_eq!(visible("ex1"), "visible=all");
    // Not listed: one GPU each (the list, where the bundle has one, is the whole story).
    for p in ["gpu_a", "gpu_b", "pipeline"] {
        let v = visible(p);
        assert!(v == "visible=0" || v == "visible=1", "{p}: {v}");
    }
}

/// A program of the normal part that logs when it ran and on which GPU, and passes one test
/// (an example prints no summary); asked for its list of tests, it has none.
const TIMED: &str = r#"#!/usr/bin/env bash
case " $* " in *" --list "*) exit 0 ;; esac
n=$(basename "$0")
echo "$n start $(date +%s%N) visible=${CUDA_VISIBLE_DEVICES:-all}" >>"$FAKE_LOG.times"
sleep 0.3
echo "$n end $(date +%s%N)" >>"$FAKE_LOG.times"
case "$0" in
  */tests/*) echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out" ;;
esac
"#;

#[test]
fn the_normal_part_runs_one_program_per_gpu_side_by_side_and_the_rest_alone() {
    let m = Machine::new(
        "normal-side-by-side",
        2,
        &["gpu_a", "gpu_b", "gpu_c", "gpu_second", "gpu_nccl"],
        &["ex1", "ex2"],
    );
    for p in ["gpu_a", "gpu_b", "gpu_c", "gpu_second", "gpu_nccl"] {
        executable(&m.dir.join("bundle/tests").join(p), TIMED);
    }
    for e in ["ex1", "ex2"] {
        executable(&m.dir.join("bundle/examples").join(e), TIMED);
    }
    fs::write(m.dir.join("bundle/gpu-every.txt"), "tests/gpu_second\n").expect("list");
    let (status, text, verdict, _) = m.run("out", &["--parts", "normal"], &[]);
    assert_eq!(status, 0, "{text}");
    assert!(
        verdict.contains("== part normal: 7 passed, 0 failed"),
        "{verdict}"
    );
    for l in [
        "test gpu_a: 1 passed, 0 failed",
        "test gpu_second: 1 passed, 0 failed",
        "test gpu_nccl: 1 passed, 0 failed",
        "example ex2: 1 of 1 runs passed",
    ] {
        assert!(verdict.lines().any(|v| v == l), "{l} in\n{verdict}");
    }
    let times = fs::read_to_string(m.dir.join("out.tool-log.times")).expect("times");
    let runs = intervals(&times);
    assert_eq!(runs.len(), 7, "{times}");
    let overlap =
        |a: &(String, String, u128, u128), b: &(String, String, u128, u128)| a.2 < b.3 && b.2 < a.3;
    let (single, every): (Vec<_>, Vec<_>) = runs
        .iter()
        .partition(|r| !["gpu_second", "gpu_nccl"].contains(&r.0.as_str()));
    // One GPU each, both GPUs used, never two programs on one GPU at once.
    assert!(
        single
            .iter()
            .all(|r| r.1 == "visible=0" || r.1 == "visible=1"),
        "{runs:?}"
    );
    assert!(
        single.iter().any(|r| r.1 == "visible=0") && single.iter().any(|r| r.1 == "visible=1"),
        "{runs:?}"
    );
    assert!(
        single
            .iter()
            .any(|a| single.iter().any(|b| a.1 != b.1 && overlap(a, b))),
        "side by side: {runs:?}"
    );
    for a in &single {
        for b in single.iter().filter(|b| b.0 != a.0 && b.1 == a.1) {
            assert!(!overlap(a, b), "{} and {} on one GPU at once", a.0, b.0);
        }
    }
    // A two-GPU program and a listed one: every GPU, alone.
    for a in &every {
        assert_eq!(a.1, "visible=all", "{runs:?}");
        for b in runs.iter().filter(|b| b.0 != a.0) {
            assert!(!overlap(a, b), "{} ran beside {}", b.0, a.0);
        }
    }
    // One at a time where asked: every program with every GPU.
    let (status, _, _, _) = m.run(
        "one",
        &["--parts", "normal"],
        &[("UM_NORMAL_ONE_AT_A_TIME", "1")],
    );
    assert_eq!(status, 0);
    let times = fs::read_to_string(m.dir.join("one.tool-log.times")).expect("times");
    assert!(
        intervals(&times).iter().all(|r| r.1 == "visible=all"),
        "{times}"
    );
}

#[test]
fn several_programs_share_a_gpu_but_one_that_reads_free_memory_has_it_to_itself() {
    let m = Machine::new(
        "per-gpu",
        1,
        &["gpu_a", "gpu_b", "gpu_c", "gpu_free", "gpu_d"],
        &[],
    );
    fs::write(m.dir.join("bundle/gpu-exclusive.txt"), "tests/gpu_free\n").expect("list");
    let (status, _, verdict, _) = m.run(
        "out",
        &["--parts", "synccheck"],
        &[("UM_SANITIZE_PER_GPU", "3")],
    );
    assert_eq!(status, 0, "{verdict}");
    assert!(
        verdict.contains("== part synccheck: 5 programs clean, 0 with errors"),
        "{verdict}"
    );
    let times = fs::read_to_string(m.dir.join("out.tool-log.times")).expect("times");
    let runs = intervals(&times);
    assert_eq!(runs.len(), 5, "{times}");
    assert!(runs.iter().all(|r| r.1 == "visible=0"), "{runs:?}");
    let overlap =
        |a: &(String, String, u128, u128), b: &(String, String, u128, u128)| a.2 < b.3 && b.2 < a.3;
    let lone = runs
        .iter()
        .find(|r| r.0 == "gpu_free")
        .expect("gpu_free ran");
    for r in runs.iter().filter(|r| r.0 != "gpu_free") {
        assert!(!overlap(lone, r), "{} ran beside gpu_free: {runs:?}", r.0);
    }
    let others: Vec<_> = runs.iter().filter(|r| r.0 != "gpu_free").collect();
    assert!(
        others
            .iter()
            .any(|a| others.iter().any(|b| a.0 != b.0 && overlap(a, b))),
        "programs of one GPU ran side by side: {runs:?}"
    );
    // At most three at once.
    for r in &runs {
        let at_once = runs.iter().filter(|o| o.2 <= r.2 && r.2 < o.3).count();
        assert!(at_once <= 3, "{at_once} at once: {runs:?}");
    }
}

#[test]
fn without_the_list_every_program_runs_alone_on_its_gpu() {
    let m = Machine::new("no-list", 1, &["gpu_a", "gpu_b", "gpu_c"], &[]);
    let (status, _, verdict, _) = m.run(
        "out",
        &["--parts", "synccheck"],
        &[("UM_SANITIZE_PER_GPU", "3")],
    );
    assert_eq!(status, 0, "{verdict}");
    let times = fs::read_to_string(m.dir.join("out.tool-log.times")).expect("times");
    let runs = intervals(&times);
    assert_eq!(runs.len(), 3, "{times}");
    for a in &runs {
        for b in &runs {
            assert!(a.0 == b.0 || !(a.2 < b.3 && b.2 < a.3), "{runs:?}");
        }
    }
}

#[test]
fn a_leak_made_inside_cufft_is_excluded_by_name_and_a_leak_beside_it_still_fails() {
    let m = Machine::new("cufft", 1, &[], &["cufft_user", "cufft_and_own_leak"]);
    let (status, _, verdict, _) = m.run("out", &["--parts", "memcheck"], &[]);
    assert_ne!(
        status, 0,
        "the program's own leak fails the part: {verdict}"
    );
    let clean = line(&verdict, "memcheck", "cufft_user");
    assert!(
        clean.starts_with(
            "memcheck cufft_user: clean; 1 leak(s) of 6967984 bytes made inside libcufft.so excluded: cuFFT keeps a work area"
        ),
        "{clean}"
    );
    let both = line(&verdict, "memcheck", "cufft_and_own_leak");
    assert!(
        both.starts_with("memcheck cufft_and_own_leak: ERRORS"),
        "{both}"
    );
}

#[test]
fn nccl_kernels_are_left_out_of_initcheck_and_errors_fail_the_part() {
    let m = Machine::new("initcheck", 2, &["gpu_nccl", "gpu_bad"], &[]);
    let (status, text, verdict, log) = m.run("out", &["--parts", "initcheck"], &[]);
    assert!(
        log.contains("gpu_nccl initcheck visible=all exclude=yes"),
        "{log}"
    );
    let nccl = line(&verdict, "initcheck", "gpu_nccl");
    assert!(
        nccl.contains("NCCL's own kernels not instrumented (--kernel-name-exclude kns=nccl)"),
        "{nccl}"
    );
    assert!(
        line(&verdict, "initcheck", "gpu_bad").starts_with("initcheck gpu_bad: ERRORS:"),
        "{verdict}"
    );
    assert!(
        verdict.contains("== part initcheck: 1 programs clean, 1 with errors"),
        "{verdict}"
    );
    assert_ne!(status, 0, "a part with errors fails the run:\n{text}");
}

#[test]
fn resume_keeps_the_programs_an_earlier_call_finished() {
    let m = Machine::new("resume", 1, &["gpu_a", "gpu_b"], &["ex1"]);
    // An earlier call's verdict (its header) and the lines its cut-short part left.
    let earlier = m.dir.join("earlier");
    fs::create_dir_all(&earlier).expect("mkdir");
    fs::write(
        earlier.join("verdict.txt"),
        "# um GPU verdict (run.sh --all)\n",
    )
    .expect("write");
    fs::write(
        earlier.join("partial-synccheck.txt"),
        "synccheck gpu_a: clean\n",
    )
    .expect("write");
    let resume = earlier.join("verdict.txt").display().to_string();
    let (status, _, verdict, log) =
        m.run("out", &["--parts", "synccheck", "--resume", &resume], &[]);
    assert_eq!(status, 0);
    assert!(
        !log.contains("gpu_a synccheck"),
        "gpu_a not run again: {log}"
    );
    assert!(
        log.contains("gpu_b synccheck visible=all"),
        "one GPU: {log}"
    );
    assert!(
        verdict.contains(
            "== part synccheck: 3 programs clean, 0 with errors, 1 programs from an earlier call"
        ),
        "{verdict}"
    );
}

/// `--resume OUT/verdict.txt`: one run continued in one folder, call after call. The parts the
/// folder's verdict holds are kept (it is read before it is written again), and a sanitizer
/// part that a call left unfinished goes on from the folder's own `partial-PART.txt`.
#[test]
fn resume_in_the_same_folder_keeps_its_parts_and_goes_on_with_its_partial() {
    let m = Machine::new("resume-same", 1, &["gpu_a", "gpu_b"], &["ex1"]);
    let out = m.dir.join("out");
    fs::create_dir_all(&out).expect("mkdir");
    fs::write(
        out.join("verdict.txt"),
        "# um GPU verdict (run.sh --all)\n== part normal: 3 passed, 0 failed (1s)\n\
         test gpu_a: 1 passed, 0 failed\n",
    )
    .expect("write");
    fs::write(
        out.join("partial-synccheck.txt"),
        "synccheck gpu_a: clean\n",
    )
    .expect("write");
    let resume = out.join("verdict.txt").display().to_string();
    let (status, text, verdict, log) = m.run(
        "out",
        &["--parts", "normal,synccheck", "--resume", &resume],
        &[],
    );
    assert_eq!(status, 0, "{text}");
    assert!(
        verdict.contains("== part normal: 3 passed, 0 failed (1s)")
            && verdict.contains("test gpu_a: 1 passed, 0 failed"),
        "the folder's own part is kept: {verdict}"
    );
    assert!(
        !log.contains("gpu_a synccheck"),
        "gpu_a not run again: {log}"
    );
    assert!(log.contains("gpu_b synccheck"), "gpu_b run: {log}");
    assert!(
        verdict.contains(
            "== part synccheck: 3 programs clean, 0 with errors, 1 programs from an earlier call"
        ),
        "{verdict}"
    );
    assert!(
        !out.join("partial-synccheck.txt").exists(),
        "the finished part's partial file is gone"
    );
}

/// `--resume` keeps only the parts of this bundle's commit (the stand-in bundle's is `test`):
/// a verdict of one run is of one bundle. `UM_RESUME_ANY_COMMIT=1` keeps another's too, and the
/// commit line then names both.
#[test]
fn resume_keeps_parts_of_another_commit_only_when_told_and_says_so() {
    let m = Machine::new("resume-commit", 1, &["gpu_a"], &["ex1"]);
    let earlier = m.dir.join("earlier");
    fs::create_dir_all(&earlier).expect("mkdir");
    fs::write(
        earlier.join("verdict.txt"),
        "# um GPU verdict (run.sh --all)\ncommit: older\n== part normal: 9 passed, 0 failed (1s)\n\
         test gpu_a: 9 passed, 0 failed\n",
    )
    .expect("write");
    let resume = earlier.join("verdict.txt").display().to_string();
    let (status, text, verdict, _) = m.run("out", &["--parts", "normal", "--resume", &resume], &[]);
    assert_eq!(status, 0, "{text}");
    assert!(
        !verdict.contains("9 passed") && verdict.contains("commit: test\n"),
        "another commit's part is not kept: {verdict}"
    );
    assert!(text.contains("nothing of it kept"), "{text}");
    let (status, text, verdict, _) = m.run(
        "out2",
        &["--parts", "normal", "--resume", &resume],
        &[("UM_RESUME_ANY_COMMIT", "1")],
    );
    assert_eq!(status, 0, "{text}");
    assert!(
        verdict.contains("== part normal: 9 passed, 0 failed (1s)")
            && verdict.contains("commit: test (parts kept from older)"),
        "kept when told, and said: {verdict}"
    );
}

/// A program that hangs is one failure, and leaves every thread's stack of it (and of its
/// children) under OUT/stacks/PART/ before `timeout` stops it; the verdict line names the file.
/// Racecheck of `async_requests` once gave only "rc=124 no summary" (2x H200, 2026-11-23).
#[test]
fn a_program_that_hangs_fails_and_leaves_its_stacks() {
    let m = Machine::new("hang", 1, &["gpu_a", "gpu_hang"], &["ex1"]);
    // In the normal part the test binary itself hangs.
    executable(
        &m.dir.join("bundle/tests/gpu_hang"),
        "#!/usr/bin/env bash\nexec sleep 60\n",
    );
    let gdb = m.dir.join("bin/stand-in-gdb").display().to_string();
    let env = [
        ("UM_PROGRAM_LIMIT_S", "5"),
        ("UM_SANITIZE_LIMIT_S", "5"),
        ("UM_STALL_STACKS_S", "2"),
        ("UM_STALL_GDB_S", "5"),
        ("UM_GDB", gdb.as_str()),
    ];
    let started = std::time::Instant::now();
    let (status, text, verdict, _) = m.run("out", &["--parts", "normal,racecheck"], &env);
    assert_ne!(status, 0, "a hang fails the run:\n{text}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(45),
        "each hang bounded by its limit: {:?}",
        started.elapsed()
    );
    assert!(
        verdict
            .contains("test gpu_hang: 0 passed, 1 failed (stacks: stacks/normal/gpu_hang.stacks)"),
        "{verdict}"
    );
    assert!(
        verdict.contains("test gpu_a: 0 passed, 0 failed\n"),
        "{verdict}"
    );
    assert_eq!(
        line(&verdict, "racecheck", "gpu_hang"),
        "racecheck gpu_hang: ERRORS: racecheck gpu_hang: rc=124 no summary \
         (stacks: stacks/racecheck/racecheck-gpu_hang.stacks)"
    );
    assert!(
        line(&verdict, "racecheck", "gpu_a").ends_with(": clean"),
        "{verdict}"
    );
    for file in [
        "normal/gpu_hang.stacks",
        "racecheck/racecheck-gpu_hang.stacks",
    ] {
        let stacks = fs::read_to_string(m.dir.join("out/stacks").join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}\n{text}"));
        assert!(
            stacks.contains("=== pid")
                && stacks.contains(" state=")
                && stacks.contains("stand_in_frame"),
            "{file}: {stacks}"
        );
    }
}

/// Racecheck's own "failure to track a kernel launch", with nothing else reported, leaves a run
/// incomplete: the program runs again, a complete clean run is its verdict, and the line says
/// what happened and what the C++ reproducer (no um) showed beside it. A run that reports it
/// every time, or a race beside it, fails.
#[test]
fn a_racecheck_run_the_tool_could_not_track_runs_again() {
    let m = Machine::new(
        "track",
        1,
        &[
            "gpu_a",
            "gpu_track_once",
            "gpu_track_always",
            "gpu_track_and_race",
        ],
        &[],
    );
    m.nvcc_that_builds();
    let (status, text, verdict, log) = m.run("out", &["--parts", "racecheck"], &[]);
    let runs = |prog: &str| {
        log.lines()
            .filter(|l| l.starts_with(&format!("{prog} ")))
            .count()
    };
    assert_eq!(runs("gpu_track_once"), 2, "{log}");
    assert_eq!(runs("gpu_track_always"), 3, "twice more, no more: {log}");
    assert_eq!(runs("gpu_track_and_race"), 1, "a race is a verdict: {log}");
    // The reproducer: 3 processes at once, once per run.sh, stopping at its first such error.
    assert_eq!(runs("racecheck_repro"), 3, "{log}");
    let repro = "bench/racecheck_repro.cu, no um, 8 host threads each launching 2 kernels a round \
                 on a stream created per round and waiting by stream callback, 3 processes at \
                 once under racecheck: the same error in round 1 (3 runs): RACECHECK SUMMARY: \
                 1 hazard displayed (1 error, 0 warnings)";
    assert_eq!(
        line(&verdict, "racecheck", "gpu_track_once"),
        format!(
            "racecheck gpu_track_once: clean (run 2 of 2: the first incomplete (racecheck's own \
             \"Internal Sanitizer Error: Detected a failure to track a kernel launch\", no hazard \
             records); the same error without um: {repro})"
        )
    );
    let always = line(&verdict, "racecheck", "gpu_track_always");
    assert!(
        always
            .starts_with("racecheck gpu_track_always: ERRORS: racecheck gpu_track_always: rc=99 ")
            && always.contains("every one of 3 runs incomplete")
            && always.contains(repro),
        "{always}"
    );
    assert!(
        line(&verdict, "racecheck", "gpu_track_and_race").starts_with(
            "racecheck gpu_track_and_race: ERRORS: racecheck gpu_track_and_race: rc=99 "
        ),
        "{verdict}"
    );
    assert!(
        line(&verdict, "racecheck", "gpu_a").ends_with(": clean"),
        "{verdict}"
    );
    assert!(
        verdict.contains("== part racecheck: 2 programs clean, 2 with errors"),
        "{verdict}"
    );
    assert_ne!(status, 0, "{text}");
}

/// Racecheck's hazards inside cuSPARSE's own kernels, and nothing else: the program is clean
/// outside them where the reproducer without um (bench/racecheck_cusparse.cu) shows them too,
/// which runs once for every program; a race of the program's own beside them still fails, and
/// so does every program when the reproducer shows none.
#[test]
fn hazards_inside_cusparses_kernels_alone_pass_only_where_the_reproducer_shows_them() {
    let m = Machine::new(
        "cusparse",
        1,
        &["gpu_cusparse_user", "gpu_cusparse_and_own_race"],
        &[],
    );
    m.nvcc_that_builds();
    let (status, text, verdict, log) = m.run("out", &["--parts", "racecheck"], &[]);
    let runs = log
        .lines()
        .filter(|l| l.starts_with("racecheck_cusparse "))
        .count();
    assert_eq!(runs, 1, "once for every program: {log}");
    let args = fs::read_to_string(m.dir.join("out.tool-log.args")).expect("args");
    assert!(
        args.lines()
            .filter(|l| l.contains("gpu_cusparse"))
            .all(|l| l.contains("--print-limit 1000000")),
        "racecheck shows every record: {args}"
    );
    let hazards = "2 hazard records (2 hazards displayed (1 errors, 1 warnings)), every one \
                   inside cuSPARSE's own kernels (cusparse::csrmv_v3_kernel)";
    assert_eq!(
        line(&verdict, "racecheck", "gpu_cusparse_user"),
        format!(
            "racecheck gpu_cusparse_user: clean outside cuSPARSE's kernels; {hazards}; \
             reproduced without um (bench/racecheck_cusparse.cu under racecheck: 2 hazards \
             displayed (1 errors, 1 warnings), every one inside cuSPARSE's own kernels \
             (cusparse::csrmv_v3_kernel); 32 products, 0 of 19044 values wrong)"
        )
    );
    let own = line(&verdict, "racecheck", "gpu_cusparse_and_own_race");
    assert!(
        own.starts_with("racecheck gpu_cusparse_and_own_race: ERRORS: "),
        "{own}"
    );
    assert!(
        verdict.contains("== part racecheck: 1 programs clean, 1 with errors"),
        "{verdict}"
    );
    assert_ne!(status, 0, "{text}");

    // The reproducer shows no hazard: not reproduced, and the program fails.
    let (status, text, verdict, _) = m.run(
        "clean",
        &["--parts", "racecheck"],
        &[("FAKE_CUSPARSE_REPRO", "clean")],
    );
    let user = line(&verdict, "racecheck", "gpu_cusparse_user");
    assert!(
        user.starts_with(
            "racecheck gpu_cusparse_user: ERRORS: hazards inside cuSPARSE's kernels only; "
        ) && user.contains(
            "not reproduced without um (bench/racecheck_cusparse.cu under racecheck: 0 \
                 hazards displayed (0 errors, 0 warnings): no hazard; 32 products, 0 of 19044 \
                 values wrong)"
        ),
        "{user}"
    );
    assert_ne!(status, 0, "{text}");
}

/// Racecheck's own "failure to track a kernel launch" printed on the line where the test
/// harness had begun a test's name ("test x ... ========= Internal Sanitizer Error: ..."): the
/// tool's message is read wherever its banner stands in a line, so the run is incomplete and
/// runs again, not a racecheck error.
#[test]
fn a_tracking_failure_printed_after_a_test_name_on_its_line_runs_again() {
    let m = Machine::new("track-after-name", 1, &["gpu_track_after_test_name"], &[]);
    let (status, text, verdict, log) = m.run("out", &["--parts", "racecheck"], &[]);
    let runs = log
        .lines()
        .filter(|l| l.starts_with("gpu_track_after_test_name "))
        .count();
    assert_eq!(runs, 2, "run again once: {log}");
    let tracked = line(&verdict, "racecheck", "gpu_track_after_test_name");
    assert!(
        tracked.starts_with(
            "racecheck gpu_track_after_test_name: clean (run 2 of 2: the first incomplete"
        ),
        "{tracked}"
    );
    assert!(
        verdict.contains("== part racecheck: 1 programs clean, 0 with errors"),
        "{verdict}"
    );
    assert_eq!(status, 0, "{text}");
}

impl Machine {
    /// `run.sh ARGS` without `--all`: (exit status, output).
    fn run_plain(&self, args: &[&str]) -> (i32, String) {
        let mut cmd = Command::new("bash");
        cmd.arg(self.dir.join("bundle/run.sh"))
            .args(args)
            .env("PATH", path_with(&self.dir.join("bin")))
            .env("FAKE_LOG", self.dir.join("plain.tool-log"))
            .env_remove("UM_SANITIZE_ONLY")
            .env_remove("UM_SANITIZE_GPUS")
            .env("UM_SANITIZE_PER_GPU", "1")
            .env_remove("UM_SKIP_EXAMPLES")
            .env_remove("CUDA_VISIBLE_DEVICES");
        stand_in::run(&mut cmd, &format!("run.sh {args:?}"))
    }
}

/// A test binary that passes 2 tests and fails 1, as the harness prints it.
const ONE_TEST_FAILS: &str = r#"#!/usr/bin/env bash
case " $* " in *" --list "*) printf 'a: test\nb: test\nc: test\n'; exit 0 ;; esac
echo "test c ... FAILED"
echo "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out"
exit 101
"#;

/// The modes without `--all`: each test counts once and each run of an example once, a
/// failing example per run, and the last line is the totals; `--examples-only` leaves the
/// tests out, `--emulate-no-concurrent-access` gives every program its switch, `--sanitize`
/// counts programs, and an unknown option is refused with status 2.
#[test]
fn the_modes_without_all_count_tests_and_runs_and_end_with_the_totals() {
    let m = Machine::new("plain", 1, &["gpu_a"], &["ex1"]);
    executable(&m.dir.join("bundle/tests/gpu_b"), ONE_TEST_FAILS);
    executable(
        &m.dir.join("bundle/examples/emulated_only"),
        "#!/usr/bin/env bash\n[ \"$UM_EMULATE_NO_CONCURRENT_ACCESS\" = 1 ]\n",
    );
    let (status, text) = m.run_plain(&["--repeat", "2"]);
    assert_eq!(status, 1, "{text}");
    assert!(
        text.contains("example emulated_only: 0 of 2 runs passed"),
        "{text}"
    );
    assert!(text.contains("example ex1: 2 of 2 runs passed"), "{text}");
    assert!(text.ends_with("4 passed, 3 failed\n"), "{text}");
    let (status, text) = m.run_plain(&["--emulate-no-concurrent-access", "--examples-only"]);
    assert_eq!(status, 0, "{text}");
    assert!(
        text.starts_with("mode: UM_EMULATE_NO_CONCURRENT_ACCESS=1"),
        "{text}"
    );
    assert!(!text.contains("=== test binary"), "{text}");
    assert!(text.ends_with("2 passed, 0 failed\n"), "{text}");
    let (status, text) = m.run_plain(&["--sanitize", "synccheck", "memcheck"]);
    assert_eq!(status, 0, "{text}");
    assert!(
        text.contains("synccheck: 4 programs clean, 0 with errors"),
        "{text}"
    );
    assert!(text.ends_with("8 passed, 0 failed\n"), "{text}");
    let (status, text) = m.run_plain(&["--bogus"]);
    assert_eq!(status, 2, "{text}");
    assert!(text.contains("run.sh: unknown option --bogus"), "{text}");
}
