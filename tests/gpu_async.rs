//! Waiting without blocking a thread, on a real GPU: `sync_async`, `sync_all_async`, the async
//! stream scopes, cancellation with work in flight, no leak, and a sticky error surfaced.
//!
//! Every future here is driven by `pollster::block_on`, the smallest executor there is: it
//! parks the thread until the waker (called from the driver's callback thread) unparks it, so
//! these tests also show that the wake-up arrives. The tests share a lock: two of them compare
//! the GPU's free memory, which other tests of this binary must not move meanwhile.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

mod common;

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};

use common::gpu;
use pollster::block_on;
use um::kernels::streams::kernel;
use um::kernels::testing::{add_scalar, axpy, spin_then_add};
use um::{Error, LaunchConfig, Managed, StreamOptions};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Polls `fut` once, with a waker that does nothing.
fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(fut).poll(&mut TaskContext::from_waker(Waker::noop()))
}

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
    um::use_event_thread_for_waits(true);
    let data = Managed::from_fn(&ctx, 10_001, |i| i as f32).expect("alloc");
    let data = block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut d = data.attach(s)?;
        add_scalar(s, &mut d, 1.0)?;
        let d = d.sync_async().await?;
        let mut d = d.attach(s)?;
        add_one(s, &mut d)?;
        s.sync_all_async(vec![d]).await
    }));
    um::use_event_thread_for_waits(false);
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
        let before = um::orphans_pending();
        drop(fut);
        assert!(
            !s.is_idle()?,
            "the drop returned only once the stream was done: it waited"
        );
        assert!(
            um::orphans_pending() > before,
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
    assert_eq!(um::orphans_pending(), 0);
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
    let before = um::orphans_pending();
    let polled = scope
        .as_mut()
        .poll(&mut TaskContext::from_waker(Waker::noop()));
    assert!(polled.is_pending(), "the spinning kernel holds the stream");
    drop(scope); // drops the closure's future (the buffers to the reaper), then the stream
    // Had the drop waited for the stream, the buffers would have been freed there, not
    // handed to the reaper behind a callback that has not run yet.
    assert!(
        um::orphans_pending() >= before + 3,
        "busy, x and y went to the reaper: {} pending, {before} before",
        um::orphans_pending()
    );
    um::reap_pending();
    assert_eq!(um::orphans_pending(), 0);
    ctx.wait_idle().expect("no fault");
}

/// Child: launches the trap kernel, awaits its buffer's future (with the chosen mechanism), and
/// checks that the fault comes back as an `Err`.
fn fault_child(event_thread: bool) {
    let ctx = gpu();
    um::use_event_thread_for_waits(event_thread);
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
    if common::is_fault_child() {
        return fault_child(false);
    }
    common::run_in_child("fault_sticky_error_is_surfaced_by_the_future");
}

#[test]
#[ignore = "needs a CUDA device"]
fn fault_sticky_error_is_surfaced_through_the_event_thread() {
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
    assert_eq!(um::orphans_pending(), 0);
    ctx.wait_idle().expect("no fault");
}
