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
