//! The "multi-threading example" of NVIDIA's "GPU Pro Tip: CUDA 7 Streams Simplify Concurrency": eight host threads each launch the kernel on the
//! default stream and synchronize it.
//!
//! 1. On the legacy default stream (the post's program compiled without options): every thread's kernel
//!    lands on the one NULL stream, so they run one after another.
//! 2. On the per-thread default stream (`--default-stream per-thread`, here the handle
//!    `CU_STREAM_PER_THREAD`): each thread has its own stream, so the kernels run at once.
//!
//! Prints the overlap factor of each run, checks every thread's result against the CPU, and
//! with `--svg PATH` writes a timeline.

mod common;

use std::process::ExitCode;
use std::sync::{Barrier, Mutex};
use std::thread;

use common::Interval;
use um::kernels::streams;
use um::{Context, Linear, Managed, Stream, StreamKind, StreamOwned};
use um_test_kernels::reference;

/// Elements per kernel (smaller under the sanitizer, see `common::workload`).
fn n() -> usize {
    common::workload(1 << 20, 1 << 12)
}
/// Host threads: 8, or `UM_THREADS` (used to study the sanitizers, docs/reliability.md).
fn num_threads() -> usize {
    std::env::var("UM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}
const ONE_BLOCK: Linear = match Linear::checked(1, 64) {
    Some(l) => l,
    None => panic!("not a valid launch"),
};

#[derive(Clone, Copy)]
enum Default {
    Legacy,
    PerThread,
}

/// Held while a thread enqueues its stamp, kernel, stamp, so that on the shared legacy stream
/// another thread's launches cannot fall between them (its stamps would then bracket two
/// kernels). It orders host calls only; what runs concurrently on the GPU is up to the streams.
static ENQUEUE: Mutex<()> = Mutex::new(());

/// The post's `launch_kernel` body, on any stream: stamp, kernel, stamp.
fn launch<'s, K: StreamKind>(
    s: &Stream<'s, K>,
    x: &mut Managed<[f32], StreamOwned<'s, K>>,
    t: &mut Managed<[u64], StreamOwned<'s, K>>,
) -> um::Result<()> {
    let _enqueue = ENQUEUE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    streams::stamp(s, t, 0)?;
    streams::kernel_with(s, ONE_BLOCK, x)?;
    streams::stamp(s, t, 1)
}

/// One thread's work; returns its kernel's (start, end) and whether its result is right.
fn thread_task(ctx: &Context, which: Default, start: &Barrier) -> um::Result<((u64, u64), bool)> {
    let x = Managed::<[f32]>::zeroed_slice(ctx, n())?;
    let t = Managed::<[u64]>::zeroed_slice(ctx, 2)?;
    // The first launch on a thread's default stream sets that stream up: do it before timing.
    ctx.with_per_thread_stream(|s| {
        streams::empty(s)?;
        s.wait_idle()
    })?;
    start.wait();
    let (x, t) = match which {
        Default::Legacy => ctx.with_legacy_stream(|s| {
            let (mut x, mut t) = (x.attach_global(s)?, t.attach_global(s)?);
            launch(s, &mut x, &mut t)?;
            s.sync_all((x, t))
        })?,
        Default::PerThread => ctx.with_per_thread_stream(|s| {
            let (mut x, mut t) = (x.attach(s)?, t.attach(s)?);
            launch(s, &mut x, &mut t)?;
            s.sync_all((x, t))
        })?,
    };
    let correct = reference::matches_streams_kernel(&x);
    Ok(((t[0], t[1]), correct))
}

fn run(ctx: &Context, which: Default) -> um::Result<(Vec<Interval>, bool)> {
    let start = Barrier::new(num_threads());
    let results: Vec<um::Result<((u64, u64), bool)>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..num_threads())
            .map(|_| scope.spawn(|| thread_task(ctx, which, &start)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Ok(((0, 0), false))))
            .collect()
    });
    let mut intervals = Vec::new();
    let mut all_correct = true;
    for (lane, r) in results.into_iter().enumerate() {
        let ((start_ns, end_ns), correct) = r?;
        intervals.push(Interval {
            lane,
            start_ns,
            end_ns,
        });
        all_correct &= correct;
    }
    Ok((intervals, all_correct))
}

fn main() -> ExitCode {
    let Some(ctx) = common::open_gpu("per_thread_streams") else {
        return ExitCode::from(2);
    };
    println!("device: {}", ctx.info().name);
    if std::env::var_os("UM_ONLY_PER_THREAD").is_some() {
        // For racecheck, which cannot track launches on the legacy stream from several host
        // threads, with or without um (docs/reliability.md): the per-thread half alone.
        return match run(&ctx, Default::PerThread) {
            Ok((_, true)) => {
                println!("per-thread default stream only: every thread's result is correct");
                ExitCode::SUCCESS
            }
            Ok((_, false)) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("per_thread_streams: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let result = (|| -> um::Result<_> {
        run(&ctx, Default::PerThread)?; // warm-up: module load and JIT
        Ok((run(&ctx, Default::Legacy)?, run(&ctx, Default::PerThread)?))
    })();
    let ((legacy, legacy_ok), (per_thread, per_thread_ok)) = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("per_thread_streams: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (f_legacy, f_pt) = (
        common::overlap_factor(&legacy),
        common::overlap_factor(&per_thread),
    );
    println!(
        "{} host threads, each kernel<<<1, 64>>> over {} floats on the default stream, then sync",
        num_threads(),
        n()
    );
    println!("legacy default stream:     overlap {f_legacy:.2}x (1 = serialized)");
    println!(
        "per-thread default stream: overlap {f_pt:.2}x (up to {})",
        num_threads()
    );
    println!(
        "checked: every thread's result matches the CPU reference (legacy: {legacy_ok}, per-thread: {per_thread_ok})"
    );
    common::publish_timeline(
        "per_thread_streams",
        "Eight host threads, one kernel each on the default stream (CUDA 7 streams post)",
        "thread",
        &[
            ("legacy default stream", &legacy),
            ("per-thread default stream", &per_thread),
        ],
    );
    let legacy_serializes_and_per_thread_overlaps =
        common::legacy_serializes_and_per_thread_overlaps(f_legacy, f_pt);
    if legacy_ok && per_thread_ok && legacy_serializes_and_per_thread_overlaps {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
