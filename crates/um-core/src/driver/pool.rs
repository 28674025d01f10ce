//! [`MemPool`]: a memory pool of one device (the stream-ordered allocator's), from which
//! buffers are born on a stream (`Stream::alloc_zeroed`, in `memory/storage/pooled.rs`).
//!
//! A pool hands out device memory at a point of a stream (`cuMemAllocFromPoolAsync`) and takes
//! it back at a point of a stream (`cuMemFreeAsync`), with no host wait at either end. Freed
//! memory stays reserved by the pool, for later allocations, up to its release threshold; the
//! rest goes back to the system at the next synchronization. The driver reuses memory only where
//! the free is ordered before the new allocation (the same stream, an event, or a dependency
//! it inserts itself), or once the free has completed.

use std::sync::Arc;

use crate::driver;
use crate::driver::context::{
    Context, in_driver_callback, keep_for_capture_end, refuse_inside_stream_callback,
    thread_is_capturing,
};
use crate::driver::sys;
use crate::error::{Error, Result};

/// A memory pool of one device: the device's default pool, or one of its own. Cloning is cheap
/// (a reference count); every clone names the same pool.
///
/// Buffers born from it ([`Stream::alloc_zeroed`](crate::Stream::alloc_zeroed), storage
/// [`Pooled`](crate::Pooled)) are freed in stream order (`cuMemFreeAsync`); a pool of its own
/// ([`MemPool::new`]) is destroyed with its last handle, and the driver releases its memory once
/// the last buffer born from it has been freed, so handles and buffers may be dropped in any
/// order.
#[derive(Clone)]
pub struct MemPool {
    inner: Arc<Inner>,
}

struct Inner {
    ctx: Context,
    handle: sys::CUmemoryPool,
    /// Made by `MemPool::new` (destroyed at the end), not the device's default pool.
    own: bool,
}

// SAFETY: a pool handle is a driver token that any thread may use (the driver synchronizes the
// pool's own state); `Inner` is never mutated after it is made.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.own {
            return;
        }
        let (ctx, handle) = (self.ctx.clone(), self.handle);
        let destroy = move || {
            if ctx.bind().is_ok() {
                // SAFETY: made by `MemPool::new`, destroyed once, here; nothing names it after
                // (every handle is gone). Allocations still outstanding stay valid.
                let _ = unsafe { driver::mem_pool_destroy(handle) };
            }
        };
        if in_driver_callback() {
            // No CUDA call is allowed inside um's stream callback: the pool is leaked.
            return;
        }
        if thread_is_capturing() {
            // On a thread that captures, um destroys nothing: once its captures have ended.
            keep_for_capture_end(Box::new(destroy));
        } else {
            destroy();
        }
    }
}

impl MemPool {
    /// The default pool of `ctx`'s device (`cuDeviceGetDefaultMemPool`), the one every
    /// `cudaMallocAsync` of the process uses on the device. Never destroyed; settings made on
    /// it ([`set_release_threshold`](MemPool::set_release_threshold)) are the process's.
    ///
    /// [`Error::MemoryPoolsUnsupported`] where the device has no stream-ordered allocator.
    pub fn device_default(ctx: &Context) -> Result<MemPool> {
        admit(ctx)?;
        let handle = driver::mem_pool_default(ctx.device())?;
        Ok(MemPool::of(ctx, handle, false))
    }

    /// A new pool of device memory on `ctx`'s device (`cuMemPoolCreate`: pinned device memory,
    /// not exportable), destroyed when its last handle is dropped.
    ///
    /// [`Error::MemoryPoolsUnsupported`] where the device has no stream-ordered allocator.
    pub fn new(ctx: &Context) -> Result<MemPool> {
        admit(ctx)?;
        let handle = driver::mem_pool_create(ctx.device())?;
        Ok(MemPool::of(ctx, handle, true))
    }

    fn of(ctx: &Context, handle: sys::CUmemoryPool, own: bool) -> MemPool {
        MemPool {
            inner: Arc::new(Inner {
                ctx: ctx.clone(),
                handle,
                own,
            }),
        }
    }

    /// The context of the pool's device.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The driver's handle (`CUmemoryPool`), for the stream-ordered allocations of this crate.
    pub(crate) fn raw(&self) -> sys::CUmemoryPool {
        self.inner.handle
    }

    /// Sets how many reserved bytes the pool keeps at a synchronization (a stream, event or
    /// context wait) instead of releasing them to the system
    /// (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`; 0, the driver's default, releases every unused
    /// byte; `u64::MAX` keeps them all).
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.bound()?;
        // SAFETY: a live pool (its handle is alive while `self` is); the attribute is of type
        // `cuuint64_t` and may be set.
        unsafe { driver::mem_pool_set_u64(self.raw(), sys::MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes) }
    }

    /// The release threshold (see [`set_release_threshold`](MemPool::set_release_threshold)).
    pub fn release_threshold(&self) -> Result<u64> {
        self.get(sys::MEMPOOL_ATTR_RELEASE_THRESHOLD)
    }

    /// Bytes of device memory the pool holds now, in use or kept for reuse
    /// (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`).
    pub fn reserved_bytes(&self) -> Result<u64> {
        self.get(sys::MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// Bytes of the pool in use by allocations now (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`): a
    /// buffer's bytes count from its allocation until its free has been reached in its stream.
    pub fn used_bytes(&self) -> Result<u64> {
        self.get(sys::MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    fn get(&self, attr: std::ffi::c_int) -> Result<u64> {
        self.bound()?;
        // SAFETY: a live pool; the attributes read here are of type `cuuint64_t`.
        unsafe { driver::mem_pool_get_u64(self.raw(), attr) }
    }

    /// Refuses inside um's stream callback, and makes the pool's context current.
    fn bound(&self) -> Result<()> {
        refuse_inside_stream_callback("a memory pool's attribute")?;
        self.inner.ctx.bind()
    }
}

impl std::fmt::Debug for MemPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool")
            .field("device", &self.inner.ctx.info().ordinal)
            .field("default", &!self.inner.own)
            .finish_non_exhaustive()
    }
}

/// `Ok` where `ctx`'s device has the stream-ordered allocator
/// (`CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`); refused inside um's stream callback.
fn admit(ctx: &Context) -> Result<()> {
    refuse_inside_stream_callback("a memory pool")?;
    ctx.bind()?;
    if driver::device_attribute(ctx.device(), sys::ATTR_MEMORY_POOLS_SUPPORTED)? == 0 {
        return Err(Error::MemoryPoolsUnsupported {
            device: ctx.info().ordinal,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use crate::driver::sys::MemPoolProps;

    /// `CUmemPoolProps` as `cuda.h` lays it out (CUDA 11.2 to 13): the driver reads 88 bytes,
    /// the location at 8, the size limit at 24, the reserved bytes, which must be zero, from 34.
    #[test]
    fn pool_properties_have_the_drivers_layout_and_zero_reserved_bytes() {
        assert_eq!(size_of::<MemPoolProps>(), 88);
        assert_eq!(align_of::<MemPoolProps>(), 8);
        assert_eq!(offset_of!(MemPoolProps, handle_types), 4);
        assert_eq!(offset_of!(MemPoolProps, location), 8);
        assert_eq!(offset_of!(MemPoolProps, win32_security_attributes), 16);
        assert_eq!(offset_of!(MemPoolProps, max_size), 24);
        assert_eq!(offset_of!(MemPoolProps, usage), 32);
        assert_eq!(offset_of!(MemPoolProps, reserved), 34);
        let p = MemPoolProps::device(3);
        assert_eq!(
            (p.alloc_type, p.handle_types),
            (1, 0),
            "pinned, not exportable"
        );
        assert_eq!((p.location.kind, p.location.id), (1, 3), "on device 3");
        assert!(p.win32_security_attributes.is_null());
        assert_eq!((p.max_size, p.usage), (0, 0));
        assert!(p.reserved.iter().all(|b| *b == 0));
    }
}
