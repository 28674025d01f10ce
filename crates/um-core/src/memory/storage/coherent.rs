//! [`Coherent`]: CUDA managed memory attached globally, on devices with concurrent managed access
//! only.
//!
//! Its part of each transition:
//!
//! * allocation: `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`, refused unless every device of the
//!   process has concurrent managed access; free, kernel address and orphan as for [`Unified`];
//! * `attach`: no association call, only the stream's [`Transfer`](crate::Transfer) policy;
//! * `sync`, before the wait: the owner's policy; the CPU may touch globally attached memory
//!   while other streams run kernels, because the device has concurrent managed access;
//! * `hand_off`, after the event: only B's policy (the event is the whole ordering);
//! * launches mark nothing.
//!
//! The constructors have their own names for the reason mirrored memory's do:
//! `Managed::from_slice` keeps meaning unified memory.

use std::ffi::c_uint;
use std::ptr::NonNull;

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::Zeroable;

use crate::driver::context::{Context, device_lacking_concurrent_access};
use crate::driver::stream::RawStream;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::{Fresh, Managed};
use crate::memory::marker::HostOwned;
use crate::memory::storage::parts::{Allocate, Allocation, HasParts, HostVisible, Size, Storage};
use crate::memory::storage::transfer::{self, Advice};
use crate::memory::storage::unified::{Unified, managed_alloc, managed_orphan};
use crate::reclaim::reaper::Orphan;
use crate::sealed::{Private, Sealed};

/// Storage: CUDA managed memory attached globally (`CU_MEM_ATTACH_GLOBAL`), for devices with
/// concurrent managed access (every Pascal-or-later GPU on Linux); its constructors refuse
/// other devices with [`Error::NeedsConcurrentManagedAccess`], and refuse every device while
/// any device of the process lacks it (globally attached memory is reachable from all of them).
///
/// The states and the rules are those of [`Unified`]: a stream-owned buffer is reachable only
/// by launches on its stream, the CPU only in the host state. What differs is that `um` never
/// changes the driver's stream association. `cuStreamAttachMemAsync` is stream-ordered, and
/// each one held both streams of a two-stage pipeline for 34 to 57 µs on an H200 (the C++
/// probe `bench/pipeline_probe.cu`, [`docs/performance.md`](https://github.com/um-rs/um/blob/main/docs/performance.md)), and the first one in a process made
/// every later launch of the process cost more host time. Without it:
/// * `attach` makes no driver call besides the stream's [`Transfer`](crate::Transfer) policy;
/// * `sync` waits for the owning stream (the CPU may touch globally attached memory while
///   other streams run kernels, because the device has concurrent managed access);
/// * `hand_off` is an event recorded on A and waited for on B, on one device or across devices.
///
/// The association's promise to the driver ("only kernels of this stream touch it") is the
/// promise the brands already keep, so dropping the association loses no check. It loses the
/// driver's freedom to let the CPU use the memory while the owning stream is busy on devices
/// *without* concurrent access, which is why those devices are refused.
///
/// Allocate with [`Managed::from_slice_coherent`] and its siblings.
#[derive(Debug)]
pub struct Coherent {
    _private: (),
}

/// A coherent allocation: `CoherentManaged<[f32]>` is `Managed<[f32], HostOwned, Coherent>`
/// (named like [`MirroredManaged`](crate::MirroredManaged), the alias of the mirrored storage).
pub type CoherentManaged<T, S = HostOwned> = Managed<T, S, Coherent>;

impl Sealed for Coherent {}
impl HostVisible for Coherent {}
impl Storage for Coherent {
    const NAME: &'static str = "coherent";
    const STREAM_ASSOCIATED: bool = false;
}

/// Managed memory as [`Unified`] has it, but never attached to a stream.
impl HasParts for Coherent {
    type Parts = Advice;

    /// Concurrent managed access on `ctx`'s device (as `ctx` reports it: the emulated mode of
    /// `ContextOptions` reports none), and on every device of the process.
    fn admit(ctx: &Context) -> Result<()> {
        let info = ctx.info();
        if !info.concurrent_managed_access {
            return Err(Error::NeedsConcurrentManagedAccess {
                device: info.ordinal,
            });
        }
        if let Some(device) = device_lacking_concurrent_access()? {
            return Err(Error::NeedsConcurrentManagedAccess { device });
        }
        Ok(())
    }

    unsafe fn free(host: NonNull<u8>, parts: &Advice, token: Private) {
        // SAFETY: the caller's guarantees; the allocation is managed memory, as Unified's.
        unsafe { Unified::free(host, parts, token) }
    }

    #[inline]
    fn device_ptr(host: NonNull<u8>, parts: &Advice) -> sys::CUdeviceptr {
        Unified::device_ptr(host, parts)
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

    /// Globally attached memory is reachable from every stream, a graph's own included; its
    /// constructors already required concurrent managed access.
    fn check_capture(_: &Context) -> Result<()> {
        Ok(())
    }

    unsafe fn attach(
        host: NonNull<u8>,
        a: &mut Allocation<Self>,
        to: RawStream,
        _: c_uint,
        _: Private,
    ) -> Result<()> {
        // The memory keeps its global association: no attach, the policy only.
        let ptr = Self::device_ptr(host, &a.parts);
        // SAFETY: the caller's guarantees.
        unsafe { transfer::on_attach(ptr, a.bytes, &a.ctx, &mut a.parts, to) }
    }

    unsafe fn release(host: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Result<RawStream> {
        let ptr = Self::device_ptr(host, &a.parts);
        // SAFETY: the caller's guarantees.
        unsafe { transfer::on_release(ptr, a.bytes, &a.ctx, a.stream) }?;
        Ok(a.stream)
    }

    fn check_hand_off(_: &Context, _: &Context, _: &Context) -> Result<()> {
        Ok(())
    }

    unsafe fn hand_over(
        _: NonNull<u8>,
        _: &Allocation<Self>,
        _: RawStream,
        _: Private,
    ) -> Result<()> {
        // Still attached globally: B's wait for A's event is the whole handoff.
        Ok(())
    }

    unsafe fn receive(
        host: NonNull<u8>,
        a: &mut Allocation<Self>,
        to_ctx: &Context,
        _: Private,
    ) -> Result<()> {
        let ptr = Self::device_ptr(host, &a.parts);
        // SAFETY: the caller's guarantees.
        unsafe { transfer::on_hand_off(ptr, a.bytes, &a.ctx, &mut a.parts, to_ctx, a.stream) }
    }

    unsafe fn orphan(host: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Orphan {
        // SAFETY: the caller's guarantees; the allocation is managed memory, as Unified's.
        unsafe { managed_orphan(Self::device_ptr(host, &a.parts), &a.ctx) }
    }
}

impl Allocate for Coherent {
    fn alloc(_: &Context, size: Size, _: Private) -> Result<(NonNull<u8>, Advice)> {
        managed_alloc(size, true)
    }
}

impl<T: DeviceCopy> Managed<T, HostOwned, Coherent> {
    /// A coherent allocation holding `value`.
    pub fn new_coherent(ctx: &Context, value: T) -> Result<Self> {
        Ok(Fresh::<T, Coherent>::new(ctx, 1)?.value(value))
    }

    /// A coherent allocation filled with zero bytes.
    pub fn zeroed_coherent(ctx: &Context) -> Result<Self>
    where
        T: Zeroable,
    {
        Ok(Fresh::<T, Coherent>::new(ctx, 1)?.zeroed())
    }
}

impl<T: DeviceCopy> Managed<[T], HostOwned, Coherent> {
    /// A coherent allocation of `len` elements, element `i` set to `f(i)`.
    ///
    /// If `f` panics, the allocation leaks (it is never read uninitialised).
    pub fn from_fn_coherent(ctx: &Context, len: usize, f: impl FnMut(usize) -> T) -> Result<Self> {
        Ok(Fresh::<T, Coherent>::new(ctx, len)?.filled(f))
    }

    /// A coherent copy of `data`.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// use um_core::{CoherentManaged, Context, Managed, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let data: CoherentManaged<[f32]> = Managed::from_slice_coherent(&ctx, &[1.0, 2.0])?;
    /// let data = ctx.with_stream_set(2, StreamOptions::new(), |s| {
    ///     let data = data.attach(&s[0])?; // no driver call
    ///     // ... launches on s[0] ...
    ///     let data = data.hand_off(&s[1])?; // an event: s[1] waits for s[0] on the GPU
    ///     // ... launches on s[1] ...
    ///     data.sync()
    /// })?;
    /// assert_eq!(data[1], 2.0);
    /// # Ok(()) }
    /// ```
    pub fn from_slice_coherent(ctx: &Context, data: &[T]) -> Result<Self> {
        Self::from_fn_coherent(ctx, data.len(), |i| data[i])
    }

    /// A coherent allocation of `len` zeroed elements.
    pub fn zeroed_slice_coherent(ctx: &Context, len: usize) -> Result<Self>
    where
        T: Zeroable,
    {
        Ok(Fresh::<T, Coherent>::new(ctx, len)?.zeroed_slice())
    }
}
