//! Section 7 of the report, handing memory from one stream to another (issue 11): the host
//! cost of `hand_off` against `sync` + `attach`, against cudarc's automatic per-launch events,
//! and the throughput of a two-stage pipeline built both ways.

use std::fmt::Write as _;
use std::time::Instant;

use um::kernels::testing;
use um::{Context, Managed, StreamOptions};

use crate::Record;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const REPS: usize = 2000;
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
        threads: 1,
        median: median(&medians),
        min: rounds.iter().map(|r| min(r)).fold(f64::INFINITY, f64::min),
        unit,
    }
}

/// Host µs of one A -> B transition, by `hand_off` or by `sync` + `attach`, with A idle or
/// after a `KERNEL_NS` kernel on A (whose wait `sync` pays and `hand_off` does not).
fn transition_once(ctx: &Context, handoff: bool, after_kernel: bool) -> Res<Vec<f64>> {
    let m = Managed::<[f32]>::zeroed_slice(ctx, 1024)?;
    let samples = ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut samples = Vec::with_capacity(REPS);
            let mut on_a = m.attach(a)?;
            for i in 0..REPS {
                if after_kernel {
                    testing::spin_then_add(a, &mut on_a, 1.0, KERNEL_NS)?;
                } else {
                    a.synchronize()?;
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
                b.synchronize()?;
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
fn um_alternating(ctx: &Context) -> Res<Vec<f64>> {
    let m = Managed::<[f32]>::zeroed_slice(ctx, 1)?;
    let samples = ctx.with_streams(2, StreamOptions::new(), |s| {
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
            s[0].synchronize()?;
            s[1].synchronize()?;
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

/// Seconds for `batches` batches through two `stage_ns` stages on streams A and B.
fn pipeline_secs(ctx: &Context, batches: usize, stage_ns: u64, handoff: bool) -> Res<f64> {
    let inputs: Vec<Managed<[f32]>> = (0..batches)
        .map(|k| Managed::from_fn(ctx, 1024, |j| (k + j) as f32))
        .collect::<um::Result<_>>()?;
    let options = StreamOptions::new().non_blocking();
    let (outputs, secs) = ctx.with_stream(options, |a| {
        ctx.with_stream(options, |b| {
            let start = Instant::now();
            let mut done = Vec::with_capacity(batches);
            for x in inputs {
                let mut x = x.attach(a)?;
                testing::spin_then_add(a, &mut x, 1.0, stage_ns)?;
                let mut x = if handoff {
                    x.hand_off(b)?
                } else {
                    x.sync()?.attach(b)?
                };
                testing::spin_then_add(b, &mut x, 2.0, stage_ns)?;
                done.push(x);
            }
            let done = b.sync_all(done)?;
            Ok((done, start.elapsed().as_secs_f64()))
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

pub(crate) fn handoff(ctx: &Context, rounds: usize) -> Res<Vec<Record>> {
    println!(
        "handoff: {REPS} transitions, {LAUNCH_BATCHES} x {PER_BATCH} launches, pipelines; {rounds} rounds"
    );
    let mut rows: Vec<(&str, &str, Vec<Vec<f64>>, &'static str)> = vec![
        ("um", "hand_off, A idle", Vec::new(), "us"),
        ("um", "sync + attach, A idle", Vec::new(), "us"),
        (
            "um",
            "hand_off, after a 20 µs kernel on A",
            Vec::new(),
            "us",
        ),
        (
            "um",
            "sync + attach, after a 20 µs kernel on A",
            Vec::new(),
            "us",
        ),
        (
            "um",
            "launch on the other stream: hand_off + typed launcher",
            Vec::new(),
            "us",
        ),
        (
            "cudarc",
            "launch on the other stream: automatic events",
            Vec::new(),
            "us",
        ),
        (
            "um",
            "pipeline, 10 µs stages: sync + attach time / hand_off time",
            Vec::new(),
            "x",
        ),
        (
            "um",
            "pipeline, 100 µs stages: sync + attach time / hand_off time",
            Vec::new(),
            "x",
        ),
        (
            "um",
            "pipeline, 1 ms stages: sync + attach time / hand_off time",
            Vec::new(),
            "x",
        ),
    ];
    for _ in 0..rounds {
        rows[0].2.push(transition_once(ctx, true, false)?);
        rows[1].2.push(transition_once(ctx, false, false)?);
        rows[2].2.push(transition_once(ctx, true, true)?);
        rows[3].2.push(transition_once(ctx, false, true)?);
        rows[4].2.push(um_alternating(ctx)?);
        rows[5].2.push(cudarc_alternating()?);
        for (row, batches, stage_ns) in [(6, 400, 10_000), (7, 200, 100_000), (8, 40, 1_000_000)] {
            pipeline_secs(ctx, 4, stage_ns, true)?; // warm-up
            let handoff = pipeline_secs(ctx, batches, stage_ns, true)?;
            let sync = pipeline_secs(ctx, batches, stage_ns, false)?;
            rows[row].2.push(vec![sync / handoff]);
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
    let _ = writeln!(
        md,
        "\n## 7. Handing memory from stream A to stream B (issue 11)\n\n\
         Host time of one transition (µs), per launch when each launch is on the other stream \
         than the last, and the throughput ratio of a two-stage pipeline (each stage \
         `spin_then_add` on a 1024-float batch).\n\n\
         | who | what | median | min |\n| --- | --- | ---: | ---: |"
    );
    let mut goals = Vec::new();
    for r in records.iter().filter(|r| r.scenario == "handoff") {
        let unit = if r.unit == "x" { "x" } else { " µs" };
        let _ = writeln!(
            md,
            "| {} | {} | {:.3}{unit} | {:.3}{unit} |",
            r.imp, r.variant, r.median, r.min
        );
        if r.unit == "x" {
            goals.push(format!(
                "{}: {:.2}x ({})",
                r.variant.split(':').next().unwrap_or(""),
                r.median,
                if r.median >= 1.8 { "met" } else { "not met" }
            ));
        }
    }
    let _ = writeln!(
        md,
        "\nGoal, two equal stages: ≥ 1.8x the sync-based version. {}. The sync-based version \
         waits for A only, and B runs while the host enqueues, so it overlaps the stages as \
         well; what it loses is the host round trip per batch, during which the GPU idles. \
         The ratio therefore depends on the stage length (it is not bounded by 2x).",
        goals.join("; ")
    );
    md
}
