//! um's benchmarks, run on the GPU machine (see docs/performance.md for how).
//!
//! `um_bench --out DIR [--cpp PATH] [--cublas-cpp PATH] [--graph-cpp PATH] [--nccl-cpp PATH]
//! [--cg-cpp PATH --cg-um PATH] [--notes FILE] [--quick] [--rounds N] [--only LIST] [--base PAGE]
//! [--host-rounds N]`
//! or, with no GPU, `um_bench --render RESULTS --out DIR [--only LIST --base PAGE] [--notes FILE]`
//! (`render.rs`: the page written again from a run's records).
//!
//! `--only launch,run_task,mirror,...` runs only the named scenarios (of `launch`,
//! `launch_paired`, `run_task`, `mirror`, `bandwidth`, `threads`, `overlap`, `transitions`,
//! `handoff`, `cublas`, `graphs`, `nccl`, `solver`: section 11, the conjugate-gradient
//! example against `bench/cg_baseline.cpp`, both as subprocesses and both in one process
//! (`UM_CPP_CG_LIB`); `alloc`: section 12, memory
//! born on a stream from a pool against `cuMemAllocFromPoolAsync` and `cuMemAlloc`, and a loop
//! with scratch per batch; `device`: section 13, device-only storage in the run_task loop). `--base PAGE` (an earlier run's performance.md) then
//! puts this run's sections in place of that page's and keeps the rest, with a line under the
//! header naming what was measured again, where and when (`splice.rs`): section 10 (`nccl`,
//! on machines with two or more GPUs, one section per GPU count) is measured this way, and so
//! can any other section (1 is replaced when `launch` runs, with 1b when `launch_paired` runs
//! too). With `--base` this run's records go to DIR/results-of-this-run.json and the figures
//! are not redrawn. `--cublas-cpp` is the C++ baseline of the `cublas` scenario
//! (bench/cublas_baseline.cpp); without it, or without cuBLAS, that scenario says so and runs
//! what it can. `--rounds N` sets the rounds of every section (default 5; each round of a
//! section that compares processes is a fresh process of each side, so more rounds settle a
//! median of per-process ratios that the host speed a process draws moves by a few percent;
//! `--quick` is 1). `--host-rounds N` sets the rounds of section 10's host time per step
//! (default 16,000; more narrow its intervals).
//!
//! Every figure is measured in this one run, with the C++ baseline (`--cpp`, built from
//! bench/baseline.cpp) run as a subprocess between the Rust measurements of each round, so that
//! the ratios compare runs side by side; sections 8, 11 and 12 also load the C++ baselines built
//! as shared libraries (`UM_CPP_CUBLAS_LIB`, `UM_CPP_CG_LIB`, `UM_CPP_BASELINE_LIB`, set by
//! bench.sh; `cpp_lib.rs`) and take turns with them in one process. Writes DIR/docs/performance.md,
//! DIR/docs/performance-results.json and DIR/docs/img/{run_task,mirror}.svg: the repository's
//! own paths, so `cp -r DIR/docs .` (or DIR = the repository root) updates them all.

mod alloc;
mod cpp;
mod cpp_lib;
mod cublas;
mod device_only;
mod graphs;
mod handoff;
mod nccl;
mod paired;
mod raw_nccl;
mod render;
mod report;
mod runs;
mod solver;
mod splice;

use std::path::PathBuf;
use std::process::ExitCode;

use um::Context;

/// One measured figure.
#[derive(Debug, Clone, Default)]
pub(crate) struct Record {
    /// `launch`, `run_task`, `threads`, `overlap`, `transition`, `handoff`.
    pub(crate) scenario: &'static str,
    /// Who did the work: `um`, `cpp`, `cust`, `cudarc`.
    pub(crate) imp: String,
    /// The variant: a transfer policy, a sync kind, a transition.
    pub(crate) variant: String,
    /// Buffer size in MiB, where it applies.
    pub(crate) mib: usize,
    /// Message size in bytes, where MiB are too coarse (section 9).
    pub(crate) bytes: usize,
    /// Host threads, where it applies.
    pub(crate) threads: usize,
    /// Median over samples (and over rounds: the median of the rounds' medians).
    pub(crate) median: f64,
    /// Minimum over all samples.
    pub(crate) min: f64,
    /// Unit of `median` and `min`.
    pub(crate) unit: &'static str,
    /// For a variant measured against a reference in the same process, round by round: the
    /// paired difference (section 1b).
    pub(crate) paired: Option<Paired>,
}

/// A paired difference to a reference, per round: median and mean with 95% intervals.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paired {
    pub(crate) median: f64,
    pub(crate) median_ci: (f64, f64),
    pub(crate) mean: f64,
    pub(crate) mean_ci: (f64, f64),
    pub(crate) rounds: usize,
}

pub(crate) struct Options {
    pub(crate) out: PathBuf,
    pub(crate) cpp: Option<PathBuf>,
    /// The cuBLAS scenario's C++ baseline.
    pub(crate) cublas_cpp: Option<PathBuf>,
    /// The C++ program of section 9 (bench/graph_baseline.cpp).
    pub(crate) graph_cpp: Option<PathBuf>,
    pub(crate) notes: Option<PathBuf>,
    pub(crate) rounds: usize,
    pub(crate) sizes_mib: Vec<usize>,
    /// `--render RESULTS`: the page written again from a run's records, with no GPU.
    pub(crate) render: Option<PathBuf>,
    /// The scenarios to run; all when `None`.
    pub(crate) only: Option<Vec<String>>,
    /// The NCCL C++ baseline (built from bench/nccl_baseline.cpp), for section 10.
    pub(crate) nccl_cpp: Option<PathBuf>,
    /// The CG C++ baseline (built from bench/cg_baseline.cpp), for section 11.
    pub(crate) cg_cpp: Option<PathBuf>,
    /// The CG example's executable (examples/conjugate_gradient.rs, in the bundle), for
    /// section 11.
    pub(crate) cg_um: Option<PathBuf>,
    /// A page of an earlier run: this run's sections replace the same sections in it, and the
    /// rest of it is kept (`splice.rs`).
    pub(crate) base: Option<PathBuf>,
    /// Rounds of section 10's host time per step.
    pub(crate) host_rounds: usize,
}

impl Options {
    fn wants(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s == scenario))
    }
}

const SCENARIOS: [&str; 15] = [
    "launch",
    "launch_paired",
    "run_task",
    "mirror",
    "bandwidth",
    "threads",
    "overlap",
    "transitions",
    "handoff",
    "cublas",
    "graphs",
    "nccl",
    "solver",
    "alloc",
    "device",
];

/// The value of `flag`, a count above 0.
fn count(flag: &str, v: String) -> Result<usize, String> {
    v.parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{flag} takes a count above 0, not {v:?}"))
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        out: PathBuf::from("bench-out"),
        cpp: None,
        cublas_cpp: None,
        graph_cpp: None,
        notes: None,
        rounds: 5,
        sizes_mib: vec![1, 16, 256],
        only: None,
        nccl_cpp: None,
        cg_cpp: None,
        cg_um: None,
        render: None,
        base: None,
        host_rounds: nccl::HOST_TIME_ROUNDS,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--out" => o.out = PathBuf::from(value()?),
            "--cpp" => o.cpp = Some(PathBuf::from(value()?)),
            "--cublas-cpp" => o.cublas_cpp = Some(PathBuf::from(value()?)),
            "--graph-cpp" => o.graph_cpp = Some(PathBuf::from(value()?)),
            "--notes" => o.notes = Some(PathBuf::from(value()?)),
            "--nccl-cpp" => o.nccl_cpp = Some(PathBuf::from(value()?)),
            "--cg-cpp" => o.cg_cpp = Some(PathBuf::from(value()?)),
            "--cg-um" => o.cg_um = Some(PathBuf::from(value()?)),
            "--base" => o.base = Some(PathBuf::from(value()?)),
            "--render" => o.render = Some(PathBuf::from(value()?)),
            "--host-rounds" => o.host_rounds = count(&a, value()?)?,
            "--only" => {
                let list: Vec<String> = value()?.split(',').map(str::to_owned).collect();
                if let Some(bad) = list.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
                    return Err(format!(
                        "no scenario {bad:?}: expected some of {SCENARIOS:?}"
                    ));
                }
                o.only = Some(list);
            }
            "--rounds" => o.rounds = count(&a, value()?)?,
            "--quick" => {
                o.rounds = 1;
                o.sizes_mib = vec![1, 16];
            }
            // cargo bench passes --bench; nothing to do with it
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// `um_bench --child run_task IMPL VARIANT MIB ITERS`, `--child launch VARIANT`,
/// `--child threads mirror MIB THREADS ITERS` or `--child skip LOOP MIB ITERS`: one Rust variant
/// in this fresh process; prints `{"median":..,"min":..}` of its samples (and `free_ms` for
/// `threads`). `--child handoff STORAGE`: section 7's measurements of one storage, as one JSON
/// line. `--child graphs`: section 9's measurements, as one JSON line. `--child nccl KIND
/// [LIMITS]`: one round of section 10's bandwidth rows of one kind, a line per measurement.
/// `--child scratch [ROUND PTX_DIR]`: section 12's loops with scratch per batch (with ROUND
/// and PTX_DIR, the C++ loop too, in this process), as one JSON line.
/// `--child cublas DTYPE M N K ITERS`: section 8a's mirror samples of one GEMM shape in a fresh
/// process (`Blas::gemm` and the raw call), with the cuBLAS files the process mapped.
/// `--child cublas-probe DTYPE M N K ITERS`: where `Blas::gemm`'s host time goes
/// (`cublas::probe`). `--child cg GRID ROUND [NAMES]`: section 11a's solves in one process
/// (`solver::child`).
fn child(args: &[String]) -> ExitCode {
    // The median and minimum of one variant's samples, as the parent reads them, and any
    // `extra` fields (`,"key":value` each).
    let summary = |samples: Vec<f64>, extra: &str| {
        let mut sorted = samples;
        sorted.sort_by(f64::total_cmp);
        format!(
            "{{\"median\":{:.4},\"min\":{:.4}{extra}}}",
            sorted[sorted.len() / 2],
            sorted[0]
        )
    };
    let run = |ctx: &Context| -> Result<String, Box<dyn std::error::Error>> {
        match args {
            [what, imp, variant, mib, iters] if what == "run_task" => Ok(summary(
                runs::run_task_variant(ctx, imp, variant, mib.parse()?, iters.parse()?)?,
                "",
            )),
            [what, variant] if what == "launch" => {
                Ok(summary(runs::launch_variant(ctx, variant)?, ""))
            }
            [what, imp, mib, threads, iters] if what == "threads" && imp == "mirror" => {
                let (ms, free_ms) =
                    runs::mirror_threads_once(ctx, threads.parse()?, mib.parse()?, iters.parse()?)?;
                Ok(summary(vec![ms], &format!(",\"free_ms\":{free_ms:.4}")))
            }
            [what, lp, mib, iters] if what == "skip" => Ok(summary(
                runs::skip_variant(ctx, lp, mib.parse()?, iters.parse()?)?,
                "",
            )),
            [what, storage] if what == "handoff" => handoff::child(ctx, storage),
            [what] if what == "graphs" => graphs::child(ctx),
            [what, rest @ ..] if what == "scratch" => alloc::child(ctx, rest),
            [what, rest @ ..] if what == "nccl" => nccl::child(rest),
            [what, rest @ ..] if what == "cublas" => cublas::child(ctx, rest),
            [what, rest @ ..] if what == "cublas-probe" => cublas::probe(ctx, rest),
            [what, rest @ ..] if what == "cg" => solver::child(ctx, rest),
            _ => Err(
                "expected `run_task IMPL VARIANT MIB ITERS`, `launch VARIANT`, \
                      `threads mirror MIB THREADS ITERS`, `skip LOOP MIB ITERS` or \
                      `handoff STORAGE`, `graphs`, `scratch`, `nccl KIND [LIMITS]` or \
                      `cublas DTYPE M N K ITERS`, `cublas-probe DTYPE M N K ITERS` or \
                      `cg GRID ROUND [NAMES]`"
                    .into(),
            ),
        }
    };
    match Context::new(0)
        .map_err(Into::into)
        .and_then(|ctx| run(&ctx))
    {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("um_bench --child: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().collect();
    if all.get(1).map(String::as_str) == Some("--child") {
        return child(&all[2..]);
    }
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("um_bench: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(results) = &opts.render {
        return match render_page(results, &opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("um_bench --render: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let ctx = match Context::new(0) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("um_bench: cannot run: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&ctx, &opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("um_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--render RESULTS`: the page (and the results beside it) written again from the records of
/// `results`, on the machine and date they name, as the run that measured them would write it
/// with `opts`' `--only`, `--base` and `--notes`.
fn render_page(
    results: &std::path::Path,
    opts: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let parsed = render::parse(&std::fs::read_to_string(results)?)?;
    let machine = report::Machine {
        name: parsed.device,
        driver: parsed.driver,
        date: parsed.date,
    };
    // A record's scenario and unit are `'static` (the run's own are literals): leaked here, once
    // per record of a process that ends right after.
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let records: Vec<Record> = parsed
        .rows
        .into_iter()
        .map(|r| Record {
            scenario: leak(r.scenario),
            imp: r.imp,
            variant: r.variant,
            mib: r.mib,
            bytes: r.bytes,
            threads: r.threads,
            median: r.median,
            min: r.min,
            unit: leak(r.unit),
            paired: r
                .paired
                .map(|(median, median_ci, mean, mean_ci, rounds)| Paired {
                    median,
                    median_ci,
                    mean,
                    mean_ci,
                    rounds,
                }),
        })
        .collect();
    let notes = match &opts.notes {
        Some(p) => std::fs::read_to_string(p)?,
        None => String::new(),
    };
    std::fs::create_dir_all(&opts.out)?;
    write_docs(&machine, opts, &records, &notes)
}

/// Whether `scenario` left records (the names its records carry).
fn ran(scenario: &str, records: &[Record]) -> bool {
    let prefix = match scenario {
        "transitions" => "transition",
        "mirror" => "mirror_threads",
        other => other,
    };
    records.iter().any(|r| r.scenario.starts_with(prefix))
}

/// Writes the files as they lie in the repository, so that the run's output replaces them
/// whole: OUT/docs/performance.md, OUT/docs/performance-results.json, OUT/docs/img/*.svg.
fn write_docs(
    machine: &report::Machine,
    opts: &Options,
    records: &[Record],
    notes: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let docs = opts.out.join("docs");
    std::fs::create_dir_all(docs.join("img"))?;
    // With --base, this run measured only some sections: its records go beside the page, not
    // over the full run's results file, and the full run's figures (drawn from section 2 and 6)
    // stay as they are.
    let results = if opts.base.is_some() {
        opts.out.join("results-of-this-run.json")
    } else {
        docs.join("performance-results.json")
    };
    std::fs::write(results, report::json(machine, records))?;
    let mut md = report::markdown(machine, records, notes);
    // Sections 7 (handoff), 8 (cuBLAS) and 9 (graphs) are in `report::markdown`; section 10
    // (nccl.rs) goes before the goals table.
    let section10 = nccl::markdown(records);
    let at = md.find("\n## Goals").unwrap_or(md.len());
    md.insert_str(at, &section10);
    // Section 11 (solver.rs) after it.
    let at = md.find("\n## Goals").unwrap_or(md.len());
    md.insert_str(at, &solver::markdown(records));
    // Sections 12 (alloc.rs) and 13 (device_only.rs) after it.
    let at = md.find("\n## Goals").unwrap_or(md.len());
    md.insert_str(
        at,
        &(alloc::markdown(records) + &device_only::markdown(records)),
    );
    if let Some(base) = &opts.base {
        // This run's sections in place of the earlier page's; the rest of that page kept.
        // The sections of the scenarios that have records (a run cut short, or a scenario that
        // was skipped, replaces nothing).
        let mut keys: Vec<String> = SCENARIOS
            .iter()
            .filter(|s| opts.wants(s) && ran(s, records))
            .filter_map(|s| splice::section_of(s))
            .map(str::to_owned)
            .collect();
        let nccl_gpus = records
            .iter()
            .find(|r| r.scenario.starts_with("nccl"))
            .map(|r| r.threads);
        if let Some(gpus) = nccl_gpus {
            keys.push(nccl::heading(gpus).trim_start_matches("## ").to_owned());
        }
        let named: Vec<&str> = keys
            .iter()
            .map(|k| k.split('.').next().unwrap_or(k))
            .collect();
        let one = named.len() == 1;
        let note = format!(
            "Section{} {} measured again on **{}{}**, driver CUDA {}, {} (`um_bench --only {} --base`): \
             {} ratios compare figures of that run. The other sections, the goals table and the \
             analysis are from the run{} named above.",
            if one { "" } else { "s" },
            named.join(", "),
            nccl_gpus.map_or(String::new(), |g| format!("{g}× ")),
            machine.name,
            machine.driver,
            machine.date,
            opts.only
                .as_ref()
                .map_or("(all)".to_owned(), |o| o.join(",")),
            if one { "its" } else { "their" },
            if one { "" } else { "s" },
        );
        let old = std::fs::read_to_string(base)?;
        md = if keys.is_empty() {
            old
        } else {
            splice::splice(&old, &md, &keys, &note)
        };
    }
    std::fs::write(docs.join("performance.md"), md)?;
    if opts.base.is_none() {
        std::fs::write(docs.join("img/run_task.svg"), report::run_task_svg(records))?;
        std::fs::write(docs.join("img/mirror.svg"), report::mirror_svg(records))?;
    }
    Ok(())
}

fn run(ctx: &Context, opts: &Options) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(&opts.out)?;
    // The PTX the C++ baseline loads: the very text um embeds.
    let ptx_dir = std::env::temp_dir().join(format!("um_bench_ptx_{}", std::process::id()));
    std::fs::create_dir_all(&ptx_dir)?;
    for (name, text) in um::kernels::ALL_PTX {
        std::fs::write(ptx_dir.join(format!("{name}.ptx")), text)?;
    }
    // The test kernels (add_scalar, spin_then_add) that the C++ launch and scratch modes load.
    std::fs::write(ptx_dir.join("testing.ptx"), um_test_kernels::testing::PTX)?;
    let cpp = opts.cpp.as_ref().map(|exe| cpp::Baseline {
        exe: exe.clone(),
        ptx_dir: ptx_dir.clone(),
    });
    let (free, total) = ctx.mem_info()?;
    let info = ctx.info();
    println!(
        "um_bench on {} (driver CUDA {}.{}), {:.1} GiB free of {:.1} GiB",
        info.name,
        info.driver_version.0,
        info.driver_version.1,
        free as f64 / (1u64 << 30) as f64,
        total as f64 / (1u64 << 30) as f64
    );
    let notes = match &opts.notes {
        Some(p) => std::fs::read_to_string(p).unwrap_or_default(),
        None => String::new(),
    };
    // The page is rewritten after every scenario, so that a run cut short (a time limit on the
    // GPU machine) still leaves every figure measured so far.
    let machine = report::Machine::of(ctx.info());
    let save = |records: &[Record]| write_docs(&machine, opts, records, &notes);
    let mut records = Vec::new();
    if opts.wants("launch") {
        records.extend(runs::launch(cpp.as_ref(), opts.rounds)?);
        save(&records)?;
    }
    if opts.wants("launch_paired") {
        records.extend(paired::launch_paired(ctx, 2000)?);
        save(&records)?;
    }
    for &mib in opts.sizes_mib.iter().filter(|_| opts.wants("run_task")) {
        // Three buffers per variant; never ask for more managed memory than the GPU has free.
        let need = 3 * mib * (1 << 20);
        if need > free / 2 {
            println!(
                "skipping run_task at {mib} MiB: {need} bytes is more than half the free memory"
            );
            continue;
        }
        records.extend(runs::run_task(ctx, cpp.as_ref(), mib, opts.rounds)?);
        save(&records)?;
    }
    if opts.wants("mirror") {
        // Mirrored memory: fewer rounds (device time is scarce), each in a fresh process.
        let mirror_rounds = opts.rounds.min(3);
        records.extend(runs::mirror_threads(
            cpp.as_ref(),
            &opts.sizes_mib,
            // One thread is section 2's run_task (um mirror against C++ explicit, 5 rounds).
            &[4, 8, 16],
            mirror_rounds,
            free,
        )?);
        records.extend(runs::skip(cpp.as_ref(), 64, mirror_rounds)?);
        records.extend(runs::footprint(ctx)?);
        save(&records)?;
    }
    if opts.wants("bandwidth") {
        records.extend(runs::bandwidth(cpp.as_ref(), 256)?);
    }
    if opts.wants("threads") {
        records.extend(runs::threads(ctx, &[1, 4, 8, 16], 16, opts.rounds)?);
    }
    save(&records)?;
    if opts.wants("overlap") {
        records.extend(runs::overlap(ctx, opts.rounds)?);
    }
    if opts.wants("transitions") {
        records.extend(runs::transitions(ctx, cpp.as_ref(), opts.rounds)?);
    }
    if opts.wants("handoff") {
        records.extend(handoff::handoff(ctx, opts.rounds)?);
    }
    if opts.wants("graphs") {
        let graph_cpp = opts.graph_cpp.as_ref().map(|exe| cpp::Baseline {
            exe: exe.clone(),
            ptx_dir: ptx_dir.clone(),
        });
        records.extend(graphs::graphs(graph_cpp.as_ref(), opts.rounds)?);
    }
    save(&records)?;
    if opts.wants("cublas") {
        match um_cublas::Cublas::load() {
            Ok(_) => {
                if opts.cublas_cpp.is_none() {
                    println!("cublas: no --cublas-cpp: the C++ column stays empty");
                }
                records.extend(cublas::gemm(
                    ctx,
                    opts.cublas_cpp.as_ref(),
                    opts.rounds,
                    free,
                )?);
                save(&records)?;
                records.extend(cublas::host_paired(ctx, 1000)?);
                save(&records)?;
            }
            Err(e) => println!("skipping cublas: {e}"),
        }
    }
    if opts.wants("solver") {
        match (&opts.cg_um, &opts.cg_cpp) {
            (Some(um_example), Some(cpp)) => {
                records.extend(solver::solver(um_example, cpp, opts.rounds)?);
                save(&records)?;
            }
            _ => println!("solver: skipped (needs --cg-um and --cg-cpp)"),
        }
    }
    if opts.wants("alloc") {
        records.extend(alloc::allocation(ctx, cpp.as_ref(), opts.rounds)?);
        save(&records)?;
        records.extend(alloc::scratch(cpp.as_ref(), opts.rounds)?);
        save(&records)?;
    }
    if opts.wants("device") {
        records.extend(device_only::device(
            ctx,
            cpp.as_ref(),
            &opts.sizes_mib,
            opts.rounds,
            free,
        )?);
        save(&records)?;
    }
    if opts.wants("nccl") {
        // Skips with one line where there are fewer than two GPUs or no NCCL.
        if let Some(r) = nccl::nccl(
            opts.nccl_cpp.as_deref(),
            opts.rounds.min(5),
            opts.host_rounds,
        )? {
            records.extend(r);
            save(&records)?;
        }
    }
    if opts.base.is_some() {
        println!(
            "wrote {0}/docs/performance.md (this run's sections in --base's page) and {0}/results-of-this-run.json",
            opts.out.display()
        );
    } else {
        println!(
            "wrote {0}/docs/performance.md, {0}/docs/performance-results.json, {0}/docs/img/run_task.svg, {0}/docs/img/mirror.svg",
            opts.out.display()
        );
    }
    Ok(())
}
