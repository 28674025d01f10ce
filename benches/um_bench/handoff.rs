//! Section 7 of the report, handing memory from one stream to another: the host
//! cost of `hand_off` against `sync` + `attach`, against cudarc's automatic per-launch events,
//! and the throughput of a two-stage pipeline built both ways.

use std::fmt::Write as _;
use std::time::Instant;

use um::{Context, HostOwned, HostVisible, Managed, Storage, StreamOptions};
use um_test_kernels::testing;

use crate::Record;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const REPS: usize = 2000;

/// How a storage's buffers are made: unified (`Managed::zeroed_slice`) or coherent
/// (`Managed::zeroed_slice_coherent`).
type Alloc<M> = fn(&Context, usize) -> um::Result<Managed<[f32], HostOwned, M>>;
const UNIFIED: Alloc<um::Unified> = |ctx, n| Managed::zeroed_slice(ctx, n);
const COHERENT: Alloc<um::Coherent> = |ctx, n| Managed::zeroed_slice_coherent(ctx, n);
/// GPU time of the kernel before a transition, in the "after a kernel" rows.
const KERNEL_NS: u64 = 20_000;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// A record of `samples` (one round each: median of medians, min of minima).
fn record(imp: &str, variant: &str, rounds: &[Vec<f64>], unit: &'static str) -> Record {
    let medians: Vec<f64> = rounds.iter().map(|r| median(r)).collect();
    Record {
        scenario: "handoff",
        imp: imp.to_owned(),
        variant: variant.to_owned(),
        mib: 0,
        bytes: 0,
        threads: 1,
        median: median(&medians),
        min: rounds.iter().map(|r| min(r)).fold(f64::INFINITY, f64::min),
        unit,
        paired: None,
    }
}

/// Host µs of one A -> B transition, by `hand_off` or by `sync` + `attach`, with A idle or
/// after a `KERNEL_NS` kernel on A (whose wait `sync` pays and `hand_off` does not).
fn transition_once<M: HostVisible>(
    ctx: &Context,
    handoff: bool,
    after_kernel: bool,
    alloc: Alloc<M>,
) -> Res<Vec<f64>> {
    let m = alloc(ctx, 1024)?;
    let samples = ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut samples = Vec::with_capacity(REPS);
            let mut on_a = m.attach(a)?;
            for i in 0..REPS {
                if after_kernel {
                    testing::spin_then_add(a, &mut on_a, 1.0, KERNEL_NS)?;
                } else {
                    a.wait_idle()?;
                }
                let t0 = Instant::now();
                let on_b = if handoff {
                    on_a.hand_off(b)?
                } else {
                    on_a.sync()?.attach(b)?
                };
                let dt = t0.elapsed().as_secs_f64() * 1e6;
                // Back to A, untimed (and the same way for both, so every timed transition
                // changes the association).
                b.wait_idle()?;
                on_a = on_b.sync()?.attach(a)?;
                if i >= 4 {
                    samples.push(dt);
                }
            }
            on_a.sync().map(drop)?;
            Ok(samples)
        })
    })?;
    Ok(samples)
}

const LAUNCH_BATCHES: usize = 100;
const PER_BATCH: usize = 256;

/// Host µs per launch when every launch is on the other stream than the last one: um's typed
/// launcher plus one `hand_off` per launch.
fn um_alternating<M: HostVisible>(ctx: &Context, alloc: Alloc<M>) -> Res<Vec<f64>> {
    let m = alloc(ctx, 1)?;
    let samples = ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let mut x = m.attach(&s[0])?;
        let mut samples = Vec::new();
        for batch in 0..LAUNCH_BATCHES {
            let t0 = Instant::now();
            for k in 0..PER_BATCH {
                let st = &s[k % 2];
                x = x.hand_off(st)?;
                testing::add_scalar(st, &mut x, 1.0)?;
            }
            let dt = t0.elapsed().as_secs_f64() * 1e6 / PER_BATCH as f64;
            s[0].wait_idle()?;
            s[1].wait_idle()?;
            if batch > 0 {
                samples.push(dt);
            }
        }
        drop(x);
        Ok(samples)
    })?;
    Ok(samples)
}

/// The same with cudarc: a `CudaSlice` launched on two streams in turn. cudarc records a read
/// or write event per argument at every launch, and waits for the other stream's, on its own.
fn cudarc_alternating() -> Res<Vec<f64>> {
    use cudarc::driver::{CudaContext, PushKernelArg};
    let cctx = CudaContext::new(0)?;
    let streams = [cctx.new_stream()?, cctx.new_stream()?];
    let module = cctx.load_module(cudarc::nvrtc::Ptx::from_src(testing::PTX))?;
    let f = module.load_function("add_scalar")?;
    let mut buf = streams[0].alloc_zeros::<f32>(1)?;
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (v, n) = (1.0f32, 1u32);
    let mut samples = Vec::new();
    for batch in 0..LAUNCH_BATCHES {
        let t0 = Instant::now();
        for k in 0..PER_BATCH {
            let mut b = streams[k % 2].launch_builder(&f);
            b.arg(&mut buf).arg(&v).arg(&n);
            // SAFETY: add_scalar(float *data, float value, unsigned n) over 1 element.
            unsafe { b.launch(cfg) }?;
        }
        let dt = t0.elapsed().as_secs_f64() * 1e6 / PER_BATCH as f64;
        streams[0].synchronize()?;
        streams[1].synchronize()?;
        if batch > 0 {
            samples.push(dt);
        }
    }
    Ok(samples)
}

/// How a pipeline moves each batch (the example `pipeline` says more).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `hand_off` from A to B; the host waits once, at the end.
    HandOff,
    /// `sync` + `attach` from A to B, and `sync` from B to the host before the next batch:
    /// the stages never overlap (the goal's version: 2x is the limit).
    StageByStage,
    /// `sync` + `attach` from A to B; the host waits for B once, at the end, so B runs while
    /// the host waits for A (the best host-waiting schedule).
    WaitForA,
    /// As `HandOff`, but every batch is moved to the GPU before the clock (a kernel on A
    /// touches it, then a wait), as the C++ probe's `global` and `device` variants have their
    /// data on the GPU: no page faults in the loop.
    HandOffResident,
}

/// Seconds for `batches` batches through two `stage_ns` stages on streams A and B.
fn pipeline_secs<M: HostVisible>(
    ctx: &Context,
    batches: usize,
    stage_ns: u64,
    mode: Mode,
    alloc: Alloc<M>,
) -> Res<f64> {
    let inputs: Vec<Managed<[f32], HostOwned, M>> = (0..batches)
        .map(|k| {
            let mut x = alloc(ctx, 1024)?;
            x.iter_mut()
                .enumerate()
                .for_each(|(j, v)| *v = (k + j) as f32);
            Ok(x)
        })
        .collect::<um::Result<_>>()?;
    let options = StreamOptions::new().non_blocking();
    let (outputs, secs) = ctx.with_stream(options, |a| {
        let inputs = if mode == Mode::HandOffResident {
            let mut on_a: Vec<_> = inputs
                .into_iter()
                .map(|x| x.attach(a))
                .collect::<um::Result<_>>()?;
            for x in &mut on_a {
                testing::add_scalar(a, x, 0.0)?; // x + 0 == x: the pages move, the data stays
            }
            a.sync_all(on_a)? // on-demand: the pages stay on the GPU
        } else {
            inputs
        };
        ctx.with_stream(options, |b| {
            let start = Instant::now();
            let mut done = Vec::with_capacity(batches);
            let mut home = Vec::with_capacity(batches);
            for x in inputs {
                let mut x = x.attach(a)?;
                testing::spin_then_add(a, &mut x, 1.0, stage_ns)?;
                let mut x = match mode {
                    Mode::HandOff | Mode::HandOffResident => x.hand_off(b)?,
                    Mode::StageByStage | Mode::WaitForA => x.sync()?.attach(b)?,
                };
                testing::spin_then_add(b, &mut x, 2.0, stage_ns)?;
                if mode == Mode::StageByStage {
                    home.push(x.sync()?);
                } else {
                    done.push(x);
                }
            }
            home.extend(b.sync_all(done)?);
            Ok((home, start.elapsed().as_secs_f64()))
        })
    })?;
    let correct = outputs.iter().enumerate().all(|(k, x)| {
        x.iter()
            .enumerate()
            .all(|(j, v)| *v == (k + j) as f32 + 3.0)
    });
    if !correct {
        return Err("pipeline: a batch came back wrong".into());
    }
    Ok(secs)
}

/// The pipelines measured: (batches, stage length in ns, label).
const PIPELINES: [(usize, u64, &str); 3] = [
    (400, 10_000, "10 µs"),
    (200, 100_000, "100 µs"),
    (40, 1_000_000, "1 ms"),
];

/// The pipeline versions, with their keys in a child's JSON line.
const PIPELINE_MODES: [(&str, Mode); 4] = [
    ("handoff", Mode::HandOff),
    ("serial", Mode::StageByStage),
    ("wait_a", Mode::WaitForA),
    ("handoff_resident", Mode::HandOffResident),
];

/// The per-batch rows of one pipeline and storage, in the order of `PIPELINE_MODES`, then the
/// two ratios.
const PIPELINE_ROWS: [(&str, &str); 6] = [
    ("hand_off, µs per batch", "us"),
    ("sync + attach stage by stage, µs per batch", "us"),
    ("sync + attach waiting for A only, µs per batch", "us"),
    (
        "hand_off, batches on the GPU before the clock, µs per batch",
        "us",
    ),
    ("stage by stage time / hand_off time", "x"),
    ("waiting for A only time / hand_off time", "x"),
];

/// The name of a pipeline record: stage label, storage, what.
fn pipeline_variant(stages: &str, storage: &str, what: &str) -> String {
    format!("pipeline, {stages} stages, {storage}: {what}")
}

/// The measurements of one storage in a fresh process (`um_bench --child handoff STORAGE`):
/// one JSON line. A process that has made one `cuStreamAttachMemAsync` launches more slowly
/// from then on (docs/performance.md, section 7), so coherent memory, which makes none, is
/// measured where no unified memory was ever attached; unified memory is measured in a fresh
/// process as well, so that the two differ only in the storage.
pub(crate) fn child(ctx: &Context, storage: &str) -> Res<String> {
    fn run<M: HostVisible>(ctx: &Context, alloc: Alloc<M>) -> Res<String> {
        let mut line = format!(
            "{{\"transition\":{:.4},\"alternating\":{:.4}",
            median(&transition_once(ctx, true, true, alloc)?),
            median(&um_alternating(ctx, alloc)?)
        );
        for (i, (batches, stage_ns, _)) in PIPELINES.into_iter().enumerate() {
            for (key, mode) in PIPELINE_MODES {
                pipeline_secs(ctx, 4, stage_ns, mode, alloc)?; // warm-up
                let secs = pipeline_secs(ctx, batches, stage_ns, mode, alloc)?;
                line += &format!(",\"p{i}_{key}\":{:.4}", secs * 1e6 / batches as f64);
            }
        }
        Ok(line + "}")
    }
    match storage {
        "unified" => run(ctx, UNIFIED),
        "coherent" => run(ctx, COHERENT),
        _ => Err(format!("no storage {storage:?}").into()),
    }
}

pub(crate) fn handoff(ctx: &Context, rounds: usize) -> Res<Vec<Record>> {
    println!(
        "handoff: {REPS} transitions, {LAUNCH_BATCHES} x {PER_BATCH} launches, pipelines; {rounds} rounds"
    );
    let mut rows: Vec<(&str, String, Vec<Vec<f64>>, &'static str)> = [
        ("um", "hand_off, A idle", "us"),
        ("um", "sync + attach, A idle", "us"),
        ("um", "hand_off, after a 20 µs kernel on A", "us"),
        ("um", "sync + attach, after a 20 µs kernel on A", "us"),
        (
            "um",
            "hand_off, after a 20 µs kernel on A, fresh process, unified",
            "us",
        ),
        (
            "um",
            "hand_off, after a 20 µs kernel on A, fresh process, coherent",
            "us",
        ),
        (
            "um",
            "launch on the other stream: hand_off + typed launcher",
            "us",
        ),
        (
            "um",
            "launch on the other stream: hand_off + typed launcher, fresh process, unified",
            "us",
        ),
        (
            "um",
            "launch on the other stream: hand_off + typed launcher, fresh process, coherent",
            "us",
        ),
        (
            "cudarc",
            "launch on the other stream: automatic events",
            "us",
        ),
    ]
    .into_iter()
    .map(|(imp, v, unit)| (imp, v.to_owned(), Vec::new(), unit))
    .collect();
    let first_pipeline = rows.len();
    for (_, _, stages) in PIPELINES {
        for storage in [um::Unified::NAME, um::Coherent::NAME] {
            for (what, unit) in PIPELINE_ROWS {
                rows.push((
                    "um",
                    pipeline_variant(stages, storage, what),
                    Vec::new(),
                    unit,
                ));
            }
        }
    }
    for _ in 0..rounds {
        rows[0].2.push(transition_once(ctx, true, false, UNIFIED)?);
        rows[1].2.push(transition_once(ctx, false, false, UNIFIED)?);
        rows[2].2.push(transition_once(ctx, true, true, UNIFIED)?);
        rows[3].2.push(transition_once(ctx, false, true, UNIFIED)?);
        rows[6].2.push(um_alternating(ctx, UNIFIED)?);
        rows[9].2.push(cudarc_alternating()?);
        for (k, storage) in [um::Unified::NAME, um::Coherent::NAME]
            .into_iter()
            .enumerate()
        {
            let line = crate::runs::child_output(&["handoff", storage])?;
            let num = |key: &str| crate::cpp::number(&line, key);
            rows[4 + k].2.push(vec![num("transition")?]);
            rows[7 + k].2.push(vec![num("alternating")?]);
            for i in 0..PIPELINES.len() {
                let row = first_pipeline + PIPELINE_ROWS.len() * (2 * i + k);
                let mut per_batch = [0.0; PIPELINE_MODES.len()];
                for (j, (key, _)) in PIPELINE_MODES.into_iter().enumerate() {
                    per_batch[j] = num(&format!("p{i}_{key}"))?;
                    rows[row + j].2.push(vec![per_batch[j]]);
                }
                let ratios = row + PIPELINE_MODES.len();
                rows[ratios].2.push(vec![per_batch[1] / per_batch[0]]);
                rows[ratios + 1].2.push(vec![per_batch[2] / per_batch[0]]);
            }
        }
    }
    Ok(rows
        .iter()
        .map(|(imp, variant, r, unit)| record(imp, variant, r, unit))
        .collect())
}

/// Section 7 of performance.md.
pub(crate) fn markdown(records: &[Record]) -> String {
    let mut md = String::new();
    let handoff: Vec<&Record> = records.iter().filter(|r| r.scenario == "handoff").collect();
    if handoff.is_empty() {
        return md;
    }
    let _ = writeln!(
        md,
        "\n## 7. Handing memory from stream A to stream B\n\n\
         Host time of one transition (µs), and per launch when each launch is on the other \
         stream than the last. Unified memory unless the row says coherent (managed memory \
         attached globally, whose handoff is the event alone). Rows marked \"fresh process\" \
         run in a process of their own that has attached nothing else: a process slows down \
         for good at its first `cuStreamAttachMemAsync` (see the analysis).\n\n\
         | who | what | median | min |\n| --- | --- | ---: | ---: |"
    );
    for r in handoff
        .iter()
        .filter(|r| !r.variant.starts_with("pipeline"))
    {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} µs | {:.3} µs |",
            r.imp, r.variant, r.median, r.min
        );
    }
    let _ = writeln!(
        md,
        "\n### Two-stage pipeline\n\n\
         Each stage is `spin_then_add` on a 1024-float batch; host wall time per batch (median \
         of rounds), from the first enqueue to the last batch back on the host, each storage \
         in a fresh process per round. Unified: every \
         `attach` and handoff moves the stream association (`cuStreamAttachMemAsync`). \
         Coherent: no association call; a handoff is an event. Three versions: hand_off \
         (the host waits once, at the end); sync + attach stage by stage (the host waits for \
         A, attaches to B, and waits for B before the next batch: the stages never overlap, \
         so 2x is the limit of the ratio for long stages); sync + attach waiting for A only \
         (the host collects the batches at the end, so B runs while it waits for A: the best \
         host-waiting schedule, which overlaps the stages too). In every version the host \
         writes the batches before the clock and stage A's kernel faults them in; the column \
         \"hand_off, resident\" moves them to the GPU before the clock (as the C++ probe \
         does), which shows what those page faults cost.\n\n\
         | stages | storage | hand_off, µs per batch | stage by stage, µs per batch | A only, µs per batch | hand_off, resident, µs per batch | stage by stage / hand_off | A only / hand_off |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let get = |v: String| handoff.iter().find(|r| r.variant == v).map(|r| r.median);
    let mut goals = Vec::new();
    for (_, _, stages) in PIPELINES {
        for storage in [um::Unified::NAME, um::Coherent::NAME] {
            let cells: Option<Vec<f64>> = PIPELINE_ROWS
                .iter()
                .map(|(what, _)| get(pipeline_variant(stages, storage, what)))
                .collect();
            if let Some([h, s, w, r, xs, xw]) = cells.as_deref() {
                let _ = writeln!(
                    md,
                    "| {stages} | {storage} | {h:.1} | {s:.1} | {w:.1} | {r:.1} | {xs:.2}x | {xw:.2}x |"
                );
                goals.push(format!(
                    "{stages} stages, {storage}: {xs:.2}x ({})",
                    if *xs >= 1.8 { "met" } else { "not met" }
                ));
            }
        }
    }
    let _ = writeln!(
        md,
        "\nGoal, two equal stages: ≥ 1.8x the sync-based version, where 2x is the limit, that \
         is, against stage by stage: {}. Against the schedule that waits for A only, hand_off \
         gains only the host round trip per batch, during which the GPU idles, so that ratio \
         depends on the stage length and tends to 1x for long stages.",
        goals.join("; ")
    );
    md
}
