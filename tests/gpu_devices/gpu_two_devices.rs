//! Two devices: memory and kernels of one device's context are refused by another's streams.
//!
//! Needs two GPUs. The GPU run script runs this binary only where `nvidia-smi` lists two or
//! more, and says "skipped" elsewhere; run with `--include-ignored` on one GPU, it fails.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use um::curand::{Rng, RngKind};
use um::{Context, Error, LaunchConfig, Managed, StreamOptions};
use um_test_kernels::testing;

use crate::common;
use common::{capture_once, watchdog};

fn two_contexts() -> (Context, Context) {
    let a = Context::new(0).expect("device 0");
    let b = Context::new(1).expect("this test needs two CUDA devices");
    (a, b)
}

#[test]
#[ignore = "needs two CUDA devices"]
fn memory_of_another_context_is_refused_at_attach() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    assert!(!a.same_as(&b), "two devices, two primary contexts");
    println!("devices: {} and {}", a.info().name, b.info().name);
    let on_a = Managed::from_slice(&a, &[1.0f32; 8]).expect("alloc on device 0");
    let err = b
        .with_stream(StreamOptions::new(), |s| on_a.attach(s).map(drop))
        .expect_err("memory of device 0 on a stream of device 1");
    assert_eq!(err, Error::ContextMismatch, "{err}");
}

#[test]
#[ignore = "needs two CUDA devices"]
fn a_kernel_of_another_context_is_refused_at_launch() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    let kernel_of_a = a
        .kernel(testing::PTX, "add_scalar")
        .expect("kernel on device 0");
    let on_b = Managed::from_slice(&b, &[1.0f32; 8]).expect("alloc on device 1");
    let on_b = b
        .with_stream(StreamOptions::new(), |s| {
            let mut d = on_b.attach(s)?;
            // SAFETY: add_scalar(float *data, float value, unsigned n) over 8 elements; the
            // launch is refused before the driver sees it.
            let err = unsafe {
                s.launch(
                    &kernel_of_a,
                    LaunchConfig::grid_1d(1, 8),
                    (&mut d, 1.0f32, 8u32),
                )
            }
            .expect_err("kernel of device 0 on a stream of device 1");
            assert_eq!(err, Error::ContextMismatch, "{err}");
            // The right kernel, through the typed launcher, works on device 1.
            testing::add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("device 1 work");
    assert!(on_b.iter().all(|v| *v == 2.0));
}

#[test]
#[ignore = "needs two CUDA devices"]
fn each_device_runs_its_own_streams_from_its_own_thread() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    std::thread::scope(|scope| {
        for (ctx, add) in [(&a, 1.0f32), (&b, 2.0f32)] {
            scope.spawn(move || {
                let data = Managed::from_fn(ctx, 1 << 16, |i| i as f32).expect("alloc");
                let data = ctx
                    .with_stream(StreamOptions::new(), |s| {
                        let mut d = data.attach(s)?;
                        testing::add_scalar(s, &mut d, add)?;
                        d.sync()
                    })
                    .expect("stream work");
                assert!(data.iter().enumerate().all(|(i, v)| *v == i as f32 + add));
            });
        }
    });
}

/// Whether both devices let a handoff cross between them (concurrent managed access on both).
fn cross_device_handoff_allowed(a: &Context, b: &Context) -> bool {
    a.info().concurrent_managed_access && b.info().concurrent_managed_access
}

#[test]
#[ignore = "needs two CUDA devices"]
fn memory_of_device_0_is_handed_to_a_stream_of_device_1_and_back() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    let allowed = cross_device_handoff_allowed(&a, &b);
    println!(
        "concurrent managed access: device 0 {}, device 1 {}",
        a.info().concurrent_managed_access,
        b.info().concurrent_managed_access
    );
    let n = 1 << 20;
    let x = Managed::from_fn(&a, n, |i| i as f32).expect("alloc on device 0");
    let result = a.with_stream(StreamOptions::new().non_blocking(), |s0| {
        b.with_stream(StreamOptions::new().non_blocking(), |s1| {
            let mut x = x.attach(s0)?;
            // Device 0 writes after 50 ms; device 1 must see that write.
            testing::spin_then_add(s0, &mut x, 1.0, 50_000_000)?;
            let mut x = x.hand_off(s1)?;
            // A kernel of device 1 on memory allocated in device 0's context.
            testing::add_scalar(s1, &mut x, 2.0)?;
            let mut x = x.hand_off(s0)?;
            testing::add_scalar(s0, &mut x, 4.0)?;
            x.sync()
        })
    });
    if allowed {
        let x = result.expect("a handoff across devices with concurrent managed access");
        let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 7.0);
        assert_eq!(
            bad, None,
            "device 1 did not see device 0's write, or the reverse"
        );
    } else {
        let err = result.expect_err("a device lacks concurrent managed access");
        assert!(matches!(err, Error::HandOffAcrossDevices { .. }), "{err}");
    }
}

#[test]
#[ignore = "needs two CUDA devices"]
fn a_prefetching_stream_of_device_1_receives_memory_of_device_0() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    if !cross_device_handoff_allowed(&a, &b) {
        println!("skipped: a device lacks concurrent managed access");
        return;
    }
    let x = Managed::from_fn(&a, 1 << 22, |i| i as f32).expect("alloc on device 0");
    let y = Managed::<[f32]>::zeroed_slice(&b, 1 << 22).expect("alloc on device 1");
    let (x, y) = a
        .with_stream(
            StreamOptions::new().transfer(um::Transfer::Prefetch),
            |s0| {
                b.with_stream(
                    StreamOptions::new().transfer(um::Transfer::Prefetch),
                    |s1| {
                        let mut x = x.attach(s0)?;
                        testing::spin_then_add(s0, &mut x, 1.0, 10_000_000)?;
                        // Prefetched to device 1, on s1, after the wait for s0.
                        let x = x.hand_off(s1)?;
                        let mut y = y.attach(s1)?;
                        testing::axpy(s1, &x, &mut y, 1.0)?;
                        s1.sync_all((x, y))
                    },
                )
            },
        )
        .expect("prefetch to the receiving device");
    assert!(x.iter().enumerate().all(|(i, v)| *v == i as f32 + 1.0));
    let bad = y.iter().enumerate().find(|(i, v)| **v != *i as f32 + 1.0);
    assert_eq!(bad, None);
}

#[test]
#[ignore = "needs two CUDA devices"]
fn the_per_thread_stream_of_device_1_receives_and_drops_memory_of_device_0() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    if !cross_device_handoff_allowed(&a, &b) {
        println!("skipped: a device lacks concurrent managed access");
        return;
    }
    // The per-thread handle names a stream of the current context: the sync and the drop must
    // make device 1's context current, not the allocation's.
    let x = Managed::from_fn(&a, 1 << 16, |i| i as f32).expect("alloc x");
    let dropped = Managed::<[f32]>::zeroed_slice(&a, 1 << 16).expect("alloc dropped");
    let x = a
        .with_stream(StreamOptions::new(), |s0| {
            b.with_per_thread_stream(|pts1| {
                let mut x = x.attach(s0)?;
                let mut d = dropped.attach(s0)?;
                testing::spin_then_add(s0, &mut x, 1.0, 10_000_000)?;
                testing::spin_then_add(s0, &mut d, 1.0, 10_000_000)?;
                let mut d = d.hand_off(pts1)?;
                testing::add_scalar(pts1, &mut d, 1.0)?;
                drop(d); // waits for device 1's per-thread stream, which waits for s0
                let mut x = x.hand_off(pts1)?;
                testing::add_scalar(pts1, &mut x, 2.0)?;
                x.sync()
            })
        })
        .expect("device 0 -> per-thread stream of device 1 -> host");
    let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 3.0);
    assert_eq!(bad, None);
}

#[test]
#[ignore = "needs two CUDA devices"]
fn memory_handed_to_device_1_is_awaited_there() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    if !cross_device_handoff_allowed(&a, &b) {
        println!("skipped: a device lacks concurrent managed access");
        return;
    }
    let n = 1 << 16;
    let x = Managed::from_fn(&a, n, |i| i as f32).expect("alloc on device 0");
    // The future's callback goes on device 1's stream, with device 1's context current.
    let x = pollster::block_on(a.with_stream_async(
        StreamOptions::new().non_blocking(),
        async |s0| {
            b.with_stream_async(StreamOptions::new().non_blocking(), async |s1| {
                let mut x = x.attach(s0)?;
                testing::spin_then_add(s0, &mut x, 1.0, 10_000_000)?;
                let mut x = x.hand_off(s1)?;
                testing::add_scalar(s1, &mut x, 2.0)?;
                x.sync_async().await
            })
            .await
        },
    ))
    .expect("await on device 1");
    let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 3.0);
    assert_eq!(bad, None, "device 1's result after device 0's write");
}

#[test]
#[ignore = "needs two CUDA devices"]
fn coherent_memory_of_device_0_is_handed_to_device_1_and_back() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    if !cross_device_handoff_allowed(&a, &b) {
        println!("skipped: a device lacks concurrent managed access (coherent memory needs it)");
        return;
    }
    let n = 1 << 20;
    let x = Managed::from_fn_coherent(&a, n, |i| i as f32).expect("coherent alloc on device 0");
    let x = a
        .with_stream(StreamOptions::new().non_blocking(), |s0| {
            b.with_stream(StreamOptions::new().non_blocking(), |s1| {
                let attaches = um_core::attach_calls_on_this_thread();
                let mut x = x.attach(s0)?;
                // Device 0 writes after 50 ms; device 1 must see that write.
                testing::spin_then_add(s0, &mut x, 1.0, 50_000_000)?;
                let mut x = x.hand_off(s1)?; // an event of device 0, waited for on device 1
                testing::add_scalar(s1, &mut x, 2.0)?;
                let mut x = x.hand_off(s0)?;
                testing::add_scalar(s0, &mut x, 4.0)?;
                let x = x.sync()?;
                assert_eq!(
                    um_core::attach_calls_on_this_thread(),
                    attaches,
                    "coherent memory crosses devices without an association call"
                );
                Ok(x)
            })
        })
        .expect("coherent memory across devices");
    let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 7.0);
    assert_eq!(
        bad, None,
        "device 1 did not see device 0's write, or the reverse"
    );
}

#[test]
#[ignore = "needs two CUDA devices"]
fn coherent_memory_is_not_handed_to_a_device_whose_context_emulates_no_concurrent_access() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    if !cross_device_handoff_allowed(&a, &b) {
        println!("skipped: a device lacks concurrent managed access (coherent memory needs it)");
        return;
    }
    // Device 1 through a handle that takes the path of a device without concurrent access:
    // the handoff asks the receiver's handle, as for unified memory.
    let emulated = Context::new_with_options(
        1,
        um::ContextOptions::new().emulate_no_concurrent_access(true),
    )
    .expect("device 1, emulated");
    let x = Managed::from_fn_coherent(&a, 1 << 16, |i| i as f32).expect("alloc on device 0");
    let err = a
        .with_stream(StreamOptions::new(), |s0| {
            emulated.with_stream(StreamOptions::new(), |s1| {
                let mut x = x.attach(s0)?;
                testing::add_scalar(s0, &mut x, 1.0)?;
                x.hand_off(s1)?.sync().map(drop)
            })
        })
        .expect_err("the receiver's handle lacks concurrent managed access");
    assert!(
        matches!(err, Error::HandOffAcrossDevices { lacking: 1, .. }),
        "{err}"
    );
    // The refused buffer was dropped (its drop waited for s0); device 0 is healthy.
    a.wait_idle().expect("no fault");
}

/// `CU_STREAM_PER_THREAD` names another stream in every context, but the
/// per-thread stream's id was one per thread, so device 0's and device 1's per-thread streams
/// looked like one stream: `hand_off` between them took the "same stream" shortcut (no event,
/// no attach), and `sync` on device 1 returned while device 0's kernel still wrote (seen: `0`
/// after 88 ms of a 2 s kernel). A stream's id is now drawn per (thread, context).
#[test]
#[ignore = "needs two CUDA devices"]
fn the_per_thread_streams_of_two_devices_are_two_streams() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    let n = 1 << 20;
    let data = Managed::from_slice(&a, &vec![0.0f32; n]).expect("alloc on device 0");
    let events = um_core::events_created_on_this_thread();
    let started = std::time::Instant::now();
    let host = a.with_per_thread_stream(|p0| {
        b.with_per_thread_stream(|p1| {
            let mut d = data.attach(p0)?;
            // 300 ms on device 0, then 1.0 added to every element.
            testing::spin_then_add(p0, &mut d, 1.0, 300_000_000)?;
            let handed = d.hand_off(p1);
            match handed {
                Ok(d) => d.sync(),
                // A device without concurrent managed access refuses before any call.
                Err(e) => Err(e),
            }
        })
    });
    let waited = started.elapsed();
    let both_concurrent = a.info().concurrent_managed_access && b.info().concurrent_managed_access;
    if !both_concurrent {
        assert!(
            matches!(host, Err(Error::HandOffAcrossDevices { .. })),
            "{host:?}"
        );
        return;
    }
    let host = host.expect("hand_off from device 0's per-thread stream to device 1's");
    assert!(
        um_core::events_created_on_this_thread() > events,
        "the handoff recorded an event: the two streams were told apart"
    );
    assert!(
        waited >= std::time::Duration::from_millis(300),
        "sync on device 1 waited for device 0's kernel ({waited:?})"
    );
    assert!(
        host.iter().all(|v| *v == 1.0),
        "every element written before the CPU read it"
    );
}

/// The per-thread stream's id, for mirrored memory: the device half of device 0 must not
/// reach device 1's kernels through the per-thread shortcut either.
#[test]
#[ignore = "needs two CUDA devices"]
fn mirrored_memory_is_not_handed_between_the_per_thread_streams_of_two_devices() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, b) = two_contexts();
    let data = Managed::from_slice_mirrored(&a, &[0.0f32; 64]).expect("alloc on device 0");
    let err = a
        .with_per_thread_stream(|p0| {
            b.with_per_thread_stream(|p1| {
                let d = data.attach(p0)?;
                d.hand_off(p1)?.sync().map(drop)
            })
        })
        .expect_err("a mirror's device half belongs to device 0");
    assert_eq!(err, Error::ContextMismatch, "{err}");
}

/// A foreign stream of another context is refused before anything runs on it.
#[test]
#[ignore = "needs two CUDA devices"]
fn a_foreign_stream_of_another_device_is_refused() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (a, _b) = two_contexts();
    let cudarc = cudarc::driver::CudaContext::new(1).expect("cudarc context of device 1");
    let stream = cudarc.new_stream().expect("stream of device 1");
    // SAFETY: cudarc keeps the stream alive for the call.
    let got = unsafe { a.with_foreign_stream(stream.cu_stream().cast(), |_| Ok(())) };
    assert_eq!(
        got,
        Err(Error::InvalidForeignStream {
            reason: "a stream of another context"
        })
    );
}

/// The last handle of device 1 dropped inside a capture on device 0.
#[test]
#[ignore = "needs two CUDA devices"]
fn the_last_handle_of_device_1_dropped_in_a_device_0_capture_leaves_it_valid() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let ctx0 = Context::new_with_options(0, um::ContextOptions::new()).expect("device 0");
    assert!(ctx0.info().concurrent_managed_access);
    let ctx1 = Context::new_with_options(1, um::ContextOptions::new()).expect("device 1");
    // A module in device 1's handle, and work that finished.
    let y = Managed::from_slice(&ctx1, &vec![0.0f32; 1 << 20]).expect("alloc");
    ctx1.with_stream(StreamOptions::new(), |s| {
        let mut y = y.attach(s)?;
        testing::add_scalar(s, &mut y, 1.0)?;
        s.sync_all((y,)).map(drop)
    })
    .expect("device 1 work");
    let mut last = Some(ctx1);
    let x = Managed::from_slice(&ctx0, &[0.0f32; 256]).expect("alloc");
    let x = ctx0
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                // Inner::drop -> retire (graves) -> Shared::drop on a capturing thread: the
                // graves and the primary context's retain are never released here,
                // but once this thread's capture has ended (rule 195).
                drop(last.take());
                Ok(((x,), ()))
            })?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            Ok(x)
        })
        .expect("rule 187: nothing dropped on a capturing thread fails the capture");
    assert!(x.iter().all(|v| *v == 1.0));
}

/// Thread A inside an idle section of device 0 begins a capture of
/// device 1 while thread B, inside one of device 1, begins a capture of device 0. Each capture
/// waited for the other thread's section, whose closure waited for that capture: a deadlock.
/// Now a capture that would wait for idle sections while its own thread is in one is refused.
#[test]
#[ignore = "needs two CUDA devices"]
fn captures_begun_crosswise_inside_idle_sections_of_two_devices_do_not_deadlock() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (d0, d1) = two_contexts();
    if !d0.info().concurrent_managed_access || !d1.info().concurrent_managed_access {
        println!("skipped: captures of unified memory need concurrent managed access");
        return;
    }
    let done = watchdog("captures begun crosswise inside idle sections of two devices");
    let ok = |r: &um::Result<Option<um::Result<()>>>| {
        matches!(
            r,
            Ok(Some(Ok(()) | Err(Error::CaptureRefusedHere))) | Ok(None)
        )
    };
    let (a, b) = std::thread::scope(|t| {
        let a = t.spawn(|| {
            d0.with_idle_unless_capturing(|| {
                // Long enough for B to be inside its section of device 1.
                std::thread::sleep(std::time::Duration::from_millis(300));
                capture_once(&d1)
            })
        });
        let b = t.spawn(|| {
            d1.with_idle_unless_capturing(|| {
                std::thread::sleep(std::time::Duration::from_millis(300));
                capture_once(&d0)
            })
        });
        (a.join().expect("thread A"), b.join().expect("thread B"))
    });
    done.send(()).ok();
    println!("A (section 0, capture 1): {a:?}; B (section 1, capture 0): {b:?}");
    assert!(ok(&a) && ok(&b), "{a:?} {b:?}");
    // Outside the sections, both devices capture again.
    capture_once(&d0).expect("a capture of device 0");
    capture_once(&d1).expect("a capture of device 1");
}

/// The environment variable of this binary's child process: a test that needs every handle of
/// device 1 in the process to be its own.
const ALONE: &str = "UM_TWO_DEVICES_ALONE";

/// The last handle of device 1 is dropped inside a capture closure of device 0, while device
/// 1's shared state still holds modules to unload (those of a handle a waker dropped earlier, a
/// driver callback, where they can only be put aside): their unload, a wait for device 1, is
/// kept for the end of this thread's capture. Meanwhile another thread makes a new handle of
/// device 1 and begins a capture there. The kept unload runs when the device-0 capture ends,
/// while the device-1 capture is still open: it must not fail that capture (rule 187: nothing
/// `um` does implicitly on one thread fails a capture of `um` on another; rule 197: no
/// whole-device wait while a capture of `um` is in progress on the device). The device-1
/// capture's graph must replay right.
#[test]
#[ignore = "needs two CUDA devices"]
fn a_device_released_after_a_capture_of_another_leaves_a_new_capture_of_it_valid() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let name = "a_device_released_after_a_capture_of_another_leaves_a_new_capture_of_it_valid";
    if std::env::var_os(ALONE).is_none() {
        let (status, text) = common::child_output(name, ALONE);
        assert!(
            status.success() && text.contains("1 passed"),
            "the child failed ({status})"
        );
        return;
    }
    let done = watchdog("a device released after a capture of another");
    let ctx0 = Context::new(0).expect("device 0");
    // A handle of device 1 with a module, and one without.
    let with_module = Context::new(1).expect("this test needs two CUDA devices");
    let keep = Context::new(1).expect("device 1");
    let y = Managed::from_slice(&with_module, &[0.0f32; 256]).expect("alloc");
    with_module
        .with_stream(StreamOptions::new(), |s| {
            let mut y = y.attach(s)?;
            testing::add_scalar(s, &mut y, 1.0)?;
            s.sync_all((y,)).map(drop)
        })
        .expect("device 1 work");
    assert!(with_module.cache_stats().0 >= 1, "a module is loaded");
    assert_eq!(keep.cache_stats().0, 0, "no module in the other handle");
    // Dropped by a waker (inside a stream callback of device 0): its modules are put aside in
    // device 1's shared state, which `keep` holds alive.
    common::waker::run_in_callback(&ctx0, move || {
        drop(with_module);
        "a handle of device 1 with a module dropped".to_owned()
    });
    let (capturing_tx, capturing_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let mut keep = Some(keep);
    let mut other = None;
    let x0 = Managed::from_slice_mirrored(&ctx0, &[0.0f32; 256]).expect("alloc");
    let x0 = ctx0
        .with_stream(StreamOptions::new(), |s| {
            let x0 = x0.attach(s)?;
            let (graph, ()) = s.capture((x0,), |cap, (mut x0,)| {
                testing::add_scalar(cap, &mut x0, 1.0)?;
                // Device 1's last handle: its shared state goes, and with it the unload of the
                // modules put aside (a wait for device 1), kept for the end of this capture.
                drop(keep.take());
                other = Some(std::thread::spawn(move || -> um::Result<f32> {
                    let ctx1 = Context::new(1)?; // a new shared state of device 1
                    let x1 = Managed::from_slice_mirrored(&ctx1, &[0.0f32; 256])?;
                    ctx1.with_stream(StreamOptions::new(), |t| {
                        let x1 = x1.attach(t)?;
                        let (graph, ()) = t.capture((x1,), |cap, (mut x1,)| {
                            testing::add_scalar(cap, &mut x1, 1.0)?;
                            let _ = capturing_tx.send(());
                            // Until the device-0 capture has ended (and its kept work ran).
                            let _ = go_rx.recv();
                            testing::add_scalar(cap, &mut x1, 1.0)?;
                            Ok(((x1,), ()))
                        })?;
                        graph.launch(t)?;
                        let (x1,) = graph.sync()?;
                        Ok(x1[0])
                    })
                }));
                // The device-1 capture is open (or its thread gave up) when this one ends.
                let _ = capturing_rx.recv();
                Ok(((x0,), ()))
            })?;
            let _ = go_tx.send(());
            graph.launch(s)?;
            let (x0,) = graph.sync()?;
            Ok(x0)
        })
        .expect("the device-0 capture");
    assert!(x0.iter().all(|v| *v == 1.0), "the device-0 graph replayed");
    let device1 = other
        .take()
        .expect("the device-1 thread was started")
        .join()
        .expect("the device-1 thread ended without a panic");
    done.send(()).ok();
    println!("the device-1 capture begun beside the kept release: {device1:?}");
    assert_eq!(
        device1,
        Ok(2.0),
        "a capture of device 1 failed by the wait kept from device 1's previous shared state"
    );
}

/// The driver times two events of one context only: marks of two devices make no span, and
/// each device's own marks still do.
#[test]
#[ignore = "needs two CUDA devices"]
fn time_marks_of_two_devices_make_no_span() {
    let _serial = common::serial();
    let (a, b) = two_contexts();
    let mark = |ctx: &Context| {
        ctx.with_stream(StreamOptions::new(), |s| s.mark_time())
            .expect("a mark")
    };
    let (a0, b0, a1) = (mark(&a), mark(&b), mark(&a));
    for (start, end) in [(&a0, &b0), (&b0, &a1)] {
        let err = start.until(end).expect_err("marks of two contexts");
        assert!(matches!(err, Error::TimeSpan { .. }), "{err}");
    }
    let elapsed = a0.until(&a1).expect("one device").wait();
    assert!(elapsed.is_ok(), "{elapsed:?}");
}

/// Inside a capture closure on device 0, a cuRAND generator of device 1 (on an eager stream of
/// device 1, made before the capture) is refused with `um_curand::Error::CaptureInProgress`:
/// the driver refuses its set-up on a capturing thread, whatever the device, and the refusal
/// would fail the capture. Nothing is made, the capture stays valid and replays right, and a
/// generator of that stream is made and draws once the capture has ended. Expected to pass.
#[test]
#[ignore = "needs two CUDA devices"]
fn a_generator_of_device_1_is_refused_inside_a_capture_of_device_0_which_stays_valid() {
    // Captures in one test fail whole-device waits in another: one test at a time.
    let _serial = common::serial();
    let (ctx0, ctx1) = two_contexts();
    if !ctx0.info().concurrent_managed_access {
        eprintln!("skipped: captures of unified memory need concurrent managed access");
        return;
    }
    let x = Managed::from_slice(&ctx0, &[0.0f32; 256]).expect("alloc");
    let y = Managed::from_slice(&ctx1, &[0.0f32; 2]).expect("alloc");
    let (x, refused, y) = ctx1
        .with_stream(StreamOptions::new(), |s1| {
            let (x, refused) = ctx0.with_stream(StreamOptions::new(), |s0| {
                let x = x.attach(s0)?;
                let (graph, refused) = s0.capture((x,), |cap, (mut x,)| {
                    testing::add_scalar(cap, &mut x, 1.0)?;
                    let refused = Rng::new(s1, RngKind::Philox, 1).err();
                    testing::add_scalar(cap, &mut x, 1.0)?;
                    Ok(((x,), refused))
                })?;
                graph.launch(s0)?;
                let (x,) = graph.sync()?;
                Ok((x, refused))
            })?;
            let mut y = y.attach(s1)?;
            let drawn =
                Rng::new(s1, RngKind::Philox, 1).and_then(|mut rng| rng.uniform(s1, &mut y));
            let y = y.sync()?;
            drawn.expect("a generator of device 1 after the capture");
            Ok((x, refused, y))
        })
        .expect("the streams of both devices");
    assert!(
        matches!(refused, Some(um::curand::Error::CaptureInProgress)),
        "a generator of device 1 inside a capture of device 0: {refused:?}"
    );
    assert!(x.iter().all(|v| *v == 2.0), "the capture replayed wrong");
    assert!(
        y.iter().all(|v| *v > 0.0 && *v <= 1.0),
        "drawn after the capture: {:?}",
        &y[..]
    );
}
