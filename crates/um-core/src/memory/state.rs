//! The state machine of managed memory, in one place.
//!
//! ```text
//!          Managed::new / from_slice / zeroed ...      (the storage allocates, host-owned)
//!                                   │
//!                                   ▼
//!                   ┌──────────────────────────────┐
//!                   │   Managed<T, HostOwned, M>   │  Deref / DerefMut: the CPU reads and writes
//!                   └──────────────────────────────┘
//!        attach(self, &Stream<'s, K>)  │      ▲  sync(self)  /  Stream::sync_all((a, b, ..))
//!   same context; the storage's attach │      │  the storage's release, then
//!   enqueued on the stream             ▼      │  cuStreamSynchronize(owner)
//!                   ┌──────────────────────────────┐
//!                   │Managed<T,StreamOwned<'s,K>,M>│  kernel argument on the stream branded 's;
//!                   └──────────────────────────────┘  no CPU access of any kind
//!                        │                  │   ▲
//!                        │  hand_off(self,  │   │  the storage's and the devices' checks;
//!                        │  &Stream<'t,K2>) │   │  cuEventRecord(A's event, A);
//!                        │  K2: Attachable  └───┘  cuStreamWaitEvent(B, event);
//!                        │                         the storage's part on B; no host wait
//!                        │                         (now StreamOwned<'t, K2>)
//!                        ▼
//!                  drop: wait for the owning stream, then the storage's free
//! ```
//!
//! This file sequences the transitions: the context and device checks, the event that orders
//! two streams, the wait, and the retype that makes the new state true. What each storage
//! enqueues at each point (a stream association, a copy, the stream's [`Transfer`] policy) is
//! the storage's own part, in its file of [`crate::storage`], called through the `HasParts`
//! contract: nothing here depends on which storage moves. With the default storage, `attach`
//! enqueues `cuStreamAttachMemAsync(stream, ptr, 0, CU_MEM_ATTACH_SINGLE)` (skipped if the
//! memory is still associated with that stream), and `sync` re-attaches to the host where the
//! device lacks concurrent managed access.
//!
//! `hand_off` moves memory still in use on stream A to stream B: B's kernels run after A's,
//! ordered on the GPU by A's event (made once per stream, see `driver/event.rs`), and the CPU
//! never waits. The memory then carries B's brand, so no launch on A can name it. Across
//! devices it needs concurrent managed access on every device involved
//! ([`Error::HandOffAcrossDevices`]), and a storage may refuse other contexts altogether.
//!
//! Memory for kernels on the legacy default stream, which refuses `CU_MEM_ATTACH_SINGLE`, takes
//! the same path with `attach_global` (`CU_MEM_ATTACH_GLOBAL`). Each stream's [`Transfer`]
//! policy acts at the transitions (prefetch, advice).
//!
//! A graph's capture (`Stream::capture`, in `crate::graph`) moves a set of buffers
//! ([`CaptureSet`]) from their stream to a capture stream of a fresh brand and back: the retypes
//! are here, with `hand_off` between capture streams (a fork of the graph, no storage call); the
//! graph's wait that gives them back is [`CaptureSet`]'s, as `sync_all`'s is [`SyncGroup`]'s.
//!
//! Both states are zero-sized markers that cannot be constructed, and [`State`] is sealed: the
//! only way into a state is the transition that makes it true.
//!
//! [`Transfer`]: crate::Transfer

use std::fmt;

use crate::driver;
use crate::driver::context::Context;
use crate::driver::event::{Event, StreamEvent};
use crate::driver::stream::{Attachable, Capture, Eager, Legacy, RawStream, Stream, StreamKind};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::Managed;
pub use crate::memory::marker::{HostAccess, HostOwned, State, StreamOwned};
use crate::memory::release::{Passed, Released};
use crate::memory::storage::parts::{HostVisible, Storage};
use crate::reclaim::reaper::Orphan;
use crate::sealed::{PRIVATE, Private, Sealed};

fn check_same_context<T: ?Sized, S: State, M: Storage, K: StreamKind>(
    memory: &Managed<T, S, M>,
    stream: &Stream<'_, K>,
) -> Result<()> {
    if memory.context().same_as(stream.context()) {
        Ok(())
    } else {
        Err(Error::ContextMismatch)
    }
}

impl<T: ?Sized, M: Storage> Managed<T, HostOwned, M> {
    /// Hands the memory to `stream`: enqueues on `stream` what the storage needs before the
    /// stream's kernels may use the memory, so that only kernels on that stream may use it and
    /// the CPU may use it again once that stream's work is done.
    ///
    /// With the default storage that is `cuStreamAttachMemAsync(stream, ptr, 0,
    /// CU_MEM_ATTACH_SINGLE)` for the whole allocation (length 0; a partial attach is not
    /// expressible), then the stream's [`Transfer`] policy. Attaching to the stream the memory
    /// is still associated with (after a `sync` from it) makes no attach call. What the other
    /// storages enqueue instead is in [`crate::storage`].
    ///
    /// If the driver refuses, the memory is dropped as the stream's (its drop waits for the stream, then
    /// frees it, or leaks it if the wait fails) and the error returned.
    ///
    /// [`Transfer`]: crate::Transfer
    pub fn attach<'s, K: Attachable>(
        self,
        stream: &Stream<'s, K>,
    ) -> Result<Managed<T, StreamOwned<'s, K>, M>> {
        // SAFETY: `K: Attachable`, so `stream` is not the NULL stream.
        unsafe { self.hand_to(stream, sys::MEM_ATTACH_SINGLE) }
    }

    /// The transition both `attach` and `attach_global` make: the storage's attach to `stream`
    /// (with `flag`, where the storage associates memory with streams), then the retype.
    ///
    /// # Safety
    /// `flag` is `CU_MEM_ATTACH_SINGLE` only if `stream` is not the NULL stream.
    unsafe fn hand_to<'s, K: StreamKind>(
        mut self,
        stream: &Stream<'s, K>,
        flag: std::ffi::c_uint,
    ) -> Result<Managed<T, StreamOwned<'s, K>, M>> {
        check_same_context(&self, stream)?;
        stream.check_not_poisoned()?;
        let target = stream.raw();
        let host = self.host_ptr();
        // SAFETY: the allocation is live and ours, host-owned until the retype below; `stream`
        // is alive for the whole of 's and of the allocation's context (checked above); the flag
        // suits the stream (the caller's guarantee).
        let attached = unsafe { M::attach(host, self.allocation_mut(), target, flag, PRIVATE) };
        // Either way the memory is now the stream's: a storage may have enqueued work on it
        // (the association, a copy) before a later call failed, so a failed attach drops it as
        // stream-owned, which waits for the stream before the free (and leaks if that fails).
        let owned: Managed<T, StreamOwned<'s, K>, M> = self.retype(target);
        match attached {
            Ok(()) => Ok(owned),
            Err(e) => {
                drop(owned);
                Err(e)
            }
        }
    }
}

impl<T: ?Sized, M: Storage> Managed<T, HostOwned, M> {
    /// Hands the memory to the legacy default stream: as `attach`, with the association the NULL
    /// stream accepts, `CU_MEM_ATTACH_GLOBAL`, enqueued on the NULL stream.
    ///
    /// The NULL stream refuses `CU_MEM_ATTACH_SINGLE` (it is not a specific stream), so the
    /// driver-level association is global. The types still restrict the memory to launches on
    /// the legacy stream (it carries that scope's brand), and the CPU regains it with `sync`,
    /// which waits for the legacy stream. Use it where kernels run on the legacy stream (the
    /// single-threaded programs of NVIDIA's CUDA 7 streams post, built without options); everywhere else, `attach` to a stream of
    /// your own.
    pub fn attach_global<'s>(
        self,
        stream: &Stream<'s, Legacy>,
    ) -> Result<Managed<T, StreamOwned<'s, Legacy>, M>> {
        // SAFETY: GLOBAL is a legal flag on the NULL stream.
        unsafe { self.hand_to(stream, sys::MEM_ATTACH_GLOBAL) }
    }
}

impl<'s, T: ?Sized, K: Eager, M: Storage> Managed<T, StreamOwned<'s, K>, M> {
    /// Waits for the owning stream, then gives the memory back to the CPU.
    ///
    /// Before the wait it enqueues the storage's release to the host: with the default storage,
    /// on a device without concurrent managed access, a re-attach to the host
    /// (`CU_MEM_ATTACH_HOST`), so that CPU access stays legal while the stream runs more work
    /// later; from a per-thread default stream, that re-attach on every device, so that the
    /// memory may outlive the thread (whose exit never ends while managed memory is still
    /// attached to its default stream); under [`Transfer::Prefetch`], a prefetch to the host
    /// first. What the other storages
    /// enqueue is in [`crate::storage`].
    ///
    /// If the wait fails, the memory is dropped (and leaked if the stream may still use it) and
    /// the error returned.
    ///
    /// [`Transfer::Prefetch`]: crate::Transfer::Prefetch
    #[must_use = "`sync` returns the memory: drop the Result and the buffer is freed"]
    pub fn sync(self) -> Result<Managed<T, HostOwned, M>> {
        self.owner_context().bind()?;
        let after = release_to_host(&self)?;
        driver::stream_synchronize(self.stream().handle)?;
        // Poisoned during the wait: the stream may be idle only because its work was aborted.
        check_not_poisoned(&self)?;
        Ok(self.retype(after))
    }
}

impl<'a, T: ?Sized, K: Eager, M: Storage> Managed<T, StreamOwned<'a, K>, M> {
    /// Hands the memory from the stream that owns it (A) to `to` (B) without waiting on the
    /// host: the second form of `attach`, for memory that is still in use on A.
    ///
    /// It enqueues, in order: a record of A's event on A (`cuEventRecord`, capturing every
    /// kernel queued on A so far); a wait for that event on B (`cuStreamWaitEvent`); then the
    /// storage's part on B. With the default storage, that is the association of the whole
    /// allocation with B (`cuStreamAttachMemAsync(B, ptr, 0, CU_MEM_ATTACH_SINGLE)`) and B's
    /// [`Transfer`](crate::Transfer) policy (`Prefetch` prefetches to B's device, on B); what
    /// the other storages do is in [`crate::storage`]. Kernels launched on B afterwards run
    /// after A's kernels that used the memory; the CPU never waits, and A may keep running other
    /// work.
    ///
    /// * Afterwards the memory carries B's brand: a launch on A cannot name it (a type error),
    ///   and `sync` or drop wait for B, which waits for A through the event.
    /// * `K` may be any kind, the legacy stream included (memory of `attach_global`); `to` must
    ///   be [`Attachable`]: the legacy stream refuses a single association.
    /// * Between the streams of one stream set (one brand) the new owner is recorded
    ///   and checked at launch; handing memory to the stream that already owns it makes no
    ///   driver call.
    /// * Across devices (B of another context than A or than the allocation) every device
    ///   involved must have concurrent managed access; otherwise
    ///   [`Error::HandOffAcrossDevices`], before any driver call. A storage may refuse another
    ///   context altogether ([`Error::ContextMismatch`]). `HostResident` advice is kept for the
    ///   allocation's own device only: on another device it acts as `OnDemand`.
    ///
    /// If a driver call fails, the memory is dropped (its drop waits for whichever stream may
    /// use it) and the error returned.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// # use um_core::{Context, Managed, StreamOptions};
    /// # let ctx = Context::new(0)?;
    /// let data = Managed::from_slice(&ctx, &[1.0f32; 1024])?;
    /// let data = ctx.with_stream(StreamOptions::new(), |a| {
    ///     ctx.with_stream(StreamOptions::new(), |b| {
    ///         let data = data.attach(a)?;
    ///         // ... kernels on `a` ...
    ///         let data = data.hand_off(b)?; // no host wait
    ///         // ... kernels on `b`, which start once `a`'s are done ...
    ///         data.sync() // waits for `b` (and so for `a`'s kernels before the handoff)
    ///     })
    /// })?;
    /// # Ok(()) }
    /// ```
    #[must_use = "`hand_off` returns the memory: drop the Result and the buffer is freed"]
    pub fn hand_off<'b, K2: Attachable>(
        self,
        to: &Stream<'b, K2>,
    ) -> Result<Managed<T, StreamOwned<'b, K2>, M>> {
        check_not_poisoned(&self)?;
        to.check_not_poisoned()?;
        let from = self.stream();
        let target = to.raw();
        if from.id == target.id {
            // The same stream (of a stream set, or the per-thread stream taken twice): already
            // associated, already ordered. Another handle of the per-thread stream has a poison
            // mark of its own, so the mark of the handle the memory leaves is kept, as for a
            // handoff to another stream (a library may abort work it enqueued through it).
            let mut this = self;
            this.keep_owner_poison();
            return Ok(this.retype(target));
        }
        // SAFETY: the memory is in state `StreamOwned<'a, K>`, so its owning stream (brand 'a)
        // is alive for this call.
        let owner = unsafe { from.events() };
        let from_ctx = owner.map_or(self.context(), StreamEvent::context);
        M::check_hand_off(self.context(), from_ctx, to.context())?;
        check_devices(self.context(), from_ctx, to.context())?;
        let temporary;
        let event: &Event = match owner {
            Some(owner) => owner.get()?,
            // Unreachable (stream-owned memory always names its `Stream`), but correct anyway:
            // an event made for this handoff only, destroyed once the wait is enqueued.
            None => {
                temporary = Event::new(from_ctx)?;
                &temporary
            }
        };
        // SAFETY: `from.handle` is the owning stream of `from_ctx` (alive for 'a), `target` a
        // live stream of `to`'s context (alive for 'b, as `to` is borrowed).
        unsafe { event.order(from.handle, to.context(), target.handle) }?;
        // SAFETY: the allocation is live and ours, stream-owned by A; `target` is alive for 'b,
        // is not the NULL stream (`K2: Attachable`), its context is current (`order` left it
        // so), and it waits for A's work queued so far (the event above).
        unsafe { M::hand_over(self.host_ptr(), self.allocation(), target, PRIVATE) }?;
        // From here B owns it: should the rest fail, the drop waits for B (and so for A). A's
        // mark goes with it: an abort of A's work after B's wait must still leak it.
        let mut this = self;
        this.keep_owner_poison();
        let mut handed: Managed<T, StreamOwned<'b, K2>, M> = this.retype(target);
        let host = handed.host_ptr();
        // SAFETY: the allocation is live and ours, stream-owned by B, alive for 'b, whose
        // context is current.
        unsafe { M::receive(host, handed.allocation_mut(), to.context(), PRIVATE) }?;
        Ok(handed)
    }
}

impl<'c, T: ?Sized, M: Storage> Managed<T, StreamOwned<'c, Capture>, M> {
    /// Inside a capture with several streams ([`Stream::capture_streams`]), moves the memory
    /// from the capture stream that owns it (A) to `to` (B): a fork of the graph. It records A's
    /// event on A and makes B wait for it, both captured: the graph gets an edge from A's nodes
    /// so far to B's next ones, and runs nothing now. Nothing else is recorded: the buffer keeps
    /// whatever the storage set up on the eager stream that owned it before the capture, and the
    /// graph replays on that stream.
    ///
    /// Afterwards launches on B take the buffer (checked by id: the streams of one capture share
    /// a brand) and launches on A do not. Handing it to the stream that owns it makes no driver
    /// call. Before the capture ends, the scope joins every stream back to the first one, so the
    /// graph ends only once all of them are done.
    ///
    /// If a driver call fails (the capture is then invalidated), the memory is dropped (the scope
    /// frees it once the capture has ended) and the error returned.
    #[must_use = "`hand_off` returns the memory: drop the Result and the buffer is lost to the graph"]
    pub fn hand_off(
        self,
        to: &Stream<'c, Capture>,
    ) -> Result<Managed<T, StreamOwned<'c, Capture>, M>> {
        let from = self.stream();
        let target = to.raw();
        if from.id == target.id {
            return Ok(self.retype(target));
        }
        // SAFETY: the memory is owned by a capture stream of brand 'c, alive for this call.
        let Some(owner) = (unsafe { from.events() }) else {
            return Err(Error::StreamMismatch { argument: 0 });
        };
        // Made when the scope made the stream: no creation during the capture.
        let event = owner.get()?;
        // SAFETY: `from.handle` and `target.handle` are capture streams of this scope (brand 'c),
        // both alive, both of the event's context; the record and the wait are captured as an
        // edge of the graph.
        unsafe { event.order(from.handle, to.context(), target.handle) }?;
        Ok(self.retype(target))
    }
}

/// A handoff between contexts needs concurrent managed access on every device involved: the
/// allocation's, the current owner's and the receiver's.
fn check_devices(memory: &Context, from: &Context, to: &Context) -> Result<()> {
    if memory.same_as(to) && from.same_as(to) {
        return Ok(());
    }
    match [memory, from, to]
        .into_iter()
        .find(|c| !c.info().concurrent_managed_access)
    {
        None => Ok(()),
        Some(lacking) => Err(Error::HandOffAcrossDevices {
            from: from.info().ordinal,
            to: to.info().ordinal,
            lacking: lacking.info().ordinal,
        }),
    }
}

/// Enqueues whatever must precede the wait that ends stream ownership (the storage's release;
/// the owner's context is current), and says which stream the memory stays associated with
/// afterwards. Every caller waits for the owning stream before the memory becomes host-owned:
/// `sync`, `sync_all` and the sync futures (`crate::wait`).
pub(crate) fn release_to_host<T: ?Sized, K: StreamKind, M: Storage>(
    memory: &Managed<T, StreamOwned<'_, K>, M>,
) -> Result<RawStream> {
    // Memory of a poisoned stream never goes back to the CPU: the caller drops it, and the drop
    // leaks it.
    check_not_poisoned(memory)?;
    // SAFETY: the allocation is live and ours, stream-owned by its stream, alive for the
    // memory's brand, whose context the callers made current; every caller waits for that
    // stream before the memory becomes host-owned.
    unsafe { M::release(memory.host_ptr(), memory.allocation(), PRIVATE) }
}

/// `Err(StreamPoisoned)` if the stream owning `memory` is poisoned (`driver/poison.rs`): work
/// on it was aborted and may still touch the memory, which must then be leaked (its drop does)
/// and never handed to the CPU or to another stream.
pub(crate) fn check_not_poisoned<T: ?Sized, S: State, M: Storage>(
    memory: &Managed<T, S, M>,
) -> Result<()> {
    if memory.owner_poisoned() {
        Err(Error::StreamPoisoned)
    } else {
        Ok(())
    }
}

/// Several buffers owned by one stream, given back to the CPU with a single wait: tuples of up
/// to six `Managed<_, StreamOwned<'s, K>, _>` (of any storages, mixed freely), and `Vec`s of
/// one. Sealed.
///
/// Its methods are `um`'s own: each takes a token that no other crate can name or make
/// (`Private`), so they cannot be called from outside, hidden or not. Use
/// [`Stream::sync_all`] and [`Stream::sync_all_async`].
pub trait SyncGroup<'s, K: StreamKind>: Sealed {
    /// The same buffers in the host state.
    type Host;
    #[doc(hidden)]
    fn sync_group(self, stream: &Stream<'s, K>, _: Private) -> Result<Self::Host>;
    /// Checks the owners and enqueues each buffer's release to the host (what `sync_group`
    /// does before its wait).
    #[doc(hidden)]
    fn release_group(&self, stream: &Stream<'s, K>, _: Private) -> Result<Vec<Released>>;
    /// The buffers in the host state, once the stream has passed the releases (which only a
    /// sync future can prove).
    #[doc(hidden)]
    fn host_group(self, passed: Passed, _: Private) -> Self::Host;
    /// The buffers given up, for a free once the stream is done.
    #[doc(hidden)]
    fn orphan_group(self, _: Private) -> Vec<Orphan>;
    /// Whether any buffer's owner, or a stream one was handed off from, is poisoned (what a
    /// sync future asks once the stream has passed the releases).
    #[doc(hidden)]
    fn poisoned_group(&self, _: Private) -> bool;
}

/// The association after the next release, in order (`NONE`, which only costs a re-attach
/// later, should the list be short, which it never is).
fn next_after(after: &mut std::vec::IntoIter<Released>) -> RawStream {
    after.next().map_or(RawStream::NONE, |r| r.0)
}

impl<'s, K: Eager> Stream<'s, K> {
    /// Waits once for this stream and gives all of `group` back to the CPU: one
    /// `cuStreamSynchronize` for any number of buffers, where a `sync` per buffer would repeat
    /// the wait.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// # use um_core::{Context, Managed, StreamOptions};
    /// # let ctx = Context::new(0)?;
    /// # let a = Managed::from_slice(&ctx, &[1.0f32; 4])?;
    /// # let b = Managed::from_slice(&ctx, &[2.0f32; 4])?;
    /// let (a, b) = ctx.with_stream(StreamOptions::new(), |stream| {
    ///     let (a, b) = (a.attach(stream)?, b.attach(stream)?);
    ///     stream.sync_all((a, b))
    /// })?;
    /// assert_eq!(a[0] + b[0], 3.0);
    /// # Ok(()) }
    /// ```
    #[must_use = "`sync_all` returns the memory: drop the Result and the buffers are freed"]
    pub fn sync_all<G: SyncGroup<'s, K>>(&self, group: G) -> Result<G::Host> {
        group.sync_group(self, PRIVATE)
    }
}

/// Every buffer of a group carries the stream's brand 's, so all of them belong to `stream`,
/// except where `stream` is one of a stream set, whose streams share a brand: that is
/// checked here, at run time.
fn check_owner<K: StreamKind>(owners: &[u64], stream: &Stream<'_, K>) -> Result<()> {
    match owners.iter().position(|id| *id != stream.raw().id) {
        Some(argument) => Err(Error::StreamMismatch { argument }),
        None => Ok(()),
    }
}

macro_rules! sync_group_for_tuples {
    ($( ($($t:ident $m:ident $v:ident $after:ident),+) )+) => {$(
        impl<'s, K: StreamKind, $($t: ?Sized, $m: Storage),+> Sealed
            for ($(Managed<$t, StreamOwned<'s, K>, $m>,)+) {}
        impl<'s, K: StreamKind, $($t: ?Sized, $m: Storage),+> SyncGroup<'s, K>
            for ($(Managed<$t, StreamOwned<'s, K>, $m>,)+)
        {
            type Host = ($(Managed<$t, HostOwned, $m>,)+);
            fn sync_group(self, stream: &Stream<'s, K>, _: Private) -> Result<Self::Host> {
                let ($($v,)+) = self;
                let owners = [$($v.stream().id),+];
                check_owner(&owners, stream)?;
                stream.context().bind()?;
                $( let $after = release_to_host(&$v)?; )+
                driver::stream_synchronize(stream.raw().handle)?;
                // Poisoned during the wait, the stream or one a buffer was handed off from: the
                // buffers are dropped (leaked), never handed to the CPU; `retype` forgets the
                // marks only after this.
                $( check_not_poisoned(&$v)?; )+
                Ok(($($v.retype($after),)+))
            }
            fn release_group(&self, stream: &Stream<'s, K>, _: Private) -> Result<Vec<Released>> {
                let ($($v,)+) = self;
                check_owner(&[$($v.stream().id),+], stream)?;
                stream.context().bind()?;
                Ok(vec![$( Released(release_to_host($v)?) ),+])
            }
            fn host_group(self, passed: Passed, _: Private) -> Self::Host {
                let ($($v,)+) = self;
                let mut after = passed.into_after();
                ($($v.retype(next_after(&mut after)),)+)
            }
            fn orphan_group(self, _: Private) -> Vec<Orphan> {
                let ($($v,)+) = self;
                vec![$($v.into_orphan()),+]
            }
            fn poisoned_group(&self, _: Private) -> bool {
                let ($($v,)+) = self;
                false $(|| $v.owner_poisoned())+
            }
        }
    )+};
}

sync_group_for_tuples! {
    (A MA a a2)
    (A MA a a2, B MB b b2)
    (A MA a a2, B MB b b2, C MC c c2)
    (A MA a a2, B MB b b2, C MC c c2, D MD d d2)
    (A MA a a2, B MB b b2, C MC c c2, D MD d d2, E ME e e2)
    (A MA a a2, B MB b b2, C MC c c2, D MD d d2, E ME e e2, F MF f f2)
}

impl<'s, K: StreamKind, T: ?Sized, M: Storage> Sealed for Vec<Managed<T, StreamOwned<'s, K>, M>> {}
impl<'s, K: StreamKind, T: ?Sized, M: Storage> SyncGroup<'s, K>
    for Vec<Managed<T, StreamOwned<'s, K>, M>>
{
    type Host = Vec<Managed<T, HostOwned, M>>;
    fn sync_group(self, stream: &Stream<'s, K>, _: Private) -> Result<Self::Host> {
        let owners: Vec<u64> = self.iter().map(|m| m.stream().id).collect();
        check_owner(&owners, stream)?;
        stream.context().bind()?;
        let after = self
            .iter()
            .map(release_to_host)
            .collect::<Result<Vec<_>>>()?;
        driver::stream_synchronize(stream.raw().handle)?;
        // As for tuples: poisoned during the wait (the stream, or one a buffer was handed off
        // from), the buffers are leaked by their drop.
        self.iter().try_for_each(check_not_poisoned)?;
        Ok(self
            .into_iter()
            .zip(after)
            .map(|(m, s)| m.retype(s))
            .collect())
    }
    fn release_group(&self, stream: &Stream<'s, K>, _: Private) -> Result<Vec<Released>> {
        let owners: Vec<u64> = self.iter().map(|m| m.stream().id).collect();
        check_owner(&owners, stream)?;
        stream.context().bind()?;
        self.iter()
            .map(|m| release_to_host(m).map(Released))
            .collect()
    }
    fn host_group(self, passed: Passed, _: Private) -> Self::Host {
        let mut after = passed.into_after();
        self.into_iter()
            .map(|m| m.retype(next_after(&mut after)))
            .collect()
    }
    fn orphan_group(self, _: Private) -> Vec<Orphan> {
        self.into_iter().map(Managed::into_orphan).collect()
    }
    fn poisoned_group(&self, _: Private) -> bool {
        self.iter().any(Managed::owner_poisoned)
    }
}

impl<T: ?Sized + fmt::Debug, M: HostVisible> fmt::Debug for Managed<T, HostOwned, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Managed")
            .field("state", &"HostOwned")
            .field("storage", &M::NAME)
            .field("value", &&**self)
            .finish()
    }
}

/// Shows the size and the owning stream, never the contents: reading them on the CPU while the
/// stream may run is exactly what this state forbids.
impl<T: ?Sized, K: StreamKind, M: Storage> fmt::Debug for Managed<T, StreamOwned<'_, K>, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Managed")
            .field("state", &"StreamOwned")
            .field("storage", &M::NAME)
            .field("stream_kind", &K::NAME)
            .field("stream_id", &self.stream().id)
            .field("bytes", &self.size_in_bytes())
            .finish_non_exhaustive()
    }
}

/// The buffers a capture records into a graph ([`Stream::capture`]): tuples of up to six
/// `Managed<_, StreamOwned<'s, K>, _>` (of any storages, mixed freely) and `Vec`s of one, all
/// owned by the stream the graph will replay on, of element types without borrows (`'static`,
/// as every `DeviceCopy` type of a kernel argument is). Sealed.
///
/// A capture moves them into a second state, owned by the capture's own stream (brand `'c`,
/// kind [`Capture`]): only launches recorded by that capture take them, the host cannot wait
/// for them, and they cannot leave the closure but by coming back in its result. The graph then
/// holds them, owned by `'s` again: no CPU access, no other stream, no free while it exists.
///
/// Its methods are `um`'s own: each takes a token no other crate can name or make (`Private`).
pub trait CaptureSet<'s, K: StreamKind>: Sealed + Sized {
    /// The same buffers, owned by a capture stream of brand `'c`.
    type Captured<'c>;
    /// The same buffers on the host.
    type Host;

    /// The ids of the streams that own the buffers, in order.
    #[doc(hidden)]
    fn owners(&self, _: Private) -> Vec<u64>;
    /// Each buffer's storage allows recording (`Storage`'s `check_capture`).
    #[doc(hidden)]
    fn check_capture(&self, _: Private) -> Result<()>;
    /// The buffers owned by the capture stream `to`.
    #[doc(hidden)]
    fn enter<'c>(self, to: RawStream, _: Private) -> Self::Captured<'c>;
    /// The buffers owned by `back` again, once the capture has ended; [`Error::CaptureLostBuffer`]
    /// if fewer than `count` came back.
    #[doc(hidden)]
    fn leave(
        captured: Self::Captured<'_>,
        back: RawStream,
        count: usize,
        _: Private,
    ) -> Result<Self>;
    /// How many buffers.
    #[doc(hidden)]
    fn count(&self, _: Private) -> usize;
    /// Which buffers a launch may have written (by the storages' marks).
    #[doc(hidden)]
    fn written(&self, _: Private) -> Vec<bool>;
    /// Marks the buffers of `mask` written, as a launch taking them as `&mut` does.
    #[doc(hidden)]
    fn mark_written(&self, mask: &[bool], _: Private);
    /// Each buffer's release, one wait for `owner`, and the retype to the host.
    #[doc(hidden)]
    fn to_host(self, owner: RawStream, _: Private) -> Result<Self::Host>;
    /// Each host buffer attached to `stream` again.
    #[doc(hidden)]
    fn reattach(host: Self::Host, stream: &Stream<'s, K>, _: Private) -> Result<Self>
    where
        K: Attachable;
}

macro_rules! capture_set_for_tuples {
    ($( ($($t:ident $m:ident $v:ident),+) )+) => {$(
        impl<'s, K: StreamKind, $($t: ?Sized + 'static, $m: Storage),+> CaptureSet<'s, K>
            for ($(Managed<$t, StreamOwned<'s, K>, $m>,)+)
        {
            type Captured<'c> = ($(Managed<$t, StreamOwned<'c, Capture>, $m>,)+);
            type Host = ($(Managed<$t, HostOwned, $m>,)+);

            fn owners(&self, _: Private) -> Vec<u64> {
                let ($($v,)+) = self;
                vec![$($v.stream().id),+]
            }
            fn check_capture(&self, _: Private) -> Result<()> {
                let ($($v,)+) = self;
                $( $m::check_capture($v.context())?; )+
                Ok(())
            }
            fn enter<'c>(self, to: RawStream, _: Private) -> Self::Captured<'c> {
                let ($($v,)+) = self;
                ($($v.retype(to),)+)
            }
            fn leave(
                captured: Self::Captured<'_>,
                back: RawStream,
                _: usize,
                _: Private,
            ) -> Result<Self> {
                let ($($v,)+) = captured;
                Ok(($($v.retype(back),)+))
            }
            fn count(&self, _: Private) -> usize {
                self.owners(PRIVATE).len()
            }
            fn written(&self, _: Private) -> Vec<bool> {
                let ($($v,)+) = self;
                vec![$($m::written_on_device(&$v.allocation().parts)),+]
            }
            fn mark_written(&self, mask: &[bool], _: Private) {
                let ($($v,)+) = self;
                let mut mask = mask.iter();
                $( if mask.next() == Some(&true) { $v.mark_device_written(); } )+
            }
            fn to_host(self, owner: RawStream, _: Private) -> Result<Self::Host> {
                let ($($v,)+) = self;
                let releases = [$({
                    $v.owner_context().bind()?;
                    release_to_host(&$v)?
                }),+];
                driver::stream_synchronize(owner.handle)?;
                // Poisoned during the wait: the stream may be idle only because its work was
                // aborted; the buffers are then dropped (leaked), never handed to the CPU.
                $( check_not_poisoned(&$v)?; )+
                let mut after = releases.into_iter();
                Ok(($($v.retype(after.next().unwrap_or(RawStream::NONE)),)+))
            }
            fn reattach(host: Self::Host, stream: &Stream<'s, K>, _: Private) -> Result<Self>
            where
                K: Attachable,
            {
                let ($($v,)+) = host;
                Ok(($($v.attach(stream)?,)+))
            }
        }
    )+};
}

capture_set_for_tuples! {
    (A MA a)
    (A MA a, B MB b)
    (A MA a, B MB b, C MC c)
    (A MA a, B MB b, C MC c, D MD d)
    (A MA a, B MB b, C MC c, D MD d, E ME e)
    (A MA a, B MB b, C MC c, D MD d, E ME e, F MF f)
}

impl<'s, K: StreamKind, T: ?Sized + 'static, M: Storage> CaptureSet<'s, K>
    for Vec<Managed<T, StreamOwned<'s, K>, M>>
{
    type Captured<'c> = Vec<Managed<T, StreamOwned<'c, Capture>, M>>;
    type Host = Vec<Managed<T, HostOwned, M>>;

    fn owners(&self, _: Private) -> Vec<u64> {
        self.iter().map(|m| m.stream().id).collect()
    }
    fn check_capture(&self, _: Private) -> Result<()> {
        self.iter().try_for_each(|m| M::check_capture(m.context()))
    }
    fn enter<'c>(self, to: RawStream, _: Private) -> Self::Captured<'c> {
        self.into_iter().map(|m| m.retype(to)).collect()
    }
    fn leave(
        captured: Self::Captured<'_>,
        back: RawStream,
        count: usize,
        _: Private,
    ) -> Result<Self> {
        if captured.len() < count {
            // The missing buffers were dropped inside the closure (and kept by the scope);
            // those that came back are this stream's again and dropped as such.
            let lost = count - captured.len();
            drop(Self::leave(captured, back, 0, PRIVATE));
            return Err(Error::CaptureLostBuffer { lost });
        }
        Ok(captured.into_iter().map(|m| m.retype(back)).collect())
    }
    fn count(&self, _: Private) -> usize {
        self.len()
    }
    fn written(&self, _: Private) -> Vec<bool> {
        self.iter()
            .map(|m| M::written_on_device(&m.allocation().parts))
            .collect()
    }
    fn mark_written(&self, mask: &[bool], _: Private) {
        for (m, written) in self.iter().zip(mask) {
            if *written {
                m.mark_device_written();
            }
        }
    }
    fn to_host(self, owner: RawStream, _: Private) -> Result<Self::Host> {
        let mut after = Vec::with_capacity(self.len());
        for m in &self {
            m.owner_context().bind()?;
            after.push(release_to_host(m)?);
        }
        driver::stream_synchronize(owner.handle)?;
        // As for tuples: poisoned during the wait, the buffers are leaked by their drop.
        self.iter().try_for_each(check_not_poisoned)?;
        Ok(self
            .into_iter()
            .zip(after)
            .map(|(m, s)| m.retype(s))
            .collect())
    }
    fn reattach(host: Self::Host, stream: &Stream<'s, K>, _: Private) -> Result<Self>
    where
        K: Attachable,
    {
        host.into_iter().map(|m| m.attach(stream)).collect()
    }
}

/// The capture sets whose buffers the CPU may see between replays ([`Graph::host`]): those of
/// [`CaptureSet`] whose every storage has a host side ([`HostVisible`]). Sealed (it needs
/// `CaptureSet`, which is).
///
/// A graph holding memory without a host side has no host step: there is nothing on the host
/// to show. Its buffers come back by [`Graph::sync`] (or `into_buffers`), and their contents by
/// the storage's copies.
///
/// [`Graph::host`]: crate::Graph::host
/// [`Graph::sync`]: crate::Graph::sync
#[diagnostic::on_unimplemented(
    message = "the CPU cannot see these buffers between replays: a storage of the set has no host side",
    label = "`Graph::host` needs every buffer of the set to be `HostVisible`",
    note = "take the buffers back with `graph.sync()?`, and their contents by copies (`to_vec()`, `copy_from_host(..)`)"
)]
pub trait HostViews<'s, K: StreamKind>: CaptureSet<'s, K> {
    /// What a host access between replays sees: `&mut T` for each buffer, never the buffer
    /// itself (which the graph keeps).
    type View<'v>;

    /// `&mut T` of each host buffer.
    #[doc(hidden)]
    fn views(host: &mut Self::Host, _: Private) -> Self::View<'_>;
}

macro_rules! host_views_for_tuples {
    ($( ($($t:ident $m:ident $v:ident),+) )+) => {$(
        impl<'s, K: StreamKind, $($t: ?Sized + 'static, $m: HostVisible),+> HostViews<'s, K>
            for ($(Managed<$t, StreamOwned<'s, K>, $m>,)+)
        {
            type View<'v> = ($(&'v mut $t,)+);

            fn views(host: &mut Self::Host, _: Private) -> Self::View<'_> {
                let ($($v,)+) = host;
                ($(&mut **$v,)+)
            }
        }
    )+};
}

host_views_for_tuples! {
    (A MA a)
    (A MA a, B MB b)
    (A MA a, B MB b, C MC c)
    (A MA a, B MB b, C MC c, D MD d)
    (A MA a, B MB b, C MC c, D MD d, E ME e)
    (A MA a, B MB b, C MC c, D MD d, E ME e, F MF f)
}

impl<'s, K: StreamKind, T: ?Sized + 'static, M: HostVisible> HostViews<'s, K>
    for Vec<Managed<T, StreamOwned<'s, K>, M>>
{
    type View<'v> = Vec<&'v mut T>;

    fn views(host: &mut Self::Host, _: Private) -> Self::View<'_> {
        host.iter_mut().map(|m| &mut **m).collect()
    }
}
