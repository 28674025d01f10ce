//! Red team 7 (docs/redteam7.md): the second version of `Context::with_idle_unless_capturing`,
//! which holds no lock while its closure runs and makes a capture wait for the device's idle
//! sections. Found: a capture starved by idle sections that kept beginning on other threads
//! (finding 1); a waker on um's event thread beginning a capture that waits for an idle section
//! whose closure waits for that thread (finding 2); a capture that began on a stream poisoned
//! while it waited (finding 3). Now a waiting capture holds new sections off (they return
//! `Ok(None)`), no capture begins on the event thread, and the poison mark is checked again
//! after the wait. Every test here is bounded by a watchdog or by a deadline of its own, not by
//! the machine's speed. The last two tests (a capture beside a thread that launches without
//! pause, with and without an idle section to wait for) came after the first GPU runs, to tell
//! apart the causes of a capture that did not end under memcheck (bench/reliability-notes.md).
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use um::kernels::testing;
use um::{Context, Managed, Poisoner, StreamOptions};
use um_cublas::{Blas, Gemm};

mod common;
use common::{capture_once, device_for_captures, serial, watchdog};

/// How long the load of the starvation tests lasts at most: a starved capture begins only
/// after it, a capture that is not starved long before it. Far above the time the captures
/// take on any machine (2 s for the whole binary on an H200; a sanitizer slows each capture
/// many times), so that only starvation can reach it: it bounds a failing test, it is not a
/// latency goal.
const DEADLINE: Duration = Duration::from_secs(90);

#[test]
#[ignore = "needs a CUDA device"]
fn two_threads_taking_turns_in_idle_sections_do_not_starve_a_capture() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let turns = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let sections = AtomicU64::new(0);
    let (before_deadline, latency) = std::thread::scope(|t| {
        for _ in 0..2 {
            t.spawn(|| {
                let start = Instant::now();
                while !stop.load(Ordering::SeqCst) && start.elapsed() < DEADLINE {
                    let ran = ctx
                        .with_idle_unless_capturing(|| {
                            sections.fetch_add(1, Ordering::SeqCst);
                            let mine = turns.fetch_add(1, Ordering::SeqCst) + 1;
                            // Stay in the section until the other thread has entered its own
                            // (or has been refused one), at most 50 ms.
                            let start = Instant::now();
                            while turns.load(Ordering::SeqCst) == mine
                                && start.elapsed() < Duration::from_millis(50)
                                && !stop.load(Ordering::SeqCst)
                            {
                                std::thread::yield_now();
                            }
                        })
                        .expect("the wait");
                    if ran.is_none() {
                        // Refused (a capture waits or runs): let the partner go on.
                        turns.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(100)); // the turns have begun
        let began = Instant::now();
        capture_once(&ctx).expect("the capture");
        let latency = began.elapsed();
        let before_deadline = !stop.swap(true, Ordering::SeqCst) && latency < DEADLINE;
        (before_deadline, latency)
    });
    println!(
        "capture latency beside two turn-taking idle sections: {latency:?} ({} sections)",
        sections.load(Ordering::SeqCst)
    );
    assert!(
        before_deadline,
        "the capture began only once the idle sections stopped (starved, {latency:?})"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn blas_handles_moving_between_streams_on_busy_workers_do_not_starve_a_capture() {
    let _serial = serial();
    // Each worker's `Blas` alternates between two streams, so each GEMM moves it. A move began
    // with an idle section (`Blas::enter` -> `wait_idle_unless_capturing`) whose wait covered
    // the other workers' GEMMs, and was refused (`CaptureInProgress`) while a capture waited
    // or ran. Under memcheck and synccheck a capture then waited for one such section until the
    // workers stopped (bench/reliability-notes.md). A move is now ordered on the device
    // (`StreamOrder`) and waits for nothing, so no move is refused and no capture waits for one.
    let Some(ctx) = device_for_captures() else {
        return;
    };
    // Under a sanitizer (memcheck: every GEMM and capture many times slower), fewer captures,
    // so that only starvation can reach the deadline.
    let (n, wanted) = if std::env::var_os("UM_SANITIZE").is_some() {
        (64, 3)
    } else {
        (512, 20)
    };
    let stop = AtomicBool::new(false);
    let refused = AtomicU64::new(0);
    let (phases, in_time) = std::thread::scope(|t| {
        for _ in 0..4 {
            t.spawn(|| {
                let start = Instant::now();
                let blas = Blas::new(&ctx).expect("cuBLAS");
                ctx.with_stream_set(2, StreamOptions::new(), |s| {
                    let buf = |v: f32, i: usize| {
                        Managed::from_slice(&ctx, &vec![v; n * n]).and_then(|b| b.attach(&s[i]))
                    };
                    let (a0, mut c0) = (buf(1.0, 0)?, buf(0.0, 0)?);
                    let (a1, mut c1) = (buf(1.0, 1)?, buf(0.0, 1)?);
                    let g = Gemm::new(n, n, n);
                    // Until the captures are done; twice the deadline bounds a starved one. A
                    // worker that stopped on its own while a capture ran would leak its `Blas`
                    // (rule 190), which memcheck reports; it stops after the captures instead.
                    while !stop.load(Ordering::SeqCst) && start.elapsed() < 2 * DEADLINE {
                        for (a, c, st) in [(&a0, &mut c0, &s[0]), (&a1, &mut c1, &s[1])] {
                            match blas.gemm(st, &g, a, a, c) {
                                Ok(()) => {}
                                Err(um_cublas::Error::CaptureInProgress) => {
                                    refused.fetch_add(1, Ordering::SeqCst);
                                    std::thread::yield_now();
                                }
                                Err(e) => panic!("gemm: {e}"),
                            }
                        }
                        // Each pair's results are waited for, as a worker that uses them would:
                        // without the wait, 4 workers queue GEMMs without bound, and under
                        // memcheck, which runs kernels one at a time, a capture's replay waits
                        // behind that backlog (2x H200, bundle 7d5d32f: the first capture ended
                        // in 175 ms, the second not within 180 s). Before moves were ordered on
                        // the device, each move's whole-context wait bounded the queue.
                        s[0].wait_idle()?;
                        s[1].wait_idle()?;
                    }
                    s[0].sync_all((a0, c0))?;
                    s[1].sync_all((a1, c1)).map(drop)
                })
                .expect("the worker");
            });
        }
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        let mut phases = Vec::new();
        while phases.len() < wanted && start.elapsed() < DEADLINE {
            phases.push(timed_capture(&ctx));
        }
        let in_time = !stop.swap(true, Ordering::SeqCst) && start.elapsed() < DEADLINE;
        (phases, in_time)
    });
    println!(
        "{wanted} captures beside 4 workers moving their Blas: {} done; {} moves refused \
         meanwhile; steps (ms): {phases:?}",
        phases.len(),
        refused.load(Ordering::SeqCst)
    );
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "a Blas move was refused: moves no longer wait for the device"
    );
    assert!(
        in_time && phases.len() == wanted,
        "the captures did not get through the workers' idle sections before the deadline; \
         ms from each capture's start to: alloc, stream, attach, capture begun, ended, replayed \
         and synced: {phases:?}"
    );
}

/// [`capture_once`], timed: ms from its start to the end of each step (alloc, stream made,
/// attach, capture begun, capture ended, replay synced), to tell a slow step from a starved
/// one.
fn timed_capture(ctx: &Context) -> [u128; 6] {
    let t0 = Instant::now();
    let ms = || t0.elapsed().as_millis();
    let mut at = [0; 6];
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
    at[0] = ms();
    ctx.with_stream(StreamOptions::new(), |s| {
        at[1] = ms();
        let x = x.attach(s)?;
        at[2] = ms();
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            at[3] = ms();
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        at[4] = ms();
        graph.launch(s)?;
        let (x,) = graph.sync()?;
        at[5] = ms();
        assert!(x.iter().all(|v| *v == 1.0));
        Ok(())
    })
    .expect("the capture");
    at
}

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

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on<F: Future + Unpin>(mut fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = std::pin::Pin::new(&mut fut).poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

/// A waker that runs its task inline, and the task begins a capture.
struct CapturingWaker {
    ctx: Context,
    result: Mutex<Option<um::Result<()>>>,
}

impl Wake for CapturingWaker {
    fn wake(self: Arc<Self>) {
        let r = capture_once(&self.ctx);
        *self
            .result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_waker_on_the_event_thread_cannot_begin_a_capture_that_an_idle_section_waits_for() {
    let _serial = serial();
    let done = watchdog("a capture on the event thread and an idle section waiting for it");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    um::use_event_thread_for_waits(true);
    let busy = Managed::<[f32]>::zeroed_slice(&ctx, 1).expect("alloc");
    let other = Managed::<[f32]>::zeroed_slice(&ctx, 256).expect("alloc");
    let waker = Arc::new(CapturingWaker {
        ctx: ctx.clone(),
        result: Mutex::new(None),
    });
    let section = ctx
        .with_stream_set(2, StreamOptions::new(), |s| {
            let mut busy = busy.attach(&s[0])?;
            testing::spin_then_add(&s[0], &mut busy, 1.0, 300_000_000)?;
            // First in the event thread's queue: completes after the spin, and its waker
            // begins a capture there.
            let mut first = s[0].sync_all_async((busy,));
            let w = Waker::from(Arc::clone(&waker));
            assert!(
                std::pin::Pin::new(&mut first)
                    .poll(&mut TaskContext::from_waker(&w))
                    .is_pending(),
                "the spin holds the stream"
            );
            // Second in the queue: the event thread reaches it only after the first.
            let other = other.attach(&s[1])?;
            let second = s[1].sync_all_async((other,));
            let section = ctx.with_idle_unless_capturing(|| block_on(second).map(drop));
            let first = block_on(first).map(drop);
            Ok((section, first))
        })
        .expect("the streams");
    um::use_event_thread_for_waits(false);
    assert!(matches!(section.0, Ok(Some(Ok(())))), "{:?}", section.0);
    assert_eq!(section.1, Ok(()));
    let captured = waker
        .result
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    assert!(
        matches!(captured, Some(Err(um::Error::CaptureRefusedHere))),
        "the waker's capture on the event thread: {captured:?}"
    );
    done.send(()).ok();
}

/// How long the idle section of the next tests waits: the spin kernel it waits for.
const SECTION_NS: u64 = 300_000_000;

/// How long each of the launcher's kernels keeps the GPU busy (`spin_then_add`, timed by the
/// GPU's own clock): longer than a launch takes under a sanitizer (a few ms), so that the
/// device always has the launcher's work queued, with or without a tool.
const LAUNCH_NS: u64 = 20_000_000;

/// How many kernels the launcher queues on one stream before it waits for that stream's
/// previous batch: the other stream's batch keeps the device busy meanwhile, and at most two
/// batches (640 ms of work) are queued.
const BATCH: u64 = 16;

/// Keeps the device busy without a gap until `stop` is set or [`DEADLINE`] has passed: kernels
/// of [`LAUNCH_NS`] each, in batches of [`BATCH`] on two streams of its own in turn, waiting
/// for a stream's previous batch (a stream wait, never the whole device) before it queues the
/// next there; `(whether stop ended it, launches)`.
fn launch_until(ctx: &Context, stop: &AtomicBool) -> (bool, u64) {
    let start = Instant::now();
    let alloc = || Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
    let (x0, x1) = (alloc(), alloc());
    ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let mut x = [x0.attach(&s[0])?, x1.attach(&s[1])?];
        let mut launched = [0u64; 2];
        let mut turn = 0;
        while !stop.load(Ordering::SeqCst) && start.elapsed() < DEADLINE {
            s[turn].wait_idle()?;
            for _ in 0..BATCH {
                testing::spin_then_add(&s[turn], &mut x[turn], 1.0, LAUNCH_NS)?;
            }
            launched[turn] += BATCH;
            turn = 1 - turn;
        }
        let by_stop = start.elapsed() < DEADLINE;
        let [x0, x1] = x;
        let (x0,) = s[0].sync_all((x0,))?;
        let (x1,) = s[1].sync_all((x1,))?;
        // Exact in f32 far beyond what a run can launch in [`DEADLINE`] (4,500 per stream).
        for (x, n) in [(&x0, launched[0]), (&x1, launched[1])] {
            assert!(x.iter().all(|v| *v == n as f32), "the launcher's sum");
        }
        Ok((by_stop, launched[0] + launched[1]))
    })
    .expect("the launcher")
}

/// Begins one capture (`capture_once`) while another thread keeps the device busy without a
/// gap ([`launch_until`]), with or without a third thread in an idle section whose wait (a
/// 300 ms kernel) the capture must wait for: the capture must end while the launcher still
/// launches. A capture waits only for the sections in progress when it asks, never for work
/// that other threads enqueue meanwhile. Under the sanitizers a capture beside workers that
/// kept launching GEMMs sometimes did not end within 90 s (bench/reliability-notes.md): run
/// under a tool, the pair tells a section's wait that the launches keep from returning (only
/// the first fails) from driver calls of the capture that lose to the launches (both fail).
/// The launcher's first version queued `add_scalar` back to back; under the tools it made only
/// 21 to 81 launches while the capture ran, too few to keep the device busy, and decided
/// nothing.
fn capture_beside_a_launcher(with_section: bool) {
    let _serial = serial();
    let done = watchdog("a capture beside a launching thread");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let stop = AtomicBool::new(false);
    let busy = Managed::from_slice(&ctx, &[0.0f32; 1]).expect("alloc");
    let (queued_tx, queued_rx) = mpsc::channel::<()>();
    let ((by_stop, launched), waited, took) = std::thread::scope(|t| {
        let launcher = t.spawn(|| launch_until(&ctx, &stop));
        let section = t.spawn(|| {
            if !with_section {
                queued_tx.send(()).expect("signal");
                return None;
            }
            ctx.with_stream(StreamOptions::new(), |s| {
                let mut busy = busy.attach(s)?;
                testing::spin_then_add(s, &mut busy, 1.0, SECTION_NS)?;
                queued_tx.send(()).expect("signal");
                // Its wait covers the 300 ms kernel; Ok(false) if the capture came first.
                let waited = ctx.wait_idle_unless_capturing()?;
                s.sync_all((busy,))?;
                Ok(Some(waited))
            })
            .expect("the section")
        });
        queued_rx.recv().expect("the spin kernel is queued");
        // The section has most likely begun its wait by now (it is not checked: a capture
        // that comes first makes the section return Ok(false), which the output shows).
        std::thread::sleep(Duration::from_millis(50));
        let began = Instant::now();
        capture_once(&ctx).expect("the capture");
        let took = began.elapsed();
        stop.store(true, Ordering::SeqCst);
        let launcher = launcher.join().expect("the launcher");
        (launcher, section.join().expect("the section"), took)
    });
    println!(
        "capture beside a launcher{}: {took:?}; {launched} launches; the section waited: {waited:?}",
        if with_section {
            " and a 300 ms idle section"
        } else {
            ""
        }
    );
    assert!(
        by_stop,
        "the capture ended only after the launcher stopped on its own ({DEADLINE:?}; took {took:?})"
    );
    done.send(()).ok();
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_waiting_for_an_idle_section_is_not_held_by_another_threads_launches() {
    capture_beside_a_launcher(true);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_beside_a_thread_launching_without_pause_ends_while_it_launches() {
    capture_beside_a_launcher(false);
}
