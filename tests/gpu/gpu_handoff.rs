//! `hand_off`: memory moves from the stream that owns it to another one without a host wait,
//! and the receiving stream's kernels see everything the first stream's kernels wrote, also
//! from an inner scope to an outer one whose stream outlives it, and between nested
//! per-thread scopes; a panic with kernels in flight on two streams frees nothing in use.
//!
//! Stream A runs `spin_then_add`, which takes at least `SPIN_NS` of GPU time before it writes.
//! Were the receiving stream not ordered after A, it would read the buffer before that write.
//! No assertion depends on timing: where the host clock is read, the assertion is one that
//! must hold ("if less than `SPIN_NS` has passed since the launch, A is still busy").
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use std::time::{Duration, Instant};

use common::gpu;
use um::{Error, Managed, StreamOptions, Transfer};
use um_test_kernels::testing::{self, add_scalar, axpy, spin_then_add};

/// GPU time `spin_then_add` takes at least.
const SPIN_NS: u64 = 50_000_000;

fn n() -> usize {
    common::workload(1 << 20, 1 << 12)
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_to_b_to_host_without_a_host_wait() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, n(), |i| i as f32).expect("alloc x");
    let y = Managed::<[f32]>::zeroed_slice(&ctx, n()).expect("alloc y");
    let (x, y) = ctx
        .with_stream(StreamOptions::new().non_blocking(), |a| {
            ctx.with_stream(StreamOptions::new().non_blocking(), |b| {
                let mut x = x.attach(a)?;
                let mut y = y.attach(b)?;
                let launched = Instant::now();
                spin_then_add(a, &mut x, 1.0, SPIN_NS)?; // x = i + 1, after SPIN_NS
                let attaches = um_core::attach_calls_on_this_thread();
                let mut x = x.hand_off(b)?;
                assert_eq!(
                    um_core::attach_calls_on_this_thread() - attaches,
                    1,
                    "a handoff is one attach, on B"
                );
                let (a_idle, b_idle) = (a.is_idle()?, b.is_idle()?);
                let elapsed = launched.elapsed();
                // What must hold: before SPIN_NS has passed since the launch, A's kernel cannot
                // be done, and B (which waits for it) cannot be either. So the handoff did not
                // wait for A.
                if elapsed < Duration::from_nanos(SPIN_NS) {
                    assert!(!a_idle, "A idle {elapsed:?} after a {SPIN_NS} ns kernel");
                    assert!(!b_idle, "B waits for A's kernel, yet it is idle");
                } else {
                    println!("handoff returned after {elapsed:?}: no idleness checked");
                }
                axpy(b, &x, &mut y, 1.0)?; // y = x, read on B after A's write
                add_scalar(b, &mut x, 2.0)?; // x = i + 3
                b.sync_all((x, y))
            })
        })
        .expect("A -> B -> host");
    let bad_y = y.iter().enumerate().find(|(i, v)| **v != *i as f32 + 1.0);
    assert_eq!(bad_y, None, "B read x before A's write reached it");
    let bad_x = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 3.0);
    assert_eq!(bad_x, None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn each_stream_makes_its_event_once() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, n(), |_| 0.0f32).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                let events = um_core::events_created_on_this_thread();
                let attaches = um_core::attach_calls_on_this_thread();
                let mut x = x.attach(a)?;
                for _ in 0..3 {
                    spin_then_add(a, &mut x, 1.0, 1_000_000)?;
                    let mut on_b = x.hand_off(b)?;
                    add_scalar(b, &mut on_b, 1.0)?;
                    x = on_b.hand_off(a)?;
                }
                // A's event and B's event, each made on first use and reused twice.
                assert_eq!(um_core::events_created_on_this_thread() - events, 2);
                // One attach, then one per handoff.
                assert_eq!(um_core::attach_calls_on_this_thread() - attaches, 1 + 6);
                x.sync()
            })
        })
        .expect("three round trips");
    assert!(x.iter().all(|v| *v == 6.0), "{:?}", &x[..4]);
}

#[test]
#[ignore = "needs a CUDA device"]
fn per_thread_stream_to_owned_and_back() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, n(), |i| i as f32).expect("alloc");
    let x = ctx
        .with_per_thread_stream(|pts| {
            ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
                let mut x = x.attach(pts)?;
                spin_then_add(pts, &mut x, 1.0, SPIN_NS)?;
                let mut x = x.hand_off(s)?;
                add_scalar(s, &mut x, 2.0)?;
                let mut x = x.hand_off(pts)?;
                add_scalar(pts, &mut x, 4.0)?;
                x.sync()
            })
        })
        .expect("per-thread -> owned -> per-thread");
    let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 7.0);
    assert_eq!(bad, None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn memory_of_the_legacy_stream_is_handed_to_a_non_blocking_stream() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, n(), |i| i as f32).expect("alloc x");
    let y = Managed::<[f32]>::zeroed_slice(&ctx, n()).expect("alloc y");
    let y = ctx
        .with_legacy_stream(|legacy| {
            // Non-blocking: no implicit order with the legacy stream, only the handoff's event.
            ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
                let mut x = x.attach_global(legacy)?;
                spin_then_add(legacy, &mut x, 1.0, SPIN_NS)?;
                let x = x.hand_off(s)?;
                let mut y = y.attach(s)?;
                axpy(s, &x, &mut y, 1.0)?;
                drop(x);
                y.sync()
            })
        })
        .expect("legacy -> owned");
    let bad = y.iter().enumerate().find(|(i, v)| **v != *i as f32 + 1.0);
    assert_eq!(
        bad, None,
        "the created stream read before the legacy kernel wrote"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn within_a_stream_set_the_new_owner_is_checked_at_run_time() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, n(), |i| i as f32).expect("alloc");
    let x = ctx
        .with_stream_set(2, StreamOptions::new().non_blocking(), |s| {
            let mut x = x.attach(&s[0])?;
            spin_then_add(&s[0], &mut x, 1.0, SPIN_NS)?;
            let mut x = x.hand_off(&s[1])?;
            // One brand for the set: this compiles, and is refused at run time.
            let err = add_scalar(&s[0], &mut x, 1.0).expect_err("s[0] no longer owns it");
            assert!(
                matches!(err, Error::StreamMismatch { argument: 0 }),
                "{err}"
            );
            add_scalar(&s[1], &mut x, 2.0)?;
            // To the stream that owns it already: nothing to do, no driver call.
            let attaches = um_core::attach_calls_on_this_thread();
            let x = x.hand_off(&s[1])?;
            assert_eq!(um_core::attach_calls_on_this_thread(), attaches);
            // A wait on s[0] does not cover it any more.
            let err = s[0].sync_all((x,)).map(drop).expect_err("s[1] owns it");
            assert!(
                matches!(err, Error::StreamMismatch { argument: 0 }),
                "{err}"
            );
            Ok(())
        })
        .map(|()| Managed::from_fn(&ctx, n(), |i| i as f32 + 3.0));
    // The refused group was dropped (its drop waited for s[1]); the context is healthy.
    assert!(x.expect("set").is_ok());
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_set_hands_off_and_syncs_on_the_new_owner() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, n(), |i| i as f32).expect("alloc");
    let x = ctx
        .with_stream_set(3, StreamOptions::new().non_blocking(), |s| {
            let mut x = x.attach(&s[0])?;
            spin_then_add(&s[0], &mut x, 1.0, SPIN_NS)?;
            let mut x = x.hand_off(&s[1])?;
            spin_then_add(&s[1], &mut x, 2.0, 1_000_000)?;
            let mut x = x.hand_off(&s[2])?;
            add_scalar(&s[2], &mut x, 4.0)?;
            s[2].sync_all((x,)).map(|(x,)| x)
        })
        .expect("s0 -> s1 -> s2 -> host");
    let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 7.0);
    assert_eq!(bad, None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_receiving_streams_transfer_policy_applies() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    for transfer in [
        Transfer::OnDemand,
        Transfer::Prefetch,
        Transfer::HostResident,
    ] {
        let x = Managed::from_fn(&ctx, n(), |i| i as f32).expect("alloc");
        let x = ctx
            .with_stream(StreamOptions::new().transfer(Transfer::HostResident), |a| {
                ctx.with_stream(StreamOptions::new().transfer(transfer), |b| {
                    let mut x = x.attach(a)?;
                    spin_then_add(a, &mut x, 1.0, 1_000_000)?;
                    let mut x = x.hand_off(b)?;
                    add_scalar(b, &mut x, 2.0)?;
                    let mut x = x.hand_off(a)?;
                    add_scalar(a, &mut x, 4.0)?;
                    x.sync()
                })
            })
            .expect("policies at handoffs");
        let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 7.0);
        assert_eq!(bad, None, "{transfer:?}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_handed_off_memory_in_flight_waits_for_both_streams() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    ctx.with_stream(StreamOptions::new().non_blocking(), |a| {
        ctx.with_stream(StreamOptions::new().non_blocking(), |b| {
            for _ in 0..3 {
                let mut x = Managed::<[f32]>::zeroed_slice(&ctx, n())?.attach(a)?;
                spin_then_add(a, &mut x, 1.0, SPIN_NS)?;
                let mut x = x.hand_off(b)?;
                add_scalar(b, &mut x, 1.0)?;
                drop(x); // waits for B, which waits for A's kernel: then frees
                // Nothing else was queued on A, and B's wait covered A's kernel.
                assert!(a.is_idle()?, "the drop returned before A's kernel ended");
                assert!(b.is_idle()?);
            }
            Ok(())
        })
    })
    .expect("no fault: nothing freed under a running kernel");
    // Nothing was freed under a running kernel: the context still runs work.
    common::assert_context_usable(&ctx);
}

#[test]
#[ignore = "needs a CUDA device"]
fn memory_handed_to_an_outer_stream_outlives_the_inner_one() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, n(), |i| i as f32).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new().non_blocking(), |outer| {
            // A is destroyed at the end of its closure while its kernel may still run; the
            // memory, now B's, leaves A's scope (it carries B's brand, not A's).
            let mut x = ctx.with_stream(StreamOptions::new().non_blocking(), |a| {
                let mut x = x.attach(a)?;
                spin_then_add(a, &mut x, 1.0, SPIN_NS)?;
                x.hand_off(outer)
            })?;
            add_scalar(outer, &mut x, 2.0)?;
            x.sync()
        })
        .expect("inner -> outer");
    let bad = x.iter().enumerate().find(|(i, v)| **v != *i as f32 + 3.0);
    assert_eq!(bad, None);
}

/// On one GPU: two `Context` handles of one device see the same per-thread stream under two ids (a
/// stream's id is drawn per thread and per handle). A handoff between them is then a real one (an
/// event and an attach on the same driver stream, which costs nothing in correctness), never the
/// shortcut that skips the event; the result is exact.
#[test]
#[ignore = "needs a CUDA device"]
fn per_thread_streams_of_two_handles_are_told_apart_and_stay_ordered() {
    let _serial = crate::common::serial();
    let a = gpu();
    let b = gpu();
    assert!(a.same_as(&b), "one device, one primary context");
    let data = Managed::from_slice(&a, &vec![0.0f32; 1 << 16]).expect("alloc");
    let events = um_core::events_created_on_this_thread();
    let host = a
        .with_per_thread_stream(|p0| {
            b.with_per_thread_stream(|p1| {
                let mut d = data.attach(p0)?;
                spin_then_add(p0, &mut d, 1.0, 50_000_000)?;
                let mut d = d.hand_off(p1)?;
                add_scalar(p1, &mut d, 1.0)?;
                d.sync()
            })
        })
        .expect("hand_off between the per-thread streams of two handles");
    assert!(
        um_core::events_created_on_this_thread() > events,
        "an event ordered them"
    );
    assert!(host.iter().all(|v| *v == 2.0));
}

/// A kernel's time on the GPU: long outside the sanitizer, short under it.
fn spin_ns(full_ms: u64) -> u64 {
    if std::env::var_os("UM_SANITIZE").is_some() {
        5_000_000
    } else {
        full_ms * 1_000_000
    }
}

/// `hand_off` from an inner stream to an outer one whose scope outlives it (the inner stream and
/// its event are destroyed with the kernel still running); a panic with kernels in flight on two
/// streams; nested per-thread scopes (one stream, two brands).
#[test]
#[ignore = "needs a CUDA device"]
fn handoffs_across_scopes_and_panics_with_kernels_in_flight() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let data = Managed::from_slice(&ctx, &[0.0f32; 1 << 16]).expect("alloc");
    let data = ctx
        .with_stream(StreamOptions::new().non_blocking(), |outer| {
            let d = ctx.with_stream(StreamOptions::new().non_blocking(), |inner| {
                let mut d = data.attach(inner)?;
                testing::spin_then_add(inner, &mut d, 1.0, spin_ns(100))?;
                d.hand_off(outer)
            })?;
            d.sync()
        })
        .expect("stream work");
    assert!(data.iter().all(|v| *v == 1.0));

    let (a, b) = (
        Managed::from_slice(&ctx, &[0.0f32; 1024]).expect("alloc"),
        Managed::from_slice(&ctx, &[0.0f32; 1024]).expect("alloc"),
    );
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = ctx.with_stream(StreamOptions::new(), |s1| {
            let mut a = a.attach(s1)?;
            testing::spin_then_add(s1, &mut a, 1.0, spin_ns(50))?;
            ctx.with_stream(StreamOptions::new(), |s2| -> um::Result<()> {
                let mut b = b.attach(s2)?;
                testing::spin_then_add(s2, &mut b, 1.0, spin_ns(50))?;
                panic!("unwind with two kernels in flight")
            })
        });
    }));
    assert!(unwound.is_err());
    ctx.wait_idle()
        .expect("the context is usable after the unwind");

    let p = Managed::from_slice(&ctx, &[0.0f32; 64]).expect("alloc");
    let p = ctx
        .with_per_thread_stream(|outer| {
            let mut p = p.attach(outer)?;
            testing::add_scalar(outer, &mut p, 1.0)?;
            ctx.with_per_thread_stream(|inner| {
                let mut p = p.hand_off(inner)?;
                testing::add_scalar(inner, &mut p, 1.0)?;
                p.sync()
            })
        })
        .expect("stream work");
    assert!(p.iter().all(|v| *v == 2.0));
}
