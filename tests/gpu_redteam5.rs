//! Red team 5 (docs/redteam5.md), finding 1, as GPU tests: a waker (safe code, run by um's
//! stream callback on the driver's thread) that drops the last clone of a `Context` handle with
//! a loaded module, while another thread holds the device's lock across its wait for the
//! context, and so for that very callback. Before the fix both tests hung (the watchdog aborts
//! the process after 60 s); now the callback defers the handle's modules (`Shared::deferred`)
//! instead of blocking, and `wait_idle_unless_capturing` called inside a callback waits for
//! nothing.
//!
//! Whether the race is hit depends on the GPU's speed (the 500 launches before the callback
//! take about 100 ms on an H100, long enough for the main thread to hold the lock first): on a
//! much faster GPU the test may pass without reaching it, never fail because of speed.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Wake, Waker};
use std::time::Duration;

use um::kernels::testing;

mod common;
use common::{capture_once, handle_with_a_module, serial, watchdog};
use um::{Context, Managed, StreamOptions};

struct DropsAHandle(Mutex<Option<Context>>);

impl Wake for DropsAHandle {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // Safe code, on the driver's callback thread: no CUDA call of its own.
        drop(self.0.lock().expect("waker state").take());
    }
}

fn run(then: impl FnOnce(&Context)) {
    let done = watchdog("the main thread and the callback thread wait for each other");
    let ctx = Context::new(0).expect("device 0");
    let waker_state = Arc::new(DropsAHandle(Mutex::new(Some(handle_with_a_module()))));
    let waker = Waker::from(Arc::clone(&waker_state));
    let n = 1 << 26;
    let x = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        for _ in 0..500 {
            testing::add_scalar(s, &mut x, 1.0)?;
        }
        let mut fut = s.sync_all_async((x,));
        // Registers the waker; the callback is already enqueued behind the 500 launches.
        assert!(
            Pin::new(&mut fut)
                .poll(&mut TaskContext::from_waker(&waker))
                .is_pending()
        );
        // While the GPU still works: takes `quiet` and waits for the callback, whose waker
        // waits for `quiet`.
        then(&ctx);
        let (x,) = futures_lite_block_on(fut)?;
        assert_eq!(x[0], 500.0);
        Ok(())
    })
    .expect("the work");
    done.send(()).ok();
}

/// A minimal executor (thread-parking), so that the test needs no other crate.
fn futures_lite_block_on<F: Future + Unpin>(mut f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    loop {
        if let std::task::Poll::Ready(v) =
            Pin::new(&mut f).poll(&mut TaskContext::from_waker(&waker))
        {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_waker_dropping_a_handle_while_wait_idle_unless_capturing_waits_does_not_deadlock() {
    let _serial = serial(); // captures change the answer of an idle section
    run(|ctx| {
        assert_eq!(ctx.wait_idle_unless_capturing(), Ok(true));
    });
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_waker_dropping_a_handle_while_another_handle_unloads_does_not_deadlock() {
    let _serial = serial(); // captures change the answer of an idle section
    let other = handle_with_a_module();
    run(move |_| drop(other)); // Shared::retire -> unload: lock held across cuCtxSynchronize
}

// ---------------------------------------------------------------------------------------------
// Finding 2: `Blas::drop` destroyed its handle after the lock was released, so the destroy's own
// device-wide wait could fail a capture that another thread began in between (an `Err` for a
// closure that did nothing wrong). The destroy now runs inside
// `Context::with_idle_unless_capturing`, before any capture can begin.

/// Handles destroyed beside the captures (fewer under a sanitizer, where each call is slow).
fn handles() -> usize {
    if std::env::var_os("UM_SANITIZE").is_some() {
        10
    } else {
        100
    }
}

/// Captures of one launch back to back until `stop` (at most 4000); the number that failed.
fn capture_loop(ctx: &Context, stop: &std::sync::atomic::AtomicBool) -> usize {
    let mut failures = 0;
    for i in 0..4000 {
        if let Err(e) = capture_once(ctx) {
            failures += 1;
            eprintln!("capture {i}: {e}");
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
    }
    failures
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_dropped_beside_captures_never_fails_one_and_leaks_if_it_cannot_wait() {
    let _serial = serial(); // captures change the answer of an idle section
    use std::sync::atomic::{AtomicBool, Ordering};
    use um_cublas::{Blas, Gemm};
    // The device as it is: captures of unified memory need concurrent managed access (rule 183).
    let ctx = Context::with_options(0, um::ContextOptions::new()).expect("device 0");
    if !ctx.info().concurrent_managed_access {
        eprintln!("skipped: the device lacks concurrent managed access");
        return;
    }
    let n = 64;
    let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n]).expect("alloc");
    let c = Managed::from_slice(&ctx, &vec![0.0f32; n * n]).expect("alloc");
    let start = std::sync::Barrier::new(2);
    let stop = AtomicBool::new(false);
    let failures = std::thread::scope(|t| {
        t.spawn(|| {
            ctx.with_stream(StreamOptions::new(), |s| {
                let (a, mut c) = (a.attach(s)?, c.attach(s)?);
                // Made and used before the captures start: only the destroys overlap them.
                let blases: Vec<Blas> = (0..handles())
                    .map(|_| {
                        let b = Blas::new(&ctx).expect("cuBLAS");
                        b.gemm(s, &Gemm::new(n, n, n), &a, &a, &mut c)
                            .expect("gemm");
                        b
                    })
                    .collect();
                s.wait_idle()?;
                start.wait();
                for b in blases {
                    // Destroyed under the device's capture lock, or leaked while a capture is
                    // in progress: never a device-wide wait that a capture could meet.
                    drop(b);
                }
                stop.store(true, Ordering::Relaxed);
                let (_a, c) = s.sync_all((a, c))?;
                assert!(c.iter().all(|v| *v == n as f32), "the gemms' result");
                Ok(())
            })
            .expect("eager side");
        });
        start.wait();
        capture_loop(&ctx, &stop)
    });
    assert_eq!(
        failures, 0,
        "a Blas drop on another thread failed um captures"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn inside_with_idle_unless_capturing_um_works_and_a_capture_is_refused() {
    let _serial = serial(); // captures change the answer of an idle section
    let done = watchdog("a call of um inside an idle section of its own thread");
    let ctx = Context::new(0).expect("device 0");
    let other = handle_with_a_module();
    let inner = ctx
        .with_idle_unless_capturing(|| {
            // Nested waits wait (no lock is held while the closure runs).
            assert_eq!(ctx.wait_idle_unless_capturing(), Ok(true));
            assert_eq!(ctx.with_idle_unless_capturing(|| 1), Ok(Some(1)));
            // A handle with a module unloads it as anywhere else.
            drop(other);
            // A capture cannot begin here: it would wait for this closure.
            let x = Managed::from_slice(&ctx, &[0.0f32; 16]).expect("alloc");
            let r = ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                    testing::add_scalar(cap, &mut x, 1.0)?;
                    Ok(((x,), ()))
                })?;
                graph.sync().map(drop)
            });
            assert!(
                matches!(r, Err(um::Error::CaptureRefusedHere)),
                "a capture inside the idle section: {r:?}"
            );
            7
        })
        .expect("the wait");
    assert_eq!(inner, Some(7), "the closure ran after the wait");
    // Outside again: captures and waits work.
    assert_eq!(ctx.wait_idle_unless_capturing(), Ok(true));
    done.send(()).ok();
}
