//! Load: 16 host threads x 1000 iterations of the run_task loop, each thread on its own stream,
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests
//! every result checked, no managed memory leaked.
//!
//! `UM_STRESS_ITERS` sets the iterations (the sanitizer mode of the GPU run script uses fewer).
//! A watchdog ends the process if the run hangs (10 minutes): that is a guard against a hang,
//! not a performance check.

use crate::common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::gpu;
use um::kernels::run_task;
use um::{Context, Managed, StreamOptions};

/// Host threads: 16, or `UM_STRESS_THREADS` (used to study the sanitizers, docs/reliability.md).
fn threads() -> usize {
    std::env::var("UM_STRESS_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}
const LEN: usize = 1 << 14;

fn iterations() -> usize {
    std::env::var("UM_STRESS_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn input_value(t: usize, i: usize) -> f32 {
    ((i * 3 + t) % 512) as f32 * 0.5
}

/// One thread's loop; returns whether `data` and `out` match the same steps on the CPU.
fn worker(ctx: &Context, t: usize, iters: usize) -> um::Result<bool> {
    let input = Managed::from_fn(ctx, LEN, |i| input_value(t, i))?;
    let data = Managed::<[f32]>::zeroed_slice(ctx, LEN)?;
    let out = Managed::<[f32]>::zeroed_slice(ctx, LEN)?;
    let (data, out) = ctx.with_stream(StreamOptions::new(), |s| {
        let input = input.attach(s)?;
        let mut out = out.attach(s)?;
        let mut data = data.attach(s)?;
        for _ in 0..iters {
            run_task::transform(s, &input, &mut data)?;
            let mut host = data.sync()?;
            host.iter_mut().for_each(|v| *v = *v * 0.5 - 1.0);
            data = host.attach(s)?;
            run_task::convert(s, &mut out, &data)?;
        }
        let (data, out, _input) = s.sync_all((data, out, input))?;
        Ok((data, out))
    })?;
    let mut want = vec![0.0f32; LEN];
    for _ in 0..iters {
        for (i, w) in want.iter_mut().enumerate() {
            *w = (2.0 * input_value(t, i) + *w) * 0.5 - 1.0;
        }
    }
    let want_out: Vec<f32> = want.iter().map(|w| 0.5 * w).collect();
    Ok(*data == *want && *out == *want_out)
}

#[test]
#[ignore = "needs a CUDA device"]
fn stress_16_threads_each_on_its_own_stream() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let iters = iterations();
    let (done, finished) = mpsc::channel::<()>();
    thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(600)).is_err() {
            eprintln!("stress: no progress for 10 minutes, ending the process");
            std::process::abort();
        }
    });
    // Warm up (modules, streams) so that the memory comparison sees only the stress itself.
    assert!(worker(&ctx, 0, 2).expect("warm-up"), "warm-up result");
    let free_before = ctx.mem_info().expect("mem info").0;
    let start = Instant::now();
    let results: Vec<um::Result<bool>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads())
            .map(|t| {
                let ctx = &ctx;
                scope.spawn(move || worker(ctx, t, iters))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    let wall = start.elapsed();
    let free_after = ctx.mem_info().expect("mem info").0;
    let _ = done.send(());
    let ok = results.iter().filter(|r| matches!(r, Ok(true))).count();
    println!(
        "stress: {} threads x {iters} iterations x {LEN} floats, {ok}/{} results exact, {:.2} s; \
         GPU free memory before {} MiB, after {} MiB",
        threads(),
        threads(),
        wall.as_secs_f64(),
        free_before >> 20,
        free_after >> 20
    );
    for (t, r) in results.iter().enumerate() {
        assert!(matches!(r, Ok(true)), "thread {t}: {r:?}");
    }
    // Every managed allocation was freed: free memory is back where it was (the driver's own
    // bookkeeping may move by a page or two).
    assert!(
        free_after + (4 << 20) >= free_before,
        "leak: {free_before} -> {free_after} bytes free"
    );
}
