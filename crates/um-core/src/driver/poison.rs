//! Poisoned streams: the mark a library sets on a stream when work it enqueued there was
//! aborted rather than completed (an NCCL communicator aborted after a timeout or a dead peer).
//!
//! An aborted operation breaks the ownership invariant: the stream may go idle while other
//! work (a kernel of a peer GPU that was given a buffer's address, a proxy thread) can still
//! touch the memory the operation was given. `um` then must neither free that memory nor give
//! it to the CPU. Poisoning the stream says so: every buffer the stream owns is leaked at its
//! drop, `sync` and its siblings return [`Error::StreamPoisoned`](crate::Error::StreamPoisoned)
//! (and leak), and launches, attaches and handoffs on the stream are refused. Buffers the stream
//! gave up to the reaper before the mark (a cancelled `sync_async`) are leaked too.
//!
//! Poisoning is one-way and can only make `um` do less (leak, refuse), never more, so a handle
//! that sets it is safe to give to any code.

use std::sync::{Arc, Weak};

use crate::sync::{AtomicBool, Ordering};

/// The flag itself, shared by the stream (its [`StreamEvent`](crate::driver::event)), the
/// memory it gave up, and [`Poisoner`]s (weakly).
#[derive(Debug, Default)]
pub(crate) struct PoisonFlag {
    poisoned: AtomicBool,
}

impl PoisonFlag {
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        // Acquire: whoever sees the mark also sees what the poisoner did before setting it.
        self.poisoned.load(Ordering::Acquire)
    }

    fn set(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// Whether the mark is set or may be set later: a [`Poisoner`] of it exists (only a
    /// poisoner sets it, and one is made only from a live stream). Where this is `false`, no
    /// work enqueued on the stream so far can be aborted by a poisoner: a library takes its
    /// handle before it enqueues work it may abort (see [`Poisoner`]).
    #[inline]
    pub(crate) fn may_be_set(self: &Arc<Self>) -> bool {
        self.is_set() || Arc::weak_count(self) > 0
    }
}

/// A handle that poisons one stream (see [`Stream::poisoner`](crate::Stream::poisoner)): once
/// [`poison`](Poisoner::poison) is called, `um` leaks every buffer that stream owns, or gave up
/// to be freed later, instead of freeing it or giving it to the CPU, and refuses further work
/// on the stream ([`Error::StreamPoisoned`](crate::Error::StreamPoisoned)).
///
/// For libraries that enqueue work on `um`'s streams and may have to abandon it half-done
/// (`um-nccl` aborts a communicator this way). The handle is weak: it outlives the stream, and
/// poisoning a stream whose memory is all gone does nothing. Poisoning can only make `um` leak
/// or refuse, so calling it is always safe.
///
/// To make the mark effective, set it **before** the abort that may let the stream go idle
/// early: a buffer whose drop sees the stream idle and the mark unset is freed. And take the
/// handle **before** enqueuing the work it may abort: a buffer born on a stream from a pool
/// ([`Stream::alloc_zeroed`](crate::Stream::alloc_zeroed)) is freed in the stream's order at its
/// drop, with no wait, only while no handle of its stream exists; where one does, its free waits
/// for the stream to pass it, and for the mark to be unset then.
#[derive(Debug, Clone)]
pub struct Poisoner {
    flag: Weak<PoisonFlag>,
}

impl Poisoner {
    pub(crate) fn new(flag: &Arc<PoisonFlag>) -> Self {
        Poisoner {
            flag: Arc::downgrade(flag),
        }
    }

    /// Marks the stream poisoned (no-op once the stream and all its memory are gone).
    pub fn poison(&self) {
        if let Some(flag) = self.flag.upgrade() {
            flag.set();
        }
    }

    /// Whether the stream is poisoned (`false` once the stream and all its memory are gone).
    pub fn is_poisoned(&self) -> bool {
        self.flag.upgrade().is_some_and(|f| f.is_set())
    }

    /// Whether anything the mark protects still exists: the stream, or memory it owned that
    /// waits to be freed. A library may forget a handle once this is `false`.
    pub fn is_live(&self) -> bool {
        self.flag.strong_count() > 0
    }

    /// Whether this handle is of the stream whose flag is `flag`.
    pub(crate) fn is_of(&self, flag: &Arc<PoisonFlag>) -> bool {
        std::ptr::eq(self.flag.as_ptr(), Arc::as_ptr(flag))
    }

    /// Whether two handles poison the same stream.
    pub fn same_stream(&self, other: &Poisoner) -> bool {
        Weak::ptr_eq(&self.flag, &other.flag)
    }
}

/// The poison marks a buffer keeps of the streams it was handed off from (see
/// `Allocation::handed_from`): the first inline, the rest in a list, so that the usual handoff
/// (one stream to another, then back to the host) allocates nothing.
#[derive(Debug, Default, Clone)]
pub(crate) struct PoisonMarks {
    first: Option<Arc<PoisonFlag>>,
    more: Vec<Arc<PoisonFlag>>,
}

impl PoisonMarks {
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<PoisonFlag>> {
        self.first.iter().chain(&self.more)
    }

    /// Adds `flag` unless it is kept already.
    pub(crate) fn keep(&mut self, flag: &Arc<PoisonFlag>) {
        if self.iter().any(|f| Arc::ptr_eq(f, flag)) {
            return;
        }
        match self.first {
            None => self.first = Some(Arc::clone(flag)),
            Some(_) => self.more.push(Arc::clone(flag)),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.first = None;
        self.more.clear();
    }
}

impl IntoIterator for PoisonMarks {
    type Item = Arc<PoisonFlag>;
    type IntoIter = std::iter::Chain<
        std::option::IntoIter<Arc<PoisonFlag>>,
        std::vec::IntoIter<Arc<PoisonFlag>>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.more)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// What `Stream::is_poisoned_by` (and `um-nccl`'s "is this stream remembered?") rests on:
    /// a handle names its own flag only, also once the stream is gone (the handle's weak count
    /// keeps the allocation, so no new flag takes its address).
    #[test]
    fn a_handle_names_only_its_own_stream_also_after_the_stream_is_gone() {
        let f1: Arc<PoisonFlag> = Arc::default();
        let f2: Arc<PoisonFlag> = Arc::default();
        let p1 = Poisoner::new(&f1);
        assert!(p1.is_of(&f1));
        assert!(!p1.is_of(&f2));
        assert!(p1.same_stream(&Poisoner::new(&f1)));
        drop(f1);
        assert!(!p1.is_live());
        let fresh: Vec<Arc<PoisonFlag>> = (0..1000).map(|_| Arc::default()).collect();
        assert!(
            fresh.iter().all(|f| !p1.is_of(f)),
            "a dead handle names a new stream"
        );
        let p3 = Poisoner::new(&fresh[7]);
        assert!(p3.is_of(&fresh[7]));
        p3.poison();
        assert!(fresh[7].is_set());
    }

    /// A buffer's kept marks hold each stream's flag once, in the order kept, and let them go
    /// when cleared.
    #[test]
    fn kept_marks_hold_each_flag_once_and_let_go_when_cleared() {
        let (f1, f2, f3): (Arc<PoisonFlag>, Arc<PoisonFlag>, Arc<PoisonFlag>) =
            (Arc::default(), Arc::default(), Arc::default());
        let mut marks = PoisonMarks::default();
        assert_eq!(marks.iter().count(), 0);
        for f in [&f1, &f2, &f1, &f3, &f2] {
            marks.keep(f);
        }
        let kept: Vec<_> = marks.iter().map(Arc::as_ptr).collect();
        assert_eq!(kept, [Arc::as_ptr(&f1), Arc::as_ptr(&f2), Arc::as_ptr(&f3)]);
        assert_eq!(Arc::strong_count(&f1), 2);
        let copy = marks.clone();
        assert_eq!(Arc::strong_count(&f3), 3);
        let owned: Vec<_> = copy.into_iter().collect();
        assert_eq!(owned.len(), 3);
        drop(owned);
        marks.clear();
        assert_eq!(marks.iter().count(), 0);
        for f in [&f1, &f2, &f3] {
            assert_eq!(Arc::strong_count(f), 1, "a cleared mark is let go");
        }
    }

    /// The mark kept first sits inline: a buffer handed off once keeps its mark without a list
    /// (no allocation); the second goes to the list, and a flag kept again, inline or listed,
    /// is not added twice.
    #[test]
    fn the_first_kept_mark_needs_no_list_and_a_repeated_one_is_not_added() {
        let (f1, f2): (Arc<PoisonFlag>, Arc<PoisonFlag>) = (Arc::default(), Arc::default());
        let mut marks = PoisonMarks::default();
        marks.keep(&f1);
        marks.keep(&f1);
        assert!(marks.first.as_ref().is_some_and(|f| Arc::ptr_eq(f, &f1)));
        assert_eq!(marks.more.capacity(), 0, "one mark allocated a list");
        assert_eq!(Arc::strong_count(&f1), 2, "kept once");
        marks.keep(&f2);
        marks.keep(&f2);
        marks.keep(&f1);
        assert_eq!(marks.more.len(), 1);
        assert_eq!(
            Arc::strong_count(&f2),
            2,
            "a listed flag kept again is not added"
        );
        assert_eq!(marks.iter().count(), 2);
    }

    /// A mark set on any stream kept (inline or in the list) is seen through `iter`, whether it
    /// was set before or after it was kept, and whatever the order of the handoffs.
    #[test]
    fn a_mark_set_on_any_kept_stream_is_seen_inline_or_listed() {
        for poisoned in 0..4 {
            for before in [false, true] {
                let flags: Vec<Arc<PoisonFlag>> = (0..4).map(|_| Arc::default()).collect();
                let handles: Vec<Poisoner> = flags.iter().map(Poisoner::new).collect();
                let mut marks = PoisonMarks::default();
                if before {
                    handles[poisoned].poison();
                }
                // A chain through every stream, with a cycle back: 0 -> 1 -> 2 -> 0 -> 3.
                for i in [0, 1, 2, 0, 3] {
                    marks.keep(&flags[i]);
                }
                assert_eq!(marks.iter().count(), 4);
                if !before {
                    assert!(!marks.iter().any(|f| f.is_set()));
                    handles[poisoned].poison();
                }
                assert!(
                    marks.iter().any(|f| f.is_set()),
                    "the mark of stream {poisoned} (set {}) is lost",
                    if before { "before" } else { "after" }
                );
                let moved: Vec<_> = marks.into_iter().collect();
                assert!(moved.iter().any(|f| f.is_set()), "lost when moved out");
            }
        }
    }

    /// The marks keep a stream's flag alive for its handles (`Poisoner::is_live`) after the
    /// stream is gone, as long as the buffer keeps them: a copy, a move out (`mem::take`, as
    /// `into_orphan` does) or a clear lets each go exactly once, and a clear leaves marks that
    /// take new flags afresh (the first inline again).
    #[test]
    fn kept_marks_keep_a_gone_streams_handle_live_until_let_go_and_start_afresh_after_a_clear() {
        let (f1, f2, f3): (Arc<PoisonFlag>, Arc<PoisonFlag>, Arc<PoisonFlag>) =
            (Arc::default(), Arc::default(), Arc::default());
        let (p1, p2, p3) = (Poisoner::new(&f1), Poisoner::new(&f2), Poisoner::new(&f3));
        let mut marks = PoisonMarks::default();
        marks.keep(&f1);
        marks.keep(&f2);
        // The streams end: only the marks hold the flags.
        drop((f1, f2));
        assert!(p1.is_live() && p2.is_live());
        let copy = marks.clone();
        drop(marks);
        assert!(p1.is_live() && p2.is_live(), "the copy still holds them");
        let mut copy = copy;
        let taken = std::mem::take(&mut copy);
        assert_eq!(copy.iter().count(), 0, "take leaves no mark behind");
        assert!(copy.first.is_none() && copy.more.is_empty());
        p2.poison();
        let orphan: Vec<_> = taken.into_iter().collect();
        assert!(
            orphan.iter().any(|f| f.is_set()),
            "the moved marks see the poison"
        );
        drop(orphan);
        assert!(!p1.is_live() && !p2.is_live(), "a mark outlives everything");
        // Reuse after a clear: the first slot takes the next flag, the list stays empty.
        copy.keep(&f3);
        assert!(copy.first.as_ref().is_some_and(|f| Arc::ptr_eq(f, &f3)));
        copy.clear();
        assert!(copy.first.is_none() && copy.more.is_empty());
        drop(f3);
        assert!(!p3.is_live(), "a cleared mark is let go");
        let (g1, g2): (Arc<PoisonFlag>, Arc<PoisonFlag>) = (Arc::default(), Arc::default());
        copy.keep(&g1);
        copy.keep(&g2);
        copy.clear();
        copy.keep(&g2);
        let kept: Vec<_> = copy.iter().map(Arc::as_ptr).collect();
        assert_eq!(
            kept,
            [Arc::as_ptr(&g2)],
            "a cleared list left a flag behind"
        );
        assert!(copy.more.is_empty());
        assert_eq!(Arc::strong_count(&g1), 1);
    }

    /// A mark with no handle can never be set; one with a handle may be; one set stays so.
    #[test]
    fn a_mark_may_be_set_only_while_a_handle_exists_or_once_it_is() {
        let f: Arc<PoisonFlag> = Arc::default();
        assert!(!f.may_be_set());
        let p = Poisoner::new(&f);
        assert!(f.may_be_set(), "a handle may poison it later");
        drop(p);
        assert!(!f.may_be_set(), "the handle is gone");
        let p = Poisoner::new(&f);
        p.poison();
        drop(p);
        assert!(f.may_be_set(), "set for good");
    }
}
