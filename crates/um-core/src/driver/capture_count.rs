//! A device's count of the captures of `um` in progress, and of its idle sections: what keeps
//! a whole-device wait away from a capture (`docs/safety.md`, "Idle sections" and "Every free
//! is deferred, never dropped, while a capture may refuse it").
//!
//! A capture of `um` begins only once no idle section of the device is in progress (and
//! while it waits, no new one begins); an idle section begins only while no capture is in
//! progress nor waits; and work that needs a whole-device wait (`Context::with_idle_after_captures`:
//! a `Blas`'s destroy, a free that could not go behind a callback) given meanwhile is kept, and
//! run in an idle section by the thread that ends the last capture. The state and its
//! transitions are here, generic over what is kept (`G`, `T`), so that the loom models run them
//! without a GPU; `driver/context.rs` holds one per device (`Shared`), with the driver calls.

use crate::sync::{Condvar, Mutex, MutexGuard, lock, wait};

/// The count itself.
pub(crate) struct Quiet<G, T> {
    /// Captures of `um` in progress on the device, on any thread and through any handle.
    pub(crate) captures: usize,
    /// Idle sections in progress on the device (`Context::with_idle_unless_capturing`): while
    /// one is, no capture of `um` begins (a capture waits for them, outside the lock).
    pub(crate) idle: usize,
    /// Captures waiting for the idle sections to end: while one is, no new section begins.
    pub(crate) waiting: usize,
    /// Modules of dropped handles, unloaded once `captures` is 0.
    pub(crate) graves: Vec<G>,
    /// Work that waits for the whole device, given to `Context::with_idle_after_captures`
    /// while a capture of `um` was in progress (or waited to begin) on the device or on the
    /// giving thread: run, inside an idle section, by the thread that ends the last of them.
    /// Each with a handle of the device to wait through (which keeps the device's `Shared`
    /// alive until the work has run).
    pub(crate) tasks: Vec<T>,
}

impl<G, T> Default for Quiet<G, T> {
    fn default() -> Self {
        Quiet {
            captures: 0,
            idle: 0,
            waiting: 0,
            graves: Vec::new(),
            tasks: Vec::new(),
        }
    }
}

/// Whether work for an idle section of a device must be kept for the end of its captures
/// rather than run now: a capture of `um` in progress on the device (`quiet.captures`) or on
/// this thread (`here`, any device), or one waiting to begin on the device unless this thread
/// is already inside a section of it (`in_section`: the capture waits for that one anyway).
pub(crate) fn must_keep<G, T>(quiet: &Quiet<G, T>, here: bool, in_section: bool) -> bool {
    quiet.captures > 0 || here || (quiet.waiting > 0 && !in_section)
}

/// What [`CaptureCount::settle`] found.
pub(crate) enum Settle<T> {
    /// A capture is in progress on the device: its end settles it.
    Busy,
    /// None on the device, but the calling thread captures (another device): settled once its
    /// last capture has ended.
    AfterThisThread,
    /// None: the kept tasks, to run in an idle section.
    Run(Vec<T>),
}

/// The count behind its lock, and the signal that the idle sections have ended.
pub(crate) struct CaptureCount<G, T> {
    quiet: Mutex<Quiet<G, T>>,
    /// Signalled when `Quiet::idle` drops to 0: captures waiting to begin go on.
    idle_done: Condvar,
}

impl<G, T> CaptureCount<G, T> {
    pub(crate) fn new() -> Self {
        CaptureCount {
            quiet: Mutex::new(Quiet::default()),
            idle_done: Condvar::new(),
        }
    }

    /// The count, locked (through a poisoned lock: nothing under it panics halfway through a
    /// change).
    pub(crate) fn quiet(&self) -> MutexGuard<'_, Quiet<G, T>> {
        lock(&self.quiet)
    }

    /// Counts a capture that begins: first waits for the idle sections in progress (no new one
    /// begins meanwhile, but a nested one of a thread already in one). `false`, and nothing
    /// counted, where it would have to wait while the calling thread is inside an idle section
    /// (`in_any_section`, of any device): two threads doing so crosswise on two devices would
    /// wait for each other.
    pub(crate) fn begin_capture(&self, in_any_section: bool) -> bool {
        let mut quiet = self.quiet();
        if quiet.idle > 0 && in_any_section {
            return false;
        }
        // Not while an idle section of another thread runs (its closure may make a call that
        // waits for the whole device); this thread is in none of this device
        // (`may_begin_capture`). While it waits, no new section of the device begins (but a
        // nested one of a thread already in one), so it waits for the sections in progress only.
        if quiet.idle > 0 {
            quiet.waiting += 1;
            while quiet.idle > 0 {
                quiet = wait(&self.idle_done, quiet);
            }
            quiet.waiting -= 1;
        }
        quiet.captures += 1;
        true
    }

    /// Uncounts a capture that has ended (the caller then settles the device).
    pub(crate) fn end_capture(&self) {
        let mut quiet = self.quiet();
        quiet.captures = quiet.captures.saturating_sub(1);
    }

    /// Counts an idle section of `Context::with_idle_unless_capturing`, unless a capture is in
    /// progress on the device or on this thread (`here`), or one waits to begin and this thread
    /// is in no section of the device (`in_section`), or `full` (16 sections deep on this
    /// thread): whether it was counted (then [`CaptureCount::end_idle`] ends it).
    pub(crate) fn begin_idle_unless_capturing(
        &self,
        here: bool,
        in_section: bool,
        full: bool,
    ) -> bool {
        let mut quiet = self.quiet();
        if quiet.captures > 0 || here {
            return false;
        }
        // A capture waits for the sections in progress: no new one begins meanwhile, or
        // sections of several threads could keep it waiting for ever. A nested one of
        // this thread does: the capture waits for its outer anyway.
        if quiet.waiting > 0 && !in_section {
            return false;
        }
        if full {
            return false;
        }
        // From here no capture begins until the section ends.
        quiet.idle += 1;
        true
    }

    /// For `Context::with_idle_after_captures`: counts an idle section in which `task` runs now
    /// (`Ok(task)`), or keeps `task` for the end of the captures ([`must_keep`]), decided under
    /// the lock, so that no capture can end between the decision and the keep and strand it:
    /// `Err(alone)`, `alone` where no capture is in progress on the device nor waits (then only
    /// this thread's own captures, `here`, will end to settle it).
    pub(crate) fn begin_idle_or_keep(
        &self,
        task: T,
        here: bool,
        in_section: bool,
    ) -> Result<T, bool> {
        let mut quiet = self.quiet();
        if must_keep(&quiet, here, in_section) {
            quiet.tasks.push(task);
            return Err(quiet.captures == 0 && quiet.waiting == 0);
        }
        // From here no capture begins until the section ends.
        quiet.idle += 1;
        Ok(task)
    }

    /// Ends an idle section; the last one releases the captures waiting to begin.
    pub(crate) fn end_idle(&self) {
        let mut quiet = self.quiet();
        quiet.idle = quiet.idle.saturating_sub(1);
        if quiet.idle == 0 {
            self.idle_done.notify_all();
        }
    }

    /// Once no capture of `um` is in progress on the device, nor on the calling thread
    /// (`here`): runs `unload` under the lock (the graves, waited for with no capture able to
    /// begin), and takes the kept tasks.
    pub(crate) fn settle(&self, here: bool, unload: impl FnOnce(&mut Quiet<G, T>)) -> Settle<T> {
        let mut quiet = self.quiet();
        if quiet.captures > 0 {
            return Settle::Busy;
        }
        if here {
            return Settle::AfterThisThread;
        }
        unload(&mut quiet);
        Settle::Run(std::mem::take(&mut quiet.tasks))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Quiet, must_keep};

    /// Work for a device-wide wait (a `Blas`'s destroy) is kept while a capture of `um` is in
    /// progress on the device or on this thread, or waits to begin (unless this thread already
    /// holds a section of the device, which that capture waits for anyway); otherwise it runs.
    #[test]
    fn device_work_is_kept_while_a_capture_is_in_progress_or_waits() {
        let quiet = |captures, waiting| Quiet::<(), ()> {
            captures,
            waiting,
            ..Quiet::default()
        };
        assert!(!must_keep(&quiet(0, 0), false, false));
        assert!(
            must_keep(&quiet(1, 0), false, false),
            "another thread's capture"
        );
        assert!(
            must_keep(&quiet(0, 0), true, false),
            "this thread's capture"
        );
        assert!(
            must_keep(&quiet(0, 1), false, false),
            "a capture waits to begin"
        );
        assert!(
            !must_keep(&quiet(0, 1), false, true),
            "... for this thread's section"
        );
        assert!(must_keep(&quiet(2, 1), true, true));
    }
}

/// The loom models of a device's capture count (`docs/safety.md`, "What loom checks"): work
/// that waits for the whole device (a deferred free, a `Blas`'s destroy), given on one thread
/// while another captures, is kept and run once after the capture has ended, never during it,
/// never dropped; and an idle section and a capture never overlap.
#[cfg(all(test, loom))]
mod loom_model {
    use std::sync::Arc as StdArc;

    use super::{CaptureCount, Settle};
    use crate::sync::{Arc, AtomicUsize, Ordering::SeqCst, model, thread};

    type Task = Box<dyn FnOnce() + Send>;
    type Count = CaptureCount<(), Task>;

    /// `Context::idle_or_keep` without the driver: runs `task` now in an idle section (where
    /// the device wait comes first), or keeps it.
    fn idle_or_keep(count: &Count, task: Task) {
        if let Ok(task) = count.begin_idle_or_keep(task, false, false) {
            task();
            count.end_idle();
        }
    }

    /// `CaptureGuard`'s drop: uncounts the capture, then `Shared::settle` runs what was kept,
    /// through `idle_or_keep`.
    fn end_capture(count: &Count) {
        count.end_capture();
        if let Settle::Run(tasks) = count.settle(false, |_| ()) {
            if !tasks.is_empty() {
                idle_or_keep(
                    count,
                    Box::new(move || {
                        for task in tasks {
                            task();
                        }
                    }),
                );
            }
        }
    }

    /// A capture on its thread: counted (`Context::capture_guard`), counted in `open` while it
    /// is open, then ended.
    fn capture(count: &Count, open: &AtomicUsize) {
        assert!(count.begin_capture(false));
        open.fetch_add(1, SeqCst);
        open.fetch_sub(1, SeqCst);
        end_capture(count);
    }

    /// A free given on one thread (`defer_free_or_keep`, through
    /// `Context::with_idle_after_captures`) while two others capture: it runs once, and never
    /// while a capture is open (its device wait would invalidate the capture), whichever
    /// capture ends last.
    #[test]
    fn work_given_during_captures_runs_once_after_them_and_never_during_one() {
        model(|| {
            let count = Arc::new(Count::new());
            let open = Arc::new(AtomicUsize::new(0));
            let ran = StdArc::new(std::sync::atomic::AtomicUsize::new(0));
            let capturers: Vec<_> = (0..2)
                .map(|_| {
                    let (count, open) = (Arc::clone(&count), Arc::clone(&open));
                    thread::spawn(move || capture(&count, &open))
                })
                .collect();
            let task: Task = {
                let (open, ran) = (Arc::clone(&open), StdArc::clone(&ran));
                Box::new(move || {
                    assert_eq!(open.load(SeqCst), 0, "ran while a capture was open");
                    ran.fetch_add(1, SeqCst);
                })
            };
            idle_or_keep(&count, task);
            for capturer in capturers {
                capturer.join().unwrap();
            }
            assert_eq!(ran.load(SeqCst), 1, "run once, never dropped");
            assert!(count.quiet().tasks.is_empty(), "nothing left kept");
        });
    }

    /// An idle section (`Context::with_idle_unless_capturing`, whose closure may wait for the
    /// whole device) on one thread, a capture on another, and a free given on a third
    /// (`with_idle_after_captures`): the capture begins only once the section has ended (it
    /// waits for it), a section begins only while no capture is open nor waits, the free runs
    /// once and outside the capture; nothing waits for ever.
    #[test]
    fn an_idle_section_and_a_capture_never_overlap() {
        model(|| {
            let count = Arc::new(Count::new());
            let open = Arc::new(AtomicUsize::new(0));
            let sections = Arc::new(AtomicUsize::new(0));
            let ran = StdArc::new(std::sync::atomic::AtomicUsize::new(0));
            let capturer = {
                let (count, open) = (Arc::clone(&count), Arc::clone(&open));
                let sections = Arc::clone(&sections);
                thread::spawn(move || {
                    assert!(count.begin_capture(false));
                    assert_eq!(sections.load(SeqCst), 0, "a capture began inside a section");
                    open.fetch_add(1, SeqCst);
                    open.fetch_sub(1, SeqCst);
                    end_capture(&count);
                })
            };
            let dropper = {
                let (count, open) = (Arc::clone(&count), Arc::clone(&open));
                let ran = StdArc::clone(&ran);
                thread::spawn(move || {
                    let task: Task = Box::new(move || {
                        assert_eq!(open.load(SeqCst), 0, "ran while a capture was open");
                        ran.fetch_add(1, SeqCst);
                    });
                    idle_or_keep(&count, task);
                })
            };
            if count.begin_idle_unless_capturing(false, false, false) {
                sections.fetch_add(1, SeqCst);
                assert_eq!(open.load(SeqCst), 0, "a section began inside a capture");
                sections.fetch_sub(1, SeqCst);
                count.end_idle();
            }
            capturer.join().unwrap();
            dropper.join().unwrap();
            assert_eq!(ran.load(SeqCst), 1, "the free ran once");
            let quiet = count.quiet();
            assert_eq!((quiet.captures, quiet.idle, quiet.waiting), (0, 0, 0));
            assert!(quiet.tasks.is_empty());
        });
    }
}
