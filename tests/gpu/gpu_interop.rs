//! Libraries on owned buffers: raw handles and foreign streams. A foreign call is
//! made here through the driver API (`cust::sys`) and through cudarc, the two ways a program
//! meets `um` from another library. `StreamOrder`, the order a library keeps between the
//! streams it is called on: a wait holds after the recorded stream is gone, and it accepts the
//! streams of every handle of its context's device and no other device's.
//!
//! Every test holds the binary's lock: the `StreamOrder` test tells "the host waited for a
//! spinning kernel" from "it did not" by time, and a test beside it that frees memory or drops a
//! context handle waits for the whole device, during which the driver may hold the calls of
//! this one too (its inner scope once waited the whole 3 s spin, 4x H100).
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use std::time::{Duration, Instant};

use common::{gpu, serial, watchdog};
use cust::sys as cs;
use um::{Context, Error, Managed, StreamOptions, StreamOrder};
use um_test_kernels::testing::{self, add_scalar, spin_then_add};

/// `cuMemsetD32Async` of `value` over `n` elements at `address`, on `stream`: a foreign call
/// that writes a buffer.
///
/// # Safety
/// `address..address + 4 n` is device memory the stream may write, `stream` a live stream.
unsafe fn memset_u32(address: u64, value: u32, n: usize, stream: *mut std::ffi::c_void) {
    // SAFETY: the caller's guarantees.
    let r = unsafe { cs::cuMemsetD32Async(address, value, n, stream.cast()) };
    assert_eq!(r, cs::CUresult::CUDA_SUCCESS, "cuMemsetD32Async");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_foreign_call_writes_a_stream_owned_buffer_of_every_storage() {
    let _serial = serial();
    let ctx = gpu();
    let n = 4099;
    let unified = Managed::from_fn(&ctx, n, |_| 0u32).expect("alloc");
    let mirrored = Managed::from_fn_mirrored(&ctx, n, |_| 0u32).expect("alloc");
    let device = Managed::from_slice_device(&ctx, &vec![0u32; n]).expect("alloc");
    let (unified, mirrored, device) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut u, mut m, mut d) =
                (unified.attach(s)?, mirrored.attach(s)?, device.attach(s)?);
            let (mut pu, pm, pd) = (
                u.as_device_ptr_mut(),
                m.as_device_ptr_mut(),
                d.as_device_ptr_mut(),
            );
            assert_eq!((pu.len(), pm.len(), pd.len()), (n, n, n));
            assert_eq!(pu.as_mut_ptr() as u64, pu.address());
            // SAFETY: each address holds `n` u32 of a buffer owned by `s`, and the call is
            // enqueued on `s` while the borrow lasts.
            unsafe {
                memset_u32(pu.address(), 7, n, s.as_raw());
                memset_u32(pm.address(), 9, n, s.as_raw());
                memset_u32(pd.address(), 11, n, s.as_raw());
            }
            s.sync_all((u, m, d))
        })
        .expect("stream work");
    assert!(unified.iter().all(|v| *v == 7));
    // The `&mut` address marked the mirror written: `sync` copied the device half back.
    assert!(mirrored.iter().all(|v| *v == 9));
    // Device memory has no host side: its contents come back by a copy.
    assert!(device.to_vec().expect("copy").iter().all(|v| *v == 11));
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_read_only_address_leaves_a_mirror_unmarked() {
    let _serial = serial();
    let ctx = gpu();
    let data = Managed::from_fn_mirrored(&ctx, 64, |i| i as f32).expect("alloc");
    let before = um_core::mirror_copies_on_this_thread();
    let data = ctx
        .with_stream(StreamOptions::new(), |s| {
            let d = data.attach(s)?;
            let p = d.as_device_ptr();
            assert_eq!(p.len(), 64);
            assert!(!p.as_ptr().is_null());
            d.sync()
        })
        .expect("stream work");
    let copies = um_core::mirror_copies_on_this_thread().since(before);
    assert_eq!((copies.to_host, copies.to_host_skipped), (0, 1));
    assert_eq!(data[63], 63.0);
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_raw_handles_are_the_drivers() {
    let _serial = serial();
    let ctx = gpu();
    let cudarc = cudarc::driver::CudaContext::new(0).expect("cudarc context");
    // Both retain device 0's primary context: one driver handle.
    assert_eq!(ctx.as_raw(), cudarc.cu_ctx().cast());
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut owner: cs::CUcontext = std::ptr::null_mut();
        // SAFETY: a live stream and a valid out-pointer.
        let r = unsafe { cs::cuStreamGetCtx(s.as_raw().cast(), &mut owner) };
        assert_eq!(r, cs::CUresult::CUDA_SUCCESS);
        assert_eq!(owner.cast(), ctx.as_raw());
        Ok(())
    })
    .expect("stream");
    ctx.with_per_thread_stream(|p| {
        assert_eq!(p.as_raw() as usize, 0x2, "CU_STREAM_PER_THREAD");
        Ok(())
    })
    .expect("per-thread stream");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_cudarc_stream_runs_um_work_in_order_with_its_own() {
    let _serial = serial();
    let ctx = gpu();
    let cudarc = cudarc::driver::CudaContext::new(0).expect("cudarc context");
    let stream = cudarc.new_stream().expect("cudarc stream");
    let n = 1 << 16;
    // cudarc's own buffer, filled on its stream.
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let theirs = stream.clone_htod(&host).expect("cudarc copy to the device");
    let data = Managed::from_fn(&ctx, n, |_| 1.0f32).expect("alloc");
    // SAFETY: cudarc keeps `stream` alive until the end of this test, and enqueues nothing on
    // it that touches `data` while the closure runs.
    let data = unsafe {
        ctx.with_foreign_stream(stream.cu_stream().cast(), |s| {
            let mut d = data.attach(s)?;
            testing::add_scalar(s, &mut d, 2.0)?;
            // A foreign kernel between um's: spins 50 ms, then adds 1.
            testing::spin_then_add(s, &mut d, 1.0, 50_000_000)?;
            testing::add_scalar(s, &mut d, 0.5)?;
            d.sync()
        })
    }
    .expect("um work on the cudarc stream");
    assert!(data.iter().all(|v| *v == 4.5), "{}", data[0]);
    // cudarc's work on the same stream is intact, and the stream still cudarc's.
    let back = stream.clone_dtoh(&theirs).expect("cudarc copy back");
    assert_eq!(back, host);
    stream.synchronize().expect("cudarc's stream lives on");
}

#[test]
#[ignore = "needs a CUDA device"]
fn special_handles_are_not_foreign_streams() {
    let _serial = serial();
    let ctx = gpu();
    for (handle, what) in [
        (0usize, "NULL"),
        (1, "CU_STREAM_LEGACY"),
        (2, "CU_STREAM_PER_THREAD"),
    ] {
        // SAFETY: refused before the handle is used as a stream.
        let got = unsafe { ctx.with_foreign_stream(handle as *mut _, |_| Ok(())) };
        assert!(
            matches!(got, Err(Error::InvalidForeignStream { .. })),
            "{what}: {got:?}"
        );
    }
}

/// A stream another library is capturing into a graph (PyTorch's `torch.cuda.graph` does that) is
/// refused: the graph would hold none of um's buffers.
#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_being_captured_is_not_a_foreign_stream() {
    let _serial = serial();
    let ctx = gpu();
    ctx.make_current().expect("current");
    let mut raw: cs::CUstream = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; a non-blocking stream of the current context.
    let r =
        unsafe { cs::cuStreamCreate(&mut raw, cs::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) };
    assert_eq!(r, cs::cudaError_enum::CUDA_SUCCESS);
    // SAFETY: a live stream of the current context, not capturing; relaxed mode, so that this
    // thread's other calls stay allowed.
    let r = unsafe {
        cs::cuStreamBeginCapture_v2(raw, cs::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
    };
    assert_eq!(r, cs::cudaError_enum::CUDA_SUCCESS);
    // SAFETY: `raw` lives until after the call; refused before it is used as a stream.
    let got = unsafe { ctx.with_foreign_stream(raw.cast(), |_| Ok(())) };
    assert!(
        matches!(got, Err(Error::InvalidForeignStream { reason }) if reason.contains("captured")),
        "{got:?}"
    );
    let mut graph: cs::CUgraph = std::ptr::null_mut();
    // SAFETY: the capture begun above, ended once; the empty graph and the stream destroyed.
    unsafe {
        assert_eq!(
            cs::cuStreamEndCapture(raw, &mut graph),
            cs::cudaError_enum::CUDA_SUCCESS
        );
        if !graph.is_null() {
            cs::cuGraphDestroy(graph);
        }
        cs::cuStreamDestroy_v2(raw);
    }
}

// ---------------------------------------------------------------------------------------------
// `StreamOrder`.

/// How long the spin kernel holds its stream: 3 s, 10 s under a sanitizer (whose slowdown of
/// the host's calls must stay well under it: the test below tells "the host waited for the spin"
/// from "it did not" by half of it).
fn spin_ns() -> u64 {
    if common::under_sanitizer() {
        10_000_000_000
    } else {
        3_000_000_000
    }
}

/// `StreamOrder` recorded on a created stream whose scope then ends (the stream destroyed with a 3
/// s spin still running: its buffer was handed off to an outer stream, so nothing waits at the
/// inner scope's end), waited for on a stream created next (the driver may give it the same
/// handle). Expected: the new stream's sync waits for the spin.
#[test]
#[ignore = "needs a CUDA device"]
fn stream_order_outlives_the_stream_it_recorded() {
    let _serial = serial();
    let _dog = watchdog("a StreamOrder of a destroyed stream");
    let ctx = gpu();
    let order = StreamOrder::new(&ctx).expect("order");
    let busy = Managed::<[f32]>::zeroed_slice(&ctx, 1).expect("alloc");
    let y = Managed::<[f32]>::zeroed_slice(&ctx, 4).expect("alloc");
    let (waited, busy) = ctx
        .with_stream(StreamOptions::new().non_blocking(), |outer| {
            let t = Instant::now();
            let busy = ctx.with_stream(StreamOptions::new().non_blocking(), |inner| {
                let mut busy = busy.attach(inner)?;
                spin_then_add(inner, &mut busy, 1.0, spin_ns())?;
                order.record(inner)?;
                busy.hand_off(outer) // no host wait; `inner` is destroyed with the spin running
            })?;
            // Without a tool the inner scope returns at once (2x H200: the test passed), so the
            // wait below is what holds the new stream. Under every compute-sanitizer tool the
            // inner scope's end waited for the spin (10 s, 2x H200, bundle b6a63e5), so there
            // the order below is seen but not told apart from that wait: said, not failed.
            let inner = t.elapsed();
            if inner >= Duration::from_nanos(spin_ns() / 2) {
                assert!(
                    common::under_sanitizer(),
                    "the inner scope waited ({inner:?})"
                );
                eprintln!("inconclusive under the tool: the inner scope waited {inner:?}");
            }
            let waited = ctx.with_stream(StreamOptions::new().non_blocking(), |next| {
                order.enqueue_wait(next)?;
                let mut y = y.attach(next)?;
                add_scalar(next, &mut y, 1.0)?;
                let _ = y.sync()?;
                Ok(t.elapsed())
            })?;
            Ok((waited, busy.sync()?))
        })
        .expect("streams");
    assert_eq!(busy[0], 1.0);
    assert!(
        waited >= Duration::from_nanos(spin_ns()) - Duration::from_millis(200),
        "the wait on a destroyed stream's record did not hold ({waited:?})"
    );
}

/// Two `Context` handles of one device are `same_as`: an order of one accepts the other's streams
/// (the per-thread stream has two ids then, which only costs a redundant wait); an order of device
/// 0 refuses a stream of device 1 (`ContextMismatch`), where the driver would have accepted a
/// cross-device wait: an `Err`, never UB.
#[test]
#[ignore = "needs a CUDA device"]
fn stream_order_across_context_handles() {
    let _serial = serial();
    let ctx1 = gpu();
    let ctx2 = Context::new(0).expect("device 0 again");
    let order = StreamOrder::new(&ctx1).expect("order");
    ctx2.with_per_thread_stream(|s| {
        order.record(s)?;
        ctx1.with_per_thread_stream(|t| order.enqueue_wait(t))
    })
    .expect("one primary context, two handles");
    if let Ok(other) = Context::new(1) {
        let r = other.with_stream(StreamOptions::new(), |s| order.record(s));
        assert!(matches!(r, Err(um::Error::ContextMismatch)), "{r:?}");
    }
}
