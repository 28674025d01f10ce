//! Red team 4, suspect 1 (needs a GPU): a `Blas` dropped while a capture of `um` is open on its
//! device. Safe code only. Not built (a plain file); to try it, copy it into `tests/` as a
//! `#[test] #[ignore]` of `gpu_cublas.rs` and run it under compute-sanitizer memcheck.
//!
//! What `Blas::drop` relies on (rule 146): "`cublasDestroy_v2` waits for the device before it
//! frees the handle's workspace". cuBLAS documents that wait as an implicit
//! `cudaDeviceSynchronize` (= `cuCtxSynchronize`). But design.md's own probes say that while a
//! stream capture is open on the context:
//!   * on the capturing thread, every wait is refused (`..._STREAM_CAPTURE_UNSUPPORTED`);
//!   * on any other thread, `cuCtxSynchronize` fails and invalidates the capture,
//!     while frees on other threads go through.
//! `Blas::drop` ignores `cublasDestroy_v2`'s status. If cuBLAS, after its failed device sync,
//! still releases its workspace (plain `cudaFree`, which other threads may do during a capture,
//! or a stream-ordered free on the handle's stream, which `drop` has just reset to NULL), the GEMM
//! below, still running on the eager stream `s`, reads and writes freed device memory: UB from
//! safe code (a GPU access to freed memory). Modules have exactly this protection
//! (`Shared`'s graves: unloads wait until no capture is open); cuBLAS handles do not.
//!
//! Independently of the UB question, variant A contradicts rule 187 ("Nothing `um` does
//! implicitly on one thread invalidates a capture of `um` on another"): the drop of a `Blas` is
//! implicit, and its device sync fails the other thread's capture.
//!
//! What to look for: compute-sanitizer memcheck reporting an invalid global read/write in a
//! cuBLAS kernel, or the GEMM result differing from the CPU's; and whether `capture` returns
//! an Err in variant A.

use std::sync::Barrier;

use um::cublas::{Blas, Gemm};
use um::kernels::testing::add_scalar;
use um::{Context, Managed, StreamOptions};

/// Large enough for a GEMM of tens of milliseconds, whose workspace use outlasts the drop.
const N: usize = 4096;

/// Variant A: the capture is on another thread.
fn blas_dropped_on_another_thread_during_a_capture() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let started = Barrier::new(2);
    let dropped = Barrier::new(2);
    std::thread::scope(|t| {
        // Thread 1: a capture that stays open until thread 2 has dropped its handle.
        let capturing = t.spawn(|| {
            let x = Managed::from_slice(&ctx, &[0.0f32; 256])?;
            ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let captured = s.capture((x,), |cap, (mut x,)| {
                    add_scalar(cap, &mut x, 1.0)?;
                    started.wait();
                    dropped.wait(); // thread 2's `Blas` is destroyed meanwhile
                    Ok(((x,), ()))
                });
                // Rule 187 says this is Ok; expect an Err (the capture was invalidated).
                println!("capture: {:?}", captured.as_ref().map(|_| ()));
                match captured {
                    Ok((graph, ())) => graph.sync().map(drop),
                    Err(e) => Err(e),
                }
            })
        });
        // Thread 2 (this one): a long GEMM on an eager stream, then the handle dropped while
        // it runs.
        let a = Managed::from_fn(&ctx, N * N, |i| (i % 7) as f32)?;
        let c = Managed::from_fn(&ctx, N * N, |_| 0.0f32)?;
        let c = ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
            let blas = Blas::new(&ctx).map_err(|_| um::Error::GraphEmptied)?;
            let (a, mut c) = (a.attach(s)?, c.attach(s)?);
            for _ in 0..4 {
                blas.gemm(s, &Gemm::new(N, N, N), &a, &a, &mut c)
                    .map_err(|_| um::Error::GraphEmptied)?;
            }
            started.wait();
            drop(blas); // cublasDestroy: its device sync fails (capture open); workspace freed?
            dropped.wait();
            let (c, _a) = s.sync_all((c, a))?; // the GEMMs ran on a freed workspace?
            Ok(c)
        })?;
        let _ = capturing.join();
        println!("c[0] = {} (compare with the CPU)", c[0]);
        um::Result::Ok(())
    })
}

/// Variant B: the `Blas` is moved into the capture closure and dropped there, on the
/// capturing thread, while a GEMM enqueued just before the capture runs on the owner stream.
fn blas_dropped_on_the_capturing_thread() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let blas = Blas::new(&ctx).map_err(|_| um::Error::GraphEmptied)?;
    let a = Managed::from_fn(&ctx, N * N, |i| (i % 7) as f32)?;
    let c = Managed::from_fn(&ctx, N * N, |_| 0.0f32)?;
    let x = Managed::from_slice(&ctx, &[0.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, mut c, x) = (a.attach(s)?, c.attach(s)?, x.attach(s)?);
        blas.gemm(s, &Gemm::new(N, N, N), &a, &a, &mut c)
            .map_err(|_| um::Error::GraphEmptied)?;
        let captured = s.capture((x,), move |cap, (mut x,)| {
            add_scalar(cap, &mut x, 1.0)?;
            drop(blas); // every wait is refused here: does cuBLAS free its workspace anyway?
            Ok(((x,), ()))
        });
        println!("capture: {:?}", captured.as_ref().map(|_| ()));
        let (c, a) = s.sync_all((c, a))?;
        println!("c[0] = {}", c[0]);
        drop(a);
        Ok(())
    })
}

fn main() {
    let _ = blas_dropped_on_another_thread_during_a_capture();
    let _ = blas_dropped_on_the_capturing_thread();
}

// Proposed fix (um-cublas, with a hidden read-only query in um-core):
// * Record an event on the bound stream after every call (or keep the id and a weak handle of
//   the last bound stream). In `Drop`: if a capture of `um` is open on the device
//   (`Shared::quiet().captures > 0`, exposed as a `#[doc(hidden)] pub fn capture_in_progress()`
//   that changes nothing) or the thread is capturing (`reclaim::defer::capturing()`), do not
//   call `cublasDestroy_v2`: hand the handle to the device's graves (generalise `graves` to
//   `Vec<Box<dyn FnOnce() + Send>>`), destroyed after the wait that already precedes module
//   unloads; otherwise wait for the event (a stream wait, legal beside another thread's
//   capture), then destroy. If any wait fails, leak the handle, as modules are leaked.
// * Rule 146 and 187 then say so; a GPU test runs variant A and B under memcheck.
