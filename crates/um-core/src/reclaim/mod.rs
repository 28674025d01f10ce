//! The reclaim layer: memory that a stream may still use, freed once the stream is done with it,
//! without blocking a thread.
//!
//! Below the memory layer, which uses it from two places: `Managed`'s drop (while an unfinished
//! async scope is dropped, see [`defer`]) and the sync futures of `crate::wait` (a future
//! dropped before its stream reached its point). Both give the memory up as an
//! [`Orphan`](reaper::Orphan), which knows how to free itself but not what it was.
//!
//! * [`completion`]: a point in a stream, reported once the stream has run up to it (a stream
//!   callback, or the event thread), with the task to wake and the orphans to free then;
//! * [`reaper`]: the orphans, and the thread that frees them off the callback thread;
//! * [`defer`]: the mark of a thread that is dropping an unfinished async scope, and the
//!   deferred free that `Managed`'s drop makes under it.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub(crate) mod completion;
pub(crate) mod defer;
pub(crate) mod reaper;

/// Locks `m`, also when a thread panicked while holding it: every state behind these mutexes
/// stays consistent between statements.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
