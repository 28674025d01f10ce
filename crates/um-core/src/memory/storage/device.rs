//! [`Device`]: device memory alone (`cuMemAlloc`), with no host side. The CPU never reads or
//! writes it in place, in any state; its contents cross only through explicit copies, each of
//! which waits for itself.
//!
//! Its part of each transition:
//!
//! * allocation: `cuMemAlloc`; free: `cuMemFree`, as for an orphan; kernels get the device
//!   address. The contract's host address is the sentinel [`NO_HOST`], which nothing
//!   dereferences (see `parts.rs`: every host access is bounded by `HostVisible`, which this
//!   storage does not implement);
//! * `attach`, `sync`, `hand_off`: nothing of its own. Device memory has no stream association
//!   to make and no host copy to keep fresh, so the state machine's own steps (the context
//!   check, the wait of `sync`, the event of `hand_off`) are the whole transition;
//! * `hand_off` only between streams of the allocation's own context, as for a mirror's device
//!   half: another device's kernels could reach it only through peer access, which `um` does
//!   not set up;
//! * launches mark nothing; a graph may record it (plain device memory, no association).
//!
//! The constructors (`zeroed_slice_device`, `from_slice_device`) and the copies of the host
//! state (`copy_from_host`, `copy_to_host`, `to_vec`) each wait for their copy before they
//! return: on the calling thread's default stream, so that no other stream's work is waited
//! for (beyond the legacy stream's, which that stream follows).

use std::ffi::{c_uint, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::Zeroable;

use crate::driver;
use crate::driver::context::{Context, refuse_inside_capture, refuse_inside_stream_callback};
use crate::driver::stream::RawStream;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::{Fresh, Managed};
use crate::memory::marker::HostOwned;
use crate::memory::storage::parts::{
    Allocate, Allocation, HasParts, NO_HOST, Size, Storage, null_pointer,
};
use crate::reclaim::reaper::Orphan;
use crate::sealed::{Private, Sealed};

/// Storage: device memory alone (`cuMemAlloc`), with no host side.
///
/// The states and the rules are those of every storage: a stream-owned buffer is reachable
/// only by launches on its stream (and cuBLAS, NCCL and the other libraries' calls on it). What
/// differs is the host state. **Host-owned means that no kernel may touch the memory, not that
/// the CPU may read it**: a `Managed<[T], HostOwned, Device>` has no `Deref`, `DerefMut`,
/// `Index`, `iter` or `Debug` of its contents (they need [`HostVisible`](crate::HostVisible),
/// which this storage does not implement). Its bytes cross only through copies that wait:
/// [`Managed::copy_from_host`], [`Managed::copy_to_host`] and [`Managed::to_vec`], each checked
/// against the buffer's length.
///
/// The transitions cost nothing of their own: `attach` makes no driver call, `sync` only waits
/// for the stream, and `hand_off` is an event recorded on A and waited for on B (between
/// streams of the allocation's own context). For data that lives on the device between
/// kernels and reaches the host rarely, or never.
///
/// Allocate with [`Managed::zeroed_slice_device`] or [`Managed::from_slice_device`].
#[derive(Debug)]
pub struct Device {
    _private: (),
}

/// A device-only allocation: `DeviceManaged<[f32]>` is `Managed<[f32], HostOwned, Device>`
/// (named like [`MirroredManaged`](crate::MirroredManaged)).
pub type DeviceManaged<T, S = HostOwned> = Managed<T, S, Device>;

impl Sealed for Device {}
impl Storage for Device {
    const NAME: &'static str = "device";
    const STREAM_ASSOCIATED: bool = false;
}

/// The device allocation, and whether a copy of it may still run: the part of both storages of
/// device memory ([`Device`], and [`Pooled`], born on a stream).
#[allow(unreachable_pub)]
#[derive(Debug)]
pub struct DeviceParts {
    /// The allocation (`cuMemAlloc`).
    device: sys::CUdeviceptr,
    /// A copy or fill's wait failed (a sticky error): the copy may still run, so the memory is
    /// leaked rather than freed. Set through `&self` by `copy_to_host`, hence atomic.
    unfinished: AtomicBool,
}

impl DeviceParts {
    /// The part of the device allocation at `device`.
    pub(crate) fn at(device: sys::CUdeviceptr) -> Self {
        DeviceParts {
            device,
            unfinished: AtomicBool::new(false),
        }
    }

    /// The device address.
    pub(crate) fn device(&self) -> sys::CUdeviceptr {
        self.device
    }

    /// Marks the memory as possibly still used by a copy whose wait failed: it is never freed.
    pub(crate) fn mark_unfinished(&self) {
        self.unfinished.store(true, Ordering::Relaxed);
    }

    /// Whether a copy's wait failed: the memory must not be freed.
    pub(crate) fn is_unfinished(&self) -> bool {
        self.unfinished.load(Ordering::Relaxed)
    }
}

impl HasParts for Device {
    type Parts = DeviceParts;

    fn admit(_: &Context) -> Result<()> {
        Ok(())
    }

    unsafe fn free(_: NonNull<u8>, parts: &DeviceParts, _: Private) {
        if parts.is_unfinished() {
            return;
        }
        // SAFETY: the caller's guarantees: `parts.device` came from `cuMemAlloc`, is freed once,
        // with its context current, and nothing uses it.
        let _ = unsafe { driver::mem_free(parts.device) };
    }

    #[inline]
    fn device_ptr(_: NonNull<u8>, parts: &DeviceParts) -> sys::CUdeviceptr {
        parts.device
    }

    #[inline]
    fn footprint(bytes: usize) -> usize {
        bytes
    }

    /// Never called: `DerefMut` needs `HostVisible`.
    #[inline]
    fn host_written(_: &mut DeviceParts, _: Private) {}

    /// Nothing to copy back: the device memory is the only copy.
    #[inline]
    fn device_written(_: &DeviceParts, _: Private) {}

    #[inline]
    fn written_on_device(_: &DeviceParts) -> bool {
        false
    }

    /// Device memory has no stream association: any graph node may use it.
    fn check_capture(_: &Context) -> Result<()> {
        Ok(())
    }

    /// Nothing: no association, no copy. The caller retypes the buffer to the stream's.
    unsafe fn attach(
        _: NonNull<u8>,
        _: &mut Allocation<Self>,
        _: RawStream,
        _: c_uint,
        _: Private,
    ) -> Result<()> {
        Ok(())
    }

    /// Nothing before the wait; no association remains.
    unsafe fn release(_: NonNull<u8>, _: &Allocation<Self>, _: Private) -> Result<RawStream> {
        Ok(RawStream::NONE)
    }

    /// Plain device memory of the allocation's device: another device's kernels could reach it
    /// only through peer access, which `um` does not set up.
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
        // No association: ordering B after A (the event) is the whole handoff.
        Ok(())
    }

    unsafe fn receive(
        _: NonNull<u8>,
        _: &mut Allocation<Self>,
        _: &Context,
        _: Private,
    ) -> Result<()> {
        // Device memory follows no transfer policy.
        Ok(())
    }

    unsafe fn orphan(_: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Orphan {
        let device = a.parts.device;
        let unfinished = a.parts.is_unfinished();
        let free = move || {
            if unfinished {
                return;
            }
            // SAFETY: `Orphan::new`'s contract: called once, with the context current, once no
            // work can use the memory.
            let _ = unsafe { driver::mem_free(device) };
        };
        // SAFETY: `free` frees this allocation and nothing else (or nothing, where a copy's
        // wait failed); the caller gives it up.
        unsafe { Orphan::new(a.ctx.clone(), free) }
    }
}

impl Allocate for Device {
    /// Device memory, and [`NO_HOST`] for the host address.
    fn alloc(_: &Context, size: Size, _: Private) -> Result<(NonNull<u8>, DeviceParts)> {
        let device = driver::mem_alloc_device(size.bytes())?;
        if device == 0 {
            return Err(null_pointer("cuMemAlloc"));
        }
        Ok((NO_HOST, DeviceParts::at(device)))
    }
}

/// The `Debug` and the copies of the host state of a storage of device memory with no host side
/// (`Device`, `Pooled`), whose part is a [`DeviceParts`].
macro_rules! device_memory_on_the_host {
    ($storage:ident) => {
        /// Shows the size, never the contents: device memory has no host side to read them
        /// from (a copy that waits does: `to_vec`).
        impl<T: ?Sized> std::fmt::Debug
            for $crate::memory::managed::Managed<T, $crate::memory::marker::HostOwned, $storage>
        {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("Managed")
                    .field("state", &"HostOwned")
                    .field(
                        "storage",
                        &<$storage as $crate::memory::storage::Storage>::NAME,
                    )
                    .field("bytes", &self.size_in_bytes())
                    .finish_non_exhaustive()
            }
        }

        /// The copies of the host state. Each waits for its copy before it returns, on the
        /// calling thread's default stream, and is refused, before any driver call, for a host
        /// slice of another length ([`Error::HostCopyLength`](crate::Error::HostCopyLength)), inside a capture closure and inside
        /// um's stream callback. If a copy fails, the driver's error comes back; where its wait
        /// failed (a sticky error), the memory is leaked rather than freed, since the copy may
        /// still run (and so is `to_vec`'s vector, which it may still write).
        impl<T: cust::memory::DeviceCopy>
            $crate::memory::managed::Managed<[T], $crate::memory::marker::HostOwned, $storage>
        {
            /// Copies `src` over the whole buffer, and **waits** for the copy (`cuMemcpyHtoD`,
            /// then a wait for the calling thread's default stream): when it returns, kernels of
            /// every stream see the new contents. [`Error::HostCopyLength`](crate::Error::HostCopyLength)
            /// unless `src` has exactly
            /// [`len`](Managed::len) elements, before any driver call.
            pub fn copy_from_host(&mut self, src: &[T]) -> $crate::error::Result<()> {
                const WHAT: &str = "copy_from_host";
                $crate::memory::storage::device::check_length(WHAT, self.len(), src.len())?;
                $crate::memory::storage::device::refuse_copy_here(WHAT)?;
                self.context().bind()?;
                // SAFETY: the buffer is host-owned (no kernel or copy uses it) and borrowed
                // mutably; its allocation holds `len` `T`s, as many as `src` (checked), which
                // stays borrowed until the copy has been waited for; its context is current.
                let copied = unsafe {
                    $crate::driver::memcpy_htod_wait(
                        self.device_ptr(),
                        src.as_ptr().cast::<std::ffi::c_void>(),
                        self.size_in_bytes(),
                    )
                };
                self.after_copy(copied)
            }

            /// Copies the whole buffer into `dst`, and **waits** for the copy (`cuMemcpyDtoH`,
            /// then a wait for the calling thread's default stream, so that the bytes are in
            /// `dst` when it returns whatever memory `dst` is: pageable, pinned, or the managed
            /// memory of a host-owned unified buffer, for which the driver does not promise that
            /// the copy alone waits).
            /// [`Error::HostCopyLength`](crate::Error::HostCopyLength) unless `dst` has
            /// exactly [`len`](Managed::len) elements, before any driver call.
            pub fn copy_to_host(&self, dst: &mut [T]) -> $crate::error::Result<()> {
                const WHAT: &str = "copy_to_host";
                $crate::memory::storage::device::check_length(WHAT, self.len(), dst.len())?;
                $crate::memory::storage::device::refuse_copy_here(WHAT)?;
                self.context().bind()?;
                // SAFETY: the buffer is host-owned (no kernel or copy writes it); `dst` holds as
                // many `T`s as the allocation (checked) and is borrowed mutably for the call,
                // which returns only once the copy has completed; the allocation holds `len`
                // initialised `T`s (every constructor wrote them, and only `T`s are written into
                // it), so `dst` holds valid `T`s afterwards; the context is current.
                let copied = unsafe {
                    $crate::driver::memcpy_dtoh_wait(
                        dst.as_mut_ptr().cast::<std::ffi::c_void>(),
                        self.device_ptr(),
                        self.size_in_bytes(),
                    )
                };
                self.after_copy(copied)
            }

            /// The buffer's contents, copied to a new `Vec`; **waits** for the copy (as
            /// [`copy_to_host`](Managed::copy_to_host)).
            pub fn to_vec(&self) -> $crate::error::Result<Vec<T>> {
                const WHAT: &str = "to_vec";
                $crate::memory::storage::device::refuse_copy_here(WHAT)?;
                self.context().bind()?;
                let mut out: Vec<T> = Vec::with_capacity(self.len());
                let spare: &mut [std::mem::MaybeUninit<T>] =
                    &mut out.spare_capacity_mut()[..self.len()];
                // SAFETY: as in `copy_to_host`: the spare capacity holds at least `len` `T`s of
                // writable memory, borrowed for the call, which returns only once the copy
                // completed.
                let copied = unsafe {
                    $crate::driver::memcpy_dtoh_wait(
                        spare.as_mut_ptr().cast::<std::ffi::c_void>(),
                        self.device_ptr(),
                        self.size_in_bytes(),
                    )
                };
                // Where the copy may still run, the vector is leaked with the device memory:
                // the copy may still write it, so it is never freed.
                let mut out = $crate::memory::storage::device::host_side_after_copy(out, copied)
                    .map_err(|failed| self.copy_failed(failed))?;
                // SAFETY: the copy wrote all `len` elements (it succeeded), each the bytes of a
                // valid `T` (the allocation holds only `T`s written as such), and the capacity is
                // `len`.
                unsafe { out.set_len(self.len()) };
                Ok(out)
            }

            /// The result of a copy of the host state; where its wait failed, the memory is
            /// marked so that it is leaked rather than freed (the copy may still run).
            fn after_copy(
                &self,
                done: std::result::Result<(), $crate::driver::WaitFailed>,
            ) -> $crate::error::Result<()> {
                done.map_err(|failed| self.copy_failed(failed))
            }

            /// The error of a failed copy of the host state; where the copy may still run, the
            /// memory is marked so that it is leaked rather than freed.
            fn copy_failed(&self, failed: $crate::driver::WaitFailed) -> $crate::error::Error {
                if failed.may_run {
                    self.allocation().parts.mark_unfinished();
                }
                failed.error
            }
        }
    };
}

pub(crate) use device_memory_on_the_host;

device_memory_on_the_host!(Device);

/// `Err` where a copy that waits may not be made: inside um's stream callback (no CUDA call is
/// allowed there) and on a thread that captures (the driver refuses the copy and the wait, and
/// the refusal would invalidate the capture). Asked before any driver call.
pub(crate) fn refuse_copy_here(what: &'static str) -> Result<()> {
    refuse_inside_stream_callback(what)?;
    refuse_inside_capture(what)
}

/// The host memory `dst` that a copy out of device memory filled (`to_vec`'s vector), once the
/// copy returned `done`: `dst` where it succeeded. Where it failed and may still run, `dst` is
/// leaked, never dropped: the copy may still write it, and freed memory it would write could
/// already be someone else's (as the device memory is leaked, never freed, in that case).
pub(crate) fn host_side_after_copy<V>(
    dst: V,
    done: std::result::Result<(), driver::WaitFailed>,
) -> std::result::Result<V, driver::WaitFailed> {
    match done {
        Ok(()) => Ok(dst),
        Err(failed) => {
            if failed.may_run {
                std::mem::forget(dst);
            }
            Err(failed)
        }
    }
}

/// `Err(`[`Error::HostCopyLength`]`)` unless the host side has as many elements as the buffer.
pub(crate) fn check_length(what: &'static str, buffer: usize, host: usize) -> Result<()> {
    if buffer == host {
        Ok(())
    } else {
        Err(Error::HostCopyLength { what, buffer, host })
    }
}

/// The constructors of device memory. Every one waits for its copy (or fill) before it returns,
/// on the calling thread's default stream, and is refused, before any driver call, inside a
/// capture closure and inside um's stream callback. If the copy fails, the driver's error comes
/// back and the buffer is never read; where its wait failed (a sticky error), the memory is
/// leaked rather than freed, since the copy may still run.
///
/// The constructors have their own names because `Managed::from_slice` must keep meaning
/// unified memory.
impl<T: DeviceCopy> Managed<[T], HostOwned, Device> {
    /// `len` zeroed elements of device memory (`cuMemAlloc`, then `cuMemsetD8Async` on the
    /// calling thread's default stream and a wait for it).
    pub fn zeroed_slice_device(ctx: &Context, len: usize) -> Result<Self>
    where
        T: Zeroable,
    {
        const WHAT: &str = "zeroed_slice_device";
        refuse_copy_here(WHAT)?;
        let buf = Fresh::<T, Device>::new(ctx, len)?;
        // SAFETY: written right below; should that fail, the buffer is never read (dropped, or
        // leaked where the fill may still run).
        let buf = unsafe { buf.into_unwritten_slice() };
        // SAFETY: the fresh allocation of `size_in_bytes` bytes, of this context, which
        // `Fresh::new` made current; nothing else has it. All-zero bytes are a `T` (`Zeroable`).
        let filled = unsafe { driver::memset_zero_wait(buf.device_ptr(), buf.size_in_bytes()) };
        buf.written_by(filled)
    }

    /// A copy of `data` in device memory: `cuMemAlloc`, then the copy, **waited for** before it
    /// returns (`cuMemcpyHtoD` and a wait for the calling thread's default stream). Refuses an
    /// empty `data` (`ZeroSized`), as every constructor does.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// use um_core::{Context, DeviceManaged, Managed, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let data: DeviceManaged<[f32]> = Managed::from_slice_device(&ctx, &[1.0, 2.0, 3.0])?;
    /// let data = ctx.with_stream(StreamOptions::new(), |stream| {
    ///     let data = data.attach(stream)?; // no driver call
    ///     // ... launch kernels on `stream` with `&data` / `&mut data` ...
    ///     data.sync() // waits for the stream; no copy
    /// })?;
    /// assert_eq!(data.to_vec()?, [1.0, 2.0, 3.0]); // a copy that waits; `data[0]` does not compile
    /// # Ok(()) }
    /// ```
    pub fn from_slice_device(ctx: &Context, data: &[T]) -> Result<Self> {
        const WHAT: &str = "from_slice_device";
        refuse_copy_here(WHAT)?;
        let buf = Fresh::<T, Device>::new(ctx, data.len())?;
        // SAFETY: written right below; should that fail, the buffer is never read.
        let buf = unsafe { buf.into_unwritten_slice() };
        // SAFETY: the fresh allocation holds `size_in_bytes` = `size_of_val(data)` bytes (both
        // are `data.len()` `T`s), of this context, made current by `Fresh::new`; `data` is
        // readable for that many bytes and borrowed until the copy has been waited for.
        let copied = unsafe {
            driver::memcpy_htod_wait(
                buf.device_ptr(),
                data.as_ptr().cast::<c_void>(),
                buf.size_in_bytes(),
            )
        };
        buf.written_by(copied)
    }

    /// The buffer, or the error of the copy or fill that was to initialise it: then the buffer
    /// is never read; it is dropped (freed, or leaked where the copy's wait failed).
    fn written_by(self, done: std::result::Result<(), driver::WaitFailed>) -> Result<Self> {
        match done {
            Ok(()) => Ok(self),
            Err(failed) => {
                if failed.may_run {
                    self.allocation().parts.mark_unfinished();
                }
                Err(failed.error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use std::rc::Rc;

    use super::{Device, DeviceParts, check_length, host_side_after_copy, refuse_copy_here};
    use crate::driver::context::{DriverCallback, enter_thread_capture, leave_thread_capture};
    use crate::driver::{WaitFailed, mem_frees_on_this_thread};
    use crate::error::Error;
    use crate::memory::storage::parts::{HasParts, NO_HOST};
    use crate::sealed::PRIVATE;

    #[test]
    fn copies_of_another_length_are_refused_before_the_driver() {
        assert_eq!(check_length("copy_from_host", 5, 5), Ok(()));
        for host in [0, 4, 6, usize::MAX] {
            assert_eq!(
                check_length("copy_to_host", 5, host),
                Err(Error::HostCopyLength {
                    what: "copy_to_host",
                    buffer: 5,
                    host
                })
            );
        }
    }

    /// No copy is even asked of the driver on a thread that captures (it would refuse it, and
    /// the refusal would invalidate the capture) or inside um's stream callback (no CUDA call
    /// is allowed there).
    #[test]
    fn copies_are_refused_inside_a_capture_and_a_stream_callback() {
        assert_eq!(refuse_copy_here("to_vec"), Ok(()));
        enter_thread_capture();
        let inside = refuse_copy_here("to_vec");
        let _last = leave_thread_capture();
        assert_eq!(inside, Err(Error::InsideCapture { what: "to_vec" }));
        {
            let _callback = DriverCallback::enter();
            assert_eq!(
                refuse_copy_here("copy_to_host"),
                Err(Error::InsideDriverCallback {
                    what: "copy_to_host"
                })
            );
        }
        assert_eq!(refuse_copy_here("to_vec"), Ok(()));
    }

    /// The host side of a copy out of device memory (`to_vec`'s vector) is never dropped where
    /// the copy failed and may still run (it may still write it): it is leaked, as the device
    /// memory is. Where the copy failed before it could run, or succeeded, it is dropped or
    /// returned as usual. The `Rc`'s count tells which.
    #[test]
    fn host_memory_a_failed_copy_may_still_write_is_leaked_not_dropped() {
        let failed = |may_run| WaitFailed {
            error: Error::ContextMismatch,
            may_run,
        };
        let held = Rc::new(());
        let kept = host_side_after_copy(Rc::clone(&held), Ok(()));
        assert!(kept.is_ok_and(|k| Rc::ptr_eq(&k, &held)));
        assert_eq!(Rc::strong_count(&held), 1, "returned, then dropped here");
        let refused = host_side_after_copy(Rc::clone(&held), Err(failed(false)));
        assert!(matches!(refused, Err(WaitFailed { may_run: false, .. })));
        assert_eq!(Rc::strong_count(&held), 1, "the copy never ran: dropped");
        let running = host_side_after_copy(Rc::clone(&held), Err(failed(true)));
        assert!(matches!(running, Err(WaitFailed { may_run: true, .. })));
        assert_eq!(
            Rc::strong_count(&held),
            2,
            "the copy may still write it: leaked, never dropped"
        );
    }

    /// Memory that a copy whose wait failed may still write is never freed: the storage's free
    /// makes no `cuMemFree` (counted); the same part before the mark reaches the driver. No
    /// context is current on the test's thread, so that call frees nothing (the driver refuses
    /// it); its address is no allocation anyway.
    #[test]
    fn memory_a_copy_may_still_write_is_leaked_not_freed() {
        let parts = DeviceParts {
            device: 0x1000,
            unfinished: AtomicBool::new(false),
        };
        let before = mem_frees_on_this_thread();
        // SAFETY: no context is current on this thread: the driver refuses the free.
        unsafe { Device::free(NO_HOST, &parts, PRIVATE) };
        assert_eq!(
            mem_frees_on_this_thread(),
            before + 1,
            "the control reaches the driver"
        );
        parts.mark_unfinished();
        assert!(parts.is_unfinished());
        // SAFETY: the free returns before any driver call for an unfinished part.
        unsafe { Device::free(NO_HOST, &parts, PRIVATE) };
        assert_eq!(
            mem_frees_on_this_thread(),
            before + 1,
            "no free of unfinished memory"
        );
        assert_eq!(Device::device_ptr(NO_HOST, &parts), 0x1000);
        assert_eq!(Device::footprint(12), 12);
    }
}
