//! Conjugate gradient on owned buffers, entirely in safe `um`: the 5-point Laplacian of an
//! `N`×`N` grid (`N²` rows, symmetric positive definite) as a proved CSR matrix, SpMV through
//! cuSPARSE, the level-1 steps (dot, axpy, scal, copy) through cuBLAS, on one stream that owns
//! every buffer; the two dot products of an iteration read on the host, as the textbook loop
//! (and its C++ twin, `bench/cg_baseline.cpp`) does. The solution is checked against the CPU:
//! its residual `|b - A x|` computed there, and the same iterations of CG run there.
//!
//! ```text
//! cargo run --release --example conjugate_gradient                  # 128 x 128 grid, to 1e-8
//! cargo run --release --example conjugate_gradient -- --grid 1000 --iters 100 --reps 5 --fixed
//! ```
//!
//! `--fixed` runs exactly `--iters` iterations (no early exit, as the C++ baseline does) and
//! prints one `cg_um ... loop_ms=...` line per repetition, in the baseline's format;
//! `--no-cpu` skips the CPU run of CG (the residual is still checked). `--grid` is at most
//! 46340 (the `N²` rows are cuSPARSE's 32-bit indices) and `--tol` a positive number: both are
//! checked before anything is built. `--transfer` is the
//! stream's [`Transfer`] policy for the unified buffers it owns: `prefetch` (the default: the
//! attach prefetches each buffer to the device, in stream order) or `on-demand` (pages migrate
//! at the GPU's first touch). `--storage` is where the matrix and the five vectors live:
//! `coherent` (managed memory attached globally; the default where the device has concurrent
//! managed access), `unified` (managed memory attached to the stream; the default elsewhere) or
//! `mirror` (device memory, with a host copy made at `sync`).

use std::error::Error;
use std::time::Instant;

use um::cublas::{Blas, Level1};
use um::cusparse::{Csr, Op, Sparse};
use um::{Context, HostOwned, HostVisible, Managed, StreamOptions, Transfer};

/// Where the matrix and the vectors live (`--storage`).
#[derive(Clone, Copy)]
enum StorageArg {
    Unified,
    Coherent,
    Mirror,
}

pub(crate) struct Args {
    transfer: Transfer,
    /// `None`: coherent where the device has concurrent managed access, else unified.
    storage: Option<StorageArg>,
    grid: usize,
    iters: usize,
    reps: usize,
    tol: f64,
    fixed: bool,
    cpu: bool,
}

fn args() -> Result<Args, String> {
    parse(std::env::args().skip(1))
}

/// The largest `--grid`: its `N²` rows (and columns) must fit cuSPARSE's 32-bit indices, and a
/// larger grid would build a matrix of hundreds of GiB on the host before `Csr::new` refused it.
const MAX_GRID: usize = 46_340; // 46_340² = 2_147_395_600 <= i32::MAX < 46_341²

/// The arguments after the program's name.
pub(crate) fn parse(arguments: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        transfer: Transfer::Prefetch,
        storage: None,
        grid: 128,
        iters: 2000,
        reps: 1,
        tol: 1e-8,
        fixed: false,
        cpu: true,
    };
    let mut it = arguments.into_iter();
    while let Some(flag) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .ok_or_else(|| format!("{what} needs a value"))?
                .parse::<f64>()
                .map_err(|e| format!("{what}: {e}"))
        };
        match flag.as_str() {
            "--grid" => a.grid = value("--grid")? as usize,
            "--iters" => a.iters = value("--iters")? as usize,
            "--reps" => a.reps = value("--reps")? as usize,
            "--tol" => a.tol = value("--tol")?,
            "--fixed" => a.fixed = true,
            "--no-cpu" => a.cpu = false,
            "--storage" => {
                a.storage = match it.next().as_deref() {
                    Some("unified") => Some(StorageArg::Unified),
                    Some("coherent") => Some(StorageArg::Coherent),
                    Some("mirror") => Some(StorageArg::Mirror),
                    other => {
                        return Err(format!("--storage unified|coherent|mirror, not {other:?}"));
                    }
                }
            }
            "--transfer" => {
                a.transfer = match it.next().as_deref() {
                    Some("prefetch") => Transfer::Prefetch,
                    Some("on-demand") => Transfer::OnDemand,
                    other => return Err(format!("--transfer prefetch|on-demand, not {other:?}")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.grid < 2 || a.grid > MAX_GRID || a.reps == 0 {
        return Err(format!(
            "--grid must be 2 to {MAX_GRID} (its N² rows are 32-bit indices) and --reps at least 1"
        ));
    }
    // A tolerance that is not a positive number would pass the convergence check below
    // vacuously (NaN compares false; infinity stops at the first iteration).
    if !(a.tol.is_finite() && a.tol > 0.0) {
        return Err(format!("--tol must be a positive number, not {}", a.tol));
    }
    Ok(a)
}

/// The 5-point Laplacian of an `n`×`n` grid with Dirichlet boundaries, in CSR, columns
/// increasing within each row (the same matrix as `bench/cg_baseline.cpp`).
pub(crate) fn laplacian(n: usize) -> Host {
    let rows = n * n;
    let (mut offsets, mut cols, mut vals) = (Vec::with_capacity(rows + 1), Vec::new(), Vec::new());
    offsets.push(0i32);
    for r in 0..rows {
        let (i, j) = (r / n, r % n);
        let mut put = |c: usize, v: f64| {
            cols.push(c as i32);
            vals.push(v);
        };
        if i > 0 {
            put(r - n, -1.0);
        }
        if j > 0 {
            put(r - 1, -1.0);
        }
        put(r, 4.0);
        if j < n - 1 {
            put(r + 1, -1.0);
        }
        if i < n - 1 {
            put(r + n, -1.0);
        }
        offsets.push(cols.len() as i32);
    }
    (offsets, cols, vals)
}

/// A CSR matrix on the host: row offsets, column indices, values.
pub(crate) type Host = (Vec<i32>, Vec<i32>, Vec<f64>);

/// `A x` on the CPU.
fn spmv_cpu((offsets, cols, vals): &Host, x: &[f64]) -> Vec<f64> {
    (0..offsets.len() - 1)
        .map(|r| {
            (offsets[r] as usize..offsets[r + 1] as usize)
                .map(|k| vals[k] * x[cols[k] as usize])
                .sum()
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `iters` iterations of the same loop on the CPU, from `x = 0`.
fn cg_cpu(a: &Host, b: &[f64], iters: usize) -> Vec<f64> {
    let mut x = vec![0.0; b.len()];
    let mut r = b.to_vec();
    let mut p = r.clone();
    let mut rr = dot(&r, &r);
    for _ in 0..iters {
        let q = spmv_cpu(a, &p);
        let alpha = rr / dot(&p, &q);
        for i in 0..x.len() {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        let rr_new = dot(&r, &r);
        let beta = rr_new / rr;
        for i in 0..p.len() {
            p[i] = r[i] + beta * p[i];
        }
        rr = rr_new;
    }
    x
}

/// What a solve gives back.
pub(crate) struct Solved {
    /// The solution of the last repetition.
    pub(crate) x: Vec<f64>,
    /// The iterations of the last repetition.
    pub(crate) iters: usize,
    /// Its residual, `sqrt(r.r)`, as the loop computed it.
    pub(crate) residual: f64,
    /// Each repetition's loop time, ms (as its `cg_um` line prints it).
    pub(crate) loop_ms: Vec<f64>,
}

/// The CG loop on `vectors` (b, x, r, p, q; zeroed) of storage `M`, `b` set to ones first.
fn solve<M: HostVisible>(
    ctx: &Context,
    args: &Args,
    blas: &Blas,
    a: Csr<f64, HostOwned, M>,
    vectors: [um::Result<Managed<[f64], HostOwned, M>>; 5],
    nnz: usize,
) -> Result<Solved, Box<dyn Error>> {
    let rows = a.rows();
    let [b, x, r, p, q] = vectors;
    let (mut b, x, r, p, q) = (b?, x?, r?, p?, q?);
    b.fill(1.0);
    let stream = StreamOptions::new().transfer(args.transfer);
    let out = ctx.with_stream(stream, |s| {
        let mut sparse = Sparse::new(s)?;
        let (a, b) = (a.attach(s)?, b.attach(s)?);
        let (mut x, mut r, mut p, mut q) = (x.attach(s)?, r.attach(s)?, p.attach(s)?, q.attach(s)?);
        let v = Level1::new(rows);
        let mut last = (0, 0.0);
        let mut loop_ms = Vec::with_capacity(args.reps);
        for _ in 0..args.reps {
            // x = 0, r = b, p = r.
            blas.scal(s, &v, 0.0, &mut x)?;
            blas.copy(s, &v, &b, &mut r)?;
            blas.copy(s, &v, &r, &mut p)?;
            let mut rr = blas.dot(s, &v, &r, &r)?;
            let stop = args.tol * rr.sqrt(); // |b| = |r0|
            let t0 = Instant::now();
            let mut k = 0;
            while k < args.iters {
                sparse.spmv(s, Op::N, 1.0, &a, &p, 0.0, &mut q)?; // q = A p
                let alpha = rr / blas.dot(s, &v, &p, &q)?;
                blas.axpy(s, &v, alpha, &p, &mut x)?; // x += alpha p
                blas.axpy(s, &v, -alpha, &q, &mut r)?; // r -= alpha q
                let rr_new = blas.dot(s, &v, &r, &r)?; // the residual, read once
                k += 1;
                let converged = !args.fixed && rr_new.sqrt() <= stop;
                if !converged {
                    blas.scal(s, &v, rr_new / rr, &mut p)?; // p = beta p + r
                    blas.axpy(s, &v, 1.0, &r, &mut p)?;
                }
                rr = rr_new;
                if converged {
                    break;
                }
            }
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            println!(
                "cg_um rows={rows} nnz={nnz} iters={k} loop_ms={ms:.3} residual={:.6e}",
                rr.sqrt()
            );
            last = (k, rr.sqrt());
            loop_ms.push(ms);
        }
        drop((a.sync()?, b.sync()?));
        drop(s.sync_all((r, p, q))?);
        Ok(Solved {
            x: x.sync()?.to_vec(),
            iters: last.0,
            residual: last.1,
            loop_ms,
        })
    })?;
    Ok(out)
}

/// The matrix `host` and five zeroed vectors in the storage `args` names (coherent where the
/// device has concurrent managed access, unified elsewhere, by default), then [`solve`].
pub(crate) fn solve_on(
    ctx: &Context,
    args: &Args,
    blas: &Blas,
    host: &Host,
) -> Result<Solved, Box<dyn Error>> {
    let (offsets, cols, vals) = host;
    let (rows, nnz) = (offsets.len() - 1, cols.len());
    let storage = args
        .storage
        .unwrap_or(if ctx.info().concurrent_managed_access {
            StorageArg::Coherent
        } else {
            StorageArg::Unified
        });
    match storage {
        StorageArg::Unified => {
            let a = Csr::new(ctx, rows, rows, offsets, cols, vals)?;
            let vectors = [(); 5].map(|()| Managed::<[f64]>::zeroed_slice(ctx, rows));
            solve(ctx, args, blas, a, vectors, nnz)
        }
        StorageArg::Coherent => {
            let a = Csr::new_coherent(ctx, rows, rows, offsets, cols, vals)?;
            let vectors = [(); 5].map(|()| Managed::zeroed_slice_coherent(ctx, rows));
            solve(ctx, args, blas, a, vectors, nnz)
        }
        StorageArg::Mirror => {
            let a = Csr::new_mirrored(ctx, rows, rows, offsets, cols, vals)?;
            let vectors = [(); 5].map(|()| Managed::zeroed_slice_mirrored(ctx, rows));
            solve(ctx, args, blas, a, vectors, nnz)
        }
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = args()?;
    let n = args.grid;
    let rows = n * n;
    let host = laplacian(n);
    let ctx = Context::new(0)?;
    let blas = Blas::new(&ctx)?;
    let Solved {
        x,
        iters: done,
        residual,
        mut loop_ms,
    } = solve_on(&ctx, &args, &blas, &host)?;
    if loop_ms.len() > 1 {
        loop_ms.sort_by(f64::total_cmp);
        println!(
            "median loop time of {} repetitions: {:.3} ms",
            loop_ms.len(),
            loop_ms[loop_ms.len() / 2]
        );
    }

    // The CPU's view of the answer: |b - A x| against what the loop computed.
    let b_host = vec![1.0f64; rows];
    let ax = spmv_cpu(&host, &x);
    let true_residual = b_host
        .iter()
        .zip(&ax)
        .map(|(b, y)| (b - y) * (b - y))
        .sum::<f64>()
        .sqrt();
    let b_norm = (rows as f64).sqrt();
    println!(
        "{n}x{n} grid, {done} iterations: |b - A x| / |b| = {:.3e} on the CPU, {:.3e} in the loop",
        true_residual / b_norm,
        residual / b_norm
    );
    if !args.fixed && true_residual > 10.0 * args.tol * b_norm {
        return Err(format!(
            "CG did not converge: |b - A x| / |b| = {:.3e} after {done} iterations (tolerance {:.1e})",
            true_residual / b_norm,
            args.tol
        )
        .into());
    }
    if args.cpu {
        let want = cg_cpu(&host, &b_host, done);
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let worst = x
            .iter()
            .zip(&want)
            .fold(0.0f64, |m, (g, w)| m.max((g - w).abs()));
        println!(
            "largest difference from the CPU's CG: {:.3e} (of {scale:.3e})",
            worst
        );
        // Two runs of one loop in different summation orders: close, not equal.
        if worst > 1e-5 * scale.max(1.0) {
            return Err(format!("the GPU's x differs from the CPU's by {worst:.3e}").into());
        }
    }
    println!("conjugate gradient: ok");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn of(words: &[&str]) -> Result<super::Args, String> {
        parse(words.iter().map(|w| (*w).to_owned()))
    }

    /// A grid whose `N²` rows do not fit 32-bit indices is refused before any matrix is built
    /// (46341² > i32::MAX; 1e10 as a grid would overflow `N²` itself), and so is a tolerance
    /// under which the convergence check would pass vacuously (NaN, infinity, 0, negative).
    #[test]
    fn grids_past_32_bit_indices_and_tolerances_that_are_not_positive_numbers_are_refused() {
        assert!(super::MAX_GRID * super::MAX_GRID <= i32::MAX as usize);
        assert!((super::MAX_GRID + 1) * (super::MAX_GRID + 1) > i32::MAX as usize);
        assert!(of(&["--grid", "46340"]).is_ok());
        for grid in ["46341", "1e10", "1", "nan"] {
            assert!(of(&["--grid", grid]).is_err(), "--grid {grid}");
        }
        for tol in ["nan", "inf", "-inf", "0", "-1e-8"] {
            assert!(of(&["--tol", tol]).is_err(), "--tol {tol}");
        }
        let a = of(&["--tol", "1e-6", "--storage", "mirror"]).expect("valid arguments");
        assert!(a.tol == 1e-6 && matches!(a.storage, Some(super::StorageArg::Mirror)));
        assert!(of(&["--storage", "device"]).is_err());
    }
}
