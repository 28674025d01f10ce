//! The GPU test runner: runs on the GPU machine, from the bundle folder that
//! scripts/gpu-bundle.sh made (the bundle's `run.sh` execs `um-xtask run "$@"`).
//!
//!   run.sh [--repeat N] [--examples-only]
//!                       every test binary with --include-ignored (GPU tests included), then
//!                       every example, N times each (default 1). Each test counts as one pass
//!                       or failure, each run of an example as one; the last line is
//!                       "N passed, N failed". A per-example count is printed when N > 1.
//!                       --examples-only skips the test binaries; UM_SKIP_EXAMPLES="a b" skips
//!                       those examples (left out of the verdict). Each program runs under
//!                       `timeout` (UM_PROGRAM_LIMIT_S, default 300 s): a hang is a failure.
//!                       With two or more GPUs and N = 1, the programs of one GPU run side
//!                       by side, one per GPU (CUDA_VISIBLE_DEVICES), each printed whole when
//!                       it ends, then those that use every GPU (`uses_every_gpu`) one at a
//!                       time; UM_NORMAL_ONE_AT_A_TIME=1 runs them all one at a time.
//!   run.sh --sanitize [TOOL ...]
//!                       every test binary and example under compute-sanitizer, once per tool
//!                       (default: memcheck racecheck synccheck initcheck). A program passes when
//!                       the tool reports 0 errors. Only programs that use the GPU run; the fault
//!                       tests (which fault on purpose) are skipped; memcheck looks for leaks
//!                       too (--leak-check full), except in tests whose name holds "leaks_"
//!                       (they leak on purpose; a second run checks them for the rest).
//!                       The programs of one GPU run side by side, each on one GPU
//!                       (CUDA_VISIBLE_DEVICES; UM_SANITIZE_GPUS=N caps the GPUs used), up to
//!                       UM_SANITIZE_PER_GPU on each (`per_gpu`), except that a program of the
//!                       bundle's gpu-exclusive.txt (it reads free device memory) has its GPU to
//!                       itself (`Plan`); then, where the machine has two or more GPUs, those
//!                       that use every GPU (`uses_every_gpu`) one at a time.
//!                       UM_SANITIZE=1 shrinks the heaviest workloads and the stress test runs
//!                       20 iterations. Last line as above. Under racecheck, per_thread_streams
//!                       runs its per-thread half only (UM_ONLY_PER_THREAD=1), and the C++
//!                       reproducer bench/racecheck_repro.cu (no um) runs the legacy half's
//!                       pattern beside it: racecheck cannot track launches on the legacy stream
//!                       from several host threads, with or without um (docs/reliability.md). A
//!                       racecheck run whose only report is the tool's own "Internal Sanitizer
//!                       Error: Detected a failure to track a kernel launch" is incomplete, not a
//!                       verdict: it runs again (at most UM_RACECHECK_RERUNS=2 more times), the
//!                       verdict line says so, and the C++ reproducer runs async_requests'
//!                       pattern beside it, 3 processes at once, to show the same error without
//!                       um (`tracking_repro_note`). Racecheck prints every record; a program
//!                       whose every record is a hazard inside cuSPARSE's own kernels is clean
//!                       outside them only where bench/racecheck_cusparse.cu (the same products,
//!                       no um) shows such hazards too (`cusparse_racecheck_note`).
//!
//!   run.sh --emulate-no-concurrent-access [--repeat N | --sanitize [TOOL ...]]
//!                       either of the above with UM_EMULATE_NO_CONCURRENT_ACCESS=1 exported:
//!                       every context that Context::new opens behaves as if the device lacked
//!                       concurrent managed access (docs/design.md), so every test and example
//!                       takes that path.
//!
//!   run.sh --all OUT [--parts P1,P2,..] [--resume VERDICT]
//!                       the whole GPU verdict of this machine, one part after the other: normal
//!                       (tests and examples; the two-GPU tests where two GPUs exist), emulated,
//!                       memcheck, racecheck, synccheck, initcheck. Writes OUT/verdict.txt (one
//!                       line per part and per program) and OUT/docs/reliability.md (the verdict's
//!                       tables, then bench/reliability-notes.md), rewritten after every part, so a
//!                       run cut short keeps what it did. --parts runs only those parts;
//!                       --resume VERDICT keeps the parts an earlier verdict.txt holds (for a run
//!                       split across calls; VERDICT may be OUT/verdict.txt itself, to go on in
//!                       the same folder; only parts of this bundle's commit are kept unless
//!                       UM_RESUME_ANY_COMMIT=1) and runs the others; a sanitizer part that an
//!                       earlier call left unfinished goes on from the partial-PART.txt beside
//!                       VERDICT (one line per program done; the part's line says how many came
//!                       from there). UM_SANITIZE_ONLY="tests/x examples/y" limits the sanitizer
//!                       parts to those programs (the part's line says so). A program still
//!                       running 120 s before its limit leaves every thread's stack in
//!                       OUT/stacks/PART/ (stall-stacks.sh, cuda-gdb) before `timeout` stops it,
//!                       and its failure's line names the file.
//!
//! The two-GPU programs (tests/gpu_two_devices, tests/gpu_nccl, examples/data_parallel) run only
//! where nvidia-smi lists two or more GPUs ("skipped" elsewhere), under the sanitizers too
//! (data_parallel in its single-process default; gpu_nccl less its killed-rank test, a fault
//! test, and its hostile-abort tests). Examples that draw timelines write them to $UM_SVG_DIR
//! when it is set. NVLink multicast stays off: NCCL_NVLS_ENABLE=0 is given to every program.
//!
//! The verdict's format is read by scripts/reliability-doc.py: its lines are byte for byte those
//! of the bash runner this replaces. xtask/tests/runner.rs runs this with stand-ins.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::Instant;

/// Racecheck's own error that leaves a run incomplete (see `tracking_failure_only`).
const TRACKING_ERROR: &str =
    "Internal Sanitizer Error: Detected a failure to track a kernel launch";

/// One program of the verdict: a test binary, a module of one (`tests/<module>`, run with the
/// filter `<module>::`), or an example.
#[derive(Clone, Debug)]
struct Program {
    /// Its name in the verdict, with its folder: `tests/gpu_one`, `examples/ex1`.
    name: String,
    /// The binary it runs, where it is a module of one (else `name` itself).
    binary: Option<String>,
    /// The filter arguments: the module's `<module>::`, or the modules' `--skip`s.
    filter: Vec<String>,
}

impl Program {
    fn plain(name: String) -> Program {
        Program {
            name,
            binary: None,
            filter: Vec::new(),
        }
    }
    /// The command line that runs it: its binary, and its filter where it has one.
    fn command(&self) -> Vec<String> {
        let mut c = vec![format!(
            "./{}",
            self.binary.as_deref().unwrap_or(&self.name)
        )];
        c.extend(self.filter.iter().cloned());
        c
    }
    fn base(&self) -> &str {
        basename(&self.name)
    }
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// The environment the runner gives its programs: the runner's own, with these set
/// (`Some`) or removed (`None`), as the bash runner's exports did.
#[derive(Clone, Debug, Default)]
struct Env {
    set: Vec<(String, Option<String>)>,
}

impl Env {
    fn with(&self, k: &str, v: Option<&str>) -> Env {
        let mut e = self.clone();
        e.set.retain(|(n, _)| n != k);
        e.set.push((k.to_string(), v.map(str::to_string)));
        e
    }
    /// A variable's value, empty when unset (as `${X:-}`).
    fn var(&self, k: &str) -> String {
        match self.set.iter().find(|(n, _)| n == k) {
            Some((_, v)) => v.clone().unwrap_or_default(),
            None => std::env::var(k).unwrap_or_default(),
        }
    }
    /// `${X:-default}` as a number.
    fn num(&self, k: &str, default: u64) -> u64 {
        self.var(k).trim().parse().unwrap_or(default)
    }
    fn command(&self, argv: &[String]) -> Command {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        for (k, v) in &self.set {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }
}

/// What every part shares: the machine, the programs, the tools, the results run once.
struct Runner {
    bundle: PathBuf,
    gpus: u64,
    cs: String,
    nvcc: String,
    tests: Vec<Program>,
    examples_only: bool,
    /// The reproducer (executable, its `--ptx PTX` arguments), once built.
    repro: Option<(String, Vec<String>)>,
    once: Mutex<HashMap<String, Arc<OnceLock<String>>>>,
}

static TEMP_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh folder under the temporary folder (`mktemp -d`), removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let n = TEMP_SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("um-xtask-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::create_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn s(x: &str) -> String {
    x.to_string()
}

/// The exit status as bash gives it: the code, or 128 + the signal.
pub(crate) fn status_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().or(st.signal().map(|n| 128 + n)).unwrap_or(1)
}

/// Runs `c` with its stdout and stderr to `log` (appended when `append`); its status (127 when
/// it could not start).
fn run_to_file(mut c: Command, log: &Path, append: bool) -> i32 {
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(log);
    let Ok(f) = f else { return 127 };
    let Ok(f2) = f.try_clone() else { return 127 };
    c.stdout(f).stderr(f2);
    c.status().map(status_code).unwrap_or(127)
}

/// Runs `c` and gives its stdout and stderr together (as `2>&1`) to the caller; where `echo`,
/// also to this process's stdout as they come (as `| tee LOG`).
fn run_merged(mut c: Command, echo: bool) -> (i32, String) {
    let Ok((mut r, w)) = std::io::pipe() else {
        return (127, String::new());
    };
    let Ok(w2) = w.try_clone() else {
        return (127, String::new());
    };
    c.stdout(w).stderr(w2);
    let child = c.spawn();
    drop(c); // the pipe's writing ends, so that reading ends with the child
    let Ok(mut child) = child else {
        return (127, String::new());
    };
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    let mut stdout = std::io::stdout();
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if echo {
                    let _ = stdout.write_all(&buf[..n]);
                    let _ = stdout.flush();
                }
                all.extend_from_slice(&buf[..n]);
            }
        }
    }
    let rc = child.wait().map(status_code).unwrap_or(127);
    (rc, String::from_utf8_lossy(&all).into_owned())
}

/// A command's stdout as text (`$(cmd)`, trailing newlines kept), stderr dropped; None when it
/// could not start.
fn output(mut c: Command) -> Option<(i32, String)> {
    let o = c.stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    Some((
        status_code(o.status),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    ))
}

/// `command -v NAME`, else `fallback`.
fn which(name: &str, fallback: &str) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    for d in path.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(d).join(name);
        if is_executable(&p) {
            return p.display().to_string();
        }
    }
    s(fallback)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_default()
}

fn append(p: Option<&Path>, line: &str) {
    if let Some(p) = p {
        if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(p) {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The entries of `dir` in the glob's order (sorted by name), as `dir/name`.
fn entries(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| format!("{dir}/{}", e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether a test binary or example needs two GPUs.
fn two_gpu_only(name: &str) -> bool {
    matches!(
        name,
        "gpu_devices" | "gpu_two_devices" | "gpu_nccl" | "data_parallel"
    )
}

/// How the sanitizers' reports begin (after `========= `), leaks last.
const REPORT_KINDS: [&str; 8] = [
    "Invalid",
    "Uninitialized",
    "Race",
    "Barrier",
    "Error",
    "Program hit",
    "Internal",
    "Leaked",
];

/// Libraries that allocate device memory inside their own calls and free it with no call of
/// theirs, so that memcheck's leak check reports it in every program that uses them: the
/// library's file as a backtrace names it, and why it is not um's.
const LIBRARY_LEAKS: [(&str, &str); 1] = [(
    "libcufft.so",
    "cuFFT keeps a work area per context from its first plan (cufftPlan1d, cuMemAlloc_v2 inside libcufft), which no cuFFT call frees: reported the same with and without cufftDestroy by a C program without um (1x H200, 2026-11-28)",
)];

/// Where every error of a memcheck log is a leak whose allocation's backtrace passes through
/// one library of `LIBRARY_LEAKS`: (leaks, bytes, that library's entry). None where any report
/// is something else, a leak is made elsewhere, or the counts disagree.
fn library_own_leaks(log: &str) -> Option<(u64, u64, (&'static str, &'static str))> {
    let errors: u64 = log
        .lines()
        .filter_map(|l| l.split_once("ERROR SUMMARY: "))
        .filter_map(|(_, r)| r.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    let lines: Vec<&str> = log.lines().collect();
    let (mut n, mut bytes, mut lib) = (0u64, 0u64, None::<(&'static str, &'static str)>);
    for (i, l) in lines.iter().enumerate() {
        let Some(r) = l.strip_prefix("========= ") else {
            continue;
        };
        if !r.starts_with("Leaked ") {
            continue;
        }
        // The record's frames, up to its blank line: the first that names a listed library.
        let this = lines[i + 1..]
            .iter()
            .take_while(|f| f.starts_with("=========") && f.trim_end() != "=========")
            .find_map(|f| LIBRARY_LEAKS.iter().find(|(name, _)| f.contains(name)))?;
        if lib.is_some_and(|l| l != *this) {
            return None;
        }
        lib = Some(*this);
        n += 1;
        bytes += r
            .trim_start_matches("Leaked ")
            .split_whitespace()
            .next()
            .map(|b| b.replace(',', ""))
            .and_then(|b| b.parse::<u64>().ok())
            .unwrap_or(0);
    }
    // Any report but a leak.
    let others = lines.iter().any(|l| {
        l.strip_prefix("========= ").is_some_and(|r| {
            REPORT_KINDS[..REPORT_KINDS.len() - 1]
                .iter()
                .any(|k| r.starts_with(k))
        })
    });
    // The program's own failure is not hidden behind the tool's exit status.
    let failed = log.contains("Target application returned an error");
    (n > 0 && errors == n && !others && !failed).then_some((n, bytes, lib?))
}

/// What every access site of a racecheck report inside cuSPARSE's own kernels names.
const CUSPARSE_KERNELS: &str = "cusparse::";

/// How `cusparse_racecheck_note` begins where the reproducer reported the hazards.
const REPRODUCED: &str = "reproduced: ";

/// Racecheck's hazard records where every access site of every one is inside one library's
/// kernels.
#[derive(Debug, PartialEq)]
struct LibraryHazards {
    /// Hazard records (`Error:` or `Warning: Race reported between ..`).
    records: u64,
    /// The library's kernels they name (`cusparse::csrmv_v3_kernel`).
    kernels: BTreeSet<String>,
    /// The summaries, joined (`51 hazards displayed (26 errors, 25 warnings)`).
    summary: String,
}

/// The kernel an access site of a racecheck record names (`Write access at void
/// cusparse::k<..>(..)+0x3bc0 [12 hazards]`), where it is one of MARKER's (`cusparse::k`).
fn library_kernel(site: &str, marker: &str) -> Option<String> {
    let (_, at) = site.split_once(" access at ")?;
    let name = at
        .strip_prefix("void ")
        .unwrap_or(at)
        .strip_prefix(marker)?;
    let end = name.find(['<', '(', '+', ' ']).unwrap_or(name.len());
    (end > 0).then(|| format!("{marker}{}", &name[..end]))
}

/// Where a racecheck log holds hazard records and nothing else that the tool reports, every
/// access site of every record is inside MARKER's kernels, and the summaries count exactly the
/// records shown: what they are. None otherwise (a record of any other kernel, any other kind
/// of report, an empty or disagreeing count).
fn library_kernel_hazards(log: &str, marker: &str) -> Option<LibraryHazards> {
    let (mut records, mut displayed) = (0u64, 0u64);
    let mut kernels = BTreeSet::new();
    let mut summaries = Vec::new();
    for l in log.lines() {
        // A test's own line may hold the start of a report (`test x ... ========= Error: ..`).
        let Some(i) = l.find("=========") else {
            continue;
        };
        let Some(r) = l[i..].strip_prefix("========= ") else {
            continue; // a record's closing "========="
        };
        let start = [
            "Error: Race reported between ",
            "Warning: Race reported between ",
        ]
        .iter()
        .find_map(|k| r.strip_prefix(k));
        if let Some(site) = start {
            records += 1;
            kernels.insert(library_kernel(site, marker)?);
        } else if let Some(site) = r.strip_prefix("    and ") {
            kernels.insert(library_kernel(site, marker)?);
        } else if let Some(sum) = r.strip_prefix("RACECHECK SUMMARY: ") {
            let d = digits(sum);
            if d == 0 || !sum[d..].starts_with(" hazard") {
                return None;
            }
            // "N hazards displayed (E errors, W warnings)": every hazard shown (none past the
            // print limit, where a kernel of the program's own could be).
            let shown = sum[..d].parse::<u64>().ok()?;
            let (_, counts) = sum.split_once(" (")?;
            let (e, rest) = counts.split_once(" errors, ")?;
            let w = rest.strip_suffix(" warnings)")?;
            if e.parse::<u64>().ok()? + w.parse::<u64>().ok()? != shown {
                return None;
            }
            displayed += shown;
            summaries.push(sum.trim_end());
        } else if !(r.starts_with("COMPUTE-SANITIZER") || r.trim().is_empty()) {
            return None;
        }
    }
    (records > 0 && displayed == records).then(|| LibraryHazards {
        records,
        kernels,
        summary: summaries.join("; "),
    })
}

/// The reproducer's log under racecheck (bench/racecheck_cusparse.cu): `REPRODUCED` and its
/// summary where it reported hazards, every one inside cuSPARSE's kernels, and every value it
/// computed was right; else what it showed.
fn cusparse_repro_verdict(log: &str) -> String {
    let values = log
        .lines()
        .find_map(|l| {
            l.split_once("racecheck_cusparse: ")
                .map(|(_, r)| r.trim_end())
        })
        .filter(|r| r.contains(" values wrong"));
    let Some(values) = values else {
        let last = log
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        return format!("no result line; its last line: {}", last.trim());
    };
    let right = values
        .split_once(", ")
        .is_some_and(|(_, w)| w.starts_with("0 of "));
    match library_kernel_hazards(log, CUSPARSE_KERNELS) {
        Some(h) if right => {
            let kernels = h.kernels.into_iter().collect::<Vec<_>>().join(", ");
            format!(
                "{REPRODUCED}{}, every one inside cuSPARSE's own kernels ({kernels}); {values}",
                h.summary
            )
        }
        Some(h) => format!("{}, but {values}", h.summary),
        None => {
            let sum = log
                .lines()
                .find_map(|l| {
                    l.split_once("RACECHECK SUMMARY: ")
                        .map(|(_, r)| r.trim_end())
                })
                .unwrap_or("no summary");
            let what = if sum.starts_with("0 hazards") {
                "no hazard"
            } else {
                "not every report a hazard inside cuSPARSE's kernels"
            };
            format!("{sum}: {what}; {values}")
        }
    }
}

/// Whether PROGRAM is a test program that uses the GPU: a binary or module named gpu or gpu_*.
fn gpu_test_program(p: &str) -> bool {
    p == "tests/gpu" || p.starts_with("tests/gpu_")
}

/// Programs that use every GPU of the machine where there are two or more (the two-GPU
/// programs, and those that use a second device when one exists: `listed`, the bundle's
/// gpu-every.txt, or where the bundle has none, `gpu_mirrored` and `pipeline`): under the
/// sanitizers they run one at a time with every GPU, so that their tests of a second device run
/// there too; every other program runs on one GPU of its own, beside others.
fn uses_every_gpu(p: &str, listed: Option<&BTreeSet<String>>) -> bool {
    two_gpu_only(basename(p))
        || match listed {
            Some(l) => l.contains(p),
            None => p == "tests/gpu_mirrored" || p == "examples/pipeline",
        }
}

/// The programs that use a second device where one exists (`gpu-every.txt` of the bundle,
/// written by scripts/gpu-bundle.sh from the sources: every module or example that asks for
/// the device count or device 1). None where the bundle has no such list.
fn second_device_programs() -> Option<BTreeSet<String>> {
    listed_programs("gpu-every.txt")
}

/// Programs per GPU under a sanitizer: UM_SANITIZE_PER_GPU, else one per 4 CPU cores a GPU has
/// (the tools' work is mostly the host's), at most 3, at least 1.
fn per_gpu(env: &Env, gpus: u64) -> u64 {
    match env.var("UM_SANITIZE_PER_GPU").trim() {
        "" => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
            (cores / (4 * gpus.max(1))).clamp(1, 3)
        }
        v => v.parse().unwrap_or(1).max(1),
    }
}

/// The programs that read the device's free memory (`gpu-exclusive.txt` of the bundle, written
/// by scripts/gpu-bundle.sh from the sources): under a sanitizer each runs with a GPU to itself,
/// so that no other process's allocations move what it reads. None where the bundle has no such
/// list: then every program runs alone on its GPU.
fn exclusive_programs() -> Option<BTreeSet<String>> {
    listed_programs("gpu-exclusive.txt")
}

/// The programs a list of the bundle names, one per line (`#` begins a comment line).
fn listed_programs(file: &str) -> Option<BTreeSet<String>> {
    let text = fs::read_to_string(file).ok()?;
    Some(
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(s)
            .collect(),
    )
}

/// Where the programs of one GPU run under a sanitizer: at most `per_gpu` at a time on each GPU,
/// and a program that must run alone (`exclusive_programs`) only on a GPU with nothing else on it.
/// Such a program that finds no idle GPU reserves the least busy one: nothing else starts there
/// until it is idle, so the program does not wait behind the whole queue.
#[derive(Debug)]
struct Plan {
    /// Programs running on each GPU.
    running: Vec<u64>,
    /// Whether the program running on each GPU is one that must be alone.
    alone: Vec<bool>,
    per_gpu: u64,
    /// The GPU kept for the first waiting program that must run alone.
    reserved: Option<usize>,
}

impl Plan {
    fn new(gpus: u64, per_gpu: u64) -> Plan {
        let n = gpus.max(1) as usize;
        Plan {
            running: vec![0; n],
            alone: vec![false; n],
            per_gpu: per_gpu.max(1),
            reserved: None,
        }
    }

    /// Programs running.
    fn busy(&self) -> u64 {
        self.running.iter().sum()
    }

    /// The first program of the queue (each given as whether it must run alone) that may start
    /// now, and its GPU.
    fn next(&mut self, queue: impl Iterator<Item = bool>) -> Option<(usize, u64)> {
        let n = self.running.len();
        for (i, alone) in queue.enumerate() {
            if alone {
                if let Some(g) = (0..n).find(|&g| self.running[g] == 0) {
                    return Some((i, g as u64));
                }
                if self.reserved.is_none() {
                    self.reserved = (0..n).min_by_key(|&g| self.running[g]);
                }
            } else if let Some(g) = (0..n)
                .filter(|&g| {
                    !self.alone[g] && self.reserved != Some(g) && self.running[g] < self.per_gpu
                })
                .min_by_key(|&g| self.running[g])
            {
                return Some((i, g as u64));
            }
        }
        None
    }

    /// A program started on GPU `g`.
    fn start(&mut self, g: u64, alone: bool) {
        let g = g as usize;
        self.running[g] += 1;
        if alone {
            self.alone[g] = true;
            self.reserved = None;
        }
    }

    /// A program ended on GPU `g`.
    fn end(&mut self, g: u64) {
        let g = g as usize;
        self.running[g] = self.running[g].saturating_sub(1);
        if self.running[g] == 0 {
            self.alone[g] = false;
        }
    }
}

/// Runs the jobs of `queue` (each with whether it must run alone on its GPU) side by side, in
/// order, each as soon as `plan` places it: `run(gpu, job)` on a thread of its own. Gives each
/// result to `done` as its job ends, on this thread. Returns the jobs the plan could not place.
fn side_by_side_on<J: Send, R: Send>(
    mut plan: Plan,
    queue: Vec<(J, bool)>,
    run: impl Fn(u64, J) -> R + Sync,
    mut done: impl FnMut(R),
) -> Vec<J> {
    let run = &run;
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<(u64, R)>();
        let mut queue: std::collections::VecDeque<(J, bool)> = queue.into();
        while !queue.is_empty() || plan.busy() > 0 {
            // Start every job that may start now, in order.
            while let Some((i, k)) = plan.next(queue.iter().map(|(_, alone)| *alone)) {
                let Some((job, alone)) = queue.remove(i) else {
                    break;
                };
                plan.start(k, alone);
                let tx = tx.clone();
                scope.spawn(move || {
                    let _ = tx.send((k, run(k, job)));
                });
            }
            if plan.busy() == 0 {
                break;
            }
            let Ok((k, r)) = rx.recv() else {
                break;
            };
            plan.end(k);
            done(r);
        }
        queue.into_iter().map(|(job, _)| job).collect()
    })
}

/// A program of the normal run.
enum Job<'a> {
    /// A test binary (or one module of one).
    Test(&'a Program),
    /// An example, by its path under the bundle (`examples/NAME`).
    Example(String),
}

impl Job<'_> {
    /// "test" or "example", and the name its lines give it.
    fn kind_and_name(&self) -> (&'static str, &str) {
        match self {
            Job::Test(t) => ("test", t.base()),
            Job::Example(e) => ("example", basename(e)),
        }
    }

    /// Its name as the bundle's lists give it (`tests/NAME`, `examples/NAME`).
    fn program(&self) -> String {
        match self {
            Job::Test(t) => t.name.clone(),
            Job::Example(e) => e.clone(),
        }
    }
}

/// What one program of the normal run came to: its output where it was kept, its verdict line,
/// and its counts.
struct Done {
    out: String,
    line: String,
    passed: u64,
    failed: u64,
}

/// Where a program's lines go: this process's stdout as they come (`live`), or kept.
struct Sink {
    live: bool,
    out: String,
}

impl Sink {
    fn line(&mut self, l: &str) {
        if self.live {
            println!("{l}");
        } else {
            self.out.push_str(l);
            self.out.push('\n');
        }
    }

    /// A program's own output: already on stdout where live (`run_merged` echoed it).
    fn text(&mut self, t: &str) {
        if !self.live {
            self.out.push_str(t);
        }
    }
}

/// The module of a listed test (`gpu_x::...` -> `gpu_x`), as `^\(gpu_[a-z0-9_]*\)::`.
fn module_of(test: &str) -> Option<&str> {
    let rest = test.strip_prefix("gpu_")?;
    let end = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(rest.len());
    rest[end..].starts_with("::").then(|| &test[..4 + end])
}

/// The programs: every test binary, by the path it has in the bundle, except that a test
/// binary holding its tests in modules (tests/gpu and tests/gpu_devices: one module per
/// feature, named `gpu_<feature>`) counts as one program per module, named `tests/<module>`, which
/// runs the binary with the filter `<module>::`. So every verdict line, skip list and
/// UM_SANITIZE_ONLY name is a feature's, and the sanitizers spread the modules over the GPUs.
/// Tests such a binary holds outside those modules (at its root, or in a module named
/// otherwise) are one program more, named for the binary, that skips the modules: every test
/// runs once. A binary that cannot list its tests (it crashes, or outlasts the limit) is one
/// program, run whole, so that its failure shows.
fn test_programs() -> Vec<Program> {
    let mut out = Vec::new();
    for t in entries("tests") {
        if !Path::new(&t).is_file() {
            continue;
        }
        // Bounded: a binary that hangs is a failure of its run below, not of this list.
        let argv: Vec<String> = ["timeout", "-k", "2", "10", &format!("./{t}")]
            .iter()
            .map(|x| s(x))
            .chain([s("--list"), s("--include-ignored")])
            .collect();
        let listed = match output(Env::default().command(&argv)) {
            Some((0, text)) => text,
            _ => {
                eprintln!(
                    "=== test binary {}: its tests could not be listed; run whole",
                    basename(&t)
                );
                out.push(Program::plain(t));
                continue;
            }
        };
        let listed: Vec<&str> = listed
            .lines()
            .filter_map(|l| l.strip_suffix(": test"))
            .collect();
        let modules: BTreeSet<&str> = listed.iter().filter_map(|l| module_of(l)).collect();
        if modules.is_empty() {
            out.push(Program::plain(t));
            continue;
        }
        let mut skips = Vec::new();
        for m in &modules {
            out.push(Program {
                name: format!("tests/{m}"),
                binary: Some(t.clone()),
                filter: vec![format!("{m}::")],
            });
            skips.push(s("--skip"));
            skips.push(format!("{m}::"));
        }
        if listed.iter().any(|l| module_of(l).is_none()) {
            out.push(Program {
                name: t,
                binary: None,
                filter: skips,
            });
        }
    }
    out
}

/// The note a verdict line gets where `bounded` left stacks for NAME.
fn stacks_note(env: &Env, name: &str) -> String {
    let dir = env.var("UM_STACKS_DIR");
    if dir.is_empty() {
        return String::new();
    }
    let f = Path::new(&dir).join(format!("{name}.stacks"));
    if fs::metadata(&f).is_ok_and(|m| m.len() > 0) {
        format!(" (stacks: stacks/{}/{name}.stacks)", basename(&dir))
    } else {
        String::new()
    }
}

/// COMMAND under `timeout -k 10 LIMIT` (a hang is one failure, not a lost call). Where
/// UM_STACKS_DIR is set (--all sets OUT/stacks/PART) and the bundle has stall-stacks.sh, a
/// COMMAND still running after UM_STALL_STACKS_S seconds (default LIMIT - 120, or LIMIT / 2
/// for a limit of 240 s or less; the longest clean program took 105 s, memcheck of gpu_nccl on
/// 2x H200) first leaves every thread's stack of it and of its children in
/// UM_STACKS_DIR/NAME.stacks, with cuda-gdb: a hang in a verdict says where it hung (racecheck
/// of async_requests gave only "rc=124 no summary", 2x H200, 2026-11-23).
fn bounded(env: &Env, limit: u64, name: &str, cmd: &[String]) -> Command {
    let stacks = env.var("UM_STACKS_DIR");
    let mut argv = Vec::new();
    let mut env = env.clone();
    if !stacks.is_empty() && Path::new("./stall-stacks.sh").is_file() {
        let default = if limit > 240 { limit - 120 } else { limit / 2 };
        let after = env.num("UM_STALL_STACKS_S", default);
        let _ = fs::create_dir_all(&stacks);
        let file = format!("{stacks}/{name}.stacks");
        let _ = fs::remove_file(&file); // an earlier call's, in a folder resumed
        if env.var("UM_STALL_GDB_S").is_empty() {
            env = env.with("UM_STALL_GDB_S", Some("30"));
        }
        argv.extend([s("bash"), s("./stall-stacks.sh"), after.to_string(), file]);
    }
    argv.extend([s("timeout"), s("-k"), s("10"), limit.to_string()]);
    argv.extend(cmd.iter().cloned());
    env.command(&argv)
}

/// The last counts of a test binary's summary line
/// (`test result: ok. P passed; F failed; ...`).
fn result_counts(log: &str) -> Option<(u64, u64)> {
    let mut last = None;
    for l in log.lines() {
        let Some(rest) = l.strip_prefix("test result: ") else {
            continue;
        };
        let Some(dot) = rest.find(". ") else { continue };
        if !rest[..dot].chars().all(|c| c.is_ascii_alphabetic()) {
            continue;
        }
        let rest = &rest[dot + 2..];
        let Some((p, rest)) = rest.split_once(" passed; ") else {
            continue;
        };
        let Some((f, _)) = rest.split_once(" failed") else {
            continue;
        };
        let (Ok(p), Ok(f)) = (p.parse(), f.parse()) else {
            continue;
        };
        last = Some((p, f));
    }
    last
}

/// The names of the tests a harness's output says FAILED (`test NAME ... FAILED`).
fn failed_tests(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.starts_with("test ") && l.ends_with(" FAILED"))
        .map(|l| {
            let l = &l[5..];
            s(l.strip_suffix(" ... FAILED").unwrap_or(l))
        })
        .collect()
}

impl Runner {
    /// COMMAND's output, run once per runner and kept under KEY (the programs under a
    /// sanitizer run side by side), e.g. the reproducers' summaries per tool.
    fn once(&self, key: &str, f: impl FnOnce() -> String) -> String {
        let cell = {
            let mut m = match self.once.lock() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            m.entry(s(key)).or_default().clone()
        };
        cell.get_or_init(f).clone()
    }

    /// Tests once, examples REPEAT times; one line per program to the verdict file (when
    /// given); (passed, failed).
    fn run_all(&self, env: &Env, repeat: u64, verdict: Option<&Path>) -> (u64, u64) {
        let limit = env.num("UM_PROGRAM_LIMIT_S", 300);
        let mut jobs = Vec::new();
        let tests = self.tests.iter().filter(|_| !self.examples_only);
        let skip = env.var("UM_SKIP_EXAMPLES");
        let skip: Vec<&str> = skip.split_whitespace().collect();
        let examples = entries("examples").into_iter().filter_map(|e| {
            let name = basename(&e).to_string();
            if skip.contains(&name.as_str()) {
                println!("=== example {name}: skipped (UM_SKIP_EXAMPLES)");
                return None;
            }
            Some(Job::Example(e))
        });
        for job in tests.map(Job::Test).chain(examples) {
            let (kind, name) = job.kind_and_name();
            if two_gpu_only(name) && self.gpus < 2 {
                let shown = if kind == "test" { "test binary" } else { kind };
                println!(
                    "=== {shown} {name}: skipped (needs two GPUs, this machine has {})",
                    self.gpus
                );
                append(
                    verdict,
                    &format!(
                        "{kind} {name}: skipped (needs two GPUs, this machine has {})",
                        self.gpus
                    ),
                );
                continue;
            }
            jobs.push(job);
        }
        // Where the machine has two or more GPUs (and each program runs once), the programs of
        // one GPU run side by side, one per GPU (CUDA_VISIBLE_DEVICES), each with its GPU to
        // itself; then those that use every GPU (`uses_every_gpu`), one at a time.
        // UM_NORMAL_ONE_AT_A_TIME=1 runs every program alone with every GPU, in order.
        let every = second_device_programs();
        let side_by_side =
            self.gpus >= 2 && repeat == 1 && env.var("UM_NORMAL_ONE_AT_A_TIME").trim() != "1";
        let (single, whole): (Vec<Job<'_>>, Vec<Job<'_>>) = jobs
            .into_iter()
            .partition(|j| side_by_side && !uses_every_gpu(&j.program(), every.as_ref()));
        let (mut passed, mut failed) = (0, 0);
        let mut collect = |done: Done| {
            passed += done.passed;
            failed += done.failed;
            append(verdict, &done.line);
        };
        // Each program of one GPU must have its GPU to itself.
        let left = side_by_side_on(
            Plan::new(self.gpus, 1),
            single.into_iter().map(|j| (j, true)).collect(),
            |k, job| {
                let env = env.with("CUDA_VISIBLE_DEVICES", Some(&k.to_string()));
                self.run_job(&env, &job, limit, 1, Some(k))
            },
            |done| {
                print!("{}", done.out);
                let _ = std::io::stdout().flush();
                collect(done);
            },
        );
        // Anything the plan could not place (none: a GPU with nothing on it takes any program)
        // runs alone with the rest.
        for job in left.iter().chain(&whole) {
            collect(self.run_job(env, job, limit, repeat, None));
        }
        (passed, failed)
    }

    /// One program of the normal run: a test binary (its tests count) or an example (each of
    /// `repeat` runs counts). Its output goes to this process's stdout as it comes where `gpu`
    /// is None (alone on the machine), else it is kept in `Done::out` (side by side, on that GPU).
    fn run_job(&self, env: &Env, job: &Job<'_>, limit: u64, repeat: u64, gpu: Option<u64>) -> Done {
        let mut sink = Sink {
            live: gpu.is_none(),
            out: String::new(),
        };
        let (_, name) = job.kind_and_name();
        let on = gpu.map(|k| format!(" (on GPU {k})")).unwrap_or_default();
        let t0 = Instant::now();
        let (passed, failed, line) = match job {
            Job::Test(t) => {
                sink.line(&format!("=== test binary {name}{on}"));
                let mut cmd = t.command();
                cmd.push(s("--include-ignored"));
                // Bounded: a hung binary is one failure, not a lost call (UM_PROGRAM_LIMIT_S,
                // default 300).
                let (rc, log) = run_merged(bounded(env, limit, name, &cmd), sink.live);
                sink.text(&log);
                let (p, mut f) = result_counts(&log).unwrap_or((0, 0));
                // A binary that crashed before its summary counts as one failure.
                if rc != 0 && f == 0 {
                    sink.line(&format!("!!! {name} exited with {rc}"));
                    f = 1;
                }
                sink.line(&format!(
                    "=== test binary {name}: {} s",
                    t0.elapsed().as_secs()
                ));
                let names: String = failed_tests(&log)
                    .iter()
                    .map(|n| format!("; {n}"))
                    .collect();
                let note = if f == 0 {
                    String::new()
                } else {
                    stacks_note(env, name)
                };
                (
                    p,
                    f,
                    format!("test {name}: {p} passed, {f} failed{names}{note}"),
                )
            }
            Job::Example(e) => {
                let (mut ok, mut bad) = (0, 0);
                for i in 1..=repeat {
                    if repeat > 1 {
                        sink.line(&format!("=== example {name} (run {i} of {repeat})"));
                    } else {
                        sink.line(&format!("=== example {name}{on}"));
                    }
                    let t0 = Instant::now();
                    let _ = std::io::stdout().flush();
                    let c = bounded(env, limit, name, &[format!("./{e}")]);
                    let rc = if sink.live {
                        let mut c = c;
                        c.status().map(status_code).unwrap_or(127)
                    } else {
                        let (rc, log) = run_merged(c, false);
                        sink.text(&log);
                        rc
                    };
                    if rc == 0 {
                        ok += 1;
                    } else {
                        sink.line(&format!("!!! example {name} failed (run {i})"));
                        bad += 1;
                    }
                    sink.line(&format!("=== example {name}: {} s", t0.elapsed().as_secs()));
                }
                if repeat > 1 {
                    sink.line(&format!("example {name}: {ok} of {repeat} runs passed"));
                }
                let note = if bad == 0 {
                    String::new()
                } else {
                    stacks_note(env, name)
                };
                (
                    ok,
                    bad,
                    format!("example {name}: {ok} of {repeat} runs passed{note}"),
                )
            }
        };
        Done {
            out: sink.out,
            line,
            passed,
            failed,
        }
    }

    /// The C++ reproducer of racecheck's legacy-stream report (no um): (executable, its
    /// `--ptx PTX` arguments), built in `dir`.
    fn build_repro(&self, dir: &Path) -> Option<(String, Vec<String>)> {
        let b = self.bundle.display().to_string();
        let mut ptx = format!("{b}/racecheck/streams.ptx");
        let quiet = |argv: Vec<String>| {
            let mut c = Env::default().command(&argv);
            c.stdout(Stdio::null()).stderr(Stdio::null());
            c.status().is_ok_and(|st| st.success())
        };
        if !Path::new(&ptx).is_file() {
            ptx = format!("{}/streams.ptx", dir.display());
            let argv = [
                &self.nvcc,
                "--ptx",
                "-arch=compute_75",
                "-I",
                &format!("{b}/racecheck"),
                "-o",
                &ptx,
                &format!("{b}/racecheck/streams.cu"),
            ];
            if !quiet(argv.iter().map(|x| s(x)).collect()) {
                return None;
            }
        }
        let exe = format!("{}/racecheck_repro", dir.display());
        let argv = [
            &self.nvcc,
            "-O2",
            "-std=c++17",
            "-arch=compute_75",
            "-o",
            &exe,
            &format!("{b}/racecheck/racecheck_repro.cu"),
            "-lcuda",
        ];
        if !quiet(argv.iter().map(|x| s(x)).collect()) {
            return None;
        }
        Some((exe, vec![s("--ptx"), ptx]))
    }

    /// The command line of the reproducer's legacy run, where it was built.
    fn repro_legacy_cmd(&self) -> Option<Vec<String>> {
        let (exe, ptx) = self.repro.as_ref()?;
        let mut v = vec![exe.clone()];
        v.extend(
            ["--api", "driver", "--stream", "legacy", "--threads", "8"]
                .iter()
                .map(|x| s(x)),
        );
        v.extend(ptx.iter().cloned());
        Some(v)
    }

    /// PROGRAM under TOOL once: what it saw to `out`, its note on the program's own result to
    /// `program_note`; returns 0 when the tool reports no error (or, under memcheck, only leaks
    /// a library made inside its own calls: `library_own_leaks`, said in the note), 3 when every report is inside
    /// NCCL's own kernels, 4 when clean with NCCL's kernels left out, 5 when racecheck's run is
    /// incomplete, 6 when racecheck's every report is a hazard inside cuSPARSE's own kernels, 1
    /// otherwise.
    fn sanitize_one(
        &self,
        env: &Env,
        tool: &str,
        prog: &Program,
        envs: &[String],
        out: &mut String,
        program_note: &mut String,
    ) -> i32 {
        let p = prog.name.as_str();
        let base = prog.base();
        let cmd = prog.command();
        let mut args: Vec<String> = Vec::new();
        let push = |a: &mut Vec<String>, xs: &[&str]| a.extend(xs.iter().map(|x| s(x)));
        // The fault tests (`<module>::fault_*`) fault on purpose. libtest's --skip matches
        // anywhere in a name: `::fault_`, not `fault_`, which `default_` also holds.
        if p.starts_with("tests/") {
            push(
                &mut args,
                &[
                    "--include-ignored",
                    "--skip",
                    "::fault_",
                    "--test-threads=1",
                ],
            );
        }
        // gpu_nccl's killed-rank test is a fault test by another name: a rank aborts on
        // purpose, and the other's Err is asserted within a time bound that the tools' slowdown
        // does not keep.
        if p == "tests/gpu_nccl" {
            push(&mut args, &["--skip", "a_rank_killed_mid_collective"]);
        }
        // racecheck slows the example's 8 host threads by orders of magnitude: its 10
        // iterations took 182 s on an H100 (2026-11-28), past the 180 s after which
        // stall-stacks.sh looks at a program's threads, and the program's own exit status was
        // then 11.
        if tool == "racecheck" && p == "examples/multithreaded_run_task" {
            args = vec![s("--iters"), s("3")];
        }
        // Its tests of aborts and of the agreement ledger against a hostile user end in
        // aborted communicators too and bound their waits by times of the same kind: left out
        // the same way (tests/gpu_devices/gpu_nccl.rs lists them).
        if p == "tests/gpu_nccl" {
            for t in [
                "a_comm_aborted_by_a_waker_has_its_kernels_aborted_later",
                "a_group_wait_that_finds_one_rank_aborted",
                "a_buffer_handed_off_while_its_collective_runs",
                "ids_that_nccl_hashes_alike_are_one_communicator",
                "a_nonblocking_communicator_waiting_for_a_rank",
                "a_rank_that_leaves_does_not_clear_the_pending_calls",
            ] {
                push(&mut args, &["--skip", t]);
            }
        }
        // Under memcheck, the tests where a kernel of one device reads managed memory that was
        // attached to a stream of the other and handed over: memcheck reports every such read
        // as out of bounds, with or without um (bench/memcheck_cross_device.cu runs beside them
        // and cross_device_note says what it reported: 210,433 errors, 2x H200, 2026-11-22).
        // Not under initcheck, where the reproducer reports nothing.
        if p == "tests/gpu_two_devices" && tool == "memcheck" {
            for t in [
                "is_handed_to_a_stream_of_device_1",
                "stream_of_device_1_receives",
                "memory_handed_to_device_1",
                "is_handed_to_device_1_and_back",
            ] {
                push(&mut args, &["--skip", t]);
            }
        }
        let mut extra: Vec<String> = Vec::new();
        if tool == "memcheck" {
            push(&mut extra, &["--leak-check", "full"]);
        }
        // Every report printed, so that the runner can tell NCCL's own kernels from the rest.
        // Under initcheck and racecheck, NCCL's own kernels are not instrumented instead
        // (--kernel-name-exclude kns=nccl, where the tool has it): they report there without um
        // too (nccl_note), and printing every report took gpu_nccl past 300 s under initcheck
        // (2x H200, 2026-11-22). Racecheck looks at one kernel's shared memory, so leaving
        // NCCL's kernels out hides nothing of um's; initcheck then does not see NCCL's writes,
        // and a kernel of um that read a buffer NCCL wrote would be reported (a false alarm
        // that fails the run, not a miss).
        let mut nccl_prog = "";
        if p == "tests/gpu_nccl" || p == "examples/data_parallel" {
            nccl_prog = "1";
            if (tool == "initcheck" || tool == "racecheck") && self.cs_has_kernel_exclude() {
                nccl_prog = "excluded";
                push(&mut extra, &["--kernel-name-exclude", "kns=nccl"]);
            } else {
                push(&mut extra, &["--print-limit", "1000000"]);
            }
        }
        // Racecheck shows every hazard record (its default shows 100), so that
        // `library_kernel_hazards` sees every one its summary counts.
        if tool == "racecheck" && nccl_prog != "1" {
            push(&mut extra, &["--print-limit", "1000000"]);
        }
        let tmp = TempDir::new();
        let log_path = tmp.0.join("log");
        let limit = env.num("UM_SANITIZE_LIMIT_S", 300);
        let mut head = vec![s("env")];
        head.extend(envs.iter().cloned());
        head.push(self.cs.clone());
        // CUDA API errors are not reported: every one already surfaces as an Err that fails
        // its test, and the bad-input tests make some on purpose.
        let mut rc;
        if tool == "memcheck" && p.starts_with("tests/") {
            // Tests whose name holds "leaks_" leak on purpose (memory a faulted or poisoned
            // stream may still touch, mem::forget): memcheck checks them for everything but
            // leaks, in a second run; every other test also for leaks.
            let mut argv = head.clone();
            push(
                &mut argv,
                &[
                    "--tool",
                    "memcheck",
                    "--leak-check",
                    "full",
                    "--report-api-errors",
                    "no",
                    "--error-exitcode",
                    "99",
                ],
            );
            argv.extend(cmd.iter().cloned());
            argv.extend(args.iter().cloned());
            push(&mut argv, &["--skip", "leaks_"]);
            rc = run_to_file(
                bounded(env, limit, &format!("{tool}-{base}"), &argv),
                &log_path,
                false,
            );
            // Only where the program has such tests: a run of none exits with 255 under the
            // tool (every binary without one did, and every binary with one exited 0; 2x H200,
            // 2026-11-22), which hid the first run's status. Named one by one (--exact), so
            // that a module's filter and "leaks_" both hold.
            let mut list = vec![s("timeout"), s("-k"), s("2"), s("60")];
            list.extend(cmd.iter().cloned());
            list.extend(args.iter().cloned());
            list.push(s("--list"));
            let leaky: Vec<String> = output(env.command(&list))
                .map(|(_, t)| {
                    t.lines()
                        .filter_map(|l| l.strip_suffix(": test"))
                        .filter(|l| l.contains("leaks_"))
                        .map(s)
                        .collect()
                })
                .unwrap_or_default();
            if rc == 0 && !leaky.is_empty() {
                let mut argv = head.clone();
                push(
                    &mut argv,
                    &[
                        "--tool",
                        "memcheck",
                        "--report-api-errors",
                        "no",
                        "--error-exitcode",
                        "99",
                    ],
                );
                argv.push(cmd[0].clone());
                argv.extend(args.iter().cloned());
                argv.push(s("--exact"));
                argv.extend(leaky);
                rc = run_to_file(
                    bounded(env, limit, &format!("{tool}-{base}-leaks_"), &argv),
                    &log_path,
                    true,
                );
            }
        } else {
            let mut argv = head.clone();
            push(&mut argv, &["--tool", tool]);
            argv.extend(extra.iter().cloned());
            push(
                &mut argv,
                &["--report-api-errors", "no", "--error-exitcode", "99"],
            );
            argv.extend(cmd.iter().cloned());
            argv.extend(args.iter().cloned());
            rc = run_to_file(
                bounded(env, limit, &format!("{tool}-{base}"), &argv),
                &log_path,
                false,
            );
        }
        let log = read(&log_path);
        let logs_dir = env.var("UM_SANITIZE_LOGS");
        let write_log = |suffix: &str, text: &str| {
            if !logs_dir.is_empty() {
                let _ = fs::create_dir_all(&logs_dir);
                let _ = fs::write(format!("{logs_dir}/{tool}-{base}.{suffix}"), text);
            }
        };
        let summary = log
            .lines()
            .rfind(|l| l.contains("ERROR SUMMARY") || l.contains("RACECHECK SUMMARY"))
            .unwrap_or("")
            .to_string();
        if nccl_prog == "1" && rc == 99 {
            let c = nccl_counts(&log);
            if c.reported > 0
                && c.foreign == 0
                && c.at_foreign == 0
                && (c.records == c.reported || c.at == c.reported)
            {
                let _ = writeln!(
                    out,
                    "ok  {tool} {base}: {} reports, every one inside NCCL's own kernels",
                    c.reported
                );
                return 3;
            }
            // Why not: the records' kinds and kernels, and the counts, for the verdict's
            // reader.
            write_log("classes", &nccl_classes(&log, &c));
        }
        // Racecheck's only reports are hazards inside cuSPARSE's own kernels (write-write
        // hazards on the shared memory of its SpMV kernel, with the tests' CSR matrices and the
        // solver's, none of them um's to order): classified, kept, and held against the
        // reproducer without um (`cusparse_racecheck_note`) by the caller. The program's own
        // failure ("Target application returned an error") is another report: not classified.
        if tool == "racecheck" && rc == 99 {
            if let Some(h) = library_kernel_hazards(&log, CUSPARSE_KERNELS) {
                let kernels = h.kernels.iter().cloned().collect::<Vec<_>>().join(", ");
                let _ = writeln!(
                    out,
                    "ok  {tool} {base}: {summary}: every one of {} hazard records inside cuSPARSE's own kernels ({kernels})",
                    h.records
                );
                *program_note = format!(
                    "; {} hazard records ({}), every one inside cuSPARSE's own kernels ({kernels})",
                    h.records, h.summary
                );
                write_log("log", &report_lines(&log));
                return 6;
            }
        }
        if tool == "racecheck" && tracking_failure_only(&log) {
            let _ = writeln!(
                out,
                "??? {tool} {base}: rc={rc} {summary}: the tool's own \"{TRACKING_ERROR}\", no hazard records: this run is incomplete, not a verdict"
            );
            write_log("incomplete.log", &report_lines(&log));
            return 5;
        }
        // Memcheck's only reports are leaks that a library made inside its own calls and that
        // no call of it frees (`library_own_leaks`): not um's, and not the program's.
        if tool == "memcheck" && rc == 99 {
            if let Some((n, bytes, (lib, why))) = library_own_leaks(&log) {
                let _ = writeln!(
                    out,
                    "ok  {tool} {base}: {summary}: {n} leak(s), {bytes} bytes, every one made inside {lib}"
                );
                *program_note =
                    format!("; {n} leak(s) of {bytes} bytes made inside {lib} excluded: {why}");
                return 0;
            }
        }
        let is_zero = |l: &str| {
            l.contains("ERROR SUMMARY: 0 errors") || l.contains("RACECHECK SUMMARY: 0 hazards")
        };
        let summaries: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("ERROR SUMMARY") || l.contains("RACECHECK SUMMARY"))
            .collect();
        if rc == 99 || !log.lines().any(is_zero) || summaries.iter().any(|l| !is_zero(l)) {
            let shown = if summary.is_empty() {
                "no summary"
            } else {
                &summary
            };
            let _ = writeln!(
                out,
                "!!! {tool} {base}: rc={rc} {shown}{}{}",
                stacks_note(env, &format!("{tool}-{base}")),
                stacks_note(env, &format!("{tool}-{base}-leaks_"))
            );
            let kinds: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.strip_prefix("========= ")
                        .is_some_and(|r| REPORT_KINDS.iter().any(|k| r.starts_with(k)))
                })
                .collect();
            for l in uniq_c(kinds, false).into_iter().take(5) {
                let _ = writeln!(out, "{l}");
            }
            if summary.is_empty() {
                let lines: Vec<&str> = log.lines().collect();
                for l in &lines[lines.len().saturating_sub(5)..] {
                    let _ = writeln!(out, "{l}");
                }
            }
            // The whole report, for the verdict's reader (--all keeps it under
            // OUT/sanitizer/).
            write_log("log", &report_lines(&log));
            return 1;
        }
        // The program's own result under the tool (examples' timing checks may not hold while
        // the tool slows every kernel): reported, not counted. Where the program failed, which
        // tests did and why go to OUT/sanitizer/TOOL-PROG.program.log, and their names to the
        // output.
        let _ = writeln!(out, "ok  {tool} {base}: {summary} (program exit {rc})");
        if rc != 0 {
            let program: Vec<&str> = log
                .lines()
                .filter(|l| !l.starts_with("========="))
                .collect();
            // To the output as well as to the log: a call returns only so many files.
            for l in log
                .lines()
                .filter(|l| {
                    (l.starts_with("test ") && (l.contains("FAILED") || l.contains("timed out")))
                        || l.contains("deadlock: ")
                })
                .take(10)
            {
                let _ = writeln!(out, "    program: {l}");
            }
            let ctx = grep_after(
                &program,
                |l| {
                    l.starts_with("---- ")
                        || l.contains("panicked")
                        || l.contains("deadlock: ")
                        || l.starts_with("Error")
                },
                6,
            );
            for l in ctx.iter().take(40) {
                let cut: String = l.chars().take(600).collect();
                let _ = writeln!(out, "    program: {cut}");
            }
            if !logs_dir.is_empty() {
                let ctx = grep_after(
                    &program,
                    |l| {
                        l.starts_with("---- ")
                            || l.contains("FAILED")
                            || l.contains("panicked")
                            || l.contains("deadlock: ")
                            || l.starts_with("Error")
                            || l.contains("error")
                    },
                    12,
                );
                let mut text: String = ctx.iter().take(200).map(|l| format!("{l}\n")).collect();
                text.push_str("-- the output's last lines\n");
                for l in &program[program.len().saturating_sub(15)..] {
                    text.push_str(l);
                    text.push('\n');
                }
                write_log("program.log", &text);
            }
        }
        // The verdict line's note on the program's own result (the tool's verdict is the
        // summary): which tests failed under the tool, or the example's exit status.
        if rc != 0 {
            let failed = failed_tests(&log).join(" ");
            let failed = if failed.is_empty() {
                String::new()
            } else {
                format!(": {failed}")
            };
            *program_note = format!("; its own run under the tool failed (exit {rc}{failed})");
        }
        if nccl_prog == "excluded" { 4 } else { 0 }
    }

    fn cs_has_kernel_exclude(&self) -> bool {
        let mut c = Command::new(&self.cs);
        c.arg("--help")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .stdout(Stdio::piped());
        c.output().is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).contains("--kernel-name-exclude")
                || String::from_utf8_lossy(&o.stderr).contains("--kernel-name-exclude")
        })
    }

    /// The C++ reproducer (no um) of racecheck's tracking error, in async_requests' pattern, 3
    /// processes at once under racecheck, up to UM_TRACK_REPRO_ROUNDS (default 10) rounds,
    /// stopping at the first run that reports it: what it showed, for the verdict line.
    fn tracking_repro_note(&self, env: &Env) -> String {
        let what = "bench/racecheck_repro.cu, no um, 8 host threads each launching 2 kernels a round on a stream created per round and waiting by stream callback, 3 processes at once under racecheck";
        let Some((exe, ptx)) = &self.repro else {
            return format!("{what}: not run (nvcc could not build bench/racecheck_repro.cu)");
        };
        let rounds = env.num("UM_TRACK_REPRO_ROUNDS", 10);
        let dir = TempDir::new();
        let mut runs = 0;
        let mut hit: Option<(u64, String)> = None;
        for r in 1..=rounds {
            let jobs: Vec<_> = (1..=3)
                .map(|c| {
                    let mut argv: Vec<String> =
                        ["timeout", "-k", "5", "60", &self.cs, "--tool", "racecheck"]
                            .iter()
                            .map(|x| s(x))
                            .collect();
                    argv.extend([s("--report-api-errors"), s("no"), exe.clone()]);
                    argv.extend(
                        [
                            "--api",
                            "driver",
                            "--stream",
                            "per-iter",
                            "--wait",
                            "callback",
                            "--launches",
                            "2",
                            "--iters",
                            "8",
                            "--threads",
                            "8",
                        ]
                        .iter()
                        .map(|x| s(x)),
                    );
                    argv.extend(ptx.iter().cloned());
                    let path = dir.0.join(format!("{r}.{c}.log"));
                    let cmd = env.command(&argv);
                    std::thread::spawn(move || {
                        run_to_file(cmd, &path, false);
                        path
                    })
                })
                .collect();
            let logs: Vec<PathBuf> = jobs.into_iter().filter_map(|j| j.join().ok()).collect();
            runs += 3;
            if let Some(l) = logs
                .iter()
                .map(|p| read(p))
                .find(|t| t.contains(TRACKING_ERROR))
            {
                hit = Some((r, l));
                break;
            }
        }
        match hit {
            Some((r, log)) => {
                let summary = log
                    .find("RACECHECK SUMMARY")
                    .map(|i| log[i..].lines().next().unwrap_or(""))
                    .unwrap_or("no summary");
                format!("{what}: the same error in round {r} ({runs} runs): {summary}")
            }
            None => format!(
                "{what}: not shown in {runs} runs this time (it was in 1 run of 24 on an H200, 2026-11-23)"
            ),
        }
    }

    /// `sanitize_one`, run again (up to UM_RACECHECK_RERUNS times, default 2) while
    /// racecheck's run is incomplete (5); a complete run is the verdict. The incomplete runs'
    /// lines go to `out` too; returns (the last run's lines, its status, the program note after
    /// a note on the incomplete runs).
    fn sanitize_retrying(
        &self,
        env: &Env,
        tool: &str,
        prog: &Program,
        envs: &[String],
        out: &mut String,
    ) -> (String, i32, String) {
        let mut tries = 0;
        let reruns = env.num("UM_RACECHECK_RERUNS", 2);
        let (line, rc, mut pnote) = loop {
            let mut line = String::new();
            let mut note = String::new();
            let rc = self.sanitize_one(env, tool, prog, envs, &mut line, &mut note);
            if rc == 5 && tries < reruns {
                tries += 1;
                out.push_str(&line);
                continue;
            }
            break (line, rc, note);
        };
        if tries > 0 {
            let first = if tries == 1 {
                s("the first")
            } else {
                format!("the first {tries}")
            };
            let reran = if rc == 5 {
                format!(
                    "every one of {} runs incomplete (racecheck's own \"{TRACKING_ERROR}\")",
                    tries + 1
                )
            } else {
                format!(
                    "run {0} of {0}: {first} incomplete (racecheck's own \"{TRACKING_ERROR}\", no hazard records)",
                    tries + 1
                )
            };
            let repro = self.once("tracking-repro", || self.tracking_repro_note(env));
            pnote = format!(" ({reran}; the same error without um: {repro}){pnote}");
        }
        (line, rc, pnote)
    }

    /// PROGRAM under TOOL, with its exclusions and notes: (what it saw, its verdict line,
    /// clean).
    fn sanitize_prog(&self, env: &Env, tool: &str, prog: &Program) -> (String, String, bool) {
        let mut out = String::new();
        let p = prog.name.as_str();
        let base = prog.base();
        let one_line = |line: &str| -> String {
            let l = line.lines().next().unwrap_or("");
            let l = l.strip_prefix("!!! ").unwrap_or(l);
            s(l.strip_prefix("??? ").unwrap_or(l))
        };
        if tool == "racecheck" && p == "examples/per_thread_streams" {
            let (line, rc, retry_note) =
                self.sanitize_retrying(env, tool, prog, &[s("UM_ONLY_PER_THREAD=1")], &mut out);
            let mut repro = s("not run (nvcc could not build bench/racecheck_repro.cu)");
            if let Some(cmd) = self.repro_legacy_cmd() {
                let tmp = TempDir::new();
                let rlog = tmp.0.join("log");
                let mut argv: Vec<String> = [
                    "timeout",
                    "-k",
                    "10",
                    "120",
                    &self.cs,
                    "--tool",
                    "racecheck",
                    "--report-api-errors",
                    "no",
                ]
                .iter()
                .map(|x| s(x))
                .collect();
                argv.extend(cmd);
                run_to_file(env.command(&argv), &rlog, false);
                let text = read(&rlog);
                repro = text
                    .lines()
                    .find_map(|l| {
                        ["RACECHECK SUMMARY", "Internal Sanitizer Error:"]
                            .iter()
                            .filter_map(|k| l.find(k))
                            .min()
                            .map(|i| s(&l[i..]))
                    })
                    .unwrap_or_else(|| s("no summary"));
            }
            let note = format!(
                "; legacy half excluded: reproduced without um (bench/racecheck_repro.cu, 8 host threads on the legacy stream: {repro})"
            );
            let _ = writeln!(out, "{}{note}", line.trim_end_matches('\n'));
            if rc == 0 {
                let v = format!("{tool} {base}: clean (per-thread half){retry_note}{note}");
                return (out, v, true);
            }
            let l = line.trim_end_matches('\n');
            let l = l.strip_prefix("!!! ").unwrap_or(l);
            let l = l.strip_prefix("??? ").unwrap_or(l);
            return (out, format!("{tool} {base}: ERRORS: {l}"), false);
        }
        let mut envs: Vec<String> = Vec::new();
        let mut note = String::new();
        if p == "tests/gpu_nccl" {
            note = s(" (its killed-rank and hostile-abort tests skipped, as the fault tests are)");
        }
        if tool == "racecheck" && p == "tests/gpu_stress" {
            // racecheck slows 16 host threads' launches by orders of magnitude: 20 iterations
            // did not finish in 9 minutes on an H100 (2026-11-22); the racecheck study ran 2.
            envs = vec![s("UM_STRESS_ITERS=2")];
            note = s(" (2 iterations under racecheck)");
        }
        if tool == "racecheck" && p == "examples/multithreaded_run_task" {
            note = s(" (3 iterations under racecheck)");
        }
        if p == "examples/pipeline" && tool == "memcheck" {
            envs.push(s("UM_ONLY_ONE_GPU=1"));
        }
        if (p == "tests/gpu_two_devices" || p == "examples/pipeline")
            && self.gpus >= 2
            && tool == "memcheck"
        {
            let cross = self.once(&format!("cross-{tool}"), || {
                self.cross_device_note(env, tool)
            });
            note = format!(
                "{note}; cross-device part excluded: a kernel of device 1 reading device 0's managed memory, reproduced without um (bench/memcheck_cross_device.cu: {cross})"
            );
        }
        let t1 = Instant::now();
        let (line, rc1, program_note) = self.sanitize_retrying(env, tool, prog, &envs, &mut out);
        let _ = writeln!(out, "    {tool} {base}: {} s", t1.elapsed().as_secs());
        out.push_str(&line);
        let line = line.trim_end_matches('\n');
        match rc1 {
            3 => {
                let after = line.split_once(": ").map_or(line, |(_, r)| r);
                let base_note = self.once(&format!("nccl-{tool}"), || self.nccl_note(env, tool));
                let v = format!(
                    "{tool} {base}: clean outside NCCL's kernels{note}{program_note}; {after} reproduced without um (bench/nccl_baseline.cpp under {tool}: {base_note})"
                );
                (out, v, true)
            }
            4 => {
                let baseline = if tool == "racecheck" {
                    // Not run again: racecheck of the baseline's NCCL kernels gave no summary
                    // within 180 s (2x H200, 2026-11-22), and racecheck checks one kernel's
                    // shared memory at a time, so leaving NCCL's kernels out hides nothing of
                    // um's kernels.
                    s(
                        "the C++ baseline is not run under racecheck (it gave no summary within 180 s, 2x H200, 2026-11-22): racecheck checks one kernel's shared memory at a time, so NCCL's kernels left out hide nothing of um's",
                    )
                } else {
                    let n = self.once(&format!("nccl-{tool}"), || self.nccl_note(env, tool));
                    format!(
                        "the C++ baseline without um, all of its kernels instrumented (bench/nccl_baseline.cpp under {tool}): {n}"
                    )
                };
                let v = format!(
                    "{tool} {base}: clean outside NCCL's kernels{note}{program_note}; NCCL's own kernels not instrumented (--kernel-name-exclude kns=nccl); {baseline}"
                );
                (out, v, true)
            }
            6 => {
                let repro = self.once("cusparse-racecheck", || self.cusparse_racecheck_note(env));
                match repro.strip_prefix(REPRODUCED) {
                    Some(r) => (
                        out,
                        format!(
                            "{tool} {base}: clean outside cuSPARSE's kernels{note}{program_note}; reproduced without um (bench/racecheck_cusparse.cu under racecheck: {r})"
                        ),
                        true,
                    ),
                    None => (
                        out,
                        format!(
                            "{tool} {base}: ERRORS: hazards inside cuSPARSE's kernels only{program_note}, not reproduced without um (bench/racecheck_cusparse.cu under racecheck: {repro})"
                        ),
                        false,
                    ),
                }
            }
            0 => (
                out,
                format!("{tool} {base}: clean{note}{program_note}"),
                true,
            ),
            _ => {
                let why = if rc1 == 5 { program_note.as_str() } else { "" };
                let v = format!("{tool} {base}: ERRORS: {}{why}", one_line(line));
                (out, v, false)
            }
        }
    }

    /// Every GPU program under TOOL; (passed, failed). Each program's verdict line goes to
    /// VERDICT as it ends. The programs of one GPU run side by side, each on one GPU
    /// (CUDA_VISIBLE_DEVICES; at most UM_SANITIZE_GPUS GPUs, default every GPU), up to
    /// `per_gpu` on each as `Plan` places them; then, where the machine has two or more GPUs,
    /// those that use every GPU one at a time.
    fn sanitize(&self, env: &Env, tool: &str, verdict: Option<&Path>) -> (u64, u64) {
        // Timelines of runs under a sanitizer (small workloads, instrumented kernels) are not
        // the examples' timelines: never write them.
        let env = env
            .with("UM_STRESS_ITERS", Some("20"))
            .with("UM_SANITIZE", Some("1"))
            .with("UM_SVG_DIR", None);
        let (mut passed, mut failed) = (0u64, 0u64);
        // The programs that use the GPU, less the fault tests (they fault on purpose; gpu_nccl's
        // killed-rank test is one, skipped in sanitize_one). The two-GPU programs where two
        // GPUs exist; the ranks that gpu_nccl starts as processes run under the tool too
        // (compute-sanitizer follows child processes), and their summaries count.
        let only = env.var("UM_SANITIZE_ONLY");
        let only: Vec<&str> = only.split_whitespace().collect();
        let kept = verdict.map(read).unwrap_or_default();
        let every = second_device_programs();
        let mut single = Vec::new();
        let mut whole = Vec::new();
        let examples = entries("examples").into_iter().map(Program::plain);
        for prog in self.tests.iter().cloned().chain(examples) {
            let p = prog.name.as_str();
            if p.starts_with("tests/") && !gpu_test_program(p) {
                continue;
            }
            if !Path::new(p).exists() && prog.binary.is_none() {
                continue;
            }
            if p == "tests/gpu_faults" {
                continue;
            }
            // UM_SANITIZE_ONLY="tests/a examples/b": those programs only (a part run again for
            // them).
            if !only.is_empty() && !only.contains(&p) {
                continue;
            }
            if two_gpu_only(prog.base()) && self.gpus < 2 {
                continue;
            }
            // A program whose line an earlier call of the part left (--all --resume, from its
            // partial-PART.txt): kept, not run again.
            let head = format!("{tool} {}: ", prog.base());
            if kept.lines().any(|l| l.starts_with(&head)) {
                println!("=== {tool} {}: kept from an earlier call", prog.base());
                continue;
            }
            if self.gpus >= 2 && uses_every_gpu(p, every.as_ref()) {
                whole.push(prog);
            } else {
                single.push(prog);
            }
        }
        // GPUs used side by side (UM_SANITIZE_GPUS caps them) and programs per GPU.
        let gpus = match env.var("UM_SANITIZE_GPUS").trim() {
            "" => self.gpus,
            v => v.parse().unwrap_or(0).min(self.gpus),
        }
        .max(1);
        let per_gpu = per_gpu(&env, self.gpus);
        let exclusive = exclusive_programs();
        let mut collect = |out: String, vline: String, ok: bool, name: &str| {
            print!("{out}");
            let _ = std::io::stdout().flush();
            if ok {
                passed += 1;
            } else {
                failed += 1;
            }
            if vline.is_empty() {
                append(
                    verdict,
                    &format!("{tool} {name}: ERRORS: no verdict line (the job ended early)"),
                );
            } else {
                append(verdict, &vline);
            }
        };
        // One job per program, on one GPU (CUDA_VISIBLE_DEVICES) where `gpu` is given: (its
        // output, verdict line, clean).
        let job = |gpu: Option<u64>, prog: &Program| -> (String, String, bool) {
            let env = match gpu {
                Some(k) => env.with("CUDA_VISIBLE_DEVICES", Some(&k.to_string())),
                None => env.clone(),
            };
            let (body, vline, ok) = self.sanitize_prog(&env, tool, prog);
            let mut out = String::new();
            if let Some(k) = gpu {
                let _ = writeln!(out, "    {tool} {}: on GPU {k}", prog.base());
            }
            out.push_str(&body);
            (out, vline, ok)
        };
        if gpus > 1 || per_gpu > 1 {
            let queue = single
                .drain(..)
                .map(|p| {
                    let alone = exclusive.as_ref().is_none_or(|e| e.contains(&p.name));
                    (p, alone)
                })
                .collect();
            // Anything the plan could not place (none: a GPU with nothing on it takes any
            // program) runs below, alone.
            single = side_by_side_on(
                Plan::new(gpus, per_gpu),
                queue,
                |k, prog| {
                    let (out, vline, ok) = job(Some(k), &prog);
                    (out, vline, ok, s(prog.base()))
                },
                |(out, vline, ok, name)| collect(out, vline, ok, &name),
            );
        }
        for prog in single.iter().chain(whole.iter()) {
            let (out, vline, ok) = job(None, prog);
            collect(out, vline, ok, prog.base());
        }
        println!("{tool}: {passed} programs clean, {failed} with errors");
        (passed, failed)
    }

    /// Builds a C++ reproducer `src` into `exe` with nvcc (`-O2 -std=c++17`, linked with
    /// `lib`); whether it built.
    fn nvcc_build(&self, src: &str, exe: &str, lib: &str) -> bool {
        Command::new(&self.nvcc)
            .args(["-O2", "-std=c++17", "-o", exe, src, lib])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The C++ reproducer of memcheck's and initcheck's cross-device report (no um): its
    /// summary under TOOL, or why it did not run.
    fn cross_device_note(&self, env: &Env, tool: &str) -> String {
        let dir = TempDir::new();
        let exe = dir.0.join("cross").display().to_string();
        let src = format!("{}/bench/memcheck_cross_device.cu", self.bundle.display());
        if !self.nvcc_build(&src, &exe, "-lcuda") {
            return s("not run (nvcc could not build bench/memcheck_cross_device.cu)");
        }
        let argv: Vec<String> = ["timeout", "-k", "10", "120", &self.cs, "--tool", tool, &exe]
            .iter()
            .map(|x| s(x))
            .collect();
        let log_path = dir.0.join("log");
        run_to_file(env.command(&argv), &log_path, false);
        let log = read(&log_path);
        let summary = find_match(&log, |l| {
            let i = l.find("ERROR SUMMARY: ")?;
            let rest = &l[i + 15..];
            let d = digits(rest);
            if d == 0 || !rest[d..].starts_with(" error") {
                return None;
            }
            let end = i + 15 + d + 6 + usize::from(rest[d + 6..].starts_with('s'));
            Some(s(&l[i..end]))
        });
        let wrong = find_match(&log, |l| {
            let i = l.find(" values wrong")?;
            // "[0-9]+ of [0-9]+ values wrong"
            let head = &l[..i];
            let total_start =
                head.len() - head.bytes().rev().take_while(u8::is_ascii_digit).count();
            let before = head[..total_start].strip_suffix(" of ")?;
            let n_start =
                before.len() - before.bytes().rev().take_while(u8::is_ascii_digit).count();
            (n_start < before.len() && total_start < head.len()).then(|| s(&l[n_start..i + 13]))
        });
        format!("{summary}; {wrong}")
    }

    /// The reproducer of racecheck's hazards inside cuSPARSE's SpMV kernel, without um
    /// (bench/racecheck_cusparse.cu), under racecheck: `REPRODUCED` and what it reported where
    /// it reported hazards, every one inside cuSPARSE's kernels, and computed every value right;
    /// else what it did.
    fn cusparse_racecheck_note(&self, env: &Env) -> String {
        let dir = TempDir::new();
        let exe = dir.0.join("racecheck_cusparse").display().to_string();
        let src = format!("{}/bench/racecheck_cusparse.cu", self.bundle.display());
        if !self.nvcc_build(&src, &exe, "-lcusparse") {
            return s("not run (nvcc could not build bench/racecheck_cusparse.cu)");
        }
        let limit = env.num("UM_CUSPARSE_NOTE_LIMIT_S", 180).to_string();
        let argv: Vec<String> = [
            "timeout",
            "-k",
            "10",
            &limit,
            &self.cs,
            "--tool",
            "racecheck",
            &exe,
        ]
        .iter()
        .map(|x| s(x))
        .collect();
        let log_path = dir.0.join("log");
        run_to_file(env.command(&argv), &log_path, false);
        cusparse_repro_verdict(&read(&log_path))
    }

    /// The C++ NCCL baseline (no um) under TOOL, for the reports inside NCCL's own kernels: its
    /// summary, or why it did not run.
    fn nccl_note(&self, env: &Env, tool: &str) -> String {
        let dir = TempDir::new();
        let exe = dir.0.join("nccl_baseline").display().to_string();
        let src = format!("{}/bench/nccl_baseline.cpp", self.bundle.display());
        let build = |lib: &str| {
            Command::new(&self.nvcc)
                .args(["-O3", "-o", &exe, &src, lib, "-lcuda"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !build("-lnccl") && !build("-l:libnccl.so.2") {
            return s("not run (nvcc could not build bench/nccl_baseline.cpp)");
        }
        let limit = env.num("UM_NCCL_NOTE_LIMIT_S", 180);
        let argv: Vec<String> = [
            "timeout",
            "-k",
            "10",
            &limit.to_string(),
            &self.cs,
            "--tool",
            tool,
            "--print-limit",
            "1000000",
            &exe,
            "allreduce",
            "--sizes",
            "8,1048576,16777216",
        ]
        .iter()
        .map(|x| s(x))
        .collect();
        let log_path = dir.0.join("log");
        run_to_file(env.command(&argv), &log_path, false);
        let log = read(&log_path);
        let mut where_: BTreeSet<String> = BTreeSet::new();
        for l in log.lines().filter(|l| is_at_line(l)) {
            let mut rest = l;
            while let Some(i) = rest.find("nccl") {
                let w: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[i + w.len()..];
                where_.insert(w);
            }
        }
        let where_: String = where_.iter().take(4).map(|w| format!("{w} ")).collect();
        let summary = find_match(&log, |l| {
            for (key, word) in [
                ("ERROR SUMMARY: ", " error"),
                ("RACECHECK SUMMARY: ", " hazard"),
            ] {
                if let Some(i) = l.find(key) {
                    let rest = &l[i + key.len()..];
                    let d = digits(rest);
                    if d > 0 && rest[d..].starts_with(word) {
                        let mut end = i + key.len() + d + word.len();
                        if l[end..].starts_with('s') {
                            end += 1;
                        }
                        return Some(s(&l[i..end]));
                    }
                }
            }
            None
        });
        if summary.is_empty() {
            // Racecheck of NCCL's kernels did not end within 180 s (2x H200, 2026-11-22).
            format!("no summary within {limit} s")
        } else {
            let w = if where_.is_empty() {
                "no NCCL function"
            } else {
                &where_
            };
            format!("{summary}, at {w}")
        }
    }
}

/// The first line's match of `f` in `log`, or empty.
fn find_match(log: &str, f: impl Fn(&str) -> Option<String>) -> String {
    log.lines().find_map(f).unwrap_or_default()
}

/// How many ASCII digits `t` starts with.
fn digits(t: &str) -> usize {
    t.bytes().take_while(u8::is_ascii_digit).count()
}

/// A report's "at" line: `^=========  +at `.
fn is_at_line(l: &str) -> bool {
    l.strip_prefix("=========  ")
        .is_some_and(|r| r.trim_start_matches(' ').starts_with("at "))
}

/// The tool's lines of a log, and the harness's test lines and panics (what --all keeps of a
/// report), at most 400.
fn report_lines(log: &str) -> String {
    log.lines()
        .filter(|l| l.starts_with("=========") || l.starts_with("test ") || l.contains("panicked"))
        .take(400)
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `sort | uniq -c` (then `sort -rn` where `by_count`): each distinct line with its count.
fn uniq_c(mut lines: Vec<&str>, by_count: bool) -> Vec<String> {
    lines.sort_unstable();
    let mut counted: Vec<(usize, &str)> = Vec::new();
    for l in lines {
        match counted.last_mut() {
            Some((n, last)) if *last == l => *n += 1,
            _ => counted.push((1, l)),
        }
    }
    if by_count {
        counted.sort_by(|a, b| b.cmp(a));
    }
    counted
        .into_iter()
        .map(|(n, l)| format!("{n:>7} {l}"))
        .collect()
}

/// `grep -A N`: the lines that match, each with the N after it, groups apart parted by `--`.
fn grep_after<'a>(lines: &[&'a str], f: impl Fn(&str) -> bool, n: usize) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut until: Option<usize> = None;
    let mut last: Option<usize> = None;
    for (i, l) in lines.iter().enumerate() {
        if f(l) {
            until = Some(i + n);
        }
        if until.is_some_and(|u| i <= u) {
            if last.is_some_and(|j| j + 1 < i) {
                out.push("--");
            }
            out.push(*l);
            last = Some(i);
        }
    }
    out
}

/// The records of a sanitizer's log against NCCL's kernels.
#[derive(Debug, Default)]
struct NcclCounts {
    records: u64,
    foreign: u64,
    at: u64,
    at_foreign: u64,
    reported: u64,
    unprinted: u64,
}

/// Reports whose kernel is one of NCCL's (its "at" line or device frame names ncclDev...)
/// against the rest, over every record printed; and the count the tool's summaries give. With
/// several processes writing to one log (gpu_nccl's ranks), a record's first line can be torn
/// (the synccheck of gpu_nccl printed 5,534 whole first lines for 5,536 reports, and 5,536 "at"
/// lines, every one in NCCL; 2x H200, 2026-11-22): then the "at" lines, one per report, count.
fn nccl_counts(log: &str) -> NcclCounts {
    let mut c = NcclCounts::default();
    let (mut open, mut nccl) = (false, false);
    let close = |c: &mut NcclCounts, open: &mut bool, nccl: &mut bool| {
        if *open {
            c.records += 1;
            if !*nccl {
                c.foreign += 1;
            }
        }
        *open = false;
        *nccl = false;
    };
    for l in log.lines() {
        if l.strip_prefix("========= ")
            .is_some_and(|r| r.chars().next().is_some_and(|ch| ch != ' '))
        {
            close(&mut c, &mut open, &mut nccl);
            if l.contains("SUMMARY")
                || l.contains("COMPUTE-SANITIZER")
                || l.contains("Target application")
            {
                continue;
            }
            open = true;
            continue;
        }
        let frame = l.strip_prefix("=========  ").is_some_and(|r| {
            let r = r.trim_start_matches(' ');
            r.starts_with("at ") || r.starts_with("Device Frame:")
        });
        if open && frame && l.contains("nccl") {
            nccl = true;
        }
        if is_at_line(l) {
            c.at += 1;
            if !l.contains("nccl") {
                c.at_foreign += 1;
            }
        }
    }
    close(&mut c, &mut open, &mut nccl);
    // The summaries' counts, less any "N errors were not printed" line (a synccheck of
    // gpu_nccl on 2x H200, 2026-11-22, printed a summary line of that form; summed in, it
    // would make the count disagree with the records).
    for l in log.lines().filter(|l| !l.contains("not printed")) {
        let mut rest = l;
        while let Some(i) = rest.find("ERROR SUMMARY: ") {
            rest = &rest[i + 15..];
            let d = digits(rest);
            if d > 0 && rest[d..].starts_with(" error") {
                c.reported += rest[..d].parse::<u64>().unwrap_or(0);
            }
        }
    }
    for l in log.lines() {
        let mut rest = l;
        while let Some(i) = rest.find(" were not printed") {
            let head = &rest[..i];
            let head = head
                .strip_suffix(" errors")
                .or_else(|| head.strip_suffix(" error"));
            if let Some(h) = head {
                let n: String = h
                    .chars()
                    .rev()
                    .take_while(char::is_ascii_digit)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                c.unprinted += n.parse::<u64>().unwrap_or(0);
            }
            rest = &rest[i + 17..];
        }
    }
    c
}

/// The `.classes` file: why a program's reports were not all NCCL's.
fn nccl_classes(log: &str, c: &NcclCounts) -> String {
    let mut t = format!(
        "records printed: {}; outside NCCL's kernels: {}; \"at\" lines: {}, outside NCCL: {}; summaries: {}; not printed, by the tool's own count: {}\n",
        c.records, c.foreign, c.at, c.at_foreign, c.reported, c.unprinted
    );
    let sums: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR SUMMARY"))
        .collect();
    for l in uniq_c(sums, false) {
        t.push_str(&l);
        t.push('\n');
    }
    t.push_str("-- record kinds\n");
    let kinds: Vec<String> = log
        .lines()
        .filter(|l| {
            l.strip_prefix("========= ")
                .is_some_and(|r| r.starts_with(|ch: char| ch.is_ascii_uppercase()))
                && !l.contains("SUMMARY")
                && !l.contains("COMPUTE-SANITIZER")
        })
        .map(normalize_record)
        .collect();
    for l in uniq_c(kinds.iter().map(String::as_str).collect(), true)
        .into_iter()
        .take(20)
    {
        t.push_str(&l);
        t.push('\n');
    }
    t.push_str("-- where\n");
    let wheres: Vec<String> = log
        .lines()
        .filter(|l| is_at_line(l))
        .map(strip_offsets)
        .collect();
    for l in uniq_c(wheres.iter().map(String::as_str).collect(), true)
        .into_iter()
        .take(20)
    {
        t.push_str(&l);
        t.push('\n');
    }
    t
}

/// A record's line with its addresses (`0x...` -> `X`) and counts (`(1,2)` -> `(N)`) made alike.
fn normalize_record(l: &str) -> String {
    let mut out = String::new();
    let b = l.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'0' && b.get(i + 1) == Some(&b'x') {
            let n = b[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
                .count();
            if n > 0 {
                out.push('X');
                i += 2 + n;
                continue;
            }
        }
        if b[i] == b'(' {
            let n = b[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit() || **c == b',')
                .count();
            if n > 0 && b.get(i + 1 + n) == Some(&b')') {
                out.push_str("(N)");
                i += n + 2;
                continue;
            }
        }
        let ch = l[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// An "at" line less its offsets (`+0x...`).
fn strip_offsets(l: &str) -> String {
    let mut out = String::new();
    let mut rest = l;
    while let Some(i) = rest.find("+0x") {
        out.push_str(&rest[..i]);
        let r = &rest[i + 3..];
        let n = r
            .bytes()
            .take_while(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
            .count();
        if n == 0 {
            out.push_str("+0x");
        }
        rest = &r[n..];
    }
    out.push_str(rest);
    out
}

/// Whether racecheck's report in LOG is its own internal error "Detected a failure to track a
/// kernel launch" and nothing else: every line the tool printed is that error, its banner, a
/// blank or a summary, and the summaries count as many errors as there were such lines, and no
/// warning. The tool then says that its records "might be incomplete": the run is not a verdict
/// either way. The C++ reproducer showed the same error without um, for 8 host threads each
/// launching on a stream created per round and waiting by stream callback, three processes at
/// once (1 run in 24, H200, 2026-11-23): async_requests' pattern, which racecheck reported once
/// in 6 runs (2x H200) and once in 30 (H200).
///
/// The tool's lines are read from their banner ("=========") wherever it stands in a line: the
/// test harness prints "test NAME ... " without a newline before the test runs, so the tool's
/// line can follow it ("test x ... ========= Internal Sanitizer Error: ...", H100, 2026-11-28).
fn tracking_failure_only(log: &str) -> bool {
    let tool_lines: Vec<&str> = log
        .lines()
        .filter_map(|l| l.find("=========").map(|i| &l[i..]))
        .collect();
    let error = format!("========= {TRACKING_ERROR}");
    let internal = tool_lines.iter().filter(|l| l.starts_with(&error)).count() as u64;
    if internal == 0 {
        return false;
    }
    let allowed = |l: &str| {
        l["=========".len()..].trim().is_empty()
            || l.starts_with("========= COMPUTE-SANITIZER")
            || l.starts_with(&error)
            || l.starts_with("========= RACECHECK SUMMARY: ")
            || l.starts_with("========= Target application returned an error")
    };
    if tool_lines.iter().any(|l| !allowed(l)) {
        return false;
    }
    let sums: Vec<&str> = tool_lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("========= RACECHECK SUMMARY: "))
        .collect();
    if sums.is_empty() {
        return false;
    }
    // Every summary must read "N hazard(s) displayed (E error(s), W warning(s))"; the Es must
    // add up to the internal errors and the Ws to 0.
    let (mut errors, mut warnings) = (0u64, 0u64);
    for l in sums {
        match hazard_summary(l) {
            Some((e, w)) => {
                errors += e;
                warnings += w;
            }
            None => return false,
        }
    }
    errors == internal && warnings == 0
}

/// (errors, warnings) of "RACECHECK SUMMARY: N hazard(s) displayed (E error(s), W
/// warning(s))".
fn hazard_summary(l: &str) -> Option<(u64, u64)> {
    let i = l.find("RACECHECK SUMMARY: ")?;
    let r = &l[i + 19..];
    let d = digits(r);
    if d == 0 {
        return None;
    }
    let r = &r[d..];
    let r = r
        .strip_prefix(" hazards displayed (")
        .or_else(|| r.strip_prefix(" hazard displayed ("))?;
    let d = digits(r);
    let e: u64 = r[..d].parse().ok()?;
    let r = &r[d..];
    let r = r
        .strip_prefix(" errors, ")
        .or_else(|| r.strip_prefix(" error, "))?;
    let d = digits(r);
    let w: u64 = r[..d].parse().ok()?;
    let r = &r[d..];
    (r.starts_with(" warnings)") || r.starts_with(" warning)")).then_some((e, w))
}

/// awk's number of a field: its leading digits, else 0.
fn awk_num(f: &str) -> i64 {
    let neg = f.starts_with('-');
    let t = f.trim_start_matches(['-', '+']);
    let n: i64 = t[..digits(t)].parse().unwrap_or(0);
    if neg { -n } else { n }
}

/// The normal part's counts from its lines: (passed, failed).
fn normal_counts(body: &str) -> (i64, i64) {
    let (mut ok, mut bad) = (0, 0);
    for l in body.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let field = |i: usize| f.get(i).copied().unwrap_or("");
        let is_test = l.starts_with("test ");
        let example_runs = l.starts_with("example ") && l.contains(" runs passed");
        if (is_test && l[5..].contains("passed")) || example_runs {
            ok += awk_num(field(2));
        }
        if is_test && l[5..].contains("failed") {
            for i in 0..f.len() {
                if field(i + 1).starts_with("failed") {
                    bad += awk_num(field(i));
                }
            }
        }
        if example_runs {
            bad += awk_num(field(4)) - awk_num(field(2));
        }
    }
    (ok, bad)
}

/// Whether a part's line counts failures: `[1-9][0-9]* (failed|with errors|whose own run
/// failed)`.
fn part_failed(l: &str) -> bool {
    for key in [" failed", " with errors", " whose own run failed"] {
        let mut from = 0;
        while let Some(i) = l[from..].find(key) {
            let at = from + i;
            let head = &l[..at];
            let run: &str =
                &head[head.len() - head.bytes().rev().take_while(u8::is_ascii_digit).count()..];
            if run.bytes().any(|b| b != b'0') {
                return true;
            }
            from = at + key.len();
        }
    }
    false
}

fn first_line(c: Command) -> String {
    output(c)
        .map(|(_, t)| s(t.lines().next().unwrap_or("")))
        .unwrap_or_default()
}

/// The runner: `args` as run.sh's; the exit status.
pub(crate) fn main(args: Vec<String>) -> i32 {
    let bundle = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    // Only from a bundle: elsewhere (`cargo xtask run` in target/debug) the folders tests/ and
    // examples/ beside the binary are not the bundle's programs.
    if !bundle.join("run.sh").is_file() {
        eprintln!(
            "run.sh: {} is no GPU bundle; build one with scripts/gpu-bundle.sh and run its run.sh \
             (bash target/gpu-bundle/run.sh ...)",
            bundle.display()
        );
        return 2;
    }
    if std::env::set_current_dir(&bundle).is_err() {
        eprintln!("run.sh: cannot enter the bundle {}", bundle.display());
        return 1;
    }
    let bundle = std::env::current_dir().unwrap_or(bundle);
    // NVLink multicast stays off.
    let env = Env::default().with("NCCL_NVLS_ENABLE", Some("0"));
    let gpus = output(env.command(&[s("nvidia-smi"), s("-L")]))
        .map(|(_, t)| t.lines().filter(|l| l.starts_with("GPU ")).count() as u64)
        .unwrap_or(0);
    let mut r = Runner {
        bundle,
        gpus,
        cs: which("compute-sanitizer", "/usr/local/cuda/bin/compute-sanitizer"),
        nvcc: which("nvcc", "/usr/local/cuda/bin/nvcc"),
        tests: test_programs(),
        examples_only: false,
        repro: None,
        once: Mutex::new(HashMap::new()),
    };
    let repro_dir = TempDir::new();
    let mut args = args.into_iter().peekable();
    if args.peek().map(String::as_str) == Some("--all") {
        args.next();
        let Some(out) = args.next() else {
            eprintln!("run.sh: usage: run.sh --all OUT [--parts P1,P2,..] [--resume VERDICT]");
            return 127;
        };
        let mut parts = s("normal,emulated,memcheck,racecheck,synccheck,initcheck");
        let mut resume = String::new();
        while let Some(a) = args.next() {
            match a.as_str() {
                "--parts" => parts = args.next().unwrap_or_default(),
                "--resume" => resume = args.next().unwrap_or_default(),
                _ => {
                    eprintln!("run.sh --all: unknown option {a}");
                    return 2;
                }
            }
        }
        r.repro = r.build_repro(&repro_dir.0);
        return all(&r, &env, &out, &parts, resume);
    }
    let mut env = env;
    if args.peek().map(String::as_str) == Some("--emulate-no-concurrent-access") {
        args.next();
        env = env.with("UM_EMULATE_NO_CONCURRENT_ACCESS", Some("1"));
        println!(
            "mode: UM_EMULATE_NO_CONCURRENT_ACCESS=1 (every context behaves as if the device lacked concurrent managed access)"
        );
    }
    if !which("nvidia-smi", "").is_empty() {
        let _ = std::io::stdout().flush();
        let _ = env
            .command(&[
                s("nvidia-smi"),
                s("--query-gpu=name,driver_version,memory.used,memory.free"),
                s("--format=csv,noheader"),
            ])
            .status();
    }
    if args.peek().map(String::as_str) == Some("--sanitize") {
        args.next();
        let mut tools: Vec<String> = args.collect();
        if tools.is_empty() {
            tools = ["memcheck", "racecheck", "synccheck", "initcheck"]
                .iter()
                .map(|x| s(x))
                .collect();
        }
        r.repro = r.build_repro(&repro_dir.0);
        let (mut ok, mut bad) = (0, 0);
        for tool in &tools {
            let (p, f) = r.sanitize(&env, tool, None);
            ok += p;
            bad += f;
        }
        println!("{ok} passed, {bad} failed");
        return i32::from(bad != 0);
    }
    let mut repeat = 1;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeat" => match args.next().map(|n| n.parse::<u64>()) {
                Some(Ok(n)) => repeat = n,
                _ => {
                    eprintln!("run.sh: usage: run.sh --repeat N");
                    return 127;
                }
            },
            "--examples-only" => r.examples_only = true,
            _ => {
                eprintln!("run.sh: unknown option {a}");
                return 2;
            }
        }
    }
    let (passed, failed) = r.run_all(&env, repeat, None);
    println!("{passed} passed, {failed} failed");
    i32::from(failed != 0)
}

/// `--all OUT`: the whole verdict, part after part; the exit status.
fn all(r: &Runner, env: &Env, out: &str, parts: &str, mut resume: String) -> i32 {
    let _ = fs::create_dir_all(Path::new(out).join("docs"));
    let out = std::path::absolute(out).unwrap_or_else(|_| PathBuf::from(out));
    let verdict = out.join("verdict.txt");
    // The parts an earlier run did, read before OUT's verdict is written again: --resume may
    // name OUT's own verdict.txt (one run continued in one folder, call after call, on a
    // machine that keeps it).
    let mut kept = String::new();
    let commit = fs::read_to_string(r.bundle.join("COMMIT"))
        .map(|c| s(c.trim_end_matches('\n')))
        .unwrap_or_else(|_| s("unknown"));
    let mut commit_line = commit.clone();
    let from_first_part = |t: &str| -> String {
        let mut keep = false;
        let mut k = String::new();
        for l in t.lines() {
            keep = keep || l.starts_with("== part ");
            if keep {
                k.push_str(l);
                k.push('\n');
            }
        }
        k
    };
    if !resume.is_empty() && Path::new(&resume).is_file() {
        // Only parts of this bundle's commit are kept, unless UM_RESUME_ANY_COMMIT=1 says to
        // keep another's too (then the commit line names both): a verdict of one run is of one
        // bundle.
        let text = read(Path::new(&resume));
        let earlier = text
            .lines()
            .find_map(|l| l.strip_prefix("commit: "))
            .unwrap_or("");
        if earlier.is_empty() || earlier == commit {
            kept = from_first_part(&text);
        } else if !env.var("UM_RESUME_ANY_COMMIT").is_empty() {
            kept = from_first_part(&text);
            commit_line = format!("{commit} (parts kept from {earlier})");
            eprintln!(
                "run.sh --all: keeping the parts of {earlier} under {commit} (UM_RESUME_ANY_COMMIT)"
            );
        } else {
            eprintln!(
                "run.sh --all: {resume} is of commit {earlier}, this bundle of {commit}: nothing of it kept (UM_RESUME_ANY_COMMIT=1 keeps it)"
            );
            resume.clear();
        }
    }
    let smi = |q: &str| {
        first_line(env.command(&[
            s("nvidia-smi"),
            format!("--query-gpu={q}"),
            s("--format=csv,noheader"),
        ]))
    };
    let sanitizer = output(env.command(&[r.cs.clone(), s("--version")]))
        .and_then(|(_, t)| {
            t.lines()
                .find(|l| l.to_lowercase().contains("version"))
                .map(s)
        })
        .unwrap_or_default();
    let date = first_line(env.command(&[s("date"), s("-u"), s("+%F")]));
    let header = format!(
        "# um GPU verdict (run.sh --all)\ndevice: {}\ngpus: {}\ndriver: {}\nsanitizer: {sanitizer}\ndate: {date}\ncommit: {commit_line}\n",
        smi("name"),
        r.gpus,
        smi("driver_version"),
    );
    // Parts an earlier run did: kept as they are.
    let _ = fs::write(&verdict, format!("{header}{kept}"));
    let render = || {
        let doc = out.join("docs/reliability.md");
        let ok = File::create(&doc).is_ok_and(|f| {
            Command::new("python3")
                .arg(r.bundle.join("reliability_doc.py"))
                .arg(&verdict)
                .arg(r.bundle.join("reliability-notes.md"))
                .stdout(f)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if !ok {
            eprintln!("run.sh --all: could not render reliability.md");
        }
    };
    render();
    for part in parts.split([',', ' ']).filter(|p| !p.is_empty()) {
        let head = format!("== part {part}:");
        if read(&verdict).lines().any(|l| l.starts_with(&head)) {
            println!("=== part {part}: kept from {resume}");
            continue;
        }
        let t0 = Instant::now();
        // The part's lines, one per program as it ends, kept under OUT until the part is done:
        // a call cut short leaves them, and --resume with that call's verdict.txt continues a
        // sanitizer part from them (the programs they name are not run again).
        let body = out.join(format!("partial-{part}.txt"));
        let mut continued = String::new();
        let earlier = (!resume.is_empty()).then(|| {
            Path::new(&resume)
                .parent()
                .unwrap_or(Path::new("."))
                .join(format!("partial-{part}.txt"))
        });
        let earlier_lines = earlier
            .as_ref()
            .filter(|e| part.ends_with("check") && fs::metadata(e).is_ok_and(|m| m.len() > 0));
        if let Some(e) = earlier_lines {
            // From another folder it is copied; in OUT itself (the same folder resumed) it is
            // kept.
            if !same_file(e, &body) {
                let _ = fs::copy(e, &body);
            }
            let n = read(&body).matches('\n').count();
            continued = format!(", {n} programs from an earlier call");
            println!(
                "=== part {part}: continued; {n} programs kept from {}",
                e.display()
            );
        } else {
            let _ = fs::write(&body, "");
        }
        let stacks = out.join("stacks").join(part).display().to_string();
        let _ = std::io::stdout().flush();
        match part {
            "normal" => {
                let env = env
                    .with("UM_EMULATE_NO_CONCURRENT_ACCESS", None)
                    .with("UM_STACKS_DIR", Some(&stacks));
                r.run_all(&env, 1, Some(&body));
            }
            "emulated" => {
                let env = env
                    .with("UM_EMULATE_NO_CONCURRENT_ACCESS", Some("1"))
                    .with("UM_STACKS_DIR", Some(&stacks));
                r.run_all(&env, 1, Some(&body));
            }
            "memcheck" | "racecheck" | "synccheck" | "initcheck" => {
                let logs = out.join("sanitizer").display().to_string();
                let env = env
                    .with("UM_SANITIZE_LOGS", Some(&logs))
                    .with("UM_STACKS_DIR", Some(&stacks));
                r.sanitize(&env, part, Some(&body));
            }
            _ => {
                eprintln!("run.sh --all: unknown part {part}");
                let _ = fs::remove_file(&body);
                continue;
            }
        }
        let secs = t0.elapsed().as_secs();
        // The part's line and its programs' lines reach the verdict in one rename: a call
        // stopped meanwhile leaves either the part whole or the part not there (then its
        // partial file).
        let lines = read(&body);
        let part_line = if part.ends_with("check") {
            let count = |k: &str| lines.lines().filter(|l| l.contains(k)).count();
            let (ok, bad) = (count(": clean"), count(": ERRORS"));
            // A program the tool found clean whose own tests failed under it is counted too: a
            // failure of its own is a failure of the verdict until explained (gpu_nccl,
            // 2026-11-23).
            let own = count("its own run under the tool failed");
            let own_note = if own > 0 {
                format!(", {own} whose own run failed")
            } else {
                String::new()
            };
            let only = env.var("UM_SANITIZE_ONLY");
            let only = if only.is_empty() {
                only
            } else {
                format!(", only {only}")
            };
            format!(
                "== part {part}: {ok} programs clean, {bad} with errors{own_note}{only}{continued} ({secs}s)"
            )
        } else {
            let (ok, bad) = normal_counts(&lines);
            format!("== part {part}: {ok} passed, {bad} failed ({secs}s)")
        };
        let next = out.join("verdict.txt.next");
        let _ = fs::write(&next, format!("{}{part_line}\n{lines}", read(&verdict)));
        let _ = fs::rename(&next, &verdict);
        let _ = fs::remove_file(&body);
        render();
    }
    let text = read(&verdict);
    for l in text.lines().filter(|l| {
        ["== part", "device", "commit", "gpus"]
            .iter()
            .any(|k| l.starts_with(k))
    }) {
        println!("{l}");
    }
    i32::from(
        text.lines()
            .any(|l| l.starts_with("== part ") && part_failed(l)),
    )
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracking_failure_after_a_test_name_on_its_line_is_still_only_that() {
        let log = "========= COMPUTE-SANITIZER\ntest gpu_capture_frees::every_free ... ========= Internal Sanitizer Error: Detected a failure to track a kernel launch. Future records might be incomplete\n========= \n========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n";
        assert!(tracking_failure_only(log));
        let with_race = format!("{log}x ========= Error: Race reported\n");
        assert!(!tracking_failure_only(&with_race));
    }

    #[test]
    fn a_part_line_fails_on_any_nonzero_count() {
        assert!(part_failed("== part normal: 3 passed, 10 failed (1s)"));
        assert!(!part_failed("== part normal: 3 passed, 0 failed (1s)"));
        assert!(part_failed(
            "== part synccheck: 7 programs clean, 0 with errors, 1 whose own run failed (2s)"
        ));
        assert!(!part_failed(
            "== part initcheck: 1 programs clean, 0 with errors (2s)"
        ));
    }

    #[test]
    fn the_normal_part_counts_tests_and_example_runs() {
        let body = "test gpu_one: 2 passed, 1 failed; x\nexample ex1: 1 of 3 runs passed\ntest g: skipped (needs two GPUs, this machine has 1)\n";
        assert_eq!(normal_counts(body), (3, 3));
    }

    #[test]
    fn the_plan_fills_each_gpu_to_its_share_and_spreads_the_programs() {
        let mut plan = Plan::new(2, 2);
        let mut gpus = Vec::new();
        while let Some((i, g)) = plan.next([false; 5].into_iter()) {
            assert_eq!(i, 0, "the first program of the queue starts first");
            plan.start(g, false);
            gpus.push(g);
        }
        assert_eq!(gpus, [0, 1, 0, 1], "two per GPU, spread over both");
        assert_eq!(plan.busy(), 4);
        plan.end(1);
        assert_eq!(plan.next([false].into_iter()), Some((0, 1)));
    }

    #[test]
    fn a_program_that_must_run_alone_gets_an_idle_gpu_and_keeps_it_to_itself() {
        let mut plan = Plan::new(2, 3);
        plan.start(0, false);
        // GPU 1 is idle: the lone program takes it.
        assert_eq!(plan.next([true].into_iter()), Some((0, 1)));
        plan.start(1, true);
        // Nothing joins it there; GPU 0 still takes programs of its share.
        assert_eq!(plan.next([false].into_iter()), Some((0, 0)));
        plan.start(0, false);
        plan.start(0, false);
        assert_eq!(
            plan.next([false].into_iter()),
            None,
            "GPU 0 full, GPU 1 alone"
        );
        plan.end(1);
        assert_eq!(plan.next([false].into_iter()), Some((0, 1)));
    }

    #[test]
    fn a_waiting_lone_program_reserves_a_gpu_that_then_takes_nothing_else() {
        let mut plan = Plan::new(2, 2);
        for g in [0, 0, 1] {
            plan.start(g, false);
        }
        // No idle GPU: the lone program (first in the queue) reserves GPU 1, the least busy;
        // the next program goes to GPU 0, which is full, so nothing starts.
        assert_eq!(plan.next([true, false].into_iter()), None);
        assert_eq!(plan.reserved, Some(1));
        plan.end(1);
        assert_eq!(plan.next([true, false].into_iter()), Some((0, 1)));
        plan.start(1, true);
        assert_eq!(plan.reserved, None);
        assert_eq!(
            plan.next([false].into_iter()),
            None,
            "GPU 0 full, GPU 1 alone"
        );
        plan.end(0);
        assert_eq!(plan.next([false].into_iter()), Some((0, 0)));
    }

    #[test]
    fn an_idle_machine_starts_any_program() {
        for alone in [true, false] {
            let mut plan = Plan::new(1, 1);
            assert_eq!(plan.next([alone].into_iter()), Some((0, 0)));
        }
    }

    /// The cuFFT report of examples/cudarc_bridge under memcheck (2x H200, 2026-11-28), frames
    /// shortened.
    const CUFFT_LEAK: &str = "========= COMPUTE-SANITIZER\n========= Leaked 6,967,984 bytes at 0x7fa4a6c00000\n=========     Saved host backtrace up to driver entry point at allocation time\n=========         Host Frame: cuMemAlloc_v2 [0x32b91f] in libcuda.so.1\n=========         Host Frame:  [0x35d799] in libcufft.so.12\n=========         Host Frame: cufftPlan1d [0x343423] in libcufft.so.12\n=========         Host Frame:  [0x39164] in cudarc_bridge\n========= \n========= LEAK SUMMARY: 6967984 bytes leaked in 1 allocations\n========= ERROR SUMMARY: 1 error\n";

    /// A leak of um's own (gpu_copies under memcheck, the same run).
    const UM_LEAK: &str = "========= Leaked 256 bytes at 0x7f63ae000600\n=========     Saved host backtrace up to driver entry point at allocation time\n=========         Host Frame: cuMemAllocManaged [0x32bfdf] in libcuda.so.1\n=========         Host Frame: um_core::memory::storage::parts::allocate [0x388d39] in gpu\n========= \n";

    #[test]
    fn a_leak_made_inside_cufft_alone_is_the_librarys_and_anything_else_is_not() {
        assert_eq!(
            library_own_leaks(CUFFT_LEAK),
            Some((1, 6_967_984, LIBRARY_LEAKS[0]))
        );
        // A leak of um's beside it: both counted, so not the library's alone.
        let both = CUFFT_LEAK.replace(
            "========= LEAK SUMMARY",
            &format!("{UM_LEAK}========= LEAK SUMMARY"),
        );
        let both = both.replace("ERROR SUMMARY: 1 error", "ERROR SUMMARY: 2 errors");
        assert_eq!(library_own_leaks(&both), None);
        // um's leak alone.
        let um = format!("{UM_LEAK}========= ERROR SUMMARY: 1 error\n");
        assert_eq!(library_own_leaks(&um), None);
        // Another kind of report beside the library's leak.
        let invalid = CUFFT_LEAK.replace(
            "========= LEAK SUMMARY",
            "========= Invalid __global__ read of size 4 bytes\n========= LEAK SUMMARY",
        );
        let invalid = invalid.replace("ERROR SUMMARY: 1 error", "ERROR SUMMARY: 2 errors");
        assert_eq!(library_own_leaks(&invalid), None);
        // The program itself failed.
        let failed = CUFFT_LEAK.replace(
            "========= LEAK SUMMARY",
            "========= Target application returned an error\n========= LEAK SUMMARY",
        );
        assert_eq!(library_own_leaks(&failed), None);
        // No report at all is not a library's leak either (it is clean).
        assert_eq!(
            library_own_leaks("========= ERROR SUMMARY: 0 errors\n"),
            None
        );
    }

    /// Two records of tests/gpu_cusparse under racecheck (1 of 4 H200, 2026-11-28), the
    /// first begun on a test's own line as libtest printed it, signatures shortened.
    const CUSPARSE_RACES: &str = "========= COMPUTE-SANITIZER\n\
test gpu_cusparse::a_handle_dropped ... ========= Error: Race reported between Write access at void cusparse::csrmv_v3_kernel<std::integral_constant<bool, (bool)0>, int, int, double>(cusparse::KernelCoeffs<T7>, const T3 *)+0x3bc0\n\
=========     and Write access at void cusparse::csrmv_v3_kernel<std::integral_constant<bool, (bool)0>, int, int, double>(cusparse::KernelCoeffs<T7>, const T3 *)+0x3bf0 [4396 hazards]\n\
========= \n\
========= Warning: Race reported between Write access at void cusparse::csrmv_v3_kernel<std::integral_constant<bool, (bool)0>, int, int, double>(cusparse::KernelCoeffs<T7>, const T3 *)+0x3bb0\n\
=========     and Write access at void cusparse::csrmv_v3_kernel<std::integral_constant<bool, (bool)0>, int, int, double>(cusparse::KernelCoeffs<T7>, const T3 *)+0x3be0 [2230 hazards]\n\
=========     and Write access at void cusparse::csrmv_v3_kernel<std::integral_constant<bool, (bool)0>, int, int, double>(cusparse::KernelCoeffs<T7>, const T3 *)+0x3c00 [134 hazards]\n\
========= \n\
ok\n\
test result: ok. 14 passed; 0 failed\n\
========= RACECHECK SUMMARY: 2 hazards displayed (1 errors, 1 warnings)\n";

    #[test]
    fn racecheck_hazards_every_one_inside_cusparses_kernels_are_told_from_any_other_report() {
        let h = library_kernel_hazards(CUSPARSE_RACES, CUSPARSE_KERNELS).expect("cuSPARSE's");
        assert_eq!(h.records, 2);
        assert_eq!(
            h.kernels.into_iter().collect::<Vec<_>>(),
            ["cusparse::csrmv_v3_kernel"]
        );
        assert_eq!(h.summary, "2 hazards displayed (1 errors, 1 warnings)");
        // One access site in a kernel of the program's own.
        let own = CUSPARSE_RACES.replacen(
            "and Write access at void cusparse::csrmv_v3_kernel",
            "and Read access at add_scalar",
            1,
        );
        assert_eq!(library_kernel_hazards(&own, CUSPARSE_KERNELS), None);
        // A whole record of the program's own.
        let own_record = CUSPARSE_RACES.replace(
            "========= RACECHECK",
            "========= Error: Race reported between Write access at spin_then_add(float *, unsigned int)+0x40\n=========     and Read access at spin_then_add(float *, unsigned int)+0x80 [3 hazards]\n========= RACECHECK",
        );
        let own_record = own_record.replace("2 hazards displayed", "3 hazards displayed");
        assert_eq!(library_kernel_hazards(&own_record, CUSPARSE_KERNELS), None);
        // Another kind of report beside them.
        for other in [
            "========= Internal Sanitizer Error: Detected a failure to track a kernel launch\n",
            "========= Barrier error detected. Divergent thread(s) in block\n",
            "========= Target application returned an error\n",
        ] {
            let with = CUSPARSE_RACES.replace("ok\n", &format!("{other}ok\n"));
            assert_eq!(
                library_kernel_hazards(&with, CUSPARSE_KERNELS),
                None,
                "{other}"
            );
        }
        // A summary that counts more records than were shown.
        let more = CUSPARSE_RACES.replace(
            "2 hazards displayed (1 errors",
            "3 hazards displayed (2 errors",
        );
        assert_eq!(library_kernel_hazards(&more, CUSPARSE_KERNELS), None);
        // More hazards than were shown: past the print limit (100 shown of 636, the solver's
        // racecheck with the tool's default limit, 2026-11-28).
        let past = CUSPARSE_RACES.replace("(1 errors, 1 warnings)", "(0 errors, 636 warnings)");
        assert_eq!(library_kernel_hazards(&past, CUSPARSE_KERNELS), None);
        // No hazard at all is clean, not cuSPARSE's.
        let none = "========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n";
        assert_eq!(library_kernel_hazards(none, CUSPARSE_KERNELS), None);
        // Another library's kernels are not cuSPARSE's.
        let cublas = CUSPARSE_RACES.replace("cusparse::csrmv", "cublas::gemv");
        assert_eq!(library_kernel_hazards(&cublas, CUSPARSE_KERNELS), None);
    }

    #[test]
    fn the_cusparse_reproducer_reproduces_only_with_its_hazards_and_every_value_right() {
        let right = "racecheck_cusparse: 32 products, 0 of 19044 values wrong\n";
        let got = cusparse_repro_verdict(&format!("{CUSPARSE_RACES}{right}"));
        assert_eq!(
            got,
            "reproduced: 2 hazards displayed (1 errors, 1 warnings), every one inside cuSPARSE's own kernels (cusparse::csrmv_v3_kernel); 32 products, 0 of 19044 values wrong"
        );
        // Values wrong: not a reproduction of um's run, where every test passed.
        let wrong = "racecheck_cusparse: 32 products, 7 of 19044 values wrong\n";
        let got = cusparse_repro_verdict(&format!("{CUSPARSE_RACES}{wrong}"));
        assert!(!got.starts_with(REPRODUCED), "{got}");
        // No hazard without um.
        let clean = format!(
            "========= COMPUTE-SANITIZER\n{right}========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
        );
        let got = cusparse_repro_verdict(&clean);
        assert!(
            !got.starts_with(REPRODUCED) && got.contains("no hazard"),
            "{got}"
        );
        // It did not finish.
        let got = cusparse_repro_verdict(CUSPARSE_RACES);
        assert!(got.starts_with("no result line"), "{got}");
    }
}
