//! NCCL collectives on owned buffers, on every GPU of the machine.
//!
//! Needs two GPUs and NCCL. The GPU run script runs this binary only where `nvidia-smi` lists
//! two or more GPUs ("skipped" elsewhere); run with `--include-ignored` on one GPU, it fails.
//! The multi-process tests run ranks as child processes of this binary (one per GPU, over
//! loopback), with `NCCL_NVLS_ENABLE=0` as every environment here has it.
//!
//! Aborts and the agreement ledger against a hostile user of the safe API: ids built to
//! differ only where NCCL does not look but hash alike to NCCL (two CPU tests pin the ports of
//! NCCL's hash) are one communicator to the ledger; a buffer handed off while its collective
//! runs is not given back after an abort; a nonblocking communicator waiting for a rank of its
//! own thread returns within its limit; a group wait that finds one rank aborted aborts the
//! others; a communicator aborted by a waker (inside um's stream callback) has its
//! `ncclCommAbort` made later, on an ordinary thread; a rank that leaves does not clear the
//! pending calls of two other local ranks (three GPUs; skipped on two). These six GPU tests
//! skip themselves (saying why) without the devices or NCCL; each can be run alone
//! (`--exact`), and under the sanitizers `run.sh` skips them as it does the killed-rank test:
//! they end in aborted communicators and bound their peers' waits by times that the tools'
//! slowdown does not keep.
#![allow(clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::Command;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, Instant};

use common::waker::{ActingWaker, wait_until_woken};
use common::{Contents, watchdog};
use um::nccl::{Comm, CommOptions, Group, Launched, ReduceOp, UniqueId};
use um::{Context, Error, HostOwned, Managed, Storage, Stream, StreamOptions, StreamOwned};
use um_test_kernels::testing::spin_then_add;

const WAIT: Duration = Duration::from_secs(60);

/// One test at a time on the GPUs: NCCL kernels of two communicators that take turns in
/// different orders on two GPUs can wait for each other, and the timing checks want the GPUs to
/// themselves. Held by every test (and so by `devices`' callers) for its whole run.
use crate::common::serial;

fn devices() -> Vec<Context> {
    let n = um::device_count().unwrap_or(0);
    assert!(
        n >= 2,
        "this test needs two CUDA devices, this machine has {n}"
    );
    if let Err(e) = um::nccl::nccl() {
        panic!("this test needs NCCL: {e}");
    }
    (0..n).map(|i| Context::new(i).expect("device")).collect()
}

type Floats<M> = um::Result<Managed<[f32], HostOwned, M>>;

/// A constructor of one storage: `len` elements, element `i` set to `f(i)`.
type FromFn<M> = fn(&Context, usize, &dyn Fn(usize) -> f32) -> Floats<M>;

/// How a test allocates buffers of one storage.
struct Alloc<M: Storage> {
    name: &'static str,
    from_fn: FromFn<M>,
}

fn mirrored() -> Alloc<um::Mirror> {
    Alloc {
        name: "mirrored",
        from_fn: |c, n, f| Managed::from_fn_mirrored(c, n, f),
    }
}
fn unified() -> Alloc<um::Unified> {
    Alloc {
        name: "unified",
        from_fn: |c, n, f| Managed::from_fn(c, n, f),
    }
}
fn device() -> Alloc<um::Device> {
    Alloc {
        name: "device",
        from_fn: |c, n, f| Managed::from_slice_device(c, &(0..n).map(f).collect::<Vec<_>>()),
    }
}
fn coherent() -> Alloc<um::Coherent> {
    Alloc {
        name: "coherent",
        from_fn: |c, n, f| Managed::from_fn_coherent(c, n, f),
    }
}

/// Communicators of the first two GPUs with a time limit short enough for a test that waits
/// for a peer that never comes. The limit bounds creation too: a test that runs alone under
/// memcheck (a `leaks_` run) is the process's first NCCL user, and creation there took over
/// 20 s (2x H200).
fn two_with_short_limit(ctxs: &[Context]) -> Vec<Comm> {
    let limit = if std::env::var_os("UM_SANITIZE").is_some() {
        120
    } else {
        20
    };
    let options = CommOptions::new().timeout(Duration::from_secs(limit));
    Comm::init_all(&ctxs[..2], options).expect("communicators")
}

/// Rank `r`'s value at `i`: small integers, so that every sum is exact in f32.
fn value(r: usize, i: usize) -> f32 {
    ((r + 1) * (i % 7 + 1)) as f32
}

/// Every collective once, all ranks in one group per collective, in buffers of storage `M`,
/// checked element by element against the CPU.
fn every_collective<M: Contents>(ctxs: &[Context], comms: &[Comm], alloc: &Alloc<M>) {
    let n = comms.len();
    let len = 4099;
    let mk = |ctx: &Context, len: usize, f: &dyn Fn(usize) -> f32| {
        (alloc.from_fn)(ctx, len, f).expect("alloc")
    };
    let mut inputs = Vec::new();
    for (r, ctx) in ctxs.iter().enumerate() {
        inputs.push((
            mk(ctx, len, &|i| value(r, i)),                                 // send
            mk(ctx, len, &|_| 0.0),                                         // all_reduce out
            mk(ctx, len, &|i| value(r, i)),                                 // all_reduce in place
            mk(ctx, len * n, &|_| 0.0),                                     // all_gather out
            mk(ctx, len * n, &|i| value(r, i)),                             // reduce_scatter in
            mk(ctx, len, &|_| 0.0),                                         // reduce_scatter out
            mk(ctx, len, &|i| if r == n - 1 { value(r, i) } else { -1.0 }), // broadcast in place
            mk(ctx, len, &|_| 0.0),                                         // reduce out (root 0)
            mk(ctx, len, &|_| 0.0), // recv from the previous rank
        ));
    }
    let results = Context::with_stream_set_across(ctxs, StreamOptions::new(), |streams| {
        let mut on = Vec::new();
        for (b, s) in inputs.into_iter().zip(streams) {
            on.push((
                b.0.attach(s)?,
                b.1.attach(s)?,
                b.2.attach(s)?,
                b.3.attach(s)?,
                b.4.attach(s)?,
                b.5.attach(s)?,
                b.6.attach(s)?,
                b.7.attach(s)?,
                b.8.attach(s)?,
            ));
        }
        {
            let mut g = Group::new();
            for ((b, s), c) in on.iter_mut().zip(streams).zip(comms) {
                g.all_reduce(c, s, &b.0, &mut b.1, ReduceOp::Sum)?;
            }
            g.launch()?.wait(WAIT)?;
        }
        {
            // Three collectives per rank in one group: more calls than a group keeps inline
            // (four), so the rest go to its list on the heap, in order.
            let mut g = Group::new();
            for ((b, s), c) in on.iter_mut().zip(streams).zip(comms) {
                let (b0, b2, b3, b4, b5) = (&b.0, &mut b.2, &mut b.3, &b.4, &mut b.5);
                g.all_reduce_in_place(c, s, b2, ReduceOp::Max)?;
                g.all_gather(c, s, b0, b3)?;
                g.reduce_scatter(c, s, b4, b5, ReduceOp::Sum)?;
            }
            assert_eq!(g.len(), 3 * n);
            g.launch()?;
        }
        {
            let mut g = Group::new();
            for ((b, s), c) in on.iter_mut().zip(streams).zip(comms) {
                g.broadcast_in_place(c, s, &mut b.6, n - 1)?;
            }
            g.launch()?;
        }
        {
            let mut g = Group::new();
            for ((b, s), c) in on.iter_mut().zip(streams).zip(comms) {
                g.reduce(c, s, &b.0, &mut b.7, ReduceOp::Sum, 0)?;
            }
            g.launch()?;
        }
        {
            // A ring: every rank sends to the next and receives from the previous.
            let mut g = Group::new();
            for (r, ((b, s), c)) in on.iter_mut().zip(streams).zip(comms).enumerate() {
                let (b0, b8) = (&b.0, &mut b.8);
                g.send(c, s, b0, (r + 1) % n)?;
                g.recv(c, s, b8, (r + n - 1) % n)?;
            }
            let launched = g.launch()?;
            launched.wait(WAIT)?;
        }
        let mut back = Vec::new();
        for (b, s) in on.into_iter().zip(streams) {
            back.push(s.sync_all(vec![b.0, b.1, b.2, b.5, b.6, b.7, b.8])?);
            back.push(s.sync_all(vec![b.3, b.4])?);
        }
        Ok(back)
    })
    .unwrap_or_else(|e| panic!("{} storage: {e}", alloc.name));
    let results: Vec<Vec<Vec<f32>>> = results
        .iter()
        .map(|group| group.iter().map(|b| M::contents(b)).collect())
        .collect();
    let sum = |i: usize| (0..n).map(|r| value(r, i)).sum::<f32>();
    for r in 0..n {
        let small = &results[2 * r];
        let big = &results[2 * r + 1];
        let what = |k: &str| format!("{} storage, rank {r}, {k}", alloc.name);
        assert!(
            (0..len).all(|i| small[1][i] == sum(i)),
            "{}",
            what("all_reduce")
        );
        assert!(
            (0..len).all(|i| small[2][i] == value(n - 1, i)),
            "{}",
            what("all_reduce max in place")
        );
        assert!(
            (0..len * n).all(|i| big[0][i] == value(i / len, i % len)),
            "{}",
            what("all_gather")
        );
        assert!(
            (0..len).all(|i| small[3][i] == sum(r * len + i)),
            "{}",
            what("reduce_scatter")
        );
        assert!(
            (0..len).all(|i| small[4][i] == value(n - 1, i)),
            "{}",
            what("broadcast")
        );
        if r == 0 {
            assert!(
                (0..len).all(|i| small[5][i] == sum(i)),
                "{}",
                what("reduce at the root")
            );
        }
        let prev = (r + n - 1) % n;
        assert!(
            (0..len).all(|i| small[6][i] == value(prev, i)),
            "{}",
            what("send/recv ring")
        );
    }
}

#[test]
#[ignore = "needs two CUDA devices"]
fn every_collective_matches_the_cpu_on_every_storage() {
    let _serial = serial();
    let ctxs = devices();
    for options in [CommOptions::new(), CommOptions::new().blocking(true)] {
        let comms = Comm::init_all(&ctxs, options).expect("communicators");
        println!(
            "{} ranks, blocking = {}",
            comms.len(),
            options.is_blocking()
        );
        every_collective(&ctxs, &comms, &mirrored());
        every_collective(&ctxs, &comms, &device());
        if ctxs.iter().all(|c| c.info().concurrent_managed_access) {
            every_collective(&ctxs, &comms, &unified());
            every_collective(&ctxs, &comms, &coherent());
        } else {
            // Unified memory is associated with one stream: refused where NCCL's own streams may
            // not touch it.
            let buf = Managed::from_fn(&ctxs[0], 8, |_| 1.0f32).expect("alloc");
            let err = ctxs[0]
                .with_stream(StreamOptions::new(), |s| {
                    let mut b = buf.attach(s)?;
                    let e = comms[0]
                        .all_reduce_in_place(s, &mut b, ReduceOp::Sum)
                        .expect_err("refused");
                    b.sync().map(|_| e)
                })
                .expect("stream");
            assert!(matches!(err, Error::CollectiveStorage { .. }), "{err}");
        }
    }
}

#[test]
#[ignore = "needs two CUDA devices"]
fn sizes_ranks_and_devices_are_refused_before_anything_is_enqueued() {
    let _serial = serial();
    let ctxs = devices();
    let comms = Comm::init_all(&ctxs[..2], CommOptions::new()).expect("communicators");
    let mk = |ctx: &Context, len| Managed::from_fn_mirrored(ctx, len, |i| i as f32).expect("alloc");
    let (a, b, c) = (mk(&ctxs[0], 8), mk(&ctxs[0], 15), mk(&ctxs[0], 17));
    let other = mk(&ctxs[1], 8);
    ctxs[0]
        .with_stream(StreamOptions::new(), |s| {
            let (a, mut b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
            let comm = &comms[0];
            let e = comm.all_gather(s, &a, &mut b).expect_err("15 is not 2 x 8");
            assert!(
                matches!(
                    e,
                    Error::CollectiveSize {
                        collective: "all_gather",
                        ..
                    }
                ),
                "{e}"
            );
            let e = comm
                .reduce_scatter(s, &c, &mut b, ReduceOp::Sum)
                .expect_err("17 is not 2 x 15");
            assert!(matches!(e, Error::CollectiveSize { .. }), "{e}");
            let e = comm
                .all_reduce(s, &a, &mut c, ReduceOp::Sum)
                .expect_err("8 and 17");
            assert!(matches!(e, Error::CollectiveSize { .. }), "{e}");
            let e = comm
                .broadcast_in_place(s, &mut c, 2)
                .expect_err("root 2 of 2");
            assert!(matches!(e, Error::InvalidRank { what: "root", .. }), "{e}");
            let e = comm.send(s, &a, 0).expect_err("to itself, outside a group");
            assert!(matches!(e, Error::InvalidRank { what: "peer", .. }), "{e}");
            let e = comm.recv(s, &mut b, 5).expect_err("peer 5 of 2");
            assert!(matches!(e, Error::InvalidRank { .. }), "{e}");
            // A stream of device 0 for the communicator of device 1.
            let e = comms[1]
                .all_reduce_in_place(s, &mut c, ReduceOp::Sum)
                .expect_err("device 0's stream");
            assert!(
                matches!(
                    e,
                    Error::WrongDevice {
                        stream: 0,
                        communicator: 1
                    }
                ),
                "{e}"
            );
            s.sync_all((a, b, c)).map(drop)
        })
        .expect("stream work");
    // Nothing was enqueued or recorded: a correct pair of all-reduces still meets.
    let (x, y) = (mk(&ctxs[0], 8), other);
    let (x, y) = Context::with_stream_set_across(&ctxs[..2], StreamOptions::new(), |streams| {
        let (mut x, mut y) = (x.attach(&streams[0])?, y.attach(&streams[1])?);
        let mut g = Group::new();
        g.all_reduce_in_place(&comms[0], &streams[0], &mut x, ReduceOp::Sum)?;
        g.all_reduce_in_place(&comms[1], &streams[1], &mut y, ReduceOp::Sum)?;
        g.launch()?.wait(WAIT)?;
        Ok((x.sync()?, y.sync()?))
    })
    .expect("the pair");
    assert!((0..8).all(|i| x[i] == 2.0 * i as f32 && y[i] == x[i]));
    // One device twice is refused before NCCL sees it.
    let twice = [ctxs[0].clone(), ctxs[0].clone()];
    assert!(matches!(
        Comm::init_all(&twice, CommOptions::new()),
        Err(Error::Bootstrap { .. })
    ));
}

#[test]
#[ignore = "needs two CUDA devices"]
fn ranks_of_one_process_must_call_the_same_sizes_or_it_leaks_the_stuck_buffer() {
    let _serial = serial();
    let ctxs = devices();
    let comms = two_with_short_limit(&ctxs);
    let mk = |ctx: &Context, len| Managed::from_fn_mirrored(ctx, len, |_| 1.0f32).expect("alloc");
    let (x, warm, y) = (mk(&ctxs[0], 1000), mk(&ctxs[1], 1000), mk(&ctxs[1], 2000));
    Context::with_stream_set_across(&ctxs[..2], StreamOptions::new(), |streams| {
        let (mut x, mut warm, mut y) = (
            x.attach(&streams[0])?,
            warm.attach(&streams[1])?,
            y.attach(&streams[1])?,
        );
        // Within one group: refused whole, nothing enqueued.
        let mut g = Group::new();
        g.all_reduce_in_place(&comms[0], &streams[0], &mut x, ReduceOp::Sum)?;
        g.all_reduce_in_place(&comms[1], &streams[1], &mut y, ReduceOp::Sum)?;
        let e = g.launch().expect_err("1000 and 2000 elements");
        assert!(matches!(e, Error::CollectiveMismatch { .. }), "{e}");
        // A matching pair meets (and sets up NCCL's connections for this size).
        let mut g = Group::new();
        g.all_reduce_in_place(&comms[0], &streams[0], &mut x, ReduceOp::Sum)?;
        g.all_reduce_in_place(&comms[1], &streams[1], &mut warm, ReduceOp::Sum)?;
        g.launch()?.wait(WAIT)?;
        // From one rank at a time (as two threads would): the second, of another size, is
        // refused before NCCL could hand rank 0 the address of its buffer.
        comms[0].all_reduce_in_place(&streams[0], &mut x, ReduceOp::Sum)?;
        let e = comms[1]
            .all_reduce_in_place(&streams[1], &mut y, ReduceOp::Sum)
            .expect_err("rank 0's second collective had 1000 elements");
        assert!(
            matches!(
                e,
                Error::CollectiveMismatch {
                    rank: 1,
                    other: 0,
                    ..
                }
            ),
            "{e}"
        );
        // Rank 0's all-reduce waits for a peer that never comes: the bounded wait says so.
        let t0 = Instant::now();
        let e = comms[0]
            .wait(&streams[0], Duration::from_secs(5))
            .expect_err("no peer");
        assert!(t0.elapsed() < Duration::from_secs(20), "bounded");
        println!("fault reported: {e}");
        assert!(streams[0].is_poisoned());
        assert!(matches!(x.sync(), Err(Error::StreamPoisoned)));
        // Rank 1 enqueued nothing after the pair: its buffers come back.
        streams[1].sync_all((warm, y)).map(drop)
    })
    .expect("stream work");
}

/// A communicator that enqueued on three streams poisons all three when it is aborted: it remembers
/// each stream once, by comparing handles (`Stream::is_poisoned_by`), since the host-time change of
/// 2026-11-23. The three streams' buffers are leaked on purpose (rule 164), hence `leaks_` in the
/// name: memcheck checks this test for everything but leaks (`xtask/src/run.rs`).
#[test]
#[ignore = "needs two CUDA devices"]
fn an_abort_poisons_every_stream_it_enqueued_on_and_leaks_their_buffers() {
    let _serial = serial();
    let ctxs = devices();
    let comms = two_with_short_limit(&ctxs);
    let mk = |ctx: &Context| Managed::from_fn_mirrored(ctx, 1000, |_| 1.0f32).expect("alloc");
    let (x, y, z, warm) = (mk(&ctxs[0]), mk(&ctxs[0]), mk(&ctxs[0]), mk(&ctxs[1]));
    let (b_poisoned, c_poisoned) =
        Context::with_stream_set_across(&ctxs[..2], StreamOptions::new(), |streams| {
            let (mut x, mut warm) = (x.attach(&streams[0])?, warm.attach(&streams[1])?);
            // A matching pair first: NCCL's connections for this size exist.
            let mut g = Group::new();
            g.all_reduce_in_place(&comms[0], &streams[0], &mut x, ReduceOp::Sum)?;
            g.all_reduce_in_place(&comms[1], &streams[1], &mut warm, ReduceOp::Sum)?;
            g.launch()?.wait(WAIT)?;
            let poisoned = ctxs[0].with_stream(StreamOptions::new(), |b| {
                ctxs[0].with_stream(StreamOptions::new(), |c| {
                    let (mut y, mut z) = (y.attach(b)?, z.attach(c)?);
                    // Rank 0 alone, on three streams (one twice); rank 1 never calls.
                    comms[0].all_reduce_in_place(&streams[0], &mut x, ReduceOp::Sum)?;
                    comms[0].all_reduce_in_place(b, &mut y, ReduceOp::Sum)?;
                    comms[0].all_reduce_in_place(c, &mut z, ReduceOp::Sum)?;
                    comms[0].all_reduce_in_place(b, &mut y, ReduceOp::Sum)?;
                    let e = comms[0]
                        .wait(&streams[0], Duration::from_secs(5))
                        .expect_err("no peer");
                    println!("fault reported: {e}");
                    let seen = (b.is_poisoned(), c.is_poisoned());
                    assert!(matches!(y.sync(), Err(Error::StreamPoisoned)));
                    assert!(matches!(z.sync(), Err(Error::StreamPoisoned)));
                    Ok(seen)
                })
            })?;
            assert!(streams[0].is_poisoned());
            assert!(matches!(x.sync(), Err(Error::StreamPoisoned)));
            streams[1].sync_all((warm,)).map(drop)?;
            Ok(poisoned)
        })
        .expect("stream work");
    assert!(b_poisoned, "the second stream was not poisoned");
    assert!(c_poisoned, "the third stream was not poisoned");
    assert!(comms[0].is_aborted());
}

/// A time limit of `Duration::MAX` is a wait without end, not a panic: creation, a group's launch
/// and wait, `Comm::wait` and the drop's flush (`now + limit` once overflowed in creation and in
/// every wait).
#[test]
#[ignore = "needs two CUDA devices"]
fn a_time_limit_of_duration_max_is_a_wait_without_end_not_a_panic() {
    let _serial = serial();
    let ctxs = devices();
    let ctxs = &ctxs[..2];
    let comms =
        Comm::init_all(ctxs, CommOptions::new().timeout(Duration::MAX)).expect("communicators");
    let bufs: Vec<_> = ctxs
        .iter()
        .enumerate()
        .map(|(r, c)| Managed::from_fn_mirrored(c, 1024, |i| value(r, i)).expect("alloc"))
        .collect();
    let back = Context::with_stream_set_across(ctxs, StreamOptions::new(), |streams| {
        let mut on = bufs
            .into_iter()
            .zip(streams)
            .map(|(b, s)| b.attach(s))
            .collect::<um::Result<Vec<_>>>()?;
        let mut g = Group::new();
        for ((b, s), c) in on.iter_mut().zip(streams).zip(&comms) {
            g.all_reduce_in_place(c, s, b, ReduceOp::Sum)?;
        }
        g.launch()?.wait(Duration::MAX)?;
        for (s, c) in streams.iter().zip(&comms) {
            c.wait(s, Duration::MAX)?;
        }
        on.into_iter()
            .zip(streams)
            .map(|(b, s)| s.sync_all(vec![b]))
            .collect::<um::Result<Vec<_>>>()
    })
    .expect("an all-reduce with endless limits");
    for got in &back {
        assert!((0..1024).all(|i| got[0][i] == value(0, i) + value(1, i)));
    }
    drop(comms);
}

#[test]
#[ignore = "needs two CUDA devices"]
fn one_thread_per_gpu_each_with_its_own_communicator() {
    let _serial = serial();
    let ctxs = devices();
    let comms = Comm::init_all(&ctxs, CommOptions::new()).expect("communicators");
    let n = comms.len();
    std::thread::scope(|scope| {
        for (r, comm) in comms.into_iter().enumerate() {
            let ctx = ctxs[r].clone();
            scope.spawn(move || {
                let data =
                    Managed::from_fn_mirrored(&ctx, 1 << 20, |i| value(r, i)).expect("alloc");
                let data = ctx
                    .with_stream(StreamOptions::new(), |s| {
                        let mut d = data.attach(s)?;
                        for _ in 0..3 {
                            comm.all_reduce_in_place(s, &mut d, ReduceOp::Avg)?;
                        }
                        comm.wait(s, WAIT)?;
                        d.sync()
                    })
                    .expect("rank work");
                let avg = |i: usize| (0..n).map(|q| value(q, i)).sum::<f32>() / n as f32;
                assert!(
                    (0..1 << 20)
                        .step_by(4093)
                        .all(|i| (data[i] - avg(i)).abs() < 1e-4)
                );
            });
        }
    });
}

// ------------------------------------------------------------------ several processes

const CHILD: &str = "UM_NCCL_TEST_CHILD";

/// Runs `test` of this binary once per rank, as torchrun would; returns each rank's exit status
/// and output.
fn spawn_ranks(
    test: &str,
    world: usize,
    scenario: &str,
) -> Vec<(std::process::ExitStatus, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let exe = std::env::current_exe().expect("test binary");
    let test = common::test_path(test);
    let children: Vec<_> = (0..world)
        .map(|rank| {
            Command::new(&exe)
                .args([
                    test.as_str(),
                    "--exact",
                    "--include-ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, scenario)
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("NCCL_NVLS_ENABLE", "0")
                // Piped, so that `wait_with_output` returns what the rank printed.
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn a rank")
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("rank output");
            (
                out.status,
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            )
        })
        .collect()
}

fn child_scenario() -> Option<String> {
    std::env::var(CHILD).ok()
}

#[test]
#[ignore = "needs two CUDA devices"]
fn ranks_in_separate_processes_meet_over_loopback() {
    let _serial = serial();
    if let Some(scenario) = child_scenario() {
        assert_eq!(scenario, "meet");
        let comm = Comm::from_env(CommOptions::new().timeout(WAIT))
            .expect("communicator from the environment");
        let (r, n) = (comm.rank(), comm.world_size());
        let ctx = comm.context().clone();
        let data = Managed::from_fn_mirrored(&ctx, 1 << 16, |i| value(r, i)).expect("alloc");
        let data = ctx
            .with_stream(StreamOptions::new(), |s| {
                let mut d = data.attach(s)?;
                comm.all_reduce_in_place(s, &mut d, ReduceOp::Sum)?;
                comm.wait(s, WAIT)?;
                d.sync()
            })
            .expect("the all-reduce");
        assert!((0..1 << 16).all(|i| data[i] == (0..n).map(|q| value(q, i)).sum::<f32>()));
        println!("rank {r} of {n}: all-reduce checked");
        return;
    }
    let world = devices().len();
    let ranks = spawn_ranks(
        "ranks_in_separate_processes_meet_over_loopback",
        world,
        "meet",
    );
    for (r, (status, out)) in ranks.iter().enumerate() {
        println!("--- rank {r} ---\n{out}");
        assert!(status.success(), "rank {r} failed: {status}");
        assert!(out.contains("all-reduce checked"), "rank {r} did not check");
    }
}

#[test]
#[ignore = "needs two CUDA devices"]
fn a_rank_killed_mid_collective_is_an_error_within_the_time_limit() {
    let _serial = serial();
    const LEN: usize = 16 << 20; // 64 MiB of f32 per buffer
    if let Some(scenario) = child_scenario() {
        assert_eq!(scenario, "kill");
        let boot = um::nccl::Bootstrap::from_env().expect("environment");
        let ctx = Context::new(boot.local_rank()).expect("device");
        let (free_before, _) = ctx.mem_info().expect("free memory");
        let id = boot.unique_id().expect("unique id");
        let comm = Comm::init_rank(
            &ctx,
            &id,
            boot.rank(),
            boot.world_size(),
            CommOptions::new().timeout(WAIT),
        )
        .expect("communicator");
        let data = Managed::from_fn_mirrored(&ctx, LEN, |i| i as f32).expect("alloc");
        let limit = Duration::from_secs(15);
        let outcome = ctx.with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            // One collective that every rank completes: connections are up.
            comm.all_reduce_in_place(s, &mut d, ReduceOp::Sum)?;
            comm.wait(s, WAIT)?;
            if comm.rank() == 1 {
                // Dies before it joins the collective that rank 0 enqueues next, as a crashed
                // trainer would: rank 0's all-reduce can never complete. (Dying just after its
                // own enqueue is no test: on NVLink both ranks finished that all-reduce before
                // the abort, H200, 2026-11-22.)
                println!("rank 1: killing itself mid-collective");
                std::process::abort();
            }
            comm.all_reduce_in_place(s, &mut d, ReduceOp::Sum)?;
            let t0 = Instant::now();
            let err = comm.wait(s, limit).expect_err("rank 1 is dead");
            let took = t0.elapsed();
            println!("fault reported: {err} (after {took:?})");
            assert!(took < limit + Duration::from_secs(10), "bounded: {took:?}");
            assert!(comm.is_aborted());
            assert!(
                s.is_poisoned(),
                "the stream of the aborted collective is poisoned"
            );
            let again = comm
                .all_reduce_in_place(s, &mut d, ReduceOp::Sum)
                .expect_err("aborted");
            assert!(
                matches!(again, Error::CommunicatorAborted { .. }),
                "{again}"
            );
            // Its buffer is leaked, never handed to the CPU.
            assert!(matches!(d.sync(), Err(Error::StreamPoisoned)));
            Ok(())
        });
        outcome.expect("rank 0's checks");
        drop(comm);
        let (free_after, _) = ctx.mem_info().expect("free memory");
        // The communicator's own memory came back; only the buffer (both halves of a mirror:
        // the device half counts here) is leaked, with some slack for the driver.
        let leaked = LEN * 4;
        let slack = 512 << 20;
        println!("free before {free_before}, after {free_after}, buffer {leaked}");
        assert!(
            free_after + leaked + slack >= free_before,
            "more than the buffer was lost: {free_before} -> {free_after}"
        );
        println!("every drop returned");
        return;
    }
    devices();
    let ranks = spawn_ranks(
        "a_rank_killed_mid_collective_is_an_error_within_the_time_limit",
        2,
        "kill",
    );
    for (r, (status, out)) in ranks.iter().enumerate() {
        println!("--- rank {r} ({status}) ---\n{out}");
    }
    assert!(!ranks[1].0.success(), "rank 1 was to die");
    assert!(ranks[0].0.success(), "rank 0 failed: {}", ranks[0].0);
    assert!(ranks[0].1.contains("fault reported: "));
    assert!(ranks[0].1.contains("every drop returned"));
}

// ---------------------------------------------------------------------------------------------
// NCCL's hash of a unique id, and ids that collide under it (CPU only).

/// NCCL before 2.26 (`getHash` in `misc/utils.cc`, later `include/bitops.h`): DJB2a over the
/// bytes read as `char`s (signed on x86-64, unsigned on aarch64).
fn nccl_hash_before_2_26(bytes: &[u8; 128]) -> u64 {
    let signed = cfg!(target_arch = "x86_64");
    bytes.iter().fold(5381u64, |r, &b| {
        let c = if signed {
            b as i8 as i64 as u64
        } else {
            u64::from(b)
        };
        (r << 5).wrapping_add(r) ^ c
    })
}

/// One step of NCCL 2.26+'s `eatHash`: the mix before each 8-byte chunk is added.
fn mix(acc: &mut [u64; 2]) {
    acc[0] = acc[0].wrapping_add(acc[1]);
    acc[1] ^= acc[0];
    acc[0] ^= acc[0] >> 31;
    acc[0] = acc[0].wrapping_mul(0x9de6_2bbc_8cef_3ce3);
    acc[1] ^= acc[1] >> 32;
    acc[1] = acc[1].wrapping_mul(0x485c_d631_1b59_9e79);
}

#[allow(clippy::unwrap_used)] // an 8-byte slice of a 128-byte array
fn chunk(bytes: &[u8; 128], i: usize) -> u64 {
    u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap())
}

/// `eatHash` of the first `n` chunks, from `getHash`'s start (`{1, 1}`, size 128).
fn eat_chunks(bytes: &[u8; 128], n: usize) -> [u64; 2] {
    let mut acc = [1u64, 1];
    acc[0] ^= 128;
    for i in 0..n {
        mix(&mut acc);
        acc[0] = acc[0].wrapping_add(chunk(bytes, i));
    }
    acc
}

/// NCCL 2.26 and later (`getHash` in `include/bitops.h`: `eatHash`, then `digestHash`).
fn nccl_hash_from_2_26(bytes: &[u8; 128]) -> u64 {
    let acc = eat_chunks(bytes, 16);
    let mut h = acc[0];
    h ^= h >> 31;
    h = h.wrapping_mul(0xbac3_bd56_2846_de6b);
    h = h.wrapping_add(acc[1]);
    h ^= h >> 32;
    h.wrapping_mul(0x995a_187a_14e7_b445)
}

/// An id that differs from `id` only in bytes 104..128 (past NCCL's bootstrap handle, a magic
/// and a socket address, 36 bytes) and that NCCL 2.26+ hashes alike.
fn collide_from_2_26(id: &[u8; 128]) -> [u8; 128] {
    let start = eat_chunks(id, 13);
    let (xa13, xa14, xa15) = (chunk(id, 13), chunk(id, 14), chunk(id, 15));
    let xb13 = xa13 ^ 0x5a;
    let (mut a, mut b) = (start, start);
    mix(&mut a);
    a[0] = a[0].wrapping_add(xa13);
    mix(&mut b);
    b[0] = b[0].wrapping_add(xb13);
    mix(&mut a);
    a[0] = a[0].wrapping_add(xa14);
    mix(&mut b);
    // The last mix makes acc[1] = C * xorshift(acc[1] ^ (acc[0] + acc[1])): pick b's acc[0]
    // so that this operand is a's; the last chunk then makes up acc[0] (added after the mix).
    let k = a[1] ^ a[0].wrapping_add(a[1]);
    let b0 = (k ^ b[1]).wrapping_sub(b[1]);
    let xb14 = b0.wrapping_sub(b[0]);
    b[0] = b0;
    mix(&mut a);
    a[0] = a[0].wrapping_add(xa15);
    mix(&mut b);
    let xb15 = a[0].wrapping_sub(b[0]);
    let mut out = *id;
    out[104..112].copy_from_slice(&xb13.to_le_bytes());
    out[112..120].copy_from_slice(&xb14.to_le_bytes());
    out[120..128].copy_from_slice(&xb15.to_le_bytes());
    out
}

/// An id that differs from `id` only in two adjacent bytes at 40 or later and that NCCL before
/// 2.26 hashes alike (the DJB2a state after the second byte is the same).
fn collide_before_2_26(id: &[u8; 128]) -> Option<[u8; 128]> {
    let signed = cfg!(target_arch = "x86_64");
    let ext = |b: u8| {
        if signed {
            b as i8 as i64 as u64
        } else {
            u64::from(b)
        }
    };
    let byte_of = |v: u64| (0..=255u8).find(|&b| ext(b) == v);
    for p in 40..127 {
        let r = id[..p]
            .iter()
            .fold(5381u64, |r, &b| (r << 5).wrapping_add(r) ^ ext(b));
        let step = |r: u64, b: u8| (r << 5).wrapping_add(r) ^ ext(b);
        let want = step(step(r, id[p]), id[p + 1]);
        for a in (0..=255u8).filter(|a| *a != id[p]) {
            let r1 = step(r, a);
            if let Some(b) = byte_of((r1 << 5).wrapping_add(r1) ^ want) {
                let mut out = *id;
                out[p] = a;
                out[p + 1] = b;
                return Some(out);
            }
        }
    }
    None
}

/// An id NCCL `version` hashes as `id`, that differs from it only past byte 40.
fn colliding_id(id: &[u8; 128], version: (u32, u32, u32)) -> [u8; 128] {
    if version >= (2, 26, 0) {
        collide_from_2_26(id)
    } else {
        collide_before_2_26(id).expect("a two-byte collision of DJB2a")
    }
}

/// Ids like `ncclGetUniqueId`'s: a random magic and a socket address, then zeros.
fn fake_ids() -> Vec<[u8; 128]> {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    (0..64)
        .map(|_| {
            let mut id = [0u8; 128];
            for b in &mut id[..36] {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            id
        })
        .collect()
}

/// NCCL's two hash functions of the 128 id bytes, computed by the C code of NCCL's headers
/// (`getHash` of 2.25.1's and 2.28.3's `bitops.h`, compiled with gcc on x86-64) for the id
/// whose byte `i` is `i * 37 + 11`: the Rust ports above are pinned to them.
#[test]
#[cfg(target_arch = "x86_64")]
fn the_ports_of_nccls_id_hash_agree_with_nccls_c_code() {
    let _serial = crate::common::serial();
    let id: [u8; 128] = std::array::from_fn(|i| (i * 37 + 11) as u8);
    assert_eq!(nccl_hash_before_2_26(&id), GOLDEN_BEFORE_2_26);
    assert_eq!(nccl_hash_from_2_26(&id), GOLDEN_FROM_2_26);
}

const GOLDEN_BEFORE_2_26: u64 = 0x65bb_3b0c_ba52_7185;

const GOLDEN_FROM_2_26: u64 = 0x3002_dcd1_bbe6_653d;

/// Ids built by `colliding_id`, on the CPU: they differ (so um's ledger, keyed by all 128 bytes,
/// gives them two ledgers), they agree on NCCL's bootstrap handle (magic and address: one root),
/// and NCCL hashes them alike (one `commHash`, so one host and one process to NCCL).
#[test]
fn ids_that_differ_only_where_nccl_does_not_look_hash_alike() {
    let _serial = crate::common::serial();
    for id in fake_ids() {
        for version in [(2, 21, 5), (2, 28, 3)] {
            let other = colliding_id(&id, version);
            assert_ne!(other, id);
            assert_eq!(other[..40], id[..40], "the bootstrap handle is kept");
            let hash = if version >= (2, 26, 0) {
                nccl_hash_from_2_26
            } else {
                nccl_hash_before_2_26
            };
            assert_eq!(hash(&other), hash(&id), "NCCL {version:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Aborts and the agreement ledger against a hostile user (GPU).

/// `n` devices and NCCL, or `None` (said) where the machine lacks either.
fn devices_with_nccl(n: usize) -> Option<Vec<Context>> {
    if um::device_count().unwrap_or(0) < n {
        eprintln!("skipped: fewer than {n} devices");
        return None;
    }
    if let Err(e) = um::nccl::nccl() {
        eprintln!("skipped: no NCCL ({e})");
        return None;
    }
    Some((0..n).map(|i| Context::new(i).expect("context")).collect())
}

/// The communicators' time limit: 5 s, or 120 s under a sanitizer, where creating them took
/// longer than 5 s (memcheck, 2x H200).
fn limit() -> Duration {
    Duration::from_secs(if common::under_sanitizer() { 120 } else { 5 })
}

/// Two ranks of one communicator made in this process, one per device (`None`, saying why,
/// without two devices or NCCL).
fn two_ranks() -> Option<(Vec<Context>, Comm, Comm)> {
    let ctxs = devices_with_nccl(2)?;
    let options = CommOptions::new().timeout(limit());
    let mut comms = Comm::init_all(&ctxs[..2], options).expect("communicators");
    let comm1 = comms.pop().expect("rank 1");
    let comm0 = comms.pop().expect("rank 0");
    Some((ctxs, comm0, comm1))
}

/// A rank's part of a group: its communicator, stream and buffer.
type Part<'b, 's, M> = (
    &'b Comm,
    &'b Stream<'s>,
    &'b mut Managed<[f32], StreamOwned<'s>, M>,
);

/// Both ranks all-reduce their buffer in place, in one group, launched and not waited for.
fn all_reduce_both<'b, M0: Storage, M1: Storage>(
    (comm0, s0, x0): Part<'b, '_, M0>,
    (comm1, s1, x1): Part<'b, '_, M1>,
) -> um::Result<Launched<'b>> {
    let mut g = Group::new();
    g.all_reduce_in_place(comm0, s0, x0, ReduceOp::Sum)?;
    g.all_reduce_in_place(comm1, s1, x1, ReduceOp::Sum)?;
    g.launch()
}

/// `UniqueId::from_bytes` is safe, and its documentation says bytes from anywhere are harmless.
/// Rank 0 joins with NCCL's id, rank 1 with one that differs only in its last bytes and that NCCL
/// hashes alike (see the CPU tests): NCCL makes one communicator of them, both ranks in this
/// process (same `commHash`, so same host and process hashes: P2P direct pointers), so um's
/// ledger must see one communicator too; a ledger keyed by the whole 128 bytes would make two
/// ledgers of one member each and check nothing.
///
/// Then a send of 10 floats from rank 0 meets a receive of 20 on rank 1, in one group. (The
/// receive is the larger, so that a library that let it through writes within bounds here; the
/// other way round a peer writes past a buffer.) Expected: the creation is refused, or the group
/// is `Err(CollectiveMismatch)` before anything is enqueued.
///
/// To see NCCL take the two ranks for one process, run with `NCCL_DEBUG=INFO
/// NCCL_DEBUG_SUBSYS=INIT,P2P`: the channels between rank 0 and rank 1 say `P2P/direct pointer`
/// (or `P2P/CUMEM`), not `NET`.
#[test]
#[ignore = "needs two CUDA devices and NCCL"]
fn ids_that_nccl_hashes_alike_are_one_communicator_to_the_agreement_ledger() {
    let _serial = serial();
    let _dog = watchdog("ids that NCCL hashes alike");
    let Some(ctxs) = devices_with_nccl(2) else {
        return;
    };
    let version = um::nccl::nccl().expect("nccl").version();
    let id_a = UniqueId::new().expect("id");
    let id_b = UniqueId::from_bytes(colliding_id(id_a.as_bytes(), version));
    assert_ne!(id_a, id_b, "two ids to um");
    let options = CommOptions::new().timeout(Duration::from_secs(20));
    let (r0, r1) = std::thread::scope(|scope| {
        let h0 = scope.spawn(|| Comm::init_rank(&ctxs[0], &id_a, 0, 2, options));
        let h1 = scope.spawn(|| Comm::init_rank(&ctxs[1], &id_b, 1, 2, options));
        (h0.join().expect("rank 0"), h1.join().expect("rank 1"))
    });
    let (comm0, comm1) = match (r0, r1) {
        (Ok(c0), Ok(c1)) => (c0, c1),
        (r0, r1) => {
            // A fix that refuses such an id at creation passes here.
            println!(
                "creation refused: rank 0 {:?}, rank 1 {:?}",
                r0.err(),
                r1.err()
            );
            return;
        }
    };
    let a = Managed::from_slice_mirrored(&ctxs[0], &[1.0f32; 10]).expect("alloc");
    let b = Managed::from_slice_mirrored(&ctxs[1], &[0.0f32; 20]).expect("alloc");
    let outcome = Context::with_stream_set_across(&ctxs, StreamOptions::new(), |s| {
        let (a, mut b) = (a.attach(&s[0])?, b.attach(&s[1])?);
        let mut g = Group::new();
        g.send(&comm0, &s[0], &a, 1)?;
        g.recv(&comm1, &s[1], &mut b, 0)?;
        let outcome = match g.launch() {
            Err(e) => Err(e),
            Ok(launched) => {
                // Both calls reached NCCL: bound what follows (and abort both).
                let waited = launched.wait(Duration::from_secs(5));
                Ok(format!("{waited:?}"))
            }
        };
        // Buffers of a poisoned stream are leaked by their drop; others are freed.
        drop((a, b));
        Ok(outcome)
    })
    .expect("streams");
    match outcome {
        Err(Error::CollectiveMismatch { .. }) => {}
        Err(e) => panic!("refused, but not as a mismatch: {e}"),
        Ok(waited) => panic!(
            "a send of 10 and a receive of 20 between two ranks of one process reached \
             NCCL (ids that NCCL hashes alike, two ledgers to um); the wait said {waited}"
        ),
    }
}

/// Memory an aborted collective may still touch is never given back (`docs/design.md`,
/// "Faults": "a peer's kernel that holds this buffer's address (same process) may still write it.
/// Such memory must be leaked"). Rank 0 and rank 1 of one process all-reduce 256 MiB each, in one
/// group that is not waited for. While it runs, rank 0's buffer is handed off to another stream
/// `t` of device 0 (its stream is not poisoned yet, so `hand_off` accepts), and rank 0 is
/// aborted: the abort poisons the streams rank 0 enqueued on (`s0`), not `t`. `t` waits for
/// `s0`'s event, which passes as soon as rank 0's kernel quits, while rank 1's kernel, which is
/// not aborted and was given the buffer's address, may still write it.
///
/// Expected (as for the same buffer left on `s0`): `sync` on `t` is `Err(StreamPoisoned)`, the
/// buffer leaked. Were it `Ok`, the test leaks the host buffer itself (so that it frees nothing
/// rank 1 may write), reports whether its contents changed after the CPU got it, and fails.
#[test]
#[ignore = "needs two CUDA devices and NCCL"]
fn a_buffer_handed_off_while_its_collective_runs_is_not_given_back_after_an_abort() {
    let _serial = serial();
    let _dog = watchdog("a buffer handed off while its collective runs");
    let Some((ctxs, comm0, comm1)) = two_ranks() else {
        return;
    };
    let n = common::workload(1 << 26, 1 << 16);
    // Unified memory (the CPU reads the very memory rank 1 writes); mirrors need no
    // concurrent managed access, so fall back to them where it is missing.
    let cma = ctxs.iter().all(|c| c.info().concurrent_managed_access);
    if !cma {
        eprintln!("skipped: needs concurrent managed access for unified memory in a collective");
        return;
    }
    let x0 = Managed::from_fn(&ctxs[0], n, |_| 1.0f32).expect("alloc");
    let x1 = Managed::from_fn(&ctxs[1], n, |_| 1.0f32).expect("alloc");
    let verdict = ctxs[0]
        .with_stream(StreamOptions::new(), |s0| {
            ctxs[0].with_stream(StreamOptions::new(), |t0| {
                ctxs[1].with_stream(StreamOptions::new(), |s1| {
                    let (mut x0, mut x1) = (x0.attach(s0)?, x1.attach(s1)?);
                    // Warm-up: NCCL's connections exist, and both ranks work as they should.
                    all_reduce_both((&comm0, s0, &mut x0), (&comm1, s1, &mut x1))?
                        .wait(Duration::from_secs(30))?;
                    // The attack: both ranks again, not waited for.
                    drop(all_reduce_both(
                        (&comm0, s0, &mut x0),
                        (&comm1, s1, &mut x1),
                    )?);
                    let x0 = x0.hand_off(t0)?; // s0 is not poisoned yet
                    comm0.abort(); // poisons s0, then ncclCommAbort; rank 1 runs on
                    assert!(
                        s0.is_poisoned(),
                        "the abort poisons the collective's stream"
                    );
                    let verdict = match x0.sync() {
                        Err(Error::StreamPoisoned) => None,
                        Err(e) => Some(format!("sync on t0 failed otherwise: {e}")),
                        Ok(host) => {
                            let seen: Vec<f32> = host.iter().step_by(4096).copied().collect();
                            std::thread::sleep(Duration::from_millis(200));
                            let changed = host
                                .iter()
                                .step_by(4096)
                                .zip(&seen)
                                .filter(|(now, then)| now.to_bits() != then.to_bits())
                                .count();
                            // Never freed: rank 1 may still write it.
                            std::mem::forget(host);
                            Some(format!(
                                "the buffer came back to the CPU after its collective's \
                                 abort (handed off to t0 first; t0 is poisoned: {}); {changed} of \
                                 {} sampled elements changed while the CPU owned it",
                                t0.is_poisoned(),
                                seen.len()
                            ))
                        }
                    };
                    // Rank 1 waits for rank 0, which is gone: bounded, then aborted (x1 leaks).
                    let rank1 = comm1.wait(s1, Duration::from_secs(5));
                    println!("rank 1 after rank 0's abort: {rank1:?}");
                    drop(x1);
                    Ok(verdict)
                })
            })
        })
        .expect("streams");
    if let Some(broken) = verdict {
        panic!("{broken}");
    }
}

/// `Comm`'s documentation (rule 159) promises `Error::Timeout` for a thread that calls a
/// collective on one rank and then on another (it waits, on the first, for a peer its own thread
/// would only call afterwards), for nonblocking communicators (the default). On a *blocking*
/// communicator that cannot hold: the first collective sets up NCCL's connections inside
/// `ncclAllReduce` (NCCL 2.22 and later), which waits for the peer with no limit; the
/// documentation names that case under `CommOptions::blocking`.
///
/// Here rank 0's call runs on a thread of its own and rank 1's is made only if rank 0's has not
/// returned 15 s after it began (the time limit is 3 s), which releases it. Expected: rank 0's
/// call returns within 15 s (`Err(Timeout)`, or `Ok` where NCCL connected at creation).
#[test]
#[ignore = "needs two CUDA devices and NCCL"]
fn a_nonblocking_communicator_waiting_for_a_rank_of_its_own_thread_returns_within_the_limit() {
    let _serial = serial();
    let _dog = watchdog("a nonblocking communicator waiting for a rank of its own thread");
    let Some(ctxs) = devices_with_nccl(2) else {
        return;
    };
    let options = CommOptions::new().timeout(Duration::from_secs(3));
    let mut comms = Comm::init_all(&ctxs[..2], options).expect("communicators");
    let comm1 = comms.pop().expect("rank 1");
    let comm0 = comms.pop().expect("rank 0");
    let x0 = Managed::from_slice_mirrored(&ctxs[0], &[1.0f32; 1024]).expect("alloc");
    let x1 = Managed::from_slice_mirrored(&ctxs[1], &[1.0f32; 1024]).expect("alloc");
    let (returned_in, first) = ctxs[0]
        .with_stream(StreamOptions::new(), |s0| {
            ctxs[1].with_stream(StreamOptions::new(), |s1| {
                let (mut x0, mut x1) = (x0.attach(s0)?, x1.attach(s1)?);
                let (returned_in, first, x0, comm0) = std::thread::scope(|scope| {
                    let (tx, rx) = mpsc::channel();
                    let t = Instant::now();
                    let rank0 = scope.spawn(move || {
                        let r = comm0.all_reduce_in_place(s0, &mut x0, ReduceOp::Sum);
                        let _ = tx.send(());
                        (r, x0, comm0)
                    });
                    let returned = rx.recv_timeout(Duration::from_secs(15)).is_ok();
                    let returned_in = returned.then(|| t.elapsed());
                    if !returned {
                        // Release rank 0 (it waits without a limit): rank 1 joins.
                        let _ = comm1.all_reduce_in_place(s1, &mut x1, ReduceOp::Sum);
                    }
                    let (first, x0, comm0) = rank0.join().expect("rank 0's thread");
                    (returned_in, first, x0, comm0)
                });
                println!("rank 0's call: {first:?}, returned in {returned_in:?}");
                if returned_in.is_some() && first.is_ok() {
                    // Connected at creation (an older NCCL): rank 1 completes the collective.
                    comm1.all_reduce_in_place(s1, &mut x1, ReduceOp::Sum)?;
                }
                if returned_in.is_none() || first.is_ok() {
                    comm0.wait(s0, Duration::from_secs(10))?;
                    comm1.wait(s1, Duration::from_secs(10))?;
                }
                drop((x0, x1)); // leaked where poisoned
                drop(comm0);
                Ok((returned_in, first.map_err(|e| e.to_string())))
            })
        })
        .expect("streams");
    let Some(after) = returned_in else {
        panic!(
            "a nonblocking communicator's first collective waited for a rank of the same \
             thread with no limit (still blocked 15 s in, with a time limit of 3 s); released by \
             rank 1's call, it said {first:?}"
        );
    };
    assert!(after < Duration::from_secs(15), "{after:?}");
}

/// `Launched::wait`: "on a timeout or an error every communicator of the group is aborted",
/// also when it finds one of them aborted already. Were it to return
/// `Err(CommunicatorAborted)` at the first aborted one before it waits or aborts anything, the
/// group's other communicators would stay live, and their kernels would wait for the aborted rank
/// for ever (a drop of their buffers then blocks in `cuStreamSynchronize`, without a bound).
///
/// Rank 0's stream is kept busy for 300 ms, so that its all-reduce has not started when rank 0
/// is aborted (right after the launch); rank 1's has, and waits for rank 0. Expected: once
/// `launched.wait` has returned its `Err`, rank 1 is aborted too (or its stream goes idle within
/// 10 s). Otherwise the test aborts rank 1 itself, and fails.
#[test]
#[ignore = "needs two CUDA devices and NCCL"]
fn a_group_wait_that_finds_one_rank_aborted_aborts_the_others() {
    let _serial = serial();
    let _dog = watchdog("a group wait that finds one rank aborted");
    let Some((ctxs, comm0, comm1)) = two_ranks() else {
        return;
    };
    let busy = Managed::from_slice_mirrored(&ctxs[0], &[0.0f32; 1]).expect("alloc");
    let x0 = Managed::from_slice_mirrored(&ctxs[0], &[1.0f32; 4096]).expect("alloc");
    let x1 = Managed::from_slice_mirrored(&ctxs[1], &[1.0f32; 4096]).expect("alloc");
    let (waited, rank1_aborted, idle) = ctxs[0]
        .with_stream(StreamOptions::new(), |s0| {
            ctxs[1].with_stream(StreamOptions::new(), |s1| {
                let (mut busy, mut x0, mut x1) = (busy.attach(s0)?, x0.attach(s0)?, x1.attach(s1)?);
                // Warm-up: the connections exist.
                all_reduce_both((&comm0, s0, &mut x0), (&comm1, s1, &mut x1))?
                    .wait(Duration::from_secs(30))?;
                um_test_kernels::testing::spin_then_add(s0, &mut busy, 1.0, 300_000_000)?;
                let launched = all_reduce_both((&comm0, s0, &mut x0), (&comm1, s1, &mut x1))?;
                comm0.abort();
                let waited = launched.wait(Duration::from_secs(5));
                let rank1_aborted = comm1.is_aborted();
                let t = Instant::now();
                let mut idle = false;
                while t.elapsed() < Duration::from_secs(10) {
                    if s1.is_idle().unwrap_or(true) {
                        idle = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                // Release rank 1 (bounded: it times out and aborts, poisoning s1).
                let release = comm1.wait(s1, Duration::from_secs(3));
                println!("rank 1 released: {release:?}");
                drop((busy, x0, x1)); // leaked where poisoned
                Ok((waited.map_err(|e| e.to_string()), rank1_aborted, idle))
            })
        })
        .expect("streams");
    println!("launched.wait: {waited:?}; rank 1 aborted: {rank1_aborted}; s1 idle: {idle}");
    assert!(waited.is_err(), "rank 0 was aborted before the wait");
    assert!(
        rank1_aborted || idle,
        "`Launched::wait` returned {waited:?} for the aborted rank 0 and left rank 1 \
         live, its kernel waiting for rank 0 with no bound"
    );
}

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

/// A waker aborts rank 0 while an all-reduce of rank 0 is queued behind the callback; rank 1
/// never makes it. Inside the callback the communicator is only *marked* aborted (no
/// `ncclCommAbort` there); the real abort is owed to the next call, `wait`, `abort` or drop on an
/// ordinary thread. Were it never made, rank 0's NCCL kernel would wait for rank 1 for ever, and
/// every later wait for device 0 (`wait_idle`, a `Blas` drop, the last `Context` handle's drop,
/// which synchronizes before unloading modules) would hang. Expected: stream 0 is idle within
/// 10 s of `comm0.wait`. Otherwise the test releases the kernel at the end (rank 1's matching
/// all-reduce), so that it fails instead of hanging.
#[test]
#[ignore = "needs two CUDA devices and NCCL"]
fn a_comm_aborted_by_a_waker_has_its_kernels_aborted_later_on_an_ordinary_thread() {
    let _serial = serial();
    let _dog = watchdog("a communicator aborted by a waker");
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
            // Release rank 0's kernel (rank 1's matching call), so that the test ends.
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
        "the communicator aborted in the callback kept its kernel waiting for a peer; \
         nothing could abort it afterwards"
    );
}

/// Three local ranks; rank 0 sends 10 floats to rank 1 (pending in the ledger); rank 2's `Comm`
/// is dropped (`leave(2)`), which must not clear the pending entry of the pair (0, 1); rank 1's
/// receive of 20 is then refused. The same wipe would follow a `Comm::init_rank` of a remote rank
/// refused in a waker (its `Member` guard leaves). The receive is
/// larger than the send, so that a failure writes in bounds. Expected: `Err(CollectiveMismatch)`.
#[test]
#[ignore = "needs three CUDA devices and NCCL"]
fn a_rank_that_leaves_does_not_clear_the_pending_calls_of_two_other_local_ranks() {
    let _serial = serial();
    let _dog = watchdog("a rank that leaves beside two pending ranks");
    let Some((ctxs, mut comms)) = world(3) else {
        return;
    };
    let comm2 = comms.pop().expect("rank 2");
    let comm1 = comms.pop().expect("rank 1");
    let comm0 = comms.pop().expect("rank 0");
    // Mirrored: NCCL takes no unified memory without concurrent managed access.
    let a = Managed::from_slice_mirrored(&ctxs[0], &[1.0f32; 10]).expect("alloc");
    let b = Managed::from_slice_mirrored(&ctxs[1], &[0.0f32; 20]).expect("alloc");
    let (w0, w1) = (
        Managed::from_slice_mirrored(&ctxs[0], &[0.0f32; 1]).expect("a"),
        Managed::from_slice_mirrored(&ctxs[1], &[0.0f32; 1]).expect("b"),
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
        "a receive of 20 met a pending send of 10 after another rank left: {r:?}"
    );
}
