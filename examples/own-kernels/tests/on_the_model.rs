//! This crate's kernels tested without a GPU, on um's CPU model of the driver: what a user's
//! crate does to run its own tests in CI (docs/gpu-testing.md, "Your own tests on the model").
//!
//! `cargo test -p own-kernels --features model`: the feature turns on `um-cuda`'s `model`, so
//! that every driver call of um reaches the model instead of `libcuda`. The crate's kernels get
//! CPU twins by name (`um::model::register_kernel`); the model runs them in each stream's order,
//! and reports a program that breaks um's rules: here a sync-order bug that the types cannot
//! stop, because it goes through an `unsafe` launch with a raw address.
#![cfg(feature = "model")]
#![allow(clippy::expect_used)] // a test and its helpers stop at the first surprise

use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use um::{Context, Created, DevicePtr, LaunchConfig, Managed, Stream, StreamOptions, StreamOwned};

um::include_kernels!();

/// The CPU twins of `kernels/saxpy.cu` and `kernels/reduce.cu`, registered once per process.
/// Each reads its length parameter (`um::len32`, a `u32`) and does the whole launch's work.
fn twins() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // saxpy(const float *x, float *y, float a, um::len32 n): y = a * x + y.
        um::model::register_kernel("saxpy", |args| {
            let (Some(a), Some(n)) = (args.scalar::<f32>(2), args.scalar::<u32>(3)) else {
                return;
            };
            let n = n as usize;
            let Some(x) = args.buffer::<f32>(0).map(|x| x[..n].to_vec()) else {
                return;
            };
            if let Some(y) = args.buffer_mut::<f32>(1) {
                for (y, x) in y[..n].iter_mut().zip(x) {
                    *y += a * x;
                }
            }
        });
        // sum(const unsigned *x, um::len32 n, unsigned long long *total, um::len32 one).
        um::model::register_kernel("sum", |args| {
            let Some(n) = args.scalar::<u32>(1) else {
                return;
            };
            let Some(s) = args
                .buffer::<u32>(0)
                .map(|x| x[..n as usize].iter().map(|&v| u64::from(v)).sum::<u64>())
            else {
                return;
            };
            if let Some(total) = args.buffer_mut::<u64>(2) {
                total[0] += s;
            }
        });
        // Not checked here: declared a no-op, so the model does not say it has no twin.
        um::model::register_noop_kernel("histogram");
    });
}

/// One test at a time: the model is one device for the whole process, and its list of
/// violations is the process's.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    twins();
    let _ = um::model::take_violations();
    guard
}

#[test]
fn the_kernels_run_as_their_cpu_twins() {
    let _serial = serial();
    let ctx = Context::new(0).expect("the model's device");
    let n = 1000;
    let x = Managed::from_slice(&ctx, &vec![2.0f32; n]).expect("alloc");
    let y =
        Managed::from_slice(&ctx, &(0..n).map(|i| i as f32).collect::<Vec<_>>()).expect("alloc");
    let ints = Managed::from_slice(&ctx, &(0..n as u32).collect::<Vec<_>>()).expect("alloc");
    let total = Managed::<[u64]>::zeroed_slice(&ctx, 1).expect("alloc");
    let (y, total) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            let (ints, mut total) = (ints.attach(s)?, total.attach(s)?);
            saxpy::saxpy(s, &x, &mut y, 3.0)?;
            reduce::sum(s, &ints, &mut total)?;
            let (y, total) = s.sync_all((y, total))?;
            drop((x, ints));
            Ok((y, total))
        })
        .expect("the stream");
    assert!((0..n).all(|i| y[i] == i as f32 + 6.0), "saxpy's results");
    assert_eq!(total[0], (0..n as u64).sum::<u64>(), "sum's result");
    assert!(um::model::take_violations().is_empty());
}

/// The bug: `x` is written on stream `a`, and a kernel on stream `b` reads it through its raw
/// address (`as_device_ptr`, passed to an `unsafe` launch), with no event
/// between the streams. On a GPU it reads `x` before or after `a`'s write, as the scheduler
/// pleases; the types cannot see it, since `b`'s launch names no buffer of `a`. The model sees
/// that `b`'s work touches the allocation that `a`'s pending work touches with no ordering edge,
/// and fails the launch with a panic that says so.
fn read_on_another_stream(order_first: bool) -> Vec<f32> {
    let ctx = Context::new(0).expect("the model's device");
    let n = 256;
    let x = Managed::from_slice(&ctx, &vec![1.0f32; n]).expect("alloc");
    let ones = Managed::from_slice(&ctx, &vec![1.0f32; n]).expect("alloc");
    let y = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let (ones, mut x) = (ones.attach(a)?, x.attach(a)?);
            saxpy::saxpy(a, &ones, &mut x, 1.0)?; // x = 2, on `a`
            let mut y = y.attach(b)?;
            let y = if order_first {
                // The fix: `b` waits for `a`'s work on `x` (an event, no host wait).
                let x = x.hand_off(b)?;
                saxpy_reading(b, x.as_device_ptr(), &mut y, n)?;
                y.sync()?
            } else {
                // The bug: `x` stays on `a`, and nothing orders `b` after `a`.
                saxpy_reading(b, x.as_device_ptr(), &mut y, n)?;
                y.sync()?
            };
            drop(ones);
            Ok(y.to_vec())
        })
    })
    .expect("the streams")
}

/// `y += x` on `stream`, where `x` is a raw address: the escape hatch of `Stream::launch_ptx`.
/// A `DevicePtr`, not its `u64`: the model hands a twin as memory only what the launch passed
/// as memory.
fn saxpy_reading<'s>(
    stream: &Stream<'s, Created>,
    x: DevicePtr<'_, f32>,
    y: &mut Managed<[f32], StreamOwned<'s, Created>>,
    n: usize,
) -> um::Result<()> {
    let config = LaunchConfig::grid_1d(1, 256);
    // SAFETY: the program's claim, which the model checks: saxpy's parameters are (x, y, a, n),
    // `y` written and `x` read, `n` elements each; `x` is read through its address, which is
    // sound only where `stream` is ordered after every write of `x`.
    unsafe { stream.launch_ptx(saxpy::PTX, "saxpy", config, (x, y, 1.0f32, n as u32)) }
}

#[test]
fn a_raw_address_read_on_another_stream_without_an_event_is_reported() {
    let _serial = serial();
    let caught = std::panic::catch_unwind(|| read_on_another_stream(false));
    let message = caught
        .err()
        .and_then(|p| p.downcast_ref::<String>().cloned())
        .expect("the model fails the unordered launch");
    assert!(message.contains("no ordering edge"), "{message}");
    assert!(!um::model::take_violations().is_empty());
}

#[test]
fn the_same_read_after_a_hand_off_is_ordered_and_exact() {
    let _serial = serial();
    let y = read_on_another_stream(true);
    assert!(y.iter().all(|&v| v == 2.0), "b read a's result: {y:?}");
    assert!(um::model::take_violations().is_empty());
}
