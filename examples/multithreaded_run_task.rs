//! One stream per host thread, as the CUDA Programming Guide's "Stream Attach With
//! Multithreaded Host Programs" (`run_task`) shows it: N host threads, each with its own
//! stream and its own managed memory, iterate
//! `transform` kernel -> sync -> host processing -> `convert` kernel,
//! and every thread's result is checked against a CPU reference.
//!
//! `cargo run --release --example multithreaded_run_task -- [--threads N] [--iters N] [--len N]`

mod common;

use std::process::ExitCode;
use std::thread;
use std::time::Instant;

use um::kernels::run_task;
use um::{Context, Linear, Managed, StreamOptions};

struct Args {
    threads: usize,
    iters: usize,
    len: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        threads: 8,
        iters: 10,
        len: common::workload(1 << 20, 1 << 14),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("{name} needs a positive integer"))
        };
        match flag.as_str() {
            "--threads" => args.threads = value("--threads")?,
            "--iters" => args.iters = value("--iters")?,
            "--len" => args.len = value("--len")?,
            "-h" | "--help" => {
                return Err(
                    "usage: multithreaded_run_task [--threads N] [--iters N] [--len N]".into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

/// The host's share of each iteration: `data[i] = data[i] - 1`.
fn host_process(data: &mut [f32]) {
    data.iter_mut().for_each(|v| *v -= 1.0);
}

/// The guide's `run_task` launches `<<<100, 256>>>`; the kernels use grid-stride loops, so any grid covers
/// any length.
const RUN_TASK_CONFIG: Linear = match Linear::checked(100, 256) {
    Some(l) => l,
    None => panic!("not a valid launch"),
};

/// What `run_task` must produce: the same steps on the CPU.
fn reference(input: &[f32], iters: usize) -> (Vec<f32>, Vec<f32>) {
    let mut data = vec![0.0f32; input.len()];
    let mut out = vec![0.0f32; input.len()];
    for _ in 0..iters {
        data.iter_mut().zip(input).for_each(|(d, x)| *d += 2.0 * x);
        host_process(&mut data);
        out.iter_mut().zip(&data).for_each(|(o, d)| *o = 0.5 * d);
    }
    (data, out)
}

/// One thread's task, in its own private stream (the guide's `run_task`).
fn run_task(ctx: &Context, task: usize, iters: usize, len: usize) -> um::Result<bool> {
    let input = Managed::from_fn(ctx, len, |i| ((i + task) % 1000) as f32 * 0.25)?;
    let expected = reference(&input, iters);
    // Allocated attached to the host (cudaMemAttachHost), then attached to our stream.
    let data = Managed::<[f32]>::zeroed_slice(ctx, len)?;
    let out = Managed::<[f32]>::zeroed_slice(ctx, len)?;
    let (data, out) = ctx.with_stream(StreamOptions::new(), |stream| {
        let input = input.attach(stream)?;
        let mut out = out.attach(stream)?;
        let mut data = data.attach(stream)?;
        for _ in 0..iters {
            run_task::transform_with(stream, RUN_TASK_CONFIG, &input, &mut data)?;
            let mut host = data.sync()?; // cudaStreamSynchronize(stream)
            host_process(&mut host); // the CPU uses the managed data
            data = host.attach(stream)?; // same stream: no driver call
            run_task::convert_with(stream, RUN_TASK_CONFIG, &mut out, &data)?;
        }
        let (data, out, _input) = stream.sync_all((data, out, input))?;
        Ok((data, out))
    })?;
    Ok(*data == *expected.0 && *out == *expected.1)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("multithreaded_run_task: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(ctx) = common::open_gpu("multithreaded_run_task") else {
        return ExitCode::from(2);
    };
    let info = ctx.info();
    println!(
        "device: {} (driver CUDA {}.{}, concurrentManagedAccess={})",
        info.name, info.driver_version.0, info.driver_version.1, info.concurrent_managed_access
    );
    println!(
        "run_task: {} threads x {} iterations x {} floats, each thread on its own stream",
        args.threads, args.iters, args.len
    );
    let start = Instant::now();
    let results: Vec<um::Result<bool>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let ctx = &ctx;
                scope.spawn(move || run_task(ctx, t, args.iters, args.len))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Ok(false)))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut failed = 0;
    for (t, r) in results.iter().enumerate() {
        match r {
            Ok(true) => {}
            Ok(false) => {
                failed += 1;
                println!("thread {t}: result differs from the CPU reference");
            }
            Err(e) => {
                failed += 1;
                println!("thread {t}: {e}");
            }
        }
    }
    println!(
        "checked: {}/{} threads match the CPU reference (data and out, exact) in {:.1} ms",
        args.threads - failed,
        args.threads,
        elapsed.as_secs_f64() * 1e3
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
