//! A request loop on tokio: 1000 requests served by 8 executor threads. Each request writes a
//! buffer on the host, attaches it to a stream, launches kernels on it, waits for the GPU and
//! checks the result on the host. Three ways to wait, side by side:
//!
//! * `sync`: `Managed::sync` on the executor thread. It blocks that thread while the GPU works,
//!   and every task scheduled on it stalls.
//! * `spawn_blocking(sync)`: the whole stream scope runs on tokio's blocking pool (the branded
//!   buffers cannot cross into a `'static` closure, so the scope moves, not the wait). A thread
//!   hop per request; the executor threads stay free, the pool's threads block instead.
//! * `sync_async`: `Context::with_stream_async` and `sync_async().await`. No thread blocks.
//! * `sync_async (event thread)`: the same code with the alternative mechanism `um` keeps for
//!   this comparison: an event per wait, waited for by one helper thread (which blocks, off the
//!   executor) instead of a stream callback.
//!
//! Requests come from 64 concurrent clients (tasks), each with its own buffer. A ticker task
//! sleeps 1 ms in a loop and records how late it wakes: how long other tasks stall.
//!
//! Printed per mode: wall time, requests per second, the time executor threads spent blocked
//! in waits (the sum over threads, and as a share of 8 x wall time), the time blocking-pool
//! threads spent blocked, and the ticker's mean and worst lateness. `UM_REQUESTS`,
//! `UM_CLIENTS`, `UM_LAUNCHES` (kernels per request) and `UM_LEN` (floats per buffer) change
//! the workload.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use um::{Context, Managed, StreamOptions};
use um_test_kernels::testing::add_scalar;

const WORKERS: usize = 8;
const MODES: [Mode; 4] = [
    Mode::Sync,
    Mode::SpawnBlocking,
    Mode::Async,
    Mode::AsyncEventThread,
];

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Sync,
    SpawnBlocking,
    Async,
    /// `sync_async` with the alternative mechanism: an event per wait, one helper thread.
    AsyncEventThread,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::SpawnBlocking => "spawn_blocking(sync)",
            Mode::Async => "sync_async",
            Mode::AsyncEventThread => "sync_async (event thread)",
        }
    }
}

#[derive(Default)]
struct Counters {
    /// Nanoseconds executor threads spent inside a wait (a `sync` call, or a poll of a future).
    executor_blocked: AtomicU64,
    /// Nanoseconds blocking-pool threads spent inside `sync`.
    pool_blocked: AtomicU64,
    wrong: AtomicUsize,
}

fn add(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// A future that adds the time spent inside its polls to a counter: what the executor thread
/// spends in the wait itself.
struct Timed<'c, F> {
    inner: F,
    counter: &'c AtomicU64,
}

impl<F: Future + Unpin> Future for Timed<'_, F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let start = Instant::now();
        let out = Pin::new(&mut self.inner).poll(cx);
        add(self.counter, start);
        out
    }
}

struct Workload {
    requests: usize,
    clients: usize,
    launches: usize,
    len: usize,
}

/// One request on `buf`: host write, attach, `launches` kernels, wait as `mode` says, check.
async fn request(
    ctx: &Context,
    mode: Mode,
    w: &Workload,
    id: usize,
    mut buf: Managed<[f32]>,
    counters: &Counters,
) -> um::Result<Managed<[f32]>> {
    let base = (id % 1000) as f32;
    buf.iter_mut().for_each(|v| *v = base);
    let launches = w.launches;
    let buf = match mode {
        Mode::Sync => {
            ctx.with_stream_async(StreamOptions::new().non_blocking(), async |s| {
                let mut b = buf.attach(s)?;
                for _ in 0..launches {
                    add_scalar(s, &mut b, 1.0)?;
                }
                let start = Instant::now();
                let b = b.sync(); // blocks this executor thread
                add(&counters.executor_blocked, start);
                b
            })
            .await?
        }
        Mode::SpawnBlocking => {
            let ctx2 = ctx.clone();
            let pool_blocked = Arc::new(AtomicU64::new(0));
            let pb = Arc::clone(&pool_blocked);
            let handle = tokio::task::spawn_blocking(move || {
                ctx2.with_stream(StreamOptions::new().non_blocking(), |s| {
                    let mut b = buf.attach(s)?;
                    for _ in 0..launches {
                        add_scalar(s, &mut b, 1.0)?;
                    }
                    let start = Instant::now();
                    let b = b.sync();
                    add(&pb, start);
                    b
                })
            });
            let b = Timed {
                inner: handle,
                counter: &counters.executor_blocked,
            }
            .await
            // Never cancelled here; a panic in the pool goes on in this task.
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
            counters
                .pool_blocked
                .fetch_add(pool_blocked.load(Ordering::Relaxed), Ordering::Relaxed);
            b
        }
        Mode::Async | Mode::AsyncEventThread => {
            ctx.with_stream_async(StreamOptions::new().non_blocking(), async |s| {
                let mut b = buf.attach(s)?;
                for _ in 0..launches {
                    add_scalar(s, &mut b, 1.0)?;
                }
                Timed {
                    inner: b.sync_async(),
                    counter: &counters.executor_blocked,
                }
                .await
            })
            .await?
        }
    };
    let expected = base + launches as f32;
    if buf.iter().any(|v| *v != expected) {
        counters.wrong.fetch_add(1, Ordering::Relaxed);
    }
    Ok(buf)
}

struct Row {
    mode: Mode,
    wall: Duration,
    counters: Counters,
    late_mean_ms: f64,
    late_max_ms: f64,
}

async fn run(ctx: &Context, mode: Mode, w: &Arc<Workload>) -> um::Result<Row> {
    um_core::use_event_thread_for_waits(mode == Mode::AsyncEventThread);
    let counters = Arc::new(Counters::default());
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let buffers = (0..w.clients)
        .map(|_| Managed::<[f32]>::zeroed_slice(ctx, w.len))
        .collect::<um::Result<Vec<_>>>()?;

    let ticker = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut late = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(1)).await;
                late.push(start.elapsed().saturating_sub(Duration::from_millis(1)));
            }
            late
        })
    };

    let start = Instant::now();
    let clients: Vec<_> = buffers
        .into_iter()
        .map(|mut buf| {
            let (ctx, w, counters, next) = (
                ctx.clone(),
                Arc::clone(w),
                Arc::clone(&counters),
                Arc::clone(&next),
            );
            tokio::spawn(async move {
                loop {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    if id >= w.requests {
                        return Ok::<_, um::Error>(());
                    }
                    buf = request(&ctx, mode, &w, id, buf, &counters).await?;
                }
            })
        })
        .collect();
    let mut first_error = None;
    for c in clients {
        match c.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => panic!("a client task failed: {e}"),
        }
    }
    let wall = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let late = ticker.await.unwrap_or_default();
    if let Some(e) = first_error {
        return Err(e);
    }
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let late_mean_ms = late.iter().map(ms).sum::<f64>() / late.len().max(1) as f64;
    let late_max_ms = late.iter().map(ms).fold(0.0, f64::max);
    let counters = Arc::try_unwrap(counters).unwrap_or_default();
    Ok(Row {
        mode,
        wall,
        counters,
        late_mean_ms,
        late_max_ms,
    })
}

fn main() -> ExitCode {
    let Some(ctx) = common::open_gpu("async_requests") else {
        return ExitCode::from(2);
    };
    let w = Arc::new(Workload {
        requests: env("UM_REQUESTS", common::workload(1000, 64)),
        clients: env("UM_CLIENTS", common::workload(64, 8)),
        launches: env("UM_LAUNCHES", common::workload(50, 2)),
        len: env("UM_LEN", common::workload(1 << 18, 1 << 10)),
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("async_requests: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("device: {}", ctx.info().name);
    println!(
        "{} requests from {} clients on {WORKERS} tokio workers; each: host write of {} floats, \
         attach, {} add_scalar kernels, wait, host check",
        w.requests, w.clients, w.len, w.launches
    );
    let result = runtime.block_on(async {
        // Warm-up: module load, the blocking pool, the callback thread.
        let warm = Arc::new(Workload {
            requests: 2 * w.clients,
            clients: w.clients,
            launches: 1,
            len: w.len,
        });
        // Under a sanitizer, each run's start goes to stderr: a run that hangs there (racecheck
        // once did, 2x H200, 2026-11-23) names its mode beside run.sh's stacks.
        let progress = |phase: &str, mode: Mode| {
            if std::env::var_os("UM_SANITIZE").is_some() {
                eprintln!("async_requests: {phase} run of {mode:?} begins");
            }
        };
        for mode in MODES {
            progress("warm-up", mode);
            run(&ctx, mode, &warm).await?;
        }
        let mut rows = Vec::new();
        for mode in MODES {
            progress("measured", mode);
            rows.push(run(&ctx, mode, &w).await?);
        }
        Ok::<_, um::Error>(rows)
    });
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("async_requests: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{:<26} {:>8} {:>9} {:>20} {:>18} {:>18} {:>7}",
        "wait",
        "wall ms",
        "req/s",
        "executor blocked ms",
        "pool blocked ms",
        "tick late mean/max",
        "wrong"
    );
    let mut all_right = true;
    for r in &rows {
        let secs = r.wall.as_secs_f64();
        let blocked = r.counters.executor_blocked.load(Ordering::Relaxed) as f64 / 1e6;
        let pool = r.counters.pool_blocked.load(Ordering::Relaxed) as f64 / 1e6;
        let wrong = r.counters.wrong.load(Ordering::Relaxed);
        all_right &= wrong == 0;
        println!(
            "{:<26} {:>8.1} {:>9.0} {:>11.1} ({:>5.1}%) {:>18.1} {:>8.2}/{:<9.2} {:>7}",
            r.mode.name(),
            secs * 1e3,
            w.requests as f64 / secs,
            blocked,
            100.0 * blocked / (secs * 1e3 * WORKERS as f64),
            pool,
            r.late_mean_ms,
            r.late_max_ms,
            wrong
        );
    }
    println!(
        "executor blocked: time executor threads spent inside the wait, summed over threads (share of {WORKERS} x wall)"
    );
    if all_right {
        println!("every request's result checked on the host: correct");
        ExitCode::SUCCESS
    } else {
        eprintln!("async_requests: some results were wrong");
        ExitCode::FAILURE
    }
}
