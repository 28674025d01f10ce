//! Teardown: drop order and thread exit. A `Context` handle dropped while a kernel of its
//! module still runs, or a `Kernel` dropped after the last handle of its device, unloads no
//! module under running work nor after the primary context was released. um's calls made from a
//! `thread_local!` value's destructor at thread exit never panic (a panic there aborts the
//! process), whatever order the platform runs the destructors in: a `Blas` or a library object
//! whose `Drop` uses `wait_idle_unless_capturing` (the thread's idle-section mark has no
//! destructor), and a per-thread worker that does one last GEMM and drops stream-owned buffers
//! (a capture there is refused, the per-thread stream is `Err(ThreadExiting)`, a launch finds its
//! function without the thread's cache). `std::process::exit` inside a capture closure runs the
//! thread-local destructors with the capture still open: their stream-owned drops do not wait,
//! and what they hold is leaked.
//!
//! The thread-exit tests run their body in a child process (this binary, `UM_TEARDOWN_CHILD`
//! set): an abort at thread exit kills the child, and the parent reports it.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};
use um_test_kernels::testing;

use crate::common;
use common::{gpu, serial};

const CHILD: &str = "UM_TEARDOWN_CHILD";

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

// ---------------------------------------------------------------------------------------------
// Modules and handles.

/// Typed launchers keep no reference to the `Context` handle whose module they launch, and a
/// handle unloads its modules when its last clone goes. Here memory of handle `h2` runs a kernel of
/// handle `h1`'s module on an `h1` stream, is handed to an `h2` stream, and `h1` is dropped while
/// the kernel still runs. A handle's drop waits for the context's work before it unloads a module,
/// so the kernel finishes its work and the result is exact (and the sanitizer pass sees no error).
#[test]
#[ignore = "needs a CUDA device"]
fn dropping_a_handle_whose_kernel_still_runs_unloads_nothing_under_it() {
    let _serial = crate::common::serial();
    let h2 = gpu();
    let n = 4096;
    let data = Managed::from_fn(&h2, n, |_| 1.0f32).expect("alloc");
    let spin_ns = if std::env::var_os("UM_SANITIZE").is_some() {
        10_000_000
    } else {
        300_000_000
    };
    let data = h2
        .with_stream(StreamOptions::new(), |outer| {
            let h1 = gpu();
            assert!(h1.same_as(&h2));
            let d = h1.with_stream(StreamOptions::new(), |inner| {
                let mut d = data.attach(inner)?;
                testing::spin_then_add(inner, &mut d, 1.0, spin_ns)?;
                d.hand_off(outer)
            })?;
            drop(h1);
            d.sync()
        })
        .expect("the kernel of a dropped handle completes");
    assert!(data.iter().all(|v| *v == 2.0), "{}", data[0]);
}

/// A `Kernel` dropped after the last handle of its device, round after round, beside another
/// thread that makes a fresh handle, loads a module through it and launches: `Kernel` and `Module`
/// drop their module reference before their context, so no module is unloaded after the primary
/// context was released, and the other thread's modules stay loaded.
#[test]
#[ignore = "needs a CUDA device"]
fn a_kernel_dropped_after_the_last_handle_of_its_device_leaves_other_handles_modules_alone() {
    let _serial = serial(); // captures change the answer of an idle section
    // Touch the device once, so that a failure below is not a missing GPU.
    drop(gpu());
    let stop = AtomicBool::new(false);
    let rounds = common::workload(200, 20);
    std::thread::scope(|t| {
        // A: the kernel is the last handle of the device each round.
        t.spawn(|| {
            for _ in 0..rounds {
                let ctx = Context::new(0).expect("device 0");
                let k = ctx.kernel(testing::PTX, "axpy").expect("kernel");
                drop(ctx);
                // Before the fix: the ctx field first (retire, Shared::drop, the primary context
                // released), then cuModuleUnload of the kernel's module. Now the module's
                // reference goes first, and the context's cache unloads it after a wait.
                drop(k);
            }
            stop.store(true, Ordering::Relaxed);
        });
        // B: a fresh handle each round, a module loaded through it, one launch, checked.
        t.spawn(|| {
            let mut round = 0u32;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let ctx = Context::new(0).expect("device 0");
                let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
                let x = ctx
                    .with_stream(StreamOptions::new(), |s| {
                        let mut x = x.attach(s)?;
                        testing::add_scalar(s, &mut x, 1.0)?;
                        let (x,) = s.sync_all((x,))?;
                        Ok(x)
                    })
                    .unwrap_or_else(|e| {
                        panic!("round {round}: a module of this handle broke: {e}")
                    });
                assert!(x.iter().all(|v| *v == 1.0), "round {round}: wrong result");
            }
        });
    });
}

// ---------------------------------------------------------------------------------------------
// A drop that waits through um in a thread-local's destructor.

/// Runs `test` alone in a child process and checks that it passed (no abort at thread exit).
fn passes_in_child(test: &str) {
    let (status, text) = common::child_output(test, CHILD);
    assert!(
        status.success() && text.contains("1 passed"),
        "the child died at thread exit ({status}): a drop that uses an idle section ran after \
         the thread's idle-section mark was destroyed"
    );
}

thread_local! {
    /// The common "one cuBLAS handle per thread" pattern.
    static BLAS: RefCell<Option<Blas>> = const { RefCell::new(None) };
}

/// A `Blas` kept in a `thread_local!` set up before the thread first touches its idle-section
/// mark, and moved between streams (a move is an idle section): at thread exit the mark's
/// destructor would run first, then `Blas::drop` (an idle section) would find it gone and panic.
/// The mark has no destructor, so the thread ends.
#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_kept_in_a_thread_local_and_moved_between_streams_does_not_abort_at_thread_exit() {
    let _serial = crate::common::serial();
    if !is_child() {
        return passes_in_child(
            "a_blas_kept_in_a_thread_local_and_moved_between_streams_does_not_abort_at_thread_exit",
        );
    }
    let ctx = Context::new(0).expect("device 0");
    let n = 64;
    std::thread::scope(|t| {
        t.spawn(|| {
            BLAS.with(|b| {
                // BLAS's destructor is registered now, before the thread touches the mark.
                let mut b = b.borrow_mut();
                let blas = b.get_or_insert_with(|| Blas::new(&ctx).expect("cuBLAS"));
                ctx.with_stream_set(2, StreamOptions::new(), |s| {
                    let buf = |v: f32, i: usize| {
                        Managed::from_slice(&ctx, &vec![v; n * n]).and_then(|m| m.attach(&s[i]))
                    };
                    let g = Gemm::new(n, n, n);
                    let (a0, mut c0) = (buf(1.0, 0)?, buf(0.0, 0)?);
                    let (a1, mut c1) = (buf(1.0, 1)?, buf(0.0, 1)?);
                    blas.gemm(&s[0], &g, &a0, &a0, &mut c0)
                        .expect("gemm on stream 0");
                    // The move to stream 1 is an idle section: the thread's mark is touched
                    // (and its destructor registered) only now, after BLAS's.
                    blas.gemm(&s[1], &g, &a1, &a1, &mut c1)
                        .expect("gemm on stream 1");
                    s[0].sync_all((a0, c0))?;
                    s[1].sync_all((a1, c1)).map(drop)
                })
                .expect("the streams");
            });
            // The thread ends: its TLS destructors run in reverse order of registration, the
            // mark's first, then BLAS's: Blas::drop -> with_idle_unless_capturing ->
            // IdleSection::enter -> IDLE_SECTIONS.with panics -> abort.
        })
        // Joined: `scope` stops waiting for a thread when its closure returns, before its
        // thread-local destructors run (the process could end with BLAS's drop half done);
        // the join waits for the thread's end.
        .join()
        .expect("the thread");
    });
    println!("the thread with a thread-local Blas ended");
}

/// The object of `wait_idle_unless_capturing`'s doc: "the destructor of a library object whose
/// memory the device may still use". No cuBLAS needed.
struct LibraryObject(Context);

impl Drop for LibraryObject {
    fn drop(&mut self) {
        if self.0.wait_idle_unless_capturing() != Ok(true) {
            // Leak it, as the doc says.
        }
    }
}

thread_local! {
    static OBJECT: RefCell<Option<LibraryObject>> = const { RefCell::new(None) };
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_library_object_in_a_thread_local_whose_drop_waits_through_um_does_not_abort_at_thread_exit() {
    let _serial = crate::common::serial();
    if !is_child() {
        return passes_in_child(
            "a_library_object_in_a_thread_local_whose_drop_waits_through_um_does_not_abort_at_thread_exit",
        );
    }
    let ctx = Context::new(0).expect("device 0");
    std::thread::scope(|t| {
        t.spawn(|| {
            OBJECT.with(|o| *o.borrow_mut() = Some(LibraryObject(ctx.clone())));
            // Any idle section (or any capture: `may_begin_capture` reads the mark) after the
            // thread-local was set up.
            assert_eq!(ctx.wait_idle_unless_capturing(), Ok(true));
        })
        // Joined, so that the thread-local destructors have run (see above).
        .join()
        .expect("the thread");
    });
    println!("the thread with a thread-local library object ended");
}

// ---------------------------------------------------------------------------------------------
// Stream-owned buffers, GEMMs and captures in a thread-local's destructor.

/// Runs `test` alone in a child process (this binary, [`CHILD`] set); the child must pass, and
/// print `flushes` lines "flushed at thread exit".
fn flushes_in_child(test: &str, flushes: usize) {
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

/// A thread with two `Flusher`s in thread-locals, one set up before the thread's first drop of a
/// stream-owned buffer (which sets up um's record of the thread's captures) and one after: one of
/// them is dropped after um's record is gone, whatever order the destructors run in.
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
        // thread-local destructors run; the join waits for the thread's end.
        .join()
        .expect("the thread");
    });
    println!("the thread ended");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_owned_buffer_dropped_in_a_thread_local_destructor_does_not_abort() {
    let _serial = crate::common::serial();
    if !is_child() {
        return flushes_in_child(
            "a_stream_owned_buffer_dropped_in_a_thread_local_destructor_does_not_abort",
            2,
        );
    }
    body(false);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_thread_local_blas_worker_that_flushes_a_gemm_at_thread_exit_does_not_abort() {
    let _serial = crate::common::serial();
    if !is_child() {
        return flushes_in_child(
            "a_thread_local_blas_worker_that_flushes_a_gemm_at_thread_exit_does_not_abort",
            2,
        );
    }
    body(true);
}

/// A thread-local whose destructor runs after `CAPTURES` (it was set up first; glibc runs the
/// destructors in reverse order) while the thread's capture is still open.
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

/// `std::process::exit` inside a capture closure runs the thread's thread-local destructors with
/// the capture still open: one that runs after um's record of captures sees no scope while its
/// thread captures. Its stream-owned drops must still not wait (the thread's count of captures is
/// asked too), a capture there is refused, and a `Blas` dropped there is leaked.
#[test]
#[ignore = "needs a CUDA device"]
fn exiting_inside_a_capture_closure_runs_thread_local_destructors_that_neither_wait_nor_abort_and_leaks_what_they_hold()
 {
    let _serial = crate::common::serial();
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
