//! An MLP layer, `Y = ReLU(W X + b)`, on managed memory: the GEMM through um-cublas, bias and
//! ReLU through a kernel of the examples' own (`crates/um-test-kernels/kernels/mlp.cu`,
//! `UM_SAFE_KERNEL bias_relu`). The CPU prepares the next batch while the GPU computes this one:
//! two buffers per stage (input and output, slots 0 and 1), each handed to the stream with
//! `attach` and back with `sync`.
//! Every batch is checked against a CPU reference.
//!
//! Column-major throughout (cuBLAS's convention): `X` is `inputs`×`batch` (one column per
//! sample), `W` is `outputs`×`inputs`, `Y` is `outputs`×`batch`, and `b` has `outputs`
//! elements.
//!
//! The schedule, on one stream (a `sync` waits for its whole stream, so batch b+1 is enqueued
//! only after batch b's wait, and the host's work overlaps the GPU's):
//!
//! ```text
//! host:   prepare 0 | enqueue 0 | prepare 1 | wait 0 | enqueue 1 | check 0, prepare 2 | wait 1 | ..
//! stream:           |  GEMM + bias_relu (0)  |        |  GEMM + bias_relu (1)        |
//! ```
//!
//! `cargo run --release --example mlp_layer -- [--batches N] [--batch N] [--inputs N] [--outputs N]`

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};
use um_test_kernels::mlp;

struct Args {
    batches: usize,
    batch: usize,
    inputs: usize,
    outputs: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        batches: common::workload(16, 4),
        batch: common::workload(512, 64),
        inputs: common::workload(1024, 128),
        outputs: common::workload(768, 96),
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
            "--batches" => args.batches = value("--batches")?,
            "--batch" => args.batch = value("--batch")?,
            "--inputs" => args.inputs = value("--inputs")?,
            "--outputs" => args.outputs = value("--outputs")?,
            "-h" | "--help" => {
                return Err(
                    "usage: mlp_layer [--batches N] [--batch N] [--inputs N] [--outputs N]".into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

/// A reproducible value in [-1, 1) for element `i` of stream `salt` (a hash, so that batches
/// differ and the CPU's preparation is real work).
fn noise(i: usize, salt: u64) -> f32 {
    let mut z = (i as u64) ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// The CPU's share of a batch: writes the next input into a host-owned slot.
fn prepare(x: &mut [f32], batch: usize) {
    for (i, v) in x.iter_mut().enumerate() {
        *v = noise(i, 1000 + batch as u64);
    }
}

/// The layer on the CPU, in f64, and the tolerance each element allows: f32 GEMM over
/// `inputs` terms may differ from the exact value by a few units in the last place of the
/// largest partial sums, so the bound scales with `sum |w| |x|` (1e-5 of it: about 80 ulps
/// of f32 at that magnitude, far below any real error, far above summation-order noise).
///
/// `w_rows` is `W` row-major (`w_rows[row * inputs + p]`, the transpose of the device's
/// column-major `W`), so that the inner loop reads both operands in order; the columns are
/// split across the host's cores. Every element of every batch is still checked.
fn reference(a: &Args, w_rows: &[f32], b: &[f32], x: &[f32]) -> Vec<(f32, f32)> {
    let mut out = vec![(0.0f32, 0.0f32); a.outputs * a.batch];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cols_per = a.batch.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (chunk, cols) in out.chunks_mut(cols_per * a.outputs).enumerate() {
            scope.spawn(move || {
                for (k, y_col) in cols.chunks_mut(a.outputs).enumerate() {
                    let col = chunk * cols_per + k;
                    let x_col = &x[col * a.inputs..(col + 1) * a.inputs];
                    for (row, slot) in y_col.iter_mut().enumerate() {
                        let w_row = &w_rows[row * a.inputs..(row + 1) * a.inputs];
                        let (mut sum, mut abs) = (f64::from(b[row]), f64::from(b[row].abs()));
                        for (wv, xv) in w_row.iter().zip(x_col) {
                            let t = f64::from(*wv) * f64::from(*xv);
                            sum += t;
                            abs += t.abs();
                        }
                        *slot = (sum.max(0.0) as f32, (1e-5 * abs + 1e-6) as f32);
                    }
                }
            });
        }
    });
    out
}

/// Largest error of `y` against the reference, in units of each element's tolerance (<= 1
/// passes).
fn check(y: &[f32], want: &[(f32, f32)]) -> f32 {
    y.iter()
        .zip(want)
        .map(|(g, (w, tol))| (g - w).abs() / tol)
        .fold(0.0, f32::max)
}

/// A batch back on the host, waiting for its check: its number, input and output slots.
type Done = (usize, Managed<[f32]>, Managed<[f32]>);

struct Report {
    worst: f32,
    wall: Duration,
    waited: Duration,
}

fn run(ctx: &Context, a: &Args) -> Result<Report, Box<dyn std::error::Error>> {
    let blas = Blas::new(ctx)?;
    let scale = 1.0 / (a.inputs as f32).sqrt();
    let w_host: Vec<f32> = (0..a.outputs * a.inputs)
        .map(|i| noise(i, 1) * scale)
        .collect();
    let b_host: Vec<f32> = (0..a.outputs).map(|i| noise(i, 2) * 0.5).collect();
    // The reference's copy of W, row-major (the device's is column-major).
    let w_rows: Vec<f32> = (0..a.outputs * a.inputs)
        .map(|i| w_host[(i / a.inputs) + (i % a.inputs) * a.outputs])
        .collect();
    let w = Managed::from_slice(ctx, &w_host)?;
    let bias = Managed::from_slice(ctx, &b_host)?;
    // Two slots per stage: while one is on the stream, the CPU uses the other.
    let mut xs = [
        Some(Managed::<[f32]>::zeroed_slice(ctx, a.inputs * a.batch)?),
        Some(Managed::<[f32]>::zeroed_slice(ctx, a.inputs * a.batch)?),
    ];
    let mut ys = [
        Some(Managed::<[f32]>::zeroed_slice(ctx, a.outputs * a.batch)?),
        Some(Managed::<[f32]>::zeroed_slice(ctx, a.outputs * a.batch)?),
    ];
    let gemm = Gemm::<f32>::new(a.outputs, a.batch, a.inputs);
    let start = Instant::now();
    let mut waited = Duration::ZERO;
    let mut worst = 0.0f32;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (w, bias) = (w.attach(s)?, bias.attach(s)?);
        // The weights stay on the stream for the whole run; the slots come and go.
        // (A slot is always back on the host when its turn comes: its batch was synced two
        // batches ago.)
        let take = |slot: &mut Option<Managed<[f32]>>| {
            slot.take().ok_or_else(|| um::Error::Library {
                library: "mlp_layer",
                message: "a slot was reused before it came back".into(),
            })
        };
        if let Some(x) = xs[0].as_mut() {
            prepare(x, 0);
        }
        let mut pending: Option<Done> = None;
        for batch in 0..=a.batches {
            // Enqueue `batch` (its input was prepared while the GPU ran the one before).
            let enqueued = if batch < a.batches {
                let slot = batch % 2;
                let x = take(&mut xs[slot])?.attach(s)?;
                let mut y = take(&mut ys[slot])?.attach(s)?;
                blas.gemm(s, &gemm, &w, &x, &mut y)?;
                mlp::bias_relu(s, &mut y, &bias)?;
                Some((batch, x, y))
            } else {
                None
            };
            // While the GPU computes it: check the batch before, prepare the one after.
            if let Some((done, x, y)) = pending.take() {
                let slot: usize = done % 2;
                let want = reference(a, &w_rows, &b_host, &x);
                worst = worst.max(check(&y, &want));
                xs[slot] = Some(x);
                ys[slot] = Some(y);
            }
            if batch + 1 < a.batches {
                if let Some(x) = xs[(batch + 1) % 2].as_mut() {
                    prepare(x, batch + 1);
                }
            }
            // Then wait for it: both slots come back to the host.
            if let Some((b, x, y)) = enqueued {
                let t = Instant::now();
                let (x, y) = s.sync_all((x, y))?;
                waited += t.elapsed();
                pending = Some((b, x, y));
            }
        }
        s.sync_all((w, bias)).map(drop)
    })?;
    Ok(Report {
        worst,
        wall: start.elapsed(),
        waited,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mlp_layer: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(ctx) = common::open_gpu("mlp_layer") else {
        return ExitCode::from(2);
    };
    if let Err(e) = Blas::new(&ctx) {
        eprintln!("mlp_layer: cannot run: {e}");
        return ExitCode::from(2);
    }
    println!(
        "mlp_layer: Y = ReLU(W X + b), W {}x{}, {} batches of {} samples, f32 on {}",
        args.outputs,
        args.inputs,
        args.batches,
        args.batch,
        ctx.info().name
    );
    match run(&ctx, &args) {
        Ok(r) => {
            let per = r.wall.as_secs_f64() * 1e3 / args.batches as f64;
            println!(
                "timing: {:.2} ms per batch; the host waited {:.1} of {:.1} ms (the rest it spent checking and preparing batches while the GPU computed)",
                per,
                r.waited.as_secs_f64() * 1e3,
                r.wall.as_secs_f64() * 1e3
            );
            println!(
                "checked: {} batches against the CPU; worst error {:.3} of the tolerance (1e-5 of sum |w x| per element)",
                args.batches, r.worst
            );
            if r.worst <= 1.0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("mlp_layer: {e}");
            ExitCode::FAILURE
        }
    }
}
