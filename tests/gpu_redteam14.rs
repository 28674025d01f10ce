//! Red team 14 (docs/redteam14.md): paths from a user's waker, run inside um's stream callback,
//! to a driver, NCCL or cuBLAS call that did not go through `Context::bind` first (commit
//! c9d717a). A fresh helper wrote these from the source. After its report, making a context,
//! counting devices, allocating, a collective, a group, a unique id, communicators, a cuBLAS
//! handle and call, and `reap_pending` refuse (or return) inside the callback before any such
//! call, and a `Comm` aborted there is leaked without an NCCL call. Each test says what it
//! expects; a test that leaks on purpose says `leaks_`. Run each alone (`--exact`): attempts 2b,
//! 3 and 5 depend on what happens once per process.
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::task::{Context as TaskContext, Waker};
use std::time::{Duration, Instant};

use um::kernels::testing::spin_then_add;
use um::nccl::{Comm, CommOptions};
use um::{Context, Error, Managed, StreamOptions};

mod common;
use common::waker::{
    ActingWaker, comm_action_in_callback, poll_woken, run_in_callback, wait_until_woken,
};
use common::{gpu, serial, watchdog};

fn refused<T: std::fmt::Debug>(r: um::Result<T>) -> String {
    match r {
        Err(Error::InsideDriverCallback { .. }) => "refused".to_owned(),
        other => format!("NOT refused by um: {other:?}"),
    }
}

/// Attempt 1 (severity: NCCL call inside the callback; possible deadlock). `Comm::abort` is
/// public, takes `&self`, and a waker can own the communicator (`Comm: Send`, so
/// `Mutex<Comm>: Sync`). `abort_because` ignores `make_current`'s error
/// (`let _ = self.ctx.make_current();`) and calls `ncclCommAbort` inside the callback, with an
/// all-reduce queued behind the callback on the same stream: NCCL's abort frees device memory
/// and may synchronize its streams (CUDA runtime calls the callback may not make; a stream
/// sync there waits for the callback). Expected after a fix: the waker returns at once (the
/// streams poisoned, the NCCL call deferred or the communicator leaked), no hang.
#[test]
#[ignore = "needs a CUDA device"]
fn a_comm_aborted_by_a_waker_makes_no_nccl_call_in_the_callback_and_leaks_it() {
    let _serial = serial();
    let _dog = watchdog("red team 14, attempt 1 (Comm::abort in a waker)");
    let ctx = gpu();
    let Some(seen) = comm_action_in_callback(&ctx, |shared| {
        let t = Instant::now();
        if let Some(c) = shared.lock().expect("lock").as_ref() {
            c.abort(); // `ncclCommAbort` inside the stream callback today
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
        "finding: Comm::abort stalled inside the stream callback"
    );
    assert!(x_err, "an aborted communicator's stream is poisoned");
}

/// Attempt 2a (severity: driver calls inside the callback; documentation gap). `Context::new`
/// makes cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute (x7),
/// cuDriverGetVersion (and, for a device without a live handle, cuDevicePrimaryCtxRetain under
/// the `DEVICES` lock) before its first `bind`; `um::device_count` never binds. Expected after
/// a fix: both `Err(InsideDriverCallback)`. Today: where the driver refuses a query there
/// (`CUDA_ERROR_NOT_PERMITTED`), `Context::new` reports a driver error (or `NoDevice`) and
/// `device_count` a driver error; where it does not, `device_count` is `Ok(n)` and
/// `Context::new` refuses only after the calls.
#[test]
#[ignore = "needs a CUDA device"]
fn context_new_and_device_count_in_a_waker_are_refused_before_any_driver_call() {
    let _serial = serial();
    let _dog = watchdog("red team 14, attempt 2a");
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

/// Attempt 2b (severity: undocumented leak of a primary context made inside the callback).
/// Two devices, device 1 with no handle in this process: a waker's `Context::new(1)` retains
/// (creates) device 1's primary context inside the callback, then its `bind` refuses, and the
/// handle's drop, inside the callback, leaks the retain (`Shared::drop`). Expected after a
/// fix: device 1's primary context stays inactive. Today: active, for the life of the process.
#[test]
#[ignore = "needs two CUDA devices"]
fn context_new_of_another_device_in_a_waker_creates_no_context() {
    let _serial = serial();
    let _dog = watchdog("red team 14, attempt 2b");
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
        "finding: device 1's primary context was retained inside the callback and leaked ({out})"
    );
    assert_eq!(out, "refused");
}

/// Attempt 3 (severity: driver calls inside the callback). The first coherent allocation of
/// the process: `allocate` runs `Coherent::admit` before `ctx.bind()`, and `admit` asks every
/// device (`device_lacking_concurrent_access`: cuDeviceGetCount, cuDeviceGet,
/// cuDeviceGetAttribute) the first time. Expected after a fix: `Err(InsideDriverCallback)`.
/// Today: that, after the calls, where the driver answers; a driver error where it refuses.
/// Must be the process's first coherent allocation (run alone).
#[test]
#[ignore = "needs a CUDA device"]
fn a_first_coherent_allocation_in_a_waker_is_refused_before_any_driver_call() {
    let _serial = serial();
    let _dog = watchdog("red team 14, attempt 3");
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

/// Attempt 4 (severity: deadlock through a `#[doc(hidden)]` public function). A waker calls
/// `um::reap_pending()` while a sync future of the same stream, dropped unfinished, has its
/// orphan counted (`expect`) and its callback queued behind this one: `reap_pending` waits for
/// `pending == 0`, which needs the later callback, which waits for this one. Expected after a
/// fix: `reap_pending` returns at once inside a driver callback (or is documented as never to
/// be called there). Today: a deadlock (watchdog).
#[test]
#[ignore = "needs a CUDA device"]
fn reap_pending_called_by_a_waker_returns() {
    let _serial = serial();
    let _dog = watchdog("red team 14, attempt 4 (reap_pending in a waker)");
    let ctx = gpu();
    let state = ActingWaker::new(|| {
        um::reap_pending(); // waits for the callback queued behind this one today
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

/// Attempt 5 (severity: NCCL calls inside the callback; a leaked bootstrap endpoint).
/// `Comm::init_all` calls `ncclGetUniqueId` (NCCL's init, which itself makes CUDA runtime
/// calls, and opens a bootstrap root that nobody will join) and `ncclGroupStart` before its
/// first `make_current`, then `ncclGroupEnd`. Expected after a fix:
/// `Err(InsideDriverCallback)` before any NCCL call. Today: that after the calls, or an NCCL
/// error where NCCL's own CUDA calls are refused. (`UniqueId::new()` is the same call,
/// directly; `Comm::init_rank` only loads the library before its `make_current`.)
#[test]
#[ignore = "needs a CUDA device and NCCL"]
fn comm_init_all_in_a_waker_is_refused_before_any_nccl_call() {
    let _serial = serial();
    let _dog = watchdog("red team 14, attempt 5");
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
