//! Red team 18 (docs/redteam18.md): the fixes of red team 17 attacked (the poison marks a
//! handed-off buffer keeps, `Allocation::handed_from`). Each test asserts what a sound library
//! must do, so that it fails where the hole is open. Written without a GPU; the lead fixed
//! attempts 1 and 2 (`6c727fa`) before any of these ran on one.
//! One GPU is enough (no NCCL: a `Poisoner` stands in for the communicator's abort, set from
//! another thread while the new owner's wait is in progress, as an abort on a watchdog does).
//!
//! * Attempt 1 (hole): `Stream::sync_all` (tuples and `Vec`) checks the kept marks before its
//!   wait (`release_to_host`) but after it only the stream's own mark
//!   (`stream.check_not_poisoned()`), then `retype` clears them: a stream the buffers were
//!   handed off from, poisoned during the wait, gives them to the CPU.
//! * Attempt 1c (control, held): the same for `sync`, which re-checks the buffer's marks.
//! * Attempt 2 (hole, leak): `into_orphan` (a cancelled or failed sync future) never drops the
//!   buffer's `handed_from`, so the marks it kept live for ever: a `Poisoner` of a stream long
//!   gone stays `is_live()`, and a library that forgets handles once they are dead never does.
//! * Attempt 3 (control, held): a chain a -> b -> a, and a graph of the new owner, keep a's mark.
#![allow(clippy::expect_used, clippy::panic, clippy::unwrap_used)]

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{gpu, serial};
use um::kernels::testing::spin_then_add;
use um::{Context, Error, Managed, Stream, StreamOptions};

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

/// Attempt 1: `sync_all` of a tuple, the first stream poisoned during the wait.
#[test]
#[ignore = "needs a CUDA device"]
fn sync_all_of_a_tuple_refuses_memory_whose_former_owner_was_poisoned_during_the_wait() {
    refused_when_poisoned_during_the_wait("sync_all of a tuple", |ctx, a, b, poison_soon| {
        let x = handed_during_spin!(ctx, a, b, 1 << 16);
        let y = handed_during_spin!(ctx, a, b, 1 << 16);
        poison_soon();
        Ok(b.sync_all((x, y)).map(drop))
    });
}

/// Attempt 1b: `sync_all` of a `Vec`, likewise.
#[test]
#[ignore = "needs a CUDA device"]
fn sync_all_of_a_vec_refuses_memory_whose_former_owner_was_poisoned_during_the_wait() {
    refused_when_poisoned_during_the_wait("sync_all of a Vec", |ctx, a, b, poison_soon| {
        let v = vec![
            handed_during_spin!(ctx, a, b, 1 << 16),
            handed_during_spin!(ctx, a, b, 1 << 16),
        ];
        poison_soon();
        Ok(b.sync_all(v).map(drop))
    });
}

/// Attempt 1c (control): `sync` re-checks the buffer's marks after its wait.
#[test]
#[ignore = "needs a CUDA device"]
fn sync_refuses_memory_whose_former_owner_was_poisoned_during_the_wait() {
    refused_when_poisoned_during_the_wait("sync", |ctx, a, b, poison_soon| {
        let x = handed_during_spin!(ctx, a, b, 1 << 16);
        poison_soon();
        Ok(x.sync().map(drop))
    });
}

/// Attempt 1d (control): a sync future re-checks every buffer's marks once the stream passed.
#[test]
#[ignore = "needs a CUDA device"]
fn a_sync_future_refuses_memory_whose_former_owner_was_poisoned_during_the_wait() {
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
    while um::orphans_pending() > 0 && Instant::now() < deadline {
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

/// Attempt 2: a cancelled sync future of a handed-off buffer goes through `into_orphan`, which
/// drops only the context of the buffer's bookkeeping: the kept marks (`handed_from`) are never
/// dropped, and `a`'s mark outlives `a` and all its memory.
#[test]
#[ignore = "needs a CUDA device"]
fn a_cancelled_sync_future_of_handed_off_memory_lets_the_marks_go() {
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
        "the stream and its memory are gone, but its mark is kept alive (leaked by into_orphan)"
    );
    // The same through a failed future (poisoned: `orphan_group` too).
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
    // The buffer is leaked (poisoned), but its orphan, and with it the mark, is gone.
    assert!(
        !handle.is_live(),
        "a poisoned, leaked orphan is gone, but the mark it kept is alive (leaked by into_orphan)"
    );
}

/// Attempt 3 (control): a -> b -> a keeps a's mark (deduplicated) and b's; b poisoned later
/// refuses `sync` on a, and a graph of b's buffer handed from a poisoned a refuses the host.
#[test]
#[ignore = "needs a CUDA device"]
fn a_cycle_and_a_graph_keep_the_marks() {
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
