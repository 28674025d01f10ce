//! A two-stage GPU pipeline: N batches flow from stage A (stream A) to stage B (stream B) to the
//! host. Built twice, with the same loop:
//!
//! * **handoff**: each batch moves from A to B with `hand_off` (an event on A, a wait on B):
//!   the host enqueues the whole pipeline without waiting, and waits once at the end;
//! * **sync + attach**: each batch moves with `sync` (the host waits for A) and `attach` to B.
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
//! The sync-based version waits for A only; B keeps running meanwhile, so it overlaps the
//! stages too. What it loses is the host round trip per batch (the wait's wake-up and the next
//! enqueues), during which the GPU idles: the ratio falls from about 2x for stages about as
//! long as that round trip towards 1x for long stages.
//!
//! Then a two-GPU variant: stage A on device 0, stage B on device 1 (memory allocated on
//! device 0 and handed across). It runs where two GPUs exist and says "skipped" elsewhere.

mod common;

use std::process::ExitCode;
use std::time::Instant;

use common::Interval;
use um::kernels::{streams, testing};
use um::{Context, HostOwned, Managed, Storage, Stream, StreamOptions, StreamOwned};

/// Floats per batch: four blocks of the default launch, so that both stages fit on the GPU at
/// once.
const BATCH: usize = 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    HandOff,
    SyncAttach,
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
trait Kind: Storage + Sized {
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
        Mode::SyncAttach if !a.context().same_as(b.context()) => x.sync()?.attach(a)?.hand_off(b),
        Mode::SyncAttach => x.sync()?.attach(b),
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
                done.push(x);
            }
            let enqueued = start.elapsed().as_secs_f64();
            let done = b.sync_all(done)?;
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

/// Both versions at one stage length, in memory of storage `M`: prints a row and returns
/// (ratio, all correct).
fn compare<M: Kind>(
    label: &str,
    ctx_a: &Context,
    ctx_b: &Context,
    batches: usize,
    stage_ns: u64,
) -> um::Result<(f64, bool)> {
    // Warm-up: module load, JIT, first-touch migrations.
    pipeline::<M>(ctx_a, ctx_b, 4, stage_ns, Mode::HandOff, false)?;
    pipeline::<M>(ctx_a, ctx_b, 4, stage_ns, Mode::SyncAttach, false)?;
    let batches = common::workload(batches, 8);
    let handoff = pipeline::<M>(ctx_a, ctx_b, batches, stage_ns, Mode::HandOff, false)?;
    let sync = pipeline::<M>(ctx_a, ctx_b, batches, stage_ns, Mode::SyncAttach, false)?;
    let rate = |r: &Run| batches as f64 / r.secs;
    let ratio = sync.secs / handoff.secs;
    println!(
        "{label}, {}: {batches} batches, two stages of {:.0} us: handoff {:.0} batches/s (host enqueue {:.1} us per batch), sync + attach {:.0} batches/s: {ratio:.2}x (one stage at a time would be {:.0} batches/s, both at once {:.0})",
        M::NAME,
        stage_ns as f64 / 1e3,
        rate(&handoff),
        handoff.enqueue_secs * 1e6 / batches as f64,
        rate(&sync),
        1e9 / (2.0 * stage_ns as f64),
        1e9 / stage_ns as f64,
    );
    Ok((ratio, handoff.correct && sync.correct))
}

/// Every stage length on one storage, then the stamped runs of that storage for the timeline:
/// whether every batch was right, and the stamped runs (handoff, sync-based).
fn measure<M: Kind>(label: &str, ctx_a: &Context, ctx_b: &Context) -> um::Result<(bool, Run, Run)> {
    let mut all_ok = true;
    for (batches, stage_ns) in STAGES {
        all_ok &= compare::<M>(label, ctx_a, ctx_b, batches, stage_ns)?.1;
    }
    let (batches, stage_ns) = (common::workload(16, 4), 100_000);
    let handoff = pipeline::<M>(ctx_a, ctx_b, batches, stage_ns, Mode::HandOff, true)?;
    let sync = pipeline::<M>(ctx_a, ctx_b, batches, stage_ns, Mode::SyncAttach, true)?;
    Ok((all_ok && handoff.correct && sync.correct, handoff, sync))
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
    let (ok_c, handoff_c, sync_c) = measure::<um::Coherent>(label, ctx_a, ctx_b)?;
    let (ok_u, handoff_u, sync_u) = measure::<um::Unified>(label, ctx_a, ctx_b)?;
    let f = |r: &Run| common::overlap_factor(&r.intervals);
    println!(
        "{label}: timeline of {} batches, 100 us stages: stage overlap with handoff {:.2}x (coherent), {:.2}x (unified); with sync + attach {:.2}x (coherent), {:.2}x (unified) (2 = both stages always busy)",
        common::workload(16, 4),
        f(&handoff_c),
        f(&handoff_u),
        f(&sync_c),
        f(&sync_u)
    );
    common::publish_timeline(
        svg,
        &format!("Two-stage pipeline, {label}: handoff vs sync + attach"),
        "stage",
        &[
            (
                "handoff, coherent memory (lane 0: stage A, lane 1: stage B)",
                &handoff_c.intervals,
            ),
            ("sync + attach, coherent memory", &sync_c.intervals),
            ("handoff, unified memory", &handoff_u.intervals),
            ("sync + attach, unified memory", &sync_u.intervals),
        ],
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
    let two_gpus = match Context::new(1) {
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
