//! The orphans, and the reaper: one thread `um` starts on first use, which sleeps until a stream
//! has passed the point behind which memory was given up, then frees that memory.
//!
//! Freeing is a CUDA call (`cuMemFree` may wait for the device), which the stream callback that
//! reports the point may not make, and which an executor thread should not make either: the
//! callback only hands the orphans over ([`hand_over`]), and this thread frees them. If the
//! stream met an error, the memory is leaked, as a failed `sync` leaks it. [`reap_pending`]
//! waits until every orphan so handed over has been freed (tests use it to check that nothing
//! leaks).
//!
//! A thread, and not "free at the next `um` call": a program that stops calling `um`, or shuts
//! down, would otherwise keep the memory, and the next call would pay for someone else's frees.

use std::sync::{Arc, Condvar, Mutex};

use crate::driver::context::{Context, in_driver_callback, thread_is_capturing};
use crate::driver::poison::PoisonFlag;
use crate::reclaim::lock;

/// One allocation given up before its stream was done with it: its context, and how its storage
/// frees it. Dropping an `Orphan` leaks the memory (it only releases the context reference and
/// the free it carries, uncalled); only [`Orphan::free`] frees it.
pub struct Orphan {
    ctx: Context,
    /// The storage's free of this allocation (`crate::storage`), called at most once.
    free: Box<dyn FnOnce() + Send>,
    /// The poison marks of the stream that owned the memory and of those it was handed off
    /// from (`driver/poison.rs`): once one is set, the memory is leaked, whatever the stream
    /// reports.
    poison: Vec<Arc<PoisonFlag>>,
}

impl Orphan {
    /// The orphan of an allocation of `ctx` that `free` frees.
    ///
    /// # Safety
    /// `free` frees the allocation and nothing else; it is sound to call once, with `ctx`
    /// current, as soon as no work on any stream can use the allocation; and nothing else frees
    /// the allocation (its owner gave it up).
    pub(crate) unsafe fn new(ctx: Context, free: impl FnOnce() + Send + 'static) -> Self {
        Orphan {
            ctx,
            free: Box::new(free),
            poison: Vec::new(),
        }
    }

    /// The same orphan, leaked instead of freed if one of `poison` (marks of streams that owned
    /// it), or of the marks it watched already, is set by the time it would be freed.
    pub(crate) fn watching(mut self, poison: impl IntoIterator<Item = Arc<PoisonFlag>>) -> Self {
        self.poison.extend(poison);
        self
    }

    /// Whether the stream that owned the memory was poisoned (or one it was handed off from).
    fn is_poisoned(&self) -> bool {
        self.poison.iter().any(|p| p.is_set())
    }

    /// Frees the allocation unless a stream that owned it was poisoned (then it is leaked), for
    /// a free made outside the reaper: after a wait for the whole context of the stream that
    /// owned it (`Context::with_idle_after_captures`).
    ///
    /// # Safety
    /// No work on any stream can use the memory any more.
    pub(crate) unsafe fn free_unless_poisoned(self) {
        if !self.is_poisoned() {
            // SAFETY: the caller's guarantee.
            unsafe { self.free() };
        }
    }

    /// Frees the allocation; leaks it if the context cannot be made current.
    ///
    /// # Safety
    /// No work on any stream can use the memory any more.
    unsafe fn free(self) {
        if self.ctx.bind().is_ok() {
            // The one call of the storage's free (`new`'s contract), the context current and no
            // work using the memory (the caller).
            (self.free)();
        }
    }
}

struct Job {
    orphans: Vec<Orphan>,
    /// Whether the stream completed without error (otherwise the memory is leaked).
    ok: bool,
}

struct Queue {
    jobs: Vec<Job>,
    /// Orphans handed over (or announced by [`expect`]) and not yet freed (or leaked).
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

/// Frees `orphan` on the reaper thread, at once: for memory that no GPU work can use any more
/// (host-owned memory) dropped where no CUDA call may be made, inside um's stream callback. The
/// reaper thread never captures, and ignores other threads' captures (thread-local mode), so its
/// free is not refused.
pub(crate) fn free_elsewhere(orphan: Orphan) {
    expect(1);
    hand_over(vec![orphan], true);
}

/// `n` orphans will be handed over; starts the reaper thread on first use.
pub(crate) fn expect(n: usize) {
    let mut q = lock(&QUEUE);
    q.pending += n;
    if !q.thread {
        q.thread = std::thread::Builder::new()
            .name("um-reaper".to_owned())
            .spawn(run)
            .is_ok();
    }
}

/// Hands over orphans announced by [`expect`] whose stream has passed their point, with whether
/// it did so without error. Called from the stream callback: no CUDA call, only a push and a
/// notification.
pub(crate) fn hand_over(orphans: Vec<Orphan>, ok: bool) {
    lock(&QUEUE).jobs.push(Job { orphans, ok });
    WORK.notify_one();
}

fn settle(jobs: Vec<Job>) -> usize {
    let mut n = 0;
    for job in jobs {
        n += job.orphans.len();
        for orphan in job.orphans {
            if job.ok && !orphan.is_poisoned() {
                // SAFETY: the stream's callback ran with success after every operation
                // enqueued before it, and no later operation can name this memory: the
                // future (or the buffer) that held it was its only owner.
                unsafe { orphan.free() };
            } else {
                // The stream met an error, or was poisoned (work on it was aborted, and may
                // still touch the memory): leak it.
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
    // Frees are made here while other threads capture: no capture of theirs, in whatever mode,
    // may refuse them (um's are thread-local anyway).
    crate::driver::ignore_other_threads_captures();
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

/// Blocks until every buffer of a dropped, unfinished sync future has been freed (or leaked,
/// where its stream met an error): for an orderly shutdown, or before reading the device's free
/// memory. It waits for those streams. Inside a driver callback (a waker) it returns at once,
/// and on a thread that is capturing (with no reaper thread to free them) it returns once only
/// what that thread may not free is left.
pub fn reap_pending() {
    // Inside um's stream callback (a waker) the orphans pending may wait for a later callback
    // of the same stream, which waits for this one: return at once.
    if in_driver_callback() {
        return;
    }
    let mut q = lock(&QUEUE);
    while q.pending > 0 {
        if !q.thread && thread_is_capturing() {
            // No reaper thread, and this thread may not free (it captures): nobody would free
            // the orphans while it waited. They wait for the next call outside the capture.
            return;
        }
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

/// How many buffers of dropped, unfinished sync futures wait for their stream or the reaper.
#[cfg(feature = "test-hooks")]
pub fn orphans_pending() -> usize {
    lock(&QUEUE).pending
}
