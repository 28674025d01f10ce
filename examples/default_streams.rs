//! Seed 004, "A multi-stream example": eight streams each run one single-block kernel
//! (`kernel<<<1, 64, 0, streams[i]>>>(data[i], n())`), with a dummy launch on the default stream
//! after each one.
//!
//! 1. Dummy launches on the legacy default stream: it synchronizes with the eight (blocking)
//!    streams, so the kernels run one after another.
//! 2. Dummy launches on the per-thread default stream: a regular stream, so all eight kernels
//!    run at once.
//!
//! Each kernel is bracketed by `%globaltimer` stamps on its stream; the example prints the
//! overlap factor of each run (sum of kernel times / wall span: 1 = serial, 8 = all at once),
//! checks every result against the CPU, and with `--svg PATH` writes a timeline.

mod common;

use std::process::ExitCode;

use common::Interval;
use um::kernels::{reference, streams};
use um::{Context, Linear, Managed, StreamOptions};

/// Elements per kernel (smaller under the sanitizer, see `common::workload`).
fn n() -> usize {
    common::workload(1 << 20, 1 << 12)
}
const NUM_STREAMS: usize = 8;
/// The seed's `<<<1, 64>>>`: one block per grid leaves room for all eight to run at once.
const ONE_BLOCK: Linear = match Linear::checked(1, 64) {
    Some(l) => l,
    None => panic!("not a valid launch"),
};

#[derive(Clone, Copy, PartialEq)]
enum Dummy {
    Legacy,
    PerThread,
    /// No dummy launch at all: the reference for the other two.
    None,
}

/// One run: the kernels' intervals, whether every result matched the CPU, and the host time
/// spent enqueuing the launches (ms).
fn run(ctx: &Context, dummy: Dummy) -> um::Result<(Vec<Interval>, bool, f64)> {
    let data: Vec<Managed<[f32]>> = (0..NUM_STREAMS)
        .map(|_| Managed::<[f32]>::zeroed_slice(ctx, n()))
        .collect::<um::Result<_>>()?;
    let stamps: Vec<Managed<[u64]>> = (0..NUM_STREAMS)
        .map(|_| Managed::<[u64]>::zeroed_slice(ctx, 2))
        .collect::<um::Result<_>>()?;
    // Blocking streams (the seed's cudaStreamCreate): they synchronize with the legacy stream.
    let (data, stamps, enqueue_ms) = ctx.with_streams(NUM_STREAMS, StreamOptions::new(), |s| {
        let mut data: Vec<_> = data
            .into_iter()
            .zip(s)
            .map(|(d, s)| d.attach(s))
            .collect::<um::Result<_>>()?;
        let mut stamps: Vec<_> = stamps
            .into_iter()
            .zip(s)
            .map(|(t, s)| t.attach(s))
            .collect::<um::Result<_>>()?;
        let enqueue = std::time::Instant::now();
        for i in 0..NUM_STREAMS {
            streams::stamp(&s[i], &mut stamps[i], 0)?;
            streams::kernel_with(&s[i], ONE_BLOCK, &mut data[i])?;
            streams::stamp(&s[i], &mut stamps[i], 1)?;
            // The seed's `kernel<<<1, 1>>>(0, 0)`: a launch that does no work.
            match dummy {
                Dummy::Legacy => ctx.with_legacy_stream(streams::empty)?,
                Dummy::PerThread => ctx.with_per_thread_stream(streams::empty)?,
                Dummy::None => {}
            }
        }
        let enqueue_ms = enqueue.elapsed().as_secs_f64() * 1e3;
        let mut host_data = Vec::new();
        let mut host_stamps = Vec::new();
        for (i, (d, t)) in data.into_iter().zip(stamps).enumerate() {
            let (d, t) = s[i].sync_all((d, t))?;
            host_data.push(d);
            host_stamps.push(t);
        }
        Ok((host_data, host_stamps, enqueue_ms))
    })?;
    let intervals = stamps
        .iter()
        .enumerate()
        .map(|(lane, t)| Interval {
            lane,
            start_ns: t[0],
            end_ns: t[1],
        })
        .collect();
    let correct = data.iter().all(|d| reference::matches_seed_kernel(d));
    Ok((intervals, correct, enqueue_ms))
}

fn main() -> ExitCode {
    let Some(ctx) = common::open_gpu("default_streams") else {
        return ExitCode::from(2);
    };
    println!("device: {}", ctx.info().name);
    let result = (|| -> um::Result<_> {
        run(&ctx, Dummy::PerThread)?; // warm-up: module load and JIT
        Ok((
            run(&ctx, Dummy::Legacy)?,
            run(&ctx, Dummy::PerThread)?,
            run(&ctx, Dummy::None)?,
        ))
    })();
    let (
        (legacy, legacy_ok, legacy_ms),
        (per_thread, per_thread_ok, per_thread_ms),
        (none, none_ok, none_ms),
    ) = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("default_streams: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (f_legacy, f_pt, f_none) = (
        common::overlap_factor(&legacy),
        common::overlap_factor(&per_thread),
        common::overlap_factor(&none),
    );
    println!(
        "{NUM_STREAMS} streams x kernel<<<1, 64>>> over {} floats, a dummy launch after each",
        n()
    );
    println!(
        "dummy on the legacy default stream:     overlap {f_legacy:.2}x (1 = serialized), enqueue {legacy_ms:.3} ms"
    );
    println!(
        "dummy on the per-thread default stream: overlap {f_pt:.2}x (up to {NUM_STREAMS}), enqueue {per_thread_ms:.3} ms"
    );
    println!(
        "no dummy launch (reference):            overlap {f_none:.2}x, enqueue {none_ms:.3} ms"
    );
    println!(
        "checked: results match the CPU reference (legacy: {legacy_ok}, per-thread: {per_thread_ok}, reference: {none_ok})"
    );
    common::publish_timeline(
        "default_streams",
        "Eight streams, dummy kernel on the default stream after each launch (seed 004)",
        "stream",
        &[
            ("legacy default stream", &legacy),
            ("per-thread default stream", &per_thread),
            ("no dummy launch (reference)", &none),
        ],
    );
    // The serialization and the concurrency are what the seed shows: check them too.
    let shows_seed = common::shows_seed(f_legacy, f_pt);
    if legacy_ok && per_thread_ok && none_ok && shows_seed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
