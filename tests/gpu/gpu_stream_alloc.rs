//! Buffers born on a stream from a memory pool (`Stream::alloc_zeroed`, storage `Pooled`:
//! `cuMemAllocFromPoolAsync` and `cuMemFreeAsync`) on a real GPU: zeroed at odd lengths, used by
//! kernels and read back; a stream-owned drop that enqueues its free on the stream and returns
//! with the stream still busy (no host wait, no reaper), the pool's used bytes going back once
//! the stream reached it; a host-owned drop, on this thread or another; the release threshold
//! keeping or returning freed memory; a thousand allocations and frees in a bounded pool; a
//! capture that refuses allocations but takes a buffer born before it; a poisoned stream's
//! buffer leaked, and a stream with a poisoner freeing through the reaper; a handoff; a pool
//! dropped before its buffers; the legacy and per-thread default streams; a stream, a pool and
//! the context's last handle gone while a free is still queued; drops inside a capture closure
//! and beside it; a poisoner held (and a handoff from its stream), then dropped; a handoff to
//! another context refused; requests no pool can meet.
//!
//! Every test makes a pool of its own (`MemPool::new`), so that its used and reserved bytes are
//! its buffers' alone. Stream A runs `spin_then_add`, which takes at least `SPIN_NS` of GPU time
//! before it writes: the stream is certainly still busy when a drop that does not wait returns.
//! No assertion depends on timing otherwise.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use common::{assert_context_usable, gpu, serial};
use um::{Error, MemPool, StreamOptions};
use um_test_kernels::testing::{add_scalar, axpy, spin_then_add};

/// GPU time `spin_then_add` takes at least, where a test needs a stream to be busy.
const SPIN_NS: u64 = 100_000_000;

/// The first element of `v` that is not `want(i)`, with its index.
fn first_wrong(v: &[f32], want: impl Fn(usize) -> f32) -> Option<(usize, f32, f32)> {
    v.iter()
        .enumerate()
        .find(|(i, x)| **x != want(*i))
        .map(|(i, x)| (i, *x, want(i)))
}

fn pool(ctx: &um::Context) -> MemPool {
    MemPool::new(ctx).expect("a memory pool (the device needs the stream-ordered allocator)")
}

fn used(pool: &MemPool) -> u64 {
    pool.used_bytes().expect("the pool's used bytes")
}

fn reserved(pool: &MemPool) -> u64 {
    pool.reserved_bytes().expect("the pool's reserved bytes")
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_buffer_born_on_a_stream_is_zeroed_used_by_kernels_and_read_back() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    assert_eq!(used(&pool), 0, "a fresh pool");
    for len in [1usize, 7, 4097, (1 << 20) + 3] {
        let (zeros, ones, bytes) = ctx
            .with_stream(StreamOptions::new(), |s| {
                let zeros = s.alloc_zeroed::<f32>(&pool, len)?;
                let mut ones = s.alloc_zeroed::<f32>(&pool, len)?;
                add_scalar(s, &mut ones, 1.0)?;
                let bytes = s.alloc_zeroed::<u8>(&pool, len)?;
                let (zeros, ones, bytes) = s.sync_all((zeros, ones, bytes))?;
                Ok((zeros, ones, bytes))
            })
            .expect("stream work");
        assert_eq!(ones.len(), len);
        assert!(
            used(&pool) >= (9 * len) as u64,
            "the three host-owned buffers are in use"
        );
        let zeroed = zeros.to_vec().expect("copy");
        assert_eq!(first_wrong(&zeroed, |_| 0.0), None, "zeroed, len {len}");
        assert_eq!(first_wrong(&ones.to_vec().expect("copy"), |_| 1.0), None);
        assert!(bytes.to_vec().expect("copy").iter().all(|b| *b == 0));
        // Host-owned: freed on this thread's default stream, in its order.
        drop((zeros, ones, bytes));
        ctx.with_per_thread_stream(|p| p.wait_idle())
            .expect("wait for this thread's default stream");
        assert_eq!(used(&pool), 0, "every buffer's bytes went back, len {len}");
    }
}

/// The drop of a stream-owned buffer enqueues its free behind the kernel that still runs on
/// the stream, and returns at once: the stream is still busy, and nothing went to the reaper;
/// once the stream has reached the free, the pool's bytes are back.
#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_owned_drop_frees_in_stream_order_without_a_host_wait() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let n = common::workload(1 << 20, 1 << 12);
    ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
        let waits = um_core::host_waits_on_this_thread();
        let mut x = s.alloc_zeroed::<f32>(&pool, n)?;
        spin_then_add(s, &mut x, 1.0, SPIN_NS)?;
        let orphans = um_core::orphans_announced();
        drop(x);
        assert_eq!(
            um_core::host_waits_on_this_thread(),
            waits,
            "the allocation or the drop made a host wait"
        );
        assert!(!s.is_idle()?, "the drop waited for the stream");
        assert_eq!(um_core::orphans_announced(), orphans, "the reaper took it");
        s.wait_idle()?;
        assert!(
            um_core::host_waits_on_this_thread() > waits,
            "the counter missed the stream's wait"
        );
        assert_eq!(used(&pool), 0, "the free was reached: the bytes went back");
        Ok(())
    })
    .expect("stream work");
    assert_context_usable(&ctx);
}

#[test]
#[ignore = "needs a CUDA device"]
fn buffers_dropped_on_another_thread_are_freed_in_stream_order() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let n = 1 << 20;
    let host = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut owned = s.alloc_zeroed::<f32>(&pool, n)?;
            spin_then_add(s, &mut owned, 1.0, SPIN_NS / 10)?;
            let mut host = s.alloc_zeroed::<f32>(&pool, n)?;
            add_scalar(s, &mut host, 2.0)?;
            let host = host.sync()?;
            // A stream-owned buffer of a created stream moves to another thread, and is freed
            // there on its owning stream.
            std::thread::scope(|t| {
                t.spawn(move || drop(owned));
            });
            s.wait_idle()?;
            Ok(host)
        })
        .expect("stream work");
    assert_eq!(
        used(&pool),
        4 * n as u64,
        "only the host-owned buffer is left"
    );
    assert_eq!(first_wrong(&host.to_vec().expect("copy"), |_| 2.0), None);
    // Host-owned, it outlives its stream, and its free goes on the other thread's default
    // stream.
    std::thread::scope(|t| {
        t.spawn(move || drop(host));
    });
    ctx.wait_idle().expect("wait for the context");
    assert_eq!(used(&pool), 0);
}

/// The release threshold decides what a synchronization does with freed memory: kept by the
/// pool up to the threshold (`u64::MAX`: all of it), returned to the system above it (0).
#[test]
#[ignore = "needs a CUDA device"]
fn the_release_threshold_keeps_or_returns_freed_memory() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let n = 16 << 20; // 64 MiB of f32
    let bytes = 4 * n as u64;
    let round = || {
        ctx.with_stream(StreamOptions::new(), |s| {
            let mut x = s.alloc_zeroed::<f32>(&pool, n)?;
            add_scalar(s, &mut x, 1.0)?;
            drop(x);
            s.wait_idle() // the synchronization at which the pool keeps or releases
        })
        .expect("stream work");
    };
    pool.set_release_threshold(u64::MAX).expect("set");
    assert_eq!(pool.release_threshold().expect("read"), u64::MAX);
    round();
    assert_eq!(used(&pool), 0);
    assert!(
        reserved(&pool) >= bytes,
        "kept for reuse: {} reserved",
        reserved(&pool)
    );
    pool.set_release_threshold(0).expect("set");
    assert_eq!(pool.release_threshold().expect("read"), 0);
    round();
    assert!(
        reserved(&pool) < bytes,
        "returned to the system: {} reserved",
        reserved(&pool)
    );
    // The device's default pool answers too (its settings are the process's: left alone).
    let default = MemPool::device_default(&ctx).expect("the default pool");
    default.release_threshold().expect("read the default pool");
}

/// Memory freed on a stream is reused by the next allocation on it: a thousand rounds of
/// allocation, kernel and drop keep the pool to a few buffers' worth, and nothing in use.
#[test]
#[ignore = "needs a CUDA device"]
fn a_thousand_allocations_and_frees_keep_the_pool_bounded() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    pool.set_release_threshold(u64::MAX)
        .expect("keep freed memory");
    let n = 1 << 18; // 1 MiB of f32
    let rounds = common::workload(1000, 200);
    ctx.with_stream(StreamOptions::new(), |s| {
        for _ in 0..rounds {
            let mut x = s.alloc_zeroed::<f32>(&pool, n)?;
            add_scalar(s, &mut x, 1.0)?;
        }
        s.wait_idle()
    })
    .expect("rounds");
    assert_eq!(used(&pool), 0, "every round's free was reached");
    assert!(
        reserved(&pool) <= 64 << 20,
        "{rounds} rounds of 1 MiB reserved {} bytes: freed memory was not reused",
        reserved(&pool)
    );
}

/// Inside a capture closure an allocation is refused before any driver call (the driver would
/// refuse it on the capturing thread and invalidate the capture): the capture stays valid. A
/// buffer born before the capture enters it as any other, and its graph replays on it.
#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_refuses_allocations_and_takes_buffers_born_before_it() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let (x, refused) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = s.alloc_zeroed::<f32>(&pool, 4099)?;
            let (graph, refused) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                let refused = s.alloc_zeroed::<f32>(&pool, 4).map(drop);
                Ok(((x,), refused))
            })?;
            for _ in 0..3 {
                graph.launch(s)?;
            }
            let (x,) = graph.sync()?;
            Ok((x, refused))
        })
        .expect("a valid capture");
    assert!(
        matches!(refused, Err(Error::InsideCapture { .. })),
        "{refused:?}"
    );
    assert_eq!(first_wrong(&x.to_vec().expect("copy"), |_| 3.0), None);
}

/// A poisoned stream's buffer is leaked, never freed (work aborted there may still touch it),
/// and no allocation is made on it; a stream with a poisoner (a library that may abort work
/// there) frees through the reaper, once the stream passed the point with the mark unset. The
/// drop is counted among the orphans given to the reaper (`orphans_announced`, a count that only
/// grows), so the count holds however soon the stream passes the point. The poisoned buffer
/// (4 MiB) is leaked by design, hence `leaks_` in the name: the sanitizer run checks this test
/// without leak checking.
#[test]
#[ignore = "needs a CUDA device"]
fn a_poisoned_streams_buffer_leaks_and_a_poisoner_makes_the_free_wait_for_the_stream() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let n = 1 << 20;
    ctx.with_stream(StreamOptions::new(), |s| {
        let poisoner = s.poisoner();
        let mut x = s.alloc_zeroed::<f32>(&pool, n)?;
        spin_then_add(s, &mut x, 1.0, SPIN_NS / 10)?;
        let orphans = um_core::orphans_announced();
        drop(x);
        assert_eq!(
            um_core::orphans_announced(),
            orphans + 1,
            "a poisoner exists: the free waits for the stream, through the reaper"
        );
        um::reap_pending();
        // The reaper enqueued the free on its own thread's default stream: wait for it.
        ctx.wait_idle()?;
        assert_eq!(used(&pool), 0, "the mark stayed unset: freed");
        let mut y = s.alloc_zeroed::<f32>(&pool, n)?;
        add_scalar(s, &mut y, 1.0)?;
        poisoner.poison();
        drop(y);
        s.wait_idle()?;
        um::reap_pending();
        ctx.wait_idle()?;
        assert_eq!(
            used(&pool),
            4 * n as u64,
            "a poisoned stream's buffer is leaked"
        );
        let refused = s.alloc_zeroed::<f32>(&pool, 4).map(drop);
        assert!(matches!(refused, Err(Error::StreamPoisoned)), "{refused:?}");
        Ok(())
    })
    .expect("stream work");
}

/// A → B: the buffer born on A is handed to B (B waits for A's event), written there, and
/// freed on B at its drop; a pool dropped before its buffers leaves them valid.
#[test]
#[ignore = "needs a CUDA device"]
fn a_handoff_then_a_free_on_the_receiver_and_a_pool_dropped_first() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let n = 1 << 20;
    let non_blocking = StreamOptions::new().non_blocking();
    let x = ctx
        .with_stream(non_blocking, |a| {
            ctx.with_stream(non_blocking, |b| {
                let mut x = a.alloc_zeroed::<f32>(&pool, n)?;
                spin_then_add(a, &mut x, 1.0, SPIN_NS / 10)?;
                let mut x = x.hand_off(b)?;
                add_scalar(b, &mut x, 1.0)?; // after A's write: 2
                let mut scratch = b.alloc_zeroed::<f32>(&pool, n)?;
                add_scalar(b, &mut scratch, 1.0)?;
                drop(scratch); // freed on B, after its kernel
                x.sync()
            })
        })
        .expect("A -> B");
    assert_eq!(first_wrong(&x.to_vec().expect("copy"), |_| 2.0), None);
    // The pool goes first: its buffers stay valid, and are freed as usual.
    let other = pool.clone();
    drop(pool);
    assert_eq!(used(&other), 4 * n as u64, "a handle keeps answering");
    drop(other);
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            add_scalar(s, &mut x, 1.0)?;
            x.sync()
        })
        .expect("a buffer of a dropped pool");
    assert_eq!(first_wrong(&x.to_vec().expect("copy"), |_| 3.0), None);
    drop(x);
    ctx.wait_idle().expect("wait");
    assert_context_usable(&ctx);
}

/// A pool is of one device: a stream of another context cannot allocate from it.
#[test]
#[ignore = "needs a CUDA device"]
fn a_pool_of_another_context_and_an_empty_request_are_refused() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let refused = ctx
        .with_stream(StreamOptions::new(), |s| {
            Ok((
                s.alloc_zeroed::<f32>(&pool, 0).map(drop),
                s.alloc_zeroed::<u64>(&pool, usize::MAX / 4).map(drop),
            ))
        })
        .expect("stream");
    assert!(
        matches!(refused.0, Err(Error::ZeroSized { .. })),
        "{:?}",
        refused.0
    );
    assert!(
        matches!(refused.1, Err(Error::SizeOverflow { .. })),
        "{:?}",
        refused.1
    );
    assert_eq!(used(&pool), 0, "nothing was allocated");
    if um::device_count().expect("device count") < 2 {
        println!("one device: the other context's refusal is not run");
        return;
    }
    let other = um::Context::new(1).expect("device 1");
    let refused = other
        .with_stream(StreamOptions::new(), |s| {
            Ok(s.alloc_zeroed::<f32>(&pool, 4).map(drop))
        })
        .expect("stream of device 1");
    assert!(
        matches!(refused, Err(Error::ContextMismatch)),
        "{refused:?}"
    );
}

/// The two default streams allocate and free like a stream of one's own: on the legacy stream
/// (the NULL stream, `CU_STREAM_LEGACY`) and on this thread's default stream
/// (`CU_STREAM_PER_THREAD`), a buffer is born, written after a spin, read by a second kernel,
/// and dropped stream-owned, its free enqueued behind that kernel on the same special handle;
/// the other comes back by `sync`.
///
/// Expects: the buffer that came back holds 2.0 (the second kernel read the first's write, not
/// memory freed and reused under it); once each stream is idle and the host-owned ones dropped,
/// no byte of the pool is in use.
#[test]
#[ignore = "needs a CUDA device"]
fn the_legacy_and_per_thread_streams_allocate_and_free_in_their_own_order() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let n = 1 << 20;
    let legacy = ctx
        .with_legacy_stream(|l| {
            let mut scratch = l.alloc_zeroed::<f32>(&pool, n)?;
            spin_then_add(l, &mut scratch, 1.0, SPIN_NS / 10)?;
            let mut out = l.alloc_zeroed::<f32>(&pool, n)?;
            axpy(l, &scratch, &mut out, 2.0)?;
            drop(scratch); // freed on the legacy stream, after `axpy`
            out.sync()
        })
        .expect("legacy stream");
    let per_thread = ctx
        .with_per_thread_stream(|p| {
            let mut scratch = p.alloc_zeroed::<f32>(&pool, n)?;
            spin_then_add(p, &mut scratch, 1.0, SPIN_NS / 10)?;
            let mut out = p.alloc_zeroed::<f32>(&pool, n)?;
            axpy(p, &scratch, &mut out, 2.0)?;
            drop(scratch); // freed on this thread's default stream, after `axpy`
            out.sync()
        })
        .expect("per-thread stream");
    for (name, out) in [("legacy", &legacy), ("per-thread", &per_thread)] {
        assert_eq!(
            first_wrong(&out.to_vec().expect("copy"), |_| 2.0),
            None,
            "{name}"
        );
    }
    drop((legacy, per_thread));
    ctx.wait_idle().expect("wait for the context");
    assert_eq!(used(&pool), 0, "every free was reached");
}

/// A free enqueued behind a running kernel outlives what it was enqueued with: the stream is
/// destroyed at the end of its scope with the kernel and the free still queued (destruction
/// waits for neither), and the free still runs; then, a second time, the pool's last handle and
/// the test's last handle of the context are dropped too while the free is queued.
///
/// Expects: after the first round, once the context is idle, no byte of the pool in use; after
/// the second, no crash or hang, and a new handle of the device, a new pool and a kernel
/// working, with nothing of the new pool in use.
#[test]
#[ignore = "needs a CUDA device"]
fn a_free_queued_behind_a_kernel_outlives_its_stream_its_pool_and_the_last_context_handle() {
    let _serial = serial();
    let n = 1 << 20;
    let queue_a_free = |ctx: &um::Context, pool: &MemPool| {
        ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
            let mut x = s.alloc_zeroed::<f32>(pool, n)?;
            spin_then_add(s, &mut x, 1.0, SPIN_NS)?;
            drop(x); // its free queued behind the kernel; nothing waits
            Ok(())
        })
        .expect("stream work");
    };
    let ctx = gpu();
    let pool = pool(&ctx);
    queue_a_free(&ctx, &pool);
    ctx.wait_idle().expect("wait for the context");
    assert_eq!(
        used(&pool),
        0,
        "the free ran after its stream was destroyed"
    );
    queue_a_free(&ctx, &pool);
    drop(pool);
    drop(ctx);
    let ctx = gpu();
    assert_context_usable(&ctx);
    let pool = self::pool(&ctx);
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = s.alloc_zeroed::<f32>(&pool, 4099)?;
            add_scalar(s, &mut x, 1.0)?;
            x.sync()
        })
        .expect("a new pool");
    assert_eq!(first_wrong(&x.to_vec().expect("copy"), |_| 1.0), None);
    drop(x);
    ctx.wait_idle().expect("wait for the context");
    assert_eq!(used(&pool), 0);
}

/// Buffers born on a stream and dropped while a capture is open: inside the closure, on the
/// capturing thread (a stream-owned one with its kernel running goes behind a callback on its
/// stream to the reaper; a host-owned one is freed once the thread's captures have ended), and
/// on another thread meanwhile (freed in stream order on their stream, or on that thread's
/// default stream, which no capture records). No free reaches the capture.
///
/// Expects: the capture valid, its graph replayed twice (2.0); once the reaper is drained and
/// the context idle, only the graph's buffer in use in the pool, and nothing once it is dropped.
#[test]
#[ignore = "needs a CUDA device"]
fn pooled_buffers_dropped_inside_a_capture_closure_and_beside_it_are_freed_after_it() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let n = 1 << 20;
    let len = n;
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = s.alloc_zeroed::<f32>(&pool, len)?;
            let mut inside = s.alloc_zeroed::<f32>(&pool, n)?;
            let mut beside = s.alloc_zeroed::<f32>(&pool, n)?;
            let (inside_host, beside_host) = {
                let a = s.alloc_zeroed::<f32>(&pool, n)?;
                let b = s.alloc_zeroed::<f32>(&pool, n)?;
                s.sync_all((a, b))?
            };
            spin_then_add(s, &mut inside, 1.0, SPIN_NS / 10)?;
            add_scalar(s, &mut beside, 1.0)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                drop(inside); // stream-owned, its kernel running
                drop(inside_host); // host-owned
                std::thread::scope(|t| {
                    t.spawn(move || {
                        drop(beside);
                        drop(beside_host);
                    });
                });
                Ok(((x,), ()))
            })?;
            graph.launch(s)?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            Ok(x)
        })
        .expect("a valid capture");
    assert_eq!(first_wrong(&x.to_vec().expect("copy"), |_| 2.0), None);
    um::reap_pending();
    ctx.wait_idle().expect("wait for the context");
    assert_eq!(
        used(&pool),
        4 * len as u64,
        "only the graph's buffer is left"
    );
    drop(x);
    ctx.wait_idle().expect("wait for the context");
    assert_eq!(used(&pool), 0);
}

/// A `Poisoner` held (by a library that may abort work on stream A, or by a user) makes every
/// free of A's buffers wait for A to pass it with the mark unset, through a callback and the
/// reaper, and so does one of a buffer handed from A to B (A's work before the handoff may be
/// aborted after B's wait). Once the last handle is dropped, frees go back to A's order, with
/// no reaper. A's first kernel spins, so that A is usually still busy at the drops; the drops
/// are counted among the orphans given to the reaper (`orphans_announced`, a count that only
/// grows), not among those still pending, so the count holds however soon A passes them (under
/// a sanitizer, which slows the host's launches, A may pass the first before the last drop).
///
/// Expects: one orphan per drop while the handle lives (20 on A, one on B); nothing in use once
/// the reaper is drained (the mark stayed unset); no orphan for a drop after the handle is
/// gone, and nothing in use once A is idle.
#[test]
#[ignore = "needs a CUDA device"]
fn a_held_poisoner_sends_frees_through_the_reaper_and_once_dropped_frees_go_back_to_the_stream() {
    let _serial = serial();
    let ctx = gpu();
    let pool = pool(&ctx);
    let n = 1 << 18;
    let rounds = 20;
    let non_blocking = StreamOptions::new().non_blocking();
    ctx.with_stream(non_blocking, |a| {
        ctx.with_stream(non_blocking, |b| {
            let poisoner = a.poisoner();
            let mut busy = a.alloc_zeroed::<f32>(&pool, n)?;
            spin_then_add(a, &mut busy, 1.0, SPIN_NS)?;
            let orphans = um_core::orphans_announced();
            drop(busy);
            for _ in 1..rounds {
                let mut x = a.alloc_zeroed::<f32>(&pool, n)?;
                add_scalar(a, &mut x, 1.0)?;
                drop(x);
            }
            assert_eq!(
                um_core::orphans_announced(),
                orphans + rounds,
                "a handle of A exists: every free waits for A, through the reaper"
            );
            let mut y = a.alloc_zeroed::<f32>(&pool, n)?;
            add_scalar(a, &mut y, 1.0)?;
            let y = y.hand_off(b)?;
            drop(y);
            assert_eq!(
                um_core::orphans_announced(),
                orphans + rounds + 1,
                "handed from A: A's mark goes with it, and its free waits on B"
            );
            a.wait_idle()?;
            b.wait_idle()?;
            um::reap_pending();
            ctx.wait_idle()?;
            assert_eq!(used(&pool), 0, "the mark stayed unset: all freed");
            drop(poisoner);
            let before = um_core::orphans_announced();
            let mut z = a.alloc_zeroed::<f32>(&pool, n)?;
            spin_then_add(a, &mut z, 1.0, SPIN_NS / 10)?;
            drop(z);
            assert_eq!(
                um_core::orphans_announced(),
                before,
                "no handle left: freed in A's order, no reaper"
            );
            a.wait_idle()?;
            assert_eq!(used(&pool), 0);
            Ok(())
        })
    })
    .expect("stream work");
}

/// Memory of a pool stays on its device: a handoff to a stream of another context is refused
/// before any driver call (`ContextMismatch`), and the buffer, dropped as its owner's, is freed
/// in its owner's order. Needs two devices (said and skipped on one).
///
/// Expects: `ContextMismatch`, and no byte of the pool in use once the owner is idle.
#[test]
#[ignore = "needs a CUDA device"]
fn a_handoff_of_pooled_memory_to_another_context_is_refused_and_frees_it_in_its_owners_order() {
    let _serial = serial();
    if um::device_count().expect("device count") < 2 {
        println!("one device: the handoff to another context is not run");
        return;
    }
    let ctx = gpu();
    let pool = pool(&ctx);
    let other = um::Context::new(1).expect("device 1");
    ctx.with_stream(StreamOptions::new(), |a| {
        other.with_stream(StreamOptions::new(), |b| {
            let mut x = a.alloc_zeroed::<f32>(&pool, 1 << 20)?;
            spin_then_add(a, &mut x, 1.0, SPIN_NS / 10)?;
            let refused = x.hand_off(b).map(drop);
            assert!(
                matches!(refused, Err(Error::ContextMismatch)),
                "{refused:?}"
            );
            a.wait_idle()?;
            assert_eq!(used(&pool), 0, "dropped as A's, freed in A's order");
            Ok(())
        })
    })
    .expect("two devices");
}

/// Requests no pool can meet are `Err`s, and the stream goes on: an element aligned above 256
/// bytes (`OverAligned`) and a zero-sized element type at any length (`ZeroSized`), refused
/// before the driver; a petabyte, refused by the driver (a pool's refusal is its own; no
/// free-memory guard, no paging).
///
/// Expects: those errors (the petabyte's is an `Err`, printed), nothing in use in the pool, and
/// a buffer born afterwards on the same stream written and read back right.
#[test]
#[ignore = "needs a CUDA device"]
fn requests_no_pool_can_meet_are_errs_and_the_stream_goes_on() {
    let _serial = serial();
    #[derive(Clone, Copy, um::DeviceCopy)]
    #[repr(C, align(512))]
    struct Over([u8; 16]);
    // SAFETY: plain bytes; all-zero is a valid value.
    unsafe impl um::Zeroable for Over {}
    let ctx = gpu();
    let pool = pool(&ctx);
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            assert_eq!(
                s.alloc_zeroed::<Over>(&pool, 4).map(drop),
                Err(Error::OverAligned {
                    align: 512,
                    max: 256
                })
            );
            let zst = s.alloc_zeroed::<()>(&pool, 1 << 40).map(drop);
            assert!(matches!(zst, Err(Error::ZeroSized { .. })), "{zst:?}");
            match s.alloc_zeroed::<u8>(&pool, 1 << 50) {
                Err(e) => println!("a petabyte from a pool: {e} ({:?})", e.kind()),
                Ok(_) => panic!("a petabyte was allocated from a pool"),
            }
            assert_eq!(used(&pool), 0, "nothing was allocated");
            let mut x = s.alloc_zeroed::<f32>(&pool, 4099)?;
            add_scalar(s, &mut x, 1.0)?;
            x.sync()
        })
        .expect("the stream goes on");
    assert_eq!(first_wrong(&x.to_vec().expect("copy"), |_| 1.0), None);
    assert_context_usable(&ctx);
}
