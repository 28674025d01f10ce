//! Waiting for a stream without blocking a thread: `sync` as a future, and stream scopes for
//! async code.
//!
//! # The mechanism
//!
//! [`Managed::sync_async`](crate::Managed::sync_async) and
//! [`Stream::sync_all_async`](crate::Stream::sync_all_async) enqueue, on the owning stream and
//! after whatever `sync` would enqueue first (the release to the host where the device lacks
//! concurrent managed access), a host callback (`cuStreamAddCallback`). A driver thread calls
//! it once the stream has reached that point. The callback only records the stream's status,
//! takes the registered [`Waker`] and wakes it: it makes no CUDA call (the driver forbids them
//! there). The future, polled again, checks the stream's status (`cuStreamQuery` returns a
//! sticky error) and hands the buffers to the CPU. No thread blocks and nothing polls.
//!
//! `cuStreamAddCallback` and not `cuLaunchHostFunc`: the driver does not call a host function
//! at all once the context has met an error, so a future waiting on one would never wake. A
//! stream callback is called exactly once, with the error if there was one.
//!
//! The callback's data is a [`Completion`] in an `Arc`: the driver holds one reference, taken
//! back and released inside the callback, so the data lives until the callback has run even
//! if the future is dropped first.
//!
//! # Cancellation
//!
//! Dropping a future before its stream reached the point must neither free the buffers (a
//! kernel may still use them) nor wait for the stream (the drop runs on an executor thread).
//! The drop leaves the buffers in the [`Completion`]; the callback, when it runs, passes them
//! to the reaper, one thread `um` starts on first use that sleeps until there is memory to free
//! and frees it (`cuMemFree` is a CUDA call, forbidden in the callback). If the stream met an
//! error, the memory is leaked, as a failed `sync` leaks it. [`reap_pending`] waits until every
//! buffer so handed over has been freed (tests use it to check that nothing leaks).

use std::ffi::c_void;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context as TaskContext, Poll, Waker};

use crate::driver;
use crate::driver::context::Context;
use crate::driver::stream::{Owned, PerThread, RawStream, Stream, StreamKind, StreamOptions};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::Managed;
use crate::memory::state::{HostOwned, StreamOwned, SyncGroup};
use crate::memory::storage::{Storage, Unified};
use crate::sealed::PRIVATE;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One allocation given up before its stream was done with it: its address and context (and,
/// for a mirror, the address of its pinned host half). Dropping an `Orphan` leaks the memory
/// (it only releases the context reference); only [`Orphan::free`] frees it.
pub struct Orphan {
    ptr: sys::CUdeviceptr,
    /// The pinned host half of a mirror, as an address (so that `Orphan` stays `Send`).
    pinned: Option<usize>,
    ctx: Context,
}

impl Orphan {
    pub(crate) fn new(ptr: sys::CUdeviceptr, ctx: Context) -> Self {
        Orphan {
            ptr,
            pinned: None,
            ctx,
        }
    }

    /// The orphan of a mirror: `ptr` is its device half, `host` its pinned half.
    pub(crate) fn with_pinned(mut self, host: std::ptr::NonNull<u8>) -> Self {
        self.pinned = Some(host.as_ptr() as usize);
        self
    }

    /// Frees the allocation; leaks it if the context cannot be made current.
    ///
    /// # Safety
    /// No work on any stream can use the memory any more.
    unsafe fn free(self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: the allocation came from `Managed` (`into_orphan` gave up ownership
            // without freeing), so this is the one free; no work uses it (the caller).
            let _ = unsafe { driver::mem_free(self.ptr) };
            if let Some(host) = self.pinned {
                // SAFETY: the pinned half of the same mirror, given up with it, freed once.
                let _ = unsafe { driver::mem_free_pinned(host as *mut std::ffi::c_void) };
            }
        }
    }
}

/// Where a buffer stays associated once it is back on the host (what `release_to_host` says).
pub struct Released(pub(crate) RawStream);

/// Proof that a stream has run past the releases of a group, with where each buffer stays
/// associated. Only a sync future makes one, once its completion reported success; the hidden
/// `SyncGroup::host_group` takes it, so no other code can retype buffers to the host.
pub struct Passed {
    after: Vec<Released>,
}

impl Passed {
    pub(crate) fn into_after(self) -> std::vec::IntoIter<Released> {
        self.after.into_iter()
    }
}

/// What a future and the driver callback share.
pub(crate) struct Completion {
    slot: Mutex<Slot>,
    /// The driver call whose status the completion carries, for errors.
    source: &'static str,
}

#[derive(Default)]
struct Slot {
    /// The status the callback was given; `None` until it has run.
    status: Option<i32>,
    /// The task to wake when the callback runs.
    waker: Option<Waker>,
    /// The buffers of a future dropped before the callback ran.
    orphans: Vec<Orphan>,
}

/// The stream callback. It makes no CUDA call: it records the status, hands the buffers of a
/// dropped future to the reaper, and wakes the waiting task.
unsafe extern "system" fn on_stream_point(_stream: sys::CUstream, status: i32, data: *mut c_void) {
    // SAFETY: `data` is the `Arc::into_raw` of `Completion::enqueue`, whose reference the driver
    // held; it calls this exactly once, so the reference is taken back exactly once.
    let completion = unsafe { Arc::from_raw(data.cast_const().cast::<Completion>()) };
    completion.complete(status);
    // The last reference may go here: a `Completion` then holds no context and no buffer (the
    // orphans went to the reaper), so its drop makes no CUDA call either.
}

/// Whether waits use the event thread instead of stream callbacks (the measured alternative).
static EVENT_THREAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Chooses the mechanism of the waits made from now on: `false` (the default) a stream
/// callback per wait; `true` an event per wait, waited for by one helper thread `um` owns. For
/// the benchmark that compares them (`examples/async_requests.rs`); both are correct.
#[doc(hidden)]
pub fn use_event_thread_for_waits(on: bool) {
    EVENT_THREAD.store(on, std::sync::atomic::Ordering::Relaxed);
}

impl Completion {
    fn new(source: &'static str) -> Self {
        Completion {
            slot: Mutex::default(),
            source,
        }
    }

    /// Arranges for the completion to be signalled once `stream` has run everything enqueued
    /// so far: a stream callback, or an event for the event thread.
    fn enqueue(ctx: &Context, stream: RawStream) -> Result<Arc<Completion>> {
        if EVENT_THREAD.load(std::sync::atomic::Ordering::Relaxed) && event_thread::start() {
            return event_thread::enqueue(ctx, stream);
        }
        let completion = Arc::new(Completion::new("test"));
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
        let (waker, orphans) = {
            let mut slot = lock(&self.slot);
            slot.status = Some(status);
            (slot.waker.take(), std::mem::take(&mut slot.orphans))
        };
        if !orphans.is_empty() {
            reaper::hand_over(orphans, status == sys::SUCCESS);
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The callback's status once it has run; otherwise registers the task's waker.
    fn poll_status(&self, cx: &mut TaskContext<'_>) -> Poll<i32> {
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

    /// For a future dropped unfinished: leaves `orphans` to the callback, or, if it has run
    /// already, gives them back with its status.
    fn abandon(&self, orphans: Vec<Orphan>) -> Option<(i32, Vec<Orphan>)> {
        let mut slot = lock(&self.slot);
        if let Some(status) = slot.status {
            return Some((status, orphans));
        }
        // Counted before the callback can see them, so `reap_pending` never misses them.
        reaper::expect(orphans.len());
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

    use super::{Completion, lock};
    use crate::driver;
    use crate::driver::context::Context;
    use crate::driver::stream::RawStream;
    use crate::driver::sys;
    use crate::error::{Error, Result};

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

/// Frees or leaks buffers whose stream has passed their point, off the callback thread.
mod reaper {
    use std::sync::{Condvar, Mutex};

    use super::{Orphan, lock};

    struct Job {
        orphans: Vec<Orphan>,
        /// Whether the stream completed without error (otherwise the memory is leaked).
        ok: bool,
    }

    struct Queue {
        jobs: Vec<Job>,
        /// Buffers handed over by dropped futures and not yet freed (or leaked).
        pending: usize,
        /// Whether the reaper thread runs.
        thread: bool,
    }

    static QUEUE: Mutex<Queue> = Mutex::new(Queue {
        jobs: Vec::new(),
        pending: 0,
        thread: false,
    });
    static WORK: Condvar = Condvar::new();
    static IDLE: Condvar = Condvar::new();

    /// `n` buffers will be handed over; starts the reaper thread on first use.
    pub(super) fn expect(n: usize) {
        let mut q = lock(&QUEUE);
        q.pending += n;
        if !q.thread {
            q.thread = std::thread::Builder::new()
                .name("um-reaper".to_owned())
                .spawn(run)
                .is_ok();
        }
    }

    /// Called from the stream callback: no CUDA call, only a push and a notification.
    pub(super) fn hand_over(orphans: Vec<Orphan>, ok: bool) {
        lock(&QUEUE).jobs.push(Job { orphans, ok });
        WORK.notify_one();
    }

    fn settle(jobs: Vec<Job>) -> usize {
        let mut n = 0;
        for job in jobs {
            n += job.orphans.len();
            for orphan in job.orphans {
                if job.ok {
                    // SAFETY: the stream's callback ran with success after every operation
                    // enqueued before it, and no later operation can name this memory: the
                    // future that held it was its only owner.
                    unsafe { orphan.free() };
                } else {
                    // The stream met an error: the GPU may still hold the memory. Leak it.
                    drop(orphan);
                }
            }
        }
        n
    }

    fn done(n: usize) {
        let mut q = lock(&QUEUE);
        q.pending = q.pending.saturating_sub(n);
        if q.pending == 0 {
            IDLE.notify_all();
        }
    }

    fn run() {
        loop {
            let jobs = {
                let mut q = lock(&QUEUE);
                while q.jobs.is_empty() {
                    q = WORK
                        .wait(q)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                std::mem::take(&mut q.jobs)
            };
            done(settle(jobs));
        }
    }

    pub(super) fn pending() -> usize {
        lock(&QUEUE).pending
    }

    pub(super) fn wait_idle() {
        let mut q = lock(&QUEUE);
        while q.pending > 0 {
            if !q.thread && !q.jobs.is_empty() {
                // No reaper thread could be started: do its work here.
                let jobs = std::mem::take(&mut q.jobs);
                drop(q);
                done(settle(jobs));
                q = lock(&QUEUE);
                continue;
            }
            q = IDLE
                .wait(q)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

thread_local! {
    /// How many unfinished async scopes this thread is dropping right now.
    static DROPPING_SCOPES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether this thread is dropping an unfinished async scope (then [`defer_free`] applies).
pub(crate) fn dropping_scope() -> bool {
    DROPPING_SCOPES.with(std::cell::Cell::get) > 0
}

/// For `Managed`'s drop: while an unfinished async scope is being dropped on this thread, memory
/// a stream may still use is not waited for (that would block an executor thread) but handed
/// to the reaper behind a callback on its stream. Returns the orphan if that was not possible
/// (no scope is being dropped, or enqueueing failed): the caller then waits, as always.
pub(crate) fn defer_free(
    owner: &Context,
    stream: RawStream,
    orphan: Orphan,
) -> std::result::Result<(), Orphan> {
    if owner.bind().is_err() {
        return Err(orphan);
    }
    match Completion::enqueue(owner, stream) {
        Ok(completion) => {
            if let Some((status, orphans)) = completion.abandon(vec![orphan]) {
                reaper::expect(orphans.len());
                reaper::hand_over(orphans, status == sys::SUCCESS);
            }
            Ok(())
        }
        Err(_) => Err(orphan),
    }
}

/// The future of an async scope's closure. Dropped unfinished, it drops that future with
/// [`defer_free`] in force, so that buffers still attached in it do not block the thread.
struct DeferOnDrop<F> {
    inner: std::mem::ManuallyDrop<F>,
}

impl<F: Future> Future for DeferOnDrop<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        // SAFETY: structural pinning of `inner`: it is never moved out, and it is dropped in
        // place (in `drop`), as `Pin` requires.
        unsafe { self.map_unchecked_mut(|s| &mut *s.inner) }.poll(cx)
    }
}

impl<F> Drop for DeferOnDrop<F> {
    fn drop(&mut self) {
        /// Ends the deferral even if a drop in the closure's future panics.
        struct Entered;
        impl Drop for Entered {
            fn drop(&mut self) {
                DROPPING_SCOPES.with(|n| n.set(n.get().saturating_sub(1)));
            }
        }
        DROPPING_SCOPES.with(|n| n.set(n.get() + 1));
        let _entered = Entered;
        // SAFETY: dropped in place exactly once, here; `inner` is never used again.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.inner) };
    }
}

fn defer_on_drop<F: Future>(inner: F) -> DeferOnDrop<F> {
    DeferOnDrop {
        inner: std::mem::ManuallyDrop::new(inner),
    }
}

/// Blocks until every buffer of a dropped, unfinished sync future has been freed (or leaked,
/// where its stream met an error). For tests and orderly shutdown: it waits for those streams.
#[doc(hidden)]
pub fn reap_pending() {
    reaper::wait_idle();
}

/// How many buffers of dropped, unfinished sync futures wait for their stream or the reaper.
#[doc(hidden)]
pub fn orphans_pending() -> usize {
    reaper::pending()
}

enum Waiting {
    /// The callback is enqueued; the buffers return to the host associated as `after` says.
    Enqueued {
        completion: Arc<Completion>,
        after: Vec<Released>,
        ctx: Context,
        stream: RawStream,
    },
    /// Enqueueing failed; the error is returned at the first poll.
    Failed(Error),
    /// The output has been returned.
    Done,
}

/// The future of [`Stream::sync_all_async`]: resolves to the buffers of `G` in the host state
/// once the stream has reached the point where the future was made.
///
/// Dropping it unfinished hands the buffers to `um`'s reaper, which frees them once the stream
/// has passed that point; the drop itself never waits.
///
/// # Panics
/// When polled again after it returned `Ready` (the `Future` contract leaves that open).
#[must_use = "futures do nothing unless awaited; dropping this one frees the buffers once the stream is done"]
pub struct SyncAllFuture<'s, K: StreamKind, G: SyncGroup<'s, K>> {
    group: Option<G>,
    waiting: Waiting,
    _stream: PhantomData<StreamOwned<'s, K>>,
}

// No field is structurally pinned: the future moves its buffers out by value.
impl<'s, K: StreamKind, G: SyncGroup<'s, K>> Unpin for SyncAllFuture<'s, K, G> {}

impl<'s, K: StreamKind, G: SyncGroup<'s, K>> SyncAllFuture<'s, K, G> {
    /// `released` is the outcome of enqueueing the releases to the host; on success the
    /// callback is enqueued after them.
    pub(crate) fn new(
        group: G,
        ctx: &Context,
        stream: RawStream,
        released: Result<Vec<Released>>,
    ) -> Self {
        let waiting =
            match released.and_then(|after| Ok((after, Completion::enqueue(ctx, stream)?))) {
                Ok((after, completion)) => Waiting::Enqueued {
                    completion,
                    after,
                    ctx: ctx.clone(),
                    stream,
                },
                Err(e) => Waiting::Failed(e),
            };
        SyncAllFuture {
            group: Some(group),
            waiting,
            _stream: PhantomData,
        }
    }
}

impl<'s, K: StreamKind, G: SyncGroup<'s, K>> Future for SyncAllFuture<'s, K, G> {
    type Output = Result<G::Host>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let status = match &this.waiting {
            Waiting::Enqueued { completion, .. } => match completion.poll_status(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(status) => status,
            },
            Waiting::Failed(_) | Waiting::Done => 0,
        };
        let (group, waiting) = (
            this.group.take(),
            std::mem::replace(&mut this.waiting, Waiting::Done),
        );
        let Some(group) = group else {
            panic!("a sync future was polled after it completed");
        };
        match waiting {
            Waiting::Failed(e) => {
                // Like a failed `sync`: the buffers' drop waits for the stream, and leaks them
                // if that fails.
                drop(group);
                Poll::Ready(Err(e))
            }
            Waiting::Enqueued {
                completion,
                after,
                ctx,
                stream,
            } => {
                // The stream's status: the callback's, and then the stream's own, which
                // carries a sticky error of the context. "Not ready" only means later work.
                let checked = if status == sys::SUCCESS {
                    ctx.bind()
                        .and_then(|()| driver::stream_query(stream.handle))
                        .map(drop)
                } else {
                    Err(driver::driver_error(completion.source, status))
                };
                match checked {
                    Ok(()) => Poll::Ready(Ok(group.host_group(Passed { after }, PRIVATE))),
                    Err(e) => {
                        // The GPU may still hold the memory: leak it, never free it.
                        drop(group.orphan_group(PRIVATE));
                        Poll::Ready(Err(e))
                    }
                }
            }
            Waiting::Done => panic!("a sync future was polled after it completed"),
        }
    }
}

impl<'s, K: StreamKind, G: SyncGroup<'s, K>> Drop for SyncAllFuture<'s, K, G> {
    fn drop(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        match &self.waiting {
            Waiting::Enqueued { completion, .. } => {
                // The callback hands the buffers to the reaper; if it has run already, they go
                // there now. Either way no CUDA call here (`cuMemFree` may wait for the device).
                if let Some((status, orphans)) = completion.abandon(group.orphan_group(PRIVATE)) {
                    reaper::expect(orphans.len());
                    reaper::hand_over(orphans, status == sys::SUCCESS);
                }
            }
            // Nothing was enqueued: the buffers' own drop waits for the stream, as for `sync`.
            Waiting::Failed(_) | Waiting::Done => drop(group),
        }
    }
}

impl<'s, K: StreamKind, G: SyncGroup<'s, K>> fmt::Debug for SyncAllFuture<'s, K, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.waiting {
            Waiting::Enqueued { completion, .. } => {
                if lock(&completion.slot).status.is_some() {
                    "ready"
                } else {
                    "waiting"
                }
            }
            Waiting::Failed(_) => "failed",
            Waiting::Done => "done",
        };
        f.debug_struct("SyncAllFuture")
            .field("stream_kind", &K::NAME)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// The future of [`Managed::sync_async`]: resolves to the buffer in the host state once its
/// stream has reached the point where the future was made. Cancellation as for
/// [`SyncAllFuture`].
#[must_use = "futures do nothing unless awaited; dropping this one frees the buffer once the stream is done"]
pub struct SyncFuture<'s, T: ?Sized, K: StreamKind = Owned, M: Storage = Unified> {
    inner: SyncAllFuture<'s, K, (Managed<T, StreamOwned<'s, K>, M>,)>,
}

impl<'s, T: ?Sized, K: StreamKind, M: Storage> SyncFuture<'s, T, K, M> {
    pub(crate) fn new(
        memory: Managed<T, StreamOwned<'s, K>, M>,
        released: Result<Released>,
    ) -> Self {
        // The owner's context: the callback (or event) goes on the owning stream.
        let (ctx, stream) = (
            crate::memory::state::owner_context(&memory).clone(),
            memory.stream(),
        );
        SyncFuture {
            inner: SyncAllFuture::new((memory,), &ctx, stream, released.map(|r| vec![r])),
        }
    }
}

impl<'s, T: ?Sized, K: StreamKind, M: Storage> Future for SyncFuture<'s, T, K, M> {
    type Output = Result<Managed<T, HostOwned, M>>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.get_mut().inner)
            .poll(cx)
            .map(|r| r.map(|(m,)| m))
    }
}

impl<T: ?Sized, K: StreamKind, M: Storage> fmt::Debug for SyncFuture<'_, T, K, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Context {
    /// Creates a stream, runs the async closure `f` with it, and destroys it once the future
    /// `f` returned has completed: the async twin of [`Context::with_stream`].
    ///
    /// The brand `'s` is generic in `f` exactly as in `with_stream`, so memory attached to the
    /// stream cannot leave `f`, across any number of `.await`s; nor can a future of such memory
    /// ([`Managed::sync_async`]). Wait for the stream with `sync_async` / `sync_all_async`,
    /// never with `sync`, on an executor thread.
    ///
    /// Dropping the returned future before it completes drops `f`'s future first, then the
    /// stream (whose destruction lets queued work finish). Nothing in that drop waits for the
    /// GPU: memory `f` still held attached, or inside a sync future, goes to `um`'s reaper
    /// behind a callback on its stream, and is freed once the stream has run past it. Nothing
    /// is freed while the GPU may use it.
    ///
    /// ```no_run
    /// # async fn f(ctx: &um_core::Context) -> um_core::Result<()> {
    /// use um_core::{Managed, StreamOptions};
    /// let data = Managed::from_slice(ctx, &[1.0f32, 2.0, 3.0])?;
    /// let data = ctx
    ///     .with_stream_async(StreamOptions::new(), async |stream| {
    ///         let data = data.attach(stream)?;
    ///         // ... launch kernels on `stream` ...
    ///         data.sync_async().await // no thread waits for the GPU
    ///     })
    ///     .await?;
    /// assert_eq!(data[0], 1.0);
    /// # Ok(()) }
    /// ```
    pub async fn with_stream_async<R>(
        &self,
        options: StreamOptions,
        f: impl for<'s> AsyncFnOnce(&Stream<'s, Owned>) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let stream = self.new_owned_stream(options)?;
        let result = defer_on_drop(f(&stream)).await;
        drop(stream);
        result
    }

    /// `n` streams for an async closure: the async twin of [`Context::with_streams`], with its
    /// shared brand and run-time ownership checks.
    pub async fn with_streams_async<R>(
        &self,
        n: usize,
        options: StreamOptions,
        f: impl for<'s> AsyncFnOnce(&[Stream<'s, Owned>]) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            streams.push(self.new_owned_stream(options)?);
        }
        let result = defer_on_drop(f(&streams)).await;
        drop(streams);
        result
    }

    /// The calling thread's default stream for an async closure: the async twin of
    /// [`Context::with_per_thread_stream`].
    ///
    /// The same handle names another stream on every thread, so the future is neither `Send`
    /// nor `Sync`: an executor cannot move it to another thread between two polls (use
    /// `spawn_local`, `block_on`, or an owned stream with [`Context::with_stream_async`]).
    pub async fn with_per_thread_stream_async<R>(
        &self,
        f: impl for<'s> AsyncFnOnce(&Stream<'s, PerThread>) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let stream = self.per_thread_stream();
        defer_on_drop(f(&stream)).await
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context as TaskContext, Poll, Wake, Waker};

    use super::{Completion, on_stream_point};
    use crate::driver::sys;

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
        assert!(completion.abandon(Vec::new()).is_none(), "not run: kept");
        run_callback(&completion, sys::SUCCESS);
        let after = completion.abandon(Vec::new());
        assert!(
            matches!(after, Some((sys::SUCCESS, ref v)) if v.is_empty()),
            "run: given back"
        );
    }

    #[test]
    fn an_unfinished_scope_future_is_dropped_with_deferred_frees() {
        struct Probe(Arc<AtomicUsize>);
        impl Drop for Probe {
            fn drop(&mut self) {
                if super::dropping_scope() {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let seen = Arc::new(AtomicUsize::new(0));
        let probe = Probe(Arc::clone(&seen));
        let inner = async move {
            let _probe = probe;
            std::future::pending::<()>().await;
        };
        let mut scope = Box::pin(super::defer_on_drop(inner));
        let mut cx = TaskContext::from_waker(Waker::noop());
        assert!(scope.as_mut().poll(&mut cx).is_pending());
        assert!(!super::dropping_scope(), "not while polling");
        drop(scope);
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "deferral in force during the drop"
        );
        assert!(!super::dropping_scope(), "and over after it");
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
