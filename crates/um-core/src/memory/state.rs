//! The state machine of managed memory, in one place.
//!
//! ```text
//!                 Managed::new / from_slice / zeroed ...   (cuMemAllocManaged, CU_MEM_ATTACH_HOST)
//!                                   │
//!                                   ▼
//!                   ┌──────────────────────────────┐
//!                   │   Managed<T, HostOwned>      │  Deref / DerefMut: the CPU reads and writes
//!                   └──────────────────────────────┘
//!        attach(self, &Stream<'s, K>)  │      ▲  sync(self)  /  Stream::sync_all((a, b, ..))
//!   cuStreamAttachMemAsync(SINGLE)     │      │  cuStreamSynchronize (+ attach HOST first where
//!   (skipped if already associated)    ▼      │  the device lacks concurrent managed access)
//!                   ┌──────────────────────────────┐
//!                   │ Managed<T, StreamOwned<'s,K>>│  kernel argument on the stream branded 's;
//!                   └──────────────────────────────┘  no CPU access of any kind
//!                        │                  │   ▲
//!                        │  hand_off(self,  │   │  cuEventRecord(A's event, A);
//!                        │  &Stream<'t,K2>) │   │  cuStreamWaitEvent(B, event);
//!                        │  K2: Attachable  └───┘  cuStreamAttachMemAsync(B, SINGLE);
//!                        │                         B's Transfer policy; no host wait
//!                        │                         (now StreamOwned<'t, K2>)
//!                        ▼
//!                  drop: wait for the owning stream, then cuMemFree
//! ```
//!
//! `hand_off` moves memory still in use on stream A to stream B: B's kernels run after A's,
//! ordered on the GPU by A's event (made once per stream, see `event.rs`), and the CPU never
//! waits. The memory then carries B's brand, so no launch on A can name it. Across devices it
//! needs concurrent managed access on every device involved ([`Error::HandOffAcrossDevices`]).
//!
//! Mirrored memory (`Managed<T, S, Mirror>`, see [`crate::storage`]) takes the same
//! transitions: there, `attach` enqueues a host-to-device copy instead of the stream
//! association (only if the host may have written since the last copy), `sync` a
//! device-to-host copy before its wait (only if a launch took the buffer as `&mut`), and
//! `hand_off` only orders the two streams (device memory has no association to move).
//!
//! Coherent memory (`Managed<T, S, Coherent>`, managed memory attached globally, on devices
//! with concurrent managed access only) takes them too, without any association call:
//! `attach` applies the stream's transfer policy, `sync` waits, and `hand_off` is the event
//! alone. The brands keep the promise the association would make.
//!
//! Memory for kernels on the legacy default stream, which refuses `CU_MEM_ATTACH_SINGLE`, takes
//! the same path with `attach_global` (`CU_MEM_ATTACH_GLOBAL`). Each stream's
//! [`Transfer`] policy acts at the two transitions (prefetch, advice).
//!
//! Both states are zero-sized markers that cannot be constructed, and [`State`] is sealed: the
//! only way into a state is the transition that makes it true.

use std::fmt;
use std::marker::PhantomData;

use crate::driver;
use crate::driver::context::Context;
use crate::driver::event::{Event, StreamEvent};
use crate::driver::stream::{
    Attachable, Brand, Legacy, Owned, RawStream, Stream, StreamKind, Transfer,
};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::Managed;
use crate::memory::release::{Passed, Released};
use crate::memory::storage::{self, Storage};
use crate::reclaim::reaper::Orphan;
use crate::sealed::{PRIVATE, Private, Sealed};

/// The states of a [`Managed`] allocation: [`HostOwned`] and [`StreamOwned`]. Sealed: no other
/// crate can add a state.
pub trait State: Sealed {
    /// Whether work on a stream may be using the memory.
    #[doc(hidden)]
    const ON_STREAM: bool;
}

/// State: the CPU owns the memory; no kernel can see it.
pub struct HostOwned {
    _private: (),
}

/// State: the stream with brand `'s`, of kind `K`, owns the memory. Only kernels launched on
/// that stream may touch it; the CPU may not.
///
/// `K` defaults to [`Owned`], so `StreamOwned<'s>` is memory attached to a stream `um` created.
/// With `K = PerThread` the state is neither `Send` nor `Sync`, because the per-thread default
/// stream handle names another stream on every thread.
pub struct StreamOwned<'s, K: StreamKind = Owned> {
    _brand: Brand<'s>,
    _kind: PhantomData<K>,
}

impl Sealed for HostOwned {}
impl<K: StreamKind> Sealed for StreamOwned<'_, K> {}
impl State for HostOwned {
    const ON_STREAM: bool = false;
}
impl<K: StreamKind> State for StreamOwned<'_, K> {
    const ON_STREAM: bool = true;
}

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
    /// Hands the memory to `stream`: enqueues `cuStreamAttachMemAsync(stream, ptr, 0,
    /// CU_MEM_ATTACH_SINGLE)`, so that only kernels on that stream may use it and the CPU may
    /// use it again once that stream's work is done.
    ///
    /// The whole allocation is attached (length 0); a partial attach is not expressible.
    /// Attaching to the stream the memory is still associated with (after a `sync` from it)
    /// makes no driver call. If the driver refuses, the memory is freed and the error returned.
    ///
    /// For mirrored memory, `attach` instead enqueues the copy of the host half to the device
    /// half on `stream` (`cuMemcpyHtoDAsync`), and only if the host may have written since the
    /// last copy (a `DerefMut`, or a fresh allocation). For coherent memory it makes no
    /// association call: it applies the stream's [`Transfer`] policy and retypes.
    pub fn attach<'s, K: Attachable>(
        self,
        stream: &Stream<'s, K>,
    ) -> Result<Managed<T, StreamOwned<'s, K>, M>> {
        // SAFETY: `K: Attachable`, so `stream` is not the NULL stream.
        unsafe { self.hand_to(stream, sys::MEM_ATTACH_SINGLE) }
    }

    /// The transition both `attach` and `attach_global` make: associate the whole allocation
    /// with `stream` using `flag` (no driver call when already associated), apply the stream's
    /// transfer policy, and retype.
    ///
    /// # Safety
    /// `flag` is `CU_MEM_ATTACH_SINGLE` only if `stream` is not the NULL stream.
    unsafe fn hand_to<'s, K: StreamKind>(
        mut self,
        stream: &Stream<'s, K>,
        flag: std::ffi::c_uint,
    ) -> Result<Managed<T, StreamOwned<'s, K>, M>> {
        check_same_context(&self, stream)?;
        let target = stream.raw();
        let (host, bytes) = (self.host_ptr(), self.size_in_bytes());
        if let Some(mirror) = self.mirror_mut() {
            stream.context().bind()?;
            // SAFETY: the two halves of the mirror we own, host-owned until the retype below;
            // `stream` is alive for the whole of 's and its context is current.
            unsafe { storage::to_device(mirror, host, bytes, target.handle) }?;
            return Ok(self.retype(target));
        }
        // Coherent memory keeps its global association: no driver call.
        if self.associated() && self.stream().id != target.id {
            self.context().bind()?;
            // SAFETY: `self` is the start of a live managed allocation (we own it); `stream` is
            // alive for the whole of 's; the flag suits the stream (the caller's guarantee).
            unsafe { driver::stream_attach(target.handle, self.device_ptr(), flag) }?;
        }
        apply_transfer_on_attach(&mut self, target)?;
        Ok(self.retype(target))
    }
}

impl<T: ?Sized, M: Storage> Managed<T, HostOwned, M> {
    /// Hands the memory to the legacy default stream: enqueues, on the NULL stream,
    /// `cuStreamAttachMemAsync(NULL, ptr, 0, CU_MEM_ATTACH_GLOBAL)`.
    ///
    /// The NULL stream refuses `CU_MEM_ATTACH_SINGLE` (it is not a specific stream), so the
    /// driver-level association is global. The types still restrict the memory to launches on
    /// the legacy stream (it carries that scope's brand), and the CPU regains it with `sync`,
    /// which waits for the legacy stream. Use it where kernels run on the legacy stream (the
    /// seed's single-threaded, no-option programs); everywhere else, `attach` to a stream of
    /// your own.
    pub fn attach_global<'s>(
        self,
        stream: &Stream<'s, Legacy>,
    ) -> Result<Managed<T, StreamOwned<'s, Legacy>, M>> {
        // SAFETY: GLOBAL is a legal flag on the NULL stream.
        unsafe { self.hand_to(stream, sys::MEM_ATTACH_GLOBAL) }
    }
}

impl<'s, T: ?Sized, K: StreamKind, M: Storage> Managed<T, StreamOwned<'s, K>, M> {
    /// Waits for the owning stream, then gives the memory back to the CPU.
    ///
    /// On a device without concurrent managed access, the memory is first re-attached to the
    /// host (`CU_MEM_ATTACH_HOST`), so that CPU access stays legal while the stream runs more
    /// work later. If the wait fails, the memory is dropped (and leaked if the stream may
    /// still use it) and the error returned.
    ///
    /// For mirrored memory, the copy of the device half to the host half is enqueued before
    /// the wait, and only if a launch took the buffer as `&mut` since `attach`.
    #[must_use = "`sync` returns the memory: drop the Result and the buffer is freed"]
    pub fn sync(self) -> Result<Managed<T, HostOwned, M>> {
        self.owner_context().bind()?;
        let after = release_to_host(&self)?;
        driver::stream_synchronize(self.stream().handle)?;
        Ok(self.retype(after))
    }
}

impl<'a, T: ?Sized, K: StreamKind, M: Storage> Managed<T, StreamOwned<'a, K>, M> {
    /// Hands the memory from the stream that owns it (A) to `to` (B) without waiting on the
    /// host: the second form of `attach`, for memory that is still in use on A.
    ///
    /// It enqueues, in order: a record of A's event on A (`cuEventRecord`, capturing every
    /// kernel queued on A so far); a wait for that event on B (`cuStreamWaitEvent`); the
    /// association of the whole allocation with B (`cuStreamAttachMemAsync(B, ptr, 0,
    /// CU_MEM_ATTACH_SINGLE)`); and B's [`Transfer`] policy (`Prefetch` prefetches to B's
    /// device, on B). Kernels launched on B afterwards run after A's kernels that used the
    /// memory; the CPU never waits, and A may keep running other work.
    ///
    /// * Afterwards the memory carries B's brand: a launch on A cannot name it (a type error),
    ///   and `sync` or drop wait for B, which waits for A through the event.
    /// * `K` may be any kind, the legacy stream included (memory of `attach_global`); `to` must
    ///   be [`Attachable`]: the legacy stream refuses a single association.
    /// * Between the streams of one `with_streams` set (one brand) the new owner is recorded
    ///   and checked at launch; handing memory to the stream that already owns it makes no
    ///   driver call.
    /// * Across devices (B of another context than A or than the allocation) every device
    ///   involved must have concurrent managed access; otherwise
    ///   [`Error::HandOffAcrossDevices`], before any driver call. `HostResident` advice is kept
    ///   for the allocation's own device only: on another device it acts as `OnDemand`.
    ///
    /// * Coherent memory stays attached globally: the event (and B's policy) is the whole
    ///   handoff, with no association call.
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
        let from = self.stream();
        let target = to.raw();
        if from.id == target.id {
            // The same stream (of a `with_streams` set): already associated, already ordered.
            return Ok(self.retype(target));
        }
        // SAFETY: the memory is in state `StreamOwned<'a, K>`, so its owning stream (brand 'a)
        // is alive for this call.
        let owner = unsafe { from.events() };
        let from_ctx = owner.map_or(self.context(), StreamEvent::context);
        if self.mirror().is_some()
            && !(from_ctx.same_as(to.context()) && self.context().same_as(to.context()))
        {
            // The device half is plain device memory of the allocation's device: another
            // device's kernels could reach it only through peer access, which um does not set up.
            return Err(Error::ContextMismatch);
        }
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
        if self.mirror().is_some() {
            // Device memory has no stream association and mirrors no transfer policy: ordering
            // B after A is the whole handoff.
            return Ok(self.retype(target));
        }
        if self.associated() {
            // `to`'s context is current (`order` left it so).
            // SAFETY: `self` is the start of a live managed allocation we own; `target` is alive
            // for 'b and is not the NULL stream (`K2: Attachable`). B waits for A before the
            // attach takes effect, so the association changes only once A's kernels are done.
            unsafe {
                driver::stream_attach(target.handle, self.device_ptr(), sys::MEM_ATTACH_SINGLE)
            }?;
        }
        // Coherent memory stays attached globally: the event is the whole handoff, and B's
        // policy follows.
        // From here B owns it: should the policy fail, the drop waits for B (and so for A).
        let mut handed: Managed<T, StreamOwned<'b, K2>, M> = self.retype(target);
        apply_transfer_on_hand_off(&mut handed, to)?;
        Ok(handed)
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

/// What the receiving stream's [`Transfer`] policy does at a handoff (the stream's context is
/// current). `HostResident` advice names the allocation's device; on a stream of another
/// device it is removed instead, and the policy acts as `OnDemand`.
fn apply_transfer_on_hand_off<T: ?Sized, K: StreamKind, M: Storage>(
    m: &mut Managed<T, StreamOwned<'_, K>, M>,
    to: &Stream<'_, K>,
) -> Result<()> {
    let target = to.raw();
    if !to.context().info().concurrent_managed_access {
        return Ok(());
    }
    let (ptr, bytes) = (m.device_ptr(), m.size_in_bytes());
    let want_resident =
        target.transfer == Transfer::HostResident && to.context().same_as(m.context());
    if want_resident != m.is_host_resident() {
        // Advice changes placement, never contents, so it may be given while A's kernels run.
        set_host_resident_advice(m, want_resident)?;
    }
    if target.transfer == Transfer::Prefetch {
        // SAFETY: live allocation of `bytes`; the stream is alive ('b); enqueued on B after the
        // wait for A and the attach, so it moves pages once A is done with them.
        unsafe {
            driver::mem_prefetch(
                ptr,
                bytes,
                sys::MemLocation::device(to.context().device()),
                target.handle,
            )
        }?;
    }
    Ok(())
}

/// Sets (or removes) the advice of [`Transfer::HostResident`] on the whole allocation: preferred
/// location the host, accessed by the allocation's own device. Both transitions that apply a
/// policy (`attach` and `hand_off`) call it when the stream's policy and the memory's advice
/// differ.
fn set_host_resident_advice<T: ?Sized, S: State, M: Storage>(
    m: &mut Managed<T, S, M>,
    resident: bool,
) -> Result<()> {
    let (ptr, bytes, device) = (m.device_ptr(), m.size_in_bytes(), m.context().device());
    let (preferred, accessed) = if resident {
        (
            sys::ADVISE_SET_PREFERRED_LOCATION,
            sys::ADVISE_SET_ACCESSED_BY,
        )
    } else {
        (
            sys::ADVISE_UNSET_PREFERRED_LOCATION,
            sys::ADVISE_UNSET_ACCESSED_BY,
        )
    };
    // SAFETY: `m` is a live managed allocation of `bytes` that we own; advice changes where
    // pages are placed, never their contents.
    unsafe {
        driver::mem_advise(ptr, bytes, preferred, sys::MemLocation::HOST)?;
        driver::mem_advise(ptr, bytes, accessed, sys::MemLocation::device(device))?;
    }
    m.set_host_resident(resident);
    Ok(())
}

/// What the stream's [`Transfer`] policy does when unified memory is handed to it.
fn apply_transfer_on_attach<T: ?Sized, M: Storage>(
    m: &mut Managed<T, HostOwned, M>,
    target: RawStream,
) -> Result<()> {
    if !m.context().info().concurrent_managed_access {
        return Ok(());
    }
    let (ptr, bytes, device) = (m.device_ptr(), m.size_in_bytes(), m.context().device());
    let want_resident = target.transfer == Transfer::HostResident;
    if want_resident != m.is_host_resident() {
        m.context().bind()?;
        set_host_resident_advice(m, want_resident)?;
    }
    if target.transfer == Transfer::Prefetch {
        m.context().bind()?;
        // SAFETY: live allocation of `bytes`, the stream is alive for 's; a prefetch after the
        // attach in stream order moves pages only.
        unsafe {
            driver::mem_prefetch(ptr, bytes, sys::MemLocation::device(device), target.handle)
        }?;
    }
    Ok(())
}

/// Enqueues whatever must precede the wait that ends stream ownership, and says which stream
/// the memory stays associated with afterwards.
pub(crate) fn release_to_host<T: ?Sized, K: StreamKind, M: Storage>(
    memory: &Managed<T, StreamOwned<'_, K>, M>,
) -> Result<RawStream> {
    if let Some(mirror) = memory.mirror() {
        // SAFETY: the two halves of the mirror we own, stream-owned by this live stream (brand
        // 's), whose context the callers made current; every caller waits for the stream
        // before the memory becomes host-owned.
        unsafe {
            storage::to_host(
                mirror,
                memory.host_ptr(),
                memory.size_in_bytes(),
                memory.stream().handle,
            )
        }?;
        // A mirror has no association with a stream to keep.
        return Ok(RawStream::NONE);
    }
    // Coherent memory exists only where the device has concurrent managed access.
    if !memory.associated() || memory.context().info().concurrent_managed_access {
        if memory.stream().transfer == Transfer::Prefetch {
            // SAFETY: live allocation of `size_in_bytes`; the owning stream is alive (brand 's).
            unsafe {
                driver::mem_prefetch(
                    memory.device_ptr(),
                    memory.size_in_bytes(),
                    sys::MemLocation::HOST,
                    memory.stream().handle,
                )
            }?;
        }
        // The association stays; a later attach to the same stream needs no driver call.
        Ok(memory.stream())
    } else {
        // SAFETY: live managed allocation we own; the owning stream is alive (brand 's).
        unsafe {
            driver::stream_attach(
                memory.stream().handle,
                memory.device_ptr(),
                sys::MEM_ATTACH_HOST,
            )
        }?;
        Ok(RawStream::NONE)
    }
}

/// Several buffers owned by one stream, given back to the CPU with a single wait: tuples of up
/// to six `Managed<_, StreamOwned<'s, K>, _>` (unified, coherent and mirrored mixed freely),
/// and `Vec`s of one. Sealed.
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
}

/// The association after the next release, in order (`NONE`, which only costs a re-attach
/// later, should the list be short, which it never is).
fn next_after(after: &mut std::vec::IntoIter<Released>) -> RawStream {
    after.next().map_or(RawStream::NONE, |r| r.0)
}

impl<'s, K: StreamKind> Stream<'s, K> {
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
/// except where `stream` is one of a `with_streams` set, whose streams share a brand: that is
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
}

impl<T: ?Sized + fmt::Debug, M: Storage> fmt::Debug for Managed<T, HostOwned, M> {
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
