//! The ownership rules at run time, on a real GPU: attach, launch, sync, re-attach, default
//! streams, threads, and drop with a kernel in flight. The streams of a set share a brand, so
//! their buffers are told apart at run time at every step; a panic or a drop with kernels in
//! flight frees nothing a kernel still uses; forgetting stream-owned memory only leaks it.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread;

use common::{gpu, workload};
use um::kernels::ptx;
use um::{Error, LaunchConfig, Linear, Managed, StreamOptions};
use um_test_kernels::testing::{self, add_scalar, axpy};

#[test]
#[ignore = "needs a CUDA device"]
fn attach_kernel_sync_then_host_reads_the_result() {
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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

/// Memory synced from a thread's per-thread default stream outlives the thread: the thread
/// exits, and the memory is the host's afterwards. (A thread whose default stream still has
/// managed memory attached never finishes exiting: `sync` re-attaches it to the host.) A
/// watchdog aborts a hang.
#[test]
#[ignore = "needs a CUDA device"]
fn memory_synced_from_a_per_thread_stream_outlives_its_thread() {
    let _serial = crate::common::serial();
    let done = common::watchdog_after("a thread exiting after a per-thread sync", 60);
    let ctx = gpu();
    let ctx = &ctx;
    let data = Managed::from_fn(ctx, 256, |_| 41.0f32).expect("alloc");
    let data = on_a_thread_that_exits(move || {
        ctx.with_per_thread_stream(|pts| {
            let mut d = data.attach(pts)?;
            add_scalar(pts, &mut d, 1.0)?;
            d.sync()
        })
    })
    .expect("synced on the per-thread stream");
    assert!(data.iter().all(|v| *v == 42.0));
    // Back on a stream after its thread's exit, and to the host again.
    let data = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("attached again");
    assert!(data.iter().all(|v| *v == 43.0));
    let _ = done.send(());
}

#[test]
#[ignore = "needs a CUDA device"]
fn kernels_run_on_the_legacy_default_stream() {
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
    let ctx = gpu();
    let data = Managed::from_fn(&ctx, 64, |_| 0.0f32).expect("alloc");
    let before = um_core::attach_calls_on_this_thread();
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
    let calls = um_core::attach_calls_on_this_thread() - before;
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
    three_rounds_with(&gpu(), um::Transfer::Prefetch);
}

#[test]
#[ignore = "needs a CUDA device"]
fn host_resident_policy_gives_the_same_results_and_can_be_left() {
    let _serial = crate::common::serial();
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

// ---------------------------------------------------------------------------------------------
// Streams of a set, panics, drops and forgetting with kernels in flight.

#[test]
#[ignore = "needs a CUDA device"]
fn a_read_only_buffer_of_another_stream_of_the_set_is_refused() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, 64, |_| 1.0f32).expect("alloc");
    let y = Managed::from_fn(&ctx, 64, |_| 3.0f32).expect("alloc");
    let (err, x, y) = ctx
        .with_stream_set(2, StreamOptions::new(), |s| {
            // x belongs to s[0]; the launch is on s[1], which owns y. Streams of a set share a
            // brand, so this compiles; a kernel of s[1] reading x while s[0] may write it
            // would race, so it is refused at run time, and nothing runs.
            let (x, mut y) = (x.attach(&s[0])?, y.attach(&s[1])?);
            let err = testing::axpy(&s[1], &x, &mut y, 2.0).expect_err("x is s[0]'s");
            let x = s[0].sync_all((x,))?.0;
            let y = s[1].sync_all((y,))?.0;
            Ok((err, x, y))
        })
        .expect("streams");
    assert_eq!(err, Error::StreamMismatch { argument: 0 });
    assert!(x.iter().all(|v| *v == 1.0));
    assert!(y.iter().all(|v| *v == 3.0), "a refused launch ran");
}

/// Streams of one stream set share a brand; owners are checked at run time.
#[test]
#[ignore = "needs a CUDA device"]
fn the_streams_of_a_set_are_told_apart_at_every_step() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let a = Managed::from_slice(&ctx, &[1.0f32; 1024]).expect("alloc");
    let b = Managed::from_slice(&ctx, &[1.0f32; 1024]).expect("alloc");
    let got = ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let (mut a, b) = (a.attach(&s[0])?, b.attach(&s[1])?);
        assert_eq!(
            testing::add_scalar(&s[1], &mut a, 1.0),
            Err(Error::StreamMismatch { argument: 0 })
        );
        assert_eq!(
            testing::axpy(&s[0], &b, &mut a, 2.0),
            Err(Error::StreamMismatch { argument: 0 })
        );
        let mut a = a.hand_off(&s[1])?;
        assert_eq!(
            testing::add_scalar(&s[0], &mut a, 1.0),
            Err(Error::StreamMismatch { argument: 0 })
        );
        // The wrong stream of the set: refused, and both buffers dropped (each drop waits for
        // its own stream, then frees).
        s[0].sync_all((a, b)).map(drop)
    });
    assert_eq!(got, Err(Error::StreamMismatch { argument: 0 }));
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_panic_or_a_drop_after_a_launch_frees_nothing_the_kernel_still_uses() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = workload(1 << 24, 1 << 12);
    // A panic in the closure while add_scalar may still run on `a`: unwinding drops `a` (which
    // must wait for its stream before freeing) and then the stream.
    let a = Managed::from_fn(&ctx, n, |_| 0.0f32).expect("alloc");
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let mut a = a.attach(s)?;
            for _ in 0..8 {
                testing::add_scalar(s, &mut a, 1.0)?;
            }
            panic!("a panic with kernels in flight");
            #[allow(unreachable_code)]
            a.sync().map(drop)
        })
    }));
    assert!(unwound.is_err(), "the closure panicked");
    // A drop mid-way: `b` is dropped with its kernels queued; `c` is used after.
    let b = Managed::from_fn(&ctx, n, |_| 0.0f32).expect("alloc");
    let c = Managed::from_fn(&ctx, n, |i| i as f32).expect("alloc");
    let c = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut b, mut c) = (b.attach(s)?, c.attach(s)?);
            for _ in 0..8 {
                testing::add_scalar(s, &mut b, 1.0)?;
            }
            drop(b);
            testing::add_scalar(s, &mut c, 0.5)?;
            c.sync()
        })
        .expect("the context still works after the panic");
    for (i, v) in c.iter().enumerate() {
        assert_eq!(*v, i as f32 + 0.5, "element {i}");
    }
}

/// A kernel's time on the GPU: long outside the sanitizer, short under it.
fn spin_ns(full_ms: u64) -> u64 {
    if std::env::var_os("UM_SANITIZE").is_some() {
        5_000_000
    } else {
        full_ms * 1_000_000
    }
}

/// Forgetting stream-owned memory with a kernel in flight, a pending sync future, or a reference
/// cycle of stream-owned buffers only leaks them; the scope ends and the stream is destroyed while
/// its work finishes.
#[test]
#[ignore = "needs a CUDA device"]
fn forgetting_stream_owned_memory_only_leaks_it() {
    let _serial = crate::common::serial();
    struct Node<'s> {
        _buf: Managed<[f32], um::StreamOwned<'s>>,
        next: std::cell::RefCell<Option<std::rc::Rc<Node<'s>>>>,
    }
    let ctx = gpu();
    let (a, b, c) = (
        Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc"),
        Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc"),
        Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc"),
    );
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut a = a.attach(s)?;
        testing::spin_then_add(s, &mut a, 1.0, spin_ns(50))?;
        std::mem::forget(a);
        std::mem::forget(b.attach(s)?.sync_async());
        let n = std::rc::Rc::new(Node {
            _buf: c.attach(s)?,
            next: std::cell::RefCell::new(None),
        });
        *n.next.borrow_mut() = Some(std::rc::Rc::clone(&n));
        Ok(())
    })
    .expect("the scope ends");
    ctx.wait_idle()
        .expect("the context is usable after the leaks");
}

#[test]
#[ignore = "needs a CUDA device"]
fn default_streams_run_the_safe_launchers_exactly() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = workload(1 << 20, 1 << 10);
    // The legacy stream, with memory attached globally (the only attach it allows).
    let a = Managed::from_fn(&ctx, n, |i| i as f32).expect("alloc");
    let a = ctx
        .with_legacy_stream(|l| {
            let mut a = a.attach_global(l)?;
            testing::add_scalar(l, &mut a, 1.0)?;
            testing::add_scalar_with(l, Linear::new(3, 7)?, &mut a, 1.0)?;
            a.sync()
        })
        .expect("legacy");
    for (i, v) in a.iter().enumerate() {
        assert_eq!(*v, i as f32 + 2.0, "legacy element {i}");
    }
    // Each of four threads on its own per-thread default stream, its own buffer.
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let ctx = ctx.clone();
                scope.spawn(move || {
                    let b = Managed::from_fn(&ctx, n, |i| (i + t) as f32).expect("alloc");
                    let b = ctx
                        .with_per_thread_stream(|p| {
                            let mut b = b.attach(p)?;
                            for _ in 0..4 {
                                testing::add_scalar(p, &mut b, 1.0)?;
                            }
                            b.sync()
                        })
                        .expect("per-thread stream");
                    for (i, v) in b.iter().enumerate() {
                        assert_eq!(*v, (i + t) as f32 + 4.0, "thread {t} element {i}");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread");
        }
    });
}

// A thread exits after giving up memory attached to its per-thread default stream (a thread
// whose default stream still has managed memory attached never finishes exiting, driver 580):
// each test lets the thread exit with the stream still busy, so that nothing the reaper frees
// later can have been freed before the exit. A watchdog aborts a hang on a GPU; the CPU model
// records the exit as a violation, which fails the test.

/// How long the per-thread stream stays busy after the memory is given up: the thread exits
/// well before its work is done.
const EXIT_BUSY_MS: u64 = 300;

/// Runs `f` on a thread of its own and gives its result once that thread has exited (a panic
/// there fails the test).
fn on_a_thread_that_exits<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    thread::scope(|t| t.spawn(f).join().expect("no panic"))
}

/// The context's result after the thread has exited: `x` of 256 zeros, plus one, on a stream
/// of its own (a sticky error from memory freed under a kernel would show here).
fn context_still_runs(ctx: &um::Context) {
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            add_scalar(s, &mut x, 1.0)?;
            x.sync()
        })
        .expect("the context runs work after the thread's exit");
    assert!(x.iter().all(|v| *v == 1.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_per_thread_buffer_dropped_in_a_capture_closure_lets_its_thread_exit() {
    let _serial = crate::common::serial();
    let Some(ctx) = common::device_for_captures() else {
        return;
    };
    let done = common::watchdog_after("a per-thread buffer dropped in a capture closure", 60);
    let ctx = &ctx;
    let busy = Managed::from_fn(ctx, 256, |_| 1.0f32).expect("alloc");
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
    let x = on_a_thread_that_exits(move || {
        ctx.with_per_thread_stream(|pts| {
            let mut busy = busy.attach(pts)?;
            testing::spin_then_add(pts, &mut busy, 1.0, spin_ns(EXIT_BUSY_MS))?;
            ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (graph, ()) = s.capture((x,), move |cap, (mut x,)| {
                    add_scalar(cap, &mut x, 1.0)?;
                    // Given up on a capturing thread: freed once the per-thread stream
                    // is done, after the thread has exited.
                    drop(busy);
                    Ok(((x,), ()))
                })?;
                graph.launch(s)?;
                graph.sync()
            })
        })
    })
    .map(|(x,)| x)
    .expect("the capture, replayed");
    assert!(x.iter().all(|v| *v == 1.0));
    um::reap_pending();
    context_still_runs(ctx);
    let _ = done.send(());
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_of_the_per_thread_stream_that_drops_its_buffer_lets_the_thread_exit() {
    let _serial = crate::common::serial();
    let Some(ctx) = common::device_for_captures() else {
        return;
    };
    let done = common::watchdog_after("a per-thread capture that drops its buffer", 60);
    let ctx = &ctx;
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
    let came = on_a_thread_that_exits(move || {
        ctx.with_per_thread_stream(|pts| {
            let mut x = x.attach(pts)?;
            testing::spin_then_add(pts, &mut x, 1.0, spin_ns(EXIT_BUSY_MS))?;
            let captured = pts.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                // The capture's own buffer, dropped: kept by the scope, freed behind the
                // per-thread stream once the capture has ended.
                drop(x);
                Err::<(_, ()), _>(Error::StreamPoisoned)
            });
            Ok(captured.map(drop))
        })
    })
    .expect("the per-thread scope");
    assert!(
        matches!(came, Err(Error::StreamPoisoned)),
        "the closure's own error comes back: {came:?}"
    );
    um::reap_pending();
    context_still_runs(ctx);
    let _ = done.send(());
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_per_thread_scope_dropped_unfinished_lets_its_thread_exit() {
    let _serial = crate::common::serial();
    let done = common::watchdog_after("a per-thread async scope dropped unfinished", 60);
    let ctx = gpu();
    let ctx = &ctx;
    let busy = Managed::from_fn(ctx, 256, |_| 1.0f32).expect("alloc");
    let pending = on_a_thread_that_exits(move || {
        let mut scope = Box::pin(ctx.with_per_thread_stream_async(async |pts| {
            let mut busy = busy.attach(pts)?;
            testing::spin_then_add(pts, &mut busy, 1.0, spin_ns(EXIT_BUSY_MS))?;
            std::future::pending::<()>().await;
            Ok(busy.sync_async().await?[0])
        }));
        let polled = crate::common::poll_once(&mut scope);
        // Dropped with the buffer attached in it: it goes to the reaper, no wait here.
        drop(scope);
        polled.is_pending()
    });
    assert!(pending, "the scope waits forever");
    um::reap_pending();
    context_still_runs(ctx);
    let _ = done.send(());
}

#[test]
#[ignore = "needs a CUDA device"]
fn per_thread_sync_futures_polled_or_cancelled_let_their_thread_exit() {
    let _serial = crate::common::serial();
    let done = common::watchdog_after("per-thread sync futures", 60);
    let ctx = gpu();
    let ctx = &ctx;
    let (a, b, c) = (
        Managed::from_fn(ctx, 256, |_| 1.0f32).expect("alloc"),
        Managed::from_fn(ctx, 256, |_| 2.0f32).expect("alloc"),
        Managed::from_fn(ctx, 256, |_| 3.0f32).expect("alloc"),
    );
    let (a, b) = on_a_thread_that_exits(move || {
        ctx.with_per_thread_stream(|pts| {
            let (mut a, b, mut c) = (a.attach(pts)?, b.attach(pts)?, c.attach(pts)?);
            add_scalar(pts, &mut a, 1.0)?;
            // Awaited to the end: a group of two.
            let (a, b) = pollster::block_on(pts.sync_all_async((a, b)))?;
            // Cancelled with the stream busy: freed by the reaper after the exit.
            testing::spin_then_add(pts, &mut c, 1.0, spin_ns(EXIT_BUSY_MS))?;
            let mut fut = c.sync_async();
            let polled = crate::common::poll_once(&mut fut);
            assert!(polled.is_pending(), "the stream spins");
            drop(fut);
            Ok((a, b))
        })
    })
    .expect("the per-thread scope");
    assert!(a.iter().all(|v| *v == 2.0) && b.iter().all(|v| *v == 2.0));
    um::reap_pending();
    context_still_runs(ctx);
    let _ = done.send(());
}

#[test]
#[ignore = "needs a CUDA device"]
fn per_thread_memory_handed_off_both_ways_lets_its_thread_exit() {
    let _serial = crate::common::serial();
    let done = common::watchdog_after("per-thread memory handed off both ways", 60);
    let ctx = gpu();
    let ctx = &ctx;
    let (a, b) = (
        Managed::from_fn(ctx, 256, |_| 1.0f32).expect("alloc"),
        Managed::from_fn(ctx, 256, |_| 10.0f32).expect("alloc"),
    );
    let (a, b) = on_a_thread_that_exits(move || {
        ctx.with_stream(StreamOptions::new(), |s| {
            ctx.with_per_thread_stream(|pts| {
                // From the per-thread stream to a stream of its own, synced there.
                let mut a = a.attach(pts)?;
                testing::spin_then_add(pts, &mut a, 1.0, spin_ns(EXIT_BUSY_MS))?;
                let mut a = a.hand_off(s)?;
                add_scalar(s, &mut a, 1.0)?;
                // From that stream to the per-thread stream, synced in a group there.
                let mut b = b.attach(s)?;
                add_scalar(s, &mut b, 1.0)?;
                let mut b = b.hand_off(pts)?;
                add_scalar(pts, &mut b, 1.0)?;
                let (b,) = pts.sync_all((b,))?;
                Ok((a.sync()?, b))
            })
        })
    })
    .expect("the scopes");
    assert!(a.iter().all(|v| *v == 3.0), "{:?}", &a[..4]);
    assert!(b.iter().all(|v| *v == 12.0), "{:?}", &b[..4]);
    context_still_runs(ctx);
    let _ = done.send(());
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_thread_that_panics_with_per_thread_work_in_flight_exits() {
    let _serial = crate::common::serial();
    let done = common::watchdog_after("a panic with per-thread work in flight", 60);
    let ctx = gpu();
    let ctx = &ctx;
    let busy = Managed::from_fn(ctx, 256, |_| 1.0f32).expect("alloc");
    let joined = thread::scope(|t| {
        t.spawn(move || {
            ctx.with_per_thread_stream(|pts| {
                let mut busy = busy.attach(pts)?;
                testing::spin_then_add(pts, &mut busy, 1.0, spin_ns(EXIT_BUSY_MS))?;
                // The unwind drops the buffer, which waits for the stream, then frees it.
                panic!("a panic with the per-thread stream busy");
                #[allow(unreachable_code)]
                Ok(())
            })
        })
        .join()
    });
    assert!(joined.is_err(), "the thread panicked, and exited");
    context_still_runs(ctx);
    let _ = done.send(());
}

#[test]
#[ignore = "needs a CUDA device"]
fn buffers_of_the_other_storages_given_up_on_a_per_thread_stream_let_its_thread_exit() {
    let _serial = crate::common::serial();
    let Some(ctx) = common::device_for_captures() else {
        return;
    };
    let done = common::watchdog_after("other storages on a per-thread stream", 60);
    let ctx = &ctx;
    let coherent = Managed::from_fn_coherent(ctx, 256, |_| 1.0f32).expect("alloc");
    let mirror = Managed::from_fn_mirrored(ctx, 256, |_| 1.0f32).expect("alloc");
    let device = Managed::from_slice_device(ctx, &[1.0f32; 256]).expect("alloc");
    let pool = um::MemPool::new(ctx).expect("a memory pool");
    let (coherent, mirror) = on_a_thread_that_exits(|| {
        ctx.with_per_thread_stream(|pts| {
            let mut device = device.attach(pts)?;
            testing::spin_then_add(pts, &mut device, 1.0, spin_ns(EXIT_BUSY_MS))?;
            let mut pooled = pts.alloc_zeroed::<f32>(&pool, 256)?;
            add_scalar(pts, &mut pooled, 1.0)?;
            let (mut coherent, mut mirror) = (coherent.attach(pts)?, mirror.attach(pts)?);
            add_scalar(pts, &mut coherent, 1.0)?;
            add_scalar(pts, &mut mirror, 1.0)?;
            let (coherent, mirror) = pts.sync_all((coherent, mirror))?;
            // Given up on a capturing thread with the stream busy: freed after the exit.
            let x = Managed::from_slice(ctx, &[0.0f32; 256])?;
            ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (graph, ()) = s.capture((x,), move |cap, (mut x,)| {
                    add_scalar(cap, &mut x, 1.0)?;
                    drop((device, pooled));
                    Ok(((x,), ()))
                })?;
                graph.launch(s)?;
                graph.sync().map(drop)
            })?;
            Ok((coherent, mirror))
        })
    })
    .expect("the per-thread scope");
    assert!(coherent.iter().all(|v| *v == 2.0) && mirror.iter().all(|v| *v == 2.0));
    um::reap_pending();
    context_still_runs(ctx);
    let _ = done.send(());
}

#[test]
#[ignore = "needs a CUDA device"]
fn forgotten_per_thread_memory_leaks_and_lets_its_thread_exit() {
    let _serial = crate::common::serial();
    let done = common::watchdog_after("forgotten per-thread memory", 60);
    let ctx = gpu();
    let ctx = &ctx;
    let (a, b, c) = (
        Managed::from_fn(ctx, 256, |_| 1.0f32).expect("alloc"),
        Managed::from_fn(ctx, 256, |_| 1.0f32).expect("alloc"),
        Managed::from_fn(ctx, 256, |_| 1.0f32).expect("alloc"),
    );
    let pending = on_a_thread_that_exits(move || {
        ctx.with_per_thread_stream(|pts| {
            let mut a = a.attach(pts)?;
            testing::spin_then_add(pts, &mut a, 1.0, spin_ns(EXIT_BUSY_MS))?;
            // Leaked, attached, a kernel in flight: the memory is lost, and the thread
            // must still exit.
            std::mem::forget(a);
            let b = b.attach(pts)?;
            std::mem::forget(b);
            Ok(())
        })?;
        // A per-thread async scope, leaked with its buffer attached.
        let mut scope = Box::pin(ctx.with_per_thread_stream_async(async |pts| {
            let c = c.attach(pts)?;
            std::future::pending::<()>().await;
            Ok(c.sync_async().await?[0])
        }));
        let polled = crate::common::poll_once(&mut scope);
        std::mem::forget(scope);
        Ok::<_, Error>(polled.is_pending())
    })
    .expect("the per-thread scopes");
    assert!(pending, "the async scope waits forever");
    context_still_runs(ctx);
    let _ = done.send(());
}
