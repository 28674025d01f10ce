//! Memory that an aborted stream may still touch is never freed nor given to the CPU: a
//! poisoned stream (the abort of a library call, here a `Poisoner`, as a communicator's abort
//! does) refuses work, its buffers are leaked at drop, and a buffer handed off from it keeps its
//! mark until it is host-owned again, also when the poison comes during the new owner's wait.
//! A capture that waited for an idle section checks its stream's mark again after the wait.
//! Clean memory that left such a stream through the host comes back, and the marks go with the
//! memory that kept them.
//!
//! Every test here that poisons a stream leaks by design, so its name holds `leaks_`: under
//! memcheck, `run.sh` checks those tests for errors without counting leaks, and the rest with
//! leak checking (`docs/reliability.md`).
#![allow(clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{device_for_captures, gpu, serial};
use um::{Context, Error, Managed, Poisoner, Stream, StreamOptions};
use um_test_kernels::testing::{self, spin_then_add};

#[test]
#[ignore = "needs a CUDA device"]
fn a_poisoned_stream_leaks_its_memory_and_refuses_work() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = 4 << 20;
    ctx.wait_idle().expect("idle");
    let (free_before, _) = ctx.mem_info().expect("free memory");
    let unified = Managed::from_fn(&ctx, n, |_| 1.0f32).expect("alloc");
    let mirrored = Managed::from_fn_mirrored(&ctx, n, |_| 1.0f32).expect("alloc");
    let fresh = Managed::from_fn(&ctx, 16, |_| 0.0f32).expect("alloc");
    let handle = ctx
        .with_stream(StreamOptions::new(), |s| {
            ctx.with_stream(StreamOptions::new(), |other| {
                let (mut u, m) = (unified.attach(s)?, mirrored.attach(s)?);
                testing::add_scalar(s, &mut u, 1.0)?;
                let p = s.poisoner();
                assert!(!p.is_poisoned() && p.is_live());
                // What an aborted library call does: mark the stream before giving up on it.
                p.poison();
                assert!(s.is_poisoned() && p.is_poisoned());
                assert_eq!(
                    testing::add_scalar(s, &mut u, 1.0),
                    Err(Error::StreamPoisoned)
                );
                assert!(matches!(fresh.attach(s), Err(Error::StreamPoisoned)));
                assert!(matches!(m.hand_off(other), Err(Error::StreamPoisoned)));
                assert!(matches!(u.sync(), Err(Error::StreamPoisoned)));
                // Another stream is not poisoned.
                assert!(!other.is_poisoned());
                Ok(p)
            })
        })
        .expect("stream work");
    // Nothing holds the mark any more: the stream is gone, its memory leaked.
    assert!(!handle.is_live() && !handle.is_poisoned());
    ctx.wait_idle().expect("the context still works");
    common::assert_context_usable(&ctx);
    if common::counts_free_memory() {
        let (free_after, _) = ctx.mem_info().expect("free memory");
        // The mirror's device half (16 MiB of cuMemAlloc) was leaked, not freed.
        assert!(
            free_after + n * 4 <= free_before + (2 << 20),
            "the poisoned buffers were freed: {free_before} -> {free_after}"
        );
    }
}

/// Memory handed off from a stream that is poisoned only
/// afterwards (an abort of work queued there before the handoff) is refused to the CPU by
/// `sync`, `sync_all` and a sync future of the new owner, and leaked by its drop (unified and
/// mirrored storage); memory handed off from a stream that stays clean comes back, and the marks it kept
/// are forgotten once it is host-owned again.
#[test]
#[ignore = "needs a CUDA device"]
fn memory_handed_off_from_a_stream_poisoned_later_leaks_and_is_not_given_back() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = 1 << 20;
    ctx.wait_idle().expect("idle");
    // Before the allocations, as in the test below: what leaks is missing afterwards.
    let (free_before, _) = ctx.mem_info().expect("free memory");
    let unified = Managed::from_fn(&ctx, n, |_| 1.0f32).expect("alloc");
    let mirrored = Managed::from_fn_mirrored(&ctx, n, |_| 1.0f32).expect("alloc");
    let third = Managed::from_fn(&ctx, n, |_| 1.0f32).expect("alloc");
    let fourth = Managed::from_fn(&ctx, n, |_| 1.0f32).expect("alloc");
    let fifth = Managed::from_fn(&ctx, n, |_| 1.0f32).expect("alloc");
    let clean = Managed::from_fn(&ctx, 16, |_| 2.0f32).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            ctx.with_stream(StreamOptions::new(), |c| {
                let mut u = unified.attach(a)?;
                testing::add_scalar(a, &mut u, 1.0)?;
                let u = u.hand_off(b)?;
                let m = mirrored.attach(a)?.hand_off(b)?;
                let h = third.attach(a)?.hand_off(b)?;
                // A chain: a -> c -> b keeps a's mark too.
                let f = fourth.attach(a)?.hand_off(c)?.hand_off(b)?;
                let v = fifth.attach(a)?.hand_off(b)?;
                // The clean one goes a -> c -> host -> b: its marks are forgotten on the way.
                let k = clean.attach(a)?.hand_off(c)?.sync()?.attach(b)?;
                // The abort of a's work comes after the handoffs.
                a.poisoner().poison();
                assert!(!b.is_poisoned() && !c.is_poisoned());
                assert!(matches!(u.sync(), Err(Error::StreamPoisoned)));
                assert!(matches!(m.sync(), Err(Error::StreamPoisoned)));
                assert!(matches!(b.sync_all((h, f)), Err(Error::StreamPoisoned)));
                let fut = v.sync_async();
                assert!(matches!(
                    pollster::block_on(fut),
                    Err(Error::StreamPoisoned)
                ));
                let k = k
                    .sync()
                    .expect("memory that left the poisoned stream through the host");
                assert!(k.iter().all(|x| *x == 2.0));
                Ok(())
            })
        })
    })
    .expect("stream work");
    ctx.wait_idle().expect("the context still works");
    if common::counts_free_memory() {
        let (free_after, _) = ctx.mem_info().expect("free memory");
        // At least the mirror's device half (4 MiB of cuMemAlloc) was leaked, not freed.
        assert!(
            free_after + n * 4 <= free_before + (2 << 20),
            "memory handed off from the poisoned stream was freed: {free_before} -> {free_after}"
        );
    }
}

/// How long the first stream spins: the second stream's wait lasts at least this long.
const SPIN_NS: u64 = 600_000_000;
/// When the other thread poisons the first stream: well inside the spin.
const POISON_AFTER: Duration = Duration::from_millis(150);

/// A buffer of `n` ones, spun on on `a`, handed off to `b`: `b`'s wait lasts the spin.
macro_rules! handed_during_spin {
    ($ctx:expr, $a:expr, $b:expr, $n:expr) => {{
        let mut x = Managed::from_fn($ctx, $n, |_| 1.0f32)?.attach($a)?;
        spin_then_add($a, &mut x, 1.0, SPIN_NS)?;
        x.hand_off($b)?
    }};
}

/// Poisons `a` from another thread after [`POISON_AFTER`]: the abort of a's work, while the
/// new owner waits.
fn poison_later(p: um::Poisoner) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        thread::sleep(POISON_AFTER);
        p.poison();
    })
}

/// Two streams `a` and `b` of one context: `act` hands buffers off from `a` to `b` while `a`
/// spins, calls its last argument (which has another thread poison `a` after
/// [`POISON_AFTER`]) and waits on `b`, and returns what the wait said (`Ok`: the CPU got the
/// memory). Checks that the wait outlasted the poison, that only `a` is poisoned, and that the
/// wait (`what`) refused the memory.
fn refused_when_poisoned_during_the_wait<F>(what: &str, act: F)
where
    F: for<'a, 'b> FnOnce(
        &Context,
        &Stream<'a>,
        &Stream<'b>,
        &mut dyn FnMut(),
    ) -> um::Result<Result<(), Error>>,
{
    let _serial = serial();
    let ctx = gpu();
    let out = ctx
        .with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                let (mut started, mut poisoner) = (None, None);
                let out = act(&ctx, a, b, &mut || {
                    started = Some(Instant::now());
                    poisoner = Some(poison_later(a.poisoner()));
                })?;
                let (Some(started), Some(poisoner)) = (started, poisoner) else {
                    panic!("the test never started the poisoner");
                };
                poisoner.join().expect("poisoner thread");
                assert!(
                    started.elapsed() > POISON_AFTER,
                    "the wait ended before the poison: the test proves nothing"
                );
                assert!(a.is_poisoned() && !b.is_poisoned());
                Ok(out)
            })
        })
        .expect("stream work");
    ctx.wait_idle().expect("the context still works");
    assert!(
        matches!(out, Err(Error::StreamPoisoned)),
        "{what} gave the CPU memory that a's aborted work may still write: {out:?}"
    );
}

/// `sync_all` of a tuple, the first stream poisoned during the wait: refused, and leaked.
#[test]
#[ignore = "needs a CUDA device"]
fn sync_all_of_a_tuple_refuses_and_leaks_memory_whose_former_owner_was_poisoned_during_the_wait() {
    let _serial = crate::common::serial();
    refused_when_poisoned_during_the_wait("sync_all of a tuple", |ctx, a, b, poison_soon| {
        let x = handed_during_spin!(ctx, a, b, 1 << 16);
        let y = handed_during_spin!(ctx, a, b, 1 << 16);
        poison_soon();
        Ok(b.sync_all((x, y)).map(drop))
    });
}

/// `sync_all` of a `Vec`, likewise.
#[test]
#[ignore = "needs a CUDA device"]
fn sync_all_of_a_vec_refuses_and_leaks_memory_whose_former_owner_was_poisoned_during_the_wait() {
    let _serial = crate::common::serial();
    refused_when_poisoned_during_the_wait("sync_all of a Vec", |ctx, a, b, poison_soon| {
        let v = vec![
            handed_during_spin!(ctx, a, b, 1 << 16),
            handed_during_spin!(ctx, a, b, 1 << 16),
        ];
        poison_soon();
        Ok(b.sync_all(v).map(drop))
    });
}

/// `sync` re-checks the buffer's marks after its wait.
#[test]
#[ignore = "needs a CUDA device"]
fn sync_refuses_and_leaks_memory_whose_former_owner_was_poisoned_during_the_wait() {
    let _serial = crate::common::serial();
    refused_when_poisoned_during_the_wait("sync", |ctx, a, b, poison_soon| {
        let x = handed_during_spin!(ctx, a, b, 1 << 16);
        poison_soon();
        Ok(x.sync().map(drop))
    });
}

/// A sync future re-checks every buffer's marks once the stream passed.
#[test]
#[ignore = "needs a CUDA device"]
fn a_sync_future_refuses_and_leaks_memory_whose_former_owner_was_poisoned_during_the_wait() {
    let _serial = crate::common::serial();
    refused_when_poisoned_during_the_wait("a sync future", |ctx, a, b, poison_soon| {
        let x = handed_during_spin!(ctx, a, b, 1 << 16);
        let y = handed_during_spin!(ctx, a, b, 1 << 16);
        poison_soon();
        Ok(pollster::block_on(b.sync_all_async((x, y))).map(drop))
    });
}

/// Waits (bounded) until the reaper holds no orphan.
fn reaper_drained() {
    let deadline = Instant::now() + Duration::from_secs(10);
    while um_core::orphans_pending() > 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `act` on two streams `a` and `b` of `ctx`, then returns `a`'s poison handle once both
/// streams are gone, the context idle and the reaper drained.
fn poisoner_after<F>(ctx: &Context, act: F) -> um::Poisoner
where
    F: for<'a, 'b> FnOnce(&Context, &Stream<'a>, &Stream<'b>) -> um::Result<()>,
{
    let handle = ctx
        .with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                act(ctx, a, b)?;
                Ok(a.poisoner())
            })
        })
        .expect("stream work");
    ctx.wait_idle().expect("idle");
    reaper_drained();
    handle
}

/// A cancelled sync future of a handed-off buffer frees the buffer once the stream is done
/// (the reaper), and with it the marks the buffer kept: `a`'s mark does not outlive `a`.
#[test]
#[ignore = "needs a CUDA device"]
fn a_cancelled_sync_future_of_handed_off_memory_frees_it_and_lets_the_marks_go() {
    let _serial = serial();
    let ctx = gpu();
    let handle = poisoner_after(&ctx, |ctx, a, b| {
        let x = Managed::from_fn(ctx, 1 << 10, |_| 1.0f32)?
            .attach(a)?
            .hand_off(b)?;
        drop(x.sync_async());
        Ok(())
    });
    assert!(
        !handle.is_live(),
        "the stream and its memory are gone, but its mark is kept alive"
    );
}

/// A sync future of a handed-off buffer that fails (the former owner poisoned) leaks the
/// buffer, but not the marks: once its orphan is gone, `a`'s mark is too.
#[test]
#[ignore = "needs a CUDA device"]
fn a_failed_sync_future_leaks_poisoned_memory_but_lets_the_marks_go() {
    let _serial = serial();
    let ctx = gpu();
    let handle = poisoner_after(&ctx, |ctx, a, b| {
        let x = Managed::from_fn(ctx, 1 << 10, |_| 1.0f32)?
            .attach(a)?
            .hand_off(b)?;
        let fut = x.sync_async();
        a.poisoner().poison();
        assert!(matches!(
            pollster::block_on(fut),
            Err(Error::StreamPoisoned)
        ));
        Ok(())
    });
    assert!(
        !handle.is_live(),
        "a poisoned, leaked orphan is gone, but the mark it kept is alive"
    );
}

/// A chain a -> b -> a keeps a's mark (once) and b's: b poisoned later refuses `sync` on a; and
/// a graph of b's buffer handed from a poisoned a refuses the host. Both buffers are leaked.
#[test]
#[ignore = "needs a CUDA device"]
fn a_cycle_and_a_graph_keep_the_marks_and_a_poisoned_one_leaks_its_buffer() {
    let _serial = serial();
    let ctx = gpu();
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let x = Managed::from_fn(&ctx, 256, |_| 1.0f32)?
                .attach(a)?
                .hand_off(b)?
                .hand_off(a)?;
            b.poisoner().poison();
            assert!(!a.is_poisoned());
            assert!(matches!(x.sync(), Err(Error::StreamPoisoned)));
            Ok(())
        })
    })
    .expect("stream work");
    if !ctx.info().concurrent_managed_access {
        // A capture of unified memory needs concurrent managed access.
        eprintln!("graph half skipped: captures of unified memory need concurrent managed access");
        return;
    }
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let x = Managed::from_fn(&ctx, 256, |_| 1.0f32)?
                .attach(a)?
                .hand_off(b)?;
            let (mut graph, ()) = b.capture((x,), |_, x| Ok((x, ())))?;
            graph.launch(b)?;
            a.poisoner().poison();
            assert!(matches!(
                graph.host(b, |(x,)| x[0]),
                Err(Error::StreamPoisoned)
            ));
            Ok(())
        })
    })
    .expect("stream work");
    ctx.wait_idle().expect("the context still works");
}

/// A capture checks its stream's poison mark, then waits for an idle section of another thread,
/// whose closure poisons the stream (an abort elsewhere): the mark is checked again after the
/// wait, so the capture does not begin (`Err(StreamPoisoned)`), and the buffer is leaked.
#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_that_waited_for_an_idle_section_does_not_begin_on_a_stream_poisoned_meanwhile_and_leaks_its_buffer()
 {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    let (poisoner_tx, poisoner_rx) = mpsc::channel::<Poisoner>();
    let (inside_tx, inside_rx) = mpsc::channel::<()>();
    let ctx = &ctx;
    let outcome = std::thread::scope(|t| {
        t.spawn(move || {
            let poisoner = poisoner_rx.recv().expect("the poisoner");
            let r = ctx.with_idle_unless_capturing(|| {
                inside_tx.send(()).expect("signal");
                // The capture checks the mark, then waits for this section (if it is slower
                // than this, it finds the mark set at its first check: the same Err).
                std::thread::sleep(Duration::from_millis(300));
                poisoner.poison(); // an abort elsewhere: the stream's work was abandoned
            });
            assert_eq!(r, Ok(Some(())));
        });
        ctx.with_stream(StreamOptions::new(), |s| {
            poisoner_tx.send(s.poisoner()).expect("send");
            inside_rx.recv().expect("the section runs");
            let x = x.attach(s)?;
            let r = s
                .capture((x,), |cap, (mut x,)| {
                    testing::add_scalar(cap, &mut x, 1.0)?;
                    Ok(((x,), ()))
                })
                .map(drop);
            assert!(s.is_poisoned(), "poisoned while the capture waited");
            Ok(r)
        })
        .expect("the stream")
    });
    assert_eq!(
        outcome,
        Err(um::Error::StreamPoisoned),
        "the capture began on a stream poisoned while it waited for the idle section"
    );
}
