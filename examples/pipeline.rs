//! A two-stage GPU pipeline: N batches flow from stage A (stream A) to stage B (stream B) to the
//! host. Built three times, with the same loop:
//!
//! * **handoff**: each batch moves from A to B with `hand_off` (an event on A, a wait on B):
//!   the host enqueues the whole pipeline without waiting, and waits once at the end;
//! * **sync + attach, stage by stage**: each batch moves from A to B with `sync` (the host
//!   waits for A) and `attach` to B, and from B to the host with `sync` (the host waits for B)
//!   before the next batch starts. Every change of owner is a host wait, so the stages never
//!   overlap: this is the version of the goal (≥ 1.8x, where 2x is the limit);
//! * **sync + attach, A only**: as above, but the host collects the batches at the end, so it
//!   waits for A only. B keeps running while the host waits, so this version overlaps the
//!   stages too: it is the best a host-waiting pipeline can do.
//!
//! and each version on two storages:
//!
//! * **unified** (`Managed<[f32]>`): every `attach` and every handoff moves the driver's stream
//!   association (`cuStreamAttachMemAsync`), a stream-ordered call that holds the stream;
//! * **coherent** (`CoherentManaged<[f32]>`): managed memory attached globally, for devices with
//!   concurrent managed access; `attach` makes no driver call and a handoff is the event alone.
//!
//! Both stages are `spin_then_add`, a kernel that takes a set time on a few blocks, so the two
//! stages are equally long and can run at the same time on different multiprocessors. Each
//! version is run with short stages (where the host's round trip per batch is as long as a
//! stage) and with long ones; the example prints the throughput of both and their ratio, checks
//! every batch's result, and with `--svg PATH` (or `$UM_SVG_DIR`) writes a timeline, drawn from
//! `%globaltimer` stamps, that shows the stages overlapping.
//!
//! Against stage by stage, the handoff version gains the overlap of the stages (2x at most for
//! long stages) plus two host round trips per batch. Against "A only" it gains only the host
//! round trip per batch (the wait's wake-up and the next enqueues), during which the GPU idles:
//! that ratio falls from about 2x for stages about as long as that round trip towards 1x for
//! long stages. What it keeps at every length is the CPU: the handoff version enqueues the
//! whole pipeline in a fraction of its run time and never waits until the end.
//!
//! Then a two-GPU variant: stage A on device 0, stage B on device 1 (memory allocated on
//! device 0 and handed across). It runs where two GPUs exist and says "skipped" elsewhere.

mod common;

use std::process::ExitCode;
use std::time::Instant;

use common::Interval;
use um::kernels::streams;
use um::{Context, HostOwned, HostVisible, Managed, Storage, Stream, StreamOptions, StreamOwned};
use um_test_kernels::testing;

/// Floats per batch: four blocks of the default launch, so that both stages fit on the GPU at
/// once.
const BATCH: usize = 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// `hand_off` from A to B; the host waits once, at the end.
    HandOff,
    /// `sync` + `attach` from A to B, `sync` from B to the host, batch by batch.
    StageByStage,
    /// `sync` + `attach` from A to B; the host waits for B once, at the end.
    WaitForA,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::HandOff, Mode::StageByStage, Mode::WaitForA];

    fn label(self) -> &'static str {
        match self {
            Mode::HandOff => "handoff",
            Mode::StageByStage => "sync + attach, stage by stage",
            Mode::WaitForA => "sync + attach, A only",
        }
    }
}

/// One run of the pipeline.
struct Run {
    /// Host time from the first enqueue to the last batch back on the host.
    secs: f64,
    /// Host time from the first enqueue to the last (before the final wait): in the handoff
    /// version, the host's own cost of the pipeline.
    enqueue_secs: f64,
    /// Every batch came back as its input + 1 (stage A) + 2 (stage B).
    correct: bool,
    /// Stage intervals (lane 0: A, lane 1: B), when stamped.
    intervals: Vec<Interval>,
}

/// What the pipeline allocates, in one storage: the batches, and the timeline's stamps (in the
/// same storage, so that a coherent run makes no stream attach at all).
trait Kind: HostVisible + Sized {
    /// `len` floats, element `j` set to `f(j)`.
    fn batch(
        ctx: &Context,
        len: usize,
        f: impl FnMut(usize) -> f32,
    ) -> um::Result<Managed<[f32], HostOwned, Self>>;
    /// Two zeroed stamps.
    fn stamps(ctx: &Context) -> um::Result<Managed<[u64], HostOwned, Self>>;
}

impl Kind for um::Unified {
    fn batch(ctx: &Context, len: usize, f: impl FnMut(usize) -> f32) -> um::Result<Managed<[f32]>> {
        Managed::from_fn(ctx, len, f)
    }
    fn stamps(ctx: &Context) -> um::Result<Managed<[u64]>> {
        Managed::zeroed_slice(ctx, 2)
    }
}

impl Kind for um::Coherent {
    fn batch(
        ctx: &Context,
        len: usize,
        f: impl FnMut(usize) -> f32,
    ) -> um::Result<Managed<[f32], HostOwned, Self>> {
        Managed::from_fn_coherent(ctx, len, f)
    }
    fn stamps(ctx: &Context) -> um::Result<Managed<[u64], HostOwned, Self>> {
        Managed::zeroed_slice_coherent(ctx, 2)
    }
}

/// Moves a batch from stream A to stream B.
fn a_to_b<'a, 'b, M: Storage>(
    x: Managed<[f32], StreamOwned<'a>, M>,
    a: &Stream<'a>,
    b: &Stream<'b>,
    mode: Mode,
) -> um::Result<Managed<[f32], StreamOwned<'b>, M>> {
    match mode {
        Mode::HandOff => x.hand_off(b),
        // Across devices `attach` refuses memory of another context: the sync-based version
        // waits on the host, then re-attaches to A (no driver call) and hands off.
        Mode::StageByStage | Mode::WaitForA if !a.context().same_as(b.context()) => {
            x.sync()?.attach(a)?.hand_off(b)
        }
        Mode::StageByStage | Mode::WaitForA => x.sync()?.attach(b),
    }
}

/// `batches` batches through A (on `ctx_a`) and B (on `ctx_b`), each stage `stage_ns` long,
/// in memory of storage `M`. With `stamped`, each stage is bracketed by `%globaltimer` stamps
/// (extra launches: used for the timeline only, not for throughput).
fn pipeline<M: Kind>(
    ctx_a: &Context,
    ctx_b: &Context,
    batches: usize,
    stage_ns: u64,
    mode: Mode,
    stamped: bool,
) -> um::Result<Run> {
    let inputs: Vec<Managed<[f32], HostOwned, M>> = (0..batches)
        .map(|k| M::batch(ctx_a, BATCH, |j| (k + j) as f32))
        .collect::<um::Result<_>>()?;
    let stamps = if stamped { batches } else { 0 };
    let stamps_a: Vec<Managed<[u64], HostOwned, M>> = (0..stamps)
        .map(|_| M::stamps(ctx_a))
        .collect::<um::Result<_>>()?;
    let stamps_b: Vec<Managed<[u64], HostOwned, M>> = (0..stamps)
        .map(|_| M::stamps(ctx_b))
        .collect::<um::Result<_>>()?;
    let options = StreamOptions::new().non_blocking();
    let (outputs, stamps_a, stamps_b, (secs, enqueue_secs)) = ctx_a.with_stream(options, |a| {
        ctx_b.with_stream(options, |b| {
            let mut ta: Vec<_> = stamps_a
                .into_iter()
                .map(|t| t.attach(a))
                .collect::<um::Result<_>>()?;
            let mut tb: Vec<_> = stamps_b
                .into_iter()
                .map(|t| t.attach(b))
                .collect::<um::Result<_>>()?;
            let start = Instant::now();
            let mut done = Vec::with_capacity(batches);
            let mut home = Vec::with_capacity(batches);
            for (k, x) in inputs.into_iter().enumerate() {
                let mut x = x.attach(a)?;
                if stamped {
                    streams::stamp(a, &mut ta[k], 0)?;
                }
                testing::spin_then_add(a, &mut x, 1.0, stage_ns)?;
                if stamped {
                    streams::stamp(a, &mut ta[k], 1)?;
                }
                let mut x = a_to_b(x, a, b, mode)?;
                if stamped {
                    streams::stamp(b, &mut tb[k], 0)?;
                }
                testing::spin_then_add(b, &mut x, 2.0, stage_ns)?;
                if stamped {
                    streams::stamp(b, &mut tb[k], 1)?;
                }
                if mode == Mode::StageByStage {
                    home.push(x.sync()?);
                } else {
                    done.push(x);
                }
            }
            let enqueued = start.elapsed().as_secs_f64();
            home.extend(b.sync_all(done)?);
            let done = home;
            let secs = start.elapsed().as_secs_f64();
            Ok((done, a.sync_all(ta)?, b.sync_all(tb)?, (secs, enqueued)))
        })
    })?;
    let correct = outputs.iter().enumerate().all(|(k, x)| {
        x.iter()
            .enumerate()
            .all(|(j, v)| *v == (k + j) as f32 + 3.0)
    });
    let lane = |lane: usize, t: &Managed<[u64], HostOwned, M>| Interval {
        lane,
        start_ns: t[0],
        end_ns: t[1],
    };
    let intervals = stamps_a
        .iter()
        .map(|t| lane(0, t))
        .chain(stamps_b.iter().map(|t| lane(1, t)))
        .collect();
    Ok(Run {
        secs,
        enqueue_secs,
        correct,
        intervals,
    })
}

/// (batches, stage length in ns): stages from about one host round trip to much longer. Fewer
/// batches under the sanitizer.
const STAGES: [(usize, u64); 3] = [(400, 10_000), (200, 100_000), (40, 1_000_000)];

/// The three versions at one stage length, in memory of storage `M`: prints a row and returns
/// whether every batch was right.
fn compare<M: Kind>(
    label: &str,
    ctx_a: &Context,
    ctx_b: &Context,
    batches: usize,
    stage_ns: u64,
) -> um::Result<bool> {
    // Warm-up: module load, JIT, first-touch migrations.
    for mode in Mode::ALL {
        pipeline::<M>(ctx_a, ctx_b, 4, stage_ns, mode, false)?;
    }
    let batches = common::workload(batches, 8);
    let [handoff, serial, wait_a] =
        Mode::ALL.map(|mode| pipeline::<M>(ctx_a, ctx_b, batches, stage_ns, mode, false));
    let (handoff, serial, wait_a) = (handoff?, serial?, wait_a?);
    let rate = |r: &Run| batches as f64 / r.secs;
    println!(
        "{label}, {}: {batches} batches, two stages of {:.0} us: handoff {:.0} batches/s (host enqueue {:.1} us per batch, {:.0}% of the run); {} {:.0} batches/s: {:.2}x; {} {:.0} batches/s: {:.2}x (one stage at a time would be {:.0} batches/s, both at once {:.0})",
        M::NAME,
        stage_ns as f64 / 1e3,
        rate(&handoff),
        handoff.enqueue_secs * 1e6 / batches as f64,
        100.0 * handoff.enqueue_secs / handoff.secs,
        Mode::StageByStage.label(),
        rate(&serial),
        serial.secs / handoff.secs,
        Mode::WaitForA.label(),
        rate(&wait_a),
        wait_a.secs / handoff.secs,
        1e9 / (2.0 * stage_ns as f64),
        1e9 / stage_ns as f64,
    );
    Ok(handoff.correct && serial.correct && wait_a.correct)
}

/// Every stage length on one storage, then the stamped runs of that storage for the timeline
/// (100 µs stages): whether every batch was right, and the stamped runs (in `Mode::ALL`'s
/// order).
fn measure<M: Kind>(label: &str, ctx_a: &Context, ctx_b: &Context) -> um::Result<(bool, Vec<Run>)> {
    let mut all_ok = true;
    for (batches, stage_ns) in STAGES {
        all_ok &= compare::<M>(label, ctx_a, ctx_b, batches, stage_ns)?;
    }
    let (batches, stage_ns) = (common::workload(16, 4), 100_000);
    let runs = Mode::ALL
        .into_iter()
        .map(|mode| pipeline::<M>(ctx_a, ctx_b, batches, stage_ns, mode, true))
        .collect::<um::Result<Vec<_>>>()?;
    Ok((all_ok && runs.iter().all(|r| r.correct), runs))
}

/// Both storages, coherent first: the first `cuStreamAttachMemAsync` of a process (which
/// unified memory makes) slows every later launch of the process (docs/performance.md,
/// section 7), so coherent memory is measured before any unified memory is attached. Draws
/// the timeline of 100 µs stages and returns whether every batch was right.
fn both_storages(label: &str, ctx_a: &Context, ctx_b: &Context, svg: &str) -> um::Result<bool> {
    if !ctx_a.info().concurrent_managed_access {
        // Coherent memory needs concurrent managed access (the emulated mode has none).
        println!("{label}, coherent: skipped (the device lacks concurrent managed access)");
        return Ok(measure::<um::Unified>(label, ctx_a, ctx_b)?.0);
    }
    let (ok_c, coherent) = measure::<um::Coherent>(label, ctx_a, ctx_b)?;
    let (ok_u, unified) = measure::<um::Unified>(label, ctx_a, ctx_b)?;
    let overlaps: Vec<String> = Mode::ALL
        .iter()
        .zip(coherent.iter().zip(&unified))
        .map(|(mode, (c, u))| {
            format!(
                "{} {:.2}x (coherent), {:.2}x (unified)",
                mode.label(),
                common::overlap_factor(&c.intervals),
                common::overlap_factor(&u.intervals)
            )
        })
        .collect();
    println!(
        "{label}: timeline of {} batches, 100 us stages: stage overlap with {} (2 = both stages always busy)",
        common::workload(16, 4),
        overlaps.join("; ")
    );
    let titles: Vec<String> = ["coherent", "unified"]
        .iter()
        .flat_map(|storage| {
            Mode::ALL.map(|mode| {
                format!(
                    "{}, {storage} memory (lane 0: stage A, lane 1: stage B)",
                    mode.label()
                )
            })
        })
        .collect();
    let panels: Vec<(&str, &[Interval])> = titles
        .iter()
        .map(String::as_str)
        .zip(
            coherent
                .iter()
                .chain(&unified)
                .map(|r| r.intervals.as_slice()),
        )
        .collect();
    common::publish_timeline(
        svg,
        &format!("Two-stage pipeline, {label}: handoff vs sync + attach"),
        "stage",
        &panels,
    );
    Ok(ok_c && ok_u)
}

fn main() -> ExitCode {
    let Some(ctx) = common::open_gpu("pipeline") else {
        return ExitCode::from(2);
    };
    println!("device: {}", ctx.info().name);
    // `--two-gpus-only` skips the one-GPU part, so that the two-GPU figures come from a process
    // that has attached nothing before them.
    let two_only = std::env::args().any(|a| a == "--two-gpus-only");
    let one_gpu = if two_only {
        Ok(true)
    } else {
        both_storages("one GPU", &ctx, &ctx, "pipeline")
    };
    // UM_ONLY_ONE_GPU=1 (run.sh, under memcheck and initcheck): the one-GPU part only. Those
    // tools report a kernel of device 1 reading device 0's managed memory as out of bounds,
    // with or without um (bench/memcheck_cross_device.cu).
    let only_one = std::env::var_os("UM_ONLY_ONE_GPU").is_some();
    let two_gpus = match Context::new(1) {
        _ if only_one => {
            println!("two GPUs: skipped (UM_ONLY_ONE_GPU)");
            Ok(true)
        }
        Err(e) => {
            println!("two GPUs: skipped ({e})");
            Ok(true)
        }
        Ok(second)
            if !(ctx.info().concurrent_managed_access
                && second.info().concurrent_managed_access) =>
        {
            println!("two GPUs: skipped (a device lacks concurrent managed access)");
            Ok(true)
        }
        Ok(second) => {
            println!("second device: {}", second.info().name);
            both_storages("two GPUs", &ctx, &second, "pipeline_two_gpus")
        }
    };
    match (one_gpu, two_gpus) {
        (Ok(true), Ok(true)) => {
            println!("checked: every batch came back as input + 3");
            ExitCode::SUCCESS
        }
        (Ok(_), Ok(_)) => {
            println!("FAILED: a batch came back wrong");
            ExitCode::FAILURE
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("pipeline: {e}");
            ExitCode::FAILURE
        }
    }
}
