//! Coherent memory (`Managed<T, S, Coherent>`: managed memory attached globally, on devices
//! with concurrent managed access) on a real GPU: results against the CPU, no association call
//! at any transition, handoffs ordered by events alone, all three storages in one launch and
//! one `sync_all`, the CPU writing one buffer while another stream's kernel runs on another,
//! drop in flight, the transfer policies, and the async waits.
//!
//! Every test opens device 0 *as it is* (`ContextOptions::new()`), not through `Context::new`:
//! under `run.sh --emulate-no-concurrent-access` every `Context::new` emulates a device
//! without concurrent access, where coherent memory is refused by design (that refusal is
//! tested in `gpu_no_concurrent_access`). These tests need a device that has it.
//!
//! Stream A runs `spin_then_add`, which takes at least `SPIN_NS` of GPU time before it writes:
//! a stream not ordered after it would read the buffer before the write, and the exact results
//! would show it. No assertion depends on timing. The tests share a lock: one compares the
//! GPU's free memory, which other tests of this binary must not move meanwhile.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use pollster::block_on;
use um::{
    CoherentManaged, Context, ContextOptions, Error, Managed, MirroredManaged, StreamOptions,
    Transfer,
};
use um_test_kernels::testing::{add_scalar, axpy, spin_then_add};

/// GPU time `spin_then_add` takes at least, where a test needs a stream to be busy.
const SPIN_NS: u64 = 50_000_000;

use crate::common::{poll_once, serial};

/// Device 0 as it is, whatever the environment says; it must have concurrent managed access.
fn coherent_gpu() -> Context {
    let ctx = Context::new_with_options(0, ContextOptions::new())
        .unwrap_or_else(|e| panic!("this test needs a CUDA device: {e}"));
    assert!(
        ctx.info().concurrent_managed_access,
        "this test needs a device with concurrent managed access, and {} lacks it",
        ctx.info().name
    );
    ctx
}

fn n() -> usize {
    common::workload(1 << 20, 1 << 12)
}

/// The first element of `v` that is not `want(i)`, with its index.
fn first_wrong(v: &[f32], want: impl Fn(usize) -> f32) -> Option<(usize, f32, f32)> {
    v.iter()
        .enumerate()
        .find(|(i, x)| **x != want(*i))
        .map(|(i, x)| (i, *x, want(i)))
}

#[test]
#[ignore = "needs a CUDA device"]
fn coherent_results_match_the_cpu() {
    let _serial = serial();
    let ctx = coherent_gpu();
    common::seed_loop_matches_the_cpu(
        &ctx,
        common::Alloc {
            from_slice: |c, v| Managed::from_slice_coherent(c, v),
            zeroed: |c, n| Managed::zeroed_slice_coherent(c, n),
        },
    );
    // The single-value constructors.
    let one = Managed::new_coherent(&ctx, 5u64).expect("new");
    let zero = Managed::<u64, um::HostOwned, um::Coherent>::zeroed_coherent(&ctx).expect("zero");
    assert_eq!((*one, *zero), (5, 0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn coherent_transitions_make_no_attach_call() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let x = Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("alloc x");
    let y = Managed::from_fn_coherent(&ctx, n(), |_| 1.0f32).expect("alloc y");
    let u = Managed::from_fn(&ctx, n(), |i| i as f32).expect("alloc unified");
    let (x, y, u) = ctx
        .with_stream(StreamOptions::new().non_blocking(), |a| {
            ctx.with_stream(StreamOptions::new().non_blocking(), |b| {
                let before = um_core::attach_calls_on_this_thread();
                let mut x = x.attach(a)?;
                let y = y.attach(a)?;
                spin_then_add(a, &mut x, 1.0, 1_000_000)?; // x = i + 1
                let mut x = x.hand_off(b)?;
                add_scalar(b, &mut x, 1.0)?; // x = i + 2
                let x = x.sync()?.attach(a)?; // back on A: after a sync, no call either
                let y = y.hand_off(b)?.hand_off(a)?;
                let (x, y) = a.sync_all((x, y))?;
                assert_eq!(
                    um_core::attach_calls_on_this_thread(),
                    before,
                    "coherent attach, hand_off, sync and sync_all call no cuStreamAttachMemAsync"
                );
                // The counter counts: a unified buffer's attach and hand_off are driver calls.
                let mut u = u.attach(a)?;
                add_scalar(a, &mut u, 1.0)?;
                let u = u.hand_off(b)?;
                assert!(
                    um_core::attach_calls_on_this_thread() >= before + 2,
                    "a unified attach and hand_off went uncounted"
                );
                Ok((x, y, u.sync()?))
            })
        })
        .expect("stream work");
    assert_eq!(first_wrong(&x, |i| i as f32 + 2.0), None);
    assert_eq!(first_wrong(&y, |_| 1.0), None);
    assert_eq!(first_wrong(&u, |i| i as f32 + 1.0), None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_to_b_to_c_is_ordered_by_events_alone() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let x = Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("alloc x");
    let y = CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, n()).expect("alloc y");
    let z = CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, n()).expect("alloc z");
    let non_blocking = StreamOptions::new().non_blocking();
    let (x, y, z) = ctx
        .with_stream(non_blocking, |a| {
            ctx.with_stream(non_blocking, |b| {
                ctx.with_stream(non_blocking, |c| {
                    let (mut y, mut z) = (y.attach(b)?, z.attach(c)?);
                    let mut x = x.attach(a)?;
                    spin_then_add(a, &mut x, 1.0, SPIN_NS)?; // x = i + 1, after SPIN_NS
                    let x = x.hand_off(b)?; // B waits for A's event: no attach, no host wait
                    axpy(b, &x, &mut y, 1.0)?; // y = x = i + 1, read on B
                    let mut x = x.hand_off(c)?; // C waits for B's event (and so for A)
                    axpy(c, &x, &mut z, 1.0)?; // z = x = i + 1, read on C
                    add_scalar(c, &mut x, 2.0)?; // x = i + 3, written on C
                    let y = y.sync()?;
                    let (x, z) = c.sync_all((x, z))?;
                    Ok((x, y, z))
                })
            })
        })
        .expect("A -> B -> C");
    assert_eq!(
        first_wrong(&y, |i| i as f32 + 1.0),
        None,
        "B read x before A's write reached it"
    );
    assert_eq!(
        first_wrong(&z, |i| i as f32 + 1.0),
        None,
        "C read x before A's write reached it"
    );
    assert_eq!(first_wrong(&x, |i| i as f32 + 3.0), None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn within_a_stream_set_the_old_owner_of_coherent_memory_is_refused() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let x = Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("alloc");
    let x = ctx
        .with_stream_set(3, StreamOptions::new().non_blocking(), |s| {
            let mut x = x.attach(&s[0])?;
            spin_then_add(&s[0], &mut x, 1.0, SPIN_NS)?;
            let mut x = x.hand_off(&s[1])?;
            // One brand for the set: this compiles, and is refused at run time, before the
            // driver could race s[0]'s kernel with s[1]'s on globally attached memory.
            let err = add_scalar(&s[0], &mut x, 1.0).expect_err("s[0] no longer owns it");
            assert!(
                matches!(err, Error::StreamMismatch { argument: 0 }),
                "{err}"
            );
            add_scalar(&s[1], &mut x, 2.0)?; // i + 3
            let x = x.hand_off(&s[2])?;
            let err = s[1].sync_all((x,)).map(drop).expect_err("s[2] owns it");
            assert!(
                matches!(err, Error::StreamMismatch { argument: 0 }),
                "{err}"
            );
            // The refused group was dropped (its drop waited for s[2]); start again.
            let mut y = Managed::from_fn_coherent(&ctx, n(), |i| i as f32)?.attach(&s[2])?;
            add_scalar(&s[2], &mut y, 4.0)?;
            y.sync()
        })
        .expect("set");
    assert_eq!(first_wrong(&x, |i| i as f32 + 4.0), None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn unified_mirrored_and_coherent_share_a_launch_and_a_sync_all() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let x = Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("coherent");
    let y = Managed::from_fn(&ctx, n(), |_| 1.0f32).expect("unified");
    let z: MirroredManaged<[f32]> =
        Managed::from_fn_mirrored(&ctx, n(), |_| 2.0f32).expect("mirrored");
    let parts = vec![
        Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("coherent vec 0"),
        Managed::from_fn_coherent(&ctx, n(), |_| 3.0f32).expect("coherent vec 1"),
    ];
    let (x, y, z, parts) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut x, mut y, mut z) = (x.attach(s)?, y.attach(s)?, z.attach(s)?);
            axpy(s, &x, &mut y, 2.0)?; // y = 2i + 1: coherent read, unified written
            axpy(s, &y, &mut z, 1.0)?; // z = 2i + 3: unified read, mirrored written
            axpy(s, &z, &mut x, 1.0)?; // x = 3i + 3: mirrored read, coherent written
            let parts = parts
                .into_iter()
                .map(|p| p.attach(s))
                .collect::<um::Result<Vec<_>>>()?;
            let (x, y, z) = s.sync_all((x, y, z))?;
            Ok((x, y, z, s.sync_all(parts)?))
        })
        .expect("one stream, three storages");
    assert_eq!(first_wrong(&y, |i| 2.0 * i as f32 + 1.0), None);
    assert_eq!(first_wrong(&z, |i| 2.0 * i as f32 + 3.0), None);
    assert_eq!(first_wrong(&x, |i| 3.0 * i as f32 + 3.0), None);
    assert_eq!(first_wrong(&parts[0], |i| i as f32), None);
    assert_eq!(first_wrong(&parts[1], |_| 3.0), None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_cpu_writes_one_coherent_buffer_while_a_kernel_runs_on_another() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let g = Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("alloc g");
    let mut h = CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, n()).expect("alloc h");
    let (g, h) = ctx
        .with_stream(StreamOptions::new().non_blocking(), |b| {
            ctx.with_stream(StreamOptions::new().non_blocking(), |a| {
                let mut g = g.attach(b)?;
                spin_then_add(b, &mut g, 1.0, SPIN_NS)?; // g = i + 1, after SPIN_NS
                // Host-owned, globally attached memory: the CPU writes it while B's kernel
                // may run (the device has concurrent managed access).
                for (i, v) in h.iter_mut().enumerate() {
                    *v = 2.0 * i as f32;
                }
                let busy = !b.is_idle()?;
                println!("B still running after the host writes: {busy}");
                let mut h = h.attach(a)?;
                add_scalar(a, &mut h, 1.0)?; // h = 2i + 1
                let h = h.sync()?;
                Ok((g.sync()?, h))
            })
        })
        .expect("host and GPU at once");
    assert_eq!(first_wrong(&g, |i| i as f32 + 1.0), None);
    assert_eq!(first_wrong(&h, |i| 2.0 * i as f32 + 1.0), None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_a_coherent_buffer_in_flight_waits_and_frees_it() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let big = common::workload(64 << 20, 1 << 20); // 256 MiB of f32 (4 MiB under the sanitizer)
    let bytes = big * 4;
    // Warm up: module load, stream creation.
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut w = CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, 1024)?.attach(s)?;
        add_scalar(s, &mut w, 1.0)?;
        w.sync().map(drop)
    })
    .expect("warm-up");
    let (before, _) = ctx.mem_info().expect("mem info");
    // Control: a buffer the kernel wrote, still held, shows in free memory (so a leak would).
    let held = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut c = CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, big)?.attach(s)?;
            add_scalar(s, &mut c, 1.0)?;
            c.sync()
        })
        .expect("control");
    let (with_held, _) = ctx.mem_info().expect("mem info");
    assert!(held.iter().all(|v| *v == 1.0));
    drop(held);
    println!("free: before {before}, with a {bytes}-byte coherent buffer {with_held}");
    // Under a sanitizer free memory says nothing about a leak; the ordering assertions below
    // still run.
    let counts_memory = common::counts_free_memory();
    if counts_memory {
        assert!(
            before.saturating_sub(with_held) >= bytes / 2,
            "a buffer the kernel wrote shows in free memory"
        );
    }
    ctx.with_stream(StreamOptions::new().non_blocking(), |a| {
        for _ in 0..3 {
            let mut x = CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, big)?.attach(a)?;
            add_scalar(a, &mut x, 1.0)?;
            spin_then_add(a, &mut x, 1.0, SPIN_NS)?;
            drop(x); // waits for A's kernels, then frees
            assert!(a.is_idle()?, "the drop returned before A's kernels ended");
        }
        Ok(())
    })
    .expect("no fault: nothing freed under a running kernel");
    let (after, _) = ctx.mem_info().expect("mem info");
    println!("free: before {before}, after three dropped buffers {after}");
    if counts_memory {
        assert!(
            after + bytes / 2 >= before,
            "free memory back to where it was: before {before}, after {after}"
        );
    }
    ctx.wait_idle().expect("the context is healthy");
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_transfer_policies_act_on_coherent_memory() {
    let _serial = serial();
    let ctx = coherent_gpu();
    for transfer in [
        Transfer::OnDemand,
        Transfer::Prefetch,
        Transfer::HostResident,
    ] {
        let x = Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("alloc");
        let before = um_core::transfer_calls_on_this_thread();
        let x = ctx
            .with_stream(StreamOptions::new().transfer(transfer), |a| {
                ctx.with_stream(StreamOptions::new().transfer(transfer), |b| {
                    let mut x = x.attach(a)?;
                    spin_then_add(a, &mut x, 1.0, 1_000_000)?;
                    let mut x = x.hand_off(b)?;
                    add_scalar(b, &mut x, 2.0)?;
                    let mut x = x.sync()?;
                    x[0] += 8.0; // the host pass between two rounds
                    let mut x = x.attach(b)?;
                    add_scalar(b, &mut x, 4.0)?;
                    x.sync()
                })
            })
            .expect("policies with coherent memory");
        let calls = um_core::transfer_calls_on_this_thread() - before;
        assert_eq!(
            first_wrong(&x[1..], |i| (i + 1) as f32 + 7.0),
            None,
            "{transfer:?}"
        );
        assert_eq!(x[0], 15.0, "{transfer:?}");
        if transfer == Transfer::OnDemand {
            assert_eq!(calls, 0, "OnDemand neither prefetches nor advises");
        } else {
            assert!(calls > 0, "{transfer:?} made no prefetch or advice call");
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn coherent_memory_syncs_asynchronously_and_cancels_without_a_leak() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let x = Managed::from_fn_coherent(&ctx, 4097, |i| i as f32).expect("alloc x");
    let y = Managed::from_fn(&ctx, 4097, |_| 1.0f32).expect("alloc y");
    let (x, y) = block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut x = x.attach(s)?;
        spin_then_add(s, &mut x, 1.0, SPIN_NS)?; // x = i + 1
        let x = x.sync_async().await?;
        let (mut x, mut y) = (x.attach(s)?, y.attach(s)?);
        axpy(s, &x, &mut y, 1.0)?; // y = i + 2
        add_scalar(s, &mut x, 1.0)?; // x = i + 2
        s.sync_all_async((x, y)).await
    }))
    .expect("async waits");
    assert_eq!(first_wrong(&x, |i| i as f32 + 2.0), None);
    assert_eq!(first_wrong(&y, |i| i as f32 + 2.0), None);

    // Cancellation: a coherent buffer's future dropped with a kernel in flight goes to the
    // reaper, which frees it once the stream is done.
    let x = CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, 1 << 20).expect("alloc");
    block_on(ctx.with_stream_async(StreamOptions::new(), async |s| {
        let mut x = x.attach(s)?;
        spin_then_add(s, &mut x, 1.0, 2_000_000_000)?;
        let mut fut = x.sync_async();
        assert!(
            poll_once(&mut fut).is_pending(),
            "the spinning kernel holds it"
        );
        let before = um_core::orphans_pending();
        drop(fut);
        assert!(!s.is_idle()?, "the drop of the future did not wait");
        assert!(
            um_core::orphans_pending() > before,
            "the buffer went to the reaper"
        );
        Ok(())
    }))
    .expect("cancel");
    um::reap_pending();
    assert_eq!(um_core::orphans_pending(), 0);
    ctx.wait_idle()
        .expect("no fault: nothing freed under the kernel");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_panic_with_coherent_memory_in_flight_on_two_streams_frees_nothing_in_use() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let x = Managed::from_fn_coherent(&ctx, n(), |_| 0.0f32).expect("alloc");
    // A panic after a handoff while A's kernel may still run and B waits for it: unwinding
    // drops the buffer (its drop waits for B, and so for A) before either stream is destroyed.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.with_stream(StreamOptions::new().non_blocking(), |a| {
            ctx.with_stream(StreamOptions::new().non_blocking(), |b| {
                let mut x = x.attach(a)?;
                spin_then_add(a, &mut x, 1.0, SPIN_NS)?;
                let mut x = x.hand_off(b)?;
                add_scalar(b, &mut x, 1.0)?;
                panic!("a panic with kernels in flight on both streams");
                #[allow(unreachable_code)]
                x.sync().map(drop)
            })
        })
    }));
    assert!(unwound.is_err(), "the closure panicked");
    ctx.wait_idle()
        .expect("no fault: nothing was freed under a kernel");
    let y = Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("alloc after");
    let y = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut y = y.attach(s)?;
            add_scalar(s, &mut y, 0.5)?;
            y.sync()
        })
        .expect("the context still works after the panic");
    assert_eq!(first_wrong(&y, |i| i as f32 + 0.5), None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn coherent_memory_on_the_legacy_and_per_thread_streams() {
    let _serial = serial();
    let ctx = coherent_gpu();
    let x = Managed::from_fn_coherent(&ctx, n(), |i| i as f32).expect("alloc");
    let before = um_core::attach_calls_on_this_thread();
    // The legacy stream: attach_global (no call for coherent memory), then a handoff to a
    // non-blocking stream, which waits for the legacy stream's event.
    let x = ctx
        .with_legacy_stream(|legacy| {
            ctx.with_stream(StreamOptions::new().non_blocking(), |b| {
                let mut x = x.attach_global(legacy)?;
                spin_then_add(legacy, &mut x, 1.0, SPIN_NS)?; // i + 1
                let mut x = x.hand_off(b)?;
                add_scalar(b, &mut x, 2.0)?; // i + 3
                x.sync()
            })
        })
        .expect("legacy -> non-blocking");
    // The per-thread stream, on this thread and on another.
    let x = ctx
        .with_per_thread_stream(|pts| {
            let mut x = x.attach(pts)?;
            spin_then_add(pts, &mut x, 1.0, 1_000_000)?; // i + 4
            x.sync()
        })
        .expect("per-thread stream");
    assert_eq!(
        um_core::attach_calls_on_this_thread(),
        before,
        "no association call on the legacy or the per-thread stream"
    );
    let x = std::thread::scope(|t| {
        t.spawn(|| {
            ctx.with_per_thread_stream(|pts| {
                let mut x = x.attach(pts)?;
                add_scalar(pts, &mut x, 1.0)?; // i + 5
                x.sync()
            })
        })
        .join()
        .expect("the thread did not panic")
    })
    .expect("per-thread stream of another thread");
    assert_eq!(first_wrong(&x, |i| i as f32 + 5.0), None);
}
