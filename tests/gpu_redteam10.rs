//! Red team 10 (docs/redteam10.md): `um-cublas`'s `Blas` beside captures and idle sections, and
//! um's thread-locals in a `thread_local!` value's destructor.
//!
//! - Finding 1 (fixed): `Managed::drop` of a stream-owned buffer asked `capturing()`, which
//!   reads a thread-local with a destructor (`reclaim::defer::CAPTURES`). A `thread_local!`
//!   value of the user's whose `Drop` does one last piece of GPU work (attach, a GEMM, and lets
//!   the stream-owned buffers drop) panicked when it ran after that thread-local was destroyed:
//!   a panic in a TLS destructor aborts the process. So did the per-thread stream and a typed
//!   launch there. Now a capture is refused there (`CaptureRefusedHere`), the per-thread stream
//!   is `Err(ThreadExiting)`, and a launch looks its function up without the thread's cache.
//!   Two thread-locals, one set up before the thread's first stream-owned drop and one after, so
//!   that one of them is dropped after `CAPTURES` whatever order the platform runs the
//!   destructors in. Each test runs in a child process. A CPU model of the pattern aborted
//!   (exit 134) before the fix; the um-core unit tests of rule 191 show the thread-locals'
//!   state there.
//! - Red team 11: `std::process::exit` inside a capture closure runs the thread's thread-local
//!   destructors with the capture still open, so one that runs after `CAPTURES` sees no scope
//!   while its thread captures. Its stream-owned drops must still not wait (the count of the
//!   thread's captures is asked too), a capture there is refused, and a `Blas` dropped there is
//!   leaked.
//! - Attempts 2 and 3 (not known without a GPU): a first GEMM on the capturing thread, on the
//!   eager stream the handle is bound to, inside a capture closure; `Blas::new` and first uses of
//!   cuBLAS's kernels on another thread beside captures (rule 187). A failure would be a capture
//!   that fails for a correct program, not undefined behaviour.
//!   On the first GPU run, attempt 2 failed the capture (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`:
//!   cuBLAS loads the GEMM's kernel lazily, a module load in thread-local mode); `Blas` now calls
//!   cuBLAS with the thread's mode relaxed inside a capture closure
//!   (`um_core::relaxed_while_capturing`). Attempt 3 failed in the test itself: each round's
//!   stream was new, so its `Blas` moved, and a move was refused during a capture.
//! - Attempt 4 (liveness): a capture closure that waited for another thread's `Blas` move
//!   waited for ever without a bound, because the move was refused until the capture had
//!   ended. A move is now ordered on the device (`StreamOrder`), without a host wait, so it
//!   goes through during the capture, and the closure sees it.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use um::kernels::testing;
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm, Gemv, Op};

mod common;
use common::{device_for_captures, serial, watchdog};

const CHILD: &str = "UM_REDTEAM10_CHILD";

/// Runs `test` alone in a child process (this binary, [`CHILD`] set); the child must pass, and
/// print `flushes` lines "flushed at thread exit".
fn in_child(test: &str, flushes: usize) {
    let (status, text) = common::child_output(test, CHILD);
    assert!(
        status.success() && text.contains("1 passed"),
        "the child failed ({status})"
    );
    assert_eq!(
        text.matches("flushed at thread exit").count(),
        flushes,
        "the thread-locals' flushes"
    );
}

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// A per-thread worker that does one last GEMM when its thread ends (the "one `Blas` per
/// thread" pattern of `Blas`'s doc, with a flush on exit). The result is not needed, so the
/// stream-owned buffers are simply dropped (each drop waits for the stream).
struct Flusher {
    name: &'static str,
    ctx: Context,
    blas: Option<Blas>,
    a: Option<Managed<[f32]>>,
    c: Option<Managed<[f32]>>,
}

const N: usize = 32;

impl Flusher {
    fn new(ctx: &Context, name: &'static str, with_blas: bool) -> Flusher {
        Flusher {
            name,
            ctx: ctx.clone(),
            blas: with_blas.then(|| Blas::new(ctx).expect("cuBLAS")),
            a: Some(Managed::from_slice(ctx, &[1.0f32; N * N]).expect("alloc")),
            c: Some(Managed::from_slice(ctx, &[0.0f32; N * N]).expect("alloc")),
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        let (Some(a), Some(c)) = (self.a.take(), self.c.take()) else {
            return;
        };
        let blas = self.blas.as_ref();
        let _ = self.ctx.with_stream(StreamOptions::new(), |s| {
            let (a, mut c) = (a.attach(s)?, c.attach(s)?);
            if let Some(blas) = blas {
                let _ = blas.gemm(s, &Gemm::new(N, N, N), &a, &a, &mut c);
            }
            // `a` and `c` are dropped here, stream-owned: `Managed::drop` -> `capturing()`.
            Ok(())
        });
        println!("{}: flushed at thread exit", self.name);
    }
}

thread_local! {
    static BEFORE: RefCell<Option<Flusher>> = const { RefCell::new(None) };
    static AFTER: RefCell<Option<Flusher>> = const { RefCell::new(None) };
}

fn body(with_blas: bool) {
    let ctx = Context::new(0).expect("device 0");
    std::thread::scope(|t| {
        t.spawn(|| {
            BEFORE.with(|f| *f.borrow_mut() = Some(Flusher::new(&ctx, "before", with_blas)));
            // The thread's first drop of a stream-owned buffer: `CAPTURES` is touched, and its
            // destructor registered, now.
            ctx.with_stream(StreamOptions::new(), |s| {
                let x = Managed::from_slice(&ctx, &[0.0f32; 4])?.attach(s)?;
                drop(x);
                Ok(())
            })
            .expect("a stream-owned drop");
            AFTER.with(|f| *f.borrow_mut() = Some(Flusher::new(&ctx, "after", with_blas)));
            // Thread exit: one of BEFORE / AFTER is dropped after CAPTURES is gone.
        })
        // Joined: `scope` stops waiting for a thread when its closure returns, before its
        // thread-local destructors run (red team 11); the join waits for the thread's end.
        .join()
        .expect("the thread");
    });
    println!("the thread ended");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_owned_buffer_dropped_in_a_thread_local_destructor_does_not_abort() {
    if !is_child() {
        return in_child(
            "a_stream_owned_buffer_dropped_in_a_thread_local_destructor_does_not_abort",
            2,
        );
    }
    body(false);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_thread_local_blas_worker_that_flushes_a_gemm_at_thread_exit_does_not_abort() {
    if !is_child() {
        return in_child(
            "a_thread_local_blas_worker_that_flushes_a_gemm_at_thread_exit_does_not_abort",
            2,
        );
    }
    body(true);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_first_gemm_on_the_eager_stream_inside_a_capture_closure_does_not_fail_the_capture() {
    if !is_child() {
        return in_child(
            "a_first_gemm_on_the_eager_stream_inside_a_capture_closure_does_not_fail_the_capture",
            0,
        );
    }
    let done = watchdog("a GEMM inside a capture closure");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let n = 96;
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n]).expect("alloc");
    let v = Managed::from_slice(&ctx, &vec![1.0f32; n]).expect("alloc");
    let y = Managed::from_slice(&ctx, &vec![0.0f32; n]).expect("alloc");
    let c = Managed::from_slice(&ctx, &vec![0.0f32; n * n]).expect("alloc");
    let (captured, c) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, a, v, mut y, mut c) = (
                x.attach(s)?,
                a.attach(s)?,
                v.attach(s)?,
                y.attach(s)?,
                c.attach(s)?,
            );
            // Binds the handle to `s` with a GEMV: the GEMM kernel stays cold.
            blas.gemv(s, &Gemv::new(n, n), &a, &v, &mut y)?;
            let captured = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                // On the capturing thread, on the eager stream it is bound to: no move, so
                // `enter` checks nothing about captures.
                blas.gemm(s, &Gemm::new(n, n, n).transa(Op::T), &a, &a, &mut c)?;
                testing::add_scalar(cap, &mut x, 1.0)?;
                Ok(((x,), ()))
            });
            let captured = match captured {
                Ok((graph, ())) => {
                    graph.launch(s)?;
                    let (x,) = graph.sync()?;
                    Ok(x.iter().all(|e| *e == 2.0))
                }
                Err(e) => Err(e),
            };
            let (_, _, c) = s.sync_all((a, y, c))?;
            Ok((captured, c))
        })
        .expect("the stream");
    println!("capture with a first GEMM inside: {captured:?}");
    assert!(c.iter().all(|e| *e == n as f32), "the eager GEMM's result");
    assert_eq!(
        captured,
        Ok(true),
        "a correct capture failed because of a cuBLAS call on the capturing thread"
    );
    done.send(()).ok();
}

#[test]
#[ignore = "needs a CUDA device"]
fn blas_made_and_used_for_the_first_time_beside_captures_fails_none() {
    if !is_child() {
        return in_child(
            "blas_made_and_used_for_the_first_time_beside_captures_fails_none",
            0,
        );
    }
    let done = watchdog("cuBLAS first use beside captures");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let stop = AtomicBool::new(false);
    let failed = AtomicU64::new(0);
    let (began_tx, began_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let rounds = 8;
    let (ctx, stop, failed) = (&ctx, &stop, &failed);
    std::thread::scope(|t| {
        // Captures back to back; each holds its capture open until the other thread has made
        // its cuBLAS calls of this round (at most 2 s).
        t.spawn(move || {
            for _ in 0..rounds {
                let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
                let r = ctx.with_stream(StreamOptions::new(), |s| {
                    let x = x.attach(s)?;
                    let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                        testing::add_scalar(cap, &mut x, 1.0)?;
                        began_tx.send(()).expect("signal");
                        let _ = ready_rx.recv_timeout(Duration::from_secs(2));
                        testing::add_scalar(cap, &mut x, 1.0)?;
                        Ok(((x,), ()))
                    })?;
                    graph.launch(s)?;
                    let (x,) = graph.sync()?;
                    assert!(x.iter().all(|e| *e == 2.0));
                    Ok(())
                });
                if let Err(e) = r {
                    println!("capture failed: {e}");
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
            stop.store(true, Ordering::SeqCst);
        });
        // Round 0: `Blas::new` while a capture is open. Later rounds: a kernel cuBLAS has not
        // used yet in this process (another type, transpose or shape), each on a stream of its
        // own, so each round moves the handle (ordered on the device, no wait) while the
        // other thread's capture is open.
        t.spawn(move || {
            let mut blas = None;
            for round in 0..rounds {
                if began_rx.recv_timeout(Duration::from_secs(30)).is_err() {
                    break;
                }
                if blas.is_none() {
                    blas = Some(Blas::new(ctx).expect("cuBLAS beside a capture"));
                }
                let b = blas.as_ref().expect("made");
                let n = 33 + 64 * round;
                ctx.with_stream(StreamOptions::new(), |s| {
                    if round % 2 == 0 {
                        let a = Managed::from_slice(ctx, &vec![1.0f32; n * n])?.attach(s)?;
                        let mut c = Managed::from_slice(ctx, &vec![0.0f32; n * n])?.attach(s)?;
                        let op = if round % 4 == 0 { Op::N } else { Op::T };
                        b.gemm(s, &Gemm::new(n, n, n).transa(op), &a, &a, &mut c)?;
                        s.sync_all((a, c)).map(drop)
                    } else {
                        let a = Managed::from_slice(ctx, &vec![1.0f64; n * n])?.attach(s)?;
                        let mut c = Managed::from_slice(ctx, &vec![0.0f64; n * n])?.attach(s)?;
                        b.gemm(s, &Gemm::new(n, n, n), &a, &a, &mut c)?;
                        s.sync_all((a, c)).map(drop)
                    }
                })
                .expect("the eager GEMM beside the capture");
                ready_tx.send(()).ok();
            }
            // Dropped once the captures are over (a drop during one would leak it, rule 146).
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(blas);
        });
    });
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "cuBLAS's creation or first use on another thread failed captures of um (rule 187)"
    );
    done.send(()).ok();
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_closure_that_waits_for_a_blas_move_on_another_thread_sees_it_go_through() {
    let _serial = serial();
    let done = watchdog("a capture closure waiting for a Blas move");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let n = 64;
    let refused = AtomicU64::new(0);
    let (began_tx, began_rx) = mpsc::channel::<()>();
    let (moved_tx, moved_rx) = mpsc::channel::<()>();
    let (ctx, refused) = (&ctx, &refused);
    let (seen_in_capture, capture) = std::thread::scope(|t| {
        let worker = t.spawn(move || {
            let blas = Blas::new(ctx).expect("cuBLAS");
            ctx.with_stream_set(2, StreamOptions::new(), |s| {
                let buf = |v: f32, i: usize| {
                    Managed::from_slice(ctx, &vec![v; n * n]).and_then(|m| m.attach(&s[i]))
                };
                let (a0, mut c0) = (buf(1.0, 0)?, buf(0.0, 0)?);
                let (a1, mut c1) = (buf(1.0, 1)?, buf(0.0, 1)?);
                let g = Gemm::new(n, n, n);
                blas.gemm(&s[0], &g, &a0, &a0, &mut c0)?; // bound to stream 0
                began_rx.recv().expect("the capture has begun");
                // "Retry until it succeeds": no retry is needed any more.
                loop {
                    match blas.gemm(&s[1], &g, &a1, &a1, &mut c1) {
                        Ok(()) => break,
                        Err(um_cublas::Error::CaptureInProgress) => {
                            refused.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_micros(100));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                moved_tx.send(()).ok();
                s[0].sync_all((a0, c0))?;
                let (_, c1) = s[1].sync_all((a1, c1))?;
                // Ordered after the GEMM on stream 0, and right.
                assert!(c1.iter().all(|v| *v == n as f32), "the moved GEMM's result");
                Ok(())
            })
            .expect("the worker");
        });
        let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
        let mut seen = None;
        let capture = ctx.with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                began_tx.send(()).expect("signal");
                // A program may wait here without a bound: the move needs no host wait.
                seen = Some(moved_rx.recv_timeout(Duration::from_secs(30)).is_ok());
                Ok(((x,), ()))
            })?;
            graph.launch(s)?;
            graph.sync().map(drop)
        });
        worker.join().expect("the worker");
        (seen, capture)
    });
    println!(
        "the worker's move was refused {} times during the capture",
        refused.load(Ordering::SeqCst)
    );
    assert!(capture.is_ok(), "the capture: {capture:?}");
    assert_eq!(
        seen_in_capture,
        Some(true),
        "the move did not go through while the capture was in progress"
    );
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "a move was refused during the capture"
    );
    done.send(()).ok();
}

/// A thread-local whose destructor runs after `CAPTURES` (it was set up first; glibc runs the
/// destructors in reverse order) while the thread's capture is still open (red team 11).
struct LateWork {
    ctx: Context,
    blas: Option<Blas>,
    a: Option<Managed<[f32]>>,
}

impl Drop for LateWork {
    fn drop(&mut self) {
        let Some(a) = self.a.take() else { return };
        let blas = self.blas.take();
        let r = self.ctx.with_stream(StreamOptions::new(), |s| {
            let mut a = a.attach(s)?;
            if let Some(blas) = &blas {
                let b = Managed::from_slice(&self.ctx, &[1.0f32; 16 * 16])?.attach(s)?;
                let mut c = Managed::from_slice(&self.ctx, &[0.0f32; 16 * 16])?.attach(s)?;
                let _ = blas.gemm(s, &Gemm::new(16, 16, 16), &b, &b, &mut c);
            }
            testing::add_scalar(s, &mut a, 1.0)?;
            // A capture here: refused once CAPTURES is gone.
            let cap = s.capture((a,), |cap, (mut a,)| {
                testing::add_scalar(cap, &mut a, 1.0)?;
                Ok(((a,), ()))
            });
            eprintln!(
                "late: capture in the destructor: {:?}",
                cap.as_ref().map(|_| ())
            );
            Ok(())
        });
        drop(blas);
        eprintln!(
            "late: with_stream returned {:?}; every drop returned",
            r.map(|_| ())
        );
    }
}

thread_local! {
    static LATE: RefCell<Option<LateWork>> = const { RefCell::new(None) };
}

#[test]
#[ignore = "needs a CUDA device"]
fn exiting_inside_a_capture_closure_runs_thread_local_destructors_that_neither_wait_nor_abort_and_leaks_what_they_hold()
 {
    if !is_child() {
        let (status, text) = common::child_output(
            "exiting_inside_a_capture_closure_runs_thread_local_destructors_that_neither_wait_nor_abort_and_leaks_what_they_hold",
            CHILD,
        );
        assert!(status.success(), "the child: {status}");
        assert!(
            text.contains("every drop returned"),
            "the late destructor ran to its end"
        );
        return;
    }
    let ctx = Context::new(0).expect("device 0");
    if !ctx.info().concurrent_managed_access {
        eprintln!("every drop returned (skipped: no concurrent managed access)");
        return;
    }
    let t = {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            // Touched first: its destructor runs after CAPTURES' (glibc runs them LIFO).
            LATE.with(|l| {
                *l.borrow_mut() = Some(LateWork {
                    ctx: ctx.clone(),
                    blas: Some(Blas::new(&ctx).expect("cuBLAS")),
                    a: Some(Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc")),
                });
            });
            let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
            let _ = ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (_graph, ()) = s.capture((x,), |cap, (mut x,)| {
                    testing::add_scalar(cap, &mut x, 1.0)?;
                    drop(x); // buried in CAPTURES, dropped (leaked) by CAPTURES' destructor
                    eprintln!("exiting inside the capture closure");
                    std::process::exit(0);
                })?;
                Ok(())
            });
        })
    };
    let _ = t.join();
}
