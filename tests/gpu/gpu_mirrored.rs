//! Mirrored memory (`Managed<T, S, Mirror>`) on a real GPU: results against the CPU, which
//! copies are made and which skipped, mirrored and unified buffers in one launch and one
//! `sync_all`, drop with a kernel or a copy in flight, refusals (a mirror is not handed to a
//! stream of another device's context), and faults.
//!
//! One test uses device 1 where the machine has one: `run.sh` runs this binary with every GPU
//! visible (`uses_every_gpu`).
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use common::gpu;
use um::kernels::{ptx, streams};
use um::{Context, Error, LaunchConfig, Managed, MirroredManaged, StreamOptions};
use um_core::mirror_copies_on_this_thread;
use um_test_kernels::testing::{add_scalar, axpy};

/// What `MirrorCopies` counts, as `(to_device, to_device_skipped, to_host, to_host_skipped)`
/// since `before`.
fn copies_since(before: um::storage::MirrorCopies) -> (u64, u64, u64, u64) {
    let d = mirror_copies_on_this_thread().since(before);
    (
        d.to_device,
        d.to_device_skipped,
        d.to_host,
        d.to_host_skipped,
    )
}

#[test]
#[ignore = "needs a CUDA device"]
fn mirrored_results_match_the_cpu() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    common::seed_loop_matches_the_cpu(
        &ctx,
        common::Alloc {
            from_slice: |c, v| Managed::from_slice_mirrored(c, v),
            zeroed: |c, n| Managed::zeroed_slice_mirrored(c, n),
        },
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn copies_are_made_only_when_needed() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = 4096;
    let x = Managed::from_fn_mirrored(&ctx, n, |i| i as f32).expect("alloc x");
    let y = MirroredManaged::<[f32]>::zeroed_slice_mirrored(&ctx, n).expect("alloc y");
    let before = mirror_copies_on_this_thread();
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            // A fresh allocation is host-written: both attaches copied.
            assert_eq!(copies_since(before), (2, 0, 0, 0));
            axpy(s, &x, &mut y, 2.0)?;
            s.sync_all((x, y))
        })
        .expect("first round");
    // x was only read by the kernel: no copy back. y was written: copied back.
    assert_eq!(copies_since(before), (2, 0, 1, 1));
    assert!((0..n).all(|i| y[i] == 2.0 * i as f32));

    // The host only reads y between kernels: y never goes to the device again.
    let rounds = 10;
    let before = mirror_copies_on_this_thread();
    let mut y = y;
    let mut x = x;
    let mut sum = 0.0f64;
    for r in 0..rounds {
        let (x2, y2) = ctx
            .with_stream(StreamOptions::new(), |s| {
                let (x, mut y) = (x.attach(s)?, y.attach(s)?);
                axpy(s, &x, &mut y, 1.0)?;
                s.sync_all((x, y))
            })
            .expect("round");
        (x, y) = (x2, y2);
        sum += f64::from(y[n - 1]); // a read: Deref, not DerefMut
        assert_eq!(y[5], 5.0 * (3 + r) as f32, "round {r}");
    }
    // No host write: every attach skipped its copy; every sync copied y back and skipped x.
    assert_eq!(
        copies_since(before),
        (0, 2 * rounds, rounds, rounds),
        "sum {sum}"
    );

    // A host write (IndexMut) makes the next attach copy, and only that buffer's.
    let before = mirror_copies_on_this_thread();
    y[0] = -1.0;
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, y) = (x.attach(s)?, y.attach(s)?);
            s.sync_all((x, y))
        })
        .expect("attach after a write");
    // No launch at all: neither sync copies back.
    assert_eq!(copies_since(before), (1, 1, 0, 2));
    assert_eq!(y[0], -1.0);
    // The device half got the write: a kernel reading it sees -1.
    let mut z = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("alloc z");
    z = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (y, mut z) = (y.attach(s)?, z.attach(s)?);
            axpy(s, &y, &mut z, 1.0)?;
            let (_y, z) = s.sync_all((y, z))?;
            Ok(z)
        })
        .expect("read back");
    assert_eq!(z[0], -1.0);
    drop(x);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_large_input_the_kernel_only_reads_is_copied_once() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = common::workload(1 << 22, 1 << 12);
    let input = Managed::from_fn_mirrored(&ctx, n, |i| (i % 7) as f32).expect("alloc input");
    let out = MirroredManaged::<[f32]>::zeroed_slice_mirrored(&ctx, n).expect("alloc out");
    let before = mirror_copies_on_this_thread();
    let rounds = 8u64;
    let (input, out) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut input, mut out) = (input, out);
            for _ in 0..rounds {
                let (i, mut o) = (input.attach(s)?, out.attach(s)?);
                axpy(s, &i, &mut o, 1.0)?;
                let (i, mut o) = s.sync_all((i, o))?;
                o[1] += 0.0; // the host writes the output (a DerefMut), never the input
                (input, out) = (i, o);
            }
            Ok((input, out))
        })
        .expect("rounds");
    let (to_d, to_d_skipped, to_h, to_h_skipped) = copies_since(before);
    // input: copied once (fresh), then skipped; never copied back.
    // out: copied every round (fresh, then host-written), copied back every round.
    assert_eq!(to_d, 1 + rounds);
    assert_eq!(to_d_skipped, rounds - 1);
    assert_eq!(to_h, rounds);
    assert_eq!(to_h_skipped, rounds);
    assert!((0..n).all(|i| out[i] == rounds as f32 * (i % 7) as f32));
    assert!((0..n).all(|i| input[i] == (i % 7) as f32));
}

#[test]
#[ignore = "needs a CUDA device"]
fn mirrored_and_unified_buffers_share_a_launch_and_a_sync_all() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = 10_000;
    let xm = Managed::from_fn_mirrored(&ctx, n, |i| i as f32).expect("alloc");
    let yu = Managed::from_fn(&ctx, n, |_| 1.0f32).expect("alloc");
    let xu = Managed::from_fn(&ctx, n, |i| (2 * i) as f32).expect("alloc");
    let ym = Managed::from_fn_mirrored(&ctx, n, |_| 3.0f32).expect("alloc");
    let (xm, yu, xu, ym) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (xm, mut yu) = (xm.attach(s)?, yu.attach(s)?);
            let (xu, mut ym) = (xu.attach(s)?, ym.attach(s)?);
            axpy(s, &xm, &mut yu, 2.0)?; // mirrored read, unified written
            axpy(s, &xu, &mut ym, 0.5)?; // unified read, mirrored written
            axpy(s, &xm, &mut ym, 1.0)?; // both mirrored
            s.sync_all((xm, yu, xu, ym))
        })
        .expect("stream work");
    for i in 0..n {
        let f = i as f32;
        assert_eq!(yu[i], 2.0 * f + 1.0, "yu[{i}]");
        assert_eq!(ym[i], 0.5 * 2.0 * f + 3.0 + f, "ym[{i}]");
        assert_eq!(xm[i], f);
        assert_eq!(xu[i], 2.0 * f);
    }
    // A Vec group of mirrors, on a stream set, with the run-time owner check.
    let parts: Vec<MirroredManaged<[f32]>> = (0..3)
        .map(|k| Managed::from_fn_mirrored(&ctx, 64, move |_| k as f32))
        .collect::<um::Result<_>>()
        .expect("alloc parts");
    let parts = ctx
        .with_stream_set(3, StreamOptions::new(), |s| {
            let mut owned = Vec::new();
            for (p, st) in parts.into_iter().zip(s) {
                owned.push(p.attach(st)?);
            }
            let err = add_scalar(&s[1], &mut owned[0], 1.0).expect_err("another stream's");
            assert!(
                matches!(err, Error::StreamMismatch { argument: 0 }),
                "{err}"
            );
            let mut back = Vec::new();
            for (k, (mut p, st)) in owned.into_iter().zip(s).enumerate() {
                add_scalar(st, &mut p, 10.0 * k as f32)?;
                back.extend(st.sync_all(vec![p])?);
            }
            Ok(back)
        })
        .expect("stream set");
    for (k, p) in parts.iter().enumerate() {
        assert!(p.iter().all(|v| *v == 11.0 * k as f32), "part {k}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn mirrored_memory_on_the_legacy_and_per_thread_streams() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let a = Managed::from_fn_mirrored(&ctx, 1000, |i| i as f32).expect("alloc");
    let a = ctx
        .with_legacy_stream(|legacy| {
            let mut a = a.attach_global(legacy)?;
            add_scalar(legacy, &mut a, 1.0)?;
            a.sync()
        })
        .expect("legacy");
    let a = ctx
        .with_per_thread_stream(|pts| {
            let mut a = a.attach(pts)?;
            add_scalar(pts, &mut a, 1.0)?;
            a.sync()
        })
        .expect("per-thread");
    assert!((0..1000).all(|i| a[i] == i as f32 + 2.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn copy_counts_are_per_thread() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let ctx = &ctx;
                scope.spawn(move || -> um::Result<(u64, u64, u64, u64)> {
                    let before = mirror_copies_on_this_thread();
                    let x = Managed::from_fn_mirrored(ctx, 1 << 16, |_| t as f32)?;
                    let x = ctx.with_stream(StreamOptions::new(), |s| {
                        let mut x = x.attach(s)?;
                        for _ in 0..=t {
                            add_scalar(s, &mut x, 1.0)?;
                        }
                        x.sync()
                    })?;
                    assert!(x.iter().all(|v| *v == 2.0 * t as f32 + 1.0));
                    Ok(copies_since(before))
                })
            })
            .collect();
        for h in handles {
            let counts = h.join().expect("thread").expect("thread's work");
            assert_eq!(counts, (1, 0, 1, 0));
        }
    });
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_mirrored_memory_with_a_kernel_or_copy_in_flight_waits_for_it() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let kernel = ctx
        .load_ptx(ptx::STREAMS_PTX)
        .and_then(|m| m.kernel("kernel"))
        .expect("load");
    let n = common::workload(1 << 22, 1 << 14);
    ctx.with_stream(StreamOptions::new(), |s| {
        for _ in 0..3 {
            let mut x = MirroredManaged::<[f32]>::zeroed_slice_mirrored(&ctx, n)?.attach(s)?;
            // One block of 64 threads over 4M elements of pow/sqrt: milliseconds of work.
            // SAFETY: kernel(float *x, int n) writes x[0..n) (grid-stride); x holds n floats.
            unsafe { s.launch(&kernel, LaunchConfig::grid_1d(1, 64), (&mut x, n as i32)) }?;
            drop(x); // waits for the stream, then frees both halves
            // A copy in flight: a fresh buffer's attach enqueues 16 MiB host-to-device.
            let y = MirroredManaged::<[f32]>::zeroed_slice_mirrored(&ctx, n)?.attach(s)?;
            drop(y);
        }
        s.wait_idle()
    })
    .expect("no fault: nothing was freed under a running kernel or copy");
    let probe = Managed::from_fn_mirrored(&ctx, 8, |_| 1.0f32).expect("alloc after");
    let probe = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut p = probe.attach(s)?;
            streams::kernel(s, &mut p)?;
            p.sync()
        })
        .expect("context still usable");
    assert!(um_test_kernels::reference::matches_streams_kernel(&probe));
}

#[test]
#[ignore = "needs a CUDA device"]
fn mirrored_requests_are_refused_clearly() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let err = MirroredManaged::<[f32]>::zeroed_slice_mirrored(&ctx, 0).expect_err("empty");
    assert!(matches!(err, Error::ZeroSized { .. }), "{err}");
    let err = MirroredManaged::<[u64]>::zeroed_slice_mirrored(&ctx, usize::MAX / 4)
        .expect_err("overflow");
    assert!(matches!(err, Error::SizeOverflow { .. }), "{err}");
    // The device half is guarded like managed memory: refused before any allocation, so
    // nothing is left to leak.
    let (free, _) = ctx.mem_info().expect("mem info");
    let err = MirroredManaged::<[u8]>::zeroed_slice_mirrored(&ctx, free + (1 << 30))
        .expect_err("too big");
    assert!(matches!(err, Error::WouldOversubscribe { .. }), "{err}");
    // And the footprint of a mirror is both halves.
    let m = MirroredManaged::<[f32]>::zeroed_slice_mirrored(&ctx, 1024).expect("alloc");
    let u = Managed::<[f32]>::zeroed_slice(&ctx, 1024).expect("alloc");
    assert_eq!((m.size_in_bytes(), m.footprint_in_bytes()), (4096, 8192));
    assert_eq!((u.size_in_bytes(), u.footprint_in_bytes()), (4096, 4096));
}

/// A trap in a kernel that writes a mirror: `sync` returns the fault (from the copy back, or
/// from the wait after it), every later call fails, and no drop panics. Runs in a child process
/// (see tests/gpu_faults.rs), since a fault poisons the context for good.
#[test]
#[ignore = "needs a CUDA device"]
fn fault_in_a_kernel_writing_a_mirror_is_reported_and_sticky() {
    let _serial = crate::common::serial();
    if !common::is_fault_child() {
        let text =
            common::run_in_child("fault_in_a_kernel_writing_a_mirror_is_reported_and_sticky");
        assert!(text.contains("fault reported: cu"), "{text}");
        return;
    }
    let ctx = gpu();
    let k = ctx
        .load_ptx(common::TRAP_PTX)
        .and_then(|m| m.kernel("trap_kernel"))
        .expect("load");
    let x = Managed::from_slice_mirrored(&ctx, &vec![0.0f32; 1 << 16]).expect("alloc");
    let keep = Managed::from_slice_mirrored(&ctx, &[1.0f32; 16]).expect("alloc");
    let err = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            // SAFETY: none; this launch breaks the contract on purpose, in a child process.
            unsafe { s.launch(&k, LaunchConfig::grid_1d(1, 1), (&mut x,)) }?;
            x.sync().map(drop) // the copy back or the wait reports the fault
        })
        .expect_err("the fault is reported");
    println!("fault reported: {err}");
    assert!(
        matches!(&err, Error::Driver { name, .. } if name.starts_with("CUDA_ERROR_")),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("cuStreamSynchronize")
            || err.to_string().contains("cuMemcpyDtoHAsync"),
        "names the call: {err}"
    );
    // Sticky: a mirror allocation, an attach (its copy) and a wait all fail, with an Err.
    let e = Managed::from_slice_mirrored(&ctx, &[1.0f32]).expect_err("alloc after a fault");
    println!("after the fault, allocate: {e}");
    let e = ctx
        .with_stream(StreamOptions::new(), |s| keep.attach(s)?.sync().map(drop))
        .expect_err("attach after a fault");
    println!("after the fault, attach and sync: {e}");
    assert!(matches!(e, Error::Driver { .. }), "{e:?}");
    drop(ctx);
    println!("every drop returned");
}

/// A panicking `from_fn` leaks its allocation and never reads it; a mirror is not handed to another
/// context (two GPUs only).
#[test]
#[ignore = "needs a CUDA device"]
fn a_panicking_constructor_leaks_its_allocation_and_a_mirror_stays_home() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let r = std::panic::catch_unwind(|| {
        Managed::from_fn(&ctx, 16, |i| {
            if i == 8 {
                panic!("in from_fn")
            } else {
                i as f32
            }
        })
    });
    assert!(r.is_err());
    if let Ok(ctx1) = Context::new(1) {
        let mirror = Managed::from_slice_mirrored(&ctx, &[1.0f32; 256]).expect("alloc");
        let got = ctx.with_stream(StreamOptions::new(), |a| {
            let m = mirror.attach(a)?;
            ctx1.with_stream(StreamOptions::new(), |b| m.hand_off(b)?.sync().map(drop))
        });
        assert_eq!(got, Err(Error::ContextMismatch));
    }
}
