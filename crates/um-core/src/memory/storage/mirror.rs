//! [`Mirror`]: page-locked host memory for the host state, device memory for the stream state,
//! and the copies between them, made only when the side that takes over may hold stale bytes.
//!
//! Its part of each transition:
//!
//! * allocation: `cuMemAllocHost` and `cuMemAlloc` of the same size (the host half freed again
//!   if the device half is refused); free: both halves, as for an orphan; kernels get the
//!   device half;
//! * `DerefMut` marks the host half written (a fresh allocation starts written);
//! * `attach`: the copy of the host half to the device half (`cuMemcpyHtoDAsync`) on the stream,
//!   only if the host may have written since the last copy;
//! * a launch taking the buffer as `&mut` marks the device half written;
//! * `sync`, before the wait: the copy of the device half to the host half
//!   (`cuMemcpyDtoHAsync`), only if a launch took the buffer as `&mut` since `attach`; device
//!   memory keeps no association;
//! * `hand_off`: nothing after the event (device memory has no association to move and follows
//!   no transfer policy), and only between streams of the allocation's own context: another
//!   device's kernels could reach the device half only through peer access, which `um` does not
//!   set up.
//!
//! The constructors (`Managed::from_slice_mirrored` and its siblings) have their own names,
//! because `Managed::from_slice` must keep meaning unified memory.

use std::ffi::{c_uint, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::Zeroable;

use crate::driver;
use crate::driver::context::Context;
use crate::driver::stream::RawStream;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::{Fresh, Managed};
use crate::memory::marker::HostOwned;
use crate::memory::storage::parts::{
    Allocate, Allocation, HasParts, HostVisible, Size, Storage, null_pointer,
};
use crate::reclaim::reaper::Orphan;
use crate::sealed::{Private, Sealed};

/// Storage: page-locked host memory for the host state, device memory for the stream state,
/// with the copies between them made by `attach` and `sync`, and only when needed.
///
/// Explicit copies move bytes faster than managed memory migrates them, and the CPU works
/// faster on pinned memory than on freshly migrated pages (see [`docs/performance.md`](https://github.com/um-rs/um/blob/main/docs/performance.md)); the
/// price is twice the memory (a host and a device copy). Allocate with
/// [`Managed::from_slice_mirrored`] and its siblings; every transition, launch and `sync_all`
/// takes mirrored buffers as it takes unified ones, mixed freely.
#[derive(Debug)]
pub struct Mirror {
    _private: (),
}

/// A mirrored allocation: `MirroredManaged<[f32]>` is `Managed<[f32], HostOwned, Mirror>`
/// (named like [`CoherentManaged`](crate::CoherentManaged), the alias of the coherent storage).
pub type MirroredManaged<T, S = HostOwned> = Managed<T, S, Mirror>;

impl Sealed for Mirror {}
impl HostVisible for Mirror {}
impl Storage for Mirror {
    const NAME: &'static str = "mirror";
    const STREAM_ASSOCIATED: bool = false;
}

/// The device half of a mirrored allocation, and what is known about the two halves.
#[allow(unreachable_pub)]
#[derive(Debug)]
pub struct MirrorParts {
    /// The device allocation (`cuMemAlloc`), as large as the host one.
    device: sys::CUdeviceptr,
    /// The host half may differ from the device half: set by every `DerefMut` and at
    /// allocation, cleared when `attach` enqueues the copy to the device.
    host_dirty: bool,
    /// A launch took the buffer as `&mut` since `attach`: set by the `&mut` kernel argument
    /// (which holds only a shared reference to it, hence atomic), cleared when `sync`
    /// enqueues the copy to the host.
    device_dirty: AtomicBool,
}

impl HasParts for Mirror {
    type Parts = MirrorParts;

    fn admit(_: &Context) -> Result<()> {
        Ok(())
    }

    unsafe fn free(host: NonNull<u8>, parts: &MirrorParts, _: Private) {
        // SAFETY: the caller's guarantees.
        unsafe { free_halves(parts.device, host.as_ptr().cast()) };
    }

    #[inline]
    fn device_ptr(_: NonNull<u8>, parts: &MirrorParts) -> sys::CUdeviceptr {
        parts.device
    }

    #[inline]
    fn footprint(bytes: usize) -> usize {
        2 * bytes
    }

    /// The host may write: the next `attach` copies to the device.
    #[inline]
    fn host_written(parts: &mut MirrorParts, _: Private) {
        parts.host_dirty = true;
    }

    /// The kernel may write: the next `sync` copies the device half back.
    #[inline]
    fn device_written(parts: &MirrorParts, _: Private) {
        parts.device_dirty.store(true, Ordering::Relaxed);
    }

    #[inline]
    fn written_on_device(parts: &MirrorParts) -> bool {
        parts.device_dirty.load(Ordering::Relaxed)
    }

    /// Device memory has no stream association: any graph node may use it.
    fn check_capture(_: &Context) -> Result<()> {
        Ok(())
    }

    /// Enqueues the copy of the host half to the device half on `to`, unless the host has not
    /// written since the last one. The caller retypes the buffer to the stream state right
    /// after, so the CPU cannot touch the host half while the copy may read it.
    unsafe fn attach(
        host: NonNull<u8>,
        a: &mut Allocation<Self>,
        to: RawStream,
        _: c_uint,
        _: Private,
    ) -> Result<()> {
        a.ctx.bind()?;
        let parts = &mut a.parts;
        parts.device_dirty.store(false, Ordering::Relaxed);
        if !parts.host_dirty {
            count(&H2D_SKIPPED);
            return Ok(());
        }
        count(&H2D);
        // SAFETY: the two halves of one live mirror we own, in the host state (the caller's
        // guarantees); the buffer becomes stream-owned (no CPU access) until a `sync` has waited
        // for this stream, and drop waits for it too.
        unsafe {
            driver::memcpy_htod_async(
                parts.device,
                host.as_ptr().cast::<c_void>().cast_const(),
                a.bytes,
                to.handle,
            )
        }?;
        parts.host_dirty = false;
        Ok(())
    }

    /// Enqueues the copy of the device half to the host half on the owning stream, unless no
    /// launch took the buffer as `&mut` since `attach`.
    unsafe fn release(host: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Result<RawStream> {
        let parts = &a.parts;
        if !parts.device_dirty.load(Ordering::Relaxed) {
            count(&D2H_SKIPPED);
            return Ok(RawStream::NONE);
        }
        count(&D2H);
        // SAFETY: the caller's guarantees: nothing reads or writes the host half until the wait
        // that follows (stream-owned), and kernels writing the device half run before this copy
        // in stream order.
        unsafe {
            driver::memcpy_dtoh_async(
                host.as_ptr().cast::<c_void>(),
                parts.device,
                a.bytes,
                a.stream.handle,
            )
        }?;
        parts.device_dirty.store(false, Ordering::Relaxed);
        // A mirror has no association with a stream to keep.
        Ok(RawStream::NONE)
    }

    /// The device half is plain device memory of the allocation's device: another device's
    /// kernels could reach it only through peer access, which `um` does not set up.
    fn check_hand_off(memory: &Context, from: &Context, to: &Context) -> Result<()> {
        if from.same_as(to) && memory.same_as(to) {
            Ok(())
        } else {
            Err(Error::ContextMismatch)
        }
    }

    unsafe fn hand_over(
        _: NonNull<u8>,
        _: &Allocation<Self>,
        _: RawStream,
        _: Private,
    ) -> Result<()> {
        // Device memory has no stream association: ordering B after A is the whole handoff.
        Ok(())
    }

    unsafe fn receive(
        _: NonNull<u8>,
        _: &mut Allocation<Self>,
        _: &Context,
        _: Private,
    ) -> Result<()> {
        // A mirror follows no transfer policy.
        Ok(())
    }

    unsafe fn orphan(host: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Orphan {
        // Addresses, so that the free is `Send`.
        let (device, host) = (a.parts.device, host.as_ptr() as usize);
        let free = move || {
            // SAFETY: `Orphan::new`'s contract: called once, with the context current, once no
            // work can use either half.
            unsafe { free_halves(device, host as *mut c_void) };
        };
        // SAFETY: `free` frees the two halves of this mirror and nothing else; the caller gives
        // them up.
        unsafe { Orphan::new(a.ctx.clone(), free) }
    }
}

impl Allocate for Mirror {
    /// Pinned host memory, and as much device memory. If the device half is refused, the host
    /// half is freed first: a failure leaks nothing.
    fn alloc(_: &Context, size: Size, _: Private) -> Result<(NonNull<u8>, MirrorParts)> {
        let bytes = size.bytes();
        let host = driver::mem_alloc_pinned(bytes)?;
        let Some(host) = NonNull::new(host.cast::<u8>()) else {
            return Err(null_pointer("cuMemAllocHost"));
        };
        let device = match driver::mem_alloc_device(bytes) {
            Ok(device) => device,
            Err(e) => {
                // SAFETY: `host` came from `mem_alloc_pinned` just now and nothing uses it.
                let _ = unsafe { driver::mem_free_pinned(host.as_ptr().cast()) };
                return Err(e);
            }
        };
        let parts = MirrorParts {
            device,
            host_dirty: true,
            device_dirty: AtomicBool::new(false),
        };
        Ok((host, parts))
    }
}

/// Frees both halves of a mirror.
///
/// # Safety
/// `device` and `host` are the two halves of one mirror, freed once, with its context current,
/// and no copy or kernel can still use them.
unsafe fn free_halves(device: sys::CUdeviceptr, host: *mut c_void) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let _ = driver::mem_free(device);
        let _ = driver::mem_free_pinned(host);
    }
}

/// The constructors of mirrored memory: page-locked host memory holding the value, and device
/// memory of the same size, allocated after checking that the GPU has it free. The first
/// `attach` copies the host half to the device.
///
/// They have their own names because `Managed::from_slice` must keep meaning unified memory
/// (a name shared by two storages would make every existing call ambiguous).
impl<T: DeviceCopy> Managed<T, HostOwned, Mirror> {
    /// A mirrored allocation holding `value`.
    pub fn new_mirrored(ctx: &Context, value: T) -> Result<Self> {
        Ok(Fresh::<T, Mirror>::new(ctx, 1)?.value(value))
    }

    /// A mirrored allocation filled with zero bytes.
    pub fn zeroed_mirrored(ctx: &Context) -> Result<Self>
    where
        T: Zeroable,
    {
        Ok(Fresh::<T, Mirror>::new(ctx, 1)?.zeroed())
    }
}

impl<T: DeviceCopy> Managed<[T], HostOwned, Mirror> {
    /// A mirrored allocation of `len` elements, element `i` set to `f(i)`.
    ///
    /// If `f` panics, the allocation leaks (it is never read uninitialised).
    pub fn from_fn_mirrored(ctx: &Context, len: usize, f: impl FnMut(usize) -> T) -> Result<Self> {
        Ok(Fresh::<T, Mirror>::new(ctx, len)?.filled(f))
    }

    /// A mirrored copy of `data`.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// use um_core::{Context, Managed, MirroredManaged, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let data: MirroredManaged<[f32]> = Managed::from_slice_mirrored(&ctx, &[1.0, 2.0, 3.0])?;
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
        Ok(Fresh::<T, Mirror>::new(ctx, len)?.zeroed_slice())
    }
}

thread_local! {
    static H2D: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static H2D_SKIPPED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static D2H: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static D2H_SKIPPED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count(counter: &'static std::thread::LocalKey<std::cell::Cell<u64>>) {
    counter.with(|n| n.set(n.get() + 1));
}

/// The copies mirrored memory made and skipped on one thread (see
/// [`mirror_copies_on_this_thread`](crate::mirror_copies_on_this_thread)). Feature `test-hooks`.
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorCopies {
    /// Host-to-device copies enqueued by `attach`.
    pub to_device: u64,
    /// `attach`es that needed no copy: the host had not written since the last one.
    pub to_device_skipped: u64,
    /// Device-to-host copies enqueued by `sync` (and `sync_all`).
    pub to_host: u64,
    /// `sync`s that needed no copy: no launch took the buffer as `&mut` since `attach`.
    pub to_host_skipped: u64,
}

#[cfg(feature = "test-hooks")]
impl MirrorCopies {
    /// The counts now, on the calling thread.
    pub fn now() -> Self {
        MirrorCopies {
            to_device: H2D.with(std::cell::Cell::get),
            to_device_skipped: H2D_SKIPPED.with(std::cell::Cell::get),
            to_host: D2H.with(std::cell::Cell::get),
            to_host_skipped: D2H_SKIPPED.with(std::cell::Cell::get),
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: MirrorCopies) -> Self {
        MirrorCopies {
            to_device: self.to_device.saturating_sub(earlier.to_device),
            to_device_skipped: self
                .to_device_skipped
                .saturating_sub(earlier.to_device_skipped),
            to_host: self.to_host.saturating_sub(earlier.to_host),
            to_host_skipped: self.to_host_skipped.saturating_sub(earlier.to_host_skipped),
        }
    }
}
