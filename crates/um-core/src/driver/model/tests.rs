//! The model's own rules, shown on its entry points: what it orders, what it refuses, and the
//! violations it records. A stream is held busy by a host function that blocks its driver
//! thread until the test lets it go, so that "pending" never depends on timing.
#![allow(clippy::undocumented_unsafe_blocks)] // the entry points' pointers are locals here

use std::ffi::c_void;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::super::sys::{
    CAPTURE_MODE_THREAD_LOCAL, CUdeviceptr, CUevent, CUgraph, CUstream, STREAM_LEGACY,
    STREAM_NON_BLOCKING,
};
use super::api::*;
use super::{host_access, take_violations};

/// The model is one process-wide driver: these tests run one at a time.
pub(super) fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let g = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    take_violations();
    g
}

pub(super) fn stream(flags: u32) -> CUstream {
    let mut s = std::ptr::null_mut();
    assert_eq!(unsafe { cuStreamCreateWithPriority(&mut s, flags, 0) }, 0);
    s
}

pub(super) fn managed(bytes: usize) -> CUdeviceptr {
    let mut p = 0;
    assert_eq!(unsafe { cuMemAllocManaged(&mut p, bytes, 1) }, 0);
    p
}

unsafe extern "system" fn hold(_: CUstream, _: i32, data: *mut c_void) {
    // SAFETY: `busy` boxed this receiver for this one call.
    let rx = unsafe { Box::from_raw(data.cast::<Receiver<()>>()) };
    let _ = rx.recv();
}

/// Holds stream `s` busy until the returned sender sends (or is dropped).
pub(super) fn busy(s: CUstream) -> Sender<()> {
    let (tx, rx) = channel::<()>();
    let data = Box::into_raw(Box::new(rx)).cast::<c_void>();
    assert_eq!(unsafe { cuStreamAddCallback(s, hold, data, 0) }, 0);
    tx
}

pub(super) fn fill(p: CUdeviceptr, s: CUstream) -> i32 {
    unsafe { cuMemsetD8Async(p, 7, 64, s) }
}

/// The violation `f` made the model record (and panic with), if any.
pub(super) fn violation_of(f: impl FnOnce()) -> Option<String> {
    let panicked = std::panic::catch_unwind(AssertUnwindSafe(f)).is_err();
    let seen = take_violations();
    assert_eq!(panicked, !seen.is_empty(), "a violation panics: {seen:?}");
    seen.into_iter().next()
}

#[test]
fn a_host_access_before_a_wait_for_the_streams_work_is_a_violation() {
    let _serial = serial();
    let (p, s) = (managed(64), stream(0));
    let go = busy(s);
    assert_eq!(fill(p, s), 0);
    let seen = violation_of(|| host_access(p as usize));
    assert!(seen.is_some_and(|v| v.contains("the host accesses")));
    drop(go);
    assert_eq!(unsafe { cuStreamSynchronize(s) }, 0);
    assert_eq!(violation_of(|| host_access(p as usize + 8)), None);
    // SAFETY: the host owns the memory again.
    assert_eq!(unsafe { *(p as usize as *const u8) }, 7);
    assert_eq!(unsafe { cuMemFree_v2(p) }, 0);
    assert_eq!(unsafe { cuStreamDestroy_v2(s) }, 0);
}

#[test]
fn work_on_two_streams_needs_an_edge_and_an_event_wait_is_one() {
    let _serial = serial();
    let (p, a, b) = (
        managed(64),
        stream(STREAM_NON_BLOCKING),
        stream(STREAM_NON_BLOCKING),
    );
    let go = busy(a);
    assert_eq!(fill(p, a), 0);
    let seen = violation_of(|| {
        fill(p, b);
    });
    assert!(seen.is_some_and(|v| v.contains("no ordering edge")));
    let mut e: CUevent = std::ptr::null_mut();
    assert_eq!(unsafe { cuEventCreate(&mut e, 0x2) }, 0);
    assert_eq!(unsafe { cuEventRecord(e, a) }, 0);
    assert_eq!(unsafe { cuStreamWaitEvent(b, e, 0) }, 0);
    assert_eq!(violation_of(|| assert_eq!(fill(p, b), 0)), None);
    // `b` waits for `a`'s held work: not finished, whatever the time.
    assert_eq!(unsafe { cuStreamQuery(b) }, 600);
    drop(go);
    assert_eq!(unsafe { cuStreamSynchronize(b) }, 0);
    assert_eq!(violation_of(|| host_access(p as usize)), None);
    unsafe {
        assert_eq!(cuEventDestroy_v2(e), 0);
        assert_eq!(cuMemFree_v2(p), 0);
        assert_eq!(cuStreamDestroy_v2(a), 0);
        assert_eq!(cuStreamDestroy_v2(b), 0);
    }
}

#[test]
fn a_free_of_memory_with_pending_work_is_a_violation() {
    let _serial = serial();
    let (p, s) = (managed(64), stream(0));
    let go = busy(s);
    assert_eq!(fill(p, s), 0);
    let seen = violation_of(|| {
        unsafe { cuMemFree_v2(p) };
    });
    assert!(seen.is_some_and(|v| v.contains("freed while work")));
    drop(go);
    assert_eq!(unsafe { cuStreamSynchronize(s) }, 0);
    assert_eq!(unsafe { cuMemFree_v2(p) }, 0);
    assert_eq!(unsafe { cuStreamDestroy_v2(s) }, 0);
}

#[test]
fn a_thread_that_exits_with_memory_attached_to_its_default_stream_is_a_violation() {
    let _serial = serial();
    let exit_with = |flags: u32| {
        let p = managed(64);
        let ptr = p as usize;
        let exited = std::thread::spawn(move || {
            let (p, per_thread) = (ptr as CUdeviceptr, 0x2 as CUstream);
            assert_eq!(unsafe { cuStreamAttachMemAsync(per_thread, p, 0, 0x4) }, 0);
            assert_eq!(fill(p, per_thread), 0);
            if flags != 0x4 {
                assert_eq!(
                    unsafe { cuStreamAttachMemAsync(per_thread, p, 0, flags) },
                    0
                );
            }
            assert_eq!(unsafe { cuStreamSynchronize(per_thread) }, 0);
        })
        .join();
        assert!(exited.is_ok());
        let seen = take_violations();
        assert_eq!(unsafe { cuMemFree_v2(p) }, 0);
        seen
    };
    // Still attached (`CU_MEM_ATTACH_SINGLE`) as the thread exits: the driver's exit never ends.
    let seen = exit_with(0x4);
    assert!(
        seen.len() == 1 && seen[0].contains("still attached to its default stream"),
        "{seen:?}"
    );
    // Re-attached to the host (`CU_MEM_ATTACH_HOST`) first: the thread exits.
    assert_eq!(exit_with(0x2), Vec::<String>::new());
}

#[test]
fn the_legacy_stream_waits_for_blocking_streams_only() {
    let _serial = serial();
    let (p, q) = (managed(64), managed(64));
    let (blocking, other) = (stream(0), stream(STREAM_NON_BLOCKING));
    let go = busy(other);
    assert_eq!(fill(q, STREAM_LEGACY), 0);
    // Not behind the non-blocking stream's held work.
    assert_eq!(unsafe { cuStreamSynchronize(STREAM_LEGACY) }, 0);
    let go_blocking = busy(blocking);
    assert_eq!(fill(p, STREAM_LEGACY), 0);
    assert_eq!(
        unsafe { cuStreamQuery(STREAM_LEGACY) },
        600,
        "behind the blocking one"
    );
    drop(go_blocking);
    drop(go);
    assert_eq!(unsafe { cuCtxSynchronize() }, 0);
    unsafe {
        assert_eq!(cuMemFree_v2(p), 0);
        assert_eq!(cuMemFree_v2(q), 0);
        assert_eq!(cuStreamDestroy_v2(blocking), 0);
        assert_eq!(cuStreamDestroy_v2(other), 0);
    }
}

#[test]
fn a_free_on_a_capturing_thread_is_refused_and_fails_the_capture() {
    let _serial = serial();
    let (p, s) = (managed(64), stream(STREAM_NON_BLOCKING));
    assert_eq!(
        unsafe { cuStreamBeginCapture_v2(s, CAPTURE_MODE_THREAD_LOCAL) },
        0
    );
    assert_eq!(fill(p, s), 0, "captured, not run");
    assert_eq!(unsafe { cuMemFree_v2(p) }, 900);
    assert_eq!(unsafe { cuStreamQuery(s) }, 900);
    // Another thread is not restricted by this thread's capture.
    let mut q = 0;
    std::thread::scope(|t| {
        t.spawn(|| assert_eq!(unsafe { cuMemAllocManaged(&mut q, 8, 1) }, 0));
    });
    let mut g: CUgraph = std::ptr::null_mut();
    assert_eq!(unsafe { cuStreamEndCapture(s, &mut g) }, 901, "invalidated");
    assert!(g.is_null());
    // SAFETY: the capture recorded the fill and ran nothing.
    assert_eq!(unsafe { *(p as usize as *const u8) }, 0);
    unsafe {
        assert_eq!(cuMemFree_v2(p), 0);
        assert_eq!(cuMemFree_v2(q), 0);
        assert_eq!(cuStreamDestroy_v2(s), 0);
    }
}

/// A user's twin runs in its stream's order, and sees a pointer parameter only as a slice the
/// model checked: inside an allocation (to its end), aligned for the element type; a scalar only
/// at its exact size.
#[test]
fn a_registered_twin_runs_in_stream_order_and_sees_only_checked_memory() {
    let _serial = serial();
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    super::register_kernel("twin_probe", |args| {
        let seen = format!(
            "{} params; u32 at 0: {:?}; u32 at 1: {:?}; u8 at 1: {:?}; scalar u32: {:?}; \
             scalar u64 at 2: {:?}; outside: {:?}",
            args.len(),
            args.buffer::<u32>(0).map(<[u32]>::len),
            args.buffer::<u32>(1).map(<[u32]>::len),
            args.buffer::<u8>(1).map(<[u8]>::len),
            args.scalar::<u32>(2),
            args.scalar::<u64>(2),
            args.buffer::<u8>(3).map(<[u8]>::len),
        );
        SEEN.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(seen);
        if let (Some(v), Some(out)) = (args.scalar::<u32>(2), args.buffer_mut::<u32>(0)) {
            out[0] = v;
        }
    });
    let ptx = c".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry twin_probe(\n\
        .param .u64 p0,\n.param .u64 p1,\n.param .u32 p2,\n.param .u64 p3\n)\n{\nret;\n}\n";
    let (mut module, mut function) = (std::ptr::null_mut(), std::ptr::null_mut());
    unsafe {
        assert_eq!(cuModuleLoadData(&mut module, ptx.as_ptr().cast()), 0);
        assert_eq!(
            cuModuleGetFunction(&mut function, module, c"twin_probe".as_ptr()),
            0
        );
    }
    let (p, s) = (managed(64), stream(0));
    let go = busy(s);
    let (mut a0, mut a1, mut a2, mut a3) = (p, p + 1, 42u32, 0x10u64);
    let mut params: [*mut c_void; 4] = [
        (&raw mut a0).cast(),
        (&raw mut a1).cast(),
        (&raw mut a2).cast(),
        (&raw mut a3).cast(),
    ];
    // As um's launch path says of buffers: the first two parameters are memory.
    super::set_launch_memory(0b11);
    let launched = unsafe {
        cuLaunchKernel(
            function,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(launched, 0);
    assert!(
        SEEN.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty(),
        "behind the held stream's work"
    );
    drop(go);
    assert_eq!(unsafe { cuStreamSynchronize(s) }, 0);
    let seen = std::mem::take(&mut *SEEN.lock().unwrap_or_else(PoisonError::into_inner));
    assert_eq!(
        seen,
        [
            "4 params; u32 at 0: Some(16); u32 at 1: None; u8 at 1: Some(63); scalar u32: Some(42); \
          scalar u64 at 2: None; outside: None"
        ]
    );
    // SAFETY: the host owns the memory again.
    assert_eq!(unsafe { *(p as usize as *const u32) }, 42);
    unsafe {
        assert_eq!(cuMemFree_v2(p), 0);
        assert_eq!(cuStreamDestroy_v2(s), 0);
        assert_eq!(cuModuleUnload(module), 0);
    }
}

/// Loads `ptx` and launches its entry `name` on `s` with `params` (one pointer per parameter),
/// every parameter said to be memory, as um's launch path says of buffers.
fn launch_entry(
    ptx: &std::ffi::CStr,
    name: &std::ffi::CStr,
    s: CUstream,
    params: &mut [*mut c_void],
) {
    launch_entry_with(ptx, name, s, params, u64::MAX);
}

/// `launch_entry`, with bit `i` of `memory` set where parameter `i` is memory.
fn launch_entry_with(
    ptx: &std::ffi::CStr,
    name: &std::ffi::CStr,
    s: CUstream,
    params: &mut [*mut c_void],
    memory: u64,
) {
    let (mut module, mut function) = (std::ptr::null_mut(), std::ptr::null_mut());
    super::set_launch_memory(memory);
    unsafe {
        assert_eq!(cuModuleLoadData(&mut module, ptx.as_ptr().cast()), 0);
        assert_eq!(cuModuleGetFunction(&mut function, module, name.as_ptr()), 0);
        let launched = cuLaunchKernel(
            function,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        );
        assert_eq!(launched, 0);
    }
}

/// The model's own twins (of um's test kernels, chosen by name) read their arguments as a
/// user's twin does: a user's kernel of the same name but other parameters, or with an index
/// past its buffer, reaches no memory outside the launch's buffers.
#[test]
fn the_models_own_twin_of_a_kernel_name_reaches_only_the_launchs_buffers() {
    let _serial = serial();
    let (p, q, s) = (managed(64), managed(64), stream(0));
    // `kernel(float *x, int n)` in um's tests; here `kernel(float *x, float *y)`: the second
    // parameter is no `int`, so the twin does nothing (it once took an address's low half for
    // `n` and wrote that many floats from `x`).
    let ptx = c".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry kernel(\n\
        .param .u64 x,\n.param .u64 y\n)\n{\nret;\n}\n";
    let (mut a0, mut a1) = (p, q);
    launch_entry(
        ptx,
        c"kernel",
        s,
        &mut [(&raw mut a0).cast(), (&raw mut a1).cast()],
    );
    // `scatter(float *out, const unsigned *idx, float v, unsigned n)` with an index far past
    // `out`: only the index inside it is written.
    let idx = q as usize as *mut u32;
    unsafe {
        *idx = 3;
        *idx.add(1) = 1 << 24;
    }
    let ptx = c".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry scatter(\n\
        .param .u64 out,\n.param .u64 idx,\n.param .f32 v,\n.param .u32 n\n)\n{\nret;\n}\n";
    let (mut b0, mut b1, mut b2, mut b3) = (p, q, 5.0f32, 2u32);
    launch_entry(
        ptx,
        c"scatter",
        s,
        &mut [
            (&raw mut b0).cast(),
            (&raw mut b1).cast(),
            (&raw mut b2).cast(),
            (&raw mut b3).cast(),
        ],
    );
    assert_eq!(unsafe { cuStreamSynchronize(s) }, 0);
    // SAFETY: the host owns the memory again.
    let out = unsafe { std::slice::from_raw_parts(p as usize as *const f32, 16) };
    let mut want = [0.0f32; 16];
    want[3] = 5.0;
    assert_eq!(out, want);
    assert!(take_violations().is_empty());
    unsafe {
        assert_eq!(cuMemFree_v2(p), 0);
        assert_eq!(cuMemFree_v2(q), 0);
        assert_eq!(cuStreamDestroy_v2(s), 0);
    }
}

/// A twin sees memory only where its launch touched it: an allocation made after the launch at
/// an address a parameter names (a freed buffer's, reused) is not the launch's, since nothing
/// keeps it from the host or from a free while the twin runs.
#[test]
fn an_allocation_made_after_a_launch_at_an_address_it_passes_is_not_given_to_the_twin() {
    let _serial = serial();
    static SEEN: Mutex<Vec<Option<usize>>> = Mutex::new(Vec::new());
    super::register_kernel("twin_reads_param", |args| {
        SEEN.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(args.buffer::<u8>(0).map(<[u8]>::len));
    });
    let ptx = c".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry twin_reads_param(\n\
        .param .u64 p\n)\n{\nret;\n}\n";
    let s = stream(0);
    // Allocated before the launch: the launch's memory.
    let live = managed(64);
    let mut a0 = live;
    launch_entry(ptx, c"twin_reads_param", s, &mut [(&raw mut a0).cast()]);
    // Large enough to be mapped of its own (past glibc's largest mmap threshold), so that a
    // freed block is not cut up for small allocations meanwhile, and is mapped again.
    const BIG: usize = 64 << 20;
    // Freed before their launches, allocated again (some at the same addresses) while the
    // launches are queued.
    let go = busy(s);
    let gone: Vec<CUdeviceptr> = (0..2).map(|_| managed(BIG)).collect();
    for &p in &gone {
        assert_eq!(unsafe { cuMemFree_v2(p) }, 0);
    }
    for &p in &gone {
        let mut a = p;
        launch_entry(ptx, c"twin_reads_param", s, &mut [(&raw mut a).cast()]);
    }
    let mut made = Vec::new();
    while !made.iter().any(|p| gone.contains(p)) {
        assert!(
            made.len() < 4096,
            "the allocator never gave a freed block back"
        );
        made.push(managed(BIG));
    }
    drop(go);
    assert_eq!(unsafe { cuStreamSynchronize(s) }, 0);
    let seen = std::mem::take(&mut *SEEN.lock().unwrap_or_else(PoisonError::into_inner));
    assert_eq!(seen[0], Some(64));
    assert_eq!(seen[1..], [None; 2]);
    assert!(take_violations().is_empty());
    unsafe {
        for p in made.into_iter().chain([live]) {
            assert_eq!(cuMemFree_v2(p), 0);
        }
        assert_eq!(cuStreamDestroy_v2(s), 0);
    }
}

/// A twin runs on its stream's driver thread, where a driver call is refused as it is in a host
/// function (`CUDA_ERROR_NOT_PERMITTED`): a twin cannot allocate, free or wait from inside.
#[test]
fn a_twins_driver_calls_are_refused_as_a_host_functions_are() {
    let _serial = serial();
    static CODES: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    super::register_kernel("twin_calls_the_driver", |args| {
        let mut q = 0;
        let alloc = unsafe { cuMemAllocManaged(&mut q, 8, 1) };
        let address = args.scalar::<u64>(0).unwrap_or(0);
        let free = unsafe { cuMemFree_v2(address) };
        let wait = unsafe { cuCtxSynchronize() };
        CODES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend([alloc, free, wait]);
    });
    let ptx =
        c".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry twin_calls_the_driver(\n\
        .param .u64 p\n)\n{\nret;\n}\n";
    let (p, s) = (managed(64), stream(0));
    let mut a0 = p;
    launch_entry(
        ptx,
        c"twin_calls_the_driver",
        s,
        &mut [(&raw mut a0).cast()],
    );
    assert_eq!(unsafe { cuStreamSynchronize(s) }, 0);
    let codes = std::mem::take(&mut *CODES.lock().unwrap_or_else(PoisonError::into_inner));
    assert_eq!(codes, [800, 800, 800]);
    unsafe {
        assert_eq!(cuMemFree_v2(p), 0, "not freed by the twin");
        assert_eq!(cuStreamDestroy_v2(s), 0);
    }
}

/// A twin's panic is a kernel fault; its payload is dropped on the stream's worker without
/// unwinding out of it, even where the payload's own drop panics (the worker would stop, and a
/// wait for its stream would never return).
#[test]
fn a_panic_payload_whose_drop_panics_is_dropped_without_unwinding() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("a payload's drop");
        }
    }
    let dropped = std::panic::catch_unwind(|| super::twins::drop_payload(Box::new(PanicsOnDrop)));
    assert!(dropped.is_ok());
}

/// A twin gets a slice only of a parameter that um's launch passed as memory (a buffer, or a
/// `DevicePtr` of an `unsafe` launch): a plain value that holds a live allocation's address (a
/// `u64` scalar of a safe launcher, given a host-owned buffer's address) is no memory of the
/// launch, since the host may hold a reference into it while the twin runs.
#[test]
fn a_plain_value_holding_an_allocations_address_is_not_given_to_the_twin() {
    let _serial = serial();
    static SEEN: Mutex<Vec<Option<usize>>> = Mutex::new(Vec::new());
    super::register_kernel("twin_reads_value_or_memory", |args| {
        SEEN.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(args.buffer::<u8>(0).map(<[u8]>::len));
    });
    let ptx = c".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry twin_reads_value_or_memory(\n\
        .param .u64 p\n)\n{\nret;\n}\n";
    let s = stream(0);
    let live = managed(64);
    // The same address, once as a plain value and once as memory.
    for memory in [0, 1] {
        let mut a0 = live;
        launch_entry_with(
            ptx,
            c"twin_reads_value_or_memory",
            s,
            &mut [(&raw mut a0).cast()],
            memory,
        );
        assert_eq!(unsafe { cuStreamSynchronize(s) }, 0);
    }
    let seen = std::mem::take(&mut *SEEN.lock().unwrap_or_else(PoisonError::into_inner));
    assert_eq!(
        seen,
        [None, Some(64)],
        "a value: no slice; memory: its allocation"
    );
    assert!(take_violations().is_empty());
    unsafe {
        assert_eq!(cuMemFree_v2(live), 0);
        assert_eq!(cuStreamDestroy_v2(s), 0);
    }
}
