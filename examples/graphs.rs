//! CUDA graphs: two programs of the other examples, each built eagerly and as a graph that is
//! captured once and replayed many times, and each checked against a CPU reference.
//!
//! * **The two-stage pipeline** (`examples/pipeline.rs`): batches flow from stage A (stream A)
//!   to stage B (stream B). Eagerly, each batch is handed from A to B with `hand_off` (an event
//!   on A, a wait on B), 4 launches and 1 handoff per batch. As a graph, the same loop is
//!   captured once on two capture streams (`capture_streams`, where `hand_off` is a fork of the
//!   graph), and each replay runs every batch through both stages with one `cuGraphLaunch`.
//! * **The `run_task` loop** (`examples/multithreaded_run_task.rs`): transform on the GPU, a pass
//!   on the host, convert on the GPU. The graph holds `[convert; transform]`, the stretch of GPU
//!   work between two host passes; `Graph::host` waits for it, gives the host its pass, and
//!   hands the buffers back, without a new capture. Unified and mirrored memory.
//!
//! `cargo run --release --example graphs`; on a machine without a GPU it says so and exits
//! with status 2.

mod common;

use std::process::ExitCode;
use std::time::Instant;

use um::kernels::run_task;
use um::{Context, HostOwned, HostVisible, Linear, Managed, StreamOptions};
use um_test_kernels::testing;

/// Floats per batch, as in `examples/pipeline.rs`.
const BATCH: usize = 1024;

/// `batches` coherent batches, batch `k` element `j` = `k + j`.
fn batches(
    ctx: &Context,
    batches: usize,
) -> um::Result<Vec<Managed<[f32], HostOwned, um::Coherent>>> {
    (0..batches)
        .map(|k| Managed::from_fn_coherent(ctx, BATCH, |j| (k + j) as f32))
        .collect()
}

/// Whether every batch came back as input + `add`.
fn pipeline_correct(out: &[Managed<[f32], HostOwned, um::Coherent>], add: f32) -> bool {
    out.iter().enumerate().all(|(k, x)| {
        x.iter()
            .enumerate()
            .all(|(j, v)| *v == (k + j) as f32 + add)
    })
}

/// The eager pipeline, `rounds` times over the same batches: seconds, and whether it was right.
fn pipeline_eager(
    ctx: &Context,
    n: usize,
    stage_ns: u64,
    rounds: usize,
) -> um::Result<(f64, bool)> {
    let inputs = batches(ctx, n)?;
    let options = StreamOptions::new().non_blocking();
    let (out, secs) = ctx.with_stream(options, |a| {
        ctx.with_stream(options, |b| {
            let mut on_a: Vec<_> = inputs
                .into_iter()
                .map(|x| x.attach(a))
                .collect::<um::Result<_>>()?;
            let start = Instant::now();
            for _ in 0..rounds {
                let mut on_b = Vec::with_capacity(n);
                for mut x in on_a {
                    testing::spin_then_add(a, &mut x, 1.0, stage_ns)?;
                    let mut x = x.hand_off(b)?;
                    testing::spin_then_add(b, &mut x, 2.0, stage_ns)?;
                    on_b.push(x);
                }
                on_a = on_b
                    .into_iter()
                    .map(|x| x.hand_off(a))
                    .collect::<um::Result<_>>()?;
            }
            let out = a.sync_all(on_a)?;
            Ok((out, start.elapsed().as_secs_f64()))
        })
    })?;
    Ok((secs, pipeline_correct(&out, 3.0 * rounds as f32)))
}

/// The same pipeline captured once and replayed `rounds` times.
fn pipeline_graph(
    ctx: &Context,
    n: usize,
    stage_ns: u64,
    rounds: usize,
) -> um::Result<(f64, bool)> {
    let inputs = batches(ctx, n)?;
    let (out, secs) = ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
        let on_s: Vec<_> = inputs
            .into_iter()
            .map(|x| x.attach(s))
            .collect::<um::Result<_>>()?;
        let (graph, ()) = s.capture_streams(2, on_s, |caps, batches| {
            let (a, b) = (&caps[0], &caps[1]);
            let mut done = Vec::with_capacity(batches.len());
            for mut x in batches {
                testing::spin_then_add(a, &mut x, 1.0, stage_ns)?;
                let mut x = x.hand_off(b)?; // a fork: B's stage after A's, on the GPU
                testing::spin_then_add(b, &mut x, 2.0, stage_ns)?;
                done.push(x);
            }
            Ok((done, ()))
        })?;
        graph.upload(s)?;
        let start = Instant::now();
        for _ in 0..rounds {
            graph.launch(s)?;
        }
        let out = graph.sync()?;
        Ok((out, start.elapsed().as_secs_f64()))
    })?;
    Ok((secs, pipeline_correct(&out, 3.0 * rounds as f32)))
}

/// The host's pass of the `run_task` loop: `data[i] -= 1`.
fn host_process(data: &mut [f32]) {
    data.iter_mut().for_each(|v| *v -= 1.0);
}

/// What the `run_task` loop must produce after `iters` iterations.
fn run_task_reference(input: &[f32], iters: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut data, mut out) = (vec![0.0f32; input.len()], vec![0.0f32; input.len()]);
    for _ in 0..iters {
        data.iter_mut().zip(input).for_each(|(d, x)| *d += 2.0 * x);
        host_process(&mut data);
        out.iter_mut().zip(&data).for_each(|(o, d)| *o = 0.5 * d);
    }
    (data, out)
}

/// The `run_task` loop's launch geometry (the Programming Guide's `<<<100, 256>>>`).
const RUN_TASK_CONFIG: Linear = match Linear::checked(100, 256) {
    Some(l) => l,
    None => panic!("not a valid launch"),
};

type Alloc<M> = fn(&Context, &[f32]) -> um::Result<Managed<[f32], HostOwned, M>>;

/// The `run_task` loop eagerly: transform, sync, host pass, attach, convert, `iters` times.
fn run_task_eager<M: HostVisible>(
    ctx: &Context,
    alloc: Alloc<M>,
    len: usize,
    iters: usize,
) -> um::Result<(f64, bool)> {
    let input: Vec<f32> = (0..len).map(|i| (i % 1000) as f32 * 0.25).collect();
    let (inp, data, out) = (
        alloc(ctx, &input)?,
        alloc(ctx, &vec![0.0; len])?,
        alloc(ctx, &vec![0.0; len])?,
    );
    let start = Instant::now();
    let (data, out) = ctx.with_stream(StreamOptions::new(), |s| {
        let (inp, mut out, mut data) = (inp.attach(s)?, out.attach(s)?, data.attach(s)?);
        for _ in 0..iters {
            run_task::transform_with(s, RUN_TASK_CONFIG, &inp, &mut data)?;
            let mut host = data.sync()?;
            host_process(&mut host);
            data = host.attach(s)?;
            run_task::convert_with(s, RUN_TASK_CONFIG, &mut out, &data)?;
        }
        let (data, out, _inp) = s.sync_all((data, out, inp))?;
        Ok((data, out))
    })?;
    let secs = start.elapsed().as_secs_f64();
    let (want_data, want_out) = run_task_reference(&input, iters);
    Ok((secs, *data == *want_data && *out == *want_out))
}

/// The `run_task` loop with a graph of `[convert; transform]`: the first transform eagerly, then per
/// iteration the host pass (`Graph::host`) and a replay, and the last convert eagerly.
fn run_task_graph<M: HostVisible>(
    ctx: &Context,
    alloc: Alloc<M>,
    len: usize,
    iters: usize,
) -> um::Result<(f64, bool)> {
    let input: Vec<f32> = (0..len).map(|i| (i % 1000) as f32 * 0.25).collect();
    let (inp, data, out) = (
        alloc(ctx, &input)?,
        alloc(ctx, &vec![0.0; len])?,
        alloc(ctx, &vec![0.0; len])?,
    );
    let start = Instant::now();
    let (data, out) = ctx.with_stream(StreamOptions::new(), |s| {
        let (inp, out, mut data) = (inp.attach(s)?, out.attach(s)?, data.attach(s)?);
        run_task::transform_with(s, RUN_TASK_CONFIG, &inp, &mut data)?; // iteration 0's transform
        let (mut graph, ()) = s.capture((inp, data, out), |cap, (inp, mut data, mut out)| {
            run_task::convert_with(cap, RUN_TASK_CONFIG, &mut out, &data)?; // iteration i's convert
            run_task::transform_with(cap, RUN_TASK_CONFIG, &inp, &mut data)?; // iteration i+1's transform
            Ok(((inp, data, out), ()))
        })?;
        for i in 0..iters {
            graph.host(s, |(_, data, _)| host_process(data))?; // waits for the transform
            if i + 1 < iters {
                graph.launch(s)?;
            }
        }
        let (inp, data, mut out) = graph.into_buffers()?;
        run_task::convert_with(s, RUN_TASK_CONFIG, &mut out, &data)?; // the last convert
        let (data, out, _inp) = s.sync_all((data, out, inp))?;
        Ok((data, out))
    })?;
    let secs = start.elapsed().as_secs_f64();
    let (want_data, want_out) = run_task_reference(&input, iters);
    Ok((secs, *data == *want_data && *out == *want_out))
}

fn run(ctx: &Context) -> um::Result<bool> {
    let mut all_ok = true;
    // The pipeline: 10 µs stages, as in section 7 of docs/performance.md.
    let (n, rounds, stage_ns) = (common::workload(400, 8), common::workload(5, 1), 10_000);
    pipeline_eager(ctx, 8, stage_ns, 1)?; // warm-up: modules, first touches
    pipeline_graph(ctx, 8, stage_ns, 1)?;
    let (eager, ok_e) = pipeline_eager(ctx, n, stage_ns, rounds)?;
    let (graph, ok_g) = pipeline_graph(ctx, n, stage_ns, rounds)?;
    let rate = |secs: f64| (n * rounds) as f64 / secs;
    println!(
        "pipeline, two stages of {} us, {n} batches x {rounds} rounds, coherent memory: eager (hand_off) {:.0} batches/s{}; graph (one replay per round) {:.0} batches/s{}: {:.2}x",
        stage_ns / 1000,
        rate(eager),
        if ok_e { "" } else { " WRONG" },
        rate(graph),
        if ok_g { "" } else { " WRONG" },
        eager / graph
    );
    all_ok &= ok_e && ok_g;
    // The `run_task` loop, one thread, unified and mirrored memory.
    let (len, iters) = (common::workload(1 << 20, 1 << 12), 10);
    let unified: Alloc<um::Unified> = |ctx, v| Managed::from_slice(ctx, v);
    let mirror: Alloc<um::Mirror> = |ctx, v| Managed::from_slice_mirrored(ctx, v);
    for (name, eager, graph) in [
        (
            "unified",
            run_task_eager(ctx, unified, len, iters)?,
            run_task_graph(ctx, unified, len, iters)?,
        ),
        (
            "mirror",
            run_task_eager(ctx, mirror, len, iters)?,
            run_task_graph(ctx, mirror, len, iters)?,
        ),
    ] {
        println!(
            "run_task loop, {len} floats x {iters} iterations, {name}: eager {:.2} ms{}, graph {:.2} ms{}",
            eager.0 * 1e3,
            if eager.1 { "" } else { " WRONG" },
            graph.0 * 1e3,
            if graph.1 { "" } else { " WRONG" },
        );
        all_ok &= eager.1 && graph.1;
    }
    Ok(all_ok)
}

fn main() -> ExitCode {
    let Some(ctx) = common::open_gpu("graphs") else {
        return ExitCode::from(2);
    };
    println!("device: {}", ctx.info().name);
    if !ctx.info().concurrent_managed_access {
        println!(
            "graphs: skipped (coherent and unified memory in graphs need concurrent managed access)"
        );
        return ExitCode::SUCCESS;
    }
    match run(&ctx) {
        Ok(true) => {
            println!("checked: every result matches the CPU reference, eager and graph");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("FAILED: a result differs from the CPU reference");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("graphs: {e}");
            ExitCode::FAILURE
        }
    }
}
