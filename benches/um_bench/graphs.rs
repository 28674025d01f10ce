//! Section 9 of the report, CUDA graphs: the two-stage pipeline of section 7 with
//! 10 µs stages, eager (`hand_off`) and as one graph replayed; and a sequence of 20 small kernels,
//! launched one by one and replayed as a graph; each against the C++ program
//! `bench/graph_baseline.cpp`, which does the same work with the driver API.
//!
//! Every measurement runs in a fresh process (`um_bench --child graphs`, and the C++ program),
//! which has attached no memory: a process's first `cuStreamAttachMemAsync` slows every later
//! launch of it (section 7), so the buffers are coherent (the pipeline) and mirrored (the 20
//! kernels), as the C++ program's are device memory.

use std::fmt::Write as _;
use std::time::Instant;

use um::{Context, Linear, Managed, StreamOptions};
use um_test_kernels::testing;

use crate::Record;
use crate::cpp::Baseline;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Samples of the 20-kernel sequence.
const REPS: usize = 2000;
/// Kernels in the sequence.
const KERNELS: usize = 20;
/// Batches of the pipeline, stage length, and replays of its graph per sample.
const BATCHES: usize = 400;
const STAGE_NS: u64 = 10_000;
const REPLAYS: usize = 5;
/// Floats per buffer (the pipeline's batch; the sequence's buffer).
const LEN: usize = 1024;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Host µs of 20 typed launches, and of one replay of the same 20 launches as a graph.
fn twenty(ctx: &Context) -> Res<(Vec<f64>, Vec<f64>)> {
    let x = Managed::from_fn_mirrored(ctx, LEN, |_| 0.0f32)?;
    let y = Managed::from_fn_mirrored(ctx, LEN, |_| 0.0f32)?;
    let out = ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        let y = y.attach(s)?;
        let config = Linear::for_len(s, LEN);
        let mut eager = Vec::with_capacity(REPS);
        for i in 0..REPS + 10 {
            let t0 = Instant::now();
            for _ in 0..KERNELS {
                testing::add_scalar_with(s, config, &mut x, 1.0)?;
            }
            let dt = t0.elapsed().as_secs_f64() * 1e6;
            s.wait_idle()?;
            if i >= 10 {
                eager.push(dt);
            }
        }
        let (graph, ()) = s.capture((y,), |cap, (mut y,)| {
            for _ in 0..KERNELS {
                testing::add_scalar_with(cap, config, &mut y, 1.0)?;
            }
            Ok(((y,), ()))
        })?;
        graph.upload(s)?;
        let mut replay = Vec::with_capacity(REPS);
        for i in 0..REPS + 10 {
            let t0 = Instant::now();
            graph.launch(s)?;
            let dt = t0.elapsed().as_secs_f64() * 1e6;
            s.wait_idle()?;
            if i >= 10 {
                replay.push(dt);
            }
        }
        let (y,) = graph.sync()?;
        let x = x.sync()?;
        let want = (KERNELS * (REPS + 10)) as f32;
        let ok = x.iter().chain(y.iter()).all(|v| *v == want);
        Ok((eager, replay, ok))
    })?;
    match out {
        (eager, replay, true) => Ok((eager, replay)),
        _ => Err("20 kernels: a result came back wrong".into()),
    }
}

/// µs per batch of the two-stage pipeline, eagerly (`hand_off` per batch, one pass) and as a
/// graph of all batches replayed `REPLAYS` times; each checked.
fn pipeline(ctx: &Context) -> Res<(f64, f64)> {
    let make = |ctx: &Context| -> um::Result<Vec<_>> {
        (0..BATCHES)
            .map(|k| Managed::from_fn_coherent(ctx, LEN, |j| (k + j) as f32))
            .collect()
    };
    let check = |out: &[Managed<[f32], um::HostOwned, um::Coherent>], add: f32| {
        out.iter().enumerate().all(|(k, x)| {
            x.iter()
                .enumerate()
                .all(|(j, v)| *v == (k + j) as f32 + add)
        })
    };
    let options = StreamOptions::new().non_blocking();
    // Eager, as section 7's hand_off row.
    let inputs = make(ctx)?;
    let (out, eager) = ctx.with_stream(options, |a| {
        ctx.with_stream(options, |b| {
            let start = Instant::now();
            let mut done = Vec::with_capacity(BATCHES);
            for x in inputs {
                let mut x = x.attach(a)?;
                testing::spin_then_add(a, &mut x, 1.0, STAGE_NS)?;
                let mut x = x.hand_off(b)?;
                testing::spin_then_add(b, &mut x, 2.0, STAGE_NS)?;
                done.push(x);
            }
            let out = b.sync_all(done)?;
            Ok((out, start.elapsed().as_secs_f64() * 1e6 / BATCHES as f64))
        })
    })?;
    if !check(&out, 3.0) {
        return Err("pipeline (eager): a batch came back wrong".into());
    }
    drop(out);
    // The graph: all batches through both stages, one replay.
    let inputs = make(ctx)?;
    let (out, graph_us) = ctx.with_stream(options, |s| {
        let on_s: Vec<_> = inputs
            .into_iter()
            .map(|x| x.attach(s))
            .collect::<um::Result<_>>()?;
        let (graph, ()) = s.capture_streams(2, on_s, |caps, batches| {
            let (a, b) = (&caps[0], &caps[1]);
            let mut done = Vec::with_capacity(batches.len());
            for mut x in batches {
                testing::spin_then_add(a, &mut x, 1.0, STAGE_NS)?;
                let mut x = x.hand_off(b)?;
                testing::spin_then_add(b, &mut x, 2.0, STAGE_NS)?;
                done.push(x);
            }
            Ok((done, ()))
        })?;
        graph.launch(s)?; // warm-up
        s.wait_idle()?;
        let start = Instant::now();
        for _ in 0..REPLAYS {
            graph.launch(s)?;
        }
        s.wait_idle()?;
        let us = start.elapsed().as_secs_f64() * 1e6 / (BATCHES * REPLAYS) as f64;
        Ok((graph.sync()?, us))
    })?;
    if !check(&out, 3.0 * (REPLAYS + 1) as f32) {
        return Err("pipeline (graph): a batch came back wrong".into());
    }
    Ok((eager, graph_us))
}

/// `um_bench --child graphs`: this process's measurements, as one JSON line with the keys the
/// C++ program prints.
pub(crate) fn child(ctx: &Context) -> Res<String> {
    let (eager20, replay20) = twenty(ctx)?;
    let (pipe_eager, pipe_graph) = pipeline(ctx)?;
    Ok(format!(
        "{{\"launch20_median\":{:.4},\"launch20_min\":{:.4},\"replay20_median\":{:.4},\"replay20_min\":{:.4},\"pipeline_eager_us\":{:.4},\"pipeline_graph_us\":{:.4}}}",
        median(&eager20),
        min(&eager20),
        median(&replay20),
        min(&replay20),
        pipe_eager,
        pipe_graph
    ))
}

/// One row's rounds: who, which row, and each round's (median, min).
type Rounds = (&'static str, &'static str, Vec<(f64, f64)>);

/// The rows, in order: (key, what, unit).
const ROWS: [(&str, &str, &str); 4] = [
    ("launch20", "20 kernels launched one by one, host µs", "us"),
    (
        "replay20",
        "the same 20 kernels as one graph replay, host µs",
        "us",
    ),
    (
        "pipeline_eager_us",
        "pipeline, 10 µs stages, eager (hand_off / events), µs per batch",
        "us",
    ),
    (
        "pipeline_graph_us",
        "pipeline, 10 µs stages, one graph replayed, µs per batch",
        "us",
    ),
];

pub(crate) fn graphs(cpp: Option<&Baseline>, rounds: usize) -> Res<Vec<Record>> {
    println!(
        "graphs: {REPS} x {KERNELS} kernels, a {BATCHES}-batch pipeline x {REPLAYS} replays; {rounds} rounds, each in fresh processes"
    );
    // (imp, key) -> per-round (median, min)
    let mut got: Vec<Rounds> = Vec::new();
    let mut push = |imp: &'static str, key: &'static str, median: f64, min: f64| match got
        .iter_mut()
        .find(|(i, k, _)| *i == imp && *k == key)
    {
        Some((_, _, v)) => v.push((median, min)),
        None => got.push((imp, key, vec![(median, min)])),
    };
    for _ in 0..rounds {
        let line = crate::runs::child_output(&["graphs"])?;
        let mut lines = vec![("um", line)];
        if let Some(cpp) = cpp {
            let out = cpp.run("graphs", &[])?;
            lines.push(("cpp", out.join("\n")));
        }
        for (imp, line) in &lines {
            let num = |k: &str| crate::cpp::number(line, k);
            for (key, _, _) in ROWS {
                let (m, lo) = if key.ends_with("_us") {
                    let v = num(key)?;
                    (v, v)
                } else {
                    (num(&format!("{key}_median"))?, num(&format!("{key}_min"))?)
                };
                push(imp, key, m, lo);
            }
        }
    }
    Ok(got
        .into_iter()
        .map(|(imp, key, v)| {
            let (_, what, unit) = ROWS
                .iter()
                .find(|(k, _, _)| *k == key)
                .copied()
                .unwrap_or((key, key, "us"));
            let medians: Vec<f64> = v.iter().map(|(m, _)| *m).collect();
            Record {
                scenario: "graphs",
                imp: imp.to_owned(),
                variant: what.to_owned(),
                mib: 0,
                bytes: 0,
                threads: 1,
                median: median(&medians),
                min: v.iter().map(|(_, lo)| *lo).fold(f64::INFINITY, f64::min),
                unit,
                paired: None,
            }
        })
        .collect())
}

/// Section 9 of performance.md.
pub(crate) fn markdown(records: &[Record]) -> String {
    let mut md = String::new();
    let rows: Vec<&Record> = records.iter().filter(|r| r.scenario == "graphs").collect();
    if rows.is_empty() {
        return md;
    }
    let _ = writeln!(
        md,
        "\n## 9. CUDA graphs\n\n\
         Host time of {KERNELS} small kernels (`add_scalar` on {LEN} floats) launched one by one, \
         and of one replay of the same {KERNELS} launches captured as a graph (median of {REPS} \
         samples per round, then of rounds); and the two-stage pipeline of section 7 with 10 µs \
         stages over {BATCHES} batches, eager (`hand_off` per batch) and as one graph of all \
         batches on two capture streams replayed {REPLAYS} times (µs per batch, wall time). \
         Every figure comes from a fresh process that attached no memory (coherent batches, \
         mirrored buffers; the C++ program `bench/graph_baseline.cpp` uses device memory and \
         the same PTX).\n\n\
         | who | what | median | min |\n| --- | --- | ---: | ---: |"
    );
    for r in &rows {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} µs | {:.3} µs |",
            r.imp, r.variant, r.median, r.min
        );
    }
    let _ = writeln!(
        md,
        "\nThe goals of this section are in the table of goals below."
    );
    md
}

/// The median of row `key` for `imp`.
fn get(records: &[Record], imp: &str, key: &str) -> Option<f64> {
    let what = ROWS.iter().find(|(k, _, _)| *k == key).map(|r| r.1)?;
    records
        .iter()
        .find(|r| r.scenario == "graphs" && r.imp == imp && r.variant == what)
        .map(|r| r.median)
}

/// Section 9's goals, for the report's table of goals (`report.rs`): (goal, measured, met).
pub(crate) fn goals(records: &[Record]) -> Vec<(String, String, bool)> {
    let mut goals = Vec::new();
    if let Some(us) = get(records, "um", "pipeline_graph_us") {
        let rate = 1e6 / us;
        goals.push((
            "two-stage pipeline, 10 µs stages, as a graph: ≥ 90 000 batches/s".to_owned(),
            format!(
                "{rate:.0} batches/s{}",
                get(records, "um", "pipeline_eager_us")
                    .map(|e| format!(" (eager {:.0})", 1e6 / e))
                    .unwrap_or_default()
            ),
            rate >= 90_000.0,
        ));
    }
    if let (Some(l), Some(r)) = (
        get(records, "um", "launch20"),
        get(records, "um", "replay20"),
    ) {
        goals.push((
            format!("one replay of {KERNELS} kernels: ≤ 1/5 of their launches one by one"),
            format!("{r:.2} µs / {l:.2} µs = {:.3}", r / l),
            r * 5.0 <= l,
        ));
    }
    if let (Some(u), Some(c)) = (
        get(records, "um", "replay20"),
        get(records, "cpp", "replay20"),
    ) {
        goals.push((
            "um's replay host time: within +0.2 µs of C++'s cuGraphLaunch".to_owned(),
            format!("{u:.3} µs vs {c:.3} µs: {:+.3} µs", u - c),
            u - c <= 0.2,
        ));
    }
    goals
}
