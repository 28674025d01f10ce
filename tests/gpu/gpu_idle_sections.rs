//! Idle sections of a device (`Context::with_idle_unless_capturing`,
//! `wait_idle_unless_capturing`) beside captures, wakers and other threads. No lock is held
//! while a section's closure runs, so the closure may use `um` and wait for threads that drop a
//! `Blas` or a handle with a module, wait themselves or call `reap_pending`; only a capture waits
//! for it. A capture waits for the sections in progress when it asks, never for work that other
//! threads enqueue meanwhile, and while it waits new sections are held off (`Ok(None)`), so
//! sections that keep beginning on other threads do not starve it. No capture begins inside a
//! section of its own device or on um's event thread; a panic in a section restores the thread's
//! mark and the lock; the sixteenth nested section refuses its wait. A waker run inside um's
//! stream callback that drops the last clone of a handle with a loaded module, while another
//! thread holds the device's lock across its wait for that very callback, defers the handle's
//! modules (`Shared::deferred`) instead of blocking, and `wait_idle_unless_capturing` called
//! inside a callback waits for nothing. A hold (`with_captures_held_off`: a section without the
//! wait) keeps a capture that another thread asks for meanwhile from beginning until its
//! closure returns, is refused during a capture on any thread and inside a stream callback, and
//! is released by a panic of its closure.
//!
//! Every test takes `serial()`: a section's answer depends on captures in progress on the
//! device, in any thread, and one test switches um's waits to the event thread for the whole
//! process. A deadlock test aborts the process through a watchdog (60 s, 240 s under a
//! sanitizer); the starvation tests are bounded by a deadline of their own, not by the
//! machine's speed. Whether the race of a waker's handle drop is hit depends on the GPU's speed
//! (the 500 launches before the callback take about 100 ms on an H100, long enough for the main
//! thread to hold the lock first): on a much faster GPU those tests may pass without reaching
//! it, never fail because of speed.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Error, Gemm};
use um_test_kernels::testing;

use crate::common::{self, poll_once};
use common::{capture_once, device_for_captures, handle_with_a_module, serial, watchdog};

// ---------------------------------------------------------------------------------------------
// A waker that drops the last clone of a handle with a module, inside the stream callback.

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

/// Polls a sync future once with a waker that drops the last clone of a handle with a loaded
/// module (run by um's stream callback, behind 500 launches), then calls `then` while the GPU
/// still works: `then` takes the device's lock and waits, so the callback may have to run while
/// it is held. The watchdog aborts the process if the two wait for each other.
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
        let (x,) = block_on(fut)?;
        assert_eq!(x[0], 500.0);
        Ok(())
    })
    .expect("the work");
    done.send(()).ok();
}

/// A minimal executor (thread-parking), so that the tests need no other crate.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on<F: Future + Unpin>(mut fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = std::pin::Pin::new(&mut fut).poll(&mut cx) {
            return out;
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
// Inside a section: um works, waits nest, a capture is refused, other threads are joined.

/// Inside an idle section, um works as anywhere else: nested waits wait, a handle with a module
/// unloads it, and a capture, which would wait for this very closure, is refused.
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
    let done = watchdog("an idle section and a thread it waits for");
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
    let done = watchdog("an idle section and a thread it waits for");
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
    let done = watchdog("an idle section and a thread it waits for");
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
    assert!(um_core::orphans_pending() >= 2);
    let r = ctx.with_idle_unless_capturing(|| {
        // Orderly shutdown, made sure that nothing of ours still runs: blocks until the reaper
        // is done, and the reaper blocks on the lock this thread holds.
        um::reap_pending();
    });
    assert_eq!(r, Ok(Some(())));
    assert_eq!(um_core::orphans_pending(), 0);
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
    let done = watchdog("an idle section and a thread it waits for");
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
    let done = watchdog("an idle section and a thread it waits for");
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

// ---------------------------------------------------------------------------------------------
// Nested sections.

/// Runs `bottom` inside `n` nested idle sections of `ctx`; panics if one of them is refused.
fn nest(ctx: &Context, n: usize, bottom: &dyn Fn()) {
    if n == 0 {
        bottom();
        return;
    }
    let ran = ctx
        .with_idle_unless_capturing(|| nest(ctx, n - 1, bottom))
        .expect("the section's wait");
    assert!(ran.is_some(), "section {n} from the bottom was refused");
}

/// Sixteen nested sections on one thread: the sixteenth and deeper waits are refused
/// (`Ok(false)`, documented), while a `Blas` move there goes through (it is ordered on the device
/// and waits for nothing).
#[test]
#[ignore = "needs a CUDA device"]
fn at_sixteen_nested_sections_a_wait_is_refused_and_a_blas_move_says_so() {
    let _serial = serial(); // captures change the answer of an idle section
    let ctx = common::gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let n = 8;
    let g = Gemm::new(n, n, n);
    // Bind the handle to a first stream outside any section: the next stream is a move.
    ctx.with_stream(StreamOptions::new(), |s| {
        let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n])?.attach(s)?;
        let mut c = Managed::from_slice(&ctx, &vec![0.0f32; n * n])?.attach(s)?;
        blas.gemm(s, &g, &a, &a, &mut c)
            .expect("gemm, first stream");
        s.sync_all((a, c)).map(drop)
    })
    .expect("first stream");

    // 15 deep: one more nests, and its wait happens.
    nest(&ctx, 15, &|| {
        assert_eq!(
            ctx.wait_idle_unless_capturing(),
            Ok(true),
            "15 deep: the 16th section waits"
        );
    });

    // 16 deep: no capture anywhere, yet the wait is refused...
    nest(&ctx, 16, &|| {
        assert_eq!(
            ctx.wait_idle_unless_capturing(),
            Ok(false),
            "16 deep: refused, as documented"
        );
        // ...and a Blas move still goes through: it is ordered on the device and waits for
        // nothing (before `StreamOrder`, it was refused with a text naming this case).
        let moved = ctx.with_stream(StreamOptions::new(), |s| {
            let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n])?.attach(s)?;
            let mut c = Managed::from_slice(&ctx, &vec![0.0f32; n * n])?.attach(s)?;
            let r = blas.gemm(s, &g, &a, &a, &mut c);
            s.sync_all((a, c))?;
            Ok(r)
        });
        let moved = moved.expect("second stream");
        assert!(moved.is_ok(), "16 deep, no capture: {moved:?}");
    });
    // The handle is dropped here, outside any section: destroyed, not leaked.
    drop(blas);
}

// ---------------------------------------------------------------------------------------------
// Captures beside sections on other threads: never starved, never begun on the event thread.

/// How long the load of the starvation tests lasts at most: a starved capture begins only
/// after it, a capture that is not starved long before it. Far above the time the captures
/// take on any machine (2 s for all the tests of this section on an H200; a sanitizer slows
/// each capture many times), so that only starvation can reach it: it bounds a failing test, it
/// is not a latency goal.
const DEADLINE: Duration = Duration::from_secs(90);

/// Two threads that take turns in idle sections, each staying in its own until the other has
/// entered one, never leave the device without a section: a capture must still begin, because a
/// waiting capture holds new sections off.
#[test]
#[ignore = "needs a CUDA device"]
fn two_threads_taking_turns_in_idle_sections_do_not_starve_a_capture() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let turns = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let sections = AtomicU64::new(0);
    let (before_deadline, latency) = std::thread::scope(|t| {
        for _ in 0..2 {
            t.spawn(|| {
                let start = Instant::now();
                while !stop.load(Ordering::SeqCst) && start.elapsed() < DEADLINE {
                    let ran = ctx
                        .with_idle_unless_capturing(|| {
                            sections.fetch_add(1, Ordering::SeqCst);
                            let mine = turns.fetch_add(1, Ordering::SeqCst) + 1;
                            // Stay in the section until the other thread has entered its own
                            // (or has been refused one), at most 50 ms.
                            let start = Instant::now();
                            while turns.load(Ordering::SeqCst) == mine
                                && start.elapsed() < Duration::from_millis(50)
                                && !stop.load(Ordering::SeqCst)
                            {
                                std::thread::yield_now();
                            }
                        })
                        .expect("the wait");
                    if ran.is_none() {
                        // Refused (a capture waits or runs): let the partner go on.
                        turns.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(100)); // the turns have begun
        let began = Instant::now();
        capture_once(&ctx).expect("the capture");
        let latency = began.elapsed();
        let before_deadline = !stop.swap(true, Ordering::SeqCst) && latency < DEADLINE;
        (before_deadline, latency)
    });
    println!(
        "capture latency beside two turn-taking idle sections: {latency:?} ({} sections)",
        sections.load(Ordering::SeqCst)
    );
    assert!(
        before_deadline,
        "the capture began only once the idle sections stopped (starved, {latency:?})"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn blas_handles_moving_between_streams_on_busy_workers_do_not_starve_a_capture() {
    let _serial = serial();
    // Each worker's `Blas` alternates between two streams, so each GEMM moves it. A move began
    // with an idle section (`Blas::enter` -> `wait_idle_unless_capturing`) whose wait covered
    // the other workers' GEMMs, and was refused (`CaptureInProgress`) while a capture waited
    // or ran. Under memcheck and synccheck a capture then waited for one such section until the
    // workers stopped (bench/reliability-notes.md). A move is now ordered on the device
    // (`StreamOrder`) and waits for nothing, so no move is refused and no capture waits for one.
    let Some(ctx) = device_for_captures() else {
        return;
    };
    // Under a sanitizer (memcheck: every GEMM and capture many times slower), fewer captures,
    // so that only starvation can reach the deadline.
    let (n, wanted) = if std::env::var_os("UM_SANITIZE").is_some() {
        (64, 3)
    } else {
        (512, 20)
    };
    let stop = AtomicBool::new(false);
    let refused = AtomicU64::new(0);
    let (phases, in_time) = std::thread::scope(|t| {
        for _ in 0..4 {
            t.spawn(|| {
                let start = Instant::now();
                let blas = Blas::new(&ctx).expect("cuBLAS");
                ctx.with_stream_set(2, StreamOptions::new(), |s| {
                    let buf = |v: f32, i: usize| {
                        Managed::from_slice(&ctx, &vec![v; n * n]).and_then(|b| b.attach(&s[i]))
                    };
                    let (a0, mut c0) = (buf(1.0, 0)?, buf(0.0, 0)?);
                    let (a1, mut c1) = (buf(1.0, 1)?, buf(0.0, 1)?);
                    let g = Gemm::new(n, n, n);
                    // Until the captures are done; twice the deadline bounds a starved one. A
                    // worker that stopped on its own while a capture ran would leak its `Blas`
                    // (rule 190), which memcheck reports; it stops after the captures instead.
                    while !stop.load(Ordering::SeqCst) && start.elapsed() < 2 * DEADLINE {
                        for (a, c, st) in [(&a0, &mut c0, &s[0]), (&a1, &mut c1, &s[1])] {
                            match blas.gemm(st, &g, a, a, c) {
                                Ok(()) => {}
                                Err(um_cublas::Error::CaptureInProgress) => {
                                    refused.fetch_add(1, Ordering::SeqCst);
                                    std::thread::yield_now();
                                }
                                Err(e) => panic!("gemm: {e}"),
                            }
                        }
                        // Each pair's results are waited for, as a worker that uses them would:
                        // without the wait, 4 workers queue GEMMs without bound, and under
                        // memcheck, which runs kernels one at a time, a capture's replay waits
                        // behind that backlog (2x H200, bundle 7d5d32f: the first capture ended
                        // in 175 ms, the second not within 180 s). Before moves were ordered on
                        // the device, each move's whole-context wait bounded the queue.
                        s[0].wait_idle()?;
                        s[1].wait_idle()?;
                    }
                    s[0].sync_all((a0, c0))?;
                    s[1].sync_all((a1, c1)).map(drop)
                })
                .expect("the worker");
            });
        }
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        let mut phases = Vec::new();
        while phases.len() < wanted && start.elapsed() < DEADLINE {
            phases.push(timed_capture(&ctx));
        }
        let in_time = !stop.swap(true, Ordering::SeqCst) && start.elapsed() < DEADLINE;
        (phases, in_time)
    });
    println!(
        "{wanted} captures beside 4 workers moving their Blas: {} done; {} moves refused \
         meanwhile; steps (ms): {phases:?}",
        phases.len(),
        refused.load(Ordering::SeqCst)
    );
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "a Blas move was refused: moves no longer wait for the device"
    );
    assert!(
        in_time && phases.len() == wanted,
        "the captures did not get through the workers' idle sections before the deadline; \
         ms from each capture's start to: alloc, stream, attach, capture begun, ended, replayed \
         and synced: {phases:?}"
    );
}

/// [`capture_once`], timed: ms from its start to the end of each step (alloc, stream made,
/// attach, capture begun, capture ended, replay synced), to tell a slow step from a starved
/// one.
fn timed_capture(ctx: &Context) -> [u128; 6] {
    let t0 = Instant::now();
    let ms = || t0.elapsed().as_millis();
    let mut at = [0; 6];
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
    at[0] = ms();
    ctx.with_stream(StreamOptions::new(), |s| {
        at[1] = ms();
        let x = x.attach(s)?;
        at[2] = ms();
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            at[3] = ms();
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        at[4] = ms();
        graph.launch(s)?;
        let (x,) = graph.sync()?;
        at[5] = ms();
        assert!(x.iter().all(|v| *v == 1.0));
        Ok(())
    })
    .expect("the capture");
    at
}

/// A waker that runs its task inline, and the task begins a capture.
struct CapturingWaker {
    ctx: Context,
    result: Mutex<Option<um::Result<()>>>,
}

impl Wake for CapturingWaker {
    fn wake(self: Arc<Self>) {
        let r = capture_once(&self.ctx);
        *self
            .result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r);
    }
}

/// A waker run on um's event thread begins a capture, while an idle section's closure waits
/// for a later future of that same thread: the capture would wait for the section, and the
/// section for the event thread. No capture begins on the event thread
/// (`CaptureRefusedHere`), and the section ends.
#[test]
#[ignore = "needs a CUDA device"]
fn a_waker_on_the_event_thread_cannot_begin_a_capture_that_an_idle_section_waits_for() {
    let _serial = serial();
    let done = watchdog("a capture on the event thread and an idle section waiting for it");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let event_thread = common::event_thread_for_waits();
    let busy = Managed::<[f32]>::zeroed_slice(&ctx, 1).expect("alloc");
    let other = Managed::<[f32]>::zeroed_slice(&ctx, 256).expect("alloc");
    let waker = Arc::new(CapturingWaker {
        ctx: ctx.clone(),
        result: Mutex::new(None),
    });
    let section = ctx
        .with_stream_set(2, StreamOptions::new(), |s| {
            let mut busy = busy.attach(&s[0])?;
            testing::spin_then_add(&s[0], &mut busy, 1.0, 300_000_000)?;
            // First in the event thread's queue: completes after the spin, and its waker
            // begins a capture there.
            let mut first = s[0].sync_all_async((busy,));
            let w = Waker::from(Arc::clone(&waker));
            assert!(
                std::pin::Pin::new(&mut first)
                    .poll(&mut TaskContext::from_waker(&w))
                    .is_pending(),
                "the spin holds the stream"
            );
            // Second in the queue: the event thread reaches it only after the first.
            let other = other.attach(&s[1])?;
            let second = s[1].sync_all_async((other,));
            let section = ctx.with_idle_unless_capturing(|| block_on(second).map(drop));
            let first = block_on(first).map(drop);
            Ok((section, first))
        })
        .expect("the streams");
    drop(event_thread);
    assert!(matches!(section.0, Ok(Some(Ok(())))), "{:?}", section.0);
    assert_eq!(section.1, Ok(()));
    let captured = waker
        .result
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    assert!(
        matches!(captured, Some(Err(um::Error::CaptureRefusedHere))),
        "the waker's capture on the event thread: {captured:?}"
    );
    done.send(()).ok();
}

/// How long the idle section of the next tests waits: the spin kernel it waits for.
const SECTION_NS: u64 = 300_000_000;

/// How long each of the launcher's kernels keeps the GPU busy (`spin_then_add`, timed by the
/// GPU's own clock): longer than a launch takes under a sanitizer (a few ms), so that the
/// device always has the launcher's work queued, with or without a tool.
const LAUNCH_NS: u64 = 20_000_000;

/// How many kernels the launcher queues on one stream before it waits for that stream's
/// previous batch: the other stream's batch keeps the device busy meanwhile, and at most two
/// batches (640 ms of work) are queued.
const BATCH: u64 = 16;

/// Keeps the device busy without a gap until `stop` is set or [`DEADLINE`] has passed: kernels
/// of [`LAUNCH_NS`] each, in batches of [`BATCH`] on two streams of its own in turn, waiting
/// for a stream's previous batch (a stream wait, never the whole device) before it queues the
/// next there; `(whether stop ended it, launches)`.
fn launch_until(ctx: &Context, stop: &AtomicBool) -> (bool, u64) {
    let start = Instant::now();
    let alloc = || Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
    let (x0, x1) = (alloc(), alloc());
    ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let mut x = [x0.attach(&s[0])?, x1.attach(&s[1])?];
        let mut launched = [0u64; 2];
        let mut turn = 0;
        while !stop.load(Ordering::SeqCst) && start.elapsed() < DEADLINE {
            s[turn].wait_idle()?;
            for _ in 0..BATCH {
                testing::spin_then_add(&s[turn], &mut x[turn], 1.0, LAUNCH_NS)?;
            }
            launched[turn] += BATCH;
            turn = 1 - turn;
        }
        let by_stop = start.elapsed() < DEADLINE;
        let [x0, x1] = x;
        let (x0,) = s[0].sync_all((x0,))?;
        let (x1,) = s[1].sync_all((x1,))?;
        // Exact in f32 far beyond what a run can launch in [`DEADLINE`] (4,500 per stream).
        for (x, n) in [(&x0, launched[0]), (&x1, launched[1])] {
            assert!(x.iter().all(|v| *v == n as f32), "the launcher's sum");
        }
        Ok((by_stop, launched[0] + launched[1]))
    })
    .expect("the launcher")
}

/// Begins one capture (`capture_once`) while another thread keeps the device busy without a
/// gap ([`launch_until`]), with or without a third thread in an idle section whose wait (a
/// 300 ms kernel) the capture must wait for: the capture must end while the launcher still
/// launches. A capture waits only for the sections in progress when it asks, never for work
/// that other threads enqueue meanwhile. Under the sanitizers a capture beside workers that
/// kept launching GEMMs sometimes did not end within 90 s (bench/reliability-notes.md): run
/// under a tool, the pair tells a section's wait that the launches keep from returning (only
/// the first fails) from driver calls of the capture that lose to the launches (both fail).
/// The launcher's first version queued `add_scalar` back to back; under the tools it made only
/// 21 to 81 launches while the capture ran, too few to keep the device busy, and decided
/// nothing.
fn capture_beside_a_launcher(with_section: bool) {
    let _serial = serial();
    let done = watchdog("a capture beside a launching thread");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let stop = AtomicBool::new(false);
    let busy = Managed::from_slice(&ctx, &[0.0f32; 1]).expect("alloc");
    let (queued_tx, queued_rx) = mpsc::channel::<()>();
    let ((by_stop, launched), waited, took) = std::thread::scope(|t| {
        let launcher = t.spawn(|| launch_until(&ctx, &stop));
        let section = t.spawn(|| {
            if !with_section {
                queued_tx.send(()).expect("signal");
                return None;
            }
            ctx.with_stream(StreamOptions::new(), |s| {
                let mut busy = busy.attach(s)?;
                testing::spin_then_add(s, &mut busy, 1.0, SECTION_NS)?;
                queued_tx.send(()).expect("signal");
                // Its wait covers the 300 ms kernel; Ok(false) if the capture came first.
                let waited = ctx.wait_idle_unless_capturing()?;
                s.sync_all((busy,))?;
                Ok(Some(waited))
            })
            .expect("the section")
        });
        queued_rx.recv().expect("the spin kernel is queued");
        // The section has most likely begun its wait by now (it is not checked: a capture
        // that comes first makes the section return Ok(false), which the output shows).
        std::thread::sleep(Duration::from_millis(50));
        let began = Instant::now();
        capture_once(&ctx).expect("the capture");
        let took = began.elapsed();
        stop.store(true, Ordering::SeqCst);
        let launcher = launcher.join().expect("the launcher");
        (launcher, section.join().expect("the section"), took)
    });
    println!(
        "capture beside a launcher{}: {took:?}; {launched} launches; the section waited: {waited:?}",
        if with_section {
            " and a 300 ms idle section"
        } else {
            ""
        }
    );
    assert!(
        by_stop,
        "the capture ended only after the launcher stopped on its own ({DEADLINE:?}; took {took:?})"
    );
    done.send(()).ok();
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_waiting_for_an_idle_section_is_not_held_by_another_threads_launches() {
    let _serial = crate::common::serial();
    capture_beside_a_launcher(true);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_beside_a_thread_launching_without_pause_ends_while_it_launches() {
    let _serial = crate::common::serial();
    capture_beside_a_launcher(false);
}

// ---------------------------------------------------------------------------------------------
// Holds (`Context::with_captures_held_off`): sections without the wait, for a set-up that
// would fail a capture in progress (cuRAND's, rule 218).

/// A hold keeps a capture that another thread asks for while its closure runs from beginning
/// until the closure has returned: inside, the capture is seen waiting and not begun, a
/// whole-device wait (which fails a capture in progress) goes through, a nested hold of this
/// thread is granted, and a new hold on a third thread, in no section of the device, is refused
/// (`Ok(None)`: the capture waits only for the holds in progress when it asked). Once the
/// closure returns, the capture begins, ends and replays right. Expected to pass.
#[test]
#[ignore = "needs a CUDA device"]
fn a_hold_keeps_another_threads_capture_from_beginning_until_its_closure_returns() {
    let _serial = serial(); // captures change the answer of a hold
    let done = watchdog("a hold and the capture that waits for it");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let began = AtomicBool::new(false);
    let (go, told) = mpsc::channel::<()>();
    let (ctx, began) = (&ctx, &began);
    let (inside, captured) = std::thread::scope(|t| {
        let capturer = t.spawn(move || common::capture_when_told(ctx, &told, began));
        let inside = ctx.with_captures_held_off(|| {
            go.send(()).expect("the capturing thread listens");
            let waits = common::until_a_capture_waits(ctx);
            let waited = ctx.wait_idle();
            let nested = ctx.with_captures_held_off(|| 5);
            let beside = t
                .spawn(move || ctx.with_captures_held_off(|| ()))
                .join()
                .expect("the third thread");
            (waits, waited, nested, beside, began.load(Ordering::SeqCst))
        });
        let captured = capturer.join().expect("the capturing thread");
        (inside, captured)
    });
    let (waits, waited, nested, beside, began_inside) = inside
        .expect("the hold")
        .expect("granted: no capture was in progress");
    assert!(
        waits,
        "the other thread's capture never waited for the hold"
    );
    assert_eq!(waited, Ok(()), "a whole-device wait inside the hold");
    assert_eq!(nested, Ok(Some(5)), "a nested hold while a capture waits");
    assert_eq!(
        beside,
        Ok(None),
        "a new hold on a third thread while a capture waits"
    );
    assert!(!began_inside, "the capture began inside the hold");
    assert_eq!(captured, Ok(true), "the capture after the hold");
    assert_eq!(
        um_core::capture_counts(ctx),
        um_core::CaptureCounts::default()
    );
    done.send(()).ok();
}

/// A hold is refused (`Ok(None)`, its closure not run) while a capture of `um` is in progress:
/// inside a capture closure of this thread, and beside another thread's open capture. The
/// captures are not disturbed. Expected to pass.
#[test]
#[ignore = "needs a CUDA device"]
fn a_hold_is_refused_during_a_capture_on_any_thread_and_its_closure_is_not_run() {
    let _serial = serial(); // captures change the answer of a hold
    let done = watchdog("a hold beside a capture");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let ran = AtomicBool::new(false);
    // Inside a capture closure of this thread.
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    let (x, inside) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, inside) = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                let inside = ctx.with_captures_held_off(|| ran.store(true, Ordering::SeqCst));
                Ok(((x,), inside))
            })?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            Ok((x, inside))
        })
        .expect("the capture");
    assert_eq!(inside, Ok(None), "a hold inside a capture closure");
    assert!(x.iter().all(|v| *v == 1.0), "the capture replayed wrong");
    // Beside another thread's open capture.
    let (in_capture, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    let (beside, captured) = std::thread::scope(|t| {
        let capturer = t.spawn(|| {
            let x = Managed::from_slice(&ctx, &[0.0f32; 256])?;
            ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                    testing::add_scalar(cap, &mut x, 1.0)?;
                    in_capture.wait();
                    release.wait();
                    Ok(((x,), ()))
                })?;
                graph.launch(s)?;
                let (x,) = graph.sync()?;
                Ok(x.iter().all(|v| *v == 1.0))
            })
        });
        in_capture.wait();
        let beside = ctx.with_captures_held_off(|| ran.store(true, Ordering::SeqCst));
        release.wait();
        (beside, capturer.join().expect("the capturing thread"))
    });
    assert_eq!(beside, Ok(None), "a hold beside another thread's capture");
    assert_eq!(captured, Ok(true), "the capture beside the refused hold");
    assert!(
        !ran.load(Ordering::SeqCst),
        "a refused hold ran its closure"
    );
    assert_eq!(ctx.with_captures_held_off(|| 3), Ok(Some(3)), "after both");
    done.send(()).ok();
}

/// A panic inside a hold's closure while another thread's capture waits for it: the hold and
/// the thread's mark are released as it unwinds, so the waiting capture begins and replays
/// right, a capture of the device may begin on this thread again (not `CaptureRefusedHere`),
/// a hold is granted again, and the device's count is back to nothing. Expected to pass.
#[test]
#[ignore = "needs a CUDA device"]
fn a_panic_in_a_hold_releases_it_and_the_capture_waiting_for_it_begins() {
    let _serial = serial(); // captures change the answer of a hold
    let done = watchdog("a panicking hold and the capture that waits for it");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let began = AtomicBool::new(false);
    let (go, told) = mpsc::channel::<()>();
    let (ctx, began) = (&ctx, &began);
    let (caught, waits, captured) = std::thread::scope(|t| {
        let capturer = t.spawn(move || common::capture_when_told(ctx, &told, began));
        let mut waits = false;
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _ = ctx.with_captures_held_off(|| {
                go.send(()).expect("the capturing thread listens");
                waits = common::until_a_capture_waits(ctx);
                panic!("a hold whose closure panics while a capture waits (on purpose)");
            });
        }));
        (
            caught,
            waits,
            capturer.join().expect("the capturing thread"),
        )
    });
    assert!(caught.is_err(), "the closure's panic did not come through");
    assert!(
        waits,
        "the other thread's capture never waited for the hold"
    );
    assert_eq!(
        captured,
        Ok(true),
        "the capture that waited for the panicking hold"
    );
    capture_once(ctx).expect("a capture of the device on the thread that panicked");
    assert_eq!(
        ctx.with_captures_held_off(|| 3),
        Ok(Some(3)),
        "a hold again"
    );
    assert_eq!(
        um_core::capture_counts(ctx),
        um_core::CaptureCounts::default()
    );
    done.send(()).ok();
}

/// A waker that asks for a hold when um's stream callback wakes it, and keeps the answer.
struct AsksForAHold {
    ctx: Context,
    ran: AtomicBool,
    answer: Mutex<Option<um::Result<Option<()>>>>,
}

impl Wake for AsksForAHold {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let answer = self
            .ctx
            .with_captures_held_off(|| self.ran.store(true, Ordering::SeqCst));
        *self.answer.lock().expect("waker state") = Some(answer);
    }
}

/// A hold asked for inside um's stream callback (a waker run there, where CUDA allows no call
/// and a thread may wait for the callback) is refused with `Ok(None)` before any driver call or
/// count, its closure not run; the future completes and the device's count is untouched.
/// Expected to pass.
#[test]
#[ignore = "needs a CUDA device"]
fn a_hold_asked_for_inside_a_stream_callback_is_refused_and_runs_nothing() {
    let _serial = serial(); // captures change the answer of a hold
    let done = watchdog("a hold asked for inside a stream callback");
    let ctx = Context::new(0).expect("device 0");
    let state = Arc::new(AsksForAHold {
        ctx: ctx.clone(),
        ran: AtomicBool::new(false),
        answer: Mutex::new(None),
    });
    let waker = Waker::from(Arc::clone(&state));
    let x = Managed::<[f32]>::zeroed_slice(&ctx, 1 << 26).expect("alloc");
    let answer = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            for _ in 0..500 {
                testing::add_scalar(s, &mut x, 1.0)?;
            }
            let mut fut = s.sync_all_async((x,));
            // Registers the waker behind the 500 launches; no other poll until it has run, so
            // it stays the one the callback wakes.
            assert!(
                Pin::new(&mut fut)
                    .poll(&mut TaskContext::from_waker(&waker))
                    .is_pending()
            );
            let answer = loop {
                if let Some(answer) = state.answer.lock().expect("waker state").take() {
                    break answer;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            let (x,) = block_on(fut)?;
            assert_eq!(x[0], 500.0);
            Ok(answer)
        })
        .expect("the work");
    assert_eq!(answer, Ok(None), "a hold inside um's stream callback");
    assert!(!state.ran.load(Ordering::SeqCst), "its closure ran");
    assert_eq!(
        um_core::capture_counts(&ctx),
        um_core::CaptureCounts::default()
    );
    done.send(()).ok();
}
