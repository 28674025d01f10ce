//! The "multi-stream example" of NVIDIA's "GPU Pro Tip: CUDA 7 Streams Simplify Concurrency": eight streams each run one single-block kernel
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
//!
//! Each new stream gets an empty launch, and a wait, before the timed launches: the first
//! launch on a stream sets it up in the driver, and that cost is not the post's point.
//! `--cold-streams` leaves the streams cold. `--enqueue-study` prints, instead, a table of
//! where the enqueue time goes: cold and warm streams, with each kind of dummy, and each
//! launch's host time by its place (`docs/examples.md`).

mod common;

use std::process::ExitCode;

use common::Interval;
use um::kernels::streams;
use um::{Context, Linear, Managed, StreamOptions};
use um_test_kernels::reference;

/// Elements per kernel (smaller under the sanitizer, see `common::workload`).
fn n() -> usize {
    common::workload(1 << 20, 1 << 12)
}
const NUM_STREAMS: usize = 8;
/// The post's `<<<1, 64>>>`: one block per grid leaves room for all eight to run at once.
const ONE_BLOCK: Linear = match Linear::checked(1, 64) {
    Some(l) => l,
    None => panic!("not a valid launch"),
};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Dummy {
    Legacy,
    PerThread,
    /// No dummy launch at all: the reference for the other two.
    None,
}

/// Whether, and when, each new stream gets an empty launch and a wait before the timed
/// launches.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Warm {
    /// No warming: the streams stay cold (`--cold-streams`).
    Cold,
    /// Before the memory is attached: separates the stream's own setup from the first launch
    /// after an attach.
    BeforeAttach,
    /// After the attach, as the launch benchmark does (the default).
    AfterAttach,
}

/// How a run is set up.
#[derive(Clone, Copy, Debug)]
struct Setup {
    dummy: Dummy,
    warm: Warm,
}

/// An empty launch on each stream, and a wait for it.
fn warm(s: &[um::Stream<'_>]) -> um::Result<()> {
    for st in s {
        streams::empty(st)?;
        st.wait_idle()?;
    }
    Ok(())
}

/// Host time of each launch call, in microseconds, by the launch's place in the sequence.
#[derive(Default, Debug)]
struct LaunchTimes {
    /// The first launch on each stream (the opening stamp).
    first_on_stream: Vec<f64>,
    /// The kernel, the second launch on its stream.
    kernel: Vec<f64>,
    /// The closing stamp.
    last_stamp: Vec<f64>,
    /// The dummy launches on a default stream.
    dummy: Vec<f64>,
}

/// One run's kernel intervals, whether every result matched the CPU, the host time spent
/// enqueuing all launches (ms), and each launch's host time.
struct Run {
    intervals: Vec<Interval>,
    correct: bool,
    enqueue_ms: f64,
    launches: LaunchTimes,
}

/// Runs `f` and pushes its host time in microseconds onto `to`.
fn timed(to: &mut Vec<f64>, f: impl FnOnce() -> um::Result<()>) -> um::Result<()> {
    let t = std::time::Instant::now();
    let r = f();
    to.push(t.elapsed().as_secs_f64() * 1e6);
    r
}

fn run(ctx: &Context, setup: Setup) -> um::Result<Run> {
    let data: Vec<Managed<[f32]>> = (0..NUM_STREAMS)
        .map(|_| Managed::<[f32]>::zeroed_slice(ctx, n()))
        .collect::<um::Result<_>>()?;
    let stamps: Vec<Managed<[u64]>> = (0..NUM_STREAMS)
        .map(|_| Managed::<[u64]>::zeroed_slice(ctx, 2))
        .collect::<um::Result<_>>()?;
    // Blocking streams (the post's cudaStreamCreate): they synchronize with the legacy stream.
    let (data, stamps, enqueue_ms, launches) =
        ctx.with_stream_set(NUM_STREAMS, StreamOptions::new(), |s| {
            if setup.warm == Warm::BeforeAttach {
                warm(s)?;
            }
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
            if setup.warm == Warm::AfterAttach {
                warm(s)?;
            }
            let mut l = LaunchTimes::default();
            let enqueue = std::time::Instant::now();
            for i in 0..NUM_STREAMS {
                timed(&mut l.first_on_stream, || {
                    streams::stamp(&s[i], &mut stamps[i], 0)
                })?;
                timed(&mut l.kernel, || {
                    streams::kernel_with(&s[i], ONE_BLOCK, &mut data[i])
                })?;
                timed(&mut l.last_stamp, || {
                    streams::stamp(&s[i], &mut stamps[i], 1)
                })?;
                // The post's `kernel<<<1, 1>>>(0, 0)`: a launch that does no work.
                match setup.dummy {
                    Dummy::Legacy => {
                        timed(&mut l.dummy, || ctx.with_legacy_stream(streams::empty))?
                    }
                    Dummy::PerThread => {
                        timed(&mut l.dummy, || ctx.with_per_thread_stream(streams::empty))?
                    }
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
            Ok((host_data, host_stamps, enqueue_ms, l))
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
    let correct = data.iter().all(|d| reference::matches_streams_kernel(d));
    Ok(Run {
        intervals,
        correct,
        enqueue_ms,
        launches,
    })
}

/// The median of `v` (0 for none).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// `--enqueue-study`: which part of the enqueue time is which. Each setup runs
/// `rounds` times; prints medians over the rounds of the overlap and of the total enqueue
/// time, and medians over all launches of each launch's host time by its place.
fn enqueue_study(ctx: &Context, rounds: usize) -> um::Result<()> {
    println!(
        "enqueue study: {rounds} rounds per setup; CUDA_MODULE_LOADING={}",
        std::env::var("CUDA_MODULE_LOADING").unwrap_or_else(|_| "(unset: LAZY)".to_owned())
    );
    println!(
        "{:<28} {:>8} {:>11} {:>13} {:>9} {:>11} {:>9}",
        "setup", "overlap", "enqueue ms", "1st/stream us", "kernel us", "2nd stamp us", "dummy us"
    );
    let setups = [
        ("cold, per-thread dummy", Dummy::PerThread, Warm::Cold),
        (
            "warm<attach, per-thread",
            Dummy::PerThread,
            Warm::BeforeAttach,
        ),
        (
            "warm>attach, per-thread",
            Dummy::PerThread,
            Warm::AfterAttach,
        ),
        ("cold, no dummy", Dummy::None, Warm::Cold),
        ("warm>attach, no dummy", Dummy::None, Warm::AfterAttach),
        ("cold, legacy dummy", Dummy::Legacy, Warm::Cold),
        (
            "warm>attach, legacy dummy",
            Dummy::Legacy,
            Warm::AfterAttach,
        ),
    ];
    println!(
        "(cold: new streams used as they are; warm<attach / warm>attach: an empty launch and a \
         wait on each stream before / after the memory is attached)"
    );
    for (name, dummy, warm) in setups {
        let setup = Setup { dummy, warm };
        let (mut overlap, mut enqueue) = (Vec::new(), Vec::new());
        let mut all = LaunchTimes::default();
        for _ in 0..rounds {
            let r = run(ctx, setup)?;
            if !r.correct {
                println!("{name}: a result does not match the CPU");
            }
            overlap.push(common::overlap_factor(&r.intervals));
            enqueue.push(r.enqueue_ms);
            all.first_on_stream.extend(r.launches.first_on_stream);
            all.kernel.extend(r.launches.kernel);
            all.last_stamp.extend(r.launches.last_stamp);
            all.dummy.extend(r.launches.dummy);
        }
        println!(
            "{name:<28} {:>7.2}x {:>11.3} {:>13.1} {:>9.1} {:>11.1} {:>9.1}",
            median(overlap),
            median(enqueue),
            median(all.first_on_stream),
            median(all.kernel),
            median(all.last_stamp),
            median(all.dummy)
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let Some(ctx) = common::open_gpu("default_streams") else {
        return ExitCode::from(2);
    };
    println!("device: {}", ctx.info().name);
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--enqueue-study") {
        let study = (|| -> um::Result<()> {
            run(
                &ctx,
                Setup {
                    dummy: Dummy::PerThread,
                    warm: Warm::AfterAttach,
                },
            )?; // warm-up: module load and JIT
            enqueue_study(&ctx, 7)
        })();
        return match study {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("default_streams: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let warm = if args.iter().any(|a| a == "--cold-streams") {
        Warm::Cold
    } else {
        Warm::AfterAttach
    };
    let setup = |dummy| Setup { dummy, warm };
    let result = (|| -> um::Result<_> {
        run(&ctx, setup(Dummy::PerThread))?; // warm-up: module load and JIT
        Ok((
            run(&ctx, setup(Dummy::Legacy))?,
            run(&ctx, setup(Dummy::PerThread))?,
            run(&ctx, setup(Dummy::None))?,
        ))
    })();
    let (legacy_run, per_thread_run, none_run) = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("default_streams: {e}");
            return ExitCode::FAILURE;
        }
    };
    let pt_first_us = median(per_thread_run.launches.first_on_stream.clone());
    let pt_kernel_us = median(per_thread_run.launches.kernel.clone());
    let Run {
        intervals: legacy,
        correct: legacy_ok,
        enqueue_ms: legacy_ms,
        ..
    } = legacy_run;
    let Run {
        intervals: per_thread,
        correct: per_thread_ok,
        enqueue_ms: per_thread_ms,
        ..
    } = per_thread_run;
    let Run {
        intervals: none,
        correct: none_ok,
        enqueue_ms: none_ms,
        ..
    } = none_run;
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
        "per-thread run, host time per launch (median): first on each stream {pt_first_us:.1} us, kernel {pt_kernel_us:.1} us; streams {}",
        if warm == Warm::AfterAttach {
            "warmed before timing"
        } else {
            "cold (--cold-streams)"
        }
    );
    println!(
        "checked: results match the CPU reference (legacy: {legacy_ok}, per-thread: {per_thread_ok}, reference: {none_ok})"
    );
    common::publish_timeline(
        "default_streams",
        "Eight streams, dummy kernel on the default stream after each launch (CUDA 7 streams post)",
        "stream",
        &[
            ("legacy default stream", &legacy),
            ("per-thread default stream", &per_thread),
            ("no dummy launch (reference)", &none),
        ],
    );
    // The serialization and the concurrency are what the post shows: check them too.
    let legacy_serializes_and_per_thread_overlaps =
        common::legacy_serializes_and_per_thread_overlaps(f_legacy, f_pt);
    if legacy_ok && per_thread_ok && none_ok && legacy_serializes_and_per_thread_overlaps {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
