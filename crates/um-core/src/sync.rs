//! The synchronisation primitives of um's concurrency protocols: the reaper's queue
//! (`reclaim/reaper.rs`), a completion's slot (`reclaim/completion.rs`), a stream's poison mark
//! (`driver/poison.rs`) and a device's count of captures (`driver/capture_count.rs`).
//!
//! They are std's, except in the loom models: `RUSTFLAGS="--cfg loom"` and a unit-test build
//! (`cfg(all(test, loom))`, `loom` is a dev-dependency), where they are loom's, which run each
//! model once per interleaving of its threads (`docs/safety.md`, "What loom checks"). The
//! protocols take these names from here, and nothing else of theirs changes between the two
//! builds; the ordinary build is std's, as before.
//!
//! loom's `Mutex` and `Condvar` are not `const`: a `static` of the ordinary build is made
//! lazily in the models' build (`Lazy`), where no model touches it (each makes its own).

#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

#[cfg(all(test, loom))]
pub(crate) use loom::future::block_on;
#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(all(test, loom))]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(all(test, loom))]
pub(crate) use loom::thread;

/// A `static` of the protocols in the models' build: made on first use (never, in a model).
#[cfg(all(test, loom))]
pub(crate) type Lazy<T> = std::sync::LazyLock<T>;

/// Locks `m`, also when a thread panicked while holding it: every state behind these mutexes
/// stays consistent between statements.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits on `cv`, also when a thread panicked while holding the lock (see [`lock`]).
pub(crate) fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `f` once per interleaving of the threads it spawns, as `loom::model` does, with at
/// most `LOOM_MAX_PREEMPTIONS` preemptions per run (3 unless set), which keeps every model
/// within seconds.
#[cfg(all(test, loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}
