//! Red team 8 (docs/redteam8.md), finding 1: the thread's idle-section mark (`IDLE_SECTIONS`,
//! then a `RefCell<Vec<usize>>`) had a destructor, so it was destroyed at thread exit. A `Blas`, or any
//! object whose `Drop` uses `wait_idle_unless_capturing` as its doc suggests, kept in a
//! `thread_local!` that was set up before the thread first touched the mark, is dropped after the
//! mark is gone: `IdleSection::enter` panics ("cannot access a Thread Local Storage value during
//! or after destruction"), and a panic in a TLS destructor aborts the process.
//!
//! Each test runs its body in a child process (this binary, `UM_REDTEAM8_CHILD` set): before the
//! fix the body aborted the process. Now the mark is plain `Cell`s, with no destructor, and the
//! child passes.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::cell::RefCell;

use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

mod common;

const CHILD: &str = "UM_REDTEAM8_CHILD";

/// Runs `test` alone in a child process and checks that it passed (no abort at thread exit).
fn in_child(test: &str) {
    let (status, text) = common::child_output(test, CHILD);
    assert!(
        status.success() && text.contains("1 passed"),
        "the child died at thread exit ({status}): a drop that uses an idle section ran after \
         the thread's idle-section mark was destroyed"
    );
}

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

thread_local! {
    /// The common "one cuBLAS handle per thread" pattern.
    static BLAS: RefCell<Option<Blas>> = const { RefCell::new(None) };
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_kept_in_a_thread_local_and_moved_between_streams_does_not_abort_at_thread_exit() {
    if !is_child() {
        return in_child(
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
        });
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
    if !is_child() {
        return in_child(
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
        });
    });
    println!("the thread with a thread-local library object ended");
}
