//! Section 1b: what um's launch paths cost over a raw `cuLaunchKernel`, resolved to a few
//! hundredths of a microsecond.
//!
//! Section 1 runs each implementation in its own process, so the process-to-process spread
//! (about ±0.3 µs per launch on an H200) hides differences of 0.1 µs. Here every variant runs in
//! ONE process, on the same context, kernel and GPU, and the variants take turns batch by batch
//! (the order rotates every round), so that whatever drifts (clocks, other tenants, the
//! driver's queue) drifts for all of them alike. Each round gives one paired difference per um
//! variant, `variant - raw` in µs per launch; the page reports the median of those differences
//! with a distribution-free 95% confidence interval (order statistics of the median, no
//! resampling), and the mean with its normal interval.
//!
//! The raw reference is `cuLaunchKernel` called from Rust through `cust::sys`, on a stream of
//! the same context, with the kernel handle looked up once: no argument packing beyond the
//! pointer array, no check of any kind.

use std::ffi::c_void;
use std::time::Instant;

use cust::sys as cs;
use um::{Context, LaunchConfig, Linear, Managed, StreamOptions};
use um_test_kernels::testing;

use crate::Record;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Launches per timed batch: short enough that the driver's queue never fills within a round
/// (every stream is drained between rounds, untimed), long enough for the clock.
const BATCH: usize = 64;

/// The variants, as the page names them; `raw` is the reference.
pub(crate) const VARIANTS: [&str; 4] = [
    "typed launcher (Linear::for_len)",
    "typed launcher, Linear given (add_scalar_with)",
    "Stream::launch (unsafe)",
    "raw cuLaunchKernel from Rust",
];

/// The order statistics of a sorted sample that bound a 95% confidence interval of its median
/// (normal approximation of the binomial: ranks n/2 ± 1.96 √n / 2).
fn median_ci(sorted: &[f64]) -> (f64, f64) {
    let n = sorted.len() as f64;
    let half = 1.96 * n.sqrt() / 2.0;
    let lo = ((n / 2.0 - half).floor().max(0.0)) as usize;
    let hi = ((n / 2.0 + half).ceil() as usize).min(sorted.len() - 1);
    (sorted[lo], sorted[hi])
}

/// Median, its 95% interval, mean, and the mean's 95% interval (1.96 standard errors).
pub(crate) struct Stats {
    pub(crate) median: f64,
    pub(crate) median_ci: (f64, f64),
    pub(crate) mean: f64,
    pub(crate) mean_ci: (f64, f64),
}

pub(crate) fn stats(v: &[f64]) -> Stats {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    let mean = s.iter().sum::<f64>() / n;
    let var = s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    let se = (var / n).sqrt();
    Stats {
        median: s[s.len() / 2],
        median_ci: median_ci(&s),
        mean,
        mean_ci: (mean - 1.96 * se, mean + 1.96 * se),
    }
}

/// The paired difference of `diffs` (one per round), for a record.
pub(crate) fn paired_of(diffs: &[f64]) -> crate::Paired {
    let d = stats(diffs);
    crate::Paired {
        median: d.median,
        median_ci: d.median_ci,
        mean: d.mean,
        mean_ci: d.mean_ci,
        rounds: diffs.len(),
    }
}

fn ok(r: cs::CUresult, what: &str) -> Res<()> {
    if r == cs::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}").into())
    }
}

/// An error of the raw reference, as um's error type (the closure of `with_stream` returns one).
fn raw_error(call: &'static str, what: impl std::fmt::Debug) -> um::Error {
    um::Error::Driver {
        call,
        code: -1,
        name: format!("{what:?}"),
        description: "the raw reference of the paired launch benchmark".to_owned(),
    }
}

/// `rounds` rounds of every variant; per round, each variant's µs per launch.
fn measure(ctx: &Context, rounds: usize) -> Res<Vec<[f64; 4]>> {
    let kernel = ctx.kernel(testing::PTX, "add_scalar")?;
    // The raw reference: its own module handle, stream and managed allocation, in the context
    // um made current.
    let module = cust::module::Module::from_ptx(testing::PTX, &[])?;
    let function = module.get_function("add_scalar")?;
    let raw_stream = cust::stream::Stream::new(cust::stream::StreamFlags::DEFAULT, None)?;
    let mut raw_ptr: cs::CUdeviceptr = 0;
    let host = cs::CUmemAttach_flags::CU_MEM_ATTACH_HOST as u32;
    // SAFETY: a valid out-pointer; 4 bytes, attached to the host.
    let r = unsafe { cs::cuMemAllocManaged(&mut raw_ptr, 4, host) };
    ok(r, "cuMemAllocManaged")?;
    let single = cs::CUmemAttach_flags::CU_MEM_ATTACH_SINGLE as u32;
    // SAFETY: a live managed allocation and a live stream of the current context.
    let r = unsafe { cs::cuStreamAttachMemAsync(raw_stream.as_inner(), raw_ptr, 0, single) };
    ok(r, "cuStreamAttachMemAsync")?;
    let buf = Managed::from_slice(ctx, &[0.0f32])?;
    let result = ctx.with_stream(StreamOptions::new(), |s| {
        let mut b = buf.attach(s)?;
        let linear = Linear::for_len(s, 1);
        let cfg = LaunchConfig::from(linear);
        let (f, hs) = (function.to_raw(), raw_stream.as_inner());
        let (mut p, mut v, mut n) = (raw_ptr, 1.0f32, 1u32);
        let mut raw = || -> um::Result<()> {
            let mut params: [*mut c_void; 3] = [
                (&raw mut p).cast(),
                (&raw mut v).cast(),
                (&raw mut n).cast(),
            ];
            // SAFETY: add_scalar(float *data, float value, um::len32 n) over its 1 element, on
            // a live stream of the current context; the parameter values outlive the call.
            let r = unsafe {
                cs::cuLaunchKernel(
                    f,
                    1,
                    1,
                    1,
                    256,
                    1,
                    1,
                    0,
                    hs,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            if r == cs::CUresult::CUDA_SUCCESS {
                Ok(())
            } else {
                Err(raw_error("cuLaunchKernel", r))
            }
        };
        // Warm-up: every path once, every stream drained.
        for _ in 0..BATCH {
            testing::add_scalar(s, &mut b, 1.0)?;
            raw()?;
        }
        s.wait_idle()?;
        let mut out = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let mut t = [0.0f64; 4];
            for k in 0..4 {
                let which = (round + k) % 4;
                let t0 = Instant::now();
                for _ in 0..BATCH {
                    match which {
                        0 => testing::add_scalar(s, &mut b, 1.0)?,
                        1 => testing::add_scalar_with(s, linear, &mut b, 1.0)?,
                        // SAFETY: add_scalar(float *data, float value, um::len32 n) over its
                        // 1 element; um::len32 is 4 bytes, as the u32 passed.
                        2 => unsafe { s.launch(&kernel, cfg, (&mut b, 1.0f32, 1u32)) }?,
                        _ => raw()?,
                    }
                }
                t[which] = t0.elapsed().as_secs_f64() * 1e6 / BATCH as f64;
            }
            s.wait_idle()?;
            if let Err(e) = raw_stream.synchronize() {
                return Err(raw_error("cuStreamSynchronize", e));
            }
            out.push(t);
        }
        b.sync()?;
        Ok(out)
    });
    let _ = raw_stream.synchronize();
    // SAFETY: the stream was drained; freed once.
    ok(unsafe { cs::cuMemFree_v2(raw_ptr) }, "cuMemFree")?;
    Ok(result?)
}

/// Section 1b's records: per variant, its µs per launch (median of rounds, min), and for the um
/// variants the paired difference to the raw call with its intervals.
pub(crate) fn launch_paired(ctx: &Context, rounds: usize) -> Res<Vec<Record>> {
    println!("launch_paired: {rounds} rounds of {BATCH} launches per variant, interleaved");
    let samples = measure(ctx, rounds)?;
    let mut out = Vec::new();
    for (i, name) in VARIANTS.iter().enumerate() {
        let own: Vec<f64> = samples.iter().map(|t| t[i]).collect();
        let s = stats(&own);
        let min = own.iter().copied().fold(f64::INFINITY, f64::min);
        let diff = (i < 3).then(|| {
            let d: Vec<f64> = samples.iter().map(|t| t[i] - t[3]).collect();
            stats(&d)
        });
        println!(
            "  {name}: median {:.3} µs{}",
            s.median,
            diff.as_ref().map_or(String::new(), |d| format!(
                ", vs raw median {:+.3} µs (95% CI {:+.3} .. {:+.3}), mean {:+.3} µs (95% CI {:+.3} .. {:+.3})",
                d.median, d.median_ci.0, d.median_ci.1, d.mean, d.mean_ci.0, d.mean_ci.1
            ))
        );
        out.push(Record {
            scenario: "launch_paired",
            imp: "um".to_owned(),
            variant: (*name).to_owned(),
            mib: 0,
            bytes: 0,
            threads: 1,
            median: s.median,
            min,
            unit: "us",
            paired: diff.map(|d| crate::Paired {
                median: d.median,
                median_ci: d.median_ci,
                mean: d.mean,
                mean_ci: d.mean_ci,
                rounds,
            }),
        });
    }
    Ok(out)
}
