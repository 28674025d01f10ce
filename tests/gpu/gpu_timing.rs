//! Timing the device's work (`Stream::mark_time`, `TimeMark::until`, `TimeSpan`): a span around
//! a kernel that spins for a known GPU time reads at least that time, on created, per-thread and
//! legacy streams; it is read only once both marks have completed (a query before says "not
//! yet"); an end marked before its start, or reached before it on a stream not ordered after
//! it, is an `Err`, never a negative time; an unread span is dropped without a wait; on a thread
//! that captures, every timing call is refused before the driver sees it, and the capture stays
//! valid.
//!
//! The lower bounds come from `spin_then_add`, which waits until the GPU's global timer has
//! advanced by a given time before it writes: no assertion depends on how fast the host is, and
//! each bound is half the spin (the two clocks are the device's own).
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use std::time::Duration;

use common::{device_for_captures, gpu, serial};
use um::{Context, Error, Managed, StreamOptions, TimeMark, TimeSpan};
use um_test_kernels::testing::{add_scalar, spin_then_add};

/// GPU time the timed kernel takes at least.
const SPIN_NS: u64 = 20_000_000;

/// Half of [`SPIN_NS`]: what a span around the kernel reads at least.
fn at_least() -> Duration {
    Duration::from_nanos(SPIN_NS / 2)
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_span_around_a_kernel_reads_its_time_on_every_stream_kind() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("x");
    let (x, created) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            let start = s.mark_time()?;
            spin_then_add(s, &mut x, 1.0, SPIN_NS)?;
            let end = s.mark_time()?;
            let span = start.until(&end)?;
            Ok((x.sync()?, span))
        })
        .expect("created stream");
    // Read after the stream's scope: the marks outlive their stream.
    let created = created.wait().expect("wait").duration();
    assert!(created >= at_least(), "created stream: {created:?}");
    assert!(x.iter().all(|v| *v == 1.0));

    let per_thread = ctx
        .with_per_thread_stream(|pts| {
            let mut x = x.attach(pts)?;
            let start = pts.mark_time()?;
            spin_then_add(pts, &mut x, 1.0, SPIN_NS)?;
            let span = start.until(&pts.mark_time()?)?;
            let elapsed = span.wait()?;
            x.sync()?;
            Ok(elapsed.duration())
        })
        .expect("per-thread stream");
    assert!(
        per_thread >= at_least(),
        "per-thread stream: {per_thread:?}"
    );

    let y = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("y");
    let legacy = ctx
        .with_legacy_stream(|legacy| {
            let mut y = y.attach_global(legacy)?;
            let start = legacy.mark_time()?;
            spin_then_add(legacy, &mut y, 1.0, SPIN_NS)?;
            let end = legacy.mark_time()?;
            y.sync()?;
            Ok(start.until(&end)?.wait()?.duration())
        })
        .expect("legacy stream");
    assert!(legacy >= at_least(), "legacy stream: {legacy:?}");

    // A mark may end one span and start the next: the laps add up to the whole.
    let z = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("z");
    let (whole, laps) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut z = z.attach(s)?;
            let t0 = s.mark_time()?;
            spin_then_add(s, &mut z, 1.0, SPIN_NS)?;
            let t1 = s.mark_time()?;
            spin_then_add(s, &mut z, 1.0, SPIN_NS)?;
            let t2 = s.mark_time()?;
            let whole = t0.until(&t2)?.wait()?.duration();
            let laps = t0.until(&t1)?.wait()?.duration() + t1.until(&t2)?.wait()?.duration();
            let none = t1.until(&t1)?.wait()?.duration();
            assert_eq!(none, Duration::ZERO, "a mark to itself");
            z.sync()?;
            Ok((whole, laps))
        })
        .expect("laps");
    assert!(laps >= at_least() * 2, "{laps:?}");
    // The driver's milliseconds are f32: a few microseconds of rounding between the two sums.
    let gap = whole.abs_diff(laps);
    assert!(gap < Duration::from_micros(50), "{whole:?} vs {laps:?}");
}

/// A query before the marks are reached says "not yet" and waits for nothing; once the stream
/// is idle it reads the time, and the wait reads the same.
#[test]
#[ignore = "needs a CUDA device"]
fn a_span_is_read_only_once_both_marks_have_completed() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("x");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        let start = s.mark_time()?;
        // Long enough that the query below is made before the kernel ends.
        spin_then_add(s, &mut x, 1.0, 10 * SPIN_NS)?;
        let span = start.until(&s.mark_time()?)?;
        assert_eq!(span.try_elapsed()?, None, "the end is not reached yet");
        s.wait_idle()?;
        let queried = span.try_elapsed()?.expect("both marks reached");
        assert!(queried >= Duration::from_nanos(5 * SPIN_NS), "{queried:?}");
        assert_eq!(span.wait()?.duration(), queried);
        x.sync().map(drop)
    })
    .expect("query, then wait");
}

/// Across two streams the program orders the marks: after a `hand_off` the span is right; on two
/// streams it did not order, an end the device reached before the start is an `Err`. An end
/// marked before its start is refused at once.
#[test]
#[ignore = "needs a CUDA device"]
fn an_end_before_its_start_is_an_error_never_a_negative_time() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("x");
    let y = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("y");
    ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let (a, b) = (&s[0], &s[1]);
        // Marked in the wrong order on the host.
        let first = a.mark_time()?;
        let second = a.mark_time()?;
        let err = second.until(&first).expect_err("the end was marked first");
        assert!(matches!(err, Error::TimeSpan { .. }), "{err}");

        // Ordered: the start on `a`, the buffer handed to `b`, the spin and the end there.
        let mut x = x.attach(a)?;
        add_scalar(a, &mut x, 1.0)?;
        let start = a.mark_time()?;
        let mut x = x.hand_off(b)?;
        spin_then_add(b, &mut x, 1.0, SPIN_NS)?;
        let end = b.mark_time()?;
        let ordered = start.until(&end)?.wait()?.duration();
        assert!(ordered >= at_least(), "{ordered:?}");

        // Not ordered: `a` spins before its mark, `b` is idle when it marks the end.
        let mut y = y.attach(a)?;
        spin_then_add(a, &mut y, 1.0, 5 * SPIN_NS)?;
        let late_start = a.mark_time()?;
        b.wait_idle()?;
        let early_end = b.mark_time()?;
        let span: TimeSpan = late_start.until(&early_end)?;
        let read = span.wait();
        // A sanitizer runs the launches of all streams one after another, so `b`'s mark waits
        // for `a`'s kernel there: no end is reached first.
        if !common::under_sanitizer() {
            let err = read.expect_err("the end completed before the start");
            assert!(matches!(err, Error::TimeSpan { .. }), "{err}");
        }
        Ok((x.sync()?, y.sync()?))
    })
    .map(drop)
    .expect("two streams");
}

/// An unread span frees its events without a wait: dropped while its kernel still runs, the
/// stream is still busy after the drop, and every later call works.
#[test]
#[ignore = "needs a CUDA device"]
fn an_unread_span_is_dropped_without_waiting_for_its_marks() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("x");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        let start = s.mark_time()?;
        spin_then_add(s, &mut x, 1.0, 10 * SPIN_NS)?;
        let end = s.mark_time()?;
        drop(start.until(&end)?);
        drop((start, end));
        assert!(!s.is_idle()?, "the drop did not wait for the kernel");
        x.sync().map(drop)
    })
    .expect("drop unread");
    common::assert_context_usable(&ctx);
}

/// Two handles of one device are one context: their marks make a span.
#[test]
#[ignore = "needs a CUDA device"]
fn marks_of_two_handles_of_one_device_make_a_span() {
    let _serial = serial();
    let (a, b) = (gpu(), Context::new(0).expect("a second handle"));
    let start = a
        .with_stream(StreamOptions::new(), |s| s.mark_time())
        .expect("mark on a");
    let end = b
        .with_stream(StreamOptions::new(), |s| s.mark_time())
        .expect("mark on b");
    let elapsed = start.until(&end).expect("one context").wait();
    assert!(elapsed.is_ok(), "{elapsed:?}");
}

/// Inside a capture closure every timing call is `InsideCapture` (no mark, no wait, no query:
/// the driver would refuse the waits and fail the capture), a span dropped there is freed after
/// it, and the capture stays valid; outside, a span around a replay reads its time.
#[test]
#[ignore = "needs a CUDA device"]
fn timing_inside_a_capture_closure_is_refused_and_the_capture_stays_valid() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("x");
    let (x, elapsed) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let before = s.mark_time()?;
            let kept = before.until(&s.mark_time()?)?;
            let waited = before.until(&s.mark_time()?)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                spin_then_add(cap, &mut x, 1.0, SPIN_NS)?;
                for err in [
                    s.mark_time().map(drop).expect_err("a mark"),
                    kept.try_elapsed().map(drop).expect_err("a query"),
                    // The span is consumed, so dropped here: its events are destroyed once the
                    // capture has ended.
                    waited.wait().map(drop).expect_err("a wait"),
                ] {
                    assert!(matches!(err, Error::InsideCapture { .. }), "{err}");
                }
                drop(before);
                Ok(((x,), ()))
            })?;
            let start = s.mark_time()?;
            graph.launch(s)?;
            let end = s.mark_time()?;
            let elapsed = start.until(&end)?.wait()?.duration();
            assert!(
                kept.wait().is_ok(),
                "the span kept across the capture reads"
            );
            let (x,) = graph.sync()?;
            Ok((x, elapsed))
        })
        .expect("capture around refused timing calls");
    assert!(x.iter().all(|v| *v == 1.0), "the replay ran");
    assert!(elapsed >= at_least(), "a replay timed: {elapsed:?}");
}

/// Marks are `Send`, and two threads' per-thread streams are two streams that nothing orders but
/// the program. Expected: a span of one thread's marks, read on another thread, reads at least
/// its kernel's time; a span from a mark behind a long spin on one thread's per-thread stream to
/// a mark made later on the host, on the other thread's idle per-thread stream, is
/// `Err(TimeSpan)` when read (the device reached the end first), never a negative time. On the
/// legacy stream, which two threads share, each thread's span around its own kernel reads at
/// least that kernel's time, wherever it is read.
#[test]
#[ignore = "needs a CUDA device"]
fn marks_of_two_threads_default_streams_are_ordered_only_by_the_program() {
    let _serial = serial();
    // A hang fails the test within a minute instead of holding the run, under a sanitizer too
    // (its work is about a second of spinning kernels at any speed).
    let done = common::watchdog_after("marks of two threads' default streams", 60);
    let ctx = gpu();
    let ctx = &ctx;
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("x");
    let (go, ready) = std::sync::mpsc::channel::<()>();
    let (send_mark, marked) = std::sync::mpsc::channel::<TimeMark>();
    let (x, lap, unordered) = std::thread::scope(|t| {
        let other = t.spawn(move || -> um::Result<()> {
            if ready.recv().is_err() {
                return Ok(());
            }
            let mark = ctx.with_per_thread_stream(|pts| {
                pts.wait_idle()?;
                pts.mark_time()
            })?;
            let _ = send_mark.send(mark);
            Ok(())
        });
        let spinning = t.spawn(move || {
            ctx.with_per_thread_stream(|pts| {
                let mut x = x.attach(pts)?;
                let start = pts.mark_time()?;
                spin_then_add(pts, &mut x, 1.0, SPIN_NS)?;
                let end = pts.mark_time()?;
                // Long enough that the other thread marks well before it ends.
                spin_then_add(pts, &mut x, 1.0, 50 * SPIN_NS)?;
                let late_start = pts.mark_time()?;
                go.send(()).expect("the other thread waits");
                let early_end = marked.recv().expect("the other thread's mark");
                let unordered = late_start.until(&early_end)?.wait();
                Ok((x.sync()?, start.until(&end)?, unordered))
            })
        });
        let got = spinning.join().expect("no panic");
        other
            .join()
            .expect("no panic")
            .expect("the other thread's mark");
        got
    })
    .expect("two threads");
    // Under a sanitizer the launches of all streams run one after another (see above).
    if !common::under_sanitizer() {
        let err = unordered.expect_err("the end completed before the start");
        assert!(matches!(err, Error::TimeSpan { .. }), "{err}");
    }
    let lap = lap.wait().expect("read on another thread").duration();
    assert!(lap >= at_least(), "{lap:?}");
    assert!(x.iter().all(|v| *v == 2.0));

    let spans = std::thread::scope(|t| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                t.spawn(move || {
                    let y = Managed::from_slice(ctx, &[0.0f32; 256])?;
                    ctx.with_legacy_stream(|legacy| {
                        let mut y = y.attach_global(legacy)?;
                        let start = legacy.mark_time()?;
                        spin_then_add(legacy, &mut y, 1.0, SPIN_NS)?;
                        let end = legacy.mark_time()?;
                        y.sync()?;
                        start.until(&end)
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect::<um::Result<Vec<TimeSpan>>>()
    })
    .expect("legacy marks on two threads");
    for span in spans {
        let time = span.wait().expect("read on the main thread").duration();
        assert!(time >= at_least(), "legacy stream: {time:?}");
    }
    let _ = done.send(());
}

/// A span whose marks a thread made on its per-thread default stream is read after that thread
/// has exited: the marks keep their events, and the read waits for nothing more than the work
/// before them. Expected: the span reads at least half the kernel's spin, and no call waits
/// forever (a watchdog aborts a hang).
#[test]
#[ignore = "needs a CUDA device"]
fn a_span_marked_on_a_per_thread_stream_is_read_after_its_thread_has_exited() {
    let _serial = serial();
    let done = common::watchdog_after("a span read after its thread exited", 60);
    let ctx = gpu();
    let ctx = &ctx;
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("x");
    let (x, span) = std::thread::scope(|t| {
        t.spawn(move || {
            ctx.with_per_thread_stream(|pts| {
                let mut x = x.attach(pts)?;
                let start = pts.mark_time()?;
                spin_then_add(pts, &mut x, 1.0, SPIN_NS)?;
                let end = pts.mark_time()?;
                Ok((x.sync()?, start.until(&end)?))
            })
        })
        .join()
        .expect("no panic")
    })
    .expect("marked on the per-thread stream");
    let time = span
        .wait()
        .expect("read after the thread exited")
        .duration();
    assert!(time >= at_least(), "{time:?}");
    assert!(x.iter().all(|v| *v == 1.0));
    let _ = done.send(());
}

/// `try_elapsed` only asks, from any number of threads at once: once both marks are reached,
/// every query and the wait read one time. Expected: four threads that query a shared span until
/// it answers (while its kernel still runs at first) all read the time the wait reads, at least
/// half the kernel's spin; none errs, none waits (a watchdog aborts a hang).
#[test]
#[ignore = "needs a CUDA device"]
fn a_span_queried_from_several_threads_at_once_reads_one_time() {
    let _serial = serial();
    let ctx = gpu();
    let done = common::watchdog("a span queried from several threads");
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("x");
    let (reads, waited) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            let start = s.mark_time()?;
            spin_then_add(s, &mut x, 1.0, 5 * SPIN_NS)?;
            let owned = start.until(&s.mark_time()?)?;
            let span = &owned;
            let reads = std::thread::scope(|t| {
                let threads: Vec<_> = (0..4)
                    .map(|_| {
                        t.spawn(move || {
                            loop {
                                if let Some(time) = span.try_elapsed()? {
                                    return Ok(time);
                                }
                                std::thread::yield_now();
                            }
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .map(|h| h.join().expect("no panic"))
                    .collect::<um::Result<Vec<Duration>>>()
            })?;
            let waited = owned.wait()?.duration();
            x.sync()?;
            Ok((reads, waited))
        })
        .expect("queries from four threads");
    let _ = done.send(());
    assert!(
        waited >= Duration::from_nanos(5 * SPIN_NS / 2),
        "{waited:?}"
    );
    assert!(
        reads.iter().all(|r| *r == waited),
        "{reads:?} vs {waited:?}"
    );
}

/// A panic between a mark and its wait unwinds through the stream's scope: the span and the
/// marks dropped there free their events without a wait, the buffer's drop waits for its
/// stream, and a mark kept outside stays readable. Expected: the panic is caught; a span from
/// the kept mark (before the kernel) to a mark made afterwards reads at least the kernel's time;
/// the context stays usable.
#[test]
#[ignore = "needs a CUDA device"]
fn a_panic_between_a_mark_and_its_wait_leaves_the_kept_marks_and_the_context_usable() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("x");
    let kept = std::sync::Mutex::new(None::<TimeMark>);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.with_stream(StreamOptions::new(), |s| -> um::Result<()> {
            let mut x = x.attach(s)?;
            let start = s.mark_time()?;
            spin_then_add(s, &mut x, 1.0, SPIN_NS)?;
            let end = s.mark_time()?;
            *kept.lock().expect("not poisoned") = Some(start.clone());
            let _span = start.until(&end)?;
            panic!("a panic between a mark and its wait");
        })
    }));
    assert!(caught.is_err(), "the panic went through");
    let start = kept
        .into_inner()
        .expect("not poisoned")
        .expect("the mark was kept");
    let end = ctx
        .with_stream(StreamOptions::new(), |s| s.mark_time())
        .expect("a mark after the unwinding");
    let elapsed = start.until(&end).expect("in order").wait().expect("read");
    assert!(elapsed.duration() >= at_least(), "{elapsed:?}");
    common::assert_context_usable(&ctx);
}

/// A mark holds its context: made on a handle dropped right after, it still makes a span with a
/// mark of a handle made later (one primary context, kept retained by the first mark).
/// Expected: the span reads, and the context stays usable.
#[test]
#[ignore = "needs a CUDA device"]
fn a_mark_outlives_the_handle_it_was_made_on() {
    let _serial = serial();
    let start = {
        let a = Context::new(0).expect("a handle");
        a.with_stream(StreamOptions::new(), |s| s.mark_time())
            .expect("mark on a")
    };
    let b = Context::new(0).expect("a later handle");
    let end = b
        .with_stream(StreamOptions::new(), |s| s.mark_time())
        .expect("mark on b");
    let elapsed = start.until(&end).expect("one context").wait();
    assert!(elapsed.is_ok(), "{elapsed:?}");
    drop((start, end));
    common::assert_context_usable(&b);
}
