//! [`Pooled`]: device memory born on a stream from a [`MemPool`](crate::MemPool)
//! (`cuMemAllocFromPoolAsync`), and freed in stream order (`cuMemFreeAsync`). Like
//! [`Device`](crate::Device) memory it has no host side; unlike it, neither its allocation nor
//! its free waits on the host.
//!
//! Its part of each transition:
//!
//! * allocation: only on a stream, [`Stream::alloc_zeroed`]: the allocation and a zero fill
//!   enqueued on the stream, which owns the buffer from the start (`StreamOwned<'s, K>`); no
//!   host wait. Kernels get the device address;
//! * `attach`, `sync`, `hand_off`: nothing of its own, as for `Device` (no association, no host
//!   copy); `hand_off` within the allocation's context;
//! * drop, stream-owned: `cuMemFreeAsync` on the owning stream, after the work queued there, and
//!   no host wait, where no work queued so far can be aborted (no poison mark of the buffer is
//!   set, and no `Poisoner` of them exists); otherwise the free waits, without blocking a
//!   thread, for the stream to pass this point with every mark unset (a stream callback, then
//!   the reaper), and a poisoned stream's buffer is leaked, as every storage's;
//! * drop, host-owned (after `sync`; it may outlive its stream): `cuMemFreeAsync` on the calling
//!   thread's default stream, at once (no GPU work uses host-owned memory); as for an orphan,
//!   which the reaper frees on its own thread's. Never `cuMemFree`.
//!
//! Every free is made where any free of `um` is made: on a thread that captures, none
//! (rule 197), and inside um's stream callback, the reaper's. The buffer holds a handle of its
//! context, so the context outlives every free enqueued for it.

use std::ffi::c_uint;
use std::ptr::NonNull;

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::Zeroable;

use crate::driver;
use crate::driver::context::{Context, refuse_inside_capture, refuse_inside_stream_callback};
use crate::driver::pool::MemPool;
use crate::driver::stream::{Eager, RawStream, Stream};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::Managed;
use crate::memory::marker::{HostOwned, StreamOwned};
use crate::memory::storage::device::{DeviceParts, device_memory_on_the_host};
use crate::memory::storage::parts::{
    Allocation, HasParts, NO_HOST, Storage, byte_size, check_aligned, null_pointer,
};
use crate::reclaim::reaper::Orphan;
use crate::sealed::{Private, Sealed};

/// Storage: device memory born on a stream from a [`MemPool`] (`cuMemAllocFromPoolAsync`), freed
/// in stream order (`cuMemFreeAsync`), with no host side.
///
/// A buffer of it exists first in the stream state: [`Stream::alloc_zeroed`] enqueues its
/// allocation and a zero fill on the stream and returns it owned by that stream, with no host
/// wait. Its drop enqueues the free on the stream it is owned by, again with no host wait; after
/// `sync` it is host-owned, may outlive its stream, and is freed in the order of the dropping
/// thread's default stream. In between it is device memory like [`Device`](crate::Device)'s: no
/// CPU access in place in any state (no [`HostVisible`](crate::HostVisible)); its contents
/// cross, host-owned, through copies that wait ([`Managed::copy_to_host`], `to_vec`,
/// `copy_from_host`); its transitions make no driver call of their own.
///
/// Allocations are refused inside a capture closure (before any driver call, `InsideCapture`):
/// a graph does not allocate, and a capture stream has no `alloc_zeroed` (it is not
/// [`Eager`]). A buffer born before the capture enters it as any other.
#[derive(Debug)]
pub struct Pooled {
    _private: (),
}

/// Memory of a pool: `PooledManaged<[f32], StreamOwned<'s>>` is
/// `Managed<[f32], StreamOwned<'s>, Pooled>` (named like
/// [`DeviceManaged`](crate::DeviceManaged)).
pub type PooledManaged<T, S = HostOwned> = Managed<T, S, Pooled>;

impl Sealed for Pooled {}
impl Storage for Pooled {
    const NAME: &'static str = "pooled";
    const STREAM_ASSOCIATED: bool = false;
}

impl HasParts for Pooled {
    type Parts = DeviceParts;

    /// A pool was made on the device, which checked that it has the stream-ordered allocator.
    fn admit(_: &Context) -> Result<()> {
        Ok(())
    }

    /// `cuMemFreeAsync` on the calling thread's default stream: no GPU work uses the memory any
    /// more (the caller's guarantee), so the stream it is freed on orders nothing.
    unsafe fn free(_: NonNull<u8>, parts: &DeviceParts, _: Private) {
        if parts.is_unfinished() {
            return;
        }
        // SAFETY: the caller's guarantees: the allocation came from the pool, is freed once,
        // with its context current, and no work uses it; the per-thread handle names a stream of
        // the current context.
        let _ = unsafe { driver::mem_free_async(parts.device(), sys::STREAM_PER_THREAD) };
    }

    #[inline]
    fn device_ptr(_: NonNull<u8>, parts: &DeviceParts) -> sys::CUdeviceptr {
        parts.device()
    }

    #[inline]
    fn footprint(bytes: usize) -> usize {
        bytes
    }

    #[inline]
    fn host_written(_: &mut DeviceParts, _: Private) {}

    #[inline]
    fn device_written(_: &DeviceParts, _: Private) {}

    #[inline]
    fn written_on_device(_: &DeviceParts) -> bool {
        false
    }

    /// Plain device memory, born before the capture: any graph node may use it.
    fn check_capture(_: &Context) -> Result<()> {
        Ok(())
    }

    unsafe fn attach(
        _: NonNull<u8>,
        _: &mut Allocation<Self>,
        _: RawStream,
        _: c_uint,
        _: Private,
    ) -> Result<()> {
        Ok(())
    }

    unsafe fn release(_: NonNull<u8>, _: &Allocation<Self>, _: Private) -> Result<RawStream> {
        Ok(RawStream::NONE)
    }

    /// Device memory of the allocation's device (and of its pool): another device's kernels
    /// could reach it only through access `um` does not grant.
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
        Ok(())
    }

    unsafe fn receive(
        _: NonNull<u8>,
        _: &mut Allocation<Self>,
        _: &Context,
        _: Private,
    ) -> Result<()> {
        Ok(())
    }

    /// Freed by the reaper, once the stream passed its point, on the reaper's default stream.
    unsafe fn orphan(_: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Orphan {
        let device = a.parts.device();
        let unfinished = a.parts.is_unfinished();
        let free = move || {
            if unfinished {
                return;
            }
            // SAFETY: `Orphan::new`'s contract: called once, with the context current, once no
            // work can use the memory.
            let _ = unsafe { driver::mem_free_async(device, sys::STREAM_PER_THREAD) };
        };
        // SAFETY: `free` frees this allocation and nothing else (or nothing, where a copy's
        // wait failed); the caller gives it up.
        unsafe { Orphan::new(a.ctx.clone(), free) }
    }

    const FREES_IN_STREAM_ORDER: bool = true;

    /// `cuMemFreeAsync` on the owning stream.
    unsafe fn free_in_stream_order(_: NonNull<u8>, a: &Allocation<Self>, _: Private) -> bool {
        if a.parts.is_unfinished() {
            // Never freed: the caller's other paths leak it too.
            return false;
        }
        // SAFETY: the caller's guarantees: a live allocation of the pool, stream-owned by
        // `a.stream` (live, its context current), every use of it queued there before this
        // point (or ordered before it by a handoff's event), none after; freed once.
        unsafe { driver::mem_free_async(a.parts.device(), a.stream.handle) }.is_ok()
    }
}

device_memory_on_the_host!(Pooled);

impl<'s, K: Eager> Stream<'s, K> {
    /// `len` zeroed elements of device memory born on this stream from `pool`: the allocation
    /// (`cuMemAllocFromPoolAsync`) and a zero fill (`cuMemsetD8Async`) are enqueued here, and
    /// the buffer is this stream's from the start; **nothing waits on the host**, now or at its
    /// drop (a free enqueued on its owning stream, `cuMemFreeAsync`; see [`Pooled`]).
    ///
    /// Every use of the memory is ordered after its fill: launches on this stream come after
    /// it, a `hand_off` waits for it through the event, and `sync` waits for it.
    ///
    /// Refused before any driver call: a poisoned stream (`StreamPoisoned`), a pool of another
    /// context (`ContextMismatch`), an empty or overflowing size (`ZeroSized`, `SizeOverflow`),
    /// a `T` aligned above 256 bytes (`OverAligned`), inside a capture closure, where the driver
    /// would refuse the allocation and the refusal would invalidate the capture
    /// (`InsideCapture`), and inside um's stream callback (`InsideDriverCallback`). A pool out
    /// of memory is the driver's `CUDA_ERROR_OUT_OF_MEMORY`.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// use um_core::{Context, MemPool, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let pool = MemPool::device_default(&ctx)?;
    /// let out = ctx.with_stream(StreamOptions::new(), |stream| {
    ///     let scratch = stream.alloc_zeroed::<f32>(&pool, 1 << 20)?; // no host wait
    ///     // ... launch kernels on `stream` with `&scratch` / `&mut scratch` ...
    ///     drop(scratch); // freed after those kernels, in the stream's order: no host wait
    ///     let result = stream.alloc_zeroed::<f32>(&pool, 4)?;
    ///     // ... a kernel writes `result` ...
    ///     result.sync()?.to_vec() // waits for the stream, then a copy that waits
    /// })?;
    /// assert_eq!(out.len(), 4);
    /// # Ok(()) }
    /// ```
    pub fn alloc_zeroed<T: DeviceCopy + Zeroable>(
        &self,
        pool: &MemPool,
        len: usize,
    ) -> Result<Managed<[T], StreamOwned<'s, K>, Pooled>> {
        const WHAT: &str = "a stream-ordered allocation";
        refuse_inside_stream_callback(WHAT)?;
        refuse_inside_capture(WHAT)?;
        self.check_not_poisoned()?;
        if !pool.context().same_as(self.context()) {
            return Err(Error::ContextMismatch);
        }
        let size = byte_size::<T>(len)?;
        self.context().bind()?;
        let stream = self.raw();
        // SAFETY: the pool is alive (borrowed) and of this stream's context, which is current;
        // the stream is alive for 's and not capturing (an eager kind, and no capture of `um`
        // is open on this thread); `size` > 0.
        let device =
            unsafe { driver::mem_alloc_from_pool_async(size.bytes(), pool.raw(), stream.handle) }?;
        if device == 0 {
            return Err(null_pointer("cuMemAllocFromPoolAsync"));
        }
        // SAFETY: the allocation was just enqueued on this stream (brand 's), of this context,
        // of `size` bytes, room for `len` `T`s; its elements are written by the fill enqueued
        // below, before any other use (or, should that fail, it is dropped unread).
        let buf = unsafe {
            Managed::<[T], StreamOwned<'s, K>, Pooled>::born_on(
                self,
                NO_HOST,
                DeviceParts::at(device),
                size,
                len,
            )
        };
        // A misaligned address (the driver aligns its allocations to at least 256 bytes, but
        // every address is checked): the buffer is dropped, freed in the stream's order.
        check_aligned(device as usize, size.align())?;
        // SAFETY: the allocation of `size` bytes, enqueued on this stream before the fill, used
        // by no other work yet; all-zero bytes are a `T` (`Zeroable`).
        unsafe { driver::memset_zero_async(device, size.bytes(), stream.handle) }?;
        Ok(buf)
    }
}
