//! Red team 6 (docs/redteam6.md): `Context::with_idle_unless_capturing` as a hostile user
//! would use it. Its first version held the device's lock while the closure ran, so a closure
//! that waited for another thread deadlocked as soon as that thread dropped a `Blas` or a handle
//! with a module, or waited itself; and `reap_pending` inside it waited for a reaper blocked on
//! the lock (findings 1 and 2). A `Blas` dropped or moved inside the closure was leaked or
//! refused with a capture error (finding 3). Now no lock is held while the closure runs; only
//! a capture waits for it. The deadlock tests abort through a 60 s watchdog.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use um::kernels::testing;

mod common;
use common::{capture_once, handle_with_a_module, serial, watchdog};
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Error, Gemm};

/// A `Blas` that has run one GEMM on a stream of `ctx` (its workspace in use once).
fn used_blas(ctx: &Context) -> Blas {
    let blas = Blas::new(ctx).expect("cuBLAS");
    let n = 32;
    let a = Managed::from_slice(ctx, &vec![1.0f32; n * n]).expect("alloc");
    let c = Managed::from_slice(ctx, &vec![0.0f32; n * n]).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, mut c) = (a.attach(s)?, c.attach(s)?);
        blas.gemm(s, &Gemm::new(n, n, n), &a, &a, &mut c)
            .expect("gemm");
        s.sync_all((a, c)).map(drop)
    })
    .expect("the gemm");
    blas
}

fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(fut).poll(&mut TaskContext::from_waker(Waker::noop()))
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_dropped_on_a_thread_the_idle_section_joins_does_not_deadlock() {
    let _serial = serial(); // captures change the answer of an idle section
    // Parallel teardown (what a rayon `into_par_iter().for_each(drop)` does): the scoped thread
    // is not marked, and its `Blas::drop` needs `quiet` (the first version held it here).
    dropped_on_a_thread_the_section_joins(used_blas);
}

/// Makes a value with `make` on device 0, then, inside an idle section of the device, drops it
/// on a scoped thread and joins it: the section runs its closure to the end (`Ok(Some(()))`),
/// all within the watchdog's time.
fn dropped_on_a_thread_the_section_joins<T: Send>(make: impl FnOnce(&Context) -> T) {
    let done = watchdog("an idle section and a thread it waits for (red team 6)");
    let ctx = Context::new(0).expect("device 0");
    let value = make(&ctx);
    let r = ctx.with_idle_unless_capturing(move || {
        std::thread::scope(|t| {
            t.spawn(move || drop(value));
        });
    });
    assert_eq!(r, Ok(Some(())));
    done.send(()).ok();
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_handle_with_a_module_dropped_on_a_thread_the_idle_section_joins_does_not_deadlock() {
    let _serial = serial(); // captures change the answer of an idle section
    // `Inner::drop` -> `Shared::retire` on the scoped thread: not in an idle section there, so
    // it takes `quiet` (which the first version held here while it joined).
    dropped_on_a_thread_the_section_joins(|_| handle_with_a_module());
}

#[test]
#[ignore = "needs a CUDA device"]
fn two_workers_meeting_at_a_barrier_inside_the_idle_section_do_not_deadlock() {
    let _serial = serial(); // captures change the answer of an idle section
    // The shape of a worker pool's orderly shutdown: every worker drops its own `Blas`, then
    // all meet; one of them meets the others from inside an idle section of the same device.
    let done = watchdog("an idle section and a thread it waits for (red team 6)");
    let ctx = Context::new(0).expect("device 0");
    let (b1, b2) = (used_blas(&ctx), used_blas(&ctx));
    let meet = std::sync::Barrier::new(2);
    std::thread::scope(|t| {
        t.spawn(|| {
            let r = ctx.with_idle_unless_capturing(|| {
                drop(b1); // nested: destroyed (a nested idle section), does not block
                meet.wait(); // waits for the other worker, which waits for our lock
            });
            assert_eq!(r, Ok(Some(())));
        });
        t.spawn(|| {
            std::thread::sleep(Duration::from_millis(200)); // the first worker holds the lock
            drop(b2); // Blas::drop -> with_idle_unless_capturing -> quiet(): blocks
            meet.wait();
        });
    });
    done.send(()).ok();
}

#[test]
#[ignore = "needs a CUDA device"]
fn reap_pending_inside_the_idle_section_does_not_deadlock() {
    let _serial = serial(); // captures change the answer of an idle section
    let done = watchdog("an idle section and a thread it waits for (red team 6)");
    let ctx = Context::new(0).expect("device 0");
    {
        // A handle of its own: its module cache gets `spin_then_add`'s module, and after this
        // block only the orphans hold it.
        let h2 = Context::new(0).expect("device 0");
        let busy = Managed::<[f32]>::zeroed_slice(&h2, 1).expect("alloc");
        let x = Managed::<[f32]>::zeroed_slice(&h2, 1 << 20).expect("alloc");
        h2.with_stream(StreamOptions::new(), |s| {
            let mut busy = busy.attach(s)?;
            testing::spin_then_add(s, &mut busy, 1.0, 500_000_000)?; // module loaded into h2's cache
            let x = x.attach(s)?;
            let mut fut = s.sync_all_async((busy, x));
            assert!(
                poll_once(&mut fut).is_pending(),
                "the spin holds the stream"
            );
            drop(fut); // both buffers become orphans, each with a clone of h2
            Ok(())
        })
        .expect("the work");
        assert!(h2.cache_stats().0 >= 1, "a module is loaded through h2");
    } // h2 dropped: the orphans hold its last clones
    assert!(um::orphans_pending() >= 2);
    let r = ctx.with_idle_unless_capturing(|| {
        // Orderly shutdown, made sure that nothing of ours still runs: blocks until the reaper
        // is done, and the reaper blocks on the lock this thread holds.
        um::reap_pending();
    });
    assert_eq!(r, Ok(Some(())));
    assert_eq!(um::orphans_pending(), 0);
    done.send(()).ok();
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_moving_to_another_stream_inside_the_idle_section_is_not_a_capture_error() {
    let _serial = serial(); // captures change the answer of an idle section
    let ctx = Context::new(0).expect("device 0");
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let n = 16;
    let moved = ctx
        .with_idle_unless_capturing(|| {
            ctx.with_stream_set(2, StreamOptions::new(), |s| {
                let buf = |v: f32| Managed::from_slice(&ctx, &vec![v; n * n]);
                let (a, mut c) = (buf(1.0)?.attach(&s[0])?, buf(0.0)?.attach(&s[0])?);
                let (a2, mut c2) = (buf(1.0)?.attach(&s[1])?, buf(0.0)?.attach(&s[1])?);
                let first = blas.gemm(&s[0], &Gemm::new(n, n, n), &a, &a, &mut c);
                let moved = blas.gemm(&s[1], &Gemm::new(n, n, n), &a2, &a2, &mut c2);
                s[0].sync_all((a, c))?;
                s[1].sync_all((a2, c2))?;
                Ok((first, moved))
            })
        })
        .expect("the wait")
        .expect("the closure ran")
        .expect("the streams");
    assert_eq!(moved.0, Ok(()));
    // Before the fix: Err(CaptureInProgress) with no capture anywhere.
    assert_ne!(
        moved.1,
        Err(Error::CaptureInProgress),
        "no capture is in progress: the error names the wrong cause"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_dropped_inside_the_idle_section_of_its_device_is_destroyed_not_leaked() {
    let _serial = serial(); // captures change the answer of an idle section
    // Free memory as a proxy for the handles' workspaces: 16 handles made, used and dropped
    // inside the section against the same outside it. (If cuBLAS's workspace does not show in
    // cuMemGetInfo on the machine, this assertion says nothing; the leak is then visible only
    // under compute-sanitizer --leak-check full.)
    let ctx = Context::new(0).expect("device 0");
    let round = |inside: bool| {
        let handles: Vec<Blas> = (0..16).map(|_| used_blas(&ctx)).collect();
        ctx.wait_idle().expect("idle");
        let (before, _) = ctx.mem_info().expect("mem info");
        if inside {
            let r = ctx.with_idle_unless_capturing(move || drop(handles));
            assert_eq!(r, Ok(Some(())));
        } else {
            drop(handles);
        }
        let (after, _) = ctx.mem_info().expect("mem info");
        after.saturating_sub(before)
    };
    let freed_outside = round(false);
    let freed_inside = round(true);
    println!("freed by 16 Blas drops: outside {freed_outside}, inside the section {freed_inside}");
    assert!(
        freed_inside * 2 >= freed_outside,
        "the handles dropped inside the idle section were leaked: {freed_inside} of {freed_outside} bytes freed"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_panic_in_the_idle_section_restores_the_thread_and_the_lock() {
    let _serial = serial(); // captures change the answer of an idle section
    let done = watchdog("an idle section and a thread it waits for (red team 6)");
    let ctx = Context::new(0).expect("device 0");
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        ctx.with_idle_unless_capturing(|| panic!("inside the idle section"))
    }));
    assert!(r.is_err(), "the panic went through");
    // The flag is off again on this thread, the (poisoned) lock is usable here and elsewhere.
    assert_eq!(ctx.wait_idle_unless_capturing(), Ok(true));
    assert_eq!(ctx.with_idle_unless_capturing(|| 3), Ok(Some(3)));
    let there = std::thread::scope(|t| {
        t.spawn(|| ctx.wait_idle_unless_capturing())
            .join()
            .expect("no panic")
    });
    assert_eq!(there, Ok(true));
    drop(handle_with_a_module()); // retire takes the poisoned lock
    if ctx.info().concurrent_managed_access {
        capture_once(&ctx).expect("a capture may begin again");
    }
    done.send(()).ok();
}

#[test]
#[ignore = "needs a CUDA device"]
fn inside_a_capture_the_section_does_not_run_its_closure() {
    let _serial = serial(); // captures change the answer of an idle section
    let ctx = Context::new(0).expect("device 0");
    if !ctx.info().concurrent_managed_access {
        return;
    }
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ran) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            let mut ran = false;
            let r = ctx.with_idle_unless_capturing(|| ran = true);
            assert_eq!(r, Ok(None));
            Ok(((x,), ran))
        })?;
        assert!(!ran, "the closure ran on a capturing thread");
        graph.launch(s)?;
        let (x,) = graph.sync()?;
        assert!(
            x.iter().all(|v| *v == 1.0),
            "the capture was not invalidated"
        );
        Ok(())
    })
    .expect("the capture");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_closure_not_run_is_dropped_after_the_lock() {
    let _serial = serial(); // captures change the answer of an idle section
    let done = watchdog("an idle section and a thread it waits for (red team 6)");
    let ctx = Context::new(0).expect("device 0");
    if !ctx.info().concurrent_managed_access {
        return;
    }
    let other = handle_with_a_module();
    let (in_capture, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|t| {
        t.spawn(|| {
            let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
            ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                    testing::add_scalar(cap, &mut x, 1.0)?;
                    in_capture.wait();
                    release.wait();
                    Ok(((x,), ()))
                })?;
                graph.sync().map(drop)
            })
            .expect("the capture on the other thread");
        });
        in_capture.wait();
        // A capture is in progress on the device: not run, and `other` (owned by the closure)
        // is dropped after the guard: `retire` takes the free lock and leaves the modules in the
        // graves.
        let r = ctx.with_idle_unless_capturing(move || drop(other));
        assert_eq!(r, Ok(None));
        release.wait();
    });
    done.send(()).ok();
}
