//! The model's driver entry points: the names and signatures of `driver/sys.rs`'s `extern "C"`
//! block, as Rust functions (`unsafe`, as the C ones are: pointers are the caller's promise).
#![allow(non_snake_case, clippy::too_many_arguments, clippy::missing_safety_doc)]

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};

use super::super::sys::{
    CAPTURE_MODE_RELAXED, CAPTURE_STATUS_ACTIVE, CAPTURE_STATUS_NONE, CUcontext, CUdevice,
    CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUmemoryPool, CUmodule,
    CUstream, KernelNodeParams, MemLocation, MemPoolProps, StreamCallback,
};
use super::{
    Event, Graph, Kind, Op, Pool, State, Stream, Work, alloc, devices, done, enqueue, find,
    free_now, host_knows, kernels, lock, spawn_worker, sync_stream, violation, wait,
};

const INVALID_VALUE: i32 = 1;
const INVALID_DEVICE: i32 = 101;
const INVALID_HANDLE: i32 = 400;
const NOT_FOUND: i32 = 500;
const NOT_READY: i32 = 600;
const CAPTURE_UNSUPPORTED: i32 = 900;
const CAPTURE_IMPLICIT: i32 = 906;
const CAPTURE_WRONG_THREAD: i32 = 908;
const TOTAL: usize = 8 << 30;

thread_local! {
    /// The calling thread's capture mode (`cuThreadExchangeStreamCaptureMode`): 0, global.
    static MODE: Cell<c_uint> = const { Cell::new(0) };
    /// The captures this thread began and has not ended.
    static CAPTURING: Cell<usize> = const { Cell::new(0) };
    /// The thread's current context.
    static CURRENT: Cell<usize> = const { Cell::new(0) };
    /// The thread's default stream of each context, once used: (context, stream).
    static PER_THREAD: PerThread = const { PerThread(std::cell::RefCell::new(Vec::new())) };
}

struct PerThread(std::cell::RefCell<Vec<(usize, usize)>>);

/// The thread's exit destroys its default streams. A thread whose default stream still has
/// managed memory attached (`CU_MEM_ATTACH_SINGLE`) never finishes exiting on the driver (seen
/// with driver 580): the model records a violation (without a panic, which would abort in a
/// thread-local destructor; the test's guard reports it) and lets the thread go.
impl Drop for PerThread {
    fn drop(&mut self) {
        let ids = std::mem::take(&mut *self.0.borrow_mut());
        if !ids.is_empty() {
            let mut g = lock();
            let attached: Vec<usize> = g
                .allocs
                .iter()
                .filter(|(_, a)| {
                    a.attached
                        .is_some_and(|s| ids.iter().any(|&(_, id)| id == s))
                })
                .map(|(&start, _)| start)
                .collect();
            for &(_, id) in &ids {
                if let Some(s) = g.streams.get_mut(&id) {
                    s.destroyed = true;
                }
            }
            for start in attached {
                let what = format!(
                    "a thread exits while managed memory at {start:#x} is still attached to its \
                     default stream (CU_STREAM_PER_THREAD): the driver's thread exit never ends"
                );
                eprintln!("um model: VIOLATION: {what}");
                g.violations.push(what);
            }
            drop(g);
            super::MODEL.changed.notify_all();
        }
    }
}

/// The calling thread's current context (device 0's where it made none current).
fn current_context() -> usize {
    match CURRENT.with(Cell::get) {
        0 => devices::CONTEXT0,
        ctx => ctx,
    }
}

/// Whether this thread may make no potentially unsafe call (a capture it began, thread-local);
/// a refused call invalidates the thread's captures.
fn refused_here() -> bool {
    let refused = MODE.with(Cell::get) != CAPTURE_MODE_RELAXED && CAPTURING.with(Cell::get) > 0;
    if refused {
        let mut g = lock();
        let mine: Vec<usize> = BEGUN.with(|b| b.borrow().iter().map(|&(s, _)| s).collect());
        for s in mine {
            invalidate(&mut g, s);
        }
    }
    refused
}

/// Invalidates the capture stream `id` records into, if any.
fn invalidate(g: &mut State, id: usize) {
    if let Some(gr) = g.streams.get(&id).and_then(|s| s.capture) {
        if let Some(graph) = g.graphs.get_mut(&gr) {
            graph.invalidated = true;
        }
    }
}

fn new_id(g: &mut State) -> usize {
    g.next += 0x10;
    g.next
}

/// The stream a handle names.
fn stream_id(g: &mut State, s: CUstream) -> usize {
    match s as usize {
        0 | 1 => devices::legacy_stream(g, current_context()),
        2 => PER_THREAD.with(|p| {
            let ctx = current_context();
            let mine =
                p.0.borrow()
                    .iter()
                    .find(|&&(c, _)| c == ctx)
                    .map(|&(_, id)| id);
            mine.unwrap_or_else(|| {
                let id = new_id(g);
                let mut s = Stream::new(true);
                s.context = ctx;
                g.streams.insert(id, s);
                spawn_worker(id);
                p.0.borrow_mut().push((ctx, id));
                id
            })
        }),
        id => id,
    }
}

/// Refuses work on the legacy stream while a blocking stream captures (its implicit
/// synchronization would join the capture); the capture is invalidated.
fn legacy_refused(g: &mut State, id: usize) -> bool {
    if !devices::is_legacy(id) {
        return false;
    }
    let context = g.streams.get(&id).map(|s| s.context);
    let hit: Vec<usize> = g
        .streams
        .iter()
        .filter(|(_, s)| s.blocking && s.capture.is_some() && Some(s.context) == context)
        .map(|(&k, _)| k)
        .collect();
    for &k in &hit {
        invalidate(g, k);
    }
    !hit.is_empty()
}

/// Writes `v` through `p` where it is not NULL.
unsafe fn put<T>(p: *mut T, v: T) -> i32 {
    if p.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller's pointer to a `T`.
    unsafe { p.write(v) };
    0
}

pub(crate) unsafe fn cuInit(_flags: c_uint) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    0
}
pub(crate) unsafe fn cuDriverGetVersion(version: *mut c_int) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    unsafe { put(version, 13000) }
}

fn error_name(code: i32) -> Option<&'static CStr> {
    Some(match code {
        0 => c"CUDA_SUCCESS",
        1 => c"CUDA_ERROR_INVALID_VALUE",
        2 => c"CUDA_ERROR_OUT_OF_MEMORY",
        100 => c"CUDA_ERROR_NO_DEVICE",
        101 => c"CUDA_ERROR_INVALID_DEVICE",
        218 => c"CUDA_ERROR_INVALID_PTX",
        222 => c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        400 => c"CUDA_ERROR_INVALID_HANDLE",
        500 => c"CUDA_ERROR_NOT_FOUND",
        600 => c"CUDA_ERROR_NOT_READY",
        700 => c"CUDA_ERROR_ILLEGAL_ADDRESS",
        715 => c"CUDA_ERROR_ILLEGAL_INSTRUCTION",
        719 => c"CUDA_ERROR_LAUNCH_FAILED",
        800 => c"CUDA_ERROR_NOT_PERMITTED",
        900 => c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        901 => c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        906 => c"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
        908 => c"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
        _ => return None,
    })
}

pub(crate) unsafe extern "C" fn cuGetErrorName(error: i32, name: *mut *const c_char) -> i32 {
    match error_name(error) {
        Some(n) => unsafe { put(name, n.as_ptr()) },
        None => INVALID_VALUE,
    }
}
pub(crate) unsafe extern "C" fn cuGetErrorString(error: i32, text: *mut *const c_char) -> i32 {
    match error_name(error) {
        Some(_) => unsafe { put(text, c"(the CPU model of the driver)".as_ptr()) },
        None => INVALID_VALUE,
    }
}

pub(crate) unsafe fn cuDeviceGetCount(count: *mut c_int) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    unsafe { put(count, devices::count() as c_int) }
}
pub(crate) unsafe fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    if !devices::valid(ordinal) {
        return INVALID_DEVICE;
    }
    unsafe { put(device, ordinal) }
}
pub(crate) unsafe fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    if !devices::valid(device) {
        return INVALID_DEVICE;
    }
    let text = b"um CPU model\0";
    if name.is_null() || (len as usize) < text.len() {
        return INVALID_VALUE;
    }
    // SAFETY: `name` holds `len` bytes, at least the text's.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, text.len()) };
    0
}

/// Whether the model emulates a device without concurrent managed access.
fn no_concurrent_access() -> bool {
    std::env::var_os("UM_MODEL_NO_CONCURRENT").is_some_and(|v| v == "1")
}

pub(crate) unsafe fn cuDeviceGetAttribute(value: *mut c_int, attr: c_int, device: CUdevice) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    if !devices::valid(device) {
        return INVALID_DEVICE;
    }
    let v = match attr {
        16 => 132,
        75 => 9,
        76 => 0,
        83 => 1,
        88 => 0,
        89 => i32::from(!no_concurrent_access()),
        115 => 1,
        _ => 0,
    };
    unsafe { put(value, v) }
}

pub(crate) unsafe fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, device: CUdevice) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    if !devices::valid(device) {
        return INVALID_DEVICE;
    }
    *lock().primary_refs.entry(device).or_insert(0) += 1;
    unsafe { put(ctx, devices::context_of(device) as CUcontext) }
}
pub(crate) unsafe fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    if !devices::valid(device) {
        return INVALID_DEVICE;
    }
    let mut g = lock();
    if let Some(refs) = g.primary_refs.get_mut(&device) {
        *refs = refs.saturating_sub(1);
    }
    0
}
pub(crate) unsafe fn cuCtxSetCurrent(ctx: CUcontext) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    CURRENT.with(|c| c.set(ctx as usize));
    0
}
pub(crate) unsafe fn cuCtxGetCurrent(ctx: *mut CUcontext) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    unsafe { put(ctx, CURRENT.with(Cell::get) as CUcontext) }
}
pub(crate) unsafe fn cuCtxSynchronize() -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    let mut g = lock();
    let context = current_context();
    // A wait for the whole device while any of its streams captures: refused, and the captures
    // fail.
    let capturing: Vec<usize> = g
        .streams
        .iter()
        .filter(|(_, s)| s.capture.is_some() && s.context == context)
        .map(|(&k, _)| k)
        .collect();
    if !capturing.is_empty() {
        for k in capturing {
            invalidate(&mut g, k);
        }
        return CAPTURE_UNSUPPORTED;
    }
    let ids: Vec<usize> = g
        .streams
        .iter()
        .filter(|(_, s)| s.context == context)
        .map(|(&k, _)| k)
        .collect();
    for id in ids {
        g = sync_stream(g, id);
    }
    super::or_sticky(0)
}

pub(crate) unsafe fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let used = lock().allocated;
    unsafe {
        put(free, TOTAL.saturating_sub(used));
        put(total, TOTAL)
    }
}

unsafe fn alloc_into(ptr: *mut CUdeviceptr, bytes: usize, kind: Kind) -> i32 {
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    if bytes == 0 {
        return INVALID_VALUE;
    }
    let mut g = lock();
    if g.allocated.saturating_add(bytes) > TOTAL {
        return super::super::sys::ERROR_OUT_OF_MEMORY;
    }
    match alloc(&mut g, bytes, kind) {
        Some(p) => {
            if let Some(a) = g.allocs.get_mut(&p) {
                a.context = current_context();
            }
            unsafe { put(ptr, p as CUdeviceptr) }
        }
        None => super::super::sys::ERROR_OUT_OF_MEMORY,
    }
}

pub(crate) unsafe fn cuMemAllocManaged(ptr: *mut CUdeviceptr, bytes: usize, _flags: c_uint) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    unsafe { alloc_into(ptr, bytes, Kind::Managed) }
}
pub(crate) unsafe fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    unsafe { alloc_into(ptr, bytes, Kind::Device) }
}
pub(crate) unsafe fn cuMemAllocHost_v2(ptr: *mut *mut c_void, bytes: usize) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut p: CUdeviceptr = 0;
    let code = unsafe { alloc_into(&mut p, bytes, Kind::Pinned) };
    if code == 0 {
        unsafe { put(ptr, p as usize as *mut c_void) }
    } else {
        code
    }
}

/// `cuMemFree`: refused on a capturing thread; a violation while work that touches the memory
/// is pending.
fn free(address: usize) -> i32 {
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    let mut g = lock();
    if !g.allocs.contains_key(&address) {
        return INVALID_VALUE;
    }
    let pending = g.allocs.get(&address).and_then(|a| {
        a.accesses
            .iter()
            .find(|&(s, &v)| g.streams.get(s).is_some_and(|t| t.completed < v))
            .map(|(&s, &v)| (s, v))
    });
    if let Some((s, v)) = pending {
        violation(
            g,
            format!(
                "the allocation at {address:#x} is freed while work #{v} of stream {s:#x} that \
                 touches it is pending"
            ),
        );
        return INVALID_VALUE;
    }
    free_now(&mut g, address);
    0
}

pub(crate) unsafe fn cuMemFree_v2(ptr: CUdeviceptr) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    free(ptr as usize)
}
pub(crate) unsafe fn cuMemFreeHost(ptr: *mut c_void) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    free(ptr as usize)
}

/// The ranges of a copy or fill that lie in allocations of the model.
fn touches(g: &State, ranges: &[(usize, usize)]) -> Vec<(usize, usize)> {
    ranges
        .iter()
        .copied()
        .filter(|&(p, _)| find(g, p).is_some())
        .collect()
}

/// Queues `work` on stream `s` touching `ranges`, with the capture refusals.
fn submit(s: CUstream, work: Work, ranges: &[(usize, usize)]) -> i32 {
    let mut g = lock();
    let id = stream_id(&mut g, s);
    if legacy_refused(&mut g, id) {
        return CAPTURE_IMPLICIT;
    }
    let t = touches(&g, ranges);
    enqueue(g, id, Op::new(work, t))
}

fn copy(dst: usize, src: usize, bytes: usize, s: CUstream) -> i32 {
    submit(
        s,
        Work::Copy { dst, src, bytes },
        &[(dst, bytes), (src, bytes)],
    )
}

pub(crate) unsafe fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    copy(dst as usize, src as usize, bytes, stream)
}
pub(crate) unsafe fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    copy(dst as usize, src as usize, bytes, stream)
}
pub(crate) unsafe fn cuMemcpyAsync(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    copy(dst as usize, src as usize, bytes, stream)
}

/// A synchronous copy: on the thread's default stream, then waited for, unless both sides are
/// managed or device memory: "for transfers from device memory to device memory, no host-side
/// synchronization is performed", and unified addressing may class managed memory as device
/// memory (the driver reference's "API synchronization behavior"). The model takes the weaker
/// promise, so that a caller that reads the destination without a wait of its own is caught.
fn copy_wait(dst: usize, src: usize, bytes: usize) -> i32 {
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    let code = copy(dst, src, bytes, super::super::sys::STREAM_PER_THREAD);
    if code != 0 {
        return code;
    }
    let mut g = lock();
    let device_like = |g: &State, p: usize| {
        find(g, p)
            .and_then(|start| g.allocs.get(&start))
            .is_some_and(|a| a.kind != Kind::Pinned)
    };
    if device_like(&g, dst) && device_like(&g, src) {
        return 0;
    }
    let id = stream_id(&mut g, super::super::sys::STREAM_PER_THREAD);
    drop(sync_stream(g, id));
    0
}

pub(crate) unsafe fn cuMemcpyHtoD_v2_ptds(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    copy_wait(dst as usize, src as usize, bytes)
}
pub(crate) unsafe fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, bytes: usize) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    copy_wait(dst as usize, src as usize, bytes)
}

fn set(dst: CUdeviceptr, value: u32, width: usize, count: usize, s: CUstream) -> i32 {
    let dst = dst as usize;
    submit(
        s,
        Work::Set {
            dst,
            value,
            width,
            count,
        },
        &[(dst, width * count)],
    )
}

pub(crate) unsafe fn cuMemsetD8Async(
    dst: CUdeviceptr,
    value: u8,
    count: usize,
    s: CUstream,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    set(dst, u32::from(value), 1, count, s)
}
pub(crate) unsafe fn cuMemsetD16Async(
    dst: CUdeviceptr,
    value: u16,
    count: usize,
    s: CUstream,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    set(dst, u32::from(value), 2, count, s)
}
pub(crate) unsafe fn cuMemsetD32Async(
    dst: CUdeviceptr,
    value: c_uint,
    count: usize,
    s: CUstream,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    set(dst, value, 4, count, s)
}
pub(crate) unsafe fn cuMemAdvise_v2(
    ptr: CUdeviceptr,
    _count: usize,
    _advice: c_int,
    _location: MemLocation,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if find(&lock(), ptr as usize).is_some() {
        0
    } else {
        INVALID_VALUE
    }
}
pub(crate) unsafe fn cuMemPrefetchAsync_v2(
    ptr: CUdeviceptr,
    count: usize,
    _location: MemLocation,
    _flags: c_uint,
    stream: CUstream,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    // A prefetch moves pages in the stream's order: it touches the memory.
    submit(stream, Work::Nop, &[(ptr as usize, count)])
}

pub(crate) unsafe fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, device: CUdevice) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if !devices::valid(device) {
        return INVALID_DEVICE;
    }
    let id = devices::default_pool_of(device);
    let mut g = lock();
    g.pools.entry(id).or_insert(Pool {
        threshold: 0,
        used: 0,
        reserved: 0,
    });
    unsafe { put(pool, id as CUmemoryPool) }
}
pub(crate) unsafe fn cuMemPoolCreate(pool: *mut CUmemoryPool, _props: *const MemPoolProps) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = new_id(&mut g);
    g.pools.insert(
        id,
        Pool {
            threshold: 0,
            used: 0,
            reserved: 0,
        },
    );
    unsafe { put(pool, id as CUmemoryPool) }
}
pub(crate) unsafe fn cuMemPoolDestroy(pool: CUmemoryPool) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    match lock().pools.remove(&(pool as usize)) {
        Some(_) => 0,
        None => INVALID_HANDLE,
    }
}
pub(crate) unsafe fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    attr: c_int,
    value: *mut c_void,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let Some(p) = g.pools.get_mut(&(pool as usize)) else {
        return INVALID_HANDLE;
    };
    if attr == super::super::sys::MEMPOOL_ATTR_RELEASE_THRESHOLD && !value.is_null() {
        // SAFETY: the attribute's value is a `cuuint64_t`.
        p.threshold = unsafe { value.cast::<u64>().read() };
    }
    0
}
pub(crate) unsafe fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    attr: c_int,
    value: *mut c_void,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let g = lock();
    let Some(p) = g.pools.get(&(pool as usize)) else {
        return INVALID_HANDLE;
    };
    let v = match attr {
        4 => p.threshold,
        5 => p.reserved.max(p.used),
        7 => p.used,
        _ => 0,
    };
    unsafe { put(value.cast::<u64>(), v) }
}
pub(crate) unsafe fn cuMemAllocFromPoolAsync(
    ptr: *mut CUdeviceptr,
    bytes: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if bytes == 0 {
        return INVALID_VALUE;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    if !g.pools.contains_key(&(pool as usize)) {
        return INVALID_HANDLE;
    }
    let Some(p) = alloc(&mut g, bytes, Kind::Device) else {
        return super::super::sys::ERROR_OUT_OF_MEMORY;
    };
    let context = g.streams.get(&id).map_or(devices::CONTEXT0, |s| s.context);
    if let Some(a) = g.allocs.get_mut(&p) {
        a.pool = Some(pool as usize);
        a.context = context;
    }
    if let Some(pl) = g.pools.get_mut(&(pool as usize)) {
        pl.used += bytes as u64;
        pl.reserved = pl.reserved.max(pl.used);
    }
    // Born on the stream: later use elsewhere must be ordered after it.
    let code = enqueue(g, id, Op::new(Work::Nop, vec![(p, bytes)]));
    if code != 0 {
        return code;
    }
    unsafe { put(ptr, p as CUdeviceptr) }
}
pub(crate) unsafe fn cuMemFreeAsync(ptr: CUdeviceptr, stream: CUstream) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let address = ptr as usize;
    // A pool counts its memory free in stream order: the next allocation on the stream may
    // reuse it, before the free has run.
    {
        let mut g = lock();
        if let Some(start) = find(&g, address) {
            let pool = g
                .allocs
                .get(&start)
                .and_then(|a| a.pool.map(|p| (p, a.len as u64)));
            if let Some(p) = pool.and_then(|(p, len)| g.pools.get_mut(&p).map(|p| (p, len))) {
                let (pool, len) = p;
                pool.used = pool.used.saturating_sub(len);
            }
        }
    }
    submit(stream, Work::Free { address }, &[(address, 1)])
}

pub(crate) unsafe fn cuStreamCreateWithPriority(
    stream: *mut CUstream,
    flags: c_uint,
    _priority: c_int,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = new_id(&mut g);
    let mut s = Stream::new(flags & super::super::sys::STREAM_NON_BLOCKING == 0);
    s.context = current_context();
    g.streams.insert(id, s);
    drop(g);
    spawn_worker(id);
    unsafe { put(stream, id as CUstream) }
}
pub(crate) unsafe fn cuStreamDestroy_v2(stream: CUstream) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = stream as usize;
    match g.streams.get_mut(&id) {
        Some(s) if !devices::is_legacy(id) => s.destroyed = true,
        _ => return INVALID_HANDLE,
    }
    drop(g);
    super::MODEL.changed.notify_all();
    0
}

/// Refused on any thread: a wait for (or a query of) a capturing stream.
fn capturing(g: &State, id: usize) -> bool {
    g.streams.get(&id).is_some_and(|s| s.capture.is_some())
}

pub(crate) unsafe fn cuStreamSynchronize(stream: CUstream) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    if capturing(&g, id) || legacy_refused(&mut g, id) {
        invalidate(&mut g, id);
        return CAPTURE_UNSUPPORTED;
    }
    drop(sync_stream(g, id));
    super::or_sticky(0)
}
pub(crate) unsafe fn cuStreamGetCtx(stream: CUstream, ctx: *mut CUcontext) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    let Some(context) = g.streams.get(&id).map(|s| s.context) else {
        return INVALID_HANDLE;
    };
    unsafe { put(ctx, context as CUcontext) }
}
pub(crate) unsafe fn cuStreamQuery(stream: CUstream) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    if capturing(&g, id) || legacy_refused(&mut g, id) {
        invalidate(&mut g, id);
        return CAPTURE_UNSUPPORTED;
    }
    let Some(s) = g.streams.get(&id) else {
        return INVALID_HANDLE;
    };
    let clock = s.clock.clone();
    if done(&g, &clock) {
        host_knows(&mut g, &clock);
        super::or_sticky(0)
    } else {
        NOT_READY
    }
}
pub(crate) unsafe fn cuStreamAttachMemAsync(
    stream: CUstream,
    ptr: CUdeviceptr,
    _length: usize,
    flags: c_uint,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    if capturing(&g, id) {
        // An attach cannot be captured: refused, and the capture fails.
        invalidate(&mut g, id);
        return CAPTURE_UNSUPPORTED;
    }
    let Some(start) = find(&g, ptr as usize) else {
        return INVALID_VALUE;
    };
    if let Some(a) = g.allocs.get_mut(&start) {
        a.attached = (flags == super::super::sys::MEM_ATTACH_SINGLE).then_some(id);
    }
    // The attach is work of the stream, on the memory.
    drop(g);
    submit(stream, Work::Nop, &[(start, 1)])
}
pub(crate) unsafe fn cuStreamAddCallback(
    stream: CUstream,
    callback: StreamCallback,
    user_data: *mut c_void,
    _flags: c_uint,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    submit(
        stream,
        Work::Callback {
            f: callback,
            data: user_data as usize,
            handle: stream as usize,
        },
        &[],
    )
}

pub(crate) unsafe fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = new_id(&mut g);
    g.events.insert(
        id,
        Event {
            timing: flags & super::super::sys::EVENT_DISABLE_TIMING == 0,
            recorded: None,
            generation: 0,
            stamp: None,
            captured: None,
            context: current_context(),
        },
    );
    unsafe { put(event, id as CUevent) }
}
pub(crate) unsafe fn cuEventRecord(event: CUevent, stream: CUstream) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let e = event as usize;
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    // The event and the stream must be of one context.
    let context = g.streams.get(&id).map(|s| s.context);
    match g.events.get(&e) {
        Some(ev) if Some(ev.context) == context => {}
        _ => return INVALID_HANDLE,
    }
    if legacy_refused(&mut g, id) {
        return CAPTURE_IMPLICIT;
    }
    if let Some(gr) = g.streams.get(&id).and_then(|s| s.capture) {
        // A record inside a capture: a stream that waits for it joins the capture.
        if let Some(ev) = g.events.get_mut(&e) {
            ev.captured = Some(gr);
        }
        return 0;
    }
    let generation = g.events.get(&e).map_or(0, |ev| ev.generation) + 1;
    if let Some(ev) = g.events.get_mut(&e) {
        // Before the enqueue: the worker may stamp this generation at once.
        ev.generation = generation;
        ev.stamp = None;
    }
    let code = enqueue(
        g,
        id,
        Op::new(
            Work::Stamp {
                event: e,
                generation,
                queued: std::time::Instant::now(),
            },
            Vec::new(),
        ),
    );
    if code != 0 {
        return code;
    }
    let mut g = lock();
    let Some(s) = g.streams.get(&id) else {
        return INVALID_HANDLE;
    };
    let rec = (s.clock.clone(), id, s.submitted);
    if let Some(ev) = g.events.get_mut(&e) {
        ev.recorded = Some(rec);
        ev.captured = None;
    }
    0
}
pub(crate) unsafe fn cuEventSynchronize(event: CUevent) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    let mut g = lock();
    let Some(ev) = g.events.get(&(event as usize)) else {
        return INVALID_HANDLE;
    };
    let Some((clock, _, _)) = ev.recorded.clone() else {
        return 0;
    };
    while !done(&g, &clock) {
        g = wait(g);
    }
    host_knows(&mut g, &clock);
    super::release_pools(&mut g);
    super::or_sticky(0)
}
pub(crate) unsafe fn cuEventDestroy_v2(event: CUevent) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    match lock().events.remove(&(event as usize)) {
        Some(_) => 0,
        None => INVALID_HANDLE,
    }
}
pub(crate) unsafe fn cuEventQuery(event: CUevent) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    let mut g = lock();
    let Some(ev) = g.events.get(&(event as usize)) else {
        return INVALID_HANDLE;
    };
    let Some((clock, _, _)) = ev.recorded.clone() else {
        return 0;
    };
    if done(&g, &clock) {
        host_knows(&mut g, &clock);
        super::or_sticky(0)
    } else {
        NOT_READY
    }
}
pub(crate) unsafe fn cuEventElapsedTime(
    milliseconds: *mut f32,
    start: CUevent,
    end: CUevent,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let g = lock();
    let (Some(a), Some(b)) = (
        g.events.get(&(start as usize)),
        g.events.get(&(end as usize)),
    ) else {
        return INVALID_HANDLE;
    };
    // Two events of one context only.
    if !a.timing || !b.timing || a.context != b.context {
        return INVALID_HANDLE;
    }
    match (a.stamp, b.stamp) {
        (Some((ga, ta)), Some((gb, tb))) if ga == a.generation && gb == b.generation => {
            let ms = if tb >= ta {
                tb.duration_since(ta).as_secs_f32() * 1000.0
            } else {
                -(ta.duration_since(tb).as_secs_f32() * 1000.0)
            };
            unsafe { put(milliseconds, ms) }
        }
        _ if a.recorded.is_none() || b.recorded.is_none() => INVALID_HANDLE,
        _ => NOT_READY,
    }
}
pub(crate) unsafe fn cuStreamWaitEvent(stream: CUstream, event: CUevent, _flags: c_uint) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    let Some(ev) = g.events.get(&(event as usize)) else {
        return INVALID_HANDLE;
    };
    if let Some(gr) = ev.captured.filter(|gr| g.graphs.contains_key(gr)) {
        // A fork: the stream joins the capture (its work goes into the graph, in the order the
        // host issues it, which keeps every edge of the fork).
        if let Some(s) = g.streams.get_mut(&id) {
            if s.capture.is_none() {
                s.capture = Some(gr);
            }
        }
        return 0;
    }
    if capturing(&g, id) {
        return 0;
    }
    let Some((clock, _, _)) = ev.recorded.clone() else {
        return 0;
    };
    if let Some(s) = g.streams.get_mut(&id) {
        super::join(&mut s.clock, &clock);
    }
    0
}
pub(crate) unsafe fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    unsafe {
        put(least, 0);
        put(greatest, -5)
    }
}

pub(crate) unsafe fn cuStreamBeginCapture_v2(stream: CUstream, mode: c_uint) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    if devices::is_legacy(id) {
        return CAPTURE_UNSUPPORTED;
    }
    if capturing(&g, id) {
        return CAPTURE_UNSUPPORTED;
    }
    let graph = new_id(&mut g);
    g.graphs.insert(
        graph,
        Graph {
            ops: Vec::new(),
            last: Box::new([0]),
            invalidated: false,
        },
    );
    if let Some(s) = g.streams.get_mut(&id) {
        s.capture = Some(graph);
    }
    if mode != CAPTURE_MODE_RELAXED {
        CAPTURING.with(|c| c.set(c.get() + 1));
    }
    BEGUN.with(|b| b.borrow_mut().push((id, mode)));
    0
}

thread_local! {
    /// The captures this thread began: stream and mode.
    static BEGUN: std::cell::RefCell<Vec<(usize, c_uint)>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) unsafe fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    let Some(gr) = g.streams.get(&id).and_then(|s| s.capture) else {
        return INVALID_VALUE;
    };
    let mine = BEGUN.with(|b| {
        let mut b = b.borrow_mut();
        let at = b.iter().position(|&(s, _)| s == id)?;
        Some(b.remove(at).1)
    });
    let Some(mode) = mine else {
        return CAPTURE_WRONG_THREAD;
    };
    if mode != CAPTURE_MODE_RELAXED {
        CAPTURING.with(|c| c.set(c.get().saturating_sub(1)));
    }
    // The streams that joined the capture (forks) leave it with its origin.
    for s in g.streams.values_mut() {
        if s.capture == Some(gr) {
            s.capture = None;
        }
    }
    if g.graphs.get(&gr).is_some_and(|x| x.invalidated) {
        g.graphs.remove(&gr);
        if !graph.is_null() {
            unsafe { put(graph, std::ptr::null_mut()) };
        }
        return 901;
    }
    unsafe { put(graph, gr as CUgraph) }
}
pub(crate) unsafe fn cuStreamGetCaptureInfo_v2(
    stream: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut CUgraph,
    dependencies: *mut *const CUgraphNode,
    count: *mut usize,
) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    let mut g = lock();
    let sid = stream_id(&mut g, stream);
    let capture = g.streams.get(&sid).and_then(|s| s.capture);
    unsafe {
        put(
            status,
            if capture.is_some() {
                CAPTURE_STATUS_ACTIVE
            } else {
                CAPTURE_STATUS_NONE
            },
        );
        if let Some(gr) = capture {
            if !id.is_null() {
                put(id, gr as u64);
            }
            if !graph.is_null() {
                put(graph, gr as CUgraph);
            }
            if let Some(graph) = g.graphs.get(&gr) {
                let n = usize::from(graph.last[0] != 0);
                if !dependencies.is_null() {
                    put(dependencies, graph.last.as_ptr().cast::<CUgraphNode>());
                }
                if !count.is_null() {
                    put(count, n);
                }
            }
        } else if !count.is_null() {
            put(count, 0);
        }
    }
    0
}
pub(crate) unsafe fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    if mode.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller's pointer to a mode.
    let new = unsafe { mode.read() };
    let old = MODE.with(|m| m.replace(new));
    unsafe { put(mode, old) }
}
pub(crate) unsafe fn cuGraphInstantiateWithFlags(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    _flags: c_ulonglong,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let Some(ops) = g.graphs.get(&(graph as usize)).map(|gr| gr.ops.clone()) else {
        return INVALID_HANDLE;
    };
    let id = new_id(&mut g);
    g.execs.insert(
        id,
        Graph {
            ops,
            last: Box::new([0]),
            invalidated: false,
        },
    );
    unsafe { put(exec, id as CUgraphExec) }
}
pub(crate) unsafe fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let id = stream_id(&mut g, stream);
    let Some(ops) = g.execs.get(&(exec as usize)).map(|e| e.ops.clone()) else {
        return INVALID_HANDLE;
    };
    if legacy_refused(&mut g, id) {
        return CAPTURE_IMPLICIT;
    }
    drop(g);
    for op in ops {
        let g = lock();
        let code = enqueue(g, id, Op::new(op.work, op.touches));
        if code != 0 {
            return code;
        }
    }
    0
}
pub(crate) unsafe fn cuGraphUpload(exec: CUgraphExec, _stream: CUstream) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if lock().execs.contains_key(&(exec as usize)) {
        0
    } else {
        INVALID_HANDLE
    }
}
pub(crate) unsafe fn cuGraphExecDestroy(exec: CUgraphExec) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    match lock().execs.remove(&(exec as usize)) {
        Some(_) => 0,
        None => INVALID_HANDLE,
    }
}
pub(crate) unsafe fn cuGraphDestroy(graph: CUgraph) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    match lock().graphs.remove(&(graph as usize)) {
        Some(_) => 0,
        None => INVALID_HANDLE,
    }
}
pub(crate) unsafe fn cuGraphExecKernelNodeSetParams_v2(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const KernelNodeParams,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if params.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller's parameters.
    let p = unsafe { *params };
    let mut g = lock();
    let Some(entry) = g.functions.get(&(p.func as usize)).cloned() else {
        return INVALID_HANDLE;
    };
    let args = unsafe { copy_args(&entry, p.kernel_params) };
    let t = touches_of(&g, &args);
    let Some(e) = g.execs.get_mut(&(exec as usize)) else {
        return INVALID_HANDLE;
    };
    let Some(op) = (node as usize)
        .checked_sub(1)
        .and_then(|i| e.ops.get_mut(i))
    else {
        return INVALID_VALUE;
    };
    // The node's memory parameters stay those of its capture (only scalars are set here).
    let mask = match &op.work {
        Work::Kernel { args: old, .. } => old.1,
        _ => 0,
    };
    op.work = Work::Kernel {
        name: entry.name,
        args: kernels::Args(args.0, mask),
    };
    op.touches = t;
    0
}

pub(crate) unsafe fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if image.is_null() {
        return INVALID_VALUE;
    }
    // A module load is not allowed on a thread that captures in global or thread-local mode:
    // the driver refuses it and invalidates the capture (um relaxes the mode around it).
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    // SAFETY: um passes a NUL-terminated PTX text.
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_string_lossy();
    // The driver's compiler checks the ISA version first: none is an invalid image, a newer one
    // than the model's driver (CUDA 13.0, PTX ISA 9.0) is unsupported.
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(".version "))
        .and_then(|v| {
            let (major, minor) = v.trim().split_once('.')?;
            Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?))
        });
    match version {
        None => return 218,
        Some(v) if v > (9, 0) => return super::super::sys::ERROR_UNSUPPORTED_PTX_VERSION,
        Some(_) => {}
    }
    // The driver's compiler refuses a text whose braces do not balance (a body closed twice, or
    // never): the model's one syntax check, `CUDA_ERROR_INVALID_PTX` (218).
    let mut depth = 0i64;
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return 218;
        }
    }
    if depth != 0 {
        return 218;
    }
    let entries = kernels::parse_ptx(&text);
    let mut g = lock();
    let id = new_id(&mut g);
    g.modules.insert(id, entries);
    unsafe { put(module, id as CUmodule) }
}
pub(crate) unsafe fn cuModuleUnload(module: CUmodule) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    match lock().modules.remove(&(module as usize)) {
        Some(_) => 0,
        None => INVALID_HANDLE,
    }
}
pub(crate) unsafe fn cuModuleGetFunction(
    function: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    if name.is_null() {
        return INVALID_VALUE;
    }
    // With lazy loading the lookup loads the function: refused on a capturing thread, as a load.
    if refused_here() {
        return CAPTURE_UNSUPPORTED;
    }
    // SAFETY: a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    let mut g = lock();
    let Some(entry) = g
        .modules
        .get(&(module as usize))
        .map(|m| m.get(&name).cloned())
    else {
        return INVALID_HANDLE;
    };
    let Some(entry) = entry else {
        return NOT_FOUND;
    };
    let id = new_id(&mut g);
    g.functions.insert(id, entry);
    unsafe { put(function, id as CUfunction) }
}
pub(crate) unsafe fn cuFuncGetAttribute(
    value: *mut c_int,
    attr: c_int,
    function: CUfunction,
) -> i32 {
    if let Some(code) = super::thread_refusal() {
        return code;
    }
    let g = lock();
    let Some(f) = g.functions.get(&(function as usize)) else {
        return INVALID_HANDLE;
    };
    let v = if attr == 0 { f.max_threads } else { 0 };
    unsafe { put(value, v) }
}

/// A launch's arguments, copied (as the driver copies them at the launch).
unsafe fn copy_args(entry: &kernels::Entry, params: *mut *mut c_void) -> kernels::Args {
    let mut args = Vec::with_capacity(entry.params.len());
    for (i, &size) in entry.params.iter().enumerate() {
        // SAFETY: `params` holds one pointer per parameter, each to `size` bytes.
        let bytes = unsafe {
            let p = *params.add(i);
            std::slice::from_raw_parts(p.cast::<u8>(), size).to_vec()
        };
        args.push(bytes);
    }
    kernels::Args(args, kernels::take_launch_memory())
}

/// The allocations a launch's arguments point into.
fn touches_of(g: &State, args: &kernels::Args) -> Vec<(usize, usize)> {
    args.pointers()
        .into_iter()
        .filter(|&p| p != 0 && find(g, p).is_some())
        .map(|p| (p, 1))
        .collect()
}

pub(crate) unsafe fn cuLaunchKernel(
    function: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared_mem_bytes: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> i32 {
    if let Some(code) = super::refusal() {
        return code;
    }
    let mut g = lock();
    let Some(entry) = g.functions.get(&(function as usize)).cloned() else {
        return INVALID_HANDLE;
    };
    let threads = u64::from(block_x) * u64::from(block_y) * u64::from(block_z);
    if grid_x == 0
        || grid_y == 0
        || grid_z == 0
        || threads == 0
        || threads > entry.max_threads as u64
    {
        return INVALID_VALUE;
    }
    if !entry.params.is_empty() && params.is_null() {
        return INVALID_VALUE;
    }
    let args = unsafe { copy_args(&entry, params) };
    let id = stream_id(&mut g, stream);
    if legacy_refused(&mut g, id) {
        return CAPTURE_IMPLICIT;
    }
    let t = touches_of(&g, &args);
    enqueue(
        g,
        id,
        Op::new(
            Work::Kernel {
                name: entry.name,
                args,
            },
            t,
        ),
    )
}

// Entry points um's tests declare themselves (they ask the driver what
// it knows): exported under their C names, so that on the model the test binary's calls reach
// the model instead of libcuda (a definition in the executable comes before a shared library's).

/// `cuPointerGetAttribute` for `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR` (11) and `_RANGE_SIZE`
/// (12): the allocation that holds `address`; `CUDA_ERROR_INVALID_VALUE` where there is none.
///
/// # Safety
///
/// `data` points to a value of the attribute's type (a device pointer, a `size_t`).
#[unsafe(no_mangle)]
#[allow(unreachable_pub)]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    address: CUdeviceptr,
) -> i32 {
    let g = lock();
    let Some(start) = find(&g, address as usize) else {
        return INVALID_VALUE;
    };
    let len = g.allocs.get(&start).map_or(0, |a| a.len);
    match attribute {
        11 => unsafe { put(data.cast::<CUdeviceptr>(), start as CUdeviceptr) },
        12 => unsafe { put(data.cast::<usize>(), len) },
        _ => INVALID_VALUE,
    }
}

/// `cuDevicePrimaryCtxGetState`: whether device 0's primary context is retained.
///
/// # Safety
///
/// `flags` and `active` point to a `c_uint` and a `c_int`.
#[unsafe(no_mangle)]
#[allow(unreachable_pub)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    device: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> i32 {
    if !devices::valid(device) {
        return INVALID_DEVICE;
    }
    let refs = lock().primary_refs.get(&device).copied().unwrap_or(0);
    unsafe {
        put(flags, 0);
        put(active, i32::from(refs > 0))
    }
}

/// `cuStreamAttachMemAsync` under its C name, for the tests that call the driver directly.
///
/// # Safety
///
/// As [`cuStreamAttachMemAsync`].
#[unsafe(export_name = "cuStreamAttachMemAsync")]
#[allow(unreachable_pub)]
pub unsafe extern "C" fn exported_stream_attach(
    stream: CUstream,
    ptr: CUdeviceptr,
    length: usize,
    flags: c_uint,
) -> i32 {
    unsafe { cuStreamAttachMemAsync(stream, ptr, length, flags) }
}
