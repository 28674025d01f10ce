//! Frees that wait for a stream without blocking a thread, for `Managed`'s drop.
//!
//! When an async scope (`crate::wait::scopes`) is dropped before it completed, Rust drops the
//! scope's future, and with it buffers that are still attached to a stream. Their drop would
//! wait for the stream (`cuStreamSynchronize`), and block the executor thread it runs on. The
//! scope therefore marks the thread ([`DroppingScope`]) while it drops that future; under the
//! mark, the drop of stream-owned memory puts a completion on the memory's stream and leaves the
//! memory to it ([`defer_free`]), and the reaper frees it once the stream has run past that
//! point. Outside the mark, dropping stream-owned memory still waits, as in synchronous code.

use crate::driver::context::Context;
use crate::driver::stream::RawStream;
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

/// For `Managed`'s drop, under [`dropping_scope`]: memory a stream may still use is not waited
/// for (that would block an executor thread) but handed to the reaper behind a callback on its
/// stream. Returns the orphan if that was not possible (the context cannot be made current, or
/// the callback cannot be enqueued): the caller then waits, as always.
///
/// `owner` is the context of `stream`, the stream that owns the memory.
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

/// A capture scope on this thread owns the streams `ids` from now on: buffers of those streams
/// dropped meanwhile are kept for it ([`bury`]).
pub(crate) fn open_capture(ids: &[u64]) {
    CAPTURES.with(|c| {
        c.borrow_mut()
            .extend(ids.iter().map(|id| (*id, Vec::new())));
    });
}

/// Ends the registration of `ids` and returns the buffers dropped under them.
pub(crate) fn close_capture(ids: &[u64]) -> Vec<Orphan> {
    CAPTURES.with(|c| {
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
}

/// For `Managed`'s drop of a buffer owned by a capture stream: no free and no wait can happen
/// during a capture (the driver refuses both, and would invalidate the capture), so the buffer is
/// kept for the scope that owns the stream, which frees it once its capture has ended and the
/// buffer's eager stream is done with it. Returns the orphan if no scope on this thread owns
/// `stream` (the caller then leaks it).
pub(crate) fn bury(stream: u64, orphan: Orphan) -> std::result::Result<(), Orphan> {
    CAPTURES.with(|c| {
        let mut c = c.borrow_mut();
        match c.iter_mut().find(|(id, _)| *id == stream) {
            Some((_, orphans)) => {
                orphans.push(orphan);
                Ok(())
            }
            None => Err(orphan),
        }
    })
}

/// Whether a capture scope is open on this thread.
pub(crate) fn capturing() -> bool {
    CAPTURES.with(|c| !c.borrow().is_empty())
}
