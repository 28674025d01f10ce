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
