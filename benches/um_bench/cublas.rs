//! Section 8: cuBLAS on owned buffers. GEMM time per call through um-cublas against
//! CUDA C++ (`bench/cublas_baseline.cpp`, cuBLAS on `cuMemAlloc` memory, run as a subprocess
//! between the Rust measurements of each round), and the host time per call of
//! `Blas::gemm` against a raw `cublasSgemm_v2` from Rust in the same process, interleaved.
//!
//! GEMM time: the host clock around ITERS calls and a `Stream::wait_idle`, per call, in both
//! programs. Variants:
//! * `um mirror`: `MirroredManaged` buffers, whose device half is plain `cuMemAlloc` memory,
//!   attached once before the clock: the same memory the C++ program uses (the goal compares
//!   these);
//! * `um unified, prefetched` / `um unified, on demand`: managed memory that the host has just
//!   written (its pages on the host), attached inside the clock to a stream with
//!   `Transfer::Prefetch` or `Transfer::OnDemand`: what the calls cost a program that prepares
//!   its inputs on the CPU, migration included, per call;
//! * `um mirror, fresh process`: the `um mirror` samples taken in a fresh process of this
//!   benchmark (`um_bench --child cublas ...`, [`child`]) run beside the C++ program in each
//!   round: both programs then start from the same process state (the long-lived process has
//!   run the earlier sections, with their pools, pinned memory, streams and handles), which is
//!   what the goal compares.
//!
//! Both programs print the cuBLAS files their process mapped (`/proc/self/maps`), so the page
//! can say whether they ran the same `libcublas` and `libcublasLt`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use um::{Context, Managed, MirroredManaged, StreamOptions, Transfer};
use um_cublas::{Blas, Cublas, Element, Gemm};

use crate::cpp;
use crate::cpp_lib::{self, CppGemm};
use crate::paired::stats;
use crate::{Paired, Record};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The shapes, `(m, n, k)`: square, then tall-skinny both ways.
pub(crate) const SHAPES: [(usize, usize, usize); 8] = [
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (16384, 64, 64),
    (64, 16384, 64),
];

/// Samples per round and variant.
const SAMPLES: usize = 5;

/// The um variants, as the page names them, and the C++ program's.
pub(crate) const MIRROR: &str = "um mirror";
const PREFETCHED: &str = "um unified, prefetched";
const ON_DEMAND: &str = "um unified, on demand";
const CPP: &str = "cpp cuMemAlloc";
/// The raw `cublas{S,D}gemm_v2` from Rust on the mirrors' device halves, same process.
const RAW: &str = "raw from Rust, mirror";
/// `MIRROR` in a fresh process of this benchmark, run beside the C++ program.
pub(crate) const FRESH: &str = "um mirror, fresh process";
/// `RAW` in that fresh process.
const RAW_FRESH: &str = "raw from Rust, mirror, fresh process";
/// The C++ baseline's batch loaded into the long-lived process, taking turns with `MIRROR`.
const CPP_HERE: &str = "cpp cuMemAlloc, in the long-lived process";
/// The C++ baseline's batch loaded into the fresh process, taking turns with `FRESH`: the
/// goal's reference where it was measured.
pub(crate) const CPP_FRESH: &str = "cpp cuMemAlloc, in the fresh process";
/// `MIRROR` over `CPP_HERE`, round by round (the median of the rounds' ratios).
const RATIO_HERE: &str = "um mirror / cpp, in the long-lived process";
/// `FRESH` over `CPP_FRESH`, process by process (the median of the processes' ratios): the
/// goal's figure where it was measured.
pub(crate) const RATIO_FRESH: &str = "um mirror / cpp, in the fresh process";

/// The cuBLAS files this process has mapped (`/proc/self/maps`: `libcublas` and
/// `libcublasLt`, by path), sorted and joined with `;`, as `bench/cublas_baseline.cpp` prints
/// them for its process: the soname a program asks for does not say which file it got.
pub(crate) fn cublas_files() -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut files: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.find('/').map(|i| &l[i..]))
        .filter(|f| f.contains("libcublas"))
        .collect();
    files.sort_unstable();
    files.dedup();
    files.join(";")
}

/// `um_bench --child cublas DTYPE M N K ITERS`: the `um mirror` samples (and the raw call's,
/// and the in-process C++ baseline's where one is named, taking turns) of one shape in this
/// fresh process, as one JSON line:
/// `{"median":..,"min":..,"raw_median":..,"raw_min":..,"enqueue":..,"raw_enqueue":..,["cpp_median":..,"cpp_min":..,"cpp_enqueue":..,]"libs":".."}`
/// (µs per call; `enqueue`: until the last call returned, before the wait).
pub(crate) fn child(ctx: &Context, args: &[String]) -> Res<String> {
    let s = gemm_child(
        ctx,
        args,
        "cublas DTYPE M N K ITERS",
        mirror_samples::<f32>,
        mirror_samples::<f64>,
    )?;
    let (um, raw) = (&s[0], &s[1]);
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    // The C++ batch's, where it took turns here.
    let cpp = s.get(2).map_or(String::new(), |c| {
        format!(
            ",\"cpp_median\":{:.4},\"cpp_min\":{:.4},\"cpp_enqueue\":{:.4}",
            stats(&c.per_call).median,
            min(&c.per_call),
            stats(&c.enqueue).median
        )
    });
    // `enqueue`: the host's time per call until the last call returned, before the wait (near
    // `median` where the host paces the stream).
    Ok(format!(
        "{{\"median\":{:.4},\"min\":{:.4},\"raw_median\":{:.4},\"raw_min\":{:.4},\"enqueue\":{:.4},\"raw_enqueue\":{:.4}{cpp},\"libs\":\"{}\"}}",
        stats(&um.per_call).median,
        min(&um.per_call),
        stats(&raw.per_call).median,
        min(&raw.per_call),
        stats(&um.enqueue).median,
        stats(&raw.enqueue).median,
        cublas_files()
    ))
}

/// One GEMM measurement of one element type: (context, handle, shape, calls per batch).
type GemmRun<R> = fn(&Context, &Blas, (usize, usize, usize), usize) -> Res<R>;

/// A GEMM child's `DTYPE M N K ITERS`: `Blas` made, then the `f32` or the `f64` variant of
/// the measurement run with the shape and the calls per batch.
fn gemm_child<R>(
    ctx: &Context,
    args: &[String],
    usage: &str,
    f32_run: GemmRun<R>,
    f64_run: GemmRun<R>,
) -> Res<R> {
    let [dtype, m, n, k, iters] = args else {
        return Err(format!("expected `{usage}`").into());
    };
    let shape = (m.parse()?, n.parse()?, k.parse()?);
    let iters: usize = iters.parse()?;
    let blas = Blas::new(ctx)?;
    match dtype.as_str() {
        "f32" => f32_run(ctx, &blas, shape, iters),
        "f64" => f64_run(ctx, &blas, shape, iters),
        other => Err(format!("no dtype {other:?} (f32 or f64)").into()),
    }
}

/// The GEMM's three mirrored buffers, host-owned: `a` (m×k) and `b` (k×n) of `value`, `c`
/// (m×n) of zeros.
fn gemm_mirrors<T: Num>(
    ctx: &Context,
    (m, n, k): (usize, usize, usize),
) -> um::Result<[MirroredManaged<[T]>; 3]> {
    Ok([
        Managed::from_fn_mirrored(ctx, m * k, |i| T::of(value(i)))?,
        Managed::from_fn_mirrored(ctx, k * n, |i| T::of(value(i)))?,
        Managed::from_fn_mirrored(ctx, m * n, |_| T::of(0.0))?,
    ])
}

/// What the matrices hold (the C++ program's `value`).
fn value(i: usize) -> f64 {
    ((i * 7 + 3) % 11) as f64 * 0.125 - 0.625
}

/// Calls per sample: about 40 GFLOP of work, at least 3 and at most 1000 calls.
fn iters(m: usize, n: usize, k: usize) -> usize {
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    ((4e10 / flops) as usize).clamp(3, 1000)
}

fn shape_name(dtype: &str, (m, n, k): (usize, usize, usize)) -> String {
    format!("{dtype} {m}x{n}x{k}")
}

trait Num: Element {
    const NAME: &'static str;
    fn of(v: f64) -> Self;
}
impl Num for f32 {
    const NAME: &'static str = "f32";
    fn of(v: f64) -> Self {
        v as f32
    }
}
impl Num for f64 {
    const NAME: &'static str = "f64";
    fn of(v: f64) -> Self {
        v
    }
}

/// Per-call µs of `SAMPLES` samples, mirrored (device-resident) buffers.
/// A cuBLAS handle of the bench's own, bound to one stream, making the raw `cublas{S,D}gemm`
/// calls that um-cublas makes, for the same-process reference of 8a and 8b.
struct RawGemm {
    api: um_cublas::sys::Api,
    handle: um_cublas::sys::Handle,
}

impl RawGemm {
    /// A handle of the current context, bound to `stream`; the caller drops it before the
    /// stream's scope ends, with the stream drained.
    fn new(stream: *mut std::ffi::c_void) -> um::Result<Self> {
        let api = *Cublas::load()
            .map_err(|e| raw_error("cuBLAS", format!("{e}")))?
            .api();
        let mut handle: um_cublas::sys::Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer, in the current context (the caller made it current).
        let st = unsafe { (api.create)(&mut handle) };
        if st != 0 {
            return Err(raw_error("cublasCreate_v2", st));
        }
        let raw = RawGemm { api, handle };
        // SAFETY: a live handle and a live stream of the current context, which outlives the
        // handle (the caller's promise).
        let st = unsafe { (api.set_stream)(handle, stream) };
        if st != 0 {
            return Err(raw_error("cublasSetStream_v2", st));
        }
        Ok(raw)
    }

    /// `c = a b` (`m`×`k` times `k`×`n`, tight column-major) with `cublasSgemm_v2` (`f32`)
    /// or `cublasDgemm_v2` (`f64`).
    ///
    /// # Safety
    /// `a`, `b` and `c` are device addresses of at least `m*k`, `k*n` and `m*n` `T`s that only
    /// the handle's stream uses, `c` none of the inputs.
    unsafe fn gemm<T: Num>(
        &self,
        (m, n, k): (usize, usize, usize),
        a: *const T,
        b: *const T,
        c: *mut T,
    ) -> um::Result<()> {
        let (one, zero) = (T::of(1.0), T::of(0.0));
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let f = if T::NAME == "f32" {
            self.api.sgemm
        } else {
            self.api.dgemm
        };
        // SAFETY: the caller's promise; the scalars are host locals of `T` (host pointer mode,
        // cuBLAS's default), the entry point the one for `T`.
        let st = unsafe {
            f(
                self.handle,
                0,
                0,
                mi,
                ni,
                ki,
                (&raw const one).cast(),
                a.cast(),
                mi,
                b.cast(),
                ki,
                (&raw const zero).cast(),
                c.cast(),
                mi,
            )
        };
        if st == 0 {
            Ok(())
        } else {
            Err(raw_error("cublas{S,D}gemm_v2", st))
        }
    }
}

impl RawGemm {
    /// Binds the handle to `stream` (`cublasSetStream_v2`), a live stream of the current
    /// context.
    fn bind(&self, stream: *mut std::ffi::c_void) -> um::Result<()> {
        // SAFETY: a live handle; the caller's live stream.
        let st = unsafe { (self.api.set_stream)(self.handle, stream) };
        if st == 0 {
            Ok(())
        } else {
            Err(raw_error("cublasSetStream_v2", st))
        }
    }

    /// Waits for `stream` (`cuStreamSynchronize`), a live stream of the current context.
    fn synchronize(&self, stream: *mut std::ffi::c_void) -> um::Result<()> {
        // SAFETY: the caller's live stream.
        let r = unsafe { cust::sys::cuStreamSynchronize(stream.cast()) };
        if r == cust::sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(raw_error("cuStreamSynchronize", format!("{r:?}")))
        }
    }
}

impl Drop for RawGemm {
    fn drop(&mut self) {
        // SAFETY: the handle is destroyed once; the caller drained its stream.
        unsafe {
            let _ = (self.api.destroy)(self.handle);
        }
    }
}

/// What one batch of a GEMM measurement calls, `iters` times on one stream and the same
/// mirrored buffers.
#[derive(Clone, Copy, PartialEq)]
enum Turn {
    /// `Blas::gemm`.
    Um,
    /// `cublas{S,D}gemm_v2` through the bench's own handle, bound to the stream.
    Raw,
    /// The raw call through `Blas`'s handle (`raw_handle_on`, once per batch).
    RawUmHandle,
    /// The raw call through the bench's handle, after what `Blas::gemm` asks first: the
    /// context made current, the stream's poison mark, the three owners.
    RawChecks,
    /// `bench/cublas_baseline.cpp`'s batch, loaded into this process ([`CppGemm`]): its own
    /// stream, handle and `cuMemAlloc` buffers, timed by the C++ side.
    Cpp,
    /// The C++ batch with its handle on this side's stream and mirrored buffers.
    CppOnUm,
    /// The raw call through the bench's handle on the C++ side's stream and buffers.
    RawOnCpp,
}

/// One turn's samples: µs per call, and µs per call until the last call returned (before the
/// wait: near the first where the host paces the stream).
#[derive(Clone, Default)]
struct Samples {
    per_call: Vec<f64>,
    enqueue: Vec<f64>,
}

/// `samples` samples of each of `turns`, batch by batch in an order that rotates every sample,
/// on mirrored buffers attached before the clock, after two calls of each (untimed).
fn turns<T: Num>(
    ctx: &Context,
    blas: &Blas,
    (m, n, k): (usize, usize, usize),
    iters: usize,
    turns: &[Turn],
    samples: usize,
) -> Res<Vec<Samples>> {
    let [a, b, c] = gemm_mirrors::<T>(ctx, (m, n, k))?;
    let g = Gemm::<T>::new(m, n, k);
    Ok(ctx.with_stream(StreamOptions::new(), |s| {
        let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
        ctx.make_current()?;
        let raw = RawGemm::new(s.as_raw())?;
        // The C++ side's own stream and buffers, made with um's context current.
        let cpp = if turns
            .iter()
            .any(|t| [Turn::Cpp, Turn::CppOnUm, Turn::RawOnCpp].contains(t))
        {
            CppGemm::open(T::NAME == "f64", (m, n, k))
                .map_err(|e| raw_error("the C++ baseline in this process", e))?
        } else {
            None
        };
        let (pa, pb) = (a.as_device_ptr().as_ptr(), b.as_device_ptr().as_ptr());
        let pc = c.as_device_ptr_mut().as_mut_ptr();
        let mut out = vec![Samples::default(); turns.len()];
        // Two untimed calls of each, then the samples.
        for sample in 0..=samples {
            for j in 0..turns.len() {
                let which = (sample + j) % turns.len();
                let turn = turns[which];
                // For `Turn::RawUmHandle`: `Blas`'s handle, bound to `s`, for this batch only
                // (`blas` is not used until the batch has ended). Never dropped, an early return
                // included: the handle is `Blas`'s.
                let raw_um = if turn == Turn::RawUmHandle {
                    // SAFETY: used on this thread, on `s`, left bound and in host pointer mode,
                    // on buffers `s` owns, and not after the batch.
                    let handle = unsafe { blas.raw_handle_on(s)? };
                    Some(std::mem::ManuallyDrop::new(RawGemm {
                        api: raw.api,
                        handle,
                    }))
                } else {
                    None
                };
                let calls = if sample == 0 { 2 } else { iters };
                if [Turn::Cpp, Turn::CppOnUm].contains(&turn) {
                    let Some(cpp) = &cpp else {
                        return Err(raw_error("the C++ baseline", "no library named"));
                    };
                    let (dt, enqueued) = if turn == Turn::Cpp {
                        cpp.batch(calls)
                    } else {
                        let abc = [pa as u64, pb as u64, pc as u64];
                        // SAFETY: `s` is idle (drained after every batch) and of the current
                        // context; the buffers hold the shape, and nothing else runs meanwhile.
                        unsafe { cpp.batch_on(s.as_raw(), abc, calls) }
                    }
                    .map_err(|e| raw_error("the C++ baseline in this process", e))?;
                    if sample > 0 {
                        out[which].per_call.push(dt);
                        out[which].enqueue.push(enqueued);
                    }
                    continue;
                }
                // For `Turn::RawOnCpp`: the bench's handle bound to the C++ side's stream, and
                // that stream and its buffers.
                let on_cpp = match (&cpp, turn) {
                    (Some(c), Turn::RawOnCpp) => {
                        let (stream, [a, b, c]) = c.parts();
                        raw.bind(stream)?;
                        Some((stream, a as *const T, b as *const T, c as *mut T))
                    }
                    _ => None,
                };
                let t0 = Instant::now();
                for _ in 0..calls {
                    match turn {
                        Turn::RawOnCpp => {
                            if let Some((_, a, b, c)) = on_cpp {
                                // SAFETY: the C++ side's buffers of the shape, on its stream,
                                // idle and used by nothing else during the batch.
                                unsafe { raw.gemm::<T>((m, n, k), a, b, c)? }
                            }
                        }
                        Turn::Um => blas.gemm(s, &g, &a, &b, &mut c)?,
                        // SAFETY: the buffers are owned by `s`, the handle's stream, and hold
                        // the shape's elements (made above); `c` is none of the inputs.
                        Turn::Raw => unsafe { raw.gemm::<T>((m, n, k), pa, pb, pc)? },
                        Turn::RawUmHandle => {
                            if let Some(h) = &raw_um {
                                // SAFETY: as above; `Blas`'s handle is bound to `s` for this
                                // batch.
                                unsafe { h.gemm::<T>((m, n, k), pa, pb, pc)? }
                            }
                        }
                        Turn::Cpp | Turn::CppOnUm => {}
                        Turn::RawChecks => {
                            ctx.make_current()?;
                            if s.is_poisoned() {
                                return Err(um::Error::StreamPoisoned);
                            }
                            // The owners are compared, as `Blas::gemm` compares them; they
                            // cannot differ here (attached to `s` above).
                            std::hint::black_box(s.owns(&a) && s.owns(&b) && s.owns(&c));
                            // SAFETY: as for `Turn::Raw`.
                            unsafe { raw.gemm::<T>((m, n, k), pa, pb, pc)? }
                        }
                    }
                }
                let enqueued = t0.elapsed().as_secs_f64() * 1e6 / calls as f64;
                s.wait_idle()?;
                if let Some((stream, ..)) = on_cpp {
                    // The C++ side's stream drained, and the handle back on `s`.
                    raw.synchronize(stream)?;
                    raw.bind(s.as_raw())?;
                }
                let dt = t0.elapsed().as_secs_f64() * 1e6 / calls as f64;
                if sample > 0 {
                    out[which].per_call.push(dt);
                    out[which].enqueue.push(enqueued);
                }
            }
        }
        drop(raw);
        drop(cpp);
        s.sync_all((a, b, c)).map(drop)?;
        Ok(out)
    })?)
}

/// Per-call µs of `SAMPLES` samples of mirrored buffers attached before the clock: um-cublas's
/// `Blas::gemm` and, batch by batch in rotating order on the same stream and buffers, the raw
/// call from Rust through the bench's own handle, and, where bench.sh built it, the C++
/// baseline's batch in this process. `[um, raw]` or `[um, raw, C++]`.
fn mirror_samples<T: Num>(
    ctx: &Context,
    blas: &Blas,
    shape: (usize, usize, usize),
    iters: usize,
) -> Res<Vec<Samples>> {
    let which: &[Turn] = if cpp_lib::gemm_named() {
        &[Turn::Um, Turn::Raw, Turn::Cpp]
    } else {
        &[Turn::Um, Turn::Raw]
    };
    turns::<T>(ctx, blas, shape, iters, which, SAMPLES)
}

/// Per-call µs of `SAMPLES` samples, unified memory written by the host before each sample and
/// attached inside the clock with `transfer`.
fn unified_samples<T: Num>(
    ctx: &Context,
    blas: &Blas,
    (m, n, k): (usize, usize, usize),
    iters: usize,
    transfer: Transfer,
) -> Res<Vec<f64>> {
    let mut a = Managed::from_fn(ctx, m * k, |i| T::of(value(i)))?;
    let mut b = Managed::from_fn(ctx, k * n, |i| T::of(value(i)))?;
    let mut c = Managed::from_fn(ctx, m * n, |_| T::of(0.0))?;
    let g = Gemm::<T>::new(m, n, k);
    let mut out = Vec::with_capacity(SAMPLES);
    for sample in 0..=SAMPLES {
        // The host writes the inputs: their pages are on the host when the clock starts.
        a.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = T::of(value(i)));
        b.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = T::of(value(i)));
        let options = StreamOptions::new().transfer(transfer);
        let (dt, back) = ctx.with_stream(options, |s| {
            let t0 = Instant::now();
            let (da, db, mut dc) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
            for _ in 0..iters {
                blas.gemm(s, &g, &da, &db, &mut dc)?;
            }
            s.wait_idle()?;
            let dt = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
            Ok((dt, s.sync_all((da, db, dc))?))
        })?;
        (a, b, c) = back;
        // The first round is a warm-up (cuBLAS's kernels, the first faults).
        if sample > 0 {
            out.push(dt);
        }
    }
    Ok(out)
}

/// One C++ run: (median, min) µs per call.
fn cpp_gemm(
    exe: &PathBuf,
    dtype: &str,
    (m, n, k): (usize, usize, usize),
    iters: usize,
) -> Res<(f64, f64)> {
    let out = Command::new(exe)
        .args(["gemm", dtype])
        .args([m, n, k, iters, SAMPLES].map(|v| v.to_string()))
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(libs) = cpp::field(&line, "libs") {
        note_files("C++", libs);
    }
    Ok((
        cpp::number(&line, "median_us")?,
        cpp::number(&line, "min_us")?,
    ))
}

/// Prints a process's cuBLAS files the first time they are seen, or when they change.
fn note_files(who: &str, files: &str) {
    use std::sync::Mutex;
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let line = format!("{who}: {files}");
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !seen.contains(&line) {
        println!("  cuBLAS files of {line}");
        seen.push(line);
    }
}

/// One fresh-process run: (median, min) of `Blas::gemm`, of the raw call, and of the C++
/// baseline in that process where it took turns there.
type Fresh = ((f64, f64), (f64, f64), Option<(f64, f64)>);

/// One fresh-process run of the um side ([`Fresh`]).
fn fresh_gemm(dtype: &str, (m, n, k): (usize, usize, usize), iters: usize) -> Res<Fresh> {
    let line = crate::runs::child_output(&[
        "cublas",
        dtype,
        &m.to_string(),
        &n.to_string(),
        &k.to_string(),
        &iters.to_string(),
    ])?;
    if let Some(libs) = cpp::field(&line, "libs") {
        note_files("um (fresh process)", libs);
    }
    Ok((
        (cpp::number(&line, "median")?, cpp::number(&line, "min")?),
        (
            cpp::number(&line, "raw_median")?,
            cpp::number(&line, "raw_min")?,
        ),
        match cpp::field(&line, "cpp_median") {
            Some(_) => Some((
                cpp::number(&line, "cpp_median")?,
                cpp::number(&line, "cpp_min")?,
            )),
            None => None,
        },
    ))
}

/// Medians and minima of the rounds of one (shape, implementation).
#[derive(Default)]
struct Rounds {
    medians: Vec<f64>,
    min: f64,
}

impl Rounds {
    fn add(&mut self, median: f64, min: f64) {
        if self.medians.is_empty() || min < self.min {
            self.min = min;
        }
        self.medians.push(median);
    }
    fn add_samples(&mut self, samples: &[f64]) {
        let s = stats(samples);
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        self.add(s.median, min);
    }
    fn record(&self, variant: &str, imp: &str, iters: usize) -> Option<Record> {
        if self.medians.is_empty() {
            return None;
        }
        Some(Record {
            scenario: "cublas",
            imp: imp.to_owned(),
            variant: variant.to_owned(),
            mib: 0,
            bytes: 0,
            threads: iters,
            median: stats(&self.medians).median,
            min: self.min,
            unit: "us",
            paired: None,
        })
    }
}

fn gemm_shape<T: Num>(
    ctx: &Context,
    blas: &Blas,
    cpp: Option<&PathBuf>,
    shape: (usize, usize, usize),
    rounds: usize,
) -> Res<Vec<Record>> {
    let (m, n, k) = shape;
    let it = iters(m, n, k);
    let name = shape_name(T::NAME, shape);
    let mut r: [Rounds; 11] = Default::default();
    for _ in 0..rounds {
        let s = mirror_samples::<T>(ctx, blas, shape, it)?;
        r[0].add_samples(&s[0].per_call);
        r[4].add_samples(&s[1].per_call);
        if let Some(c) = s.get(2) {
            r[7].add_samples(&c.per_call);
            // um over C++, this round's medians, in this process.
            let ratio = stats(&s[0].per_call).median / stats(&c.per_call).median;
            r[9].add(ratio, ratio);
        }
        if let Some(exe) = cpp {
            let (med, min) = cpp_gemm(exe, T::NAME, shape, it)?;
            r[3].add(med, min);
        }
        // The same samples in a fresh process, right after the C++ one.
        let (um, raw, cpp_there) = fresh_gemm(T::NAME, shape, it)?;
        r[5].add(um.0, um.1);
        r[6].add(raw.0, raw.1);
        if let Some(c) = cpp_there {
            r[8].add(c.0, c.1);
            // um over C++ in that one fresh process.
            r[10].add(um.0 / c.0, um.0 / c.0);
        }
        r[1].add_samples(&unified_samples::<T>(
            ctx,
            blas,
            shape,
            it,
            Transfer::Prefetch,
        )?);
        r[2].add_samples(&unified_samples::<T>(
            ctx,
            blas,
            shape,
            it,
            Transfer::OnDemand,
        )?);
    }
    let out: Vec<Record> = [
        MIRROR,
        PREFETCHED,
        ON_DEMAND,
        CPP,
        RAW,
        FRESH,
        RAW_FRESH,
        CPP_HERE,
        CPP_FRESH,
        RATIO_HERE,
        RATIO_FRESH,
    ]
    .iter()
    .zip(&r)
    .filter_map(|(imp, r)| {
        let mut rec = r.record(&name, imp, it)?;
        if [RATIO_HERE, RATIO_FRESH].contains(imp) {
            rec.unit = "ratio";
        }
        Some(rec)
    })
    .collect();
    for rec in &out {
        println!("  {name} {}: {:.3} {}", rec.imp, rec.median, rec.unit);
    }
    Ok(out)
}

/// Section 8a's records: every shape, f32 and f64, every variant, `rounds` rounds.
pub(crate) fn gemm(
    ctx: &Context,
    cpp: Option<&PathBuf>,
    rounds: usize,
    free: usize,
) -> Res<Vec<Record>> {
    let blas = Blas::new(ctx)?;
    println!(
        "cublas: cuBLAS {:?} from {}",
        blas.library().version(),
        blas.library().path().display()
    );
    note_files("um (this process)", &cublas_files());
    let mut out = Vec::new();
    for shape in SHAPES {
        for f64s in [false, true] {
            let elem = if f64s { 8 } else { 4 };
            let (m, n, k) = shape;
            // Mirror (both halves), unified, and the C++ program's at once.
            let need = (m * k + k * n + m * n) * elem * 4;
            if need > free / 2 {
                println!(
                    "skipping {}: {need} bytes is more than half the free memory",
                    shape_name(if f64s { "f64" } else { "f32" }, shape)
                );
                continue;
            }
            if f64s {
                out.extend(gemm_shape::<f64>(ctx, &blas, cpp, shape, rounds)?);
            } else {
                out.extend(gemm_shape::<f32>(ctx, &blas, cpp, shape, rounds)?);
            }
        }
    }
    Ok(out)
}

/// Calls per timed batch of the paired host-time measurement.
const BATCH: usize = 64;

/// The variants of 8b, as the page names them; the raw call is the reference.
pub(crate) const PAIRED: [&str; 2] = ["Blas::gemm (um-cublas)", "raw cublasSgemm_v2 from Rust"];

fn raw_error(call: &'static str, status: impl std::fmt::Display) -> um::Error {
    um::Error::Library {
        library: "the raw cuBLAS reference",
        message: format!("{call} returned status {status}"),
    }
}

/// Section 8b: host µs per call, um-cublas against the raw entry point of the same library,
/// on the same stream and buffers, batch by batch in rotating order.
pub(crate) fn host_paired(ctx: &Context, rounds: usize) -> Res<Vec<Record>> {
    let (m, n, k) = (64, 64, 64);
    let blas = Blas::new(ctx)?;
    let a = Managed::from_fn(ctx, m * k, |i| value(i) as f32)?;
    let b = Managed::from_fn(ctx, k * n, |i| value(i) as f32)?;
    let c = Managed::from_fn(ctx, m * n, |_| 0.0f32)?;
    let g = Gemm::<f32>::new(m, n, k);
    println!(
        "cublas_paired: {rounds} rounds of {BATCH} calls per variant, {m}x{n}x{k} f32, interleaved"
    );
    let samples = ctx.with_stream(StreamOptions::new(), |s| {
        let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
        ctx.make_current()?;
        let handle = RawGemm::new(s.as_raw())?;
        let (pa, pb) = (a.as_device_ptr().as_ptr(), b.as_device_ptr().as_ptr());
        let pc = c.as_device_ptr_mut().as_mut_ptr();
        // SAFETY: the three buffers are owned by `s`, the raw handle's stream, and hold 64x64
        // floats each; `c` is none of the inputs.
        let raw = || unsafe { handle.gemm::<f32>((m, n, k), pa, pb, pc) };
        for _ in 0..BATCH {
            blas.gemm(s, &g, &a, &b, &mut c)?;
            raw()?;
        }
        s.wait_idle()?;
        let mut out = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let mut t = [0.0f64; 2];
            for j in 0..2 {
                let which = (round + j) % 2;
                let t0 = Instant::now();
                for _ in 0..BATCH {
                    if which == 0 {
                        blas.gemm(s, &g, &a, &b, &mut c)?;
                    } else {
                        raw()?;
                    }
                }
                t[which] = t0.elapsed().as_secs_f64() * 1e6 / BATCH as f64;
                s.wait_idle()?;
            }
            out.push(t);
        }
        s.wait_idle()?;
        drop(handle);
        s.sync_all((a, b, c)).map(drop)?;
        Ok(out)
    })?;
    let mut out = Vec::new();
    for (i, name) in PAIRED.iter().enumerate() {
        let own: Vec<f64> = samples.iter().map(|t| t[i]).collect();
        let s = stats(&own);
        let min = own.iter().copied().fold(f64::INFINITY, f64::min);
        let diff =
            (i == 0).then(|| stats(&samples.iter().map(|t| t[0] - t[1]).collect::<Vec<_>>()));
        println!(
            "  {name}: median {:.3} µs per call{}",
            s.median,
            diff.as_ref().map_or(String::new(), |d| format!(
                ", vs raw median {:+.3} µs (95% CI {:+.3} .. {:+.3})",
                d.median, d.median_ci.0, d.median_ci.1
            ))
        );
        out.push(Record {
            scenario: "cublas_paired",
            imp: "um".to_owned(),
            variant: (*name).to_owned(),
            mib: 0,
            bytes: 0,
            threads: 1,
            median: s.median,
            min,
            unit: "us",
            paired: diff.map(|d| Paired {
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

/// Section 8 of the page, and its goals.
pub(crate) fn section(
    md: &mut String,
    records: &[Record],
    goals: &mut Vec<(String, String, bool)>,
) {
    let gemm: Vec<&Record> = records.iter().filter(|r| r.scenario == "cublas").collect();
    let paired: Vec<&Record> = records
        .iter()
        .filter(|r| r.scenario == "cublas_paired")
        .collect();
    if gemm.is_empty() && paired.is_empty() {
        return;
    }
    let first_goal = goals.len();
    let _ = writeln!(
        md,
        "\n## 8. cuBLAS on owned buffers\n\n`um-cublas`'s `Blas::gemm` (cuBLAS loaded at run time) against CUDA C++ (`bench/cublas_baseline.cpp`: `cublasSgemm`/`cublasDgemm` on `cuMemAlloc` memory, one stream), column-major, no transposes, `alpha = 1`, `beta = 0`. µs per call: the host clock around a batch of calls and a stream synchronize, on both sides ({SAMPLES} samples per round and variant). `um mirror`: mirrored buffers, whose device half is `cuMemAlloc` memory, attached before the clock. `raw from Rust`: `cublasSgemm_v2`/`cublasDgemm_v2` called from the same process through the same loaded library (a handle of its own, bound to the same stream), on the same buffers. **C++ in the same process**: the C++ baseline built a second time as a shared library, whose batch (its own stream, handle and `cuMemAlloc` buffers, timed by the C++ side) takes its turn between um's and the raw call's batches, the order rotating every sample: where the host paces the stream, a program's time per call depends on the host speed its process drew (`bench/notes.md`), so only sides measured in one process resolve the goal's 2%. `fresh process`: these three taken in a fresh process of the benchmark, one per round (the long-lived process has run the earlier sections); the goal compares um with the C++ batch of that same fresh process: its ratio is the median, over the rounds, of each process's own ratio (in the long-lived process, of each round's). `C++, own process`: the C++ program run as a process of its own between the Rust variants of each round. `um unified`: managed memory the host has just written, attached inside the clock to a stream with `Transfer::Prefetch` or `Transfer::OnDemand`, so the per-call figure includes moving the inputs to the GPU, spread over the batch (calls per batch in the last column). Both programs print the cuBLAS files their process mapped.\n\n### 8a. GEMM time per call\n\n| shape (m×n×k) | um mirror, fresh process, µs | C++ in that process, µs | um / C++, same process | raw from Rust, fresh process, µs | um / raw, fresh | C++, own process, µs | fresh / C++ own process | um mirror, long-lived process, µs | C++ in the long-lived process, µs | long-lived um / C++ | unified, prefetched, µs | unified, on demand, µs | calls per batch |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut shapes: Vec<&str> = Vec::new();
    for r in &gemm {
        if !shapes.contains(&r.variant.as_str()) {
            shapes.push(&r.variant);
        }
    }
    for shape in shapes {
        let get = |imp: &str| gemm.iter().find(|r| r.variant == shape && r.imp == imp);
        let cell = |imp: &str| get(imp).map_or("n/a".to_owned(), |r| format!("{:.2}", r.median));
        let ratio = |num: &str, den: &str| match (get(num), get(den)) {
            (Some(u), Some(c)) => Some(u.median / c.median),
            _ => None,
        };
        // The median of the per-process (per-round) ratios where recorded: the two sides of
        // one ratio then share a process.
        let paired =
            |rec: &str, num: &str, den: &str| get(rec).map(|r| r.median).or(ratio(num, den));
        let show = |r: Option<f64>| r.map_or("n/a".to_owned(), |r| format!("{r:.3}x"));
        // The goal compares um with C++ in one process: the fresh one, else the long-lived
        // one; without the C++ library, with the C++ program's own process.
        if let Some((r, which)) = paired(RATIO_FRESH, FRESH, CPP_FRESH)
            .map(|r| (r, "fresh processes, C++ in the same process"))
            .or(paired(RATIO_HERE, MIRROR, CPP_HERE)
                .map(|r| (r, "long-lived process, C++ in the same process")))
            .or(ratio(FRESH, CPP).map(|r| (r, "fresh process, C++ in its own process")))
            .or(ratio(MIRROR, CPP).map(|r| (r, "long-lived process, C++ in its own process")))
        {
            goals.push((
                format!("cuBLAS GEMM {shape}, um device-resident vs C++: ≤ 1.02x"),
                format!("{r:.3}x ({which})"),
                r <= 1.02,
            ));
        }
        let calls = get(MIRROR).map_or(0, |r| r.threads);
        let _ = writeln!(
            md,
            "| {shape} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {calls} |",
            cell(FRESH),
            cell(CPP_FRESH),
            show(paired(RATIO_FRESH, FRESH, CPP_FRESH)),
            cell(RAW_FRESH),
            show(ratio(FRESH, RAW_FRESH)),
            cell(CPP),
            show(ratio(FRESH, CPP)),
            cell(MIRROR),
            cell(CPP_HERE),
            show(paired(RATIO_HERE, MIRROR, CPP_HERE)),
            cell(PREFETCHED),
            cell(ON_DEMAND)
        );
    }
    if !paired.is_empty() {
        let rounds = paired
            .iter()
            .find_map(|r| r.paired.map(|p| p.rounds))
            .unwrap_or(0);
        let _ = writeln!(
            md,
            "\n### 8b. Host time per call, paired in one process\n\n`Blas::gemm` against `cublasSgemm_v2` called from Rust through the same loaded library (its own handle, bound to the stream once), 64×64×64 f32 on the same stream and buffers; {rounds} rounds of {BATCH} calls per variant, the order alternating every round, the stream drained between batches. `Blas::gemm` checks the shapes and owners, makes the context current and binds its handle to the stream when it changed. Intervals are 95%.\n\n| variant | median µs per call | min µs | vs raw: median (95% CI) | vs raw: mean (95% CI) |\n| --- | ---: | ---: | ---: | ---: |"
        );
        for r in &paired {
            let _ = writeln!(md, "{}", crate::report::paired_row(r));
            if let Some(p) = r.paired {
                goals.push((
                    "cuBLAS GEMM host time per call vs a raw cublasSgemm_v2 in one process (median of paired rounds, 95% CI): ≤ +0.5 µs".into(),
                    format!("{:+.3} µs ({:+.3} .. {:+.3})", p.median, p.median_ci.0, p.median_ci.1),
                    p.median_ci.1 <= 0.5,
                ));
            }
        }
    }
    md.push_str(&crate::report::goals_table("8", &goals[first_goal..]));
}

/// `um_bench --child cublas-probe DTYPE M N K ITERS`: where um's host time per call goes, in
/// one fresh process, on one stream and the same mirrored buffers (`scripts/gemm-kernels.sh`):
/// `Blas::gemm`; the raw call through the bench's own handle; the raw call through `Blas`'s
/// handle (`raw_handle_on`, once per batch); and the raw call through the bench's handle with
/// what `Blas::gemm` asks before it (the context made current, the stream's poison mark, the
/// three owners). Batches of ITERS calls taking turns in an order that rotates, 9 samples each;
/// prints one JSON line: per variant the median µs per call and the median enqueue time (until
/// the last call returned, before the wait).
pub(crate) fn probe(ctx: &Context, args: &[String]) -> Res<String> {
    let v = gemm_child(
        ctx,
        args,
        "cublas-probe DTYPE M N K ITERS",
        probe_samples::<f32>,
        probe_samples::<f64>,
    )?;
    let fields: Vec<String> = probe_variants()
        .iter()
        .zip(&v)
        .map(|((name, _), t)| {
            format!(
                "\"{name}\":{:.4},\"{name}_enqueue\":{:.4}",
                stats(&t.per_call).median,
                stats(&t.enqueue).median
            )
        })
        .collect();
    Ok(format!("{{{}}}", fields.join(",")))
}

/// The probe's turns, by the names its JSON line gives them: where bench.sh built the C++
/// library, also its batch, its handle on the Rust side's stream and buffers, and the bench's
/// handle on the C++ side's.
fn probe_variants() -> Vec<(&'static str, Turn)> {
    let mut v = vec![
        ("um", Turn::Um),
        ("raw", Turn::Raw),
        ("raw_um_handle", Turn::RawUmHandle),
        ("raw_checks", Turn::RawChecks),
    ];
    if cpp_lib::gemm_named() {
        v.extend([
            ("cpp", Turn::Cpp),
            ("cpp_on_um", Turn::CppOnUm),
            ("raw_on_cpp", Turn::RawOnCpp),
        ]);
    }
    v
}

/// The probe's 9 samples of each of its turns.
fn probe_samples<T: Num>(
    ctx: &Context,
    blas: &Blas,
    shape: (usize, usize, usize),
    iters: usize,
) -> Res<Vec<Samples>> {
    let which: Vec<Turn> = probe_variants().into_iter().map(|(_, t)| t).collect();
    turns::<T>(ctx, blas, shape, iters, &which, 9)
}
