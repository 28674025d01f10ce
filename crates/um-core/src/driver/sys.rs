//! The driver entry points `um` calls, declared with a raw `i32` result.
//!
//! `cust_raw` 0.11 declares the same functions as returning `CUresult`, a Rust `enum` generated
//! from CUDA 11 headers. A newer driver (this project targets CUDA 13) can return codes that enum
//! does not list, and a Rust enum holding an unlisted discriminant is undefined behaviour before
//! any code looks at it. Declaring the result as `i32` makes every code the driver returns a valid
//! value; [`crate::driver`] turns it into [`crate::Error`].
//!
//! Handle types and flag constants still come from `cust::sys`, and linking against `libcuda`
//! is arranged by `cust_raw`'s build script. Symbol names are the versioned ones `cuda.h` maps
//! the plain names to (`cuMemFree` is `cuMemFree_v2`, and so on).
#![allow(non_snake_case)]

#[cfg_attr(feature = "model", allow(unused_imports))]
use std::ffi::{c_char, c_int, c_uint, c_void};

pub(crate) use cust::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUgraphNode,
    CUmodule, CUstream,
};

/// `CUDA_SUCCESS`.
pub(crate) const SUCCESS: i32 = 0;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub(crate) const ERROR_OUT_OF_MEMORY: i32 = 2;
/// The driver's sticky errors: a kernel fault that leaves the context unusable, every later
/// call of the process on it failing the same way (`CUDA_ERROR_ILLEGAL_ADDRESS`,
/// `..._LAUNCH_TIMEOUT`, `..._ASSERT`, `..._HARDWARE_STACK_ERROR`, `..._ILLEGAL_INSTRUCTION`,
/// `..._MISALIGNED_ADDRESS`, `..._INVALID_ADDRESS_SPACE`, `..._INVALID_PC`, `..._LAUNCH_FAILED`:
/// each documented as "the process must be terminated and relaunched").
pub(crate) const STICKY_ERRORS: [i32; 9] = [700, 702, 710, 714, 715, 716, 717, 718, 719];
/// `CUDA_ERROR_NO_DEVICE`.
pub(crate) const ERROR_NO_DEVICE: i32 = 100;
/// `CUDA_ERROR_NOT_READY`.
pub(crate) const ERROR_NOT_READY: i32 = 600;
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`.
pub(crate) const ERROR_UNSUPPORTED_PTX_VERSION: i32 = 222;

/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`: while this thread captures, it may make no
/// potentially unsafe call (an allocation, a free, a wait); other threads are not restricted.
pub(crate) const CAPTURE_MODE_THREAD_LOCAL: c_uint = 1;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`: this thread may make potentially unsafe calls.
pub(crate) const CAPTURE_MODE_RELAXED: c_uint = 2;
/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, the first of the codes by which the driver refuses a
/// call because of a stream capture (`..._INVALIDATED`, `..._MERGE`, `..._UNMATCHED`,
/// `..._UNJOINED`, `..._ISOLATION`, `..._IMPLICIT`, `CUDA_ERROR_CAPTURED_EVENT`).
pub(crate) const ERROR_STREAM_CAPTURE_UNSUPPORTED: i32 = 900;
/// `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`, the last of them.
pub(crate) const ERROR_STREAM_CAPTURE_WRONG_THREAD: i32 = 908;
/// `CU_STREAM_CAPTURE_STATUS_NONE`: the stream is not capturing.
pub(crate) const CAPTURE_STATUS_NONE: c_uint = 0;
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
pub(crate) const CAPTURE_STATUS_ACTIVE: c_uint = 1;

/// `CUDA_KERNEL_NODE_PARAMS_v2`: what `cuGraphExecKernelNodeSetParams_v2` sets on a kernel
/// node of an executable graph.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelNodeParams {
    pub(crate) func: CUfunction,
    pub(crate) grid: [c_uint; 3],
    pub(crate) block: [c_uint; 3],
    pub(crate) shared_mem_bytes: c_uint,
    pub(crate) kernel_params: *mut *mut c_void,
    pub(crate) extra: *mut *mut c_void,
    /// `CUkernel`: NULL, `func` is set.
    pub(crate) kern: *mut c_void,
    /// `CUcontext`: ignored when `func` is set.
    pub(crate) ctx: CUcontext,
}

/// `CU_MEM_ATTACH_GLOBAL`.
pub(crate) const MEM_ATTACH_GLOBAL: c_uint = 0x1;
/// `CU_MEM_ATTACH_HOST`.
pub(crate) const MEM_ATTACH_HOST: c_uint = 0x2;
/// `CU_MEM_ATTACH_SINGLE`.
pub(crate) const MEM_ATTACH_SINGLE: c_uint = 0x4;

/// `CU_MEM_ADVISE_SET_PREFERRED_LOCATION`.
pub(crate) const ADVISE_SET_PREFERRED_LOCATION: c_int = 3;
/// `CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION`.
pub(crate) const ADVISE_UNSET_PREFERRED_LOCATION: c_int = 4;
/// `CU_MEM_ADVISE_SET_ACCESSED_BY`.
pub(crate) const ADVISE_SET_ACCESSED_BY: c_int = 5;
/// `CU_MEM_ADVISE_UNSET_ACCESSED_BY`.
pub(crate) const ADVISE_UNSET_ACCESSED_BY: c_int = 6;

/// `CUmemLocation`: where a prefetch moves pages, or what an advice is about.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemLocation {
    /// `CUmemLocationType`.
    pub(crate) kind: c_int,
    /// The device ordinal for `CU_MEM_LOCATION_TYPE_DEVICE`; ignored for the host.
    pub(crate) id: c_int,
}

impl MemLocation {
    /// `CU_MEM_LOCATION_TYPE_DEVICE`, device `ordinal`.
    pub(crate) fn device(ordinal: CUdevice) -> Self {
        MemLocation {
            kind: 0x1,
            id: ordinal,
        }
    }
    /// `CU_MEM_LOCATION_TYPE_HOST`.
    pub(crate) const HOST: MemLocation = MemLocation { kind: 0x2, id: 0 };
}

/// `CUmemoryPool`: an opaque handle of a memory pool (`cuMemPoolCreate`, or a device's default
/// pool).
pub(crate) type CUmemoryPool = *mut c_void;

/// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD` (`cuuint64_t`): reserved bytes the pool keeps at a
/// synchronization instead of releasing them to the system.
pub(crate) const MEMPOOL_ATTR_RELEASE_THRESHOLD: c_int = 4;
/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` (`cuuint64_t`): the pool's backing memory.
pub(crate) const MEMPOOL_ATTR_RESERVED_MEM_CURRENT: c_int = 5;
/// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT` (`cuuint64_t`): the pool's memory in use by allocations.
pub(crate) const MEMPOOL_ATTR_USED_MEM_CURRENT: c_int = 7;

/// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`: the device has the stream-ordered allocator.
pub(crate) const ATTR_MEMORY_POOLS_SUPPORTED: c_int = 115;

/// `CUmemPoolProps` (`CUmemPoolProps_v1`): what `cuMemPoolCreate` makes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemPoolProps {
    /// `CUmemAllocationType`: `CU_MEM_ALLOCATION_TYPE_PINNED` (1), the only one accepted.
    pub(crate) alloc_type: c_int,
    /// `CUmemAllocationHandleType`: `CU_MEM_HANDLE_TYPE_NONE` (0), no export.
    pub(crate) handle_types: c_int,
    /// Where the pool's memory resides.
    pub(crate) location: MemLocation,
    /// Windows only; NULL.
    pub(crate) win32_security_attributes: *mut c_void,
    /// 0: the system's default limit.
    pub(crate) max_size: usize,
    /// 0: no usage flags.
    pub(crate) usage: u16,
    /// Must be zero.
    pub(crate) reserved: [u8; 54],
}

impl MemPoolProps {
    /// A pool of pinned device memory on device `ordinal`, not exportable.
    pub(crate) fn device(ordinal: CUdevice) -> Self {
        MemPoolProps {
            alloc_type: 1,
            handle_types: 0,
            location: MemLocation::device(ordinal),
            win32_security_attributes: std::ptr::null_mut(),
            max_size: 0,
            usage: 0,
            reserved: [0; 54],
        }
    }
}

/// `CUstreamCallback`: what `cuStreamAddCallback` calls, on a driver thread, exactly once, with
/// `CUDA_SUCCESS` or the error the stream met (its `CUresult` spelled `i32`, as everywhere here).
/// `CUDA_CB` is the platform's system ABI.
pub(crate) type StreamCallback =
    unsafe extern "system" fn(stream: CUstream, status: i32, user_data: *mut c_void);

/// `CU_EVENT_BLOCKING_SYNC`: a thread waiting for the event sleeps instead of spinning.
pub(crate) const EVENT_BLOCKING_SYNC: c_uint = 0x1;
/// `CU_EVENT_DISABLE_TIMING`: an event for ordering only, the cheapest kind to record and wait.
pub(crate) const EVENT_DISABLE_TIMING: c_uint = 0x2;

/// `CU_STREAM_NON_BLOCKING`.
pub(crate) const STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CU_STREAM_DEFAULT`.
pub(crate) const STREAM_DEFAULT: c_uint = 0x0;

/// `CU_STREAM_LEGACY`: the explicit handle of the legacy default stream.
pub(crate) const STREAM_LEGACY_HANDLE: CUstream = 0x1 as CUstream;
/// `CU_STREAM_PER_THREAD`: a handle that names the calling thread's default stream.
pub(crate) const STREAM_PER_THREAD: CUstream = 0x2 as CUstream;
/// The NULL stream: with the non-`_ptsz` entry points declared here it is the legacy default
/// stream, which synchronizes implicitly with every blocking stream of the context.
pub(crate) const STREAM_LEGACY: CUstream = std::ptr::null_mut();

/// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`: the most threads a block of this function may
/// have (`__launch_bounds__`, registers, and the device's limit, whichever is least).
pub(crate) const FUNC_ATTR_MAX_THREADS_PER_BLOCK: c_int = 0;

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
pub(crate) const ATTR_MULTIPROCESSOR_COUNT: c_int = 16;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
pub(crate) const ATTR_CC_MAJOR: c_int = 75;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
pub(crate) const ATTR_CC_MINOR: c_int = 76;
/// `CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY`.
pub(crate) const ATTR_MANAGED_MEMORY: c_int = 83;
/// `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS`.
pub(crate) const ATTR_PAGEABLE_MEMORY_ACCESS: c_int = 88;
/// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`.
pub(crate) const ATTR_CONCURRENT_MANAGED_ACCESS: c_int = 89;

// The CPU model of the driver (`--features model`, off by default): the same names, as Rust
// functions of the same signatures, in place of the block below.
#[cfg(feature = "model")]
pub(crate) use super::model::api::*;

// SAFETY (for the whole block): these are the C prototypes of `cuda.h` (CUDA 11 to 13 keep them
// ABI-stable under these versioned symbol names), with `CUresult` spelled as `i32`. Each caller
// in `driver/mod.rs` documents why its arguments are valid.
#[cfg(not(feature = "model"))]
unsafe extern "C" {
    pub(crate) fn cuInit(flags: c_uint) -> i32;
    pub(crate) fn cuDriverGetVersion(version: *mut c_int) -> i32;
    pub(crate) fn cuGetErrorName(error: i32, name: *mut *const c_char) -> i32;
    pub(crate) fn cuGetErrorString(error: i32, text: *mut *const c_char) -> i32;

    pub(crate) fn cuDeviceGetCount(count: *mut c_int) -> i32;
    pub(crate) fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> i32;
    pub(crate) fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice) -> i32;
    pub(crate) fn cuDeviceGetAttribute(value: *mut c_int, attr: c_int, device: CUdevice) -> i32;

    pub(crate) fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, device: CUdevice) -> i32;
    pub(crate) fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> i32;
    pub(crate) fn cuCtxSetCurrent(ctx: CUcontext) -> i32;
    pub(crate) fn cuCtxGetCurrent(ctx: *mut CUcontext) -> i32;
    pub(crate) fn cuCtxSynchronize() -> i32;

    pub(crate) fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> i32;
    pub(crate) fn cuMemAllocManaged(ptr: *mut CUdeviceptr, bytes: usize, flags: c_uint) -> i32;
    pub(crate) fn cuMemFree_v2(ptr: CUdeviceptr) -> i32;
    pub(crate) fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> i32;
    pub(crate) fn cuMemAllocHost_v2(ptr: *mut *mut c_void, bytes: usize) -> i32;
    pub(crate) fn cuMemFreeHost(ptr: *mut c_void) -> i32;
    pub(crate) fn cuMemcpyHtoDAsync_v2(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
        stream: CUstream,
    ) -> i32;
    pub(crate) fn cuMemcpyDtoHAsync_v2(
        dst: *mut c_void,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) -> i32;
    // Stream-ordered copies and fills between device-accessible addresses (managed or device
    // memory: the driver tells which from the unified address space).
    pub(crate) fn cuMemcpyAsync(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) -> i32;
    // The synchronous copies in their per-thread-default-stream form (`_ptds`, what `cuda.h`
    // maps the plain names to under `CU_API_PER_THREAD_DEFAULT_STREAM`): ordered on the calling
    // thread's default stream instead of the legacy one, so that they wait for no other
    // thread's blocking streams.
    pub(crate) fn cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, bytes: usize) -> i32;
    pub(crate) fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, bytes: usize) -> i32;
    pub(crate) fn cuMemsetD8Async(
        dst: CUdeviceptr,
        value: u8,
        count: usize,
        stream: CUstream,
    ) -> i32;
    pub(crate) fn cuMemsetD16Async(
        dst: CUdeviceptr,
        value: u16,
        count: usize,
        stream: CUstream,
    ) -> i32;
    pub(crate) fn cuMemsetD32Async(
        dst: CUdeviceptr,
        value: c_uint,
        count: usize,
        stream: CUstream,
    ) -> i32;
    // The CUDA 12.2+ form, which CUDA 13's header maps `cuMemAdvise` to.
    pub(crate) fn cuMemAdvise_v2(
        ptr: CUdeviceptr,
        count: usize,
        advice: c_int,
        location: MemLocation,
    ) -> i32;
    // The CUDA 12.2+ form, which CUDA 13's header maps `cuMemPrefetchAsync` to.
    pub(crate) fn cuMemPrefetchAsync_v2(
        ptr: CUdeviceptr,
        count: usize,
        location: MemLocation,
        flags: c_uint,
        stream: CUstream,
    ) -> i32;

    // The stream-ordered allocator (CUDA 11.2+), non-`_ptsz` forms as everywhere here.
    pub(crate) fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, device: CUdevice) -> i32;
    pub(crate) fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const MemPoolProps) -> i32;
    pub(crate) fn cuMemPoolDestroy(pool: CUmemoryPool) -> i32;
    pub(crate) fn cuMemPoolSetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void)
    -> i32;
    pub(crate) fn cuMemPoolGetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void)
    -> i32;
    pub(crate) fn cuMemAllocFromPoolAsync(
        ptr: *mut CUdeviceptr,
        bytes: usize,
        pool: CUmemoryPool,
        stream: CUstream,
    ) -> i32;
    pub(crate) fn cuMemFreeAsync(ptr: CUdeviceptr, stream: CUstream) -> i32;

    pub(crate) fn cuStreamCreateWithPriority(
        stream: *mut CUstream,
        flags: c_uint,
        priority: c_int,
    ) -> i32;
    pub(crate) fn cuStreamDestroy_v2(stream: CUstream) -> i32;
    pub(crate) fn cuStreamSynchronize(stream: CUstream) -> i32;
    pub(crate) fn cuStreamGetCtx(stream: CUstream, ctx: *mut CUcontext) -> i32;
    pub(crate) fn cuStreamQuery(stream: CUstream) -> i32;
    pub(crate) fn cuStreamAttachMemAsync(
        stream: CUstream,
        ptr: CUdeviceptr,
        length: usize,
        flags: c_uint,
    ) -> i32;
    pub(crate) fn cuStreamAddCallback(
        stream: CUstream,
        callback: StreamCallback,
        user_data: *mut c_void,
        flags: c_uint,
    ) -> i32;
    pub(crate) fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> i32;
    pub(crate) fn cuEventRecord(event: CUevent, stream: CUstream) -> i32;
    pub(crate) fn cuEventSynchronize(event: CUevent) -> i32;
    pub(crate) fn cuEventDestroy_v2(event: CUevent) -> i32;
    pub(crate) fn cuEventQuery(event: CUevent) -> i32;
    // The first form, which every driver exports; CUDA 13's header maps the name to
    // `cuEventElapsedTime_v2` (CUDA 12.8 and later), which takes the same arguments.
    pub(crate) fn cuEventElapsedTime(milliseconds: *mut f32, start: CUevent, end: CUevent) -> i32;
    pub(crate) fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) -> i32;
    pub(crate) fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> i32;

    pub(crate) fn cuStreamBeginCapture_v2(stream: CUstream, mode: c_uint) -> i32;
    pub(crate) fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> i32;
    // The CUDA 11.3+ form (CUDA 13's header maps `cuStreamGetCaptureInfo` to `_v3`, which adds
    // edge data; every driver since 11.3 exports `_v2`, 580 included).
    pub(crate) fn cuStreamGetCaptureInfo_v2(
        stream: CUstream,
        status: *mut c_uint,
        id: *mut u64,
        graph: *mut CUgraph,
        dependencies: *mut *const CUgraphNode,
        count: *mut usize,
    ) -> i32;
    pub(crate) fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> i32;
    pub(crate) fn cuGraphInstantiateWithFlags(
        exec: *mut CUgraphExec,
        graph: CUgraph,
        flags: std::ffi::c_ulonglong,
    ) -> i32;
    pub(crate) fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> i32;
    pub(crate) fn cuGraphUpload(exec: CUgraphExec, stream: CUstream) -> i32;
    pub(crate) fn cuGraphExecDestroy(exec: CUgraphExec) -> i32;
    pub(crate) fn cuGraphDestroy(graph: CUgraph) -> i32;
    pub(crate) fn cuGraphExecKernelNodeSetParams_v2(
        exec: CUgraphExec,
        node: CUgraphNode,
        params: *const KernelNodeParams,
    ) -> i32;

    pub(crate) fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> i32;
    pub(crate) fn cuModuleUnload(module: CUmodule) -> i32;
    pub(crate) fn cuModuleGetFunction(
        function: *mut CUfunction,
        module: CUmodule,
        name: *const c_char,
    ) -> i32;
    pub(crate) fn cuFuncGetAttribute(value: *mut c_int, attr: c_int, function: CUfunction) -> i32;
    pub(crate) fn cuLaunchKernel(
        function: CUfunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> i32;
}
