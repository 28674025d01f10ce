//! Data-parallel training with NCCL on owned buffers: every rank computes the gradient of its
//! shard with a kernel of its own (`crates/um-test-kernels/kernels/data_parallel.cu`), the
//! gradients are summed with an all-reduce, and every rank updates its weights. After each step the weights of every
//! rank are checked against a CPU reference computed in f64 from the same starting weights.
//!
//! ```text
//! data_parallel [--single-process | --launch] [--gpus N] [--steps N] [--socket]
//!               [--storage mirrored|unified|coherent] [--blocking]
//! ```
//!
//! * `--single-process` (the default): one process, one thread, every GPU; the all-reduces of
//!   all ranks go into one `Group` (`Comm::init_all`).
//! * `--launch`: one process per GPU. This process is the launcher: it spawns `--gpus` copies
//!   of itself with `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR=127.0.0.1` and a free
//!   `MASTER_PORT`, as torchrun would; each child makes its communicator with
//!   `Comm::from_env` (the unique id goes over TCP from rank 0). A child started that way by any
//!   launcher (torchrun, `srun`) runs the same code, on one host or many.
//! * `--socket`: NCCL over sockets only (`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1`); the example
//!   re-runs itself with them set, since NCCL reads its environment once.
//! * `--storage`: where gradients and weights live (default mirrored: the device half).
//! * `--blocking`: blocking communicators (less host time per call; see `CommOptions`).
//!
//! NVLink multicast stays off: every process this example starts has `NCCL_NVLS_ENABLE=0`.
//! With fewer than two GPUs it prints one line and exits with status 2.
#![allow(clippy::expect_used)]

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use um::nccl::{Comm, CommOptions, Group, ReduceOp};
use um::{Context, HostOwned, HostVisible, Linear, Managed, StreamOptions};
use um_test_kernels::{data_parallel, testing};

/// Features (one weight each) and samples per rank.
const FEATURES: usize = 256;
const ROWS: usize = 2048;
const LR: f64 = 1.0;
const WAIT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
struct Args {
    launch: bool,
    gpus: Option<usize>,
    steps: usize,
    socket: bool,
    storage: String,
    blocking: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        launch: false,
        gpus: None,
        steps: 10,
        socket: false,
        storage: "mirrored".to_owned(),
        blocking: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--single-process" => a.launch = false,
            "--launch" => a.launch = true,
            "--gpus" => a.gpus = Some(value()?.parse().map_err(|e| format!("--gpus: {e}"))?),
            "--steps" => a.steps = value()?.parse().map_err(|e| format!("--steps: {e}"))?,
            "--socket" => a.socket = true,
            "--storage" => a.storage = value()?,
            "--blocking" => a.blocking = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !["mirrored", "unified", "coherent"].contains(&a.storage.as_str()) {
        return Err(format!(
            "--storage {}: mirrored, unified or coherent",
            a.storage
        ));
    }
    Ok(a)
}

/// Rank `rank`'s shard: `ROWS` samples of `FEATURES` values, x in [0, 1], y = w* x + noise.
fn shard(rank: usize) -> (Vec<f32>, Vec<f32>) {
    let mut x = Vec::with_capacity(ROWS * FEATURES);
    let mut y = Vec::with_capacity(ROWS * FEATURES);
    for i in 0..ROWS {
        for j in 0..FEATURES {
            let xv = ((i * 7 + j * 3 + rank * 11) % 17) as f32 / 16.0;
            let target = 1.0 + (j % 5) as f32 * 0.25;
            let noise = (((i + j + rank) % 3) as f32 - 1.0) * 0.01;
            x.push(xv);
            y.push(target * xv + noise);
        }
    }
    (x, y)
}

/// The weights after one step from `w`, over every shard, in f64.
fn reference_step(w: &[f32], shards: &[(Vec<f32>, Vec<f32>)]) -> Vec<f64> {
    let total = (shards.len() * ROWS) as f64;
    (0..FEATURES)
        .map(|j| {
            let wj = f64::from(w[j]);
            let mut g = 0.0f64;
            for (x, y) in shards {
                for i in 0..ROWS {
                    let (xv, yv) = (
                        f64::from(x[i * FEATURES + j]),
                        f64::from(y[i * FEATURES + j]),
                    );
                    g += (wj * xv - yv) * xv;
                }
            }
            wj - LR * g / total
        })
        .collect()
}

fn loss(w: &[f32], shards: &[(Vec<f32>, Vec<f32>)]) -> f64 {
    let mut l = 0.0;
    for (x, y) in shards {
        for i in 0..ROWS {
            for j in 0..FEATURES {
                let e = f64::from(w[j]) * f64::from(x[i * FEATURES + j])
                    - f64::from(y[i * FEATURES + j]);
                l += 0.5 * e * e;
            }
        }
    }
    l / (shards.len() * ROWS) as f64
}

/// Checks a rank's weights against the reference; the worst relative difference.
fn check(rank: usize, step: usize, w: &[f32], want: &[f64]) -> Result<f64, String> {
    let mut worst = 0.0f64;
    for (j, (got, want)) in w.iter().zip(want).enumerate() {
        let diff = (f64::from(*got) - want).abs() / want.abs().max(1.0);
        if diff.is_nan() || diff > 1e-4 {
            return Err(format!(
                "rank {rank}, step {step}: w[{j}] = {got}, the CPU reference says {want}"
            ));
        }
        worst = worst.max(diff);
    }
    Ok(worst)
}

/// A host-owned buffer of floats in storage `M`, or the error that refused it.
type Floats<M> = um::Result<Managed<[f32], HostOwned, M>>;

/// How buffers of one storage are made.
struct Alloc<M: HostVisible> {
    from_slice: fn(&Context, &[f32]) -> Floats<M>,
}

fn options(args: &Args) -> CommOptions {
    CommOptions::new().blocking(args.blocking).timeout(WAIT)
}

/// One process, one thread, every GPU: a group of all-reduces per step.
fn single_process<M: HostVisible>(args: &Args, gpus: usize, alloc: Alloc<M>) -> Result<(), String> {
    let ctxs: Vec<Context> = (0..gpus)
        .map(Context::new)
        .collect::<um::Result<_>>()
        .map_err(|e| e.to_string())?;
    let comms = Comm::init_all(&ctxs, options(args)).map_err(|e| e.to_string())?;
    let shards: Vec<(Vec<f32>, Vec<f32>)> = (0..gpus).map(shard).collect();
    println!(
        "single process: {gpus} ranks, {} steps, {} storage, {} communicators",
        args.steps,
        args.storage,
        if args.blocking {
            "blocking"
        } else {
            "nonblocking"
        }
    );
    let mut host_w: Vec<f32> = vec![0.0; FEATURES];
    let start_loss = loss(&host_w, &shards);
    let mut per_rank = Vec::with_capacity(gpus);
    for (ctx, (x, y)) in ctxs.iter().zip(&shards) {
        per_rank.push((
            (alloc.from_slice)(ctx, x).map_err(|e| e.to_string())?,
            (alloc.from_slice)(ctx, y).map_err(|e| e.to_string())?,
            (alloc.from_slice)(ctx, &host_w).map_err(|e| e.to_string())?,
            (alloc.from_slice)(ctx, &vec![0.0f32; FEATURES]).map_err(|e| e.to_string())?,
        ));
    }
    let total = (gpus * ROWS) as f32;
    let mut failure = None;
    let outcome = Context::with_stream_set_across(&ctxs, StreamOptions::new(), |streams| {
        let mut dev = Vec::with_capacity(gpus);
        for ((x, y, w, g), s) in per_rank.into_iter().zip(streams) {
            dev.push((x.attach(s)?, y.attach(s)?, w.attach(s)?, g.attach(s)?));
        }
        for step in 0..args.steps {
            let want = reference_step(&host_w, &shards);
            for ((x, y, w, g), s) in dev.iter_mut().zip(streams) {
                data_parallel::dp_gradient_with(s, Linear::for_len(s, FEATURES), x, y, w, g)?;
            }
            let mut group = Group::new();
            for (((_, _, _, g), s), comm) in dev.iter_mut().zip(streams).zip(&comms) {
                group.all_reduce_in_place(comm, s, g, ReduceOp::Sum)?;
            }
            group.launch()?.wait(WAIT)?;
            let mut next = Vec::with_capacity(gpus);
            for ((x, y, w, g), s) in dev.into_iter().zip(streams) {
                let mut w = w;
                testing::axpy(s, &g, &mut w, -(LR as f32) / total)?;
                let host = w.sync()?;
                next.push((x, y, host, g));
            }
            // Every rank against the reference, and all ranks bit for bit alike.
            let mut worst = 0.0f64;
            for (rank, (_, _, w, _)) in next.iter().enumerate() {
                match check(rank, step, w, &want) {
                    Ok(d) => worst = worst.max(d),
                    Err(e) => failure = Some(e),
                }
                if w[..] != next[0].2[..] {
                    failure.get_or_insert(format!(
                        "step {step}: rank {rank}'s weights differ from rank 0's"
                    ));
                }
            }
            if failure.is_some() {
                return Ok(());
            }
            host_w.copy_from_slice(&next[0].2);
            println!(
                "step {step:2}: loss {:.6}, weights of {gpus} ranks within {worst:.1e} of the CPU reference",
                loss(&host_w, &shards)
            );
            dev = Vec::with_capacity(gpus);
            for ((x, y, w, g), s) in next.into_iter().zip(streams) {
                dev.push((x, y, w.attach(s)?, g));
            }
        }
        for ((x, y, w, g), s) in dev.into_iter().zip(streams) {
            s.sync_all((x, y, w, g))?;
        }
        Ok(())
    });
    outcome.map_err(|e| e.to_string())?;
    if let Some(e) = failure {
        return Err(e);
    }
    println!(
        "loss {start_loss:.6} -> {:.6}; w[0..5] = {:?} (the data's weights: 1, 1.25, 1.5, 1.75, 2)",
        loss(&host_w, &shards),
        &host_w[..5]
    );
    Ok(())
}

/// One rank of a multi-process job (RANK etc. set): its shard, its stream, the same step.
fn worker<M: HostVisible>(args: &Args, alloc: Alloc<M>) -> Result<(), String> {
    let comm = Comm::from_env(options(args)).map_err(|e| e.to_string())?;
    let (rank, world) = (comm.rank(), comm.world_size());
    let ctx = comm.context().clone();
    let shards: Vec<(Vec<f32>, Vec<f32>)> = (0..world).map(shard).collect();
    let (x, y) = &shards[rank];
    let mut host_w = vec![0.0f32; FEATURES];
    let x = (alloc.from_slice)(&ctx, x).map_err(|e| e.to_string())?;
    let y = (alloc.from_slice)(&ctx, y).map_err(|e| e.to_string())?;
    let mut w = Some((alloc.from_slice)(&ctx, &host_w).map_err(|e| e.to_string())?);
    let g = (alloc.from_slice)(&ctx, &vec![0.0f32; FEATURES]).map_err(|e| e.to_string())?;
    let total = (world * ROWS) as f32;
    let mut failure = None;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, y, mut g) = (x.attach(s)?, y.attach(s)?, g.attach(s)?);
        for step in 0..args.steps {
            let want = reference_step(&host_w, &shards);
            let mut dw = w.take().expect("weights").attach(s)?;
            data_parallel::dp_gradient_with(s, Linear::for_len(s, FEATURES), &x, &y, &dw, &mut g)?;
            comm.all_reduce_in_place(s, &mut g, ReduceOp::Sum)?;
            testing::axpy(s, &g, &mut dw, -(LR as f32) / total)?;
            comm.wait(s, WAIT)?;
            let host = dw.sync()?;
            match check(rank, step, &host, &want) {
                Ok(worst) => {
                    if rank == 0 {
                        println!(
                            "rank 0, step {step:2}: loss {:.6}, weights within {worst:.1e} of the CPU reference",
                            loss(&host, &shards)
                        );
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    w = Some(host);
                    break;
                }
            }
            host_w.copy_from_slice(&host);
            w = Some(host);
        }
        s.sync_all((x, y, g)).map(drop)
    })
    .map_err(|e| e.to_string())?;
    match failure {
        Some(e) => Err(e),
        None => {
            println!("rank {rank} of {world}: {} steps checked", args.steps);
            Ok(())
        }
    }
}

/// Spawns one child per GPU, torchrun's way, and waits for all of them.
fn launch(args: &Args, gpus: usize) -> Result<(), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    println!("launching {gpus} processes (MASTER_ADDR=127.0.0.1, MASTER_PORT={port})");
    let mut forwarded = vec![
        "--steps".to_owned(),
        args.steps.to_string(),
        "--storage".to_owned(),
        args.storage.clone(),
    ];
    if args.blocking {
        forwarded.push("--blocking".to_owned());
    }
    let mut children = Vec::with_capacity(gpus);
    for rank in 0..gpus {
        let child = Command::new(&exe)
            .args(&forwarded)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", gpus.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("NCCL_NVLS_ENABLE", "0")
            .spawn()
            .map_err(|e| format!("cannot start rank {rank}: {e}"))?;
        children.push(child);
    }
    // Wait for all; once one fails, the others get a grace period and are then killed.
    let mut status: Vec<Option<std::process::ExitStatus>> = vec![None; gpus];
    let mut failed_at: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    while status.iter().any(Option::is_none) {
        for (rank, child) in children.iter_mut().enumerate() {
            if status[rank].is_none() {
                if let Ok(Some(s)) = child.try_wait() {
                    if !s.success() {
                        failed_at.get_or_insert_with(Instant::now);
                    }
                    status[rank] = Some(s);
                }
            }
        }
        let give_up = failed_at.is_some_and(|t| t.elapsed() > Duration::from_secs(30))
            || Instant::now() > deadline;
        if give_up {
            for (rank, child) in children.iter_mut().enumerate() {
                if status[rank].is_none() {
                    let _ = child.kill();
                    status[rank] = child.wait().ok();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let bad: Vec<String> = status
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_some_and(|s| s.success()))
        .map(|(r, s)| format!("rank {r}: {s:?}"))
        .collect();
    if bad.is_empty() {
        println!("all {gpus} ranks checked every step");
        Ok(())
    } else {
        Err(format!("ranks failed: {}", bad.join(", ")))
    }
}

fn run<M: HostVisible>(args: &Args, gpus: usize, alloc: Alloc<M>) -> Result<(), String> {
    if std::env::var_os("RANK").is_some() {
        worker(args, alloc)
    } else if args.launch {
        launch(args, gpus)
    } else {
        single_process(args, gpus, alloc)
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("data_parallel: {e}");
            return ExitCode::from(2);
        }
    };
    let is_worker = std::env::var_os("RANK").is_some();
    // NCCL reads its environment once: re-run with the socket transport's variables set.
    if args.socket && !is_worker && std::env::var_os("NCCL_P2P_DISABLE").is_none() {
        let status = Command::new(std::env::current_exe().expect("own path"))
            .args(std::env::args().skip(1))
            .env("NCCL_P2P_DISABLE", "1")
            .env("NCCL_SHM_DISABLE", "1")
            .env("NCCL_NVLS_ENABLE", "0")
            .status();
        return match status {
            Ok(s) if s.success() => ExitCode::SUCCESS,
            Ok(s) => ExitCode::from(u8::try_from(s.code().unwrap_or(1)).unwrap_or(1)),
            Err(e) => {
                eprintln!("data_parallel: cannot re-run with the socket transport: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let count = um::device_count().unwrap_or(0);
    let gpus = args.gpus.unwrap_or(count).min(count);
    if !is_worker && gpus < 2 {
        println!("data_parallel: needs at least 2 GPUs, this machine has {count}: skipped");
        return ExitCode::from(2);
    }
    if let Err(e) = um::nccl::nccl() {
        println!("data_parallel: {e}");
        return ExitCode::from(2);
    }
    if args.socket || std::env::var_os("NCCL_P2P_DISABLE").is_some() {
        println!("transport: sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)");
    }
    let outcome = match args.storage.as_str() {
        "unified" => run(
            &args,
            gpus,
            Alloc {
                from_slice: |c, d| Managed::from_slice(c, d),
            },
        ),
        "coherent" => run(
            &args,
            gpus,
            Alloc {
                from_slice: |c, d| Managed::from_slice_coherent(c, d),
            },
        ),
        _ => run(
            &args,
            gpus,
            Alloc {
                from_slice: |c, d| Managed::from_slice_mirrored(c, d),
            },
        ),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("data_parallel: {e}");
            ExitCode::FAILURE
        }
    }
}
