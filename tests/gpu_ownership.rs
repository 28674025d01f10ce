//! The ownership rules at run time, on a real GPU: attach, launch, sync, re-attach, default
//! streams, threads, and drop with a kernel in flight.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

mod common;

use std::thread;

use common::gpu;
use um::kernels::ptx;
use um::kernels::testing::{add_scalar, axpy};
use um::{LaunchConfig, Managed, StreamOptions};

#[test]
#[ignore = "needs a CUDA device"]
fn attach_kernel_sync_then_host_reads_the_result() {
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, 4097, |i| i as f32).expect("alloc x");
    let y = Managed::from_fn(&ctx, 4097, |_| 1.0f32).expect("alloc y");
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            axpy(s, &x, &mut y, 3.0)?;
            s.sync_all((x, y))
        })
        .expect("stream work");
    for i in 0..4097 {
        assert_eq!(x[i], i as f32, "x is read-only for the kernel");
        assert_eq!(y[i], 3.0 * i as f32 + 1.0, "y[{i}]");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn host_writes_before_attach_are_seen_by_the_kernel() {
    let ctx = gpu();
    let mut data = Managed::<[f32]>::zeroed_slice(&ctx, 300).expect("alloc");
    data.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = (i * 2) as f32);
    let data = ctx
        .with_stream(StreamOptions::new().non_blocking(), |s| {
            let mut d = data.attach(s)?;
            add_scalar(s, &mut d, 1.0)?;
            add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("stream work");
    assert!(
        data.iter()
            .enumerate()
            .all(|(i, v)| *v == (i * 2 + 2) as f32)
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn per_thread_default_stream_accepts_attach() {
    let ctx = gpu();
    let data = Managed::from_fn(&ctx, 1, |_| 41.0f32).expect("alloc");
    let data = ctx
        .with_per_thread_stream(|pts| {
            let mut d = data.attach(pts)?;
            add_scalar(pts, &mut d, 1.0)?;
            d.sync()
        })
        .expect("attach to CU_STREAM_PER_THREAD");
    assert_eq!(data[0], 42.0);
}

#[test]
#[ignore = "needs a CUDA device"]
fn kernels_run_on_the_legacy_default_stream() {
    let ctx = gpu();
    let kernel = ctx
        .load_ptx(ptx::STREAMS_PTX)
        .and_then(|m| m.kernel("kernel"))
        .expect("load");
    ctx.with_legacy_stream(|legacy| {
        // The seed's dummy launch: no memory, n = 0.
        // SAFETY: kernel(float *x, int n) with n = 0 never dereferences x.
        unsafe { legacy.launch(&kernel, LaunchConfig::grid_1d(1, 1), (0u64, 0i32)) }?;
        legacy.wait_idle()
    })
    .expect("launch on the NULL stream");
}

#[test]
#[ignore = "needs a CUDA device"]
fn two_threads_with_their_own_streams_interleave_cpu_and_gpu_work() {
    let ctx = gpu();
    let results: Vec<Vec<f32>> = thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let ctx = ctx.clone();
                scope.spawn(move || {
                    let mut data = Managed::from_fn(&ctx, 10_000, |i| (i + t) as f32)?;
                    for round in 0..20 {
                        data = ctx.with_stream(StreamOptions::new(), |s| {
                            let mut d = data.attach(s)?;
                            add_scalar(s, &mut d, 1.0)?;
                            d.sync()
                        })?;
                        // CPU work between kernels, on memory no stream owns.
                        data.iter_mut()
                            .for_each(|v| *v *= if round % 2 == 0 { 2.0 } else { 0.5 });
                    }
                    Ok::<_, um::Error>(data.to_vec())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("no panic").expect("worker"))
            .collect()
    });
    for (t, r) in results.iter().enumerate() {
        for (i, v) in r.iter().enumerate() {
            // Each pair of rounds maps v to ((v + 1) * 2 + 1) / 2 = v + 1.5.
            let expect = (i + t) as f32 + 15.0;
            assert_eq!(*v, expect, "thread {t}, element {i}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn reattach_to_a_second_stream_after_sync() {
    let ctx = gpu();
    let data = Managed::from_fn(&ctx, 512, |i| i as f32).expect("alloc");
    let data = ctx
        .with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                let mut d = data.attach(a)?;
                add_scalar(a, &mut d, 1.0)?;
                let mut d = d.sync()?.attach(b)?;
                add_scalar(b, &mut d, 10.0)?;
                d.sync()
            })
        })
        .expect("stream work");
    assert!(data.iter().enumerate().all(|(i, v)| *v == i as f32 + 11.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn reattach_to_the_same_stream_makes_no_driver_call() {
    let ctx = gpu();
    let data = Managed::from_fn(&ctx, 64, |_| 0.0f32).expect("alloc");
    let before = um::attach_calls_on_this_thread();
    let data = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            for _ in 0..5 {
                add_scalar(s, &mut d, 1.0)?;
                d = d.sync()?.attach(s)?;
            }
            d.sync()
        })
        .expect("stream work");
    let calls = um::attach_calls_on_this_thread() - before;
    assert!(data.iter().all(|v| *v == 5.0));
    if ctx.info().concurrent_managed_access {
        assert_eq!(
            calls, 1,
            "one attach, then none while the association stands"
        );
    } else {
        // Each sync re-attaches to the host, so each attach is real: 6 SINGLE + 6 HOST.
        assert_eq!(calls, 12);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_memory_with_a_kernel_in_flight_waits_for_it() {
    let ctx = gpu();
    let kernel = ctx
        .load_ptx(ptx::STREAMS_PTX)
        .and_then(|m| m.kernel("kernel"))
        .expect("load");
    let n = common::workload(1 << 22, 1 << 14);
    ctx.with_stream(StreamOptions::new(), |s| {
        for _ in 0..3 {
            let mut x = Managed::<[f32]>::zeroed_slice(&ctx, n)?.attach(s)?;
            // One block of 64 threads over 4M elements of pow/sqrt: milliseconds of work.
            // SAFETY: kernel(float *x, int n) writes x[0..n) (grid-stride); x holds n floats.
            unsafe { s.launch(&kernel, LaunchConfig::grid_1d(1, 64), (&mut x, n as i32)) }?;
            drop(x); // waits for the stream, then frees
        }
        s.wait_idle()
    })
    .expect("no fault: nothing was freed under a running kernel");
    // Nothing was freed under a running kernel: the context still runs work.
    common::assert_context_usable(&ctx);
}

#[test]
#[ignore = "needs a CUDA device"]
fn partial_and_empty_requests_are_refused_clearly() {
    let ctx = gpu();
    let err = Managed::<[f32]>::zeroed_slice(&ctx, 0).expect_err("empty allocation");
    assert!(
        matches!(
            err,
            um::Error::ZeroSized {
                len: 0,
                elem_size: 4
            }
        ),
        "{err}"
    );
    let err = Managed::<[u64]>::zeroed_slice(&ctx, usize::MAX / 4).expect_err("overflow");
    assert!(matches!(err, um::Error::SizeOverflow { .. }), "{err}");
    let (free, _) = ctx.mem_info().expect("mem info");
    let err = Managed::<[u8]>::zeroed_slice(&ctx, free + (1 << 30)).expect_err("larger than free");
    assert!(matches!(err, um::Error::WouldOversubscribe { .. }), "{err}");
}

#[test]
#[ignore = "needs a CUDA device"]
fn device_facts_recorded() {
    let ctx = gpu();
    let info = ctx.info();
    assert!(!info.name.is_empty());
    assert!(info.multiprocessors > 0);
    assert!(
        info.driver_version.0 >= 12,
        "driver {:?}",
        info.driver_version
    );
    println!("{info:?}");
}

#[test]
#[ignore = "needs a CUDA device"]
fn streams_of_a_set_are_told_apart_at_run_time() {
    let ctx = gpu();
    let data = Managed::from_fn(&ctx, 100, |i| i as f32).expect("alloc");
    let other = Managed::from_fn(&ctx, 100, |_| 0.0f32).expect("alloc");
    let data = ctx
        .with_stream_set(3, StreamOptions::new(), |s| {
            let mut d = data.attach(&s[0])?;
            let o = other.attach(&s[1])?;
            // Streams of a set share a brand: a launch on s[1] with a buffer of s[0] compiles,
            // and is refused at run time.
            let err = add_scalar(&s[1], &mut d, 1.0).expect_err("buffer of another stream");
            assert!(
                matches!(err, um::Error::StreamMismatch { argument: 0 }),
                "{err}"
            );
            add_scalar(&s[0], &mut d, 1.0)?;
            // A wait on s[0] does not cover a buffer of s[1].
            let err = s[0].sync_all((d, o)).expect_err("mixed group");
            assert!(
                matches!(err, um::Error::StreamMismatch { argument: 1 }),
                "{err}"
            );
            Ok(())
        })
        .map(|()| data_after_drop(&ctx));
    // The buffers were dropped with the refused group (each waited for its own stream).
    assert!(data.expect("set").is_ok());
}

fn data_after_drop(ctx: &um::Context) -> um::Result<()> {
    // The context is still healthy after the refusals.
    let probe = Managed::from_fn(ctx, 4, |_| 1.0f32)?;
    let probe = ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let mut p = probe.attach(&s[1])?;
        add_scalar(&s[1], &mut p, 1.0)?;
        s[1].sync_all(vec![p]).map(|mut v| v.remove(0))
    })?;
    assert!(probe.iter().all(|v| *v == 2.0));
    Ok(())
}

/// `common::three_rounds_with` over a fresh 1M-float buffer.
fn three_rounds_with(ctx: &um::Context, transfer: um::Transfer) -> Managed<[f32]> {
    let data = Managed::from_fn(ctx, 1 << 20, |i| i as f32).expect("alloc");
    common::three_rounds_with(ctx, data, transfer)
}

#[test]
#[ignore = "needs a CUDA device"]
fn prefetch_policy_gives_the_same_results() {
    three_rounds_with(&gpu(), um::Transfer::Prefetch);
}

#[test]
#[ignore = "needs a CUDA device"]
fn host_resident_policy_gives_the_same_results_and_can_be_left() {
    let ctx = gpu();
    let data = three_rounds_with(&ctx, um::Transfer::HostResident);
    // Then on an on-demand stream (the advice is removed on attach).
    let data = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("on-demand stream");
    assert!(
        data.iter()
            .enumerate()
            .all(|(i, v)| *v == 8.0 * i as f32 + 15.0)
    );
}
