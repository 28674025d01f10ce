//! Red team 5, finding 1 (rule 187 broken; spurious `Err` from safe code, not UB).
//!
//! `Blas::drop` (crates/um-cublas/src/blas.rs:299) asks `Context::wait_idle_unless_capturing`
//! (crates/um-core/src/driver/context.rs:391-401) to wait. That function holds `Shared::quiet`
//! only for its own `cuCtxSynchronize` and releases it when it returns (`drop(quiet)`, line 400).
//! `Blas::drop` then calls `cublasDestroy_v2` (blas.rs:306-309) with no lock held, and cuBLAS
//! documents that `cublasDestroy` "implicitly calls cudaDeviceSynchronize()". In the window
//! between the two, another thread can take a `CaptureGuard` and `cuStreamBeginCapture`
//! (capture.rs:154-160); the destroy's device-wide wait then runs on a non-capturing thread
//! during that capture, which design.md ("The driver behaviours relied on") says fails and
//! invalidates the capture. So the capture thread gets an `Err` for a closure that did
//! nothing wrong: rule 187 ("Nothing `um` does implicitly on one thread invalidates a capture of
//! `um` on another ... a `Blas` waits only through `Context::wait_idle_unless_capturing`") is
//! false. The workspace free itself is after a completed wait, so no kernel uses it: no UB.
//!
//! Expected on the GPU: `failures > 0` for the first test (the window is small; many handles
//! are destroyed while the other thread opens and closes captures back to back). The control
//! (the same load without `Blas` drops) must show 0, to tell the destroy apart from the rest.
//! Fix: do the destroy under the lock (e.g. a `Context::with_idle_unless_capturing(|| ..)`
//! taking a closure that runs before `quiet` is released).
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use um::kernels::testing;
use um::{Context, ContextOptions, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

const HANDLES: usize = 400;
const CAPTURES: usize = 4000;

fn capture_loop(ctx: &Context, stop: &AtomicBool) -> usize {
    let mut failures = 0;
    for i in 0..CAPTURES {
        let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
        let r = ctx.with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                Ok(((x,), ()))
            })?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            assert!(x.iter().all(|v| *v == 1.0));
            Ok(())
        });
        if let Err(e) = r {
            failures += 1;
            eprintln!("capture {i}: {e}");
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    failures
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_destroyed_while_another_thread_begins_a_capture_never_fails_it() {
    let ctx = Context::with_options(0, ContextOptions::new()).expect("device 0");
    assert!(ctx.info().concurrent_managed_access);
    let n = 64;
    let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n]).expect("alloc");
    let c = Managed::from_slice(&ctx, &vec![0.0f32; n * n]).expect("alloc");
    let start = Barrier::new(2);
    let stop = AtomicBool::new(false);
    let failures = std::thread::scope(|t| {
        t.spawn(|| {
            ctx.with_stream(StreamOptions::new(), |s| {
                let (a, mut c) = (a.attach(s)?, c.attach(s)?);
                // Made and used before the captures start: only the destroys overlap them.
                let handles: Vec<Blas> = (0..HANDLES)
                    .map(|_| {
                        let b = Blas::new(&ctx).expect("cuBLAS");
                        b.gemm(s, &Gemm::new(n, n, n), &a, &a, &mut c).expect("gemm");
                        b
                    })
                    .collect();
                s.wait_idle()?;
                start.wait();
                for b in handles {
                    // wait_idle_unless_capturing: Ok(true), lock released; then
                    // cublasDestroy_v2's own cudaDeviceSynchronize, unguarded.
                    drop(b);
                }
                stop.store(true, Ordering::Relaxed);
                s.sync_all((a, c)).map(drop)
            })
            .expect("eager side");
        });
        start.wait();
        capture_loop(&ctx, &stop)
    });
    assert_eq!(failures, 0, "a Blas drop on another thread invalidated um captures");
}

#[test]
#[ignore = "needs a CUDA device"]
fn control_the_same_captures_beside_no_blas_destroy_all_succeed() {
    let ctx = Context::with_options(0, ContextOptions::new()).expect("device 0");
    let stop = AtomicBool::new(false);
    assert_eq!(capture_loop(&ctx, &stop), 0);
}
