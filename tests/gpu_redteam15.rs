//! Red team 15 (docs/redteam15.md; scope c9d717a..bc9bf65): a `Comm` aborted inside um's stream
//! callback owes its `ncclCommAbort` to the next call, `wait`, `abort` or drop on an ordinary
//! thread, and a rank that leaves the ledger no longer clears the pending calls of two other
//! local ranks. Written by a fresh helper; not yet run on a GPU. Run each alone (`--exact`).
#![allow(clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, Instant};

use um::kernels::testing::spin_then_add;
use um::nccl::{Comm, CommOptions, Group, ReduceOp};
use um::{Context, Error, Managed, StreamOptions};

mod common;
use common::waker::{ActingWaker, wait_until_woken};
use common::{serial, watchdog};

/// `n` devices and a communicator on each (a 5 s time limit), or `None` (after saying why) where
/// the machine has fewer devices or no NCCL.
fn world(n: usize) -> Option<(Vec<Context>, Vec<Comm>)> {
    if um::device_count().unwrap_or(0) < n {
        eprintln!("skipped: fewer than {n} devices");
        return None;
    }
    let ctxs: Vec<Context> = (0..n).map(|i| Context::new(i).expect("context")).collect();
    let options = CommOptions::new().timeout(Duration::from_secs(5));
    let Ok(comms) = Comm::init_all(&ctxs, options) else {
        eprintln!("skipped: no NCCL");
        return None;
    };
    Some((ctxs, comms))
}

/// Attempt 2a (deadlock, undocumented). A waker aborts rank 0 while an all-reduce of rank 0 is
/// queued behind the callback; rank 1 never makes it. Inside the callback the communicator is
/// only *marked* aborted (no `ncclCommAbort`), and nothing aborts it later: `Comm::wait` is
/// `Err(CommunicatorAborted)` at once, `abort()` is a no-op, `Drop` returns early. So rank 0's
/// NCCL kernel waits for rank 1 for ever, and every later wait for device 0 (`wait_idle`, a
/// `Blas` drop, the last `Context` handle's drop, which synchronizes before unloading modules)
/// hangs. Expected after a fix (the real abort deferred to the next call or drop on an
/// ordinary thread): stream 0 is idle within 10 s of `comm0.wait`. The test releases the kernel
/// at the end (rank 1's matching all-reduce), so that today it fails instead of hanging.
#[test]
#[ignore = "needs two CUDA devices and NCCL"]
fn a_comm_aborted_by_a_waker_has_its_kernels_aborted_later_on_an_ordinary_thread() {
    let _serial = serial();
    let _dog = watchdog("red team 15, attempt 2a");
    let Some((ctxs, mut comms)) = world(2) else {
        return;
    };
    let comm1 = comms.pop().expect("rank 1");
    let comm0 = comms.pop().expect("rank 0");
    let shared = Arc::new(Mutex::new(comm0));
    let in_waker = Arc::clone(&shared);
    let state = ActingWaker::new(move || {
        in_waker.lock().expect("lock").abort(); // marked, not aborted
        "aborted in the callback".to_owned()
    });
    let waker = Waker::from(Arc::clone(&state));
    let busy = Managed::<[f32]>::zeroed_slice(&ctxs[0], 1).expect("alloc");
    // Mirrored: NCCL takes no unified memory without concurrent managed access (the
    // emulated part of run.sh refuses it with `CollectiveStorage`).
    let x0 = Managed::from_slice_mirrored(&ctxs[0], &[1.0f32; 256]).expect("alloc");
    let x1 = Managed::from_slice_mirrored(&ctxs[1], &[1.0f32; 256]).expect("alloc");
    let went_idle = ctxs[0].with_stream(StreamOptions::new(), |s0| {
        ctxs[1].with_stream(StreamOptions::new(), |s1| {
            let (mut busy, mut x0, mut x1) = (busy.attach(s0)?, x0.attach(s0)?, x1.attach(s1)?);
            {
                // Warm-up: the connections exist, so a lone rank's call only enqueues.
                let c0 = shared.lock().expect("lock");
                let mut g = Group::new();
                g.all_reduce_in_place(&c0, s0, &mut x0, ReduceOp::Sum)?;
                g.all_reduce_in_place(&comm1, s1, &mut x1, ReduceOp::Sum)?;
                g.launch()?.wait(Duration::from_secs(10))?;
            }
            spin_then_add(s0, &mut busy, 1.0, 300_000_000)?;
            let mut fut = std::pin::pin!(busy.sync_async());
            let mut cx = TaskContext::from_waker(&waker);
            assert!(fut.as_mut().poll(&mut cx).is_pending());
            shared
                .lock()
                .expect("lock")
                .all_reduce_in_place(s0, &mut x0, ReduceOp::Sum)?; // behind the callback
            wait_until_woken(&state.woke);
            let _ = matches!(fut.as_mut().poll(&mut cx), Poll::Ready(_));
            let waited = shared
                .lock()
                .expect("lock")
                .wait(s0, Duration::from_secs(3));
            eprintln!("comm0.wait after the waker's abort: {waited:?}");
            let t = Instant::now();
            let mut idle = false;
            while t.elapsed() < Duration::from_secs(10) {
                if s0.is_idle().unwrap_or(true) {
                    idle = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // Release rank 0's kernel today (rank 1's matching call), so the test ends.
            if !idle {
                let _ = comm1.all_reduce_in_place(s1, &mut x1, ReduceOp::Sum);
                let _ = comm1.wait(s1, Duration::from_secs(10));
            }
            Ok(idle)
        })
    });
    // An early `Err` is named here, before the waker's state (which then never ran).
    let went_idle = went_idle.expect("the scopes");
    eprintln!("{}", state.out());
    assert!(
        went_idle,
        "finding: the communicator aborted in the callback kept its kernel waiting for a peer; \
         nothing could abort it afterwards"
    );
}

/// Attempt 2c (UB candidate: a size mismatch between local ranks reaches NCCL). Three local
/// ranks; rank 0 sends 10 floats to rank 1 (pending in the ledger); rank 2's `Comm` is dropped
/// (`leave(2)` clears every pending entry, also the pair (0, 1)); rank 1's receive of 20 is
/// then accepted. The same wipe follows a `Comm::init_rank` of a remote rank refused in a
/// waker (its `Member` guard leaves; see `ledger_wipe_test.rs`). The receive is larger than the
/// send, so that today's failure writes in bounds. Expected: `Err(CollectiveMismatch)`.
#[test]
#[ignore = "needs three CUDA devices and NCCL"]
fn a_rank_that_leaves_does_not_clear_the_pending_calls_of_two_other_local_ranks() {
    let _serial = serial();
    let _dog = watchdog("red team 15, attempt 2c");
    let Some((ctxs, mut comms)) = world(3) else {
        return;
    };
    let comm2 = comms.pop().expect("rank 2");
    let comm1 = comms.pop().expect("rank 1");
    let comm0 = comms.pop().expect("rank 0");
    let a = Managed::from_slice(&ctxs[0], &[1.0f32; 10]).expect("alloc");
    let b = Managed::from_slice(&ctxs[1], &[0.0f32; 20]).expect("alloc");
    let (w0, w1) = (
        Managed::from_slice(&ctxs[0], &[0.0f32; 1]).expect("a"),
        Managed::from_slice(&ctxs[1], &[0.0f32; 1]).expect("b"),
    );
    let got = ctxs[0].with_stream(StreamOptions::new(), |s0| {
        ctxs[1].with_stream(StreamOptions::new(), |s1| {
            let (a, mut b, mut w0, mut w1) =
                (a.attach(s0)?, b.attach(s1)?, w0.attach(s0)?, w1.attach(s1)?);
            {
                // Warm-up of the pair's connection.
                let mut g = Group::new();
                g.send(&comm0, s0, &w0, 1)?;
                g.recv(&comm1, s1, &mut w1, 0)?;
                g.launch()?.wait(Duration::from_secs(10))?;
            }
            let _ = &mut w0;
            comm0.send(s0, &a, 1)?; // pending: rank 1 has not received
            drop(comm2); // leave(2): the ledger forgets the pending send
            let r = comm1.recv(s1, &mut b, 0);
            let _ = comm1.wait(s1, Duration::from_secs(3));
            let _ = comm0.wait(s0, Duration::from_secs(3));
            Ok(r)
        })
    });
    let r = got.expect("the scopes");
    assert!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "finding: a receive of 20 met a pending send of 10 after another rank left: {r:?}"
    );
}
