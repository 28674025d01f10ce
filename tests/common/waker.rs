//! A waker that acts inside um's stream callback, for the tests of what code run there may do
//! (`gpu_async`, `gpu_nccl`).
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use um::{Context, Managed, StreamOptions};
use um_test_kernels::testing::spin_then_add;

/// A waker that runs one action of the test's when first woken, on the thread that wakes it:
/// um's stream callback (`DriverCallback` set), where CUDA says no API call may be made.
pub struct ActingWaker {
    act: Mutex<Option<Box<dyn FnOnce() -> String + Send>>>,
    out: Mutex<Option<String>>,
    /// Set once the action has run (or the waker was woken without one).
    pub woke: AtomicBool,
}

impl ActingWaker {
    pub fn new(act: impl FnOnce() -> String + Send + 'static) -> Arc<ActingWaker> {
        Arc::new(ActingWaker {
            act: Mutex::new(Some(Box::new(act))),
            out: Mutex::new(None),
            woke: AtomicBool::new(false),
        })
    }

    /// What the action said; panics if it has not run.
    pub fn out(&self) -> String {
        self.out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .expect("the action ran")
    }
}

impl Wake for ActingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let act = self
            .act
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(act) = act {
            let out = act(); // inside um's stream callback
            *self
                .out
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(out);
        }
        self.woke.store(true, Ordering::SeqCst);
    }
}

/// Runs `act` inside um's stream callback: a 0.3 s spin on a fresh stream, a `sync_async`
/// polled once with the acting waker, then a wait (at most 50 s) for the waker. Returns what
/// `act` said. The future's own result must be right.
pub fn run_in_callback(ctx: &Context, act: impl FnOnce() -> String + Send + 'static) -> String {
    let state = ActingWaker::new(act);
    let waker = Waker::from(Arc::clone(&state));
    let busy = Managed::<[f32]>::zeroed_slice(ctx, 1).expect("alloc");
    let got = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut busy = busy.attach(s)?;
            spin_then_add(s, &mut busy, 1.0, 300_000_000)?;
            let mut fut = std::pin::pin!(busy.sync_async());
            let mut cx = TaskContext::from_waker(&waker);
            assert!(
                fut.as_mut().poll(&mut cx).is_pending(),
                "the spin holds the stream"
            );
            wait_until_woken(&state.woke);
            poll_woken(fut.as_mut(), &mut cx).map(|b| b[0])
        })
        .expect("the future");
    assert_eq!(got, 1.0);
    let out = state.out();
    eprintln!("in the callback: {out}");
    out
}

/// What [`comm_action_in_callback`] saw.
pub struct CommInCallback {
    /// How long the waker (the action inside the callback) took to run.
    pub took: Duration,
    /// What the action said.
    pub said: String,
    /// The spun buffer's first element, from the woken `sync_async` (1.0 when right).
    pub first: um::Result<f32>,
    /// The all-reduced buffer's first element after `sync` (2.0 when right: one rank).
    pub reduced: um::Result<f32>,
}

/// Runs `act` inside um's stream callback with a one-rank communicator (5 s limit, 60 s under a
/// sanitizer) that it may drop, abort or leave, while an in-place all-reduce on that
/// communicator waits behind the callback on the same stream: a 0.5 s spin holds the stream,
/// its `sync_async` is polled once with the acting waker, the all-reduce (256 mirrored 2.0s) is
/// enqueued, then the waker is waited for (at most 50 s). `None`, said, where NCCL is not
/// installed. For the tests of a communicator dropped there and aborted there (`gpu_async`).
pub fn comm_action_in_callback(
    ctx: &Context,
    act: impl FnOnce(&Mutex<Option<um::nccl::Comm>>) -> String + Send + 'static,
) -> Option<CommInCallback> {
    // Nonblocking (the default), with a 5 s limit instead of 120 s, so that a stall inside the
    // callback ends within the tests' watchdog (60 s); 60 s under a sanitizer, whose watchdog
    // waits 240 s, and under which NCCL's creation alone took 17 s (memcheck, H100).
    let limit = if super::under_sanitizer() { 60 } else { 5 };
    let options = um::nccl::CommOptions::new().timeout(Duration::from_secs(limit));
    let comm = super::one_rank_comm(ctx, options)?;
    let shared = Arc::new(Mutex::new(Some(comm)));
    let in_waker = Arc::clone(&shared);
    let state = ActingWaker::new(move || act(&in_waker));
    let waker = Waker::from(Arc::clone(&state));
    let busy = Managed::<[f32]>::zeroed_slice(ctx, 1).expect("alloc");
    // Mirrored: NCCL takes no unified memory without concurrent managed access (the
    // emulated part of run.sh refuses it with `CollectiveStorage`).
    let x = Managed::from_slice_mirrored(ctx, &[2.0f32; 256]).expect("alloc");
    let (took, first, reduced) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut busy, mut x) = (busy.attach(s)?, x.attach(s)?);
            spin_then_add(s, &mut busy, 1.0, 500_000_000)?;
            let mut fut = std::pin::pin!(busy.sync_async());
            let mut cx = TaskContext::from_waker(&waker);
            assert!(fut.as_mut().poll(&mut cx).is_pending());
            // Behind the callback on the same stream: the communicator's work now waits for
            // the callback, in which the action runs.
            if let Some(comm) = shared.lock().expect("lock").as_ref() {
                comm.all_reduce_in_place(s, &mut x, um::nccl::ReduceOp::Sum)
                    .expect("all-reduce");
            }
            let took = wait_until_woken(&state.woke);
            let first = poll_woken(fut.as_mut(), &mut cx).map(|b| b[0]);
            Ok((took, first, x.sync().map(|x| x[0])))
        })
        .expect("the stream scope");
    Some(CommInCallback {
        took,
        said: state.out(),
        first,
        reduced,
    })
}

/// Waits until a waker has set `woke` (every 5 ms, at most 50 s: then it panics, "the waker
/// never ran"); how long that took.
pub fn wait_until_woken(woke: &AtomicBool) -> Duration {
    let t = Instant::now();
    while !woke.load(Ordering::SeqCst) {
        assert!(t.elapsed() < Duration::from_secs(50), "the waker never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    t.elapsed()
}

/// Polls a future whose waker has run: its output, or a panic ("woken but pending").
pub fn poll_woken<F: Future + ?Sized>(fut: Pin<&mut F>, cx: &mut TaskContext<'_>) -> F::Output {
    match fut.poll(cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("woken but pending"),
    }
}
