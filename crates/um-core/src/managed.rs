//! `Managed<T, S>`: one managed allocation, in state `S`.
//!
//! This file holds allocation, host access and freeing; the states and the transitions between
//! them are in [`crate::state`].

use std::marker::PhantomData;
use std::mem::{self, ManuallyDrop};
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::Zeroable;

use crate::asynchronous::Orphan;
use crate::context::Context;
use crate::driver;
use crate::error::{Error, Result};
use crate::state::{HostOwned, State};
use crate::stream::RawStream;
use crate::sys;

/// A managed (unified) allocation holding a `T` (or a `[T]`), in ownership state `S`.
///
/// * `Managed<T, HostOwned>`: the CPU owns it. It dereferences to `T`; no kernel can see it.
/// * `Managed<T, StreamOwned<'s>>`: the stream with brand `'s` owns it. The CPU cannot touch
///   it; kernels launched on that stream, and only those, take it as an argument.
///
/// The state changes only through [`attach`](Managed::attach), [`sync`](Managed::sync) and
/// [`hand_off`](Managed::hand_off), which consume the value and return it in its new state (see
/// [`crate::state`]).
pub struct Managed<T: ?Sized, S: State = HostOwned> {
    ptr: NonNull<T>,
    bytes: usize,
    ctx: Context,
    /// The stream the allocation is associated with in the driver (`RawStream::NONE` when it is
    /// attached to the host). In state `StreamOwned` it is the owning stream.
    stream: RawStream,
    /// The allocation carries the advice of [`Transfer::HostResident`](crate::Transfer).
    host_resident: bool,
    _state: PhantomData<S>,
}

// SAFETY: a `Managed` owns its allocation exclusively (like a `Box`), so moving it to another
// thread moves the `T` with it; the driver calls it makes are thread-safe and bind the context
// first. Where the state is tied to a thread (memory attached to the per-thread default
// stream), `S` is `!Send` and so is the `Managed`.
unsafe impl<T: ?Sized + Send, S: State + Send> Send for Managed<T, S> {}
// SAFETY: `&Managed` gives `&T` (host state) or a kernel argument for the owning stream, whose
// `Stream` is itself `Sync` exactly when `S` is.
unsafe impl<T: ?Sized + Sync, S: State + Sync> Sync for Managed<T, S> {}

/// Checked byte size of `len` elements of `T`, refusing zero.
pub(crate) fn byte_size<T>(len: usize) -> Result<usize> {
    let elem_size = mem::size_of::<T>();
    let bytes = len
        .checked_mul(elem_size)
        .ok_or(Error::SizeOverflow { len, elem_size })?;
    if bytes == 0 {
        return Err(Error::ZeroSized { len, elem_size });
    }
    Ok(bytes)
}

/// The guard before every managed allocation: refuse more than the GPU has free, unless the
/// context allows oversubscription.
pub(crate) fn check_capacity(bytes: usize, free: usize, allow: bool) -> Result<()> {
    if bytes > free && !allow {
        return Err(Error::WouldOversubscribe { bytes, free });
    }
    Ok(())
}

/// Allocates `bytes` (> 0) of managed memory attached to the host, after checking that the GPU
/// has that much free: oversubscribed managed memory can hang a shared GPU.
fn alloc_host_attached(ctx: &Context, bytes: usize) -> Result<NonNull<u8>> {
    ctx.bind()?;
    let (free, _) = driver::mem_info()?;
    check_capacity(bytes, free, ctx.oversubscription_allowed())?;
    let dptr = driver::mem_alloc_managed_host(bytes)?;
    // Managed memory has one address for host and device; the driver never returns 0 on
    // success, but a null check costs nothing.
    NonNull::new(dptr as usize as *mut u8).ok_or(Error::Driver {
        call: "cuMemAllocManaged",
        code: 0,
        name: "CUDA_SUCCESS".to_owned(),
        description: "returned a null pointer".to_owned(),
    })
}

impl<T: DeviceCopy> Managed<T, HostOwned> {
    /// Allocates managed memory attached to the host and moves `value` into it.
    pub fn new(ctx: &Context, value: T) -> Result<Self> {
        let bytes = byte_size::<T>(1)?;
        let ptr = alloc_host_attached(ctx, bytes)?.cast::<T>();
        // SAFETY: `ptr` is a fresh host-accessible allocation of `size_of::<T>()` bytes, aligned
        // for any type (the driver aligns managed allocations to at least 256 bytes).
        unsafe { ptr.as_ptr().write(value) };
        Ok(Self::from_parts(ptr, bytes, ctx.clone()))
    }

    /// Allocates managed memory attached to the host, filled with zero bytes.
    pub fn zeroed(ctx: &Context) -> Result<Self>
    where
        T: Zeroable,
    {
        let bytes = byte_size::<T>(1)?;
        let ptr = alloc_host_attached(ctx, bytes)?;
        // SAFETY: fresh host-accessible allocation of `bytes`; all-zero is a valid `T`
        // (`Zeroable`).
        unsafe { ptr.as_ptr().write_bytes(0, bytes) };
        Ok(Self::from_parts(ptr.cast(), bytes, ctx.clone()))
    }
}

impl<T: DeviceCopy> Managed<[T], HostOwned> {
    /// Allocates `len` elements attached to the host, element `i` set to `f(i)`.
    ///
    /// If `f` panics, the allocation leaks (it is never read uninitialised).
    pub fn from_fn(ctx: &Context, len: usize, mut f: impl FnMut(usize) -> T) -> Result<Self> {
        let bytes = byte_size::<T>(len)?;
        let base = alloc_host_attached(ctx, bytes)?.cast::<T>();
        for i in 0..len {
            // SAFETY: `i < len`, inside the fresh allocation of `len` elements, each written
            // once before the slice is ever read.
            unsafe { base.as_ptr().add(i).write(f(i)) };
        }
        let ptr = NonNull::slice_from_raw_parts(base, len);
        Ok(Self::from_parts(ptr, bytes, ctx.clone()))
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
        let base = alloc_host_attached(ctx, bytes)?;
        // SAFETY: fresh host-accessible allocation of `bytes`; all-zero is a valid `T`.
        unsafe { base.as_ptr().write_bytes(0, bytes) };
        let ptr = NonNull::slice_from_raw_parts(base.cast::<T>(), len);
        Ok(Self::from_parts(ptr, bytes, ctx.clone()))
    }
}

impl<T: ?Sized> Managed<T, HostOwned> {
    fn from_parts(ptr: NonNull<T>, bytes: usize, ctx: Context) -> Self {
        Managed {
            ptr,
            bytes,
            ctx,
            stream: RawStream::NONE,
            host_resident: false,
            _state: PhantomData,
        }
    }
}

impl<T: ?Sized, S: State> Managed<T, S> {
    /// Size of the allocation in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.bytes
    }

    /// The context the memory was allocated in.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The address kernels use (managed memory has one address for host and device).
    pub(crate) fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr.as_ptr().cast::<u8>() as usize as sys::CUdeviceptr
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

    /// Gives the allocation up without freeing it: its address and context, for a free that
    /// waits for its stream without blocking a thread (see [`crate::asynchronous`]).
    pub(crate) fn into_orphan(self) -> Orphan {
        let this = ManuallyDrop::new(self);
        // SAFETY: as in `retype`: `this` is never used or dropped again, and the context is
        // read out exactly once.
        let ctx = unsafe { ptr::read(&this.ctx) };
        Orphan::new(this.device_ptr(), ctx)
    }

    /// The same allocation in state `S2`, associated with `stream`. Only `state.rs` calls this,
    /// once the driver calls that justify the new state have been made.
    pub(crate) fn retype<S2: State>(self, stream: RawStream) -> Managed<T, S2> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the context is read out exactly once,
        // so ownership of the allocation and the context passes to the new value.
        let ctx = unsafe { ptr::read(&this.ctx) };
        Managed {
            ptr: this.ptr,
            bytes: this.bytes,
            ctx,
            stream,
            host_resident: this.host_resident,
            _state: PhantomData,
        }
    }
}

impl<T, S: State> Managed<[T], S> {
    /// Number of elements (metadata: readable in every state).
    pub fn len(&self) -> usize {
        self.ptr.len()
    }

    /// Whether the slice has no elements (never true: empty allocations are refused).
    pub fn is_empty(&self) -> bool {
        self.ptr.len() == 0
    }
}

impl<T: ?Sized> Deref for Managed<T, HostOwned> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: in the host state no kernel can touch the allocation: only stream-owned
        // memory is passed to kernels, and it becomes host-owned only after its stream was
        // synchronized (and, where the device lacks concurrent managed access, re-attached to
        // the host). The memory is host-accessible, initialised by every constructor, and
        // owned exclusively by `self`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for Managed<T, HostOwned> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: ?Sized, S: State> Drop for Managed<T, S> {
    fn drop(&mut self) {
        if S::ON_STREAM {
            // The owner's context: after a `hand_off` to another device it is not the
            // allocation's.
            let owner = crate::state::owner_context(self);
            // While an unfinished async scope is dropped, the memory goes to the reaper instead
            // of being waited for here (see `asynchronous::defer_free`).
            if crate::asynchronous::dropping_scope()
                && crate::asynchronous::defer_free(
                    owner,
                    self.stream,
                    Orphan::new(self.device_ptr(), self.ctx.clone()),
                )
                .is_ok()
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
        // SAFETY: the allocation came from `alloc_host_attached`, `retype` hands ownership on
        // without dropping, so this is the one free; no kernel can use it any more (host state,
        // or its stream just completed).
        let _ = unsafe { driver::mem_free(self.device_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::{byte_size, check_capacity};
    use crate::Error;

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
