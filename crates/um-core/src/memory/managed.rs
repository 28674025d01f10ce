//! `Managed<T, S, M>`: one allocation, in state `S`, with storage `M`.
//!
//! This file holds allocation, host access and freeing; the states and the transitions between
//! them are in [`crate::state`], and what differs between the storages in [`crate::storage`].

use std::marker::PhantomData;
use std::mem::{self, ManuallyDrop};
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::Zeroable;

use crate::driver;
use crate::driver::context::Context;
use crate::driver::stream::RawStream;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::state::{HostOwned, State};
use crate::memory::storage::{self, Mirror, Storage, Unified};
use crate::reclaim::defer::{defer_free, dropping_scope};
use crate::reclaim::reaper::Orphan;

/// A managed (unified) allocation holding a `T` (or a `[T]`), in ownership state `S`.
///
/// * `Managed<T, HostOwned>`: the CPU owns it. It dereferences to `T`; no kernel can see it.
/// * `Managed<T, StreamOwned<'s>>`: the stream with brand `'s` owns it. The CPU cannot touch
///   it; kernels launched on that stream, and only those, take it as an argument.
///
/// The state changes only through [`attach`](Managed::attach), [`sync`](Managed::sync) and
/// [`hand_off`](Managed::hand_off), which consume the value and return it in its new state (see
/// [`crate::state`]).
///
/// The storage `M` is [`Unified`] (managed memory, the default), [`Coherent`](crate::Coherent)
/// (managed memory attached globally, whose transitions make no association call) or [`Mirror`]
/// (pinned host memory and device memory, copied at the transitions only when needed; see
/// [`crate::storage`]). States, transitions and launches are the same for all three.
pub struct Managed<T: ?Sized, S: State = HostOwned, M: Storage = Unified> {
    /// The host address: of the managed allocation (which is also the device address), or of
    /// the pinned half of a mirror.
    ptr: NonNull<T>,
    bytes: usize,
    ctx: Context,
    /// The stream the allocation is associated with in the driver (`RawStream::NONE` when it is
    /// attached to the host). In state `StreamOwned` it is the owning stream.
    stream: RawStream,
    /// The allocation carries the advice of [`Transfer::HostResident`](crate::Transfer).
    host_resident: bool,
    /// The storage's own part: nothing for unified memory, the device half for a mirror.
    parts: <M as storage::parts::HasParts>::Parts,
    _state: PhantomData<S>,
}

// SAFETY: a `Managed` owns its allocation exclusively (like a `Box`), so moving it to another
// thread moves the `T` with it; the driver calls it makes are thread-safe and bind the context
// first. Where the state is tied to a thread (memory attached to the per-thread default
// stream), `S` is `!Send` and so is the `Managed`.
unsafe impl<T: ?Sized + Send, S: State + Send, M: Storage> Send for Managed<T, S, M> {}
// SAFETY: `&Managed` gives `&T` (host state) or a kernel argument for the owning stream, whose
// `Stream` is itself `Sync` exactly when `S` is.
// The storage part is `Send + Sync` (its one shared mutation is an atomic flag).
unsafe impl<T: ?Sized + Sync, S: State + Sync, M: Storage> Sync for Managed<T, S, M> {}

/// Checked byte size of `len` elements of `T`, refusing zero, and refusing a `T` that needs a
/// larger alignment than every allocation has ([`Managed::MAX_ALIGN`]). Every constructor of
/// every storage calls it before it allocates.
pub(crate) fn byte_size<T>(len: usize) -> Result<usize> {
    let align = mem::align_of::<T>();
    if align > MAX_ALIGN {
        return Err(Error::OverAligned {
            align,
            max: MAX_ALIGN,
        });
    }
    let elem_size = mem::size_of::<T>();
    let bytes = len
        .checked_mul(elem_size)
        .ok_or(Error::SizeOverflow { len, elem_size })?;
    if bytes == 0 {
        return Err(Error::ZeroSized { len, elem_size });
    }
    Ok(bytes)
}

/// The alignment every allocation of every storage has: the driver's guarantee for
/// `cuMemAlloc` and `cuMemAllocManaged` ("aligned to at least 256 bytes"), and checked on
/// every address anyway (see [`check_aligned`]).
pub(crate) const MAX_ALIGN: usize = 256;

/// `Ok` if `address` is aligned to `align` (a power of two); otherwise
/// [`Error::OverAligned`] with the alignment the address has. Every allocation's addresses
/// (host and device) pass through it with `align_of::<T>()`, so that a driver that ever broke
/// its guarantee would give an `Err`, never a misaligned `&T`.
pub(crate) fn check_aligned(address: usize, align: usize) -> Result<()> {
    if address % align == 0 {
        return Ok(());
    }
    Err(Error::OverAligned {
        align,
        max: 1 << address.trailing_zeros(),
    })
}

/// The guard before every managed allocation: refuse more than the GPU has free, unless the
/// context allows oversubscription.
pub(crate) fn check_capacity(bytes: usize, free: usize, allow: bool) -> Result<()> {
    if bytes > free && !allow {
        return Err(Error::WouldOversubscribe { bytes, free });
    }
    Ok(())
}

/// Allocates `bytes` (> 0) of managed memory attached to the host (or globally, for
/// [`Coherent`](crate::Coherent) memory), after checking that the GPU has that much free:
/// oversubscribed managed memory can hang a shared GPU.
///
/// The address is checked against `align` (`align_of` the element type); a misaligned one is
/// freed and refused.
pub(crate) fn alloc_managed(
    ctx: &Context,
    bytes: usize,
    align: usize,
    global: bool,
) -> Result<NonNull<u8>> {
    ctx.bind()?;
    let (free, _) = driver::mem_info()?;
    check_capacity(bytes, free, ctx.oversubscription_allowed())?;
    let dptr = driver::mem_alloc_managed(bytes, global)?;
    if let Err(e) = check_aligned(dptr as usize, align) {
        // SAFETY: allocated just now; nothing else has the address.
        let _ = unsafe { driver::mem_free(dptr) };
        return Err(e);
    }
    // Managed memory has one address for host and device; the driver never returns 0 on
    // success, but a null check costs nothing.
    NonNull::new(dptr as usize as *mut u8).ok_or_else(|| storage::null_pointer("cuMemAllocManaged"))
}

/// Where a constructor writes: a fresh, host-accessible allocation and its storage part.
pub(crate) struct Fresh<M: Storage> {
    pub(crate) base: NonNull<u8>,
    pub(crate) parts: <M as storage::parts::HasParts>::Parts,
}

impl Fresh<Unified> {
    fn alloc(ctx: &Context, bytes: usize, align: usize) -> Result<Self> {
        Ok(Fresh {
            base: alloc_managed(ctx, bytes, align, false)?,
            parts: (),
        })
    }
}

impl Fresh<Mirror> {
    fn alloc(ctx: &Context, bytes: usize, align: usize) -> Result<Self> {
        let (base, parts) = storage::alloc_mirror(ctx, bytes, align)?;
        Ok(Fresh { base, parts })
    }
}

impl<M: Storage> Fresh<M> {
    /// The allocation holding `value`.
    pub(crate) fn value<T: DeviceCopy>(self, ctx: &Context, value: T) -> Managed<T, HostOwned, M> {
        let ptr = self.base.cast::<T>();
        // SAFETY: `ptr` is a fresh host-accessible allocation of `size_of::<T>()` bytes, aligned
        // for `T`: `byte_size` refused any `T` aligned above 256, and the allocation checked
        // its address against `align_of::<T>()` (`check_aligned`).
        unsafe { ptr.as_ptr().write(value) };
        Managed::from_parts(ptr, mem::size_of::<T>(), ctx.clone(), self.parts)
    }

    /// The allocation of `bytes` holding zero bytes, as a `T` or a slice of `len` `T`s.
    pub(crate) fn zeroed<T: ?Sized>(
        self,
        ctx: &Context,
        bytes: usize,
        ptr: impl FnOnce(NonNull<u8>) -> NonNull<T>,
    ) -> Managed<T, HostOwned, M> {
        // SAFETY: fresh host-accessible allocation of `bytes`; the callers only ask for types
        // for which all-zero is a valid value (`Zeroable`).
        unsafe { self.base.as_ptr().write_bytes(0, bytes) };
        Managed::from_parts(ptr(self.base), bytes, ctx.clone(), self.parts)
    }

    /// The allocation of `len` elements, element `i` set to `f(i)`. If `f` panics, the
    /// allocation leaks (it is never read uninitialised).
    pub(crate) fn filled<T: DeviceCopy>(
        self,
        ctx: &Context,
        len: usize,
        bytes: usize,
        mut f: impl FnMut(usize) -> T,
    ) -> Managed<[T], HostOwned, M> {
        let base = self.base.cast::<T>();
        for i in 0..len {
            // SAFETY: `i < len`, inside the fresh allocation of `len` elements, each written
            // once before the slice is ever read.
            unsafe { base.as_ptr().add(i).write(f(i)) };
        }
        let ptr = NonNull::slice_from_raw_parts(base, len);
        Managed::from_parts(ptr, bytes, ctx.clone(), self.parts)
    }
}

impl<T: DeviceCopy> Managed<T, HostOwned> {
    /// Allocates managed memory attached to the host and moves `value` into it.
    pub fn new(ctx: &Context, value: T) -> Result<Self> {
        let bytes = byte_size::<T>(1)?;
        Ok(Fresh::<Unified>::alloc(ctx, bytes, mem::align_of::<T>())?.value(ctx, value))
    }

    /// Allocates managed memory attached to the host, filled with zero bytes.
    pub fn zeroed(ctx: &Context) -> Result<Self>
    where
        T: Zeroable,
    {
        let bytes = byte_size::<T>(1)?;
        Ok(
            Fresh::<Unified>::alloc(ctx, bytes, mem::align_of::<T>())?.zeroed(
                ctx,
                bytes,
                NonNull::cast,
            ),
        )
    }
}

impl<T: DeviceCopy> Managed<[T], HostOwned> {
    /// Allocates `len` elements attached to the host, element `i` set to `f(i)`.
    ///
    /// If `f` panics, the allocation leaks (it is never read uninitialised).
    pub fn from_fn(ctx: &Context, len: usize, f: impl FnMut(usize) -> T) -> Result<Self> {
        let bytes = byte_size::<T>(len)?;
        Ok(Fresh::<Unified>::alloc(ctx, bytes, mem::align_of::<T>())?.filled(ctx, len, bytes, f))
    }

    /// Allocates a copy of `data`, attached to the host.
    pub fn from_slice(ctx: &Context, data: &[T]) -> Result<Self> {
        Self::from_fn(ctx, data.len(), |i| data[i])
    }

    /// Allocates the items of `iter`, attached to the host.
    pub fn from_iter_in(ctx: &Context, iter: impl IntoIterator<Item = T>) -> Result<Self> {
        let items: Vec<T> = iter.into_iter().collect();
        Self::from_slice(ctx, &items)
    }

    /// Allocates `len` zeroed elements, attached to the host.
    pub fn zeroed_slice(ctx: &Context, len: usize) -> Result<Self>
    where
        T: Zeroable,
    {
        let bytes = byte_size::<T>(len)?;
        let slice = |base: NonNull<u8>| NonNull::slice_from_raw_parts(base.cast::<T>(), len);
        Ok(Fresh::<Unified>::alloc(ctx, bytes, mem::align_of::<T>())?.zeroed(ctx, bytes, slice))
    }
}

/// The constructors of mirrored memory ([`Mirror`]): page-locked host memory holding the value,
/// and device memory of the same size, allocated after checking that the GPU has it free. The
/// first `attach` copies the host half to the device.
///
/// They have their own names because `Managed::from_slice` must keep meaning unified memory
/// (a name shared by two storages would make every existing call ambiguous).
impl<T: DeviceCopy> Managed<T, HostOwned, Mirror> {
    /// A mirrored allocation holding `value`.
    pub fn new_mirrored(ctx: &Context, value: T) -> Result<Self> {
        let bytes = byte_size::<T>(1)?;
        Ok(Fresh::<Mirror>::alloc(ctx, bytes, mem::align_of::<T>())?.value(ctx, value))
    }

    /// A mirrored allocation filled with zero bytes.
    pub fn zeroed_mirrored(ctx: &Context) -> Result<Self>
    where
        T: Zeroable,
    {
        let bytes = byte_size::<T>(1)?;
        Ok(
            Fresh::<Mirror>::alloc(ctx, bytes, mem::align_of::<T>())?.zeroed(
                ctx,
                bytes,
                NonNull::cast,
            ),
        )
    }
}

impl<T: DeviceCopy> Managed<[T], HostOwned, Mirror> {
    /// A mirrored allocation of `len` elements, element `i` set to `f(i)`.
    ///
    /// If `f` panics, the allocation leaks (it is never read uninitialised).
    pub fn from_fn_mirrored(ctx: &Context, len: usize, f: impl FnMut(usize) -> T) -> Result<Self> {
        let bytes = byte_size::<T>(len)?;
        Ok(Fresh::<Mirror>::alloc(ctx, bytes, mem::align_of::<T>())?.filled(ctx, len, bytes, f))
    }

    /// A mirrored copy of `data`.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// use um_core::{Context, Managed, Mirrored, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let data: Mirrored<[f32]> = Managed::from_slice_mirrored(&ctx, &[1.0, 2.0, 3.0])?;
    /// let data = ctx.with_stream(StreamOptions::new(), |stream| {
    ///     let data = data.attach(stream)?; // copies to the device: the host wrote it
    ///     // ... launch kernels on `stream` with `&data` / `&mut data` ...
    ///     data.sync() // copies back only if a launch took `&mut data`
    /// })?;
    /// assert_eq!(data[0], 1.0);
    /// # Ok(()) }
    /// ```
    pub fn from_slice_mirrored(ctx: &Context, data: &[T]) -> Result<Self> {
        Self::from_fn_mirrored(ctx, data.len(), |i| data[i])
    }

    /// A mirrored allocation of `len` zeroed elements.
    pub fn zeroed_slice_mirrored(ctx: &Context, len: usize) -> Result<Self>
    where
        T: Zeroable,
    {
        let bytes = byte_size::<T>(len)?;
        let slice = |base: NonNull<u8>| NonNull::slice_from_raw_parts(base.cast::<T>(), len);
        Ok(Fresh::<Mirror>::alloc(ctx, bytes, mem::align_of::<T>())?.zeroed(ctx, bytes, slice))
    }
}

impl<T: ?Sized, M: Storage> Managed<T, HostOwned, M> {
    fn from_parts(
        ptr: NonNull<T>,
        bytes: usize,
        ctx: Context,
        parts: <M as storage::parts::HasParts>::Parts,
    ) -> Self {
        Managed {
            ptr,
            bytes,
            ctx,
            stream: RawStream::NONE,
            host_resident: false,
            parts,
            _state: PhantomData,
        }
    }
}

impl<T: ?Sized, S: State, M: Storage> Managed<T, S, M> {
    /// The largest alignment an element type may have: every allocation of every storage is
    /// aligned to 256 bytes (the driver's guarantee for `cuMemAlloc` and `cuMemAllocManaged`,
    /// and checked on every address). Constructors refuse a more aligned `T` with
    /// [`Error::OverAligned`] before they allocate.
    pub const MAX_ALIGN: usize = MAX_ALIGN;

    /// Size of the allocation in bytes (of each half, for a mirror).
    pub fn size_in_bytes(&self) -> usize {
        self.bytes
    }

    /// The context the memory was allocated in.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Bytes of memory the allocation holds: its size for unified memory, twice its size
    /// (host and device halves) for a mirror.
    pub fn footprint_in_bytes(&self) -> usize {
        match self.mirror() {
            Some(_) => 2 * self.bytes,
            None => self.bytes,
        }
    }

    /// The address kernels use: the managed address (one for host and device), or a mirror's
    /// device half.
    pub(crate) fn device_ptr(&self) -> sys::CUdeviceptr {
        match self.mirror() {
            Some(m) => m.device,
            None => self.host_ptr().as_ptr() as usize as sys::CUdeviceptr,
        }
    }

    /// The host address (for unified memory, also the device address).
    pub(crate) fn host_ptr(&self) -> NonNull<u8> {
        self.ptr.cast::<u8>()
    }

    /// Whether the transitions move the driver's stream association: unified memory only.
    pub(crate) fn associated(&self) -> bool {
        <M as storage::parts::HasParts>::ASSOCIATED
    }

    /// The mirror's state, or `None` for unified and coherent memory.
    pub(crate) fn mirror(&self) -> Option<&storage::MirrorParts> {
        <M as storage::parts::HasParts>::mirror(&self.parts)
    }

    /// A launch takes the buffer as `&mut`: a mirror's `sync` copies the device half back.
    pub(crate) fn mark_device_written(&self) {
        if let Some(m) = self.mirror() {
            m.device_dirty
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub(crate) fn mirror_mut(&mut self) -> Option<&mut storage::MirrorParts> {
        <M as storage::parts::HasParts>::mirror_mut(&mut self.parts)
    }

    pub(crate) fn is_host_resident(&self) -> bool {
        self.host_resident
    }

    pub(crate) fn set_host_resident(&mut self, advised: bool) {
        self.host_resident = advised;
    }

    pub(crate) fn stream(&self) -> RawStream {
        self.stream
    }

    /// The context of the stream that owns the memory: the allocation's own, except after a
    /// handoff to another device. Every stream-ordered call on the owner needs it current (and
    /// the per-thread handle names a stream of the current context).
    pub(crate) fn owner_context(&self) -> &Context {
        if S::ON_STREAM {
            // SAFETY: in a stream-owned state the owning stream is alive while the memory is: its
            // brand is in `S`.
            if let Some(owner) = unsafe { self.stream.events() } {
                return owner.context();
            }
        }
        &self.ctx
    }

    /// Gives the allocation up without freeing it, for a free that waits for its stream without
    /// blocking a thread (see `crate::reclaim`).
    pub(crate) fn into_orphan(self) -> Orphan {
        let this = ManuallyDrop::new(self);
        // SAFETY: as in `retype`: `this` is never used or dropped again, and the context is
        // read out exactly once.
        let ctx = unsafe { ptr::read(&this.ctx) };
        this.orphan_parts(ctx)
    }

    /// What an [`Orphan`] of this allocation must free: the managed allocation, or both halves
    /// of a mirror.
    fn orphan_parts(&self, ctx: Context) -> Orphan {
        let device = self.device_ptr();
        let host = self.mirror().map(|_| self.host_ptr().as_ptr() as usize);
        let free = move || {
            // SAFETY: `Orphan::new`'s contract: called once, with the context current, once no
            // work can use the memory.
            let _ = unsafe { driver::mem_free(device) };
            if let Some(host) = host {
                // SAFETY: as above, for the pinned half of the same mirror.
                let _ = unsafe { driver::mem_free_pinned(host as *mut std::ffi::c_void) };
            }
        };
        // SAFETY: `free` frees this allocation (both halves of a mirror), which the caller
        // gives up: it never frees it itself.
        unsafe { Orphan::new(ctx, free) }
    }

    /// The same allocation in state `S2`, associated with `stream`. Only `state.rs` calls this,
    /// once the driver calls that justify the new state have been made.
    pub(crate) fn retype<S2: State>(self, stream: RawStream) -> Managed<T, S2, M> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the context and the storage part are
        // read out exactly once, so ownership of the allocation, the context and the part
        // passes to the new value.
        let (ctx, parts) = unsafe { (ptr::read(&this.ctx), ptr::read(&this.parts)) };
        Managed {
            ptr: this.ptr,
            bytes: this.bytes,
            ctx,
            stream,
            host_resident: this.host_resident,
            parts,
            _state: PhantomData,
        }
    }
}

impl<T, S: State, M: Storage> Managed<[T], S, M> {
    /// Number of elements (metadata: readable in every state).
    pub fn len(&self) -> usize {
        self.ptr.len()
    }

    /// Whether the slice has no elements (never true: empty allocations are refused).
    pub fn is_empty(&self) -> bool {
        self.ptr.len() == 0
    }
}

impl<T: ?Sized, M: Storage> Deref for Managed<T, HostOwned, M> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: in the host state no kernel or copy can touch the allocation: only
        // stream-owned memory is passed to kernels, copies are enqueued only by `attach` (which
        // makes the memory stream-owned) and by `sync` (which waits for them), and memory
        // becomes host-owned only after its stream was synchronized (and, where the device
        // lacks concurrent managed access, re-attached to the host). The memory is
        // host-accessible (managed or pinned), initialised by every constructor, and owned
        // exclusively by `self`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ?Sized, M: Storage> DerefMut for Managed<T, HostOwned, M> {
    fn deref_mut(&mut self) -> &mut T {
        // The host may write: a mirror's next `attach` copies to the device.
        if let Some(m) = self.mirror_mut() {
            m.host_dirty = true;
        }
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: ?Sized, S: State, M: Storage> Drop for Managed<T, S, M> {
    fn drop(&mut self) {
        if S::ON_STREAM {
            // The owner's context: after a `hand_off` to another device it is not the
            // allocation's.
            let owner = self.owner_context();
            // While an unfinished async scope is dropped, the memory goes to the reaper instead
            // of being waited for here (see `crate::reclaim::defer`).
            if dropping_scope()
                && defer_free(owner, self.stream, self.orphan_parts(self.ctx.clone())).is_ok()
            {
                return;
            }
            // A kernel queued on the owning stream may still use the memory: wait for it
            // first. If the wait fails (a sticky error from a faulting kernel, say), the GPU
            // may still hold the memory, so it is leaked rather than freed.
            if owner.bind().is_err() || driver::stream_synchronize(self.stream.handle).is_err() {
                return;
            }
        }
        // Without the context nothing can be freed safely: leak.
        if self.ctx.bind().is_err() {
            return;
        }
        match self.mirror() {
            // SAFETY: both halves came from `alloc_mirror`; `retype` hands ownership on without
            // dropping, so this is the one free; no kernel or copy can use them any more (host
            // state, or their stream just completed).
            Some(m) => unsafe { storage::free_mirror(self.host_ptr(), m) },
            None => {
                // SAFETY: the allocation came from `alloc_managed`, `retype` hands
                // ownership on without dropping, so this is the one free; no kernel can use it
                // any more (host state, or its stream just completed).
                let _ = unsafe { driver::mem_free(self.device_ptr()) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{byte_size, check_aligned, check_capacity};
    use crate::error::Error;

    #[test]
    fn byte_sizes_are_checked() {
        assert_eq!(byte_size::<f32>(3), Ok(12));
        assert_eq!(
            byte_size::<f32>(0),
            Err(Error::ZeroSized {
                len: 0,
                elem_size: 4
            })
        );
        assert_eq!(
            byte_size::<()>(5),
            Err(Error::ZeroSized {
                len: 5,
                elem_size: 0
            })
        );
        assert_eq!(
            byte_size::<u64>(usize::MAX / 4),
            Err(Error::SizeOverflow {
                len: usize::MAX / 4,
                elem_size: 8
            })
        );
    }

    #[test]
    fn element_types_aligned_above_256_bytes_are_refused_before_allocating() {
        #[repr(C, align(256))]
        struct Ok256([u8; 16]);
        #[repr(C, align(512))]
        struct Page512([u8; 16]);
        #[repr(C, align(8192))]
        struct Page([u8; 16]);
        assert_eq!(byte_size::<Ok256>(2), Ok(512));
        for (got, align) in [
            (byte_size::<Page512>(1), 512),
            (byte_size::<Page>(1), 8192),
            (byte_size::<Page>(0), 8192),
        ] {
            assert_eq!(got, Err(Error::OverAligned { align, max: 256 }));
        }
    }

    #[test]
    fn an_address_less_aligned_than_its_type_is_refused() {
        assert_eq!(check_aligned(0x1000, 256), Ok(()));
        assert_eq!(check_aligned(0x1000, 4096), Ok(()));
        assert_eq!(
            check_aligned(0x1100, 512),
            Err(Error::OverAligned {
                align: 512,
                max: 256
            })
        );
    }

    #[test]
    fn more_than_free_is_refused_unless_allowed() {
        assert_eq!(check_capacity(10, 10, false), Ok(()));
        assert_eq!(
            check_capacity(11, 10, false),
            Err(Error::WouldOversubscribe {
                bytes: 11,
                free: 10
            })
        );
        assert_eq!(check_capacity(11, 10, true), Ok(()));
    }
}
