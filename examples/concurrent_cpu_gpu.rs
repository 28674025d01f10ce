//! The CUDA Programming Guide's "Managing Data Visibility and Concurrent CPU + GPU Access
//! with Streams": memory
//! attached to stream A is the CPU's again as soon as A's work is done, "regardless of whether
//! other streams are active".
//!
//! A long kernel runs on stream B over B's memory. A short kernel runs on stream A over A's
//! memory; `sync` waits for A alone, and the CPU then works on A's memory while B's kernel is
//! still running. The example shows the overlap with `cuStreamQuery(B)` before and after the
//! CPU work, and with the durations: CPU work and B's kernel together take about as long as the
//! longer of the two, not their sum.
//!
//! B's work must outlast the CPU's on every machine, whatever the CPU's speed (a
//! 33 ms kernel against a 34-38 ms CPU pass failed on some machines). So the example first
//! times one CPU pass, then has B spin on the GPU's clock (`%globaltimer`, one block, so A's
//! kernel still finds room) for four times that plus 100 ms before its kernel (the streams post's, `kernels-ptx/streams.cu`): the check
//! fails only if the CPU pass slows down more than fourfold between the two measurements.

mod common;

use std::process::ExitCode;
use std::time::Instant;

use um::kernels::streams;
use um::{Context, Linear, Managed, StreamOptions};
use um_test_kernels::{reference, testing};

/// Elements of A's and B's memory (smaller under the sanitizer, see `common::workload`).
fn small() -> usize {
    common::workload(1 << 20, 1 << 12)
}
fn large() -> usize {
    common::workload(1 << 22, 1 << 14)
}

fn main() -> ExitCode {
    let Some(ctx) = common::open_gpu("concurrent_cpu_gpu") else {
        return ExitCode::from(2);
    };
    println!(
        "device: {} (concurrentManagedAccess={})",
        ctx.info().name,
        ctx.info().concurrent_managed_access
    );
    match run(&ctx) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("concurrent_cpu_gpu: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The host's share: 200 passes of `v = 0.5 * v + 1` (a few milliseconds of CPU time).
fn host_process(data: &mut [f32]) {
    for _ in 0..200 {
        data.iter_mut().for_each(|v| *v = 0.5 * *v + 1.0);
    }
}

/// How long B keeps the GPU busy before its kernel: four times one CPU pass, timed now on
/// the data the CPU will process, plus 100 ms.
fn b_spin_ns(cpu_pass_ms: f64) -> u64 {
    ((4.0 * cpu_pass_ms + 100.0) * 1e6) as u64
}

fn run(ctx: &Context) -> um::Result<bool> {
    let a_data = Managed::from_fn(ctx, small(), |i| i as f32)?;
    let b_data = Managed::<[f32]>::zeroed_slice(ctx, large())?;
    let b_spin = Managed::<[f32]>::zeroed_slice(ctx, 32)?;
    let b_time = Managed::<[u64]>::zeroed_slice(ctx, 2)?;
    // Warm-up: load the modules before timing anything.
    ctx.kernel(streams::PTX, "kernel")?;
    ctx.kernel(testing::PTX, "add_scalar")?;
    ctx.kernel(testing::PTX, "spin_then_add")?;
    // One CPU pass on a copy of A's data: how long B must stay busy on this machine.
    let mut calibration: Vec<f32> = (0..small()).map(|i| i as f32 + 1.0).collect();
    let calibrated = Instant::now();
    host_process(&mut calibration);
    let cpu_pass_ms = calibrated.elapsed().as_secs_f64() * 1e3;
    let spin_ns = b_spin_ns(cpu_pass_ms);
    println!(
        "one CPU pass takes {cpu_pass_ms:.2} ms here: stream B spins {:.0} ms before its kernel",
        spin_ns as f64 / 1e6
    );

    ctx.with_stream(StreamOptions::new().non_blocking(), |a| {
        ctx.with_stream(StreamOptions::new().non_blocking(), |b| {
            let (mut b_data, mut b_spin, mut b_time) =
                (b_data.attach(b)?, b_spin.attach(b)?, b_time.attach(b)?);
            let t0 = Instant::now();
            // Stream B: one block spinning on the GPU clock, then one block over 4M elements of
            // pow/sqrt (tens of milliseconds).
            streams::stamp(b, &mut b_time, 0)?;
            testing::spin_then_add_with(b, Linear::new(1, 32)?, &mut b_spin, 1.0, spin_ns)?;
            streams::kernel_with(b, Linear::new(1, 64)?, &mut b_data)?;
            streams::stamp(b, &mut b_time, 1)?;

            // Stream A: a short kernel, then A's memory goes back to the CPU.
            let mut a_dev = a_data.attach(a)?;
            testing::add_scalar(a, &mut a_dev, 1.0)?;
            let mut a_host = a_dev.sync()?; // waits for A only
            let busy_before = !b.is_idle()?;
            let cpu_start = Instant::now();
            // The CPU sees A's kernel result, then processes A's memory in place.
            let a_kernel_ok = a_host.iter().enumerate().all(|(i, v)| *v == i as f32 + 1.0);
            host_process(&mut a_host);
            let cpu_ms = cpu_start.elapsed().as_secs_f64() * 1e3;
            let busy_after = !b.is_idle()?;

            let (b_data, b_spin, b_time) = b.sync_all((b_data, b_spin, b_time))?;
            let total_ms = t0.elapsed().as_secs_f64() * 1e3;
            let kernel_ms = (b_time[1] - b_time[0]) as f64 / 1e6;

            let mut want: Vec<f32> = (0..small()).map(|i| i as f32 + 1.0).collect();
            host_process(&mut want);
            let a_ok = a_kernel_ok && *a_host == *want;
            let b_ok = reference::matches_streams_kernel(&b_data) && b_spin.iter().all(|v| *v == 1.0);
            println!("stream B's work (GPU timer): {kernel_ms:.2} ms");
            println!("CPU work on stream A's memory: {cpu_ms:.2} ms");
            println!("stream B busy when the CPU work started: {busy_before}, when it ended: {busy_after}");
            println!(
                "wall time, launch to B done: {total_ms:.2} ms (serial would be about {:.2} ms)",
                kernel_ms + cpu_ms
            );
            let overlapped = busy_before && busy_after;
            println!(
                "checked: A's data usable on the CPU while B ran: {overlapped}; B's results match the CPU: {b_ok}; A's kernel and host results match the CPU: {a_ok}"
            );
            Ok((overlapped || !common::timing_counts()) && a_ok && b_ok)
        })
    })
}
