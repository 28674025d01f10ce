//! NCCL collectives on owned buffers (issue 22), on every GPU of the machine.
//!
//! Needs two GPUs and NCCL. The GPU run script runs this binary only where `nvidia-smi` lists
//! two or more GPUs ("skipped" elsewhere); run with `--include-ignored` on one GPU, it fails.
//! The multi-process tests run ranks as child processes of this binary (one per GPU, over
//! loopback), with `NCCL_NVLS_ENABLE=0` as every environment here has it.
#![allow(clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::time::{Duration, Instant};

use um::nccl::{Comm, CommOptions, Group, ReduceOp};
use um::{Context, Error, HostOwned, Managed, Storage, StreamOptions};

const WAIT: Duration = Duration::from_secs(60);

/// One test at a time on the GPUs: NCCL kernels of two communicators that take turns in
/// different orders on two GPUs can wait for each other, and the timing checks want the GPUs to
/// themselves. Held by every test (and so by `devices`' callers) for its whole run.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

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
fn every_collective<M: Storage>(ctxs: &[Context], comms: &[Comm], alloc: &Alloc<M>) {
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

/// A communicator that enqueued on three streams poisons all three when it is aborted: it
/// remembers each stream once, by comparing handles (`Stream::is_poisoned_by`), since the
/// host-time change of 2026-11-23; the red-team review of that change asked for this on a GPU.
/// The three streams' buffers are leaked on purpose (rule 164), hence `leaks_` in the name:
/// memcheck checks this test for everything but leaks (`scripts/gpu-run.sh`).
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

/// A time limit of `Duration::MAX` is a wait without end, not a panic: creation, a group's
/// launch and wait, `Comm::wait` and the drop's flush (a fresh red-team reviewer of the poll
/// clock found `now + limit` overflowing in creation and in every wait).
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
    let children: Vec<_> = (0..world)
        .map(|rank| {
            Command::new(&exe)
                .args([
                    test,
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
