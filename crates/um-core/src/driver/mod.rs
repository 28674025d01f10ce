//! The driver layer: everything that talks to the CUDA driver, and nothing about memory
//! ownership.
//!
//! This file is the result layer: each driver call `um` makes, wrapped so that it returns
//! [`Result`]. Every `unsafe` block of the crate that calls the driver lives here or names the
//! invariant it relies on; the safe types call only these functions. Below it is [`sys`] (the
//! raw entry points); beside it, the objects built on it: contexts ([`context`], [`options`]),
//! modules and kernels ([`module`]), streams ([`stream`]), events ([`event`]), the timing
//! of the device's work ([`timing`]) and memory pools ([`pool`]).

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::ptr;

use crate::error::{Error, ErrorKind, Result};

pub(crate) mod capture_count;
pub(crate) mod context;
pub(crate) mod event;
pub(crate) mod foreign;
pub(crate) mod module;
// The CPU model of the driver, in place of libcuda under the feature (`sys.rs` resolves to it).
#[cfg(feature = "model")]
pub(crate) mod model;
pub(crate) mod options;
pub(crate) mod order;
pub(crate) mod poison;
pub(crate) mod pool;
pub(crate) mod stream;
pub(crate) mod sys;
pub(crate) mod timing;

/// Turns a raw `CUresult` into `Ok` or a [`Error::Driver`] naming `call`.
#[inline]
pub(crate) fn check(call: &'static str, code: i32) -> Result<()> {
    if code == sys::SUCCESS {
        return Ok(());
    }
    Err(driver_error(call, code))
}

#[cold]
pub(crate) fn driver_error(call: &'static str, code: i32) -> Error {
    let (name, description) = error_strings(code);
    if code == sys::ERROR_NO_DEVICE || name == "CUDA_ERROR_STUB_LIBRARY" {
        return Error::NoDevice { call, name };
    }
    Error::Driver {
        call,
        code,
        name,
        description,
    }
}

/// Whether `e` is the driver's refusal of a call because of a stream capture (codes 900 to 908:
/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and its siblings), as opposed to an error of the work
/// itself. A refused call did nothing: a refused free freed nothing, a refused query says
/// nothing about the stream.
pub(crate) fn is_capture_refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::Driver { code, .. }
            if (sys::ERROR_STREAM_CAPTURE_UNSUPPORTED..=sys::ERROR_STREAM_CAPTURE_WRONG_THREAD)
                .contains(code)
    )
}

// Here rather than in `error.rs`, which names nothing of the driver: the codes are its own.
impl Error {
    /// Whether this is the driver's refusal of a call because of a stream capture
    /// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and its siblings, codes 900 to 908), as opposed
    /// to an error of the work itself: a call refused so did nothing (a refused free freed
    /// nothing), and a refused query says nothing about the stream. It does not mean the stream
    /// failed: a library that waits or polls should not take it for a fault of the work (and
    /// abort, or leak, because of it).
    pub fn is_capture_refusal(&self) -> bool {
        is_capture_refusal(self)
    }

    /// The coarse kind of this error, for a `match` on the common cases ([`ErrorKind`] lists
    /// which variants each kind holds). A driver failure is classified by its code: out of
    /// memory, a sticky fault ([`ErrorKind::Poisoned`]), a refusal because of a capture
    /// ([`ErrorKind::NotHere`]), else [`ErrorKind::Driver`] with the code.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Driver { code, .. } => match *code {
                sys::ERROR_OUT_OF_MEMORY => ErrorKind::OutOfMemory,
                c if sys::STICKY_ERRORS.contains(&c) => ErrorKind::Poisoned,
                _ if is_capture_refusal(self) => ErrorKind::NotHere,
                c => ErrorKind::Driver(c),
            },
            Error::NoDevice { .. }
            | Error::InvalidDevice { .. }
            | Error::ManagedMemoryUnsupported { .. }
            | Error::PtxUnsupported { .. }
            | Error::HandOffAcrossDevices { .. }
            | Error::NeedsConcurrentManagedAccess { .. }
            | Error::GraphNeedsConcurrentManagedAccess { .. }
            | Error::CollectiveStorage { .. }
            | Error::MemoryPoolsUnsupported { .. } => ErrorKind::Device,
            Error::StreamMismatch { .. }
            | Error::ContextMismatch
            | Error::WrongDevice { .. }
            | Error::InvalidForeignStream { .. }
            | Error::NodeOfAnotherGraph => ErrorKind::WrongOwner,
            Error::ZeroSized { .. }
            | Error::SizeOverflow { .. }
            | Error::OverAligned { .. }
            | Error::EmptyLaunch { .. }
            | Error::BlockTooLarge { .. }
            | Error::LengthMismatch { .. }
            | Error::LengthTooLarge { .. }
            | Error::InvalidGeometry { .. }
            | Error::IndexOverflow { .. }
            | Error::NodeScalarMismatch { .. }
            | Error::InvalidEnvironment { .. }
            | Error::CollectiveSize { .. }
            | Error::InvalidRank { .. }
            | Error::InvalidGroup { .. }
            | Error::InteriorNul { .. }
            | Error::TimeSpan { .. }
            | Error::CopyLengths { .. }
            | Error::FillPattern { .. }
            | Error::HostCopyLength { .. } => ErrorKind::Invalid,
            Error::WouldOversubscribe { .. } => ErrorKind::OutOfMemory,
            Error::CaptureRefusedHere
            | Error::CaptureLostBuffer { .. }
            | Error::ThreadExiting { .. }
            | Error::InsideDriverCallback { .. }
            | Error::InsideCapture { .. } => ErrorKind::NotHere,
            Error::StreamPoisoned | Error::CommunicatorAborted { .. } | Error::GraphEmptied => {
                ErrorKind::Poisoned
            }
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::LibraryNotFound { .. } | Error::NcclUnavailable { .. } => {
                ErrorKind::LibraryMissing
            }
            Error::Library { .. }
            | Error::Nccl { .. }
            | Error::CollectiveMismatch { .. }
            | Error::Bootstrap { .. } => ErrorKind::Library,
        }
    }
}

/// The driver's name and description of `code`, or a placeholder when it does not know it.
fn error_strings(code: i32) -> (String, String) {
    let read = |f: unsafe extern "C" fn(i32, *mut *const c_char) -> i32| {
        let mut text: *const c_char = ptr::null();
        // SAFETY: `text` is a valid out-pointer; the driver answers any `code`, known or not,
        // with a status, and only on success stores a pointer to a static NUL-terminated string.
        let status = unsafe { f(code, &mut text) };
        if status == sys::SUCCESS && !text.is_null() {
            // SAFETY: on success `text` points to a NUL-terminated string the driver keeps alive.
            Some(
                unsafe { CStr::from_ptr(text) }
                    .to_string_lossy()
                    .into_owned(),
            )
        } else {
            None
        }
    };
    (
        read(sys::cuGetErrorName).unwrap_or_else(|| format!("CUDA error {code}")),
        read(sys::cuGetErrorString).unwrap_or_else(|| "unknown to this driver".to_owned()),
    )
}

pub(crate) fn init() -> Result<()> {
    // SAFETY: cuInit takes flags (must be 0) and may be called any number of times.
    check("cuInit", unsafe { sys::cuInit(0) })
}

/// The CUDA version the driver implements, as `(major, minor)`.
pub(crate) fn driver_version() -> Result<(i32, i32)> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut v)
    })?;
    Ok((v / 1000, (v % 1000) / 10))
}

pub(crate) fn device_count() -> Result<usize> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

pub(crate) fn device_get(ordinal: usize) -> Result<sys::CUdevice> {
    let mut dev: sys::CUdevice = 0;
    let ordinal = c_int::try_from(ordinal).unwrap_or(c_int::MAX);
    // SAFETY: `dev` is a valid out-pointer; the driver checks the ordinal.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    Ok(dev)
}

pub(crate) fn device_name(dev: sys::CUdevice) -> Result<String> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` is writable for the length passed; the driver NUL-terminates within it.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev)
    })?;
    // SAFETY: the buffer was zeroed and the driver wrote a NUL-terminated name into it.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

pub(crate) fn device_attribute(dev: sys::CUdevice, attr: c_int) -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer; the driver checks `attr` and `dev`.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, attr, dev)
    })?;
    Ok(v)
}

pub(crate) fn primary_ctx_retain(dev: sys::CUdevice) -> Result<sys::CUcontext> {
    let mut ctx: sys::CUcontext = ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer; `dev` came from cuDeviceGet.
    check("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
    })?;
    Ok(ctx)
}

/// Releases one retain of the device's primary context. Errors are ignored: this runs from
/// `Drop`, and a failed release leaves the context retained, which is safe.
pub(crate) fn primary_ctx_release(dev: sys::CUdevice) {
    // SAFETY: called once per successful `primary_ctx_retain` on the same device.
    let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
}

/// Makes `ctx` current on the calling thread unless it already is.
#[inline]
pub(crate) fn ctx_bind(ctx: sys::CUcontext) -> Result<()> {
    let mut cur: sys::CUcontext = ptr::null_mut();
    // SAFETY: `cur` is a valid out-pointer.
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut cur) })?;
    if cur == ctx {
        return Ok(());
    }
    // SAFETY: `ctx` is a primary context this process holds a retain on (see `Context`).
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// Waits for all work of the current context.
pub(crate) fn ctx_synchronize() -> Result<()> {
    count_host_wait();
    // SAFETY: no arguments; it acts on the current context.
    check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
}

/// Free and total memory of the current context's device, in bytes.
pub(crate) fn mem_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both are valid out-pointers.
    check("cuMemGetInfo", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free, total))
}

/// Allocates `bytes` (> 0) of managed memory attached to the host (`global` false) or
/// globally (`global` true).
pub(crate) fn mem_alloc_managed(bytes: usize, global: bool) -> Result<sys::CUdeviceptr> {
    let mut p: sys::CUdeviceptr = 0;
    let flag = if global {
        sys::MEM_ATTACH_GLOBAL
    } else {
        sys::MEM_ATTACH_HOST
    };
    // SAFETY: `p` is a valid out-pointer; `bytes` > 0 was checked by the caller; the flag is a
    // valid CUmemAttach_flags value for cuMemAllocManaged.
    check("cuMemAllocManaged", unsafe {
        sys::cuMemAllocManaged(&mut p, bytes, flag)
    })?;
    Ok(p)
}

/// Frees managed or device memory.
///
/// # Safety
/// `p` came from [`mem_alloc_managed`] or [`mem_alloc_device`], is freed once, and no
/// kernel or copy can still use it.
pub(crate) unsafe fn mem_free(p: sys::CUdeviceptr) -> Result<()> {
    #[cfg(test)]
    MEM_FREES.with(|n| n.set(n.get() + 1));
    // SAFETY: guaranteed by the caller.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(p) })
}

#[cfg(test)]
thread_local! {
    static MEM_FREES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many `cuMemFree` calls this thread has made (unit tests: a free that must not reach the
/// driver).
#[cfg(test)]
pub(crate) fn mem_frees_on_this_thread() -> u64 {
    MEM_FREES.with(std::cell::Cell::get)
}

/// Allocates `bytes` (> 0) of device memory (`cuMemAlloc`).
pub(crate) fn mem_alloc_device(bytes: usize) -> Result<sys::CUdeviceptr> {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: `p` is a valid out-pointer; `bytes` > 0 was checked by the caller.
    check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut p, bytes) })?;
    Ok(p)
}

/// Allocates `bytes` (> 0) of page-locked host memory (`cuMemAllocHost`), which the device
/// copies to and from at full speed.
pub(crate) fn mem_alloc_pinned(bytes: usize) -> Result<*mut c_void> {
    let mut p: *mut c_void = ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer; `bytes` > 0 was checked by the caller.
    check("cuMemAllocHost", unsafe {
        sys::cuMemAllocHost_v2(&mut p, bytes)
    })?;
    Ok(p)
}

/// Frees page-locked host memory.
///
/// # Safety
/// `p` came from [`mem_alloc_pinned`], is freed once, and no copy can still use it.
pub(crate) unsafe fn mem_free_pinned(p: *mut c_void) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p) })
}

/// Enqueues a copy of `bytes` from host `src` to device `dst` on `s`.
///
/// # Safety
/// `src..src + bytes` is live page-locked host memory that nothing writes, and
/// `dst..dst + bytes` live device memory that nothing else uses, until `s` has run the copy;
/// `s` is a live stream of the current context.
pub(crate) unsafe fn memcpy_htod_async(
    dst: sys::CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    s: sys::CUstream,
) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src, bytes, s)
    })
}

/// Enqueues a copy of `bytes` from device `src` to host `dst` on `s`.
///
/// # Safety
/// `dst..dst + bytes` is live page-locked host memory that nothing reads or writes, and
/// `src..src + bytes` live device memory, until `s` has run the copy; `s` is a live stream of
/// the current context.
pub(crate) unsafe fn memcpy_dtoh_async(
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    bytes: usize,
    s: sys::CUstream,
) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst, src, bytes, s)
    })
}

/// Enqueues a copy of `bytes` from `src` to `dst` on `s` (`cuMemcpyAsync`: the driver tells
/// managed from device memory by the unified address space). On a capturing stream it is
/// recorded as a copy node.
///
/// # Safety
/// `src..src + bytes` and `dst..dst + bytes` are live, device-accessible (managed or device)
/// memory of two allocations, which no other work reads or writes (`dst`) or writes (`src`)
/// until `s` has run the copy; `s` is a live stream (or a special handle) of the current
/// context.
pub(crate) unsafe fn memcpy_async(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    s: sys::CUstream,
) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyAsync", unsafe {
        sys::cuMemcpyAsync(dst, src, bytes, s)
    })
}

/// One value repeated over memory: a byte, a 16-bit or a 32-bit word, and how many of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memset {
    /// `cuMemsetD8Async`: `count` bytes.
    D8 { value: u8, count: usize },
    /// `cuMemsetD16Async`: `count` 16-bit words.
    D16 { value: u16, count: usize },
    /// `cuMemsetD32Async`: `count` 32-bit words.
    D32 { value: u32, count: usize },
}

/// Enqueues the fill `fill` at `dst` on `s` (`cuMemsetD8Async`, `D16`, `D32`). On a capturing
/// stream it is recorded as a memset node.
///
/// # Safety
/// `dst` is live, device-accessible (managed or device) memory of at least the fill's count
/// times its width in bytes, aligned to that width, which no other work reads or writes until
/// `s` has run the fill; `s` is a live stream (or a special handle) of the current context.
pub(crate) unsafe fn memset_async(
    dst: sys::CUdeviceptr,
    fill: Memset,
    s: sys::CUstream,
) -> Result<()> {
    let (call, code) = match fill {
        // SAFETY: guaranteed by the caller (bytes need no alignment).
        Memset::D8 { value, count } => ("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(dst, value, count, s)
        }),
        // SAFETY: guaranteed by the caller (`dst` aligned to 2 bytes).
        Memset::D16 { value, count } => ("cuMemsetD16Async", unsafe {
            sys::cuMemsetD16Async(dst, value, count, s)
        }),
        // SAFETY: guaranteed by the caller (`dst` aligned to 4 bytes).
        Memset::D32 { value, count } => ("cuMemsetD32Async", unsafe {
            sys::cuMemsetD32Async(dst, value, count, s)
        }),
    };
    check(call, code)
}

/// How a copy or fill that waits for itself failed: the driver's error, and whether the copy may
/// still run (its call was made, and it or its wait failed), in which case the memory it writes
/// must not be freed.
pub(crate) struct WaitFailed {
    pub(crate) error: Error,
    pub(crate) may_run: bool,
}

impl WaitFailed {
    fn before(error: Error) -> Self {
        WaitFailed {
            error,
            may_run: false,
        }
    }

    fn after(error: Error) -> Self {
        WaitFailed {
            error,
            may_run: true,
        }
    }
}

/// Fills `bytes` at `dst` with zero bytes on the calling thread's default stream, and waits for
/// the fill.
///
/// # Safety
/// `dst..dst + bytes` is live device memory of the current context that nothing else uses until
/// this returns (or, where the fill may still run, ever).
pub(crate) unsafe fn memset_zero_wait(
    dst: sys::CUdeviceptr,
    bytes: usize,
) -> std::result::Result<(), WaitFailed> {
    // SAFETY: guaranteed by the caller; the per-thread handle names a stream of the current
    // context.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(dst, 0, bytes, sys::STREAM_PER_THREAD)
    })
    .map_err(WaitFailed::before)?;
    stream_synchronize(sys::STREAM_PER_THREAD).map_err(WaitFailed::after)
}

/// Copies `bytes` from host `src` to device `dst` and waits until the device memory holds them.
///
/// `cuMemcpyHtoD` (its per-thread-stream form) returns once the source has been read (staged,
/// for pageable memory), while the transfer to `dst` may still be in flight on the calling
/// thread's default stream; the wait for that stream that follows makes the bytes visible to
/// work of every stream.
///
/// # Safety
/// `src..src + bytes` is readable host memory, and `dst..dst + bytes` live device memory of the
/// current context that nothing else uses until this returns (or, where the copy may still run,
/// ever).
pub(crate) unsafe fn memcpy_htod_wait(
    dst: sys::CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> std::result::Result<(), WaitFailed> {
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2_ptds(dst, src, bytes)
    })
    .map_err(WaitFailed::after)?;
    stream_synchronize(sys::STREAM_PER_THREAD).map_err(WaitFailed::after)
}

/// Copies `bytes` from device `src` to host `dst` and waits until `dst` holds them.
///
/// `cuMemcpyDtoH` (its per-thread-stream form) "returns only once the copy has completed" where
/// `dst` is pageable or pinned host memory. But `dst` may be managed memory (the `DerefMut` of a
/// host-owned unified or coherent buffer), which the unified address space can class as device
/// memory, and "for transfers from device memory to device memory, no host-side synchronization
/// is performed"; the guarantee older references gave for unified memory ("all transfers
/// involving Unified Memory regions are fully synchronous") is no longer in the driver's
/// documentation. So the copy is followed by a wait for the calling thread's default stream,
/// which it was enqueued on: when this returns `Ok`, the bytes are in `dst`, whatever memory
/// `dst` is. On a stream already idle the wait costs a driver call.
///
/// # Safety
/// `dst..dst + bytes` is writable host-accessible memory that nothing else reads or writes until
/// this returns, and `src..src + bytes` live device memory of the current context that nothing
/// writes meanwhile.
pub(crate) unsafe fn memcpy_dtoh_wait(
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    bytes: usize,
) -> std::result::Result<(), WaitFailed> {
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2_ptds(dst, src, bytes)
    })
    .map_err(WaitFailed::after)?;
    stream_synchronize(sys::STREAM_PER_THREAD).map_err(WaitFailed::after)
}

/// The device's default memory pool (`cuDeviceGetDefaultMemPool`), which is never destroyed.
pub(crate) fn mem_pool_default(device: sys::CUdevice) -> Result<sys::CUmemoryPool> {
    let mut pool: sys::CUmemoryPool = ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer; the driver checks `device`.
    check("cuDeviceGetDefaultMemPool", unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, device)
    })?;
    Ok(pool)
}

/// A new pool of pinned device memory on device `device` (`cuMemPoolCreate`), which the caller
/// destroys with [`mem_pool_destroy`].
pub(crate) fn mem_pool_create(device: sys::CUdevice) -> Result<sys::CUmemoryPool> {
    let props = sys::MemPoolProps::device(device);
    let mut pool: sys::CUmemoryPool = ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer; `props` is a valid `CUmemPoolProps` (pinned, on a
    // device, no handle types, reserved bytes zero) that lives for the call.
    check("cuMemPoolCreate", unsafe {
        sys::cuMemPoolCreate(&mut pool, &props)
    })?;
    Ok(pool)
}

/// Destroys a pool made by [`mem_pool_create`]. Allocations still outstanding stay valid: the
/// driver releases the pool's resources once the last of them is freed.
///
/// # Safety
/// `pool` came from [`mem_pool_create`], is destroyed once, and is not used afterwards.
pub(crate) unsafe fn mem_pool_destroy(pool: sys::CUmemoryPool) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuMemPoolDestroy", unsafe { sys::cuMemPoolDestroy(pool) })
}

/// Sets a `cuuint64_t` attribute of a pool.
///
/// # Safety
/// `pool` is a live pool; `attr` is an attribute of value type `cuuint64_t` that may be set.
pub(crate) unsafe fn mem_pool_set_u64(
    pool: sys::CUmemoryPool,
    attr: c_int,
    value: u64,
) -> Result<()> {
    let mut value = value;
    // SAFETY: the caller's guarantees; `value` is a valid `cuuint64_t` for the call.
    check("cuMemPoolSetAttribute", unsafe {
        sys::cuMemPoolSetAttribute(pool, attr, (&raw mut value).cast::<c_void>())
    })
}

/// Reads a `cuuint64_t` attribute of a pool.
///
/// # Safety
/// `pool` is a live pool; `attr` is an attribute of value type `cuuint64_t`.
pub(crate) unsafe fn mem_pool_get_u64(pool: sys::CUmemoryPool, attr: c_int) -> Result<u64> {
    let mut value: u64 = 0;
    // SAFETY: the caller's guarantees; `value` is a valid out-pointer of the attribute's type.
    check("cuMemPoolGetAttribute", unsafe {
        sys::cuMemPoolGetAttribute(pool, attr, (&raw mut value).cast::<c_void>())
    })?;
    Ok(value)
}

/// Enqueues on `s` an allocation of `bytes` (> 0) from `pool` (`cuMemAllocFromPoolAsync`): the
/// address is returned at once, and may be used by work ordered after the allocation on `s`.
///
/// # Safety
/// `pool` is a live pool and `s` a live stream of the current context, not capturing.
pub(crate) unsafe fn mem_alloc_from_pool_async(
    bytes: usize,
    pool: sys::CUmemoryPool,
    s: sys::CUstream,
) -> Result<sys::CUdeviceptr> {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the caller's guarantees; `p` is a valid out-pointer.
    check("cuMemAllocFromPoolAsync", unsafe {
        sys::cuMemAllocFromPoolAsync(&mut p, bytes, pool, s)
    })?;
    Ok(p)
}

/// Enqueues on `s` the free of a pool allocation (`cuMemFreeAsync`): it takes effect once `s`
/// reaches it, with no host wait.
///
/// # Safety
/// `p` came from [`mem_alloc_from_pool_async`] and is freed once; `s` is a live stream (or a
/// special handle) of the current context; every use of the memory is ordered before this
/// point of `s`, and none is enqueued after it.
pub(crate) unsafe fn mem_free_async(p: sys::CUdeviceptr, s: sys::CUstream) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuMemFreeAsync", unsafe { sys::cuMemFreeAsync(p, s) })
}

/// Enqueues on `s` a fill of `bytes` at `dst` with zero bytes (`cuMemsetD8Async`).
///
/// # Safety
/// `dst..dst + bytes` is live device memory of the current context that only work of `s` uses
/// from now on (or work ordered after this point of `s`); `s` is a live stream.
pub(crate) unsafe fn memset_zero_async(
    dst: sys::CUdeviceptr,
    bytes: usize,
    s: sys::CUstream,
) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(dst, 0, bytes, s)
    })
}

/// Enqueues a prefetch of `bytes` at `p` to `to` on `s`.
///
/// # Safety
/// `p..p + bytes` is a live managed allocation and `s` a live stream of the same context.
pub(crate) unsafe fn mem_prefetch(
    p: sys::CUdeviceptr,
    bytes: usize,
    to: sys::MemLocation,
    s: sys::CUstream,
) -> Result<()> {
    TRANSFER_CALLS.with(|n| n.set(n.get() + 1));
    // SAFETY: guaranteed by the caller; a prefetch only moves pages, it never changes contents.
    check("cuMemPrefetchAsync", unsafe {
        sys::cuMemPrefetchAsync_v2(p, bytes, to, 0, s)
    })
}

/// Gives the driver advice about `bytes` at `p` (immediate, not stream-ordered).
///
/// # Safety
/// `p..p + bytes` is a live managed allocation.
pub(crate) unsafe fn mem_advise(
    p: sys::CUdeviceptr,
    bytes: usize,
    advice: std::ffi::c_int,
    location: sys::MemLocation,
) -> Result<()> {
    TRANSFER_CALLS.with(|n| n.set(n.get() + 1));
    // SAFETY: guaranteed by the caller; advice changes placement, never contents.
    check("cuMemAdvise", unsafe {
        sys::cuMemAdvise_v2(p, bytes, advice, location)
    })
}

pub(crate) fn stream_create(flags: c_uint, priority: c_int) -> Result<sys::CUstream> {
    let mut s: sys::CUstream = ptr::null_mut();
    // SAFETY: `s` is a valid out-pointer; flags are CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING.
    check("cuStreamCreateWithPriority", unsafe {
        sys::cuStreamCreateWithPriority(&mut s, flags, priority)
    })?;
    Ok(s)
}

/// The device's stream priorities as `(least, greatest)` (greatest is numerically lower).
pub(crate) fn stream_priority_range() -> Result<(i32, i32)> {
    let (mut least, mut greatest) = (0, 0);
    // SAFETY: both are valid out-pointers.
    check("cuCtxGetStreamPriorityRange", unsafe {
        sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
    })?;
    Ok((least, greatest))
}

/// Destroys a stream created by [`stream_create`]; work already in it still completes.
///
/// # Safety
/// `s` is a stream this crate created and destroys once.
pub(crate) unsafe fn stream_destroy(s: sys::CUstream) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuStreamDestroy", unsafe { sys::cuStreamDestroy_v2(s) })
}

/// The context a stream belongs to (`cuStreamGetCtx`).
///
/// # Safety
/// `s` is a live stream handle (not destroyed).
pub(crate) unsafe fn stream_context(s: sys::CUstream) -> Result<sys::CUcontext> {
    let mut ctx: sys::CUcontext = ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer; `s` is live (the caller's guarantee).
    check("cuStreamGetCtx", unsafe {
        sys::cuStreamGetCtx(s, &mut ctx)
    })?;
    Ok(ctx)
}

pub(crate) fn stream_synchronize(s: sys::CUstream) -> Result<()> {
    count_host_wait();
    // SAFETY: `s` is a live stream handle or one of the special handles (legacy, per-thread);
    // every `Stream` outlives the memory and calls that name it (see `driver/stream.rs`).
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(s)
    })
}

thread_local! {
    static ATTACH_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static HOST_ATTACH_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static TRANSFER_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many of this thread's attach calls were to the host (`CU_MEM_ATTACH_HOST`).
#[cfg(feature = "test-hooks")]
pub(crate) fn host_attach_calls_on_this_thread() -> u64 {
    HOST_ATTACH_CALLS.with(std::cell::Cell::get)
}

/// How many prefetch and advise calls this thread has made.
#[cfg(feature = "test-hooks")]
pub(crate) fn transfer_calls_on_this_thread() -> u64 {
    TRANSFER_CALLS.with(std::cell::Cell::get)
}

/// How many `cuStreamAttachMemAsync` calls this thread has made (tests use it to show that a
/// re-attach to the same stream makes none).
#[cfg(feature = "test-hooks")]
pub(crate) fn attach_calls_on_this_thread() -> u64 {
    ATTACH_CALLS.with(std::cell::Cell::get)
}

thread_local! {
    static HOST_WAITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one host wait for the device (`cuStreamSynchronize`, `cuEventSynchronize`,
/// `cuCtxSynchronize`) made by this thread.
fn count_host_wait() {
    HOST_WAITS.with(|c| c.set(c.get() + 1));
}

/// How many times this thread has waited on the host for the device: `cuStreamSynchronize`,
/// `cuEventSynchronize` and `cuCtxSynchronize` calls (benchmarks use it to show that a loop
/// makes none).
#[cfg(feature = "test-hooks")]
pub(crate) fn host_waits_on_this_thread() -> u64 {
    HOST_WAITS.with(std::cell::Cell::get)
}

thread_local! {
    static EVENTS_CREATED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many `cuEventCreate` calls this thread has made (tests use it to show that a stream's
/// event is made once and reused).
#[cfg(feature = "test-hooks")]
pub(crate) fn events_created_on_this_thread() -> u64 {
    EVENTS_CREATED.with(std::cell::Cell::get)
}

/// Whether all work in `s` has completed.
pub(crate) fn stream_query(s: sys::CUstream) -> Result<bool> {
    // SAFETY: as for `stream_synchronize`.
    let code = unsafe { sys::cuStreamQuery(s) };
    if code == sys::ERROR_NOT_READY {
        return Ok(false);
    }
    check("cuStreamQuery", code).map(|()| true)
}

/// Enqueues `callback(s, status, user_data)` on `s`: the driver calls it once every operation
/// enqueued before it has completed, or with the error the stream met; exactly once either way.
///
/// # Safety
/// `s` is a live stream (or a special handle); `callback` makes no CUDA call and does not
/// unwind; `user_data` stays valid until `callback` has run.
pub(crate) unsafe fn stream_add_callback(
    s: sys::CUstream,
    callback: sys::StreamCallback,
    user_data: *mut c_void,
) -> Result<()> {
    // SAFETY: guaranteed by the caller; flags must be 0.
    check("cuStreamAddCallback", unsafe {
        sys::cuStreamAddCallback(s, callback, user_data, 0)
    })
}

/// Creates an event that a waiting thread sleeps on (blocking sync, no timing).
pub(crate) fn event_create_blocking() -> Result<sys::CUevent> {
    let mut e: sys::CUevent = ptr::null_mut();
    // SAFETY: `e` is a valid out-pointer; the flags are valid CUevent_flags.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, sys::EVENT_BLOCKING_SYNC | sys::EVENT_DISABLE_TIMING)
    })?;
    Ok(e)
}

/// Waits for `e` (sleeping: the event was made with blocking sync); the raw status.
///
/// # Safety
/// `e` is a live event.
pub(crate) unsafe fn event_synchronize_raw(e: sys::CUevent) -> i32 {
    count_host_wait();
    // SAFETY: guaranteed by the caller.
    unsafe { sys::cuEventSynchronize(e) }
}

/// Enqueues the association of the whole allocation at `p` with `s`.
///
/// # Safety
/// `p` is the start of a live managed allocation and `s` a live stream; for
/// `CU_MEM_ATTACH_SINGLE`, `s` is not the NULL stream.
pub(crate) unsafe fn stream_attach(
    s: sys::CUstream,
    p: sys::CUdeviceptr,
    flags: c_uint,
) -> Result<()> {
    ATTACH_CALLS.with(|n| n.set(n.get() + 1));
    if flags == sys::MEM_ATTACH_HOST {
        HOST_ATTACH_CALLS.with(|n| n.set(n.get() + 1));
    }
    // SAFETY: guaranteed by the caller; length 0 means the whole allocation.
    check("cuStreamAttachMemAsync", unsafe {
        sys::cuStreamAttachMemAsync(s, p, 0, flags)
    })
}

/// Creates an event in the current context, for ordering only (`CU_EVENT_DISABLE_TIMING`).
pub(crate) fn event_create() -> Result<sys::CUevent> {
    EVENTS_CREATED.with(|n| n.set(n.get() + 1));
    let mut e: sys::CUevent = ptr::null_mut();
    // SAFETY: `e` is a valid out-pointer; the flag is a valid CUevent_flags value.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, sys::EVENT_DISABLE_TIMING)
    })?;
    Ok(e)
}

/// Captures in `e` the work queued on `s` so far (`cuEventRecord`), without waiting.
///
/// # Safety
/// `e` is a live event and `s` a live stream (or a special handle) of the context `e` was
/// created in.
pub(crate) unsafe fn event_record(e: sys::CUevent, s: sys::CUstream) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuEventRecord", unsafe { sys::cuEventRecord(e, s) })
}

/// Makes all work queued on `s` from now on wait for the work `e` captured, on the device
/// (`cuStreamWaitEvent`); the calling thread does not wait. `e` may belong to another context.
///
/// # Safety
/// `e` is a live event and `s` a live stream (or a special handle).
pub(crate) unsafe fn stream_wait_event(s: sys::CUstream, e: sys::CUevent) -> Result<()> {
    // SAFETY: guaranteed by the caller; flags 0 is CU_EVENT_WAIT_DEFAULT.
    check("cuStreamWaitEvent", unsafe {
        sys::cuStreamWaitEvent(s, e, 0)
    })
}

/// Destroys an event. Work that recorded or waits for it still completes.
///
/// # Safety
/// `e` came from [`event_create`], [`event_create_blocking`] or [`event_create_timed`] and is
/// destroyed once, with its context current.
pub(crate) unsafe fn event_destroy(e: sys::CUevent) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuEventDestroy", unsafe { sys::cuEventDestroy_v2(e) })
}

/// Creates an event in the current context that records a time (timing enabled; a waiting
/// thread sleeps on it).
pub(crate) fn event_create_timed() -> Result<sys::CUevent> {
    EVENTS_CREATED.with(|n| n.set(n.get() + 1));
    let mut e: sys::CUevent = ptr::null_mut();
    // SAFETY: `e` is a valid out-pointer; the flag is a valid CUevent_flags value.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, sys::EVENT_BLOCKING_SYNC)
    })?;
    Ok(e)
}

/// Whether the work `e` captured at its last record has completed (`cuEventQuery`), without
/// waiting; the error the work met, if any.
///
/// # Safety
/// `e` is a live event.
pub(crate) unsafe fn event_query(e: sys::CUevent) -> Result<bool> {
    // SAFETY: guaranteed by the caller.
    let code = unsafe { sys::cuEventQuery(e) };
    if code == sys::ERROR_NOT_READY {
        return Ok(false);
    }
    check("cuEventQuery", code).map(|()| true)
}

/// Waits for the work `e` captured at its last record (`cuEventSynchronize`).
///
/// # Safety
/// `e` is a live event.
pub(crate) unsafe fn event_synchronize(e: sys::CUevent) -> Result<()> {
    count_host_wait();
    // SAFETY: guaranteed by the caller.
    check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(e) })
}

/// The time from `start` to `end` in milliseconds (`cuEventElapsedTime`): negative where `end`
/// completed first. `CUDA_ERROR_NOT_READY` where either has not completed.
///
/// # Safety
/// `start` and `end` are live events of the current context, made with timing enabled.
pub(crate) unsafe fn event_elapsed_ms(start: sys::CUevent, end: sys::CUevent) -> Result<f32> {
    let mut ms: f32 = 0.0;
    // SAFETY: `ms` is a valid out-pointer; the events are the caller's guarantee.
    check("cuEventElapsedTime", unsafe {
        sys::cuEventElapsedTime(&mut ms, start, end)
    })?;
    Ok(ms)
}

pub(crate) fn module_load(image: &CString) -> Result<sys::CUmodule> {
    let mut m: sys::CUmodule = ptr::null_mut();
    // SAFETY: `m` is a valid out-pointer; `image` is a NUL-terminated PTX text that lives for
    // the duration of the call (the driver copies it).
    let code = unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr().cast::<c_void>()) };
    check("cuModuleLoadData", code)?;
    Ok(m)
}

pub(crate) fn is_unsupported_ptx(e: &Error) -> bool {
    matches!(e, Error::Driver { code, .. } if *code == sys::ERROR_UNSUPPORTED_PTX_VERSION)
}

/// # Safety
/// `m` came from [`module_load`], is unloaded once, and no function of it is used afterwards.
pub(crate) unsafe fn module_unload(m: sys::CUmodule) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuModuleUnload", unsafe { sys::cuModuleUnload(m) })
}

pub(crate) fn module_function(m: sys::CUmodule, name: &CStr) -> Result<sys::CUfunction> {
    let mut f: sys::CUfunction = ptr::null_mut();
    // SAFETY: `f` is a valid out-pointer, `m` a loaded module, `name` NUL-terminated.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut f, m, name.as_ptr())
    })?;
    Ok(f)
}

/// The most threads a block of `f` may have (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`).
pub(crate) fn function_max_threads_per_block(f: sys::CUfunction) -> Result<u32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer; `f` is a function of a loaded module (its caller
    // holds the module or the context that keeps it loaded).
    check("cuFuncGetAttribute", unsafe {
        sys::cuFuncGetAttribute(&mut v, sys::FUNC_ATTR_MAX_THREADS_PER_BLOCK, f)
    })?;
    Ok(u32::try_from(v).unwrap_or(0))
}

/// # Safety
/// `params` holds one pointer per kernel parameter, each to a value of the parameter's type and
/// size, and the kernel's accesses through them are valid (see `Stream::launch`).
pub(crate) unsafe fn launch_kernel(
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_mem_bytes: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: guaranteed by the caller; `extra` is NULL.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            f,
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
            shared_mem_bytes,
            stream,
            params.as_mut_ptr(),
            ptr::null_mut(),
        )
    })
}

/// Begins capturing `s` into a graph, in thread-local mode: until the capture ends, this thread
/// may make no potentially unsafe call (an allocation, a free, a wait: the driver refuses them
/// with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates the capture), and work enqueued on
/// `s` is recorded, not run.
///
/// # Safety
/// `s` is a live stream of the current context that this crate created, not capturing.
pub(crate) unsafe fn stream_begin_capture(s: sys::CUstream) -> Result<()> {
    // SAFETY: guaranteed by the caller; the mode is a valid CUstreamCaptureMode.
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(s, sys::CAPTURE_MODE_THREAD_LOCAL)
    })
}

/// Ends the capture begun on `s` (on this thread) and returns its graph, which the caller owns
/// (and destroys with [`graph_destroy`]). An invalidated or unjoined capture is an `Err`, and
/// returns no graph; the stream is no longer capturing either way.
///
/// # Safety
/// `s` is a live stream on which this thread began a capture.
pub(crate) unsafe fn stream_end_capture(s: sys::CUstream) -> Result<sys::CUgraph> {
    let mut g: sys::CUgraph = ptr::null_mut();
    // SAFETY: guaranteed by the caller; `g` is a valid out-pointer.
    let code = unsafe { sys::cuStreamEndCapture(s, &mut g) };
    if code != sys::SUCCESS && !g.is_null() {
        // Not documented to happen; a graph returned with an error is still ours to destroy.
        // SAFETY: the graph was just handed to us and nothing uses it.
        let _ = unsafe { graph_destroy(g) };
    }
    check("cuStreamEndCapture", code)?;
    if g.is_null() {
        return Err(driver_error("cuStreamEndCapture", 901));
    }
    Ok(g)
}

/// The node that the last operation enqueued on the capturing stream `s` added: after a kernel
/// launch, the stream's capture dependencies are exactly that kernel's node. `Ok(None)` when the
/// stream is not actively capturing or the set is not one node.
///
/// Whether `s` is capturing (a capture active or invalidated and not yet ended).
///
/// # Safety
/// `s` is a live stream of the current context.
pub(crate) unsafe fn stream_is_capturing(s: sys::CUstream) -> Result<bool> {
    let mut status: c_uint = 0;
    // SAFETY: `s` is live (the caller); `status` is a valid out-pointer and the others are NULL
    // (each is optional).
    check("cuStreamGetCaptureInfo", unsafe {
        sys::cuStreamGetCaptureInfo_v2(
            s,
            &mut status,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    })?;
    Ok(status != sys::CAPTURE_STATUS_NONE)
}

/// # Safety
/// `s` is a live stream of the current context.
pub(crate) unsafe fn stream_last_captured_node(
    s: sys::CUstream,
) -> Result<Option<sys::CUgraphNode>> {
    let mut status: c_uint = 0;
    let mut deps: *const sys::CUgraphNode = ptr::null();
    let mut count: usize = 0;
    // SAFETY: `s` is live (the caller); every out-pointer is valid or NULL (id and graph are
    // optional).
    check("cuStreamGetCaptureInfo", unsafe {
        sys::cuStreamGetCaptureInfo_v2(
            s,
            &mut status,
            ptr::null_mut(),
            ptr::null_mut(),
            &mut deps,
            &mut count,
        )
    })?;
    if status != sys::CAPTURE_STATUS_ACTIVE || count != 1 || deps.is_null() {
        return Ok(None);
    }
    // SAFETY: on success with an active capture the driver returns `count` (1) valid handles,
    // readable until the next call on the stream; the handle is copied out at once.
    Ok(Some(unsafe { *deps }))
}

/// Makes the calling thread's capture mode relaxed until the guard is dropped, then restores the
/// mode it had: for the one potentially unsafe call `um` makes while capturing, the lazy load of
/// a kernel's module (which, made in thread-local mode, invalidates the capture). Loading a
/// module enqueues nothing on any stream, so nothing of it belongs in the graph.
pub(crate) struct RelaxedCapture {
    previous: c_uint,
}

impl RelaxedCapture {
    pub(crate) fn enter() -> Result<RelaxedCapture> {
        let mut mode = sys::CAPTURE_MODE_RELAXED;
        // SAFETY: `mode` is a valid in-out pointer holding a valid CUstreamCaptureMode.
        check("cuThreadExchangeStreamCaptureMode", unsafe {
            sys::cuThreadExchangeStreamCaptureMode(&mut mode)
        })?;
        Ok(RelaxedCapture { previous: mode })
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: as in `enter`; restores the mode `enter` replaced.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

/// Puts the calling thread in thread-local capture mode for good: a capture begun on another
/// thread, in whatever mode (global, by another library), no longer restricts its calls. For
/// um's own threads, which never capture: the reaper, which frees, and the event thread, which
/// waits. Best effort: where the driver refuses, the mode stays the default (global), which
/// only other libraries' global captures can restrict.
pub(crate) fn ignore_other_threads_captures() {
    let mut mode = sys::CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: `mode` is a valid in-out pointer holding a valid CUstreamCaptureMode.
    let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
}

/// Instantiates a captured graph (`cuGraphInstantiateWithFlags`, no flags).
///
/// # Safety
/// `g` is a live graph of the current context.
pub(crate) unsafe fn graph_instantiate(g: sys::CUgraph) -> Result<sys::CUgraphExec> {
    let mut e: sys::CUgraphExec = ptr::null_mut();
    // SAFETY: guaranteed by the caller; `e` is a valid out-pointer.
    check("cuGraphInstantiate", unsafe {
        sys::cuGraphInstantiateWithFlags(&mut e, g, 0)
    })?;
    Ok(e)
}

/// Enqueues one launch of `e` on `s`: ordered after the work queued on `s` before it (and after
/// every earlier launch of `e`), before the work queued after it.
///
/// # Safety
/// `e` is a live executable graph of the current context and `s` a live stream (or a special
/// handle) of it; every memory its nodes touch stays valid and untouched by other work until
/// `s` has run the launch.
pub(crate) unsafe fn graph_launch(e: sys::CUgraphExec, s: sys::CUstream) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(e, s) })
}

/// Uploads `e`'s resources to the device on `s`, so that the first launch pays no setup.
///
/// # Safety
/// As for [`graph_launch`] (an upload runs no node).
pub(crate) unsafe fn graph_upload(e: sys::CUgraphExec, s: sys::CUstream) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuGraphUpload", unsafe { sys::cuGraphUpload(e, s) })
}

/// Destroys an executable graph. A launch still in flight is not cut short: the driver frees
/// the graph once it completes.
///
/// # Safety
/// `e` came from [`graph_instantiate`] and is destroyed once, with its context current.
pub(crate) unsafe fn graph_exec_destroy(e: sys::CUgraphExec) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuGraphExecDestroy", unsafe { sys::cuGraphExecDestroy(e) })
}

/// Destroys a graph (the template an executable graph was instantiated from; the executable
/// graph does not depend on it).
///
/// # Safety
/// `g` came from [`stream_end_capture`] and is destroyed once, with its context current.
pub(crate) unsafe fn graph_destroy(g: sys::CUgraph) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuGraphDestroy", unsafe { sys::cuGraphDestroy(g) })
}

/// Sets the parameters of the kernel node `node` in `e`, for the launches enqueued after this
/// call (launches already enqueued keep theirs). The driver copies the values `params` points
/// to.
///
/// # Safety
/// `e` is a live executable graph instantiated from the graph that holds `node`, a kernel node;
/// `params` names the node's own function and geometry, and one pointer per kernel parameter to
/// a value of that parameter's type and size, whose accesses are valid for every later launch.
pub(crate) unsafe fn graph_exec_set_kernel_params(
    e: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: &sys::KernelNodeParams,
) -> Result<()> {
    // SAFETY: guaranteed by the caller.
    check("cuGraphExecKernelNodeSetParams", unsafe {
        sys::cuGraphExecKernelNodeSetParams_v2(e, node, params)
    })
}

#[cfg(test)]
mod tests {
    use super::is_capture_refusal;
    use crate::error::{Error, ErrorKind};

    fn driver(code: i32) -> Error {
        Error::Driver {
            call: "cuMemFree",
            code,
            name: String::new(),
            description: String::new(),
        }
    }

    /// A free or a query refused because of a capture is told apart from an error of the work
    /// (a sticky fault): the first did nothing and may be made again later; the second is the
    /// stream's own state.
    #[test]
    fn capture_refusals_are_told_from_errors_of_the_work() {
        for code in 900..=908 {
            assert!(is_capture_refusal(&driver(code)), "{code}");
        }
        for code in [0, 1, 2, 600, 700, 719, 899, 909, 910] {
            assert!(!is_capture_refusal(&driver(code)), "{code}");
        }
        assert!(!is_capture_refusal(&Error::StreamPoisoned));
        assert!(!is_capture_refusal(&Error::NoDevice {
            call: "cuInit",
            name: String::new()
        }));
    }

    /// A driver failure's kind comes from its code: out of memory, the sticky faults (the
    /// context is lost), the capture refusals (the call was made in the wrong place), and every
    /// other code as itself.
    #[test]
    fn a_driver_errors_kind_follows_its_code() {
        assert_eq!(driver(2).kind(), ErrorKind::OutOfMemory);
        for code in [700, 702, 710, 714, 715, 716, 717, 718, 719] {
            assert_eq!(driver(code).kind(), ErrorKind::Poisoned, "{code}");
        }
        for code in 900..=908 {
            assert_eq!(driver(code).kind(), ErrorKind::NotHere, "{code}");
        }
        for code in [1, 201, 400, 600, 701, 720, 899, 909, 999] {
            assert_eq!(driver(code).kind(), ErrorKind::Driver(code), "{code}");
        }
    }

    /// The errors a program most often meets fall into the kind that says what to do about
    /// them: the machine (no GPU), a missing library, the memory, a lost context, a bug.
    #[test]
    fn the_common_errors_have_the_kind_that_says_what_to_do() {
        let no_device = Error::NoDevice {
            call: "cuInit",
            name: "CUDA_ERROR_NO_DEVICE".into(),
        };
        assert_eq!(no_device.kind(), ErrorKind::Device);
        let missing = Error::LibraryNotFound {
            library: "um-cublas",
            message: String::new(),
        };
        assert_eq!(missing.kind(), ErrorKind::LibraryMissing);
        let nccl = Error::NcclUnavailable {
            reason: String::new(),
        };
        assert_eq!(nccl.kind(), ErrorKind::LibraryMissing);
        let oversubscribe = Error::WouldOversubscribe { bytes: 2, free: 1 };
        assert_eq!(oversubscribe.kind(), ErrorKind::OutOfMemory);
        assert_eq!(Error::StreamPoisoned.kind(), ErrorKind::Poisoned);
        assert_eq!(Error::GraphEmptied.kind(), ErrorKind::Poisoned);
        assert_eq!(
            Error::StreamMismatch { argument: 1 }.kind(),
            ErrorKind::WrongOwner
        );
        assert_eq!(Error::ContextMismatch.kind(), ErrorKind::WrongOwner);
        let lengths = Error::LengthMismatch {
            kernel: "axpy",
            first: "x",
            expected: 3,
            buffer: "y",
            len: 4,
        };
        assert_eq!(lengths.kind(), ErrorKind::Invalid);
        let capture = Error::InsideCapture { what: "sync" };
        assert_eq!(capture.kind(), ErrorKind::NotHere);
        let timeout = Error::Timeout {
            what: "all_reduce".into(),
            after_ms: 10,
        };
        assert_eq!(timeout.kind(), ErrorKind::Timeout);
        let library = Error::Library {
            library: "um-cublas",
            message: String::new(),
        };
        assert_eq!(library.kind(), ErrorKind::Library);
    }
}
