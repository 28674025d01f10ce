//! Frees that wait for a stream without blocking a thread, for `Managed`'s drop.
//!
//! When an async scope (`crate::wait::scopes`) is dropped before it completed, Rust drops the
//! scope's future, and with it buffers that are still attached to a stream. Their drop would
//! wait for the stream (`cuStreamSynchronize`), and block the executor thread it runs on. The
//! scope therefore marks the thread ([`DroppingScope`]) while it drops that future; under the
//! mark, the drop of stream-owned memory puts a completion on the memory's stream and leaves the
//! memory to it ([`defer_free`]), and the reaper frees it once the stream has run past that
//! point. Outside the mark, dropping stream-owned memory still waits, as in synchronous code.

use crate::driver;
use crate::driver::context::{
    Context, keep_for_capture_end, kept_work_recordable, thread_is_capturing,
};
use crate::driver::stream::RawStream;
use crate::driver::sys;
use crate::reclaim::completion::Completion;
use crate::reclaim::reaper::Orphan;

thread_local! {
    /// How many unfinished async scopes this thread is dropping right now.
    static DROPPING_SCOPES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether this thread is dropping an unfinished async scope (then [`defer_free`] applies).
pub(crate) fn dropping_scope() -> bool {
    DROPPING_SCOPES.with(std::cell::Cell::get) > 0
}

/// The mark of a thread that drops an unfinished async scope: in force from [`enter`] until the
/// guard is dropped, also when a drop under it panics.
///
/// [`enter`]: DroppingScope::enter
pub(crate) struct DroppingScope {
    _private: (),
}

impl DroppingScope {
    pub(crate) fn enter() -> Self {
        DROPPING_SCOPES.with(|n| n.set(n.get() + 1));
        DroppingScope { _private: () }
    }
}

impl Drop for DroppingScope {
    fn drop(&mut self) {
        DROPPING_SCOPES.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Frees `orphan` where the driver accepts the free: on a thread that captures (the driver
/// would refuse it there, the memory would be lost for good, and the refusal would invalidate
/// the capture), on this thread once its captures have ended; elsewhere at once. For memory no
/// GPU work uses (host-owned memory) dropped on a thread that may be capturing. Forgotten
/// (leaked) where the thread exits inside its capture.
///
/// # Safety
/// No work on any stream can use the memory; the caller gave the allocation up to `orphan`.
pub(crate) unsafe fn free_after_captures(orphan: Orphan) {
    let free = move || {
        // SAFETY: the caller's guarantee.
        unsafe { orphan.free_unless_poisoned() }
    };
    if thread_is_capturing() {
        keep_for_capture_end(Box::new(free));
    } else {
        free();
    }
}

/// [`defer_free`] for memory that may not be waited for here (a capture is open on this thread)
/// and must not be lost: should the callback not be enqueued, the memory is kept until no
/// capture of `um` is in progress on the owner's device nor on this thread, and freed then,
/// after a wait for that device's whole context (`Context::with_idle_after_captures`). Leaked
/// only if that wait fails (a sticky error: the GPU may still hold it) or a stream that owned
/// it was poisoned.
pub(crate) fn defer_free_or_keep(owner: &Context, stream: RawStream, orphan: Orphan) {
    if let Err(orphan) = defer_free(owner, stream, orphan) {
        let later = move || {
            // SAFETY: run only after a completed wait for all work of the context of the stream
            // that owned the memory (the contract of `with_idle_after_captures`), which includes
            // every kernel and copy that stream had queued when the memory was given up; no
            // later work can name it (its owner gave it up).
            unsafe { orphan.free_unless_poisoned() };
        };
        let _ = owner.with_idle_after_captures(later);
    }
}

/// For `Managed`'s drop, under [`dropping_scope`]: memory a stream may still use is not waited
/// for (that would block an executor thread) but handed to the reaper behind a callback on its
/// stream. Returns the orphan if that was not possible (the context cannot be made current, or
/// the callback cannot be enqueued): the caller then waits, as always.
///
/// `owner` is the context of `stream`, the stream that owns the memory.
///
/// Managed memory still attached to a per-thread default stream (`CU_MEM_ATTACH_SINGLE`) is
/// re-attached to the host (`CU_MEM_ATTACH_HOST`) on that stream first, before the callback: a
/// thread whose default stream still has managed memory attached never finishes exiting (seen
/// with driver 580), and the thread may exit before the reaper frees the memory. Where the
/// re-attach fails, the orphan comes back (the caller waits for the stream, or keeps it). On a
/// thread that captures, the re-attach (a call on a stream that is not capturing, but on the
/// capturing thread, which the driver might refuse and so invalidate the capture) is not made
/// there: the whole deferred free is kept for the end of the thread's captures, which comes
/// before the thread can exit, and made then (only memory of this thread's own default stream
/// gets here, so that stream is alive then).
pub(crate) fn defer_free(
    owner: &Context,
    stream: RawStream,
    orphan: Orphan,
) -> std::result::Result<(), Orphan> {
    let attached_here = (stream.handle == sys::STREAM_PER_THREAD)
        .then(|| orphan.associated())
        .flatten();
    if attached_here.is_some() && thread_is_capturing() {
        let owner = owner.clone();
        keep_for_capture_end(Box::new(move || {
            defer_free_or_keep(&owner, stream, orphan);
        }));
        return Ok(());
    }
    if owner.bind().is_err() {
        return Err(orphan);
    }
    if let Some(ptr) = attached_here {
        // SAFETY: `ptr` is the start of the live managed allocation that `orphan` owns (freed
        // only by it, after the callback below, which the stream runs after this attach); the
        // stream is this thread's default stream of `owner`, current, alive while the thread
        // runs, not capturing (a per-thread stream never is: `um` captures on streams of its
        // own) and not the NULL stream. The attach is stream-ordered after every kernel queued
        // there that may use the memory.
        if unsafe { driver::stream_attach(stream.handle, ptr, sys::MEM_ATTACH_HOST) }.is_err() {
            return Err(orphan);
        }
    }
    match Completion::enqueue(owner, stream) {
        Ok(completion) => {
            completion.leave(vec![orphan]);
            Ok(())
        }
        Err(_) => Err(orphan),
    }
}

thread_local! {
    /// The buffers dropped inside the capture scopes running on this thread, by the id of the
    /// capture stream that owned them. A scope registers its streams when it begins
    /// ([`open_capture`]) and takes what was left when its capture has ended ([`close_capture`]).
    static CAPTURES: std::cell::RefCell<Vec<(u64, Vec<Orphan>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

// `CAPTURES` has a destructor, so it is gone while the thread's later thread-local destructors
// run (a `thread_local!` of the user's whose `Drop` drops a stream-owned buffer):
// every access below is `try_with`, never a panic. Once it is gone no capture scope
// can begin on the thread (`captures_recordable`, checked by `Scope::begin`), `capturing` is
// false by the record and `bury` finds no scope (the caller leaks the buffer). One can still be
// open around it: `std::process::exit` called inside a capture closure runs the thread's
// thread-local destructors with the scope's frame still on the stack. So
// `capturing` also asks the thread's count of captures (`thread_is_capturing`, a `Cell` without
// a destructor).

/// Whether this thread can still record its capture scopes and what they keep for their end:
/// false in a thread-local destructor that runs after `CAPTURES` or the kept work's record
/// (`driver::context::kept_work_recordable`) was destroyed (a capture is then refused,
/// `CaptureRefusedHere`).
///
/// The two records are separate thread-locals, destroyed at thread exit in the reverse order of
/// their first use on the thread, and a thread's first capture used `CAPTURES` when it began
/// but the kept work's record only when it ended: a thread-local first used inside that closure
/// was destroyed after the kept work's record and before `CAPTURES`, so a capture begun in its
/// destructor found the scopes' record but forgot what its closure dropped. Both are asked here,
/// the kept work's first (so that a thread's first capture uses it first, and it outlives
/// `CAPTURES` whenever the scopes' record is first used here): a capture begins only where
/// everything it keeps can be kept.
pub(crate) fn captures_recordable() -> bool {
    kept_work_recordable() && CAPTURES.try_with(|_| ()).is_ok()
}

/// A capture scope on this thread owns the streams `ids` from now on: buffers of those streams
/// dropped meanwhile are kept for it ([`bury`]). Called only after [`captures_recordable`]
/// (checked by `Scope::begin`) on the same thread, so the record exists.
pub(crate) fn open_capture(ids: &[u64]) {
    let _ = CAPTURES.try_with(|c| {
        c.borrow_mut()
            .extend(ids.iter().map(|id| (*id, Vec::new())));
    });
}

/// Ends the registration of `ids` and returns the buffers dropped under them.
pub(crate) fn close_capture(ids: &[u64]) -> Vec<Orphan> {
    CAPTURES
        .try_with(|c| {
            let mut c = c.borrow_mut();
            let mut buried = Vec::new();
            c.retain_mut(|(id, orphans)| {
                if ids.contains(id) {
                    buried.append(orphans);
                    false
                } else {
                    true
                }
            });
            buried
        })
        .unwrap_or_default()
}

/// For `Managed`'s drop of a buffer owned by a capture stream: no free and no wait can happen
/// during a capture (the driver refuses both, and would invalidate the capture), so the buffer is
/// kept for the scope that owns the stream, which frees it once its capture has ended and the
/// buffer's eager stream is done with it. Returns the orphan if no scope on this thread owns
/// `stream` (the caller then leaks it).
pub(crate) fn bury(stream: u64, orphan: Orphan) -> std::result::Result<(), Orphan> {
    let mut orphan = Some(orphan);
    let _ = CAPTURES.try_with(|c| {
        let mut c = c.borrow_mut();
        if let Some((_, orphans)) = c.iter_mut().find(|(id, _)| *id == stream) {
            orphans.extend(orphan.take());
        }
    });
    match orphan {
        Some(orphan) => Err(orphan),
        None => Ok(()),
    }
}

/// Whether a capture of um is open on this thread: by the scopes' record, or, once the record
/// is destroyed (see above), by the thread's count of captures.
pub(crate) fn capturing() -> bool {
    CAPTURES
        .try_with(|c| !c.borrow().is_empty())
        .unwrap_or(false)
        || thread_is_capturing()
}

#[cfg(test)]
mod tests {
    use super::{captures_recordable, capturing, close_capture, open_capture};
    use crate::driver::context::{
        enter_thread_capture, keep_for_capture_end, leave_thread_capture, run_after_captures,
    };
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Mutex;

    /// `Managed::drop` of a stream-owned buffer asks `capturing()`; in a
    /// `thread_local!` value's `Drop` that runs after `CAPTURES` was destroyed, that was a panic
    /// in a TLS destructor (an abort). One value set up before the thread's first use of
    /// `CAPTURES` and one after, so that one of them runs after it whatever order the platform
    /// runs the destructors in: each sees no capture, and a capture there is refused.
    #[test]
    fn captures_asked_about_in_a_thread_local_destructor_are_none_and_none_can_begin() {
        static SEEN: Mutex<Vec<(bool, bool)>> = Mutex::new(Vec::new());
        struct AsksAtExit;
        impl Drop for AsksAtExit {
            fn drop(&mut self) {
                let seen = (capturing(), captures_recordable());
                SEEN.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(seen);
            }
        }
        thread_local! {
            static BEFORE: std::cell::RefCell<Option<AsksAtExit>> =
                const { std::cell::RefCell::new(None) };
            static AFTER: std::cell::RefCell<Option<AsksAtExit>> =
                const { std::cell::RefCell::new(None) };
        }
        let ran = std::thread::spawn(|| {
            BEFORE.with(|b| *b.borrow_mut() = Some(AsksAtExit));
            open_capture(&[7]);
            let during = capturing();
            assert!(close_capture(&[7]).is_empty());
            AFTER.with(|a| *a.borrow_mut() = Some(AsksAtExit));
            during && !capturing()
        })
        .join()
        .unwrap_or(false);
        assert!(ran, "a scope is seen while open, and not after");
        let seen = std::mem::take(
            &mut *SEEN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        assert_eq!(seen.len(), 2, "both destructors ran: {seen:?}");
        assert!(seen.iter().all(|(capturing, _)| !capturing), "{seen:?}");
        assert!(
            seen.contains(&(false, false)),
            "one destructor ran after the record was gone, where a capture is refused: {seen:?}"
        );
    }

    /// A capture may begin in a thread-local destructor as long as the thread's record of its
    /// capture scopes is there (`captures_recordable`, checked by `Scope::begin`); the work it
    /// keeps for its end (a host-owned buffer dropped in its closure, a destroy) must then run
    /// when it ends, never be forgotten. The thread's two records (`CAPTURES`, the scopes', and
    /// `AFTER_CAPTURES`, the kept work) are destroyed separately at thread exit, in the reverse
    /// order of their first use on the thread (glibc), and a thread's first capture uses the
    /// first when it begins and the second only when it ends: a thread-local first touched
    /// inside that closure is destroyed between the two. Three values, set up before the first
    /// capture, inside it and after it, each "capture" in its destructor as `Scope` does (count,
    /// register, keep, end): whichever order the platform runs the destructors in, a capture
    /// that could begin had its kept work run.
    #[test]
    fn work_kept_by_a_capture_begun_in_a_thread_local_destructor_runs_when_it_ends() {
        use std::sync::Mutex;
        /// (which value, whether a capture could begin there, whether its kept work ran).
        static SEEN: Mutex<Vec<(&str, bool, bool)>> = Mutex::new(Vec::new());
        struct CapturesAtExit(&'static str);
        impl Drop for CapturesAtExit {
            fn drop(&mut self) {
                let began = captures_recordable();
                let ran = Rc::new(std::cell::Cell::new(false));
                if began {
                    let id = [1000 + self.0.len() as u64];
                    enter_thread_capture();
                    open_capture(&id);
                    let r = Rc::clone(&ran);
                    keep_for_capture_end(Box::new(move || r.set(true)));
                    if leave_thread_capture() {
                        run_after_captures();
                    }
                    let _ = close_capture(&id);
                }
                SEEN.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((self.0, began, ran.get()));
            }
        }
        thread_local! {
            static BEFORE: RefCell<Option<CapturesAtExit>> = const { RefCell::new(None) };
            static INSIDE: RefCell<Option<CapturesAtExit>> = const { RefCell::new(None) };
            static AFTER: RefCell<Option<CapturesAtExit>> = const { RefCell::new(None) };
        }
        let joined = std::thread::spawn(|| {
            BEFORE.with(|v| *v.borrow_mut() = Some(CapturesAtExit("before")));
            // The thread's first capture, as `Scope` makes it: the scopes' record first...
            assert!(captures_recordable());
            enter_thread_capture();
            open_capture(&[7]);
            INSIDE.with(|v| *v.borrow_mut() = Some(CapturesAtExit("inside")));
            // ... the kept work's record at its end.
            if leave_thread_capture() {
                run_after_captures();
            }
            assert!(close_capture(&[7]).is_empty());
            AFTER.with(|v| *v.borrow_mut() = Some(CapturesAtExit("after")));
        })
        .join();
        assert!(joined.is_ok(), "the thread exited without a panic");
        let seen = std::mem::take(
            &mut *SEEN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        assert_eq!(seen.len(), 3, "every destructor ran: {seen:?}");
        assert!(
            seen.iter().all(|(_, began, ran)| !began || *ran),
            "a capture began in a thread-local destructor and its kept work was forgotten \
             (what it would have freed is lost): {seen:?}"
        );
    }
}
