//! cuFFT, which `um` does not wrap, on `um`'s buffers and a `um` stream, through cudarc: a
//! batch of real signals transformed on the GPU (`cufftExecR2C`) and checked against a discrete
//! Fourier transform computed on the CPU.
//!
//! What comes from where:
//! * `um`: the context, the buffers (attached to the stream, synced back), the stream
//!   (`Context::with_stream`), the buffers' device addresses (`as_device_ptr`,
//!   `as_device_ptr_mut`) and the stream's handle (`Stream::as_raw`): the door of
//!   `docs/interop.md`; and where to look for the library (`um::LibrarySearch`, the search of
//!   um's own library crates);
//! * cudarc (a dev-dependency, with its `cufft` and `dynamic-loading` features: nothing is
//!   linked at build time): cuFFT's entry points (`cudarc::cufft::result`).
//!
//! Three `unsafe` blocks, each with its argument: loading the library, the transform (the one
//! foreign call that touches `um`'s memory, on `um`'s stream), and the plan's destroy.
//! Everything else is safe code: `R2c` checks what cuFFT does not (the buffers' lengths against
//! the plan, their owner), and carries its stream's brand, so it cannot outlive the stream or
//! take a buffer of another stream, as `um`'s own wrappers (`Rng`, `Sparse`) cannot.
//!
//! What it creates, it destroys: the plan inside the stream's scope, after a wait for the
//! stream and before the stream and the context go; the buffers when `run` returns. cuFFT keeps
//! one allocation of its own past every plan: about 6.97 MB (6,967,984 bytes with CUDA 13's
//! cuFFT 12.0), made in the context by the first plan and given back by no cuFFT call, which
//! compute-sanitizer's leak check reports at exit (measured on an H200 with a C program that
//! only makes and destroys plans: the same allocation, with or without `cufftDestroy`; a second
//! plan adds none). It is not the plan's work area, and this example cannot free it.
//!
//! `cargo run --release --example cudarc_bridge -- [--len N] [--batch B]`

mod common;

use std::f64::consts::PI;
use std::process::ExitCode;

use cudarc::cufft::{result as cufft, sys};
use um::{Context, LibrarySearch, Managed, StreamOptions, StreamOwned};

/// Where cuFFT is looked for: the path in `UM_CUFFT_LIB`, else the dynamic loader's search
/// for CUDA 13's cuFFT (`libcufft.so.12`) and `libcufft.so`, else `libcufft.so.12` in
/// `$CUDA_PATH/lib64` and `/usr/local/cuda/lib64`: the order `um`'s cuBLAS, cuSPARSE and
/// cuRAND crates use.
const CUFFT: LibrarySearch = LibrarySearch {
    env_var: "UM_CUFFT_LIB",
    names: &["libcufft.so.12", "libcufft.so"],
};

/// Loads cuFFT for the process and returns its version (`cufftGetVersion`).
///
/// cudarc's `dynamic-loading` asks the dynamic loader for cuFFT by name only (`libcufft.so`,
/// `libcufft.so.12`, ...), so a toolkit whose `lib64/` is not on the loader's path is not
/// found, and a library it cannot find is a panic. This loads it first, from wherever
/// [`CUFFT`] finds it, and keeps it loaded: the loader then answers cudarc's request for
/// `libcufft.so.12` with the library already in the process (it matches loaded libraries by
/// their `SONAME`).
fn load_cufft() -> Result<i32, String> {
    let library = CUFFT
        .find(|candidate| {
            // SAFETY: loading a library runs its initialisers. What is loaded is the CUDA
            // toolkit's cuFFT, found where `um`'s own wrappers find their libraries (the
            // variable, the loader's path, the toolkit's folder), trusted as `um-cublas`
            // trusts the cuBLAS it finds (docs/interop.md, "cuBLAS").
            unsafe { libloading::Library::new(candidate) }.map_err(|e| e.to_string())
        })
        .map_err(|tried| {
            format!(
                "cuFFT could not be loaded; tried {}. Install the CUDA toolkit's cuFFT \
                 (libcufft.so.12, in /usr/local/cuda/lib64), or set UM_CUFFT_LIB to the \
                 library's path",
                tried.join("; ")
            )
        })?;
    // Kept for the process, as um's wrappers keep theirs: cudarc's handle resolves to it.
    std::mem::forget(library);
    cufft::get_version().map_err(|e| format!("cufftGetVersion failed: {e}"))
}

/// A cuFFT plan of `batch` real-to-complex transforms of `len` points each, for one stream
/// of `um` (`'s`, the stream's brand) for its whole life.
///
/// The input is `batch` signals of `len` `f32`s, one after the other; the output holds, per
/// signal, the `len / 2 + 1` non-redundant coefficients as interleaved pairs (re, im) of
/// `f32`, cuFFT's `cufftComplex` layout.
struct R2c<'a, 's> {
    plan: sys::cufftHandle,
    stream: &'a um::Stream<'s>,
    len: usize,
    batch: usize,
}

impl<'a, 's> R2c<'a, 's> {
    /// A plan for `stream` (`cufftPlan1d`, in the stream's context; cuFFT allocates its work
    /// area then).
    fn new(stream: &'a um::Stream<'s>, len: usize, batch: usize) -> um::Result<Self> {
        let n = i32::try_from(len).ok().filter(|n| *n >= 2);
        let b = i32::try_from(batch).ok().filter(|b| *b >= 1);
        let (Some(n), Some(b)) = (n, b) else {
            return Err(refused(format!(
                "a plan of {batch} transforms of {len} points: cuFFT takes 2 to 2^31 - 1 \
                 points and 1 to 2^31 - 1 transforms"
            )));
        };
        stream.context().make_current()?;
        let plan = cufft::plan_1d(n, sys::cufftType::CUFFT_R2C, b).map_err(failed)?;
        Ok(R2c {
            plan,
            stream,
            len,
            batch,
        })
    }

    /// `f32`s of the input: `batch` signals of `len` points.
    fn input_len(&self) -> usize {
        self.len * self.batch
    }

    /// `f32`s of the output: `batch` times `len / 2 + 1` pairs (re, im).
    fn output_len(&self) -> usize {
        2 * (self.len / 2 + 1) * self.batch
    }

    /// `y` = the forward transform of each signal of `x`, enqueued on the plan's stream, which
    /// owns both. Refused before cuFFT runs where a length is not the plan's.
    fn forward(
        &mut self,
        x: &Managed<[f32], StreamOwned<'s>>,
        y: &mut Managed<[f32], StreamOwned<'s>>,
    ) -> um::Result<()> {
        for (what, len, want) in [
            ("input", x.len(), self.input_len()),
            ("output", y.len(), self.output_len()),
        ] {
            if len != want {
                return Err(refused(format!(
                    "the {what} holds {len} f32s; a plan of {} transforms of {} points takes {want}",
                    self.batch, self.len
                )));
            }
        }
        // The brand says so already for a stream of `with_stream`; within a stream set, whose
        // streams share a brand, only this check does (docs/interop.md, "Helpers").
        for (argument, owned) in [(0, self.stream.owns(x)), (1, self.stream.owns(y))] {
            if !owned {
                return Err(um::Error::StreamMismatch { argument });
            }
        }
        self.stream.context().make_current()?;
        let input = x.as_device_ptr();
        let mut output = y.as_device_ptr_mut();
        // SAFETY: the contract of `as_device_ptr` and `Stream::as_raw` (docs/interop.md, "What
        // `um` gives"), met here:
        // * the work is enqueued on the stream that owns both buffers (`owns`, above), which
        //   is alive (borrowed for `'a`), of the current context (made current above, the
        //   context the plan was made in), and not capturing (`Stream<'s>` is a created
        //   stream, never a capture's);
        // * the plan reads `len * batch` f32s from `input` and writes `(len / 2 + 1) * batch`
        //   complex pairs to `output` (cuFFT's layout of a batched 1-D R2C plan), the lengths
        //   checked above; an out-of-place R2C leaves its input unchanged (cuFFT overwrites
        //   the input of complex-to-real transforms only), so the read-only address is only
        //   read. Both addresses are allocations of `um`, aligned to 256 bytes (cuFFT needs
        //   `cufftComplex`'s 8); `x` and `y` are two buffers, so they do not overlap;
        // * the borrows of `x` and `y` last until after this call, and the work it enqueued
        //   is ordered before whatever comes next for them on this stream: a `sync` waits for
        //   it, a drop waits for the stream first;
        // * the plan is bound to this stream, the only one it is used on (`R2c` has its brand);
        //   cuFFT uses its work area from that stream only.
        unsafe {
            cufft::set_stream(self.plan, self.stream.as_raw().cast()).map_err(failed)?;
            cufft::exec_r2c(
                self.plan,
                input.as_ptr().cast_mut(),
                output.as_mut_ptr().cast(),
            )
        }
        .map_err(failed)
    }
}

impl Drop for R2c<'_, '_> {
    fn drop(&mut self) {
        // The work area may still serve a transform in flight (a `?` between `forward` and
        // `sync`): wait for the stream first, and leak the plan if the wait fails (a fault)
        // rather than free memory that running work may use.
        if self.stream.wait_idle().is_ok() && self.stream.context().make_current().is_ok() {
            // SAFETY: `plan` was made by `cufftPlan1d` in this context, is destroyed here only,
            // once, and no work that uses it is in flight: its only stream was waited for above.
            if let Err(e) = unsafe { cufft::destroy(self.plan) } {
                eprintln!("cudarc_bridge: cufftDestroy failed, the plan is leaked: {e}");
            }
        } else {
            eprintln!("cudarc_bridge: the stream failed, the plan is leaked");
        }
    }
}

/// What the checks before the call refuse.
fn refused(message: String) -> um::Error {
    um::Error::Library {
        library: "cufft (cudarc_bridge)",
        message,
    }
}

/// What cuFFT reports.
fn failed(e: cufft::CufftError) -> um::Error {
    um::Error::Library {
        library: "cufft (cudarc_bridge)",
        message: e.to_string(),
    }
}

/// Signal `b` at `t`: two tones, one of them per signal, and a deterministic ripple.
fn signal(b: usize, t: usize, len: usize) -> f32 {
    let phase = 2.0 * PI * t as f64 / len as f64;
    let ripple = ((t.wrapping_mul(2_654_435_761) ^ b) % 1000) as f64 / 1000.0 - 0.5;
    ((phase * (b % (len / 2) + 1) as f64).sin() + 0.5 * (phase * 7.0).cos() + 0.1 * ripple) as f32
}

/// The largest difference between `got` (cuFFT's coefficients) and a DFT of `x` computed in
/// `f64`, per signal divided by the sum of its magnitudes (the largest any coefficient can be).
fn worst_error(x: &[f32], got: &[f32], len: usize, batch: usize) -> f64 {
    let bins = len / 2 + 1;
    let twiddle: Vec<(f64, f64)> = (0..len)
        .map(|m| {
            let a = -2.0 * PI * m as f64 / len as f64;
            (a.cos(), a.sin())
        })
        .collect();
    let mut worst = 0.0f64;
    for b in 0..batch {
        let signal = &x[b * len..(b + 1) * len];
        let scale = signal
            .iter()
            .map(|v| v.abs() as f64)
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
        for k in 0..bins {
            let (mut re, mut im) = (0.0, 0.0);
            for (t, v) in signal.iter().enumerate() {
                let (c, s) = twiddle[(k * t) % len];
                re += *v as f64 * c;
                im += *v as f64 * s;
            }
            let at = 2 * (b * bins + k);
            let (gr, gi) = (got[at] as f64, got[at + 1] as f64);
            worst = worst.max((gr - re).hypot(gi - im) / scale);
        }
    }
    worst
}

struct Args {
    len: usize,
    batch: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        len: common::workload(1000, 200),
        batch: common::workload(64, 4),
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
            "--len" => args.len = value("--len")?.max(2),
            "--batch" => args.batch = value("--batch")?,
            other => {
                return Err(format!(
                    "unknown argument {other} (usage: cudarc_bridge [--len N] [--batch B])"
                ));
            }
        }
    }
    Ok(args)
}

fn run(ctx: &Context, args: &Args) -> um::Result<(f64, bool)> {
    let (len, batch) = (args.len, args.batch);
    let input: Vec<f32> = (0..len * batch)
        .map(|i| signal(i / len, i % len, len))
        .collect();
    let x = Managed::from_slice(ctx, &input)?;
    let y = Managed::<[f32]>::zeroed_slice(ctx, 2 * (len / 2 + 1) * batch)?;
    let (x, y) = ctx.with_stream(StreamOptions::new(), |s| {
        let mut fft = R2c::new(s, len, batch)?;
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        fft.forward(&x, &mut y)?;
        let synced = s.sync_all((x, y));
        // The plan goes inside the stream's scope: its drop waits for the stream, then destroys
        // it while the stream and the context live (a `?` above drops it there too).
        drop(fft);
        synced
    })?;
    let input_kept = x[..] == input[..];
    Ok((worst_error(&input, &y, len, batch), input_kept))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cudarc_bridge: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(ctx) = common::open_gpu("cudarc_bridge") else {
        return ExitCode::from(2);
    };
    let version = match load_cufft() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("cudarc_bridge: cannot run: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "cudarc_bridge: cuFFT {version} through cudarc on um's buffers and stream: {} real-to-complex transforms of {} points, f32, on {}",
        args.batch,
        args.len,
        ctx.info().name
    );
    match run(&ctx, &args) {
        Ok((worst, input_kept)) => {
            println!(
                "checked: {} x {} coefficients against a DFT on the CPU (f64); worst error {worst:.2e} of the signal's sum |x| (tolerance 1e-5); input unchanged: {input_kept}",
                args.batch,
                args.len / 2 + 1
            );
            if worst <= 1e-5 && input_kept {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("cudarc_bridge: {e}");
            ExitCode::FAILURE
        }
    }
}
