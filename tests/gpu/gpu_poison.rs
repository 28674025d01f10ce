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

use common::{allocation_at, device_for_captures, gpu, serial};
use um::{
    Context, Error, Managed, MemPool, Poisoner, Stream, StreamKind, StreamOptions, StreamOwned,
};
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

/// The address of a stream-owned buffer's allocation, to ask the driver later whether it is
/// still allocated (`common::allocation_at`): leaked, or freed.
fn address_of<K: StreamKind, M: um::Storage>(x: &Managed<[f32], StreamOwned<'_, K>, M>) -> u64 {
    x.as_device_ptr().address()
}

/// Whether the driver still holds the allocation at `address`.
fn allocated(address: u64) -> bool {
    allocation_at(address).is_some()
}

/// a -> b -> c -> d keeps a's mark first and b's and c's after it: c poisoned once the buffers
/// are on d is seen by `sync`, `sync_all`, a sync future and a drop, each of which leaks its
/// buffer; a buffer that went a -> b -> d, not through c, comes back with its contents; and no
/// mark outlives the streams.
#[test]
#[ignore = "needs a CUDA device"]
fn a_mark_kept_after_the_first_is_seen_by_sync_sync_all_a_sync_future_and_a_drop_and_leaks_the_buffers()
 {
    let _serial = serial();
    let ctx = gpu();
    let n = 1 << 12;
    let (addresses, handles) = ctx
        .with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                ctx.with_stream(StreamOptions::new(), |c| {
                    ctx.with_stream(StreamOptions::new(), |d| {
                        let chain = || -> um::Result<_> {
                            let mut x = Managed::from_fn(&ctx, n, |_| 0.0f32)?.attach(a)?;
                            testing::add_scalar(a, &mut x, 1.0)?;
                            let mut x = x.hand_off(b)?;
                            testing::add_scalar(b, &mut x, 1.0)?;
                            let mut x = x.hand_off(c)?;
                            testing::add_scalar(c, &mut x, 1.0)?;
                            x.hand_off(d)
                        };
                        let (w, x, y, z) = (chain()?, chain()?, chain()?, chain()?);
                        let mut clean = Managed::from_fn(&ctx, n, |_| 0.0f32)?.attach(a)?;
                        testing::add_scalar(a, &mut clean, 1.0)?;
                        let clean = clean.hand_off(b)?.hand_off(d)?;
                        let addresses = [&w, &x, &y, &z].map(address_of);
                        let handles = [a.poisoner(), b.poisoner(), c.poisoner(), d.poisoner()];
                        c.poisoner().poison();
                        assert!(!d.is_poisoned());
                        assert!(matches!(w.sync(), Err(Error::StreamPoisoned)), "sync");
                        assert!(
                            matches!(d.sync_all((x,)), Err(Error::StreamPoisoned)),
                            "sync_all"
                        );
                        assert!(
                            matches!(
                                pollster::block_on(y.sync_async()),
                                Err(Error::StreamPoisoned)
                            ),
                            "a sync future"
                        );
                        drop(z);
                        let clean = clean.sync().expect("a buffer that never was on c");
                        assert!(clean.iter().all(|v| *v == 1.0));
                        Ok((addresses, handles))
                    })
                })
            })
        })
        .expect("stream work");
    ctx.wait_idle().expect("idle");
    reaper_drained();
    for (i, address) in addresses.into_iter().enumerate() {
        assert!(
            allocated(address),
            "buffer {i} (sync, sync_all, sync future, drop) was freed after c's poison"
        );
    }
    for (name, h) in ["a", "b", "c", "d"].iter().zip(&handles) {
        assert!(
            !h.is_live(),
            "the mark of {name} outlives its stream and its memory"
        );
    }
}

/// A cycle a -> b -> c -> a keeps the marks of b and c as well as a's own: whichever of the
/// three is poisoned once the buffer is back on a, `sync` refuses it and it is leaked.
#[test]
#[ignore = "needs a CUDA device"]
fn a_cycle_through_three_streams_leaks_its_buffer_whichever_of_them_is_poisoned_later() {
    let _serial = serial();
    let ctx = gpu();
    for victim in 0..3 {
        let (address, refused) = ctx
            .with_stream(StreamOptions::new(), |a| {
                ctx.with_stream(StreamOptions::new(), |b| {
                    ctx.with_stream(StreamOptions::new(), |c| {
                        let mut x = Managed::from_fn(&ctx, 1 << 10, |_| 0.0f32)?.attach(a)?;
                        testing::add_scalar(a, &mut x, 1.0)?;
                        let mut x = x.hand_off(b)?;
                        testing::add_scalar(b, &mut x, 1.0)?;
                        let mut x = x.hand_off(c)?;
                        testing::add_scalar(c, &mut x, 1.0)?;
                        let x = x.hand_off(a)?;
                        let address = address_of(&x);
                        match victim {
                            0 => a.poisoner(),
                            1 => b.poisoner(),
                            _ => c.poisoner(),
                        }
                        .poison();
                        Ok((address, x.sync().map(drop)))
                    })
                })
            })
            .expect("stream work");
        assert!(
            matches!(refused, Err(Error::StreamPoisoned)),
            "stream {victim} of the cycle poisoned, yet sync gave: {refused:?}"
        );
        ctx.wait_idle().expect("idle");
        assert!(
            allocated(address),
            "stream {victim} poisoned: the buffer was freed"
        );
    }
}

/// A buffer that went a -> b -> c and back to the host (by `sync`, `sync_all` or a sync
/// future) keeps no mark: once the streams are gone their handles are dead although the buffers
/// live on, a poison through them changes nothing, and the buffers are freed at their drop.
#[test]
#[ignore = "needs a CUDA device"]
fn a_buffer_back_on_the_host_keeps_no_mark_of_the_streams_it_went_through() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1 << 10;
    let ((x, y, z), handles) = ctx
        .with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                ctx.with_stream(StreamOptions::new(), |c| {
                    let chain = || -> um::Result<_> {
                        let mut x = Managed::from_fn(&ctx, n, |_| 0.0f32)?.attach(a)?;
                        testing::add_scalar(a, &mut x, 1.0)?;
                        let mut x = x.hand_off(b)?;
                        testing::add_scalar(b, &mut x, 1.0)?;
                        x.hand_off(c)
                    };
                    let x = chain()?.sync()?;
                    let (y,) = c.sync_all((chain()?,))?;
                    let z = pollster::block_on(chain()?.sync_async())?;
                    Ok(((x, y, z), [a.poisoner(), b.poisoner(), c.poisoner()]))
                })
            })
        })
        .expect("stream work");
    for (name, h) in ["a", "b", "c"].iter().zip(&handles) {
        assert!(
            !h.is_live(),
            "a host-owned buffer still keeps the mark of {name}, whose stream is gone"
        );
        h.poison();
    }
    for buf in [&x, &y, &z] {
        assert!(buf.iter().all(|v| *v == 2.0));
    }
    let address = x.as_ptr() as u64;
    drop(x);
    assert!(
        !allocated(address),
        "a clean host-owned buffer was not freed"
    );
    drop((y, z));
}

/// A stream's flag lives on in the buffers handed off from it after the stream itself is
/// gone: a poison of a (the abort of work queued there before the handoff, reported late) still
/// reaches the buffer on b, which `sync` refuses and which is leaked; a second buffer, given
/// back before the poison, is not affected; and once the buffers are gone, so is the mark.
#[test]
#[ignore = "needs a CUDA device"]
fn a_poison_of_a_stream_that_has_ended_still_leaks_memory_handed_off_from_it() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1 << 10;
    let (handle, address, y) = ctx
        .with_stream(StreamOptions::new(), |b| {
            let (x, y, pa) = ctx.with_stream(StreamOptions::new(), |a| {
                let mut x = Managed::from_fn(&ctx, n, |_| 0.0f32)?.attach(a)?;
                testing::add_scalar(a, &mut x, 1.0)?;
                let mut y = Managed::from_fn(&ctx, n, |_| 0.0f32)?.attach(a)?;
                testing::add_scalar(a, &mut y, 1.0)?;
                Ok((x.hand_off(b)?, y.hand_off(b)?, a.poisoner()))
            })?;
            assert!(pa.is_live(), "a is gone, but two buffers keep its mark");
            let y = y.sync()?;
            assert!(pa.is_live(), "a is gone, but x keeps its mark");
            pa.poison();
            assert!(pa.is_poisoned());
            let address = address_of(&x);
            assert!(
                matches!(x.sync(), Err(Error::StreamPoisoned)),
                "the poison of a gone stream was lost"
            );
            Ok((pa, address, y))
        })
        .expect("stream work");
    ctx.wait_idle().expect("idle");
    assert!(allocated(address), "memory of a poisoned stream was freed");
    assert!(
        !handle.is_live(),
        "the mark outlives the stream and its memory"
    );
    assert!(y.iter().all(|v| *v == 1.0));
}

/// Two devices: a buffer of device 0 goes a0 -> b1 -> c1 -> p1 (device 1's per-thread stream)
/// -> p0 -> c1 -> a0, with a kernel on every stream; some handoffs cross devices, some stay on
/// one (where the receiver's context is the event's, and `order` binds only once), some are
/// made with the other device's context current. Every receiver waits for the one before it
/// (the model sees no unordered access, and the sum is right); a second buffer down the same
/// chain, b1 poisoned once it is back on a0, is refused by `sync` and leaked.
#[test]
#[ignore = "needs a CUDA device"]
fn a_chain_across_two_devices_orders_every_receiver_and_leaks_a_buffer_handed_off_from_a_poisoned_stream()
 {
    let _serial = serial();
    if um::device_count().unwrap_or(0) < 2 {
        eprintln!("skipped: one device");
        return;
    }
    let ctx0 = gpu();
    let ctx1 = Context::new(1).expect("device 1");
    if !ctx0.info().concurrent_managed_access || !ctx1.info().concurrent_managed_access {
        eprintln!("skipped: handoffs across devices need concurrent managed access");
        return;
    }
    let n = 1 << 12;
    let (sum, address, refused) = ctx0
        .with_stream(StreamOptions::new(), |a0| {
            ctx1.with_stream(StreamOptions::new(), |b1| {
                ctx1.with_stream(StreamOptions::new(), |c1| {
                    ctx1.with_per_thread_stream(|p1| {
                        ctx0.with_per_thread_stream(|p0| {
                            let chain = || -> um::Result<_> {
                                let mut x = Managed::from_fn(&ctx0, n, |_| 0.0f32)?.attach(a0)?;
                                testing::add_scalar(a0, &mut x, 1.0)?;
                                let mut x = x.hand_off(b1)?; // 0 -> 1
                                testing::add_scalar(b1, &mut x, 1.0)?;
                                let mut x = x.hand_off(c1)?; // 1 -> 1
                                testing::add_scalar(c1, &mut x, 1.0)?;
                                // 1 -> 1, with device 0 current: the per-thread handle must be
                                // waited on in device 1's context.
                                ctx0.make_current()?;
                                let mut x = x.hand_off(p1)?;
                                testing::add_scalar(p1, &mut x, 1.0)?;
                                let mut x = x.hand_off(p0)?; // 1 -> 0, per-thread to per-thread
                                testing::add_scalar(p0, &mut x, 1.0)?;
                                ctx1.make_current()?;
                                let mut x = x.hand_off(c1)?; // 0 -> 1
                                testing::add_scalar(c1, &mut x, 1.0)?;
                                let mut x = x.hand_off(a0)?; // 1 -> 0
                                testing::add_scalar(a0, &mut x, 1.0)?;
                                Ok(x)
                            };
                            let x = chain()?.sync()?;
                            let sum: f32 = x.iter().sum();
                            let y = chain()?;
                            let address = address_of(&y);
                            b1.poisoner().poison();
                            assert!(!a0.is_poisoned() && !c1.is_poisoned());
                            Ok((sum, address, y.sync().map(drop)))
                        })
                    })
                })
            })
        })
        .expect("stream work");
    assert_eq!(
        sum,
        7.0 * n as f32,
        "a receiver ran before the stream it was handed from"
    );
    assert!(
        matches!(refused, Err(Error::StreamPoisoned)),
        "device 1's stream b1 poisoned, yet sync on device 0 gave: {refused:?}"
    );
    ctx0.wait_idle().expect("device 0 idle");
    ctx1.wait_idle().expect("device 1 idle");
    assert!(
        allocated(address),
        "memory handed off from a poisoned stream of device 1 was freed"
    );
}

/// Inside `capture_streams`, a buffer handed off on the eager side (a -> s) before the capture
/// and forked through three capture streams keeps a's mark in the graph: a poisoned later,
/// `Graph::sync` refuses the buffer and leaks it. A graph's host step is a wait that found the
/// marks unset: after it, a's poison no longer concerns the buffer, which `sync` gives back.
#[test]
#[ignore = "needs a CUDA device"]
fn handoffs_in_a_capture_keep_earlier_marks_so_a_graph_leaks_its_buffer_unless_a_host_step_forgot_them()
 {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let n = 1 << 10;
    let (host, address, refused) = ctx
        .with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |s| {
                let handed = || -> um::Result<_> {
                    let mut x = Managed::from_fn(&ctx, n, |_| 0.0f32)?.attach(a)?;
                    testing::add_scalar(a, &mut x, 1.0)?;
                    x.hand_off(s)
                };
                let (x, y, w) = (handed()?, handed()?, handed()?);
                let address = [address_of(&y), address_of(&w)];
                let capture = |x| {
                    s.capture_streams(3, (x,), |caps, (x,)| {
                        let mut x = x.hand_off(&caps[1])?;
                        testing::add_scalar(&caps[1], &mut x, 1.0)?;
                        let mut x = x.hand_off(&caps[2])?;
                        testing::add_scalar(&caps[2], &mut x, 1.0)?;
                        let x = x.hand_off(&caps[0])?;
                        Ok(((x,), ()))
                    })
                };
                let (mut gx, ()) = capture(x)?;
                let (gy, ()) = capture(y)?;
                let (gw, ()) = capture(w)?;
                gx.launch(s)?;
                gy.launch(s)?;
                gw.launch(s)?;
                gx.host(s, |(x,)| assert!(x.iter().all(|v| *v == 3.0)))?;
                a.poisoner().poison();
                gx.launch(s)?;
                let (x,) = gx.sync().expect("the host step forgot a's mark");
                // A graph's buffers taken back without a wait keep the mark too.
                let (w,) = gw.into_buffers()?;
                Ok((x, address, [gy.sync().map(drop), w.sync().map(drop)]))
            })
        })
        .expect("stream work");
    assert!(host.iter().all(|v| *v == 5.0));
    for (what, refused) in ["Graph::sync", "sync after into_buffers"]
        .iter()
        .zip(refused)
    {
        assert!(
            matches!(refused, Err(Error::StreamPoisoned)),
            "{what} gave the CPU a graph's buffer handed off from a poisoned stream: {refused:?}"
        );
    }
    ctx.wait_idle().expect("idle");
    for address in address {
        assert!(
            allocated(address),
            "the graph's buffer of a poisoned stream was freed"
        );
    }
}

/// A buffer handed off a -> s, captured, handed to a second capture stream and dropped there
/// (the scope keeps it for a free once the capture has ended) keeps a's mark: a poisoned
/// inside the closure, the buffer is leaked, not freed by the reaper; without the poison the
/// same buffer is freed. Either way, a's mark does not outlive a and the buffer.
#[test]
#[ignore = "needs a CUDA device"]
fn a_buffer_dropped_in_a_capture_keeps_the_marks_from_before_it_and_leaks_once_one_is_set() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    for poison in [false, true] {
        let (out, address, handle) = ctx
            .with_stream(StreamOptions::new(), |a| {
                ctx.with_stream(StreamOptions::new(), |s| {
                    let mut x = Managed::from_fn(&ctx, 1 << 10, |_| 0.0f32)?.attach(a)?;
                    spin_then_add(a, &mut x, 1.0, SPIN_NS / 6)?;
                    let x = x.hand_off(s)?;
                    let y = Managed::from_fn(&ctx, 1 << 10, |_| 0.0f32)?.attach(s)?;
                    let address = address_of(&x);
                    let out = s
                        .capture_streams(2, vec![x, y], |caps, mut v| {
                            let x = v.remove(0).hand_off(&caps[1])?;
                            drop(x); // kept by the scope, with a's mark
                            if poison {
                                a.poisoner().poison();
                            }
                            Ok((v, ()))
                        })
                        .map(drop);
                    Ok((out, address, a.poisoner()))
                })
            })
            .expect("stream work");
        assert_eq!(out, Err(Error::CaptureLostBuffer { lost: 1 }));
        ctx.wait_idle().expect("idle");
        um::reap_pending();
        reaper_drained();
        ctx.wait_idle().expect("idle");
        assert_eq!(
            allocated(address),
            poison,
            "a buffer dropped in a capture, its former owner {}: {}",
            if poison { "poisoned" } else { "clean" },
            if poison { "freed" } else { "not freed" }
        );
        assert!(!handle.is_live(), "a's mark outlives a and the buffer");
    }
}

/// `sync_all` of a tuple and of a `Vec` whose buffers came from different streams, one of which
/// (c) is poisoned: the group is refused, the buffer from c is leaked, and the others (one from
/// a clean a, one born on b) are freed; likewise a group's sync future.
#[test]
#[ignore = "needs a CUDA device"]
fn sync_all_of_buffers_from_several_streams_leaks_only_those_of_a_poisoned_one() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1 << 10;
    for round in 0..3 {
        ctx.with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                ctx.with_stream(StreamOptions::new(), |c| {
                    let from = |v: u32| -> um::Result<_> {
                        let x = Managed::from_fn(&ctx, n, |_| 0.0f32)?;
                        match v {
                            0 => x.attach(a)?.hand_off(b),
                            1 => x.attach(c)?.hand_off(b),
                            _ => x.attach(b),
                        }
                    };
                    let (x, y, z) = (from(0)?, from(1)?, from(2)?);
                    let (ax, ay, az) = (address_of(&x), address_of(&y), address_of(&z));
                    c.poisoner().poison();
                    let refused = match round {
                        0 => b.sync_all((x, y, z)).map(drop),
                        1 => b.sync_all(vec![x, y, z]).map(drop),
                        _ => pollster::block_on(b.sync_all_async((x, y, z))).map(drop),
                    };
                    assert!(
                        matches!(refused, Err(Error::StreamPoisoned)),
                        "round {round}: {refused:?}"
                    );
                    b.wait_idle()?;
                    um::reap_pending();
                    reaper_drained();
                    assert!(allocated(ay), "round {round}: the buffer from c was freed");
                    assert!(
                        !allocated(ax) && !allocated(az),
                        "round {round}: a clean buffer of the group was not freed"
                    );
                    Ok(())
                })
            })
        })
        .expect("stream work");
    }
}

/// Buffers handed off a -> b while a spins, then given to other threads: one dropped there
/// after a's poison, one's sync future dropped there while still pending (the reaper takes the
/// buffer once b has passed); a is poisoned while it still spins. Both are leaked, and a's mark
/// does not outlive them.
#[test]
#[ignore = "needs a CUDA device"]
fn handed_off_memory_dropped_on_another_thread_leaks_when_its_former_owner_is_poisoned() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1 << 10;
    let (addresses, handle) = ctx
        .with_stream(StreamOptions::new(), |a| {
            ctx.with_stream(StreamOptions::new(), |b| {
                let x = handed_during_spin!(&ctx, a, b, n);
                let y = handed_during_spin!(&ctx, a, b, n);
                let addresses = [address_of(&x), address_of(&y)];
                let pa = a.poisoner();
                let pending = y.sync_async();
                thread::scope(|t| {
                    t.spawn(move || drop(pending))
                        .join()
                        .expect("the dropping thread");
                    pa.poison();
                    t.spawn(move || drop(x))
                        .join()
                        .expect("the dropping thread");
                });
                b.wait_idle()?;
                Ok((addresses, a.poisoner()))
            })
        })
        .expect("stream work");
    ctx.wait_idle().expect("idle");
    um::reap_pending();
    reaper_drained();
    assert!(
        allocated(addresses[0]),
        "dropped on another thread after the poison: freed"
    );
    assert!(
        allocated(addresses[1]),
        "a pending sync future dropped on another thread: freed by the reaper after the poison"
    );
    assert!(!handle.is_live(), "a's mark outlives a and its buffers");
}

/// A buffer of a pool born on a, handed on a -> b -> c, keeps b's mark after a's (the second
/// one kept): dropped on c, it is freed in c's order where no handle of any of the three
/// exists, through the reaper while a handle of b exists, and leaked once b is poisoned while
/// it spins; nothing of the pool is in use but the leaked buffer.
#[test]
#[ignore = "needs a CUDA device"]
fn a_pooled_buffer_handed_on_twice_frees_by_its_second_mark_and_leaks_once_it_is_set() {
    let _serial = serial();
    let ctx = gpu();
    let pool = MemPool::new(&ctx).expect("a memory pool");
    let n = 1 << 16;
    let non_blocking = StreamOptions::new().non_blocking();
    ctx.with_stream(non_blocking, |a| {
        ctx.with_stream(non_blocking, |b| {
            ctx.with_stream(non_blocking, |c| {
                let chain = || -> um::Result<_> {
                    let mut x = a.alloc_zeroed::<f32>(&pool, n)?;
                    testing::add_scalar(a, &mut x, 1.0)?;
                    let mut x = x.hand_off(b)?;
                    spin_then_add(b, &mut x, 1.0, SPIN_NS / 2)?;
                    x.hand_off(c)
                };
                let used = || pool.used_bytes().expect("the pool's used bytes");
                // No handle of a, b or c: freed in c's order, no reaper.
                let before = um_core::orphans_announced();
                drop(chain()?);
                assert_eq!(um_core::orphans_announced(), before, "no handle: no reaper");
                c.wait_idle()?;
                assert_eq!(used(), 0, "freed in c's order");
                // A handle of b only (the second mark): the free waits, and frees.
                let pb = b.poisoner();
                let before = um_core::orphans_announced();
                drop(chain()?);
                assert_eq!(
                    um_core::orphans_announced(),
                    before + 1,
                    "b's mark may be set: the free waits for c through the reaper"
                );
                c.wait_idle()?;
                um::reap_pending();
                reaper_drained();
                ctx.wait_idle()?;
                assert_eq!(used(), 0, "b's mark stayed unset: freed");
                // b poisoned while it spins: leaked.
                drop(chain()?);
                pb.poison();
                c.wait_idle()?;
                um::reap_pending();
                reaper_drained();
                ctx.wait_idle()?;
                assert_eq!(used(), 4 * n as u64, "b was poisoned: its buffer is leaked");
                Ok(())
            })
        })
    })
    .expect("stream work");
}

/// Two handles of the calling thread's default stream (`with_per_thread_stream` nested) are one
/// driver stream with one id, but each has its own poison mark. A buffer attached to the first,
/// used there, moved to the second (no event: the same stream) and on to a stream of its own,
/// keeps the first handle's mark: a library that enqueued work through the first handle and
/// aborted it poisons that one, and `sync` must refuse the buffer (and leak it).
#[test]
#[ignore = "needs a CUDA device"]
fn memory_moved_between_two_handles_of_the_per_thread_stream_keeps_the_first_ones_mark_and_leaks_once_it_is_set()
 {
    let _serial = serial();
    let ctx = gpu();
    let (address, refused) = ctx
        .with_stream(StreamOptions::new(), |c| {
            ctx.with_per_thread_stream(|p1| {
                ctx.with_per_thread_stream(|p2| {
                    let mut x = Managed::from_fn(&ctx, 1 << 10, |_| 0.0f32)?.attach(p1)?;
                    // Work of a library through the first handle, which it may abort.
                    let p = p1.poisoner();
                    spin_then_add(p1, &mut x, 1.0, SPIN_NS / 6)?;
                    let x = x.hand_off(p2)?.hand_off(c)?;
                    let address = address_of(&x);
                    p.poison(); // the abort
                    Ok((address, x.sync().map(drop)))
                })
            })
        })
        .expect("stream work");
    ctx.wait_idle().expect("idle");
    assert!(
        matches!(refused, Err(Error::StreamPoisoned)),
        "the per-thread stream's first handle was poisoned, yet sync gave the CPU memory its \
         aborted work may still write: {refused:?}"
    );
    assert!(allocated(address), "memory of a poisoned stream was freed");
}

/// A buffer handed off a -> b (while a spins) and dropped inside a capture closure on a third
/// stream, where nothing may be waited for, goes to a free behind a callback on b with a's mark:
/// a poisoned inside the closure, it is leaked; clean, it is freed. a's mark does not outlive
/// a and the buffer.
#[test]
#[ignore = "needs a CUDA device"]
fn handed_off_memory_dropped_on_a_capturing_thread_leaks_when_its_former_owner_is_poisoned() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    for poison in [false, true] {
        let (address, handle) = ctx
            .with_stream(StreamOptions::new(), |a| {
                ctx.with_stream(StreamOptions::new(), |b| {
                    ctx.with_stream(StreamOptions::new(), |s| {
                        let x = handed_during_spin!(&ctx, a, b, 1 << 10);
                        let address = address_of(&x);
                        let y = Managed::from_fn(&ctx, 1 << 10, |_| 0.0f32)?.attach(s)?;
                        let (graph, ()) = s.capture((y,), |cap, (mut y,)| {
                            drop(x); // no wait here: behind a callback on b, with a's mark
                            if poison {
                                a.poisoner().poison();
                            }
                            testing::add_scalar(cap, &mut y, 1.0)?;
                            Ok(((y,), ()))
                        })?;
                        drop(graph);
                        Ok((address, a.poisoner()))
                    })
                })
            })
            .expect("stream work");
        ctx.wait_idle().expect("idle");
        um::reap_pending();
        reaper_drained();
        ctx.wait_idle().expect("idle");
        assert_eq!(
            allocated(address),
            poison,
            "dropped on a capturing thread, its former owner {}",
            if poison {
                "poisoned: freed"
            } else {
                "clean: not freed"
            }
        );
        assert!(!handle.is_live(), "a's mark outlives a and the buffer");
    }
}
