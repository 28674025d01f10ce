//! NVIDIA's cuda-samples `UnifiedMemoryStreams` (Samples/0_Introduction), the um way: a task
//! consumer on host threads, each thread with its own stream and its own cuBLAS handle, every
//! task's matrix and vectors in managed memory. Tasks below a size threshold run a DGEMV on the
//! host; the others a cuBLAS DGEMV on the thread's stream. Unlike the sample, every task's
//! result is then checked against a host GEMV.
//!
//! The same numbers as the sample: 4 threads, 40 tasks, sizes `max(drand48() * 1000, 64)`,
//! host below 100, `y = A x` with `A` square and row-major (the sample's host GEMV reads
//! `A[i * n + j]`; here the device GEMV reads the same layout, `Gemv::row_major`, so that both
//! compute the same product: the sample's `cublasDgemv(CUBLAS_OP_N)` computes `A^T x` instead,
//! which it never notices because it checks nothing). Random numbers are `drand48`'s, so a
//! seed gives the sample's task sizes; the sample seeds with the time, this example with
//! `--seed` (default 2022).
//!
//! What the types made unnecessary, and which mistakes they rule out: docs/examples.md.
//!
//! `cargo run --release --example unified_memory_streams -- [--threads N] [--tasks N] [--seed N]`

mod common;

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemv};

/// Tasks smaller than this run on the host (the sample's `t.size < 100`).
const HOST_BELOW: usize = 100;

struct Args {
    threads: usize,
    tasks: usize,
    seed: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        threads: 4,
        tasks: 40,
        seed: 2022,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a non-negative integer"))
        };
        match flag.as_str() {
            "--threads" => args.threads = value("--threads")?.max(1),
            "--tasks" => args.tasks = value("--tasks")?,
            "--seed" => {
                args.seed = u32::try_from(value("--seed")?).map_err(|_| "--seed: too large")?
            }
            "-h" | "--help" => {
                return Err(
                    "usage: unified_memory_streams [--threads N] [--tasks N] [--seed N]".into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

/// POSIX `drand48`: the 48-bit linear congruential generator the sample draws from, so that a
/// seed gives the sample's task sizes and values.
struct Drand48(u64);

impl Drand48 {
    /// `srand48(seed)`.
    fn new(seed: u32) -> Self {
        Drand48((u64::from(seed) << 16) | 0x330e)
    }

    /// `drand48()`: uniform in [0, 1).
    fn next(&mut self) -> f64 {
        self.0 = (self.0.wrapping_mul(0x5_deec_e66d).wrapping_add(0xb)) & ((1 << 48) - 1);
        self.0 as f64 / (1u64 << 48) as f64
    }
}

/// One task: `result = data * vector`, `data` size×size row-major, all in managed memory,
/// host-owned between steps.
struct Task {
    id: usize,
    size: usize,
    data: Managed<[f64]>,
    vector: Managed<[f64]>,
    result: Managed<[f64]>,
    on_device: bool,
}

/// The sample's `initialise_tasks`: sizes, then each task's matrix and vector, in drand48's
/// order. Managed memory is allocated attached to the host (the sample's `cudaMallocManaged`
/// followed by host writes; no `cudaDeviceSynchronize` is needed: nothing is pending on it).
fn initialise_tasks(ctx: &Context, n: usize, seed: u32) -> um::Result<Vec<Task>> {
    let mut rng = Drand48::new(seed);
    (0..n)
        .map(|id| {
            let size = ((rng.next() * 1000.0) as usize).max(64);
            let data = Managed::from_fn(ctx, size * size, |_| rng.next())?;
            let vector = Managed::from_fn(ctx, size, |_| rng.next())?;
            let result = Managed::<[f64]>::zeroed_slice(ctx, size)?;
            Ok(Task {
                id,
                size,
                data,
                vector,
                result,
                on_device: false,
            })
        })
        .collect()
}

/// The sample's host DGEMV: `result = alpha A x + beta result`, A n×n row-major.
fn host_gemv(n: usize, alpha: f64, a: &[f64], x: &[f64], beta: f64, result: &mut [f64]) {
    for (i, r) in result.iter_mut().enumerate().take(n) {
        let row = &a[i * n..(i + 1) * n];
        let dot: f64 = row.iter().zip(x).map(|(a, x)| a * x).sum();
        *r = beta * *r + alpha * dot;
    }
}

/// One thread: takes tasks from the shared list until none is left (OpenMP's
/// `schedule(dynamic)`), host tasks on the CPU at once, device tasks on its own stream with its
/// own handle; then one wait for its stream gives every device task back to the host.
fn worker(
    ctx: &Context,
    tid: usize,
    tasks: &[Mutex<Option<Task>>],
    next: &AtomicUsize,
) -> Result<Vec<Task>, String> {
    let blas = Blas::new(ctx).map_err(|e| e.to_string())?;
    let done = ctx.with_stream(StreamOptions::new(), |s| {
        let mut done = Vec::new();
        // Device tasks between their cuBLAS call and the thread's one wait: (id, size), and
        // their data, vector and result, stream-owned, three by three.
        let mut in_flight = Vec::new();
        let mut buffers = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = tasks.get(i) else { break };
            let Some(mut t) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() else {
                continue;
            };
            if t.size < HOST_BELOW {
                println!(
                    "Task [{}], thread [{tid}] executing on host ({})",
                    t.id, t.size
                );
                // Host-owned: the CPU may use it now, whatever the streams are doing.
                host_gemv(t.size, 1.0, &t.data, &t.vector, 0.0, &mut t.result);
                done.push(t);
            } else {
                println!(
                    "Task [{}], thread [{tid}] executing on device ({})",
                    t.id, t.size
                );
                let Task {
                    id,
                    size,
                    data,
                    vector,
                    result,
                    ..
                } = t;
                let (a, x, mut y) = (data.attach(s)?, vector.attach(s)?, result.attach(s)?);
                blas.gemv(s, &Gemv::row_major(size, size), &a, &x, &mut y)?;
                in_flight.push((id, size));
                buffers.extend([a, x, y]);
            }
        }
        // One wait for everything this thread enqueued (the sample's cudaDeviceSynchronize,
        // for this thread's stream only).
        let mut buffers = s.sync_all(buffers)?.into_iter();
        for (id, size) in in_flight {
            if let (Some(data), Some(vector), Some(result)) =
                (buffers.next(), buffers.next(), buffers.next())
            {
                done.push(Task {
                    id,
                    size,
                    data,
                    vector,
                    result,
                    on_device: true,
                });
            }
        }
        Ok(done)
    });
    done.map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("unified_memory_streams: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(ctx) = common::open_gpu("unified_memory_streams") else {
        return ExitCode::from(2);
    };
    if let Err(e) = Blas::new(&ctx) {
        eprintln!("unified_memory_streams: cannot run: {e}");
        return ExitCode::from(2);
    }
    let info = ctx.info();
    println!(
        "device: {} (driver CUDA {}.{}, concurrentManagedAccess={})",
        info.name, info.driver_version.0, info.driver_version.1, info.concurrent_managed_access
    );
    let t0 = Instant::now();
    let tasks = match initialise_tasks(&ctx, args.tasks, args.seed) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("unified_memory_streams: {e}");
            return ExitCode::FAILURE;
        }
    };
    let init = t0.elapsed();
    println!(
        "{} tasks (seed {}), sizes {}..={}; executing tasks on host / device with {} threads",
        tasks.len(),
        args.seed,
        tasks.iter().map(|t| t.size).min().unwrap_or(0),
        tasks.iter().map(|t| t.size).max().unwrap_or(0),
        args.threads
    );
    let slots: Vec<Mutex<Option<Task>>> = tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let next = AtomicUsize::new(0);
    let t1 = Instant::now();
    let results: Vec<Result<Vec<Task>, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.threads)
            .map(|tid| {
                let (ctx, slots, next) = (&ctx, &slots, &next);
                scope.spawn(move || worker(ctx, tid, slots, next))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    let run = t1.elapsed();
    let mut tasks = Vec::new();
    for (tid, r) in results.into_iter().enumerate() {
        match r {
            Ok(t) => tasks.extend(t),
            Err(e) => {
                eprintln!("thread {tid}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    tasks.sort_by_key(|t| t.id);
    // Every task against a host GEMV of its own inputs.
    let t2 = Instant::now();
    let mut wrong = 0;
    for t in &tasks {
        let mut want = vec![0.0; t.size];
        host_gemv(t.size, 1.0, &t.data, &t.vector, 0.0, &mut want);
        let err = want
            .iter()
            .zip(t.result.iter())
            .map(|(w, g)| (w - g).abs() / (1.0 + w.abs()))
            .fold(0.0f64, f64::max);
        if err > 1e-12 {
            wrong += 1;
            println!(
                "Task [{}] ({} on the {}): relative error {err:.3e}",
                t.id,
                t.size,
                if t.on_device { "device" } else { "host" }
            );
        }
    }
    let check = t2.elapsed();
    let on_device = tasks.iter().filter(|t| t.on_device).count();
    println!(
        "timing: initialise {:.1} ms, execute {:.1} ms ({} on the device, {} on the host), check {:.1} ms",
        init.as_secs_f64() * 1e3,
        run.as_secs_f64() * 1e3,
        on_device,
        tasks.len() - on_device,
        check.as_secs_f64() * 1e3
    );
    println!(
        "checked: {}/{} tasks match a host GEMV (relative error <= 1e-12)",
        tasks.len() - wrong,
        tasks.len()
    );
    if wrong == 0 && tasks.len() == args.tasks {
        println!("All Done!");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
