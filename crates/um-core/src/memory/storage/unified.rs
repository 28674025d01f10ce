//! [`Unified`], the default storage: CUDA managed memory, attached to one stream at a time.
//!
//! Its part of each transition:
//!
//! * allocation: `cuMemAllocManaged(CU_MEM_ATTACH_HOST)`; free: `cuMemFree`, as for an orphan;
//!   kernels get the managed address, the same as the host's;
//! * `attach`: `cuStreamAttachMemAsync(stream, ptr, 0, flag)` (`CU_MEM_ATTACH_SINGLE`, or
//!   `GLOBAL` for the legacy stream), unless the memory is still associated with that stream,
//!   then the stream's [`Transfer`](crate::Transfer) policy;
//! * `sync`, before the wait: the owner's policy, and the association stays (a later attach to
//!   the same stream makes no call); where the device lacks concurrent managed access, instead
//!   a re-attach to the host (`CU_MEM_ATTACH_HOST`), so that CPU access stays legal while the
//!   stream runs later work; from a per-thread default stream, the policy and then that
//!   re-attach on every device, so that the memory outlives the thread (a thread whose default
//!   stream still has managed memory attached never finishes exiting);
//! * `hand_off`, after the event: `cuStreamAttachMemAsync(B, ptr, 0, CU_MEM_ATTACH_SINGLE)`, on
//!   B after its wait for A, then B's policy;
//! * launches mark nothing.
//!
//! Its constructors are `Managed`'s own (`Managed::new`, `from_slice`, ...: see
//! `crate::memory::managed`), which names this storage as its default.

use std::ffi::c_uint;
use std::ptr::NonNull;

use crate::driver;
use crate::driver::context::{Context, device_lacking_concurrent_access};
use crate::driver::stream::RawStream;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::storage::parts::{
    Allocate, Allocation, HasParts, HostVisible, Size, Storage, null_pointer,
};
use crate::memory::storage::transfer::{self, Advice};
use crate::reclaim::reaper::Orphan;
use crate::sealed::{Private, Sealed};

/// Storage: CUDA managed (unified) memory, one address for host and device, pages migrated by
/// the driver (and by the stream's [`Transfer`](crate::Transfer) policy). The default.
#[derive(Debug)]
pub struct Unified {
    _private: (),
}

impl Sealed for Unified {}
impl HostVisible for Unified {}
impl Storage for Unified {
    const NAME: &'static str = "unified";
    const STREAM_ASSOCIATED: bool = true;
}

impl HasParts for Unified {
    type Parts = Advice;

    fn admit(_: &Context) -> Result<()> {
        Ok(())
    }

    unsafe fn free(host: NonNull<u8>, parts: &Advice, _: Private) {
        let ptr = Self::device_ptr(host, parts);
        per_thread::detached(ptr);
        // SAFETY: the caller's guarantees.
        let _ = unsafe { driver::mem_free(ptr) };
    }

    #[inline]
    fn device_ptr(host: NonNull<u8>, _: &Advice) -> sys::CUdeviceptr {
        host.as_ptr() as usize as sys::CUdeviceptr
    }

    #[inline]
    fn footprint(bytes: usize) -> usize {
        bytes
    }

    #[inline]
    fn host_written(_: &mut Advice, _: Private) {}

    #[inline]
    fn device_written(_: &Advice, _: Private) {}

    #[inline]
    fn written_on_device(_: &Advice) -> bool {
        false
    }

    /// A graph runs its nodes where the driver places them, on streams of its own for parallel
    /// branches; on a device without concurrent managed access, memory attached to one stream
    /// is the GPU's only through that stream's work, and the host's only while it is idle, which
    /// a graph's driver-made streams do not promise. So unified memory enters graphs only on
    /// devices with concurrent managed access.
    fn check_capture(ctx: &Context) -> Result<()> {
        let info = ctx.info();
        if info.concurrent_managed_access {
            Ok(())
        } else {
            Err(Error::GraphNeedsConcurrentManagedAccess {
                device: info.ordinal,
            })
        }
    }

    unsafe fn attach(
        host: NonNull<u8>,
        a: &mut Allocation<Self>,
        to: RawStream,
        flag: c_uint,
        _: Private,
    ) -> Result<()> {
        let ptr = Self::device_ptr(host, &a.parts);
        if a.stream.id != to.id {
            a.ctx.bind()?;
            // SAFETY: the start of a live managed allocation we own; `to` is alive; the flag
            // suits the stream (the caller's guarantees).
            unsafe { driver::stream_attach(to.handle, ptr, flag) }?;
            if to.handle == sys::STREAM_PER_THREAD {
                // The same context as the memory's (`attach` checks it).
                per_thread::attached(ptr, &a.ctx);
            }
        }
        // SAFETY: the caller's guarantees; the attach, if any, is enqueued.
        unsafe { transfer::on_attach(ptr, a.bytes, &a.ctx, &mut a.parts, to) }
    }

    unsafe fn release(host: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Result<RawStream> {
        let ptr = Self::device_ptr(host, &a.parts);
        // Memory of `attach_global` (the NULL stream's association) is reachable from every
        // device: where any device of the process lacks concurrent managed access, the CPU may
        // not touch it while a kernel runs there, so it goes back attached to the host, as
        // coherent memory is refused outright.
        let global = a.stream.handle.is_null();
        let everywhere = !global || device_lacking_concurrent_access()?.is_none();
        if a.ctx.info().concurrent_managed_access && everywhere {
            // SAFETY: the caller's guarantees.
            unsafe { transfer::on_release(ptr, a.bytes, &a.ctx, a.stream) }?;
            // The association stays; a later attach to the same stream needs no driver call.
            // Not a per-thread stream's: a thread that exits while managed memory is still
            // attached to its default stream never finishes exiting (seen with driver 580), and
            // host-owned memory may outlive the thread. It goes back attached to the host, below.
            if a.stream.handle != sys::STREAM_PER_THREAD {
                return Ok(a.stream);
            }
        }
        // SAFETY: a live managed allocation we own; the owning stream is alive and its context
        // current (the caller's guarantees).
        unsafe { driver::stream_attach(a.stream.handle, ptr, sys::MEM_ATTACH_HOST) }?;
        per_thread::detached(ptr);
        Ok(RawStream::NONE)
    }

    fn check_hand_off(_: &Context, _: &Context, _: &Context) -> Result<()> {
        Ok(())
    }

    unsafe fn hand_over(
        host: NonNull<u8>,
        a: &Allocation<Self>,
        to: RawStream,
        _: Private,
    ) -> Result<()> {
        let ptr = Self::device_ptr(host, &a.parts);
        // SAFETY: the start of a live managed allocation we own; `to` is alive, current and not
        // the NULL stream, and waits for A before the attach takes effect, so the association
        // changes only once A's kernels are done (the caller's guarantees).
        unsafe { driver::stream_attach(to.handle, ptr, sys::MEM_ATTACH_SINGLE) }?;
        per_thread::detached(ptr);
        if to.handle == sys::STREAM_PER_THREAD {
            // SAFETY: `to` is alive (the caller's guarantee).
            let ctx = unsafe { to.events() }.map_or(&a.ctx, |e| e.context());
            per_thread::attached(ptr, ctx);
        }
        Ok(())
    }

    unsafe fn receive(
        host: NonNull<u8>,
        a: &mut Allocation<Self>,
        to_ctx: &Context,
        _: Private,
    ) -> Result<()> {
        let ptr = Self::device_ptr(host, &a.parts);
        // SAFETY: the caller's guarantees; the attach to the new owner is enqueued.
        unsafe { transfer::on_hand_off(ptr, a.bytes, &a.ctx, &mut a.parts, to_ctx, a.stream) }
    }

    unsafe fn orphan(host: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Orphan {
        let ptr = Self::device_ptr(host, &a.parts);
        // Whoever takes the orphan settles the association: a free deferred behind a
        // per-thread stream re-attaches it to the host first (`reclaim::defer::defer_free`).
        per_thread::detached(ptr);
        // SAFETY: the caller's guarantee.
        unsafe { managed_orphan(ptr, &a.ctx) }.associated_at(ptr)
    }
}

impl Allocate for Unified {
    fn alloc(_: &Context, size: Size, _: Private) -> Result<(NonNull<u8>, Advice)> {
        managed_alloc(size, false)
    }
}

/// `size` of managed memory attached to the host, or globally (`global`), in the current
/// context: the allocation of both storages of managed memory.
pub(crate) fn managed_alloc(size: Size, global: bool) -> Result<(NonNull<u8>, Advice)> {
    let dptr = driver::mem_alloc_managed(size.bytes(), global)?;
    // Managed memory has one address for host and device; the driver never returns 0 on
    // success, but a null check costs nothing.
    let host =
        NonNull::new(dptr as usize as *mut u8).ok_or_else(|| null_pointer("cuMemAllocManaged"))?;
    Ok((host, Advice::default()))
}

/// The orphan of the managed allocation at `ptr`, of `ctx`: freed with `cuMemFree`.
///
/// # Safety
/// As for [`HasParts::orphan`]: the caller gives the allocation up.
pub(crate) unsafe fn managed_orphan(ptr: sys::CUdeviceptr, ctx: &Context) -> Orphan {
    let free = move || {
        // SAFETY: `Orphan::new`'s contract: called once, with the context current, once no work
        // can use the memory.
        let _ = unsafe { driver::mem_free(ptr) };
    };
    // SAFETY: `free` frees this managed allocation and nothing else; the caller gives it up.
    unsafe { Orphan::new(ctx.clone(), free) }
}

/// The managed memory attached to this thread's per-thread default streams
/// (`CU_MEM_ATTACH_SINGLE`) that no transition has moved away yet, for the thread's exit: a
/// thread whose default stream still has managed memory attached never finishes exiting (seen
/// with driver 580). Every path that ends the association on this thread takes its entry out
/// (`release`'s re-attach to the host, a handoff to another stream, the free, the orphan, whose
/// deferred free re-attaches it to the host first); what is left when the thread exits was
/// leaked (`mem::forget`, a leaked scope future, a poisoned stream's or a failed wait's leak):
/// never freed, so its address is still the allocation's, and no brand of the thread's
/// per-thread scopes is alive to use it. The record's destructor re-attaches each to the host
/// and, unless the thread is inside a capture, waits for the stream.
///
/// The record is first used (so its destructor registered) only right after a successful
/// attach to a per-thread stream, which is after the driver's first use of this thread's
/// default stream: thread-local destructors run in the reverse order of their registration,
/// so this one runs before the CPU model's record of the thread's streams (and before the
/// driver's own, which runs after every thread-local destructor where it is a `pthread` key's).
mod per_thread {
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeMap;

    use crate::driver;
    use crate::driver::context::{Context, thread_is_capturing};
    use crate::driver::sys;

    /// By address, the context whose per-thread stream the memory is attached to.
    struct Attached(RefCell<BTreeMap<sys::CUdeviceptr, Context>>);

    thread_local! {
        /// Whether `ATTACHED` was ever used on this thread (a `Cell` without a destructor: the
        /// removals touch the record only then, so that nothing else registers it first).
        static USED: Cell<bool> = const { Cell::new(false) };
        static ATTACHED: Attached = const { Attached(RefCell::new(BTreeMap::new())) };
    }

    /// `ptr`, of `ctx`, is now attached to this thread's per-thread stream of `ctx`.
    pub(super) fn attached(ptr: sys::CUdeviceptr, ctx: &Context) {
        USED.with(|u| u.set(true));
        let _ = ATTACHED.try_with(|a| a.0.borrow_mut().insert(ptr, ctx.clone()));
    }

    /// `ptr` is no longer attached to a per-thread stream of this thread (or never was).
    pub(super) fn detached(ptr: sys::CUdeviceptr) {
        if USED.with(Cell::get) {
            let _ = ATTACHED.try_with(|a| a.0.borrow_mut().remove(&ptr));
        }
    }

    impl Drop for Attached {
        fn drop(&mut self) {
            let left = std::mem::take(&mut *self.0.borrow_mut());
            // The contexts whose per-thread streams got a re-attach, each waited for once below.
            let mut streams: Vec<&Context> = Vec::new();
            for (ptr, ctx) in &left {
                if ctx.bind().is_err() {
                    continue;
                }
                // SAFETY: `ptr` is the start of a managed allocation that was leaked attached
                // to this thread's default stream of `ctx` (now current): never freed, and
                // unreachable (every brand of the thread's per-thread scopes has ended). The
                // attach is stream-ordered after the work queued there.
                let _ = unsafe {
                    driver::stream_attach(sys::STREAM_PER_THREAD, *ptr, sys::MEM_ATTACH_HOST)
                };
                if !streams.iter().any(|c| c.same_as(ctx)) {
                    streams.push(ctx);
                }
            }
            if !thread_is_capturing() {
                for ctx in streams {
                    if ctx.bind().is_ok() {
                        let _ = driver::stream_synchronize(sys::STREAM_PER_THREAD);
                    }
                }
            }
        }
    }
}
