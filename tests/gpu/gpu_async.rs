//! Waiting without blocking a thread, on a real GPU: `sync_async`, `sync_all_async`, the async
//! stream scopes, cancellation with work in flight (at each await point, a forgotten scope), no
//! leak, and a sticky error surfaced.
//!
//! A user's waker runs inside um's stream callback, on the driver's thread, where CUDA says no
//! API call may be made: every call of `um` that reaches the driver, cuBLAS or NCCL is refused
//! there (`Error::InsideDriverCallback`) before any such call (a context, a device count, an
//! allocation, a coherent allocation's admission, a `Blas` call, a whole-context wait, NCCL's
//! communicators), `reap_pending` returns at once, host-owned memory dropped there is freed by
//! the reaper thread, and what may still be in use is leaked (a `Blas`, a `Comm`, an event, a
//! scope future's stream and buffers); the future itself still completes right.
//!
//! Most futures here are driven by `pollster::block_on`, the smallest executor there is: it
//! parks the thread until the waker (called from the driver's callback thread) unparks it, so
//! these tests also show that the wake-up arrives; the tests of what a waker may do poll with
//! wakers of their own (`common::waker`). The tests share a lock: some of them compare the
//! GPU's free memory or count the orphans pending, which other tests of this binary must not
//! move meanwhile. Three tests depend on what happens once per process, and test the first
//! time only when run alone (`--exact`):
//! `context_new_of_another_device_in_a_waker_creates_no_context`,
//! `a_first_coherent_allocation_in_a_waker_is_refused_before_any_driver_call` and
//! `comm_init_all_in_a_waker_is_refused_before_any_nccl_call`.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::waker::{
    ActingWaker, comm_action_in_callback, poll_woken, run_in_callback, wait_until_woken,
};
use common::{assert_context_usable, gpu, watchdog, workload};
use pollster::block_on;
use um::kernels::streams::kernel;
use um::nccl::{Comm, CommOptions};
use um::{Context, Error, LaunchConfig, Managed, StreamOptions, StreamOrder};
use um_cublas::{Blas, Gemm};
use um_test_kernels::testing::{self, add_scalar, axpy, spin_then_add};

use crate::common::{poll_once, serial};

#[test]
#[ignore = "needs a CUDA device"]
fn sync_async_returns_the_kernel_results() {
    let _serial = serial();
    let ctx = gpu();
    let data = Managed::from_fn(&ctx, 10_001, |i| i as f32).expect("alloc");
    let data = block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut d = data.attach(s)?;
        add_scalar(s, &mut d, 1.0)?;
        let d = d.sync_async().await?;
        // Back on the host inside the scope: attach again, across another await.
        let mut d = d.attach(s)?;
        add_scalar(s, &mut d, 1.0)?;
        d.sync_async().await
    }))
    .expect("stream work");
    for (i, v) in data.iter().enumerate() {
        assert_eq!(*v, i as f32 + 2.0, "data[{i}]");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_event_thread_mechanism_gives_the_same_results() {
    let _serial = serial();
    let ctx = gpu();
    let event_thread = common::event_thread_for_waits();
    let data = Managed::from_fn(&ctx, 10_001, |i| i as f32).expect("alloc");
    let data = block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut d = data.attach(s)?;
        add_scalar(s, &mut d, 1.0)?;
        let d = d.sync_async().await?;
        let mut d = d.attach(s)?;
        add_one(s, &mut d)?;
        s.sync_all_async(vec![d]).await
    }));
    drop(event_thread);
    let data = data.expect("stream work");
    for (i, v) in data[0].iter().enumerate() {
        assert_eq!(*v, i as f32 + 2.0, "data[{i}]");
    }
}

fn add_one<'s>(s: &um::Stream<'s>, d: &mut Managed<[f32], um::StreamOwned<'s>>) -> um::Result<()> {
    add_scalar(s, d, 1.0)
}

#[test]
#[ignore = "needs a CUDA device"]
fn sync_all_async_returns_tuples_and_vecs() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, 4097, |i| i as f32).expect("alloc x");
    let y = Managed::from_fn(&ctx, 4097, |_| 1.0f32).expect("alloc y");
    let zs: Vec<_> = (0..5)
        .map(|k| Managed::from_fn(&ctx, 300, move |_| k as f32).expect("alloc z"))
        .collect();
    let ((x, y), zs) = block_on(ctx.with_stream_async(
        StreamOptions::new().non_blocking(),
        async |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            axpy(s, &x, &mut y, 3.0)?;
            let pair = s.sync_all_async((x, y)).await?;
            let mut zs = zs
                .into_iter()
                .map(|z| z.attach(s))
                .collect::<um::Result<Vec<_>>>()?;
            for z in &mut zs {
                add_scalar(s, z, 10.0)?;
            }
            Ok((pair, s.sync_all_async(zs).await?))
        },
    ))
    .expect("stream work");
    for i in 0..4097 {
        assert_eq!(x[i], i as f32, "x is read-only for the kernel");
        assert_eq!(y[i], 3.0 * i as f32 + 1.0, "y[{i}]");
    }
    for (k, z) in zs.iter().enumerate() {
        assert!(z.iter().all(|v| *v == k as f32 + 10.0), "z{k}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn per_thread_and_stream_set_scopes() {
    let _serial = serial();
    let ctx = gpu();
    let a = Managed::from_fn(&ctx, 1000, |_| 1.0f32).expect("alloc");
    let a = block_on(ctx.with_per_thread_stream_async(async |s| {
        let mut a = a.attach(s)?;
        add_scalar(s, &mut a, 4.0)?;
        a.sync_async().await
    }))
    .expect("per-thread stream");
    assert!(a.iter().all(|v| *v == 5.0));

    let bufs: Vec<_> = (0..4)
        .map(|k| Managed::from_fn(&ctx, 256, move |_| k as f32).expect("alloc"))
        .collect();
    let (bufs, mismatch) =
        block_on(
            ctx.with_stream_set_async(4, StreamOptions::new(), async |ss| {
                let mut out = Vec::new();
                for (buf, s) in bufs.into_iter().zip(ss) {
                    let mut b = buf.attach(s)?;
                    add_scalar(s, &mut b, 1.0)?;
                    out.push(b);
                }
                // A buffer of stream 0 synced on stream 1 of the set: checked at run time.
                let first = out.remove(0);
                let mismatch = ss[1].sync_all_async(vec![first]).await;
                let mut host = Vec::new();
                for (b, s) in out.into_iter().zip(&ss[1..]) {
                    host.push(s.sync_all_async((b,)).await?.0);
                }
                Ok((host, mismatch.map(drop)))
            }),
        )
        .expect("stream set");
    assert_eq!(mismatch, Err(Error::StreamMismatch { argument: 0 }));
    for (k, b) in bufs.iter().enumerate() {
        assert!(
            b.iter().all(|v| *v == (k + 1) as f32 + 1.0),
            "buffer {}",
            k + 1
        );
    }
}

/// How long `spin_then_add` keeps a stream busy in the cancellation tests: long enough that
/// the stream is certainly still running when a drop that does not wait returns.
const BUSY_NS: u64 = 2_000_000_000;

/// One round of cancellation: a kernel queued behind one that spins for [`BUSY_NS`] (so it is
/// certainly still to run), the future polled once and dropped. Asserts that the stream was
/// still busy when the drop returned (it did not wait for the stream) and that the buffer went
/// to the reaper.
fn cancel_with_kernel_in_flight(ctx: &um::Context, n: usize) -> um::Result<()> {
    cancel_buffer_with_kernel_in_flight(ctx, Managed::<[f32]>::zeroed_slice(ctx, n)?)
}

/// [`cancel_with_kernel_in_flight`] for a buffer of either storage.
fn cancel_buffer_with_kernel_in_flight<M: um::Storage>(
    ctx: &um::Context,
    x: Managed<[f32], um::HostOwned, M>,
) -> um::Result<()> {
    let busy = Managed::<[f32]>::zeroed_slice(ctx, 1)?;
    block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut busy = busy.attach(s)?;
        spin_then_add(s, &mut busy, 1.0, BUSY_NS)?;
        let mut x = x.attach(s)?;
        // pow/sqrt over n floats, queued behind the spinning kernel: still to run at the drop.
        kernel(s, &mut x)?;
        let mut fut = x.sync_async();
        assert!(
            poll_once(&mut fut).is_pending(),
            "the spinning kernel holds the stream"
        );
        let before = um_core::orphans_pending();
        drop(fut);
        assert!(
            !s.is_idle()?,
            "the drop returned only once the stream was done: it waited"
        );
        assert!(
            um_core::orphans_pending() > before,
            "the buffer went to the reaper"
        );
        busy.sync_async().await.map(drop)
    }))
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_a_future_with_a_kernel_in_flight_frees_once_the_stream_is_done() {
    let _serial = serial();
    let ctx = gpu();
    cancel_with_kernel_in_flight(&ctx, common::workload(1 << 22, 1 << 12)).expect("cancel");
    um::reap_pending();
    assert_eq!(um_core::orphans_pending(), 0);
    // The context is healthy: a use-after-free on the GPU would have been a sticky error.
    let probe = Managed::from_fn(&ctx, 8, |_| 1.0f32).expect("alloc after");
    let probe = block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut p = probe.attach(s)?;
        add_scalar(s, &mut p, 1.0)?;
        p.sync_async().await
    }))
    .expect("context still usable");
    assert!(probe.iter().all(|v| *v == 2.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn cancelled_futures_leak_nothing() {
    let _serial = serial();
    let ctx = gpu();
    let n = common::workload(64 << 20, 1 << 20); // 256 MiB of f32 (4 MiB under the sanitizer)
    let bytes = n * 4;
    // Warm up: module load, stream creation, the reaper thread.
    cancel_with_kernel_in_flight(&ctx, 1 << 10).expect("warm-up");
    um::reap_pending();

    let (before, _) = ctx.mem_info().expect("mem info");
    // Control: the same buffer, written by the kernel and still held, shows in free memory,
    // so a leaked one would too.
    let z = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("alloc");
    let z = block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut z = z.attach(s)?;
        kernel(s, &mut z)?;
        z.sync_async().await
    }))
    .expect("control");
    let (held, _) = ctx.mem_info().expect("mem info");
    drop(z);
    println!("free: before {before}, with a {bytes}-byte buffer on the device {held}");
    // Under a sanitizer free memory says nothing about a leak; the cancellations still run
    // (and the tool checks their memory accesses).
    let counts_memory = common::counts_free_memory();
    if counts_memory {
        assert!(
            before.saturating_sub(held) >= bytes / 2,
            "a buffer the kernel wrote shows in free memory"
        );
    }

    for _ in 0..3 {
        cancel_with_kernel_in_flight(&ctx, n).expect("cancel");
    }
    um::reap_pending();
    let (after, _) = ctx.mem_info().expect("mem info");
    println!("free: before {before}, after three cancelled rounds {after}");
    // One leaked buffer would be `bytes` (the control shows it counts); allow less than half
    // of that for the driver's own bookkeeping.
    if counts_memory {
        assert!(
            after + bytes / 2 >= before,
            "free memory back to where it was: before {before}, after {after}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_the_scope_future_mid_way_neither_waits_nor_leaks() {
    let _serial = serial();
    let ctx = gpu();
    let n = common::workload(1 << 20, 1 << 12);
    let x = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("x");
    let y = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("y");
    let busy = Managed::<[f32]>::zeroed_slice(&ctx, 1).expect("busy");
    let mut scope = Box::pin(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut busy = busy.attach(s)?;
        spin_then_add(s, &mut busy, 1.0, BUSY_NS)?;
        let (mut x, mut y) = (x.attach(s)?, y.attach(s)?);
        kernel(s, &mut x)?;
        kernel(s, &mut y)?;
        // `y` stays attached across the await; `x` waits in a sync future.
        let x = x.sync_async().await?;
        let y = y.sync_async().await?;
        drop(busy);
        Ok(x.len() + y.len())
    }));
    let before = um_core::orphans_pending();
    let polled = poll_once(&mut scope);
    assert!(polled.is_pending(), "the spinning kernel holds the stream");
    drop(scope); // drops the closure's future (the buffers to the reaper), then the stream
    // Had the drop waited for the stream, the buffers would have been freed there, not
    // handed to the reaper behind a callback that has not run yet.
    assert!(
        um_core::orphans_pending() >= before + 3,
        "busy, x and y went to the reaper: {} pending, {before} before",
        um_core::orphans_pending()
    );
    um::reap_pending();
    assert_eq!(um_core::orphans_pending(), 0);
    ctx.wait_idle().expect("no fault");
}

/// Child: launches the trap kernel, awaits its buffer's future (with the chosen mechanism), and
/// checks that the fault comes back as an `Err`.
fn fault_child(event_thread: bool) {
    let ctx = gpu();
    um_core::use_event_thread_for_waits(event_thread);
    let k = ctx
        .load_ptx(common::TRAP_PTX)
        .and_then(|m| m.kernel("trap_kernel"))
        .expect("load");
    let x = Managed::from_slice(&ctx, &[0.0f32; 16]).expect("alloc");
    let err = block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut x = x.attach(s)?;
        // SAFETY: none; this launch breaks the contract on purpose, in a child process.
        unsafe { s.launch(&k, LaunchConfig::grid_1d(1, 1), (&mut x,)) }?;
        x.sync_async().await.map(drop) // the future wakes, checks the stream: Err
    }))
    .expect_err("the fault is reported");
    println!("fault reported: {err}");
    assert!(
        matches!(&err, Error::Driver { name, .. }
            if name == "CUDA_ERROR_LAUNCH_FAILED" || name == "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
        "{err:?}"
    );
    drop(ctx);
    println!("every drop returned");
}

#[test]
#[ignore = "needs a CUDA device"]
fn fault_sticky_error_is_surfaced_by_the_future() {
    let _serial = crate::common::serial();
    if common::is_fault_child() {
        return fault_child(false);
    }
    common::run_in_child("fault_sticky_error_is_surfaced_by_the_future");
}

#[test]
#[ignore = "needs a CUDA device"]
fn fault_sticky_error_is_surfaced_through_the_event_thread() {
    let _serial = crate::common::serial();
    if common::is_fault_child() {
        return fault_child(true);
    }
    common::run_in_child("fault_sticky_error_is_surfaced_through_the_event_thread");
}

#[test]
#[ignore = "needs a CUDA device"]
fn mirrored_memory_syncs_asynchronously_and_cancels_without_a_leak() {
    let _serial = serial();
    let ctx = gpu();
    // Results: the future's release enqueues the device-to-host copy of a written mirror.
    let data =
        um::MirroredManaged::<[f32]>::from_slice_mirrored(&ctx, &[1.0f32; 4097]).expect("alloc");
    let data = block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut d = data.attach(s)?;
        add_scalar(s, &mut d, 2.0)?;
        d.sync_async().await
    }))
    .expect("stream work");
    assert!(
        data.iter().all(|v| *v == 3.0),
        "the copy back ran before the wake-up"
    );

    // Cancellation: a mirror's future dropped with a kernel in flight goes to the reaper,
    // which frees both halves once the stream is done.
    let x = um::MirroredManaged::<[f32]>::zeroed_slice_mirrored(&ctx, 1 << 20).expect("alloc");
    cancel_buffer_with_kernel_in_flight(&ctx, x).expect("cancel");
    um::reap_pending();
    assert_eq!(um_core::orphans_pending(), 0);
    ctx.wait_idle().expect("no fault");
}

// ---------------------------------------------------------------------------------------------
// Cancellation at each await point; a user's waker that calls CUDA.

/// A kernel's time on the GPU: long outside the sanitizer, short under it.
fn spin_ns(full_ms: u64) -> u64 {
    if std::env::var_os("UM_SANITIZE").is_some() {
        5_000_000
    } else {
        full_ms * 1_000_000
    }
}

/// An async scope cancelled at each await point (its memory goes to the reaper and is freed after
/// the stream), a leaked scope future, and a sync future polled after `Ready` (a documented panic).
#[test]
#[ignore = "needs a CUDA device"]
fn async_cancellation_frees_nothing_in_use_and_a_forgotten_scope_leaks_it() {
    let _serial = serial();
    let ctx = gpu();
    let mut cx = TaskContext::from_waker(Waker::noop());
    for cancel_at in 0..3 {
        let n = workload(1 << 16, 1 << 10);
        let data = Managed::from_slice(&ctx, &vec![0.0f32; n]).expect("alloc");
        let other = Managed::from_slice(&ctx, &vec![0.0f32; n]).expect("alloc");
        let spin = spin_ns(100);
        let scope = ctx.with_stream_async(StreamOptions::new(), async move |s| {
            let mut d = data.attach(s)?;
            let o = other.attach(s)?;
            testing::spin_then_add(s, &mut d, 1.0, spin)?;
            let d = d.sync_async().await?;
            let o = o.sync_async().await?;
            std::future::pending::<()>().await;
            Ok((d, o))
        });
        let mut scope = Box::pin(scope);
        for _ in 0..=cancel_at {
            let _ = scope.as_mut().poll(&mut cx);
        }
        if cancel_at == 2 {
            std::mem::forget(scope);
        } else {
            drop(scope);
        }
    }
    um::reap_pending();
    assert_eq!(um_core::orphans_pending(), 0);
    let data = Managed::from_slice(&ctx, &[0.0f32; 16]).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut fut = pin!(data.attach(s)?.sync_async());
        let host = loop {
            if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                break r?;
            }
        };
        assert_eq!(host[0], 0.0);
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = fut.as_mut().poll(&mut cx);
        }));
        assert!(again.is_err(), "a poll after Ready panics, as documented");
        Ok(())
    })
    .expect("stream work");
}

/// A user's waker runs on the driver's callback thread, where the driver may refuse any CUDA call
/// (`CUDA_ERROR_NOT_PERMITTED`): um returns a refusal as `Err`, and the sync future still completes
/// right. (A waker that waits for device work there could deadlock, which is not memory-unsafe; it
/// is not tried.)
#[test]
#[ignore = "needs a CUDA device"]
fn a_waker_that_calls_cuda_from_the_callback_gets_errors_not_ub() {
    let _serial = crate::common::serial();
    struct Evil {
        ctx: Context,
        seen: std::sync::Mutex<Vec<bool>>,
    }
    impl Wake for Evil {
        fn wake(self: Arc<Self>) {
            let alloc = Managed::from_slice(&self.ctx, &[1u8]).map(drop);
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(alloc.is_err());
            }
        }
    }
    let _serial = serial();
    let ctx = gpu();
    let evil = Arc::new(Evil {
        ctx: ctx.clone(),
        seen: std::sync::Mutex::new(Vec::new()),
    });
    let data = Managed::from_slice(&ctx, &[0.0f32; 1024]).expect("alloc");
    let waker = Waker::from(Arc::clone(&evil));
    let mut cx = TaskContext::from_waker(&waker);
    let host = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            testing::spin_then_add(s, &mut d, 1.0, spin_ns(50))?;
            let mut fut = Box::pin(d.sync_async());
            let _ = fut.as_mut().poll(&mut cx);
            std::thread::sleep(std::time::Duration::from_millis(200));
            pollster::block_on(fut)
        })
        .expect("the future completes");
    assert!(host.iter().all(|v| *v == 1.0));
    let seen = evil.seen.lock().map(|s| s.clone()).unwrap_or_default();
    println!("allocations in the callback refused: {seen:?}");
    assert!(!seen.is_empty(), "the waker ran on the callback thread");
}

// ---------------------------------------------------------------------------------------------
// Memory, events and handles dropped by a waker inside the stream callback.

/// A host-owned buffer (unified, 256 MiB) held by a waker and dropped there (rules 71, 189):
/// `Managed::drop` hands it to the reaper thread instead of calling `cuMemFree` inside the
/// callback, where CUDA says "Callbacks must not make any CUDA API calls" and "may" (not "must")
/// return CUDA_ERROR_NOT_PERMITTED. Expected: no hang (watchdog), the memory freed once
/// `reap_pending` returns (free memory compared), the context usable. A call made there would
/// leak the 256 MiB where the driver refuses it, or hang where it waits.
#[test]
#[ignore = "needs a CUDA device"]
fn a_host_owned_buffer_dropped_by_a_waker_is_freed_by_the_reaper_not_in_the_callback() {
    let _serial = serial();
    let _dog = watchdog("a host-owned buffer dropped by a waker");
    let ctx = gpu();
    const BYTES: usize = 256 << 20;
    // The same path once with 4 KiB first: the context's first kernel launch and first callback
    // make its lazy allocations (126 MiB on an H100: failed 8 of 8 runs when this test ran first
    // in its process, 2026-11-23), which would count as not given back.
    touched_then_dropped_in_a_waker(&ctx, 1024);
    let (free_before, _) = ctx.mem_info().expect("mem_info");
    touched_then_dropped_in_a_waker(&ctx, BYTES / 4);
    let (free_after, _) = ctx.mem_info().expect("mem_info");
    let slack = 64 << 20;
    assert!(
        free_after + slack >= free_before,
        "{} MiB not given back after a drop in a waker",
        (free_before.saturating_sub(free_after)) >> 20
    );
    assert_context_usable(&ctx);
}

/// A unified buffer of `len` f32, touched on the device once (so its pages are resident and
/// counted), then dropped by a waker inside the stream callback (`Managed::drop` of a
/// host-owned buffer there); returns once the reaper has run and the device is idle.
fn touched_then_dropped_in_a_waker(ctx: &Context, len: usize) {
    let buf = Managed::<[f32]>::zeroed_slice(ctx, len).expect("alloc");
    let buf = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut b = buf.attach(s)?;
            add_scalar(s, &mut b, 1.0)?;
            b.sync()
        })
        .expect("touch");
    let held = Mutex::new(Some(buf));
    let out = run_in_callback(ctx, move || {
        drop(held.lock().expect("lock").take());
        "dropped".to_owned()
    });
    assert_eq!(out, "dropped");
    um::reap_pending();
    ctx.wait_idle().expect("wait");
}

/// As above with a mirrored buffer (pinned host half `cuMemFreeHost`, device half `cuMemFree`):
/// the same path through `Mirror::free`.
#[test]
#[ignore = "needs a CUDA device"]
fn a_mirrored_buffer_dropped_by_a_waker_is_freed_by_the_reaper() {
    let _serial = serial();
    let _dog = watchdog("a mirrored buffer dropped by a waker");
    let ctx = gpu();
    let m = Managed::from_slice_mirrored(&ctx, &vec![1.0f32; 1 << 20]).expect("alloc");
    let held = Mutex::new(Some(m));
    let out = run_in_callback(&ctx, move || {
        drop(held.lock().expect("lock").take());
        "dropped".to_owned()
    });
    assert_eq!(out, "dropped");
    um::reap_pending();
    assert_context_usable(&ctx);
}

/// A `StreamOrder` (public, `Send`, `'static`) dropped by a waker (rule 189): `Event::drop`
/// would make `cuCtxSetCurrent` and `cuEventDestroy` inside the driver's stream callback, where
/// CUDA says host functions "must not make any CUDA API calls" (may fail with
/// CUDA_ERROR_NOT_PERMITTED, "but this is not required"). An event dropped there is leaked.
/// Expected: no hang (watchdog), the context usable afterwards.
#[test]
#[ignore = "needs a CUDA device"]
fn stream_order_dropped_by_a_waker_inside_the_stream_callback() {
    let _serial = serial();
    let _dog = watchdog("a StreamOrder dropped by a waker");
    let ctx = gpu();
    let order = StreamOrder::new(&ctx).expect("order");
    // Recorded once, so that its event has work (a destroy would then defer the release).
    ctx.with_stream(StreamOptions::new(), |s| order.record(s))
        .expect("record");
    let out = run_in_callback(&ctx, move || {
        drop(order); // inside um's stream callback (`DriverCallback`)
        "dropped".to_owned()
    });
    assert_eq!(out, "dropped");
    assert_context_usable(&ctx);
}

/// Explicit calls from a waker: a cold `Blas`'s first GEMM (cuBLAS's lazy kernel load may
/// synchronize the context, which would wait for this very callback: a handle's first GEMM was
/// seen to wait 3.1 s on the host) and `Context::wait_idle` (`cuCtxSynchronize`). Both are
/// refused inside the callback (`InsideDriverCallback`) before any such call, rather than relying
/// on the driver answering CUDA_ERROR_NOT_PERMITTED, which CUDA does not promise; the `Blas`
/// dropped there is leaked. A hang would end in the watchdog.
#[test]
#[ignore = "needs a CUDA device"]
fn blas_and_wait_idle_called_from_a_waker_are_errs_and_the_blas_leaks_there() {
    let _serial = serial();
    let _dog = watchdog("Blas and wait_idle called from a waker");
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS"); // never used: its first GEMM is in the waker
    let (a, c) = (
        Managed::from_slice(&ctx, &[1.0f32; 4]).expect("alloc"),
        Managed::from_slice(&ctx, &[0.0f32; 4]).expect("alloc"),
    );
    let ctx2 = ctx.clone();
    let out = run_in_callback(&ctx, move || {
        // `with_stream` (cuStreamCreate), attaches, the GEMM, a `sync`: all inside the callback.
        let gemm = ctx2.with_stream(StreamOptions::new(), |s| {
            let (a, mut c) = (a.attach(s)?, c.attach(s)?);
            let g = blas.gemm(s, &Gemm::new(2, 2, 2), &a, &a, &mut c);
            let c = c.sync()?;
            Ok(format!("{g:?} -> {}", c[0]))
        });
        let wait = ctx2.wait_idle();
        drop(blas); // Blas::drop: `make_current` (a CUDA call) before its callback check
        format!("gemm: {gemm:?}; wait_idle: {wait:?}")
    });
    eprintln!("{out}");
    assert_eq!(
        out.matches("InsideDriverCallback").count(),
        2,
        "the GEMM's scope and wait_idle are refused inside the callback: {out}"
    );
    assert_context_usable(&ctx);
}

/// The usual executor shape: the task is its own waker (`Arc<Task>`, `Task: Wake`) and owns
/// its future. This one's `wake` drops the future (a cancelled task), on the thread that wakes
/// it: inside um's stream callback. The task's future, boxed:
type TaskFuture = std::pin::Pin<Box<dyn std::future::Future<Output = um::Result<f32>> + Send>>;

struct CancellingTask {
    fut: Mutex<Option<TaskFuture>>,
    woke: AtomicBool,
}

impl Wake for CancellingTask {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let fut = self
            .fut
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(fut); // the scope future's drop, inside the stream callback
        self.woke.store(true, Ordering::SeqCst);
    }
}

/// A `'static` future of `with_stream_async` (the context cloned into it), pending on
/// `sync_async` of one buffer while a second stream-owned buffer is alive across the await,
/// dropped by its task's waker inside the callback of *that same stream*. The drop is um's own
/// code: the second buffer's `Managed::drop` (under `dropping_scope`) would call `defer_free`, a
/// `cuStreamAddCallback` inside a stream callback, and, should the driver refuse it,
/// `cuStreamSynchronize` of the stream whose callback is running (a wait for itself); then the
/// scope's `Stream::drop` would make `cuStreamDestroy` there. Expected: no CUDA call there, the
/// memory leaked or freed later, no hang (watchdog), the context usable.
#[test]
#[ignore = "needs a CUDA device"]
fn a_scope_future_dropped_by_its_waker_inside_its_own_streams_callback_leaks_what_it_holds() {
    let _serial = serial();
    let _dog = watchdog("a scope future dropped by its waker");
    let ctx = gpu();
    let ctx2 = ctx.clone();
    let busy = Managed::<[f32]>::zeroed_slice(&ctx, 1).expect("alloc");
    let other = Managed::<[f32]>::zeroed_slice(&ctx, 1 << 20).expect("alloc");
    let fut = async move {
        ctx2.with_stream_async(StreamOptions::new(), async |s| {
            let mut busy = busy.attach(s)?;
            let mut other = other.attach(s)?; // alive across the await below
            spin_then_add(s, &mut busy, 1.0, 300_000_000)?;
            add_scalar(s, &mut other, 1.0)?;
            let b = busy.sync_async().await?;
            let o = other.sync()?;
            Ok(b[0] + o[0])
        })
        .await
    };
    let task = Arc::new(CancellingTask {
        fut: Mutex::new(Some(Box::pin(fut))),
        woke: AtomicBool::new(false),
    });
    let waker = Waker::from(Arc::clone(&task));
    let mut cx = TaskContext::from_waker(&waker);
    let first = {
        let mut guard = task.fut.lock().expect("lock");
        guard.as_mut().expect("future").as_mut().poll(&mut cx)
    };
    assert!(first.is_pending(), "the spin holds the stream");
    wait_until_woken(&task.woke);
    um::reap_pending();
    assert_context_usable(&ctx);
}

/// A waker calls `um::reap_pending()` (public, `#[doc(hidden)]`) while a sync future of the same
/// stream, dropped unfinished, has its orphan counted and its callback queued behind this one:
/// `reap_pending` waits for no orphan to be pending, which needs the later callback, which waits
/// for this one. Inside a driver callback it returns at once; a deadlock would end in the
/// watchdog.
#[test]
#[ignore = "needs a CUDA device"]
fn reap_pending_called_by_a_waker_returns() {
    let _serial = serial();
    let _dog = watchdog("reap_pending in a waker");
    let ctx = gpu();
    let state = ActingWaker::new(|| {
        um::reap_pending(); // would wait for the callback queued behind this one
        "reap_pending returned".to_owned()
    });
    let waker = Waker::from(Arc::clone(&state));
    let busy = Managed::<[f32]>::zeroed_slice(&ctx, 1).expect("alloc");
    let later = Managed::<[f32]>::zeroed_slice(&ctx, 1024).expect("alloc");
    let got = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut busy, later) = (busy.attach(s)?, later.attach(s)?);
            spin_then_add(s, &mut busy, 1.0, 300_000_000)?;
            let mut fut = std::pin::pin!(busy.sync_async());
            let mut cx = TaskContext::from_waker(&waker);
            assert!(fut.as_mut().poll(&mut cx).is_pending());
            // A second point behind the first, its future dropped: one orphan pending until
            // the second callback runs.
            drop(later.sync_async());
            wait_until_woken(&state.woke);
            poll_woken(fut.as_mut(), &mut cx).map(|b| b[0])
        })
        .expect("the stream");
    assert_eq!(got, 1.0);
    assert_eq!(state.out(), "reap_pending returned");
    um::reap_pending();
}

// ---------------------------------------------------------------------------------------------
// Contexts, devices and coherent memory asked for by a waker: refused before any driver call.

fn refused<T: std::fmt::Debug>(r: um::Result<T>) -> String {
    match r {
        Err(Error::InsideDriverCallback { .. }) => "refused".to_owned(),
        other => format!("NOT refused by um: {other:?}"),
    }
}

/// `Context::new` makes cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName,
/// cuDeviceGetAttribute (x7), cuDriverGetVersion (and, for a device without a live handle,
/// cuDevicePrimaryCtxRetain under the `DEVICES` lock) before its first `bind`, and
/// `um::device_count` never binds: inside the callback both are `Err(InsideDriverCallback)`
/// before any driver call.
#[test]
#[ignore = "needs a CUDA device"]
fn context_new_and_device_count_in_a_waker_are_refused_before_any_driver_call() {
    let _serial = serial();
    let _dog = watchdog("Context::new and device_count in a waker");
    let ctx = gpu();
    let out = run_in_callback(&ctx, || {
        format!(
            "Context::new: {}; device_count: {}",
            refused(Context::new(0)),
            refused(um::device_count())
        )
    });
    assert_eq!(out, "Context::new: refused; device_count: refused");
}

unsafe extern "C" {
    /// From libcuda (linked through `cust_raw`): whether a device's primary context is active.
    fn cuDevicePrimaryCtxGetState(dev: i32, flags: *mut u32, active: *mut i32) -> i32;
}

fn primary_active(ordinal: i32) -> bool {
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: valid out-pointers; the driver is initialised (a `Context` exists); device
    // handles are ordinals.
    let rc = unsafe { cuDevicePrimaryCtxGetState(ordinal, &mut flags, &mut active) };
    assert_eq!(rc, 0, "cuDevicePrimaryCtxGetState");
    active != 0
}

/// A context handle's own calls from a waker: `Context::wait_idle` (`cuCtxSynchronize`, which
/// would wait for this very callback) and `with_stream` (`cuStreamCreate`) bind the context
/// first, and the bind refuses inside the callback (`InsideDriverCallback`) before any driver
/// call, rather than relying on the driver's CUDA_ERROR_NOT_PERMITTED, which CUDA does not
/// promise. The handle stays usable afterwards.
#[test]
#[ignore = "needs a CUDA device"]
fn wait_idle_and_a_new_stream_in_a_waker_are_refused_before_any_driver_call() {
    let _serial = serial();
    let _dog = watchdog("wait_idle and with_stream in a waker");
    let ctx = gpu();
    let ctx2 = ctx.clone();
    let out = run_in_callback(&ctx, move || {
        format!(
            "wait_idle: {}; with_stream: {}",
            refused(ctx2.wait_idle()),
            refused(ctx2.with_stream(StreamOptions::new(), |_| Ok(())))
        )
    });
    assert_eq!(out, "wait_idle: refused; with_stream: refused");
    assert_context_usable(&ctx);
}

/// Two devices, device 1 with no handle in this process: a waker's `Context::new(1)` is refused
/// before it retains (creates) device 1's primary context, which the handle's drop inside the
/// callback would then leak for the life of the process. Device 1's primary context stays
/// inactive. Skipped where it is already active: run alone (`--exact`).
#[test]
#[ignore = "needs two CUDA devices"]
fn context_new_of_another_device_in_a_waker_creates_no_context() {
    let _serial = serial();
    let _dog = watchdog("Context::new of another device in a waker");
    let ctx = gpu();
    if um::device_count().expect("count") < 2 {
        eprintln!("skipped: one device");
        return;
    }
    if primary_active(1) {
        eprintln!("skipped: device 1's primary context is already active (run alone)");
        return;
    }
    let out = run_in_callback(&ctx, || refused(Context::new(1)));
    assert!(
        !primary_active(1),
        "device 1's primary context was retained inside the callback and leaked ({out})"
    );
    assert_eq!(out, "refused");
}

/// The first coherent allocation of the process in a waker: `allocate` would run
/// `Coherent::admit`, which asks every device (`device_lacking_concurrent_access`:
/// cuDeviceGetCount, cuDeviceGet, cuDeviceGetAttribute) the first time, before `ctx.bind()`. It
/// is `Err(InsideDriverCallback)` before any driver call, and the answer is not cached wrong. The
/// process's first coherent allocation only when run alone (`--exact`).
#[test]
#[ignore = "needs a CUDA device"]
fn a_first_coherent_allocation_in_a_waker_is_refused_before_any_driver_call() {
    let _serial = serial();
    let _dog = watchdog("a first coherent allocation in a waker");
    let ctx = gpu();
    if !ctx.info().concurrent_managed_access {
        eprintln!("skipped: coherent memory needs concurrent managed access");
        return;
    }
    let c = ctx.clone();
    let out = run_in_callback(&ctx, move || {
        refused(
            Managed::<[f32], um::HostOwned, um::Coherent>::zeroed_slice_coherent(&c, 4).map(|_| ()),
        )
    });
    assert_eq!(out, "refused");
    // And the answer was not cached wrong: a coherent allocation works afterwards.
    Managed::<[f32], um::HostOwned, um::Coherent>::zeroed_slice_coherent(&ctx, 4)
        .expect("coherent after");
}

// ---------------------------------------------------------------------------------------------
// NCCL from a waker: one rank, refused or leaked, never an NCCL call in the callback.

/// A one-rank `Comm` (`Send`, `'static`) held by a waker and dropped there, while an all-reduce
/// is queued on the same stream *behind* the callback. `Comm::drop` would flush (wait for the
/// communicator's outstanding work, which waits for the callback that is waiting for it) or call
/// `ncclCommDestroy`; inside the callback the communicator is leaked instead: no stall, the
/// all-reduce right. (A stall would poll inside the callback until the 5 s limit, then abort and
/// poison the stream, and the correct program would get `Err(StreamPoisoned)`.)
#[test]
#[ignore = "needs a CUDA device and NCCL"]
fn a_comm_dropped_by_a_waker_leaks_and_the_collective_behind_the_callback_completes() {
    let _serial = serial();
    let _dog = watchdog("a Comm dropped by a waker");
    let ctx = gpu();
    // A drop that flushed inside the callback would poll there until the 5 s limit (the
    // all-reduce it waits for is queued behind that callback), then abort there and poison the
    // stream; `.blocking(true)` would make it `ncclCommDestroy` with no limit.
    let Some(seen) = comm_action_in_callback(&ctx, |shared| {
        let c = shared.lock().expect("lock").take();
        drop(c); // `Comm::drop` inside the stream callback
        "comm dropped".to_owned()
    }) else {
        return;
    };
    eprintln!("{}; the waker returned after {:?}", seen.said, seen.took);
    assert!(
        seen.took < Duration::from_secs(3),
        "Comm::drop stalled inside the stream callback"
    );
    let got = (
        seen.first.expect("the spun buffer"),
        seen.reduced.expect("the all-reduced buffer"),
    );
    assert_eq!(got, (1.0, 2.0), "one rank: the sum is the value");
    assert_context_usable(&ctx);
}

/// `Comm::abort` is public, takes `&self`, and a waker can own the communicator (`Comm: Send`,
/// so `Mutex<Comm>: Sync`). Aborted inside the callback, with an all-reduce queued behind the
/// callback on the same stream, the communicator is marked aborted and its streams poisoned, and
/// no NCCL call is made there (NCCL's abort frees device memory and may synchronize its streams:
/// a stream sync there waits for the callback). Expected: the waker returns at once, no hang.
#[test]
#[ignore = "needs a CUDA device"]
fn a_comm_aborted_by_a_waker_makes_no_nccl_call_in_the_callback_and_leaks_it() {
    let _serial = serial();
    let _dog = watchdog("Comm::abort in a waker");
    let ctx = gpu();
    let Some(seen) = comm_action_in_callback(&ctx, |shared| {
        let t = Instant::now();
        if let Some(c) = shared.lock().expect("lock").as_ref() {
            c.abort(); // marked aborted: no `ncclCommAbort` inside the stream callback
        }
        format!("aborted in {:?}", t.elapsed())
    }) else {
        return;
    };
    // Aborted: the stream is poisoned, so both come back as `Err` (and leak), never `Ok` with
    // a wrong value.
    let (first_err, x_err) = (seen.first.is_err(), seen.reduced.is_err());
    eprintln!(
        "{}; took {:?}; first err {first_err}, x err {x_err}",
        seen.said, seen.took
    );
    assert!(
        seen.took < Duration::from_secs(3),
        "Comm::abort stalled inside the stream callback"
    );
    assert!(x_err, "an aborted communicator's stream is poisoned");
}

/// `Comm::init_all` would call `ncclGetUniqueId` (NCCL's init, which itself makes CUDA runtime
/// calls, and opens a bootstrap root that nobody will join) and `ncclGroupStart` before its first
/// `make_current`, then `ncclGroupEnd`: inside the callback it is `Err(InsideDriverCallback)`
/// before any NCCL call. (`UniqueId::new()` is the same call, directly; `Comm::init_rank` only
/// loads the library before its `make_current`.) NCCL's first use in the process only when run
/// alone (`--exact`).
#[test]
#[ignore = "needs a CUDA device and NCCL"]
fn comm_init_all_in_a_waker_is_refused_before_any_nccl_call() {
    let _serial = serial();
    let _dog = watchdog("Comm::init_all in a waker");
    let ctx = gpu();
    if um::nccl::nccl().is_err() {
        eprintln!("skipped: no NCCL");
        return;
    }
    let c = ctx.clone();
    let out = run_in_callback(&ctx, move || {
        refused(Comm::init_all(std::slice::from_ref(&c), CommOptions::new()).map(|_| ()))
    });
    assert_eq!(out, "refused");
}
