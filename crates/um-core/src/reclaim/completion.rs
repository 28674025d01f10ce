//! A point in a stream, reported once the stream has run up to it: the completion that wakes a
//! sync future, and the one behind which `Managed`'s drop leaves memory to the reaper.
//!
//! # The mechanism
//!
//! [`Completion::enqueue`] puts a host callback (`cuStreamAddCallback`) on the stream, after
//! whatever its caller enqueued first (a sync future: what `sync` enqueues before its wait). A
//! driver thread calls it once the stream has reached that point. The callback only records
//! the stream's status, takes the registered [`Waker`] and wakes it, and hands the orphans left
//! to it to the reaper: it makes no CUDA call (the driver forbids them there). The future,
//! polled again, checks the stream's status (`cuStreamQuery` returns a sticky error) and hands
//! the buffers to the CPU. No thread blocks and nothing polls.
//!
//! `cuStreamAddCallback` and not `cuLaunchHostFunc`: the driver does not call a host function
//! at all once the context has met an error, so a future waiting on one would never wake. A
//! stream callback is called exactly once, with the error if there was one.
//!
//! The callback's data is a [`Completion`] in an `Arc`: the driver holds one reference, taken
//! back and released inside the callback, so the data lives until the callback has run even
//! if the future is dropped first.
//!
//! The alternative, kept for measurement (`use_event_thread_for_waits`), is an event per point
//! and one thread that waits for the events in order (`event_thread` below).

use std::ffi::c_void;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};

use crate::driver;
use crate::driver::context::{Context, DriverCallback, thread_is_capturing};
use crate::driver::stream::RawStream;
use crate::driver::sys;
use crate::error::Result;
use crate::reclaim::reaper::{self, Orphan, Reaper, Reclaim};
use crate::sync::{Mutex, lock};

/// What a future and the driver callback share.
pub(crate) struct Completion {
    point: Point<Orphan>,
    /// The driver call whose status the completion carries, for errors.
    source: &'static str,
}

/// The handoff between the waiting task and the thread that reports the point: the status, the
/// waker, and what a dropped future left. Generic over what is left (`O`) and given the reaper
/// it goes to, so that the loom models run it without a GPU; a [`Completion`]'s is of
/// [`Orphan`]s, for `um`'s reaper.
pub(crate) struct Point<O> {
    slot: Mutex<Slot<O>>,
}

struct Slot<O> {
    /// The status the callback was given; `None` until it has run.
    status: Option<i32>,
    /// The task to wake when the callback runs.
    waker: Option<Waker>,
    /// The buffers of a future dropped before the callback ran.
    orphans: Vec<O>,
}

/// The stream callback. It makes no CUDA call: it records the status, hands the buffers of a
/// dropped future to the reaper, and wakes the waiting task.
unsafe extern "system" fn on_stream_point(_stream: sys::CUstream, status: i32, data: *mut c_void) {
    // SAFETY: `data` is the `Arc::into_raw` of `Completion::enqueue`, whose reference the driver
    // held; it calls this exactly once, so the reference is taken back exactly once.
    let completion = unsafe { Arc::from_raw(data.cast_const().cast::<Completion>()) };
    // The waker is the user's code, run here: a `Context` handle it drops must neither wait nor
    // block on a lock that a thread waiting for this callback holds.
    let _inside = DriverCallback::enter();
    completion.complete(status);
    // The last reference may go here: a `Completion` then holds no context and no buffer (the
    // orphans went to the reaper), so its drop makes no CUDA call either.
    drop(completion);
}

/// Whether waits use the event thread instead of stream callbacks (the measured alternative).
static EVENT_THREAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Chooses the mechanism of the waits made from now on: `false` (the default) a stream
/// callback per wait; `true` an event per wait, waited for by one helper thread `um` owns. For
/// the benchmark that compares them (`examples/async_requests.rs`); both are correct.
#[cfg(feature = "test-hooks")]
pub fn use_event_thread_for_waits(on: bool) {
    EVENT_THREAD.store(on, std::sync::atomic::Ordering::Relaxed);
}

impl Completion {
    pub(crate) fn new(source: &'static str) -> Self {
        Completion {
            point: Point::new(),
            source,
        }
    }

    /// Arranges for the completion to be signalled once `stream` has run everything enqueued
    /// so far: a stream callback, or an event for the event thread.
    pub(crate) fn enqueue(ctx: &Context, stream: RawStream) -> Result<Arc<Completion>> {
        // Not on a thread that captures: the event thread's event would be created there, a
        // call that the capture may refuse; a callback on an eager stream is accepted.
        if EVENT_THREAD.load(std::sync::atomic::Ordering::Relaxed)
            && !thread_is_capturing()
            && event_thread::start()
        {
            return event_thread::enqueue(ctx, stream);
        }
        let completion = Arc::new(Completion::new("cuStreamAddCallback"));
        let data = Arc::into_raw(Arc::clone(&completion))
            .cast_mut()
            .cast::<c_void>();
        // SAFETY: `stream` is alive (its brand is on the buffers the caller holds); the
        // callback makes no CUDA call, cannot unwind (it only locks, moves and wakes), and
        // `data` is a strong reference that stays valid until the callback takes it back.
        let enqueued = unsafe { driver::stream_add_callback(stream.handle, on_stream_point, data) };
        // On failure the reference given to the driver is leaked (a few bytes, on an error
        // path): reclaiming it would be a double release if the driver ran the callback anyway.
        enqueued.map(|()| completion)
    }

    fn complete(&self, status: i32) {
        self.point.complete(status, reaper::global());
    }

    /// The callback's status once it has run; otherwise registers the task's waker.
    pub(crate) fn poll_status(&self, cx: &mut TaskContext<'_>) -> Poll<i32> {
        self.point.poll_status(cx)
    }

    /// The driver call whose status the completion carries, for errors.
    pub(crate) fn source(&self) -> &'static str {
        self.source
    }

    /// Whether the stream has reported the point (for `Debug`).
    pub(crate) fn is_reported(&self) -> bool {
        self.point.is_reported()
    }

    /// Leaves `orphans` to the completion: the reaper frees them once the stream has passed the
    /// point, or leaks them if it met an error. Whether the callback has run or not, no CUDA
    /// call is made here (`cuMemFree` may wait for the device).
    pub(crate) fn leave(&self, orphans: Vec<Orphan>) {
        self.point.leave(orphans, reaper::global());
    }
}

impl<O: Reclaim> Point<O> {
    pub(crate) fn new() -> Self {
        Point {
            slot: Mutex::new(Slot {
                status: None,
                waker: None,
                orphans: Vec::new(),
            }),
        }
    }

    /// The report of the point (the callback's side): records `status`, hands what a dropped
    /// future left to `reaper`, and wakes the registered task.
    pub(crate) fn complete(&self, status: i32, reaper: &Reaper<O>) {
        let (waker, orphans) = {
            let mut slot = lock(&self.slot);
            slot.status = Some(status);
            (slot.waker.take(), std::mem::take(&mut slot.orphans))
        };
        if !orphans.is_empty() {
            reaper.hand_over(orphans, status == sys::SUCCESS);
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The callback's status once it has run; otherwise registers the task's waker.
    pub(crate) fn poll_status(&self, cx: &mut TaskContext<'_>) -> Poll<i32> {
        let mut slot = lock(&self.slot);
        if let Some(status) = slot.status {
            return Poll::Ready(status);
        }
        match &mut slot.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            waker => *waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Whether the point was reported.
    pub(crate) fn is_reported(&self) -> bool {
        lock(&self.slot).status.is_some()
    }

    /// Leaves `orphans` to the point: `reaper` frees them once the point is reported with
    /// success, or leaks them.
    pub(crate) fn leave(&self, orphans: Vec<O>, reaper: &Reaper<O>) {
        if let Some((status, orphans)) = self.abandon(orphans, reaper) {
            reaper.expect(orphans.len());
            reaper.hand_over(orphans, status == sys::SUCCESS);
        }
    }

    /// For a future dropped unfinished: leaves `orphans` to the callback, or, if it has run
    /// already, gives them back with its status.
    fn abandon(&self, orphans: Vec<O>, reaper: &Reaper<O>) -> Option<(i32, Vec<O>)> {
        let mut slot = lock(&self.slot);
        if let Some(status) = slot.status {
            return Some((status, orphans));
        }
        // Counted before the callback can see them, so `reap_pending` never misses them.
        reaper.expect(orphans.len());
        slot.orphans = orphans;
        slot.waker = None;
        None
    }
}

/// The alternative mechanism: an event recorded per wait, and one thread that waits for the
/// events in order (`cuEventSynchronize`, sleeping) and completes each. Head-of-line: a slow
/// stream's event delays the completions queued behind it.
mod event_thread {
    use std::collections::VecDeque;
    use std::sync::{Arc, Condvar, Mutex};

    use super::Completion;
    use crate::driver;
    use crate::driver::context::Context;
    use crate::driver::stream::RawStream;
    use crate::driver::sys;
    use crate::error::{Error, Result};
    use crate::reclaim::lock;

    struct Wait {
        event: sys::CUevent,
        ctx: Context,
        completion: Arc<Completion>,
    }

    // SAFETY: an event handle is an opaque token the driver accepts from any thread.
    unsafe impl Send for Wait {}

    struct Queue {
        waits: VecDeque<Wait>,
        thread: bool,
    }

    static QUEUE: Mutex<Queue> = Mutex::new(Queue {
        waits: VecDeque::new(),
        thread: false,
    });
    static WORK: Condvar = Condvar::new();

    /// Starts the thread unless it runs; whether it does.
    pub(super) fn start() -> bool {
        let mut q = lock(&QUEUE);
        if !q.thread {
            q.thread = std::thread::Builder::new()
                .name("um-events".to_owned())
                .spawn(run)
                .is_ok();
        }
        q.thread
    }

    /// Records an event on `stream` (the caller made `ctx` current) and queues it for the
    /// thread, which [`start`] started.
    pub(super) fn enqueue(ctx: &Context, stream: RawStream) -> Result<Arc<Completion>> {
        let event = driver::event_create_blocking()?;
        // SAFETY: fresh event; the stream is alive (its brand is on the caller's buffers).
        if let Err(e) = unsafe { driver::event_record(event, stream.handle) } {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { driver::event_destroy(event) };
            return Err(e);
        }
        let completion = Arc::new(Completion::new("cuEventSynchronize"));
        lock(&QUEUE).waits.push_back(Wait {
            event,
            ctx: ctx.clone(),
            completion: Arc::clone(&completion),
        });
        WORK.notify_one();
        Ok(completion)
    }

    fn run() {
        // This thread runs wakers: a capture begun here could wait for an idle section whose
        // closure waits for a future that this thread completes.
        crate::driver::context::refuse_captures_on_this_thread();
        // Its waits go on while other threads capture, in whatever mode.
        crate::driver::ignore_other_threads_captures();
        loop {
            let wait = {
                let mut q = lock(&QUEUE);
                loop {
                    if let Some(w) = q.waits.pop_front() {
                        break w;
                    }
                    q = WORK
                        .wait(q)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            let status = match wait.ctx.bind() {
                // SAFETY: the event is alive until destroyed below.
                Ok(()) => unsafe { driver::event_synchronize_raw(wait.event) },
                Err(Error::Driver { code, .. }) => code,
                Err(_) => sys::ERROR_NOT_READY,
            };
            // SAFETY: created in `enqueue`, destroyed once, here.
            let _ = unsafe { driver::event_destroy(wait.event) };
            wait.completion.complete(status);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context as TaskContext, Poll, Wake, Waker};

    use super::{Completion, on_stream_point};
    use crate::driver::sys;
    use crate::reclaim::reaper;

    #[derive(Default)]
    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// What the driver does with `Completion::enqueue`'s reference: calls the callback once.
    fn run_callback(completion: &Arc<Completion>, status: i32) {
        let data = Arc::into_raw(Arc::clone(completion))
            .cast_mut()
            .cast::<std::ffi::c_void>();
        // SAFETY: `data` is a strong reference, taken back once by the callback, as the driver
        // would.
        unsafe { on_stream_point(std::ptr::null_mut(), status, data) };
    }

    #[test]
    fn the_callback_wakes_the_registered_task_once_and_releases_its_reference() {
        let completion = Arc::new(Completion::new("test"));
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(Arc::clone(&counter));
        let mut cx = TaskContext::from_waker(&waker);
        assert_eq!(completion.poll_status(&mut cx), Poll::Pending);
        assert_eq!(completion.poll_status(&mut cx), Poll::Pending);
        assert_eq!(counter.0.load(Ordering::SeqCst), 0, "nothing woke it yet");
        run_callback(&completion, sys::SUCCESS);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1, "woken exactly once");
        assert_eq!(
            Arc::strong_count(&completion),
            1,
            "the driver's reference is released"
        );
        assert_eq!(completion.poll_status(&mut cx), Poll::Ready(sys::SUCCESS));
    }

    #[test]
    fn the_callback_status_carries_the_stream_error() {
        let completion = Arc::new(Completion::new("test"));
        run_callback(&completion, 700); // CUDA_ERROR_ILLEGAL_ADDRESS
        let mut cx = TaskContext::from_waker(Waker::noop());
        assert_eq!(completion.poll_status(&mut cx), Poll::Ready(700));
    }

    #[test]
    fn a_future_dropped_before_the_callback_leaves_its_buffers_to_it() {
        let completion = Arc::new(Completion::new("test"));
        assert!(
            completion
                .point
                .abandon(Vec::new(), reaper::global())
                .is_none(),
            "not run: kept"
        );
        run_callback(&completion, sys::SUCCESS);
        let after = completion.point.abandon(Vec::new(), reaper::global());
        assert!(
            matches!(after, Some((sys::SUCCESS, ref v)) if v.is_empty()),
            "run: given back"
        );
    }

    #[test]
    fn the_callback_data_outlives_a_dropped_future() {
        let completion = Arc::new(Completion::new("test"));
        let data = Arc::into_raw(Arc::clone(&completion))
            .cast_mut()
            .cast::<std::ffi::c_void>();
        let weak = Arc::downgrade(&completion);
        drop(completion); // the future goes away first
        assert!(
            weak.upgrade().is_some(),
            "the driver's reference keeps it alive"
        );
        // SAFETY: as in `run_callback`.
        unsafe { on_stream_point(std::ptr::null_mut(), sys::SUCCESS, data) };
        assert!(weak.upgrade().is_none(), "released inside the callback");
    }
}

/// The loom models of a completion's handoff (`docs/safety.md`, "What loom checks"), which is
/// all that a sync future's `poll` (`poll_status`) and drop (`leave`) share with the stream
/// callback (`complete`): no wakeup is lost, the task woken is the one that polled last, and
/// the buffers of a future dropped before or after its callback are settled once. With a
/// stream's poison mark (`driver/poison.rs`): a mark set before the abort that lets the stream
/// report is seen by every transition after the report, on whichever thread (the future's poll,
/// and the reaper, which then leaks what the stream gave up).
#[cfg(all(test, loom))]
mod loom_model {
    use std::future::poll_fn;
    use std::task::{Context as TaskContext, Waker};

    use super::Point;
    use crate::driver::poison::{PoisonFlag, Poisoner};
    use crate::driver::sys;
    use crate::reclaim::reaper::Reaper;
    use crate::reclaim::reaper::loom_model::{Log, Token, reaper_thread};
    use crate::sync::{Arc, block_on, model, thread};

    /// The callback on the driver's thread, a task awaiting the future on the user's: the task
    /// is woken after it registered its waker, or sees the status at its poll, and so returns
    /// (a lost wakeup would leave it parked for ever: loom reports the deadlock).
    #[test]
    fn a_poll_and_the_callback_never_lose_the_wakeup() {
        model(|| {
            let point = Arc::new(Point::<Token>::new());
            let reaper = Arc::new(Reaper::new(|| true));
            let callback = {
                let point = Arc::clone(&point);
                thread::spawn(move || point.complete(sys::SUCCESS, &reaper))
            };
            let status = block_on(poll_fn(|cx| point.poll_status(cx)));
            assert_eq!(status, sys::SUCCESS);
            callback.join().unwrap();
        });
    }

    /// A future polled by one task and then awaited by another (moved between executors): the
    /// callback wakes the later task, never only the first, and carries the stream's error.
    #[test]
    fn the_task_that_polled_last_is_the_one_woken() {
        model(|| {
            let point = Arc::new(Point::<Token>::new());
            let reaper = Arc::new(Reaper::new(|| true));
            let callback = {
                let point = Arc::clone(&point);
                thread::spawn(move || point.complete(700, &reaper))
            };
            let _ = point.poll_status(&mut TaskContext::from_waker(Waker::noop()));
            let status = block_on(poll_fn(|cx| point.poll_status(cx)));
            assert_eq!(status, 700);
            callback.join().unwrap();
        });
    }

    /// A future dropped on the user's thread while its callback runs on the driver's: its buffer
    /// goes to the reaper once, through the callback or through the drop, whichever came second,
    /// and `reap_pending` returns only once it is freed.
    #[test]
    fn the_buffer_of_a_future_dropped_around_its_callback_is_freed_once() {
        model(|| {
            let log = std::sync::Arc::new(Log::default());
            let point = Arc::new(Point::new());
            let reaper = Arc::new(Reaper::new(|| true));
            let worker = reaper_thread(&reaper, 1);
            let callback = {
                let (point, reaper) = (Arc::clone(&point), Arc::clone(&reaper));
                thread::spawn(move || point.complete(sys::SUCCESS, &reaper))
            };
            point.leave(vec![Token::new(0, &log)], &reaper);
            reaper.wait_settled(|| false);
            assert_eq!(log.of(0), (1, 1), "freed once before reap_pending returned");
            callback.join().unwrap();
            worker.join().unwrap();
            assert_eq!(log.of(0), (1, 1), "and only once");
        });
    }

    /// A library aborts the stream's work on its own thread: it sets the mark, and the abort
    /// lets the stream report success. The task awaiting the point sees the mark.
    #[test]
    fn a_poison_mark_set_before_the_stream_reports_is_seen_by_the_poll_that_follows() {
        model(|| {
            let flag = std::sync::Arc::new(PoisonFlag::default());
            let poisoner = Poisoner::new(&flag);
            let point = Arc::new(Point::<Token>::new());
            let reaper = Arc::new(Reaper::new(|| true));
            let aborter = {
                let point = Arc::clone(&point);
                thread::spawn(move || {
                    poisoner.poison();
                    point.complete(sys::SUCCESS, &reaper);
                })
            };
            let status = block_on(poll_fn(|cx| point.poll_status(cx)));
            assert_eq!(status, sys::SUCCESS);
            assert!(flag.is_set(), "the poll after the report sees the mark");
            aborter.join().unwrap();
        });
    }

    /// The same abort while a future of the stream is dropped on the user's thread: the buffer
    /// it gave up watches the mark, and the reaper leaks it, never frees it, whether the drop
    /// came before the report or after.
    #[test]
    fn memory_given_up_to_a_stream_poisoned_before_it_reports_is_leaked() {
        model(|| {
            let log = std::sync::Arc::new(Log::default());
            let flag = std::sync::Arc::new(PoisonFlag::default());
            let poisoner = Poisoner::new(&flag);
            let point = Arc::new(Point::new());
            let reaper = Arc::new(Reaper::new(|| true));
            let worker = reaper_thread(&reaper, 1);
            let aborter = {
                let (point, reaper) = (Arc::clone(&point), Arc::clone(&reaper));
                thread::spawn(move || {
                    poisoner.poison();
                    point.complete(sys::SUCCESS, &reaper);
                })
            };
            point.leave(vec![Token::new(0, &log).watching(&flag)], &reaper);
            reaper.wait_settled(|| false);
            assert_eq!(log.of(0), (0, 1), "leaked, never freed");
            aborter.join().unwrap();
            worker.join().unwrap();
        });
    }
}
