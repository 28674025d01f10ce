//! Libraries on owned buffers: raw handles and foreign streams. A foreign call is
//! made here through the driver API (`cust::sys`) and through cudarc, the two ways a program
//! meets `um` from another library.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

mod common;

use common::gpu;
use cust::sys as cs;
use um::kernels::testing;
use um::{Error, Managed, StreamOptions};

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
    let ctx = gpu();
    let n = 4099;
    let unified = Managed::from_fn(&ctx, n, |_| 0u32).expect("alloc");
    let mirrored = Managed::from_fn_mirrored(&ctx, n, |_| 0u32).expect("alloc");
    let (unified, mirrored) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut u, mut m) = (unified.attach(s)?, mirrored.attach(s)?);
            let (mut pu, pm) = (u.as_device_ptr_mut(), m.as_device_ptr_mut());
            assert_eq!((pu.len(), pm.len()), (n, n));
            assert_eq!(pu.as_mut_ptr() as u64, pu.address());
            // SAFETY: each address holds `n` u32 of a buffer owned by `s`, and the call is
            // enqueued on `s` while the borrow lasts.
            unsafe {
                memset_u32(pu.address(), 7, n, s.as_raw());
                memset_u32(pm.address(), 9, n, s.as_raw());
            }
            s.sync_all((u, m))
        })
        .expect("stream work");
    assert!(unified.iter().all(|v| *v == 7));
    // The `&mut` address marked the mirror written: `sync` copied the device half back.
    assert!(mirrored.iter().all(|v| *v == 9));
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_read_only_address_leaves_a_mirror_unmarked() {
    let ctx = gpu();
    let data = Managed::from_fn_mirrored(&ctx, 64, |i| i as f32).expect("alloc");
    let before = um::mirror_copies_on_this_thread();
    let data = ctx
        .with_stream(StreamOptions::new(), |s| {
            let d = data.attach(s)?;
            let p = d.as_device_ptr();
            assert_eq!(p.len(), 64);
            assert!(!p.as_ptr().is_null());
            d.sync()
        })
        .expect("stream work");
    let copies = um::mirror_copies_on_this_thread().since(before);
    assert_eq!((copies.to_host, copies.to_host_skipped), (0, 1));
    assert_eq!(data[63], 63.0);
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_raw_handles_are_the_drivers() {
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

/// Red team 4, finding 3: a stream another library is capturing into a graph (PyTorch's
/// `torch.cuda.graph` does that) is refused: the graph would hold none of um's buffers.
#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_being_captured_is_not_a_foreign_stream() {
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

