//! The orphans, and the reaper: one thread `um` starts on first use, which sleeps until a stream
//! has passed the point behind which memory was given up, then frees that memory.
//!
//! Freeing is a CUDA call (`cuMemFree` may wait for the device), which the stream callback that
//! reports the point may not make, and which an executor thread should not make either: the
//! callback only hands the orphans over ([`Reaper::hand_over`]), and this thread frees them. If the
//! stream met an error, the memory is leaked, as a failed `sync` leaks it. [`reap_pending`]
//! waits until every orphan so handed over has been freed (tests use it to check that nothing
//! leaks).
//!
//! A thread, and not "free at the next `um` call": a program that stops calling `um`, or shuts
//! down, would otherwise keep the memory, and the next call would pay for someone else's frees.

use std::sync::Arc;

use crate::driver::context::{Context, in_driver_callback, thread_is_capturing};
use crate::driver::poison::PoisonFlag;
use crate::driver::sys;
use crate::sync::{Condvar, Mutex, lock, wait};

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
    /// The address of managed memory that may still be attached to the stream that owned it
    /// (`CU_MEM_ATTACH_SINGLE`, unified memory): a free deferred behind a per-thread default
    /// stream re-attaches it to the host first (`crate::reclaim::defer::defer_free`).
    associated: Option<sys::CUdeviceptr>,
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
            associated: None,
        }
    }

    /// The same orphan, of managed memory at `ptr` that may still be attached to the stream that
    /// owned it (`CU_MEM_ATTACH_SINGLE`).
    pub(crate) fn associated_at(mut self, ptr: sys::CUdeviceptr) -> Self {
        self.associated = Some(ptr);
        self
    }

    /// The managed address that may still be attached to the owning stream, if any.
    pub(crate) fn associated(&self) -> Option<sys::CUdeviceptr> {
        self.associated
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

/// What the reaper settles: memory given up before its stream was done with it ([`Orphan`]; a
/// model's allocation in the loom models).
pub(crate) trait Reclaim: Send {
    /// Whether a stream that owned the memory was poisoned: the memory is then leaked.
    fn is_poisoned(&self) -> bool;

    /// Frees the memory.
    ///
    /// # Safety
    /// No work on any stream can use the memory any more.
    unsafe fn free(self);
}

impl Reclaim for Orphan {
    fn is_poisoned(&self) -> bool {
        Orphan::is_poisoned(self)
    }

    unsafe fn free(self) {
        // SAFETY: the caller's guarantee.
        unsafe { Orphan::free(self) }
    }
}

struct Job<O> {
    orphans: Vec<O>,
    /// Whether the stream completed without error (otherwise the memory is leaked).
    ok: bool,
}

struct Queue<O> {
    jobs: Vec<Job<O>>,
    /// Orphans handed over (or announced by [`Reaper::expect`]) and not yet freed (or leaked).
    pending: usize,
    /// Whether the reaper thread runs.
    thread: bool,
    /// Orphans announced since the process started, settled or not: a count that only grows,
    /// so that a test sees every free sent to the reaper however soon the stream passed it.
    #[cfg(feature = "test-hooks")]
    announced: usize,
}

/// The reaper's queue and its thread's handoff, generic over what it frees (`O`) and how its
/// thread starts (`start`), so that the loom models run it without a GPU. `um` has one, of
/// [`Orphan`]s ([`global`]).
pub(crate) struct Reaper<O> {
    queue: Mutex<Queue<O>>,
    /// Signalled when a job is handed over: the reaper thread takes it.
    work: Condvar,
    /// Signalled when no orphan is pending any more ([`reap_pending`] returns), and, while no
    /// reaper thread runs, when a job is handed over ([`reap_pending`] settles it).
    idle: Condvar,
    /// Starts the reaper thread (called under the queue's lock, once per [`Reaper::expect`]
    /// until it succeeds); whether it runs.
    start: fn() -> bool,
}

impl<O: Reclaim> Reaper<O> {
    #[cfg(not(all(test, loom)))]
    const fn new(start: fn() -> bool) -> Self {
        Reaper {
            queue: Mutex::new(Queue {
                jobs: Vec::new(),
                pending: 0,
                thread: false,
                #[cfg(feature = "test-hooks")]
                announced: 0,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
            start,
        }
    }

    /// loom's primitives are not `const`.
    #[cfg(all(test, loom))]
    pub(crate) fn new(start: fn() -> bool) -> Self {
        Reaper {
            queue: Mutex::new(Queue {
                jobs: Vec::new(),
                pending: 0,
                thread: false,
                #[cfg(feature = "test-hooks")]
                announced: 0,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
            start,
        }
    }

    /// `n` orphans will be handed over; starts the reaper thread on first use.
    pub(crate) fn expect(&self, n: usize) {
        let mut q = lock(&self.queue);
        q.pending += n;
        #[cfg(feature = "test-hooks")]
        {
            q.announced += n;
        }
        if !q.thread {
            q.thread = (self.start)();
        }
    }

    /// Hands over orphans announced by [`Reaper::expect`] whose stream has passed their point,
    /// with whether it did so without error. Called from the stream callback: no CUDA call,
    /// only a push and a notification.
    pub(crate) fn hand_over(&self, orphans: Vec<O>, ok: bool) {
        let alone = {
            let mut q = lock(&self.queue);
            q.jobs.push(Job { orphans, ok });
            !q.thread
        };
        self.work.notify_one();
        if alone {
            // No reaper thread: `reap_pending` does its work, and may be waiting already.
            self.idle.notify_all();
        }
    }

    /// The reaper thread's turn: waits until jobs were handed over, settles them all; how many
    /// orphans they held.
    pub(crate) fn reap_next(&self) -> usize {
        let jobs = {
            let mut q = lock(&self.queue);
            while q.jobs.is_empty() {
                q = wait(&self.work, q);
            }
            std::mem::take(&mut q.jobs)
        };
        let n = settle(jobs);
        self.done(n);
        n
    }

    fn done(&self, n: usize) {
        let mut q = lock(&self.queue);
        q.pending = q.pending.saturating_sub(n);
        if q.pending == 0 {
            self.idle.notify_all();
        }
    }

    /// [`reap_pending`] outside a driver callback: blocks until no orphan is pending, doing the
    /// reaper's work where no reaper thread runs; returns early on a thread that `capturing`
    /// says captures, while no reaper thread runs.
    pub(crate) fn wait_settled(&self, capturing: impl Fn() -> bool) {
        let mut q = lock(&self.queue);
        while q.pending > 0 {
            if !q.thread && capturing() {
                // No reaper thread, and this thread may not free (it captures): nobody would
                // free the orphans while it waited. They wait for the next call outside the
                // capture.
                return;
            }
            if !q.thread && !q.jobs.is_empty() {
                // No reaper thread could be started: do its work here.
                let jobs = std::mem::take(&mut q.jobs);
                drop(q);
                self.done(settle(jobs));
                q = lock(&self.queue);
                continue;
            }
            q = wait(&self.idle, q);
        }
    }

    /// How many orphans were announced and are not yet freed (or leaked).
    #[cfg(any(feature = "test-hooks", all(test, loom)))]
    pub(crate) fn pending(&self) -> usize {
        lock(&self.queue).pending
    }

    /// How many orphans were announced since the process started, settled or not.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn announced(&self) -> usize {
        lock(&self.queue).announced
    }
}

fn settle<O: Reclaim>(jobs: Vec<Job<O>>) -> usize {
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

#[cfg(not(all(test, loom)))]
static REAPER: Reaper<Orphan> = Reaper::new(start_thread);
#[cfg(all(test, loom))]
static REAPER: crate::sync::Lazy<Reaper<Orphan>> =
    crate::sync::Lazy::new(|| Reaper::new(start_thread));

/// `um`'s reaper, of every orphan.
pub(crate) fn global() -> &'static Reaper<Orphan> {
    &REAPER
}

/// Frees `orphan` on the reaper thread, at once: for memory that no GPU work can use any more
/// (host-owned memory) dropped where no CUDA call may be made, inside um's stream callback. The
/// reaper thread never captures, and ignores other threads' captures (thread-local mode), so its
/// free is not refused.
pub(crate) fn free_elsewhere(orphan: Orphan) {
    REAPER.expect(1);
    REAPER.hand_over(vec![orphan], true);
}

fn start_thread() -> bool {
    std::thread::Builder::new()
        .name("um-reaper".to_owned())
        .spawn(run)
        .is_ok()
}

fn run() {
    // Frees are made here while other threads capture: no capture of theirs, in whatever mode,
    // may refuse them (um's are thread-local anyway).
    crate::driver::ignore_other_threads_captures();
    loop {
        REAPER.reap_next();
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
    REAPER.wait_settled(thread_is_capturing);
}

/// How many buffers of dropped, unfinished sync futures wait for their stream or the reaper.
#[cfg(feature = "test-hooks")]
pub fn orphans_pending() -> usize {
    REAPER.pending()
}

/// How many buffers were given to the reaper since the process started (a stream callback, then
/// the reaper, frees or leaks each), whether or not it has settled them yet: unlike
/// [`orphans_pending`], a count that only grows, so that it shows which drops went through the
/// reaper whatever the speed of the device (a stream that passed the point before the count is
/// read has already taken its orphan off the pending count).
#[cfg(feature = "test-hooks")]
pub fn orphans_announced() -> usize {
    REAPER.announced()
}

/// The loom models of the reaper (`docs/safety.md`, "What loom checks"): every orphan handed
/// over is settled once (freed if its stream succeeded, leaked otherwise) before
/// [`reap_pending`] returns, with or without a reaper thread.
#[cfg(all(test, loom))]
pub(crate) mod loom_model {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    use super::{Reaper, Reclaim};
    use crate::driver::poison::PoisonFlag;
    use crate::sync::{Arc, model, thread};

    /// What the models' allocations did: frees and drops, by allocation.
    #[derive(Default)]
    pub(crate) struct Log {
        freed: [AtomicUsize; 4],
        dropped: [AtomicUsize; 4],
    }

    impl Log {
        /// How many times allocation `id` was freed, and dropped (a leak is a drop without a
        /// free).
        pub(crate) fn of(&self, id: usize) -> (usize, usize) {
            (self.freed[id].load(SeqCst), self.dropped[id].load(SeqCst))
        }
    }

    /// A model's allocation: what an [`Orphan`](super::Orphan) is to the reaper, with a log
    /// instead of a free.
    pub(crate) struct Token {
        id: usize,
        log: std::sync::Arc<Log>,
        poison: Option<std::sync::Arc<PoisonFlag>>,
    }

    impl Token {
        pub(crate) fn new(id: usize, log: &std::sync::Arc<Log>) -> Self {
            Token {
                id,
                log: std::sync::Arc::clone(log),
                poison: None,
            }
        }

        /// Leaked instead of freed once `flag` is set (`Orphan::watching`).
        pub(crate) fn watching(mut self, flag: &std::sync::Arc<PoisonFlag>) -> Self {
            self.poison = Some(std::sync::Arc::clone(flag));
            self
        }
    }

    impl Drop for Token {
        fn drop(&mut self) {
            self.log.dropped[self.id].fetch_add(1, SeqCst);
        }
    }

    impl Reclaim for Token {
        fn is_poisoned(&self) -> bool {
            self.poison.as_ref().is_some_and(|p| p.is_set())
        }

        unsafe fn free(self) {
            self.log.freed[self.id].fetch_add(1, SeqCst);
        }
    }

    /// The reaper thread's loop (`run`), until it has settled `n` orphans.
    pub(crate) fn reaper_thread(reaper: &Arc<Reaper<Token>>, n: usize) -> thread::JoinHandle<()> {
        let reaper = Arc::clone(reaper);
        thread::spawn(move || {
            let mut settled = 0;
            while settled < n {
                settled += reaper.reap_next();
            }
        })
    }

    /// Two futures dropped on the user's thread leave an allocation each (announced there); two
    /// stream callbacks hand them over, one of a stream that succeeded and one of a stream that
    /// met an error; the reaper thread settles them while the user's thread waits in
    /// `reap_pending`. When it returns, the first was freed once and the second leaked (dropped,
    /// never freed), whichever order the threads ran in.
    #[test]
    fn every_orphan_handed_over_is_settled_once_before_reap_pending_returns() {
        model(|| {
            let log = std::sync::Arc::new(Log::default());
            let reaper = Arc::new(Reaper::new(|| true));
            reaper.expect(2);
            let worker = reaper_thread(&reaper, 2);
            let callbacks: Vec<_> = [(0, true), (1, false)]
                .into_iter()
                .map(|(id, ok)| {
                    let (reaper, token) = (Arc::clone(&reaper), Token::new(id, &log));
                    thread::spawn(move || reaper.hand_over(vec![token], ok))
                })
                .collect();
            reaper.wait_settled(|| false);
            assert_eq!(
                log.of(0),
                (1, 1),
                "the orphan of a stream that succeeded is freed"
            );
            assert_eq!(log.of(1), (0, 1), "the orphan of a failed stream is leaked");
            assert_eq!(reaper.pending(), 0);
            for callback in callbacks {
                callback.join().unwrap();
            }
            worker.join().unwrap();
            assert_eq!((log.of(0), log.of(1)), ((1, 1), (0, 1)), "settled once");
        });
    }

    /// No reaper thread could be started: `reap_pending` does its work, also for an orphan
    /// whose callback hands it over while `reap_pending` already waits.
    #[test]
    fn without_a_reaper_thread_reap_pending_frees_what_is_handed_over_while_it_waits() {
        model(|| {
            let log = std::sync::Arc::new(Log::default());
            let reaper = Arc::new(Reaper::new(|| false));
            reaper.expect(1);
            let callback = {
                let (reaper, token) = (Arc::clone(&reaper), Token::new(0, &log));
                thread::spawn(move || reaper.hand_over(vec![token], true))
            };
            reaper.wait_settled(|| false);
            assert_eq!(log.of(0), (1, 1), "freed once, by reap_pending");
            callback.join().unwrap();
        });
    }
}
