//! The path for devices without concurrent managed access (Windows, WSL, Jetson, pre-Pascal),
//! run on a device that has it through `ContextOptions::emulate_no_concurrent_access`.
//!
//! Every test checks the results and counts the driver calls the mode requires: `sync` and
//! `sync_all` re-attach each buffer to the host (`CU_MEM_ATTACH_HOST`) before they wait, so
//! every later `attach` is a real `cuStreamAttachMemAsync`, and the transfer policies make no
//! prefetch or advice call. The counters are per thread, and each test runs on its own thread.
//! What this proves, and what only a real device without concurrent access could, is in
//! `docs/design.md`.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use std::thread;

use um::{Context, ContextOptions, Managed, StreamOptions, Transfer};
use um_test_kernels::testing::{self, add_scalar, axpy};

/// Device 0, as if it lacked concurrent managed access.
fn emulated() -> Context {
    Context::new_with_options(0, ContextOptions::new().emulate_no_concurrent_access(true))
        .unwrap_or_else(|e| panic!("this test needs a CUDA device: {e}"))
}

/// Device 0 as it is, whatever the environment says.
fn as_it_is() -> Context {
    Context::new_with_options(0, ContextOptions::new())
        .unwrap_or_else(|e| panic!("this test needs a CUDA device: {e}"))
}

/// The calls made by `f` on this thread: (all attaches, attaches to the host, prefetch and
/// advice calls).
fn calls_of<R>(f: impl FnOnce() -> R) -> (R, (u64, u64, u64)) {
    let before = (
        um_core::attach_calls_on_this_thread(),
        um_core::host_attach_calls_on_this_thread(),
        um_core::transfer_calls_on_this_thread(),
    );
    let r = f();
    let after = (
        um_core::attach_calls_on_this_thread(),
        um_core::host_attach_calls_on_this_thread(),
        um_core::transfer_calls_on_this_thread(),
    );
    (
        r,
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
    )
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_emulated_context_reports_no_concurrent_access() {
    let _serial = crate::common::serial();
    let ctx = emulated();
    let real = as_it_is();
    assert!(!ctx.info().concurrent_managed_access);
    assert!(ctx.info().emulated_no_concurrent_access);
    assert!(!real.info().emulated_no_concurrent_access);
    assert_eq!(ctx.info().name, real.info().name);
    assert!(ctx.same_as(&real), "one device, one primary context");
    // The environment variable reaches `Context::new` (run.sh --emulate-no-concurrent-access).
    let env_on =
        std::env::var(ContextOptions::EMULATE_NO_CONCURRENT_ACCESS_VAR).as_deref() == Ok("1");
    let from_new = common::gpu();
    assert_eq!(from_new.info().emulated_no_concurrent_access, env_on);
    if env_on {
        assert!(!from_new.info().concurrent_managed_access);
    }
}

/// Five rounds of kernel, `sync`, re-attach to the same stream, then a final `sync`.
fn five_rounds_on_one_stream(ctx: &Context) -> (u64, u64) {
    let data = Managed::from_fn(ctx, 4096, |i| i as f32).expect("alloc");
    let (data, (attaches, host, _)) = calls_of(|| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            for _ in 0..5 {
                add_scalar(s, &mut d, 1.0)?;
                d = d.sync()?.attach(s)?;
            }
            d.sync()
        })
        .expect("stream work")
    });
    assert!(data.iter().enumerate().all(|(i, v)| *v == i as f32 + 5.0));
    (attaches, host)
}

#[test]
#[ignore = "needs a CUDA device"]
fn sync_reattaches_to_the_host_and_the_next_attach_is_real() {
    let _serial = crate::common::serial();
    // Emulated: 6 attaches to the stream and 6 to the host.
    assert_eq!(five_rounds_on_one_stream(&emulated()), (12, 6));
    // The same loop as the device is: one attach, kept across every sync (the counters can
    // tell the two paths apart).
    let real = as_it_is();
    if real.info().concurrent_managed_access {
        assert_eq!(five_rounds_on_one_stream(&real), (1, 0));
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn reattach_to_a_second_stream_after_sync() {
    let _serial = crate::common::serial();
    let ctx = emulated();
    let data = Managed::from_fn(&ctx, 512, |i| i as f32).expect("alloc");
    let (data, calls) = calls_of(|| {
        ctx.with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                let mut d = data.attach(a)?;
                add_scalar(a, &mut d, 1.0)?;
                let mut d = d.sync()?.attach(b)?;
                add_scalar(b, &mut d, 10.0)?;
                d.sync()
            })
        })
        .expect("stream work")
    });
    assert!(data.iter().enumerate().all(|(i, v)| *v == i as f32 + 11.0));
    assert_eq!(calls, (4, 2, 0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn sync_all_reattaches_every_buffer_before_its_one_wait() {
    let _serial = crate::common::serial();
    let ctx = emulated();
    let n = 4097;
    let x = Managed::from_fn(&ctx, n, |i| i as f32).expect("alloc x");
    let y = Managed::from_fn(&ctx, n, |_| 1.0f32).expect("alloc y");
    let ((x, y), calls) = calls_of(|| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            axpy(s, &x, &mut y, 3.0)?;
            s.sync_all((x, y))
        })
        .expect("tuple")
    });
    assert_eq!(calls, (4, 2, 0));
    for i in 0..n {
        assert_eq!(x[i], i as f32);
        assert_eq!(y[i], 3.0 * i as f32 + 1.0, "y[{i}]");
    }
    // A Vec group, attached again: every attach is real, every buffer goes back to the host.
    let group = vec![x, y];
    let (group, calls) = calls_of(|| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let mut on = Vec::new();
            for m in group {
                let mut m = m.attach(s)?;
                add_scalar(s, &mut m, 1.0)?;
                on.push(m);
            }
            s.sync_all(on)
        })
        .expect("vec")
    });
    assert_eq!(calls, (4, 2, 0));
    assert!(
        group[0]
            .iter()
            .enumerate()
            .all(|(i, v)| *v == i as f32 + 1.0)
    );
    assert!(
        group[1]
            .iter()
            .enumerate()
            .all(|(i, v)| *v == 3.0 * i as f32 + 2.0)
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn attach_global_memory_goes_back_to_the_host() {
    let _serial = crate::common::serial();
    let ctx = emulated();
    let x = Managed::from_fn(&ctx, 1000, |i| i as f32).expect("alloc");
    let (x, calls) = calls_of(|| {
        ctx.with_legacy_stream(|legacy| {
            let mut x = x.attach_global(legacy)?;
            add_scalar(legacy, &mut x, 1.0)?;
            x.sync()
        })
        .expect("legacy")
    });
    // GLOBAL on the NULL stream, then HOST on the NULL stream.
    assert_eq!(calls, (2, 1, 0));
    // The memory is host-attached again: a stream of our own takes it with a real attach.
    let (x, calls) = calls_of(|| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            add_scalar(s, &mut x, 1.0)?;
            x.sync()
        })
        .expect("created stream")
    });
    assert_eq!(calls, (2, 1, 0));
    assert!(x.iter().enumerate().all(|(i, v)| *v == i as f32 + 2.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn per_thread_stream_round_trips() {
    let _serial = crate::common::serial();
    let ctx = emulated();
    let x = Managed::from_fn(&ctx, 1000, |i| i as f32).expect("alloc");
    let (x, calls) = calls_of(|| {
        ctx.with_per_thread_stream(|pts| {
            let mut x = x.attach(pts)?;
            add_scalar(pts, &mut x, 1.0)?;
            let mut x = x.sync()?.attach(pts)?;
            add_scalar(pts, &mut x, 1.0)?;
            x.sync()
        })
        .expect("per-thread")
    });
    assert_eq!(calls, (4, 2, 0));
    assert!(x.iter().enumerate().all(|(i, v)| *v == i as f32 + 2.0));
}

/// `common::three_rounds_with` over a fresh 64K-float buffer: the calls it made.
fn three_rounds_with(ctx: &Context, transfer: Transfer) -> (u64, u64, u64) {
    let data = Managed::from_fn(ctx, 1 << 16, |i| i as f32).expect("alloc");
    calls_of(|| common::three_rounds_with(ctx, data, transfer)).1
}

#[test]
#[ignore = "needs a CUDA device"]
fn transfer_policies_neither_prefetch_nor_advise() {
    let _serial = crate::common::serial();
    let ctx = emulated();
    for transfer in [
        Transfer::OnDemand,
        Transfer::Prefetch,
        Transfer::HostResident,
    ] {
        assert_eq!(
            three_rounds_with(&ctx, transfer),
            (8, 4, 0),
            "{transfer:?}: 4 attaches to the stream, 4 to the host, no prefetch or advice"
        );
    }
    // As the device is, the policies do call the driver (so the counter can fail the test).
    let real = as_it_is();
    if real.info().concurrent_managed_access {
        let (_, _, prefetches) = three_rounds_with(&real, Transfer::Prefetch);
        assert_eq!(
            prefetches, 8,
            "a prefetch at each of 4 attaches and 4 syncs"
        );
        let (_, _, advice) = three_rounds_with(&real, Transfer::HostResident);
        assert_eq!(advice, 2, "the advice is given once per allocation");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn two_threads_work_on_host_memory_while_the_other_runs_kernels() {
    let _serial = crate::common::serial();
    // On a device without concurrent access this is the case that would fault if `sync` left
    // memory attached to its stream while another thread's kernel runs.
    let ctx = emulated();
    let rounds = 20;
    let results: Vec<(Vec<f32>, (u64, u64, u64))> = thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let ctx = ctx.clone();
                scope.spawn(move || {
                    let data = Managed::from_fn(&ctx, 10_000, |i| (i + t) as f32)?;
                    let (data, calls) = calls_of(|| {
                        let mut data = data;
                        for round in 0..rounds {
                            data = ctx.with_stream(StreamOptions::new(), |s| {
                                let mut d = data.attach(s)?;
                                add_scalar(s, &mut d, 1.0)?;
                                d.sync()
                            })?;
                            data.iter_mut()
                                .for_each(|v| *v *= if round % 2 == 0 { 2.0 } else { 0.5 });
                        }
                        Ok::<_, um::Error>(data)
                    });
                    Ok::<_, um::Error>((data?.to_vec(), calls))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("no panic").expect("worker"))
            .collect()
    });
    for (t, (r, calls)) in results.iter().enumerate() {
        assert_eq!(*calls, (2 * rounds, rounds, 0), "thread {t}");
        for (i, v) in r.iter().enumerate() {
            // Each pair of rounds maps v to ((v + 1) * 2 + 1) / 2 = v + 1.5.
            assert_eq!(*v, (i + t) as f32 + 15.0, "thread {t}, element {i}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_stream_owned_memory_waits_without_a_host_attach() {
    let _serial = crate::common::serial();
    let ctx = emulated();
    let n = common::workload(1 << 20, 1 << 12);
    let ((), calls) = calls_of(|| {
        ctx.with_stream(StreamOptions::new(), |s| {
            for _ in 0..3 {
                let mut x = Managed::<[f32]>::zeroed_slice(&ctx, n)?.attach(s)?;
                add_scalar(s, &mut x, 1.0)?;
                drop(x); // waits for the stream, then frees: no re-attach needed
            }
            Ok(())
        })
        .expect("no fault: nothing was freed under a running kernel")
    });
    assert_eq!(calls, (3, 0, 0));
    // Nothing was freed under a running kernel: the context still runs work.
    common::assert_context_usable(&ctx);
}

#[test]
#[ignore = "needs a CUDA device"]
fn each_buffer_follows_the_handle_it_was_allocated_with() {
    let _serial = crate::common::serial();
    // Two handles of one device share the driver context; the mode is the buffer's.
    let emulating = emulated();
    let real = as_it_is();
    let x = Managed::from_fn(&emulating, 64, |i| i as f32).expect("alloc");
    let (x, calls) = calls_of(|| {
        real.with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            add_scalar(s, &mut x, 1.0)?;
            x.sync()
        })
        .expect("stream of the other handle")
    });
    assert_eq!(calls, (2, 1, 0));
    assert!(x.iter().enumerate().all(|(i, v)| *v == i as f32 + 1.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn every_coherent_constructor_is_refused() {
    let _serial = crate::common::serial();
    let ctx = emulated();
    let want = um::Error::NeedsConcurrentManagedAccess { device: 0 };
    let refused = [
        Managed::new_coherent(&ctx, 1.0f32).map(drop),
        Managed::<u64, um::HostOwned, um::Coherent>::zeroed_coherent(&ctx).map(drop),
        Managed::from_fn_coherent(&ctx, 16, |i| i as f32).map(drop),
        Managed::from_slice_coherent(&ctx, &[1u32, 2, 3]).map(drop),
        um::CoherentManaged::<[f32]>::zeroed_slice_coherent(&ctx, 16).map(drop),
    ];
    for (i, r) in refused.into_iter().enumerate() {
        assert_eq!(r, Err(want.clone()), "constructor {i}");
    }
    // The refusal is the context's, not the device's: the same device as it is allows it.
    if as_it_is().info().concurrent_managed_access {
        Managed::from_slice_coherent(&as_it_is(), &[1u32, 2, 3]).expect("device as it is");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn coherent_memory_follows_its_own_handle_on_a_stream_of_an_emulating_one() {
    let _serial = crate::common::serial();
    // One device, two handles of one primary context: coherent memory made through the handle
    // that sees concurrent access, run on a stream of the emulating handle. Each buffer follows
    // the handle it was allocated with: no host attach, exact results (the device has
    // concurrent access, so this is the coherent path, not a shortcut of the emulated one).
    let real = as_it_is();
    if !real.info().concurrent_managed_access {
        println!("skipped: the device lacks concurrent managed access");
        return;
    }
    let ctx = emulated();
    let x = Managed::from_fn_coherent(&real, 4096, |i| i as f32).expect("alloc");
    let (x, (attaches, host, _)) = calls_of(|| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            add_scalar(s, &mut x, 1.0)?;
            let mut x = x.sync()?.attach(s)?;
            add_scalar(s, &mut x, 1.0)?;
            x.sync()
        })
        .expect("stream work")
    });
    assert_eq!(
        (attaches, host),
        (0, 0),
        "coherent memory makes no attach call"
    );
    let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 2.0);
    assert_eq!(bad, None);
}

/// Two handles of one device, one emulating no concurrent access: each buffer follows its own
/// handle's mode; the results are exact.
#[test]
#[ignore = "needs a CUDA device"]
fn buffers_follow_their_own_handle_beside_an_emulating_one() {
    let _serial = crate::common::serial();
    let real = common::gpu();
    let emu =
        Context::new_with_options(0, ContextOptions::new().emulate_no_concurrent_access(true))
            .expect("emulating handle");
    assert!(real.same_as(&emu));
    if !real.info().concurrent_managed_access {
        return;
    }
    let coherent = Managed::from_slice_coherent(&real, &[1.0f32; 1024]).expect("alloc");
    let unified = Managed::from_slice(&real, &[1.0f32; 1024]).expect("alloc");
    let (coherent, unified) = emu
        .with_stream(StreamOptions::new(), |s| {
            let (mut c, mut u) = (coherent.attach(s)?, unified.attach(s)?);
            testing::add_scalar(s, &mut c, 1.0)?;
            testing::add_scalar(s, &mut u, 1.0)?;
            s.sync_all((c, u))
        })
        .expect("stream work");
    assert!(coherent.iter().all(|v| *v == 2.0) && unified.iter().all(|v| *v == 2.0));
}
