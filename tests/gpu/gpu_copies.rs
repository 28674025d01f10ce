//! Copies and fills on the device between buffers one stream owns (`Stream::copy`,
//! `Stream::fill`, `Stream::fill_zero`): every element lands, at odd lengths, between every pair
//! of storages (coherent memory where the device has concurrent managed access), on created,
//! per-thread and legacy streams; a mirror written by a copy or a fill is copied back at `sync`;
//! what cannot be done (lengths that differ, a value no driver fill writes, a buffer of another
//! stream of a set, a poisoned stream) is refused before anything is enqueued, the buffers
//! untouched; inside a capture they are graph nodes, replayed, their destinations copied back at
//! every host step.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use common::{device_for_captures, gpu, serial};
use um::{Context, Error, HostOwned, HostVisible, Managed, StreamOptions};
use um_core::mirror_copies_on_this_thread;
use um_test_kernels::testing::{add_scalar, spin_then_add};

/// How one storage allocates a host-owned buffer from a slice.
type Alloc<T, M> = fn(&Context, &[T]) -> um::Result<Managed<[T], HostOwned, M>>;

/// The lengths every test goes through: one element, odd ones, and one past a power of two.
const LENGTHS: [usize; 4] = [1, 7, 4099, (1 << 20) + 3];

/// Whether device 0 takes coherent memory (concurrent managed access); says so where not.
fn coherent_here(ctx: &Context) -> bool {
    let here = ctx.info().concurrent_managed_access;
    if !here {
        println!("no concurrent managed access: coherent memory left out");
    }
    here
}

/// Copies `i * 3 + 1` from a buffer of storage `A` into one of `B` holding `-1`, on one stream,
/// and checks both afterwards.
fn copy_between<A: HostVisible, B: HostVisible>(
    ctx: &Context,
    src: Alloc<f32, A>,
    dst: Alloc<f32, B>,
    n: usize,
) {
    let want: Vec<f32> = (0..n).map(|i| i as f32 * 3.0 + 1.0).collect();
    let x = src(ctx, &want).expect("alloc src");
    let y = dst(ctx, &vec![-1.0; n]).expect("alloc dst");
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            s.copy(&x, &mut y)?;
            s.sync_all((x, y))
        })
        .expect("copy");
    let what = format!("{} -> {}, n = {n}", A::NAME, B::NAME);
    assert_eq!(&x[..], &want[..], "{what}: the source is read only");
    assert_eq!(&y[..], &want[..], "{what}: every element copied");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_copy_moves_every_element_between_every_pair_of_storages_at_odd_lengths() {
    let _serial = serial();
    let ctx = gpu();
    let coherent = coherent_here(&ctx);
    let unified: Alloc<f32, um::Unified> = Managed::from_slice;
    let mirror: Alloc<f32, um::Mirror> = Managed::from_slice_mirrored;
    let coh: Alloc<f32, um::Coherent> = Managed::from_slice_coherent;
    for n in LENGTHS {
        copy_between(&ctx, unified, unified, n);
        copy_between(&ctx, unified, mirror, n);
        copy_between(&ctx, mirror, unified, n);
        copy_between(&ctx, mirror, mirror, n);
        if coherent {
            copy_between(&ctx, coh, coh, n);
            copy_between(&ctx, coh, unified, n);
            copy_between(&ctx, unified, coh, n);
            copy_between(&ctx, coh, mirror, n);
            copy_between(&ctx, mirror, coh, n);
        }
    }
}

/// Fills a buffer of storage `M` holding `init` with `value`, and checks every element.
fn fill_with<T, M: HostVisible>(ctx: &Context, alloc: Alloc<T, M>, n: usize, init: T, value: T)
where
    T: um::DeviceCopy + um::NoUninit + PartialEq + std::fmt::Debug,
{
    let x = alloc(ctx, &vec![init; n]).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            s.fill(&mut x, value)?;
            x.sync()
        })
        .expect("fill");
    let what = format!("{} {}, n = {n}", M::NAME, std::any::type_name::<T>());
    let wrong = x.iter().position(|v| *v != value);
    assert_eq!(wrong, None, "{what}: every element is the value");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_fill_writes_the_value_into_every_element_of_one_two_and_four_bytes_in_every_storage() {
    let _serial = serial();
    let ctx = gpu();
    let coherent = coherent_here(&ctx);
    for n in LENGTHS {
        fill_with::<u8, _>(&ctx, Managed::from_slice, n, 0, 0xa5);
        fill_with::<u16, _>(&ctx, Managed::from_slice_mirrored, n, 0, 0x1234);
        fill_with::<f32, _>(&ctx, Managed::from_slice, n, 0.0, -1.5);
        fill_with::<f32, _>(&ctx, Managed::from_slice_mirrored, n, 0.0, 2.25);
        fill_with::<i32, _>(&ctx, Managed::from_slice_mirrored, n, 7, -3);
        // Wider values made of one word repeated.
        fill_with::<u64, _>(&ctx, Managed::from_slice, n, 5, u64::MAX);
        fill_with::<[u8; 3], _>(&ctx, Managed::from_slice_mirrored, n, [1; 3], [9; 3]);
        if coherent {
            fill_with::<u16, _>(&ctx, Managed::from_slice_coherent, n, 1, 0xbeef);
            fill_with::<f32, _>(&ctx, Managed::from_slice_coherent, n, 1.0, 0.5);
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_zero_fill_zeroes_elements_of_any_size_in_every_storage() {
    let _serial = serial();
    let ctx = gpu();
    let coherent = coherent_here(&ctx);
    for n in LENGTHS {
        let a = Managed::from_slice(&ctx, &vec![[7u8; 3]; n]).expect("a");
        let b = Managed::from_slice_mirrored(&ctx, &vec![1.5f64; n]).expect("b");
        let c = Managed::from_slice(&ctx, &vec![[3u16; 5]; n]).expect("c");
        let (a, b, c) = ctx
            .with_stream(StreamOptions::new(), |s| {
                let (mut a, mut b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
                s.fill_zero(&mut a)?;
                s.fill_zero(&mut b)?;
                s.fill_zero(&mut c)?;
                s.sync_all((a, b, c))
            })
            .expect("zero fills");
        assert!(a.iter().all(|v| *v == [0; 3]), "[u8; 3], n = {n}");
        assert!(b.iter().all(|v| *v == 0.0), "mirrored f64, n = {n}");
        assert!(c.iter().all(|v| *v == [0; 5]), "[u16; 5], n = {n}");
        if coherent {
            let d = Managed::from_slice_coherent(&ctx, &vec![-2i64; n]).expect("d");
            let d = ctx
                .with_stream(StreamOptions::new(), |s| {
                    let mut d = d.attach(s)?;
                    s.fill_zero(&mut d)?;
                    d.sync()
                })
                .expect("coherent zero fill");
            assert!(d.iter().all(|v| *v == 0), "coherent i64, n = {n}");
        }
    }
}

/// A mirror is copied back at `sync` only if something on the device may have written it: a
/// copy into it and a fill of it count, as a `&mut` launch does, and a copy out of it does not.
#[test]
#[ignore = "needs a CUDA device"]
fn a_mirror_written_by_a_copy_or_a_fill_is_copied_back_at_sync_and_a_source_is_not() {
    let _serial = serial();
    let ctx = gpu();
    let n = 4099;
    let x = Managed::from_fn_mirrored(&ctx, n, |i| i as f32).expect("x");
    let y = Managed::from_slice_mirrored(&ctx, &vec![0.0f32; n]).expect("y");
    let z = Managed::from_slice_mirrored(&ctx, &vec![0.0f32; n]).expect("z");
    let (x, y, z) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y, mut z) = (x.attach(s)?, y.attach(s)?, z.attach(s)?);
            let before = mirror_copies_on_this_thread();
            s.copy(&x, &mut y)?; // y written by a copy
            s.fill(&mut z, 4.0f32)?; // z written by a fill
            add_scalar(s, &mut z, 1.0)?; // and a kernel after it, in stream order
            let r = s.sync_all((x, y, z))?;
            let d = mirror_copies_on_this_thread().since(before);
            assert_eq!(
                (d.to_host, d.to_host_skipped),
                (2, 1),
                "y and z copied back, x (only read) skipped"
            );
            Ok(r)
        })
        .expect("copy, fill, sync");
    assert!(x.iter().enumerate().all(|(i, v)| *v == i as f32));
    assert!(
        y.iter().enumerate().all(|(i, v)| *v == i as f32),
        "the copy reached the host"
    );
    assert!(
        z.iter().all(|v| *v == 5.0),
        "the fill, then the kernel, reached the host"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn copies_and_fills_run_on_the_per_thread_and_legacy_streams() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1001;
    let x = Managed::from_fn(&ctx, n, |i| i as u32).expect("x");
    let y = Managed::from_slice_mirrored(&ctx, &vec![0u32; n]).expect("y");
    let (x, y) = ctx
        .with_per_thread_stream(|pts| {
            let (mut x, mut y) = (x.attach(pts)?, y.attach(pts)?);
            s_fill_then_copy(pts, &mut x, &mut y)?;
            pts.sync_all((x, y))
        })
        .expect("per-thread stream");
    assert!(x.iter().chain(y.iter()).all(|v| *v == 17), "per-thread");

    let x = Managed::from_fn(&ctx, n, |i| i as u32).expect("x");
    let y = Managed::from_fn(&ctx, n, |_| 0u32).expect("y");
    let (x, y) = ctx
        .with_legacy_stream(|legacy| {
            let (mut x, mut y) = (x.attach_global(legacy)?, y.attach_global(legacy)?);
            s_fill_then_copy(legacy, &mut x, &mut y)?;
            Ok((x.sync()?, y.sync()?))
        })
        .expect("legacy stream");
    assert!(x.iter().chain(y.iter()).all(|v| *v == 17), "legacy");
}

/// `x` filled with 17, then copied into `y`, on `s`.
fn s_fill_then_copy<'s, K: um::StreamKind, A: HostVisible, B: HostVisible>(
    s: &um::Stream<'s, K>,
    x: &mut Managed<[u32], um::StreamOwned<'s, K>, A>,
    y: &mut Managed<[u32], um::StreamOwned<'s, K>, B>,
) -> um::Result<()> {
    s.fill(x, 17u32)?;
    s.copy(x, y)
}

/// What cannot be done is refused before anything is enqueued, and the buffers keep their
/// contents: lengths that differ, a value no driver fill writes, buffers of another stream of a
/// set (each position). Every buffer comes back to the host and is freed (a poisoned stream,
/// whose buffers leak by design, has a test of its own below).
#[test]
#[ignore = "needs a CUDA device"]
fn what_cannot_be_copied_or_filled_is_refused_and_the_buffers_are_untouched() {
    let _serial = serial();
    let ctx = gpu();
    let a = Managed::from_fn(&ctx, 7, |i| i as f64).expect("a");
    let b = Managed::from_slice_mirrored(&ctx, &[-1.0f64; 8]).expect("b");
    let (a, b) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (a, mut b) = (a.attach(s)?, b.attach(s)?);
            let err = s.copy(&a, &mut b).expect_err("7 elements into 8");
            assert_eq!(err, Error::CopyLengths { src: 7, dst: 8 }, "{err}");
            let err = s.fill(&mut b, 1.0f64).expect_err("1.0f64 repeats no word");
            assert_eq!(err, Error::FillPattern { elem_size: 8 }, "{err}");
            s.sync_all((a, b))
        })
        .expect("refusals");
    assert!(a.iter().enumerate().all(|(i, v)| *v == i as f64));
    assert!(
        b.iter().all(|v| *v == -1.0),
        "the refused calls wrote nothing"
    );

    let x = Managed::from_slice(&ctx, &[1u32; 64]).expect("x");
    let y = Managed::from_slice(&ctx, &[2u32; 64]).expect("y");
    let (x, y) = ctx
        .with_stream_set(2, StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(&s[0])?, y.attach(&s[1])?);
            let err = s[1].copy(&x, &mut y).expect_err("x is stream 0's");
            assert_eq!(err, Error::StreamMismatch { argument: 0 }, "{err}");
            let mut y = y.hand_off(&s[0])?;
            let x = x.hand_off(&s[1])?;
            let err = s[1].copy(&x, &mut y).expect_err("y is stream 0's");
            assert_eq!(err, Error::StreamMismatch { argument: 1 }, "{err}");
            let err = s[1].fill(&mut y, 5u32).expect_err("y is stream 0's");
            assert_eq!(err, Error::StreamMismatch { argument: 0 }, "{err}");
            let err = s[1].fill_zero(&mut y).expect_err("y is stream 0's");
            assert_eq!(err, Error::StreamMismatch { argument: 0 }, "{err}");
            Ok((x.sync()?, y.sync()?))
        })
        .expect("stream set");
    assert!(x.iter().all(|v| *v == 1) && y.iter().all(|v| *v == 2));
}

/// A poisoned stream (what an aborted library call does) takes no copy nor fill: another agent
/// may still touch the memory it owns. Expected: `StreamPoisoned` for a copy, a fill and a zero
/// fill, and the context usable afterwards. The poisoned stream's two buffers are never freed
/// (rule 164), hence `leaks_` in the name: the sanitizer run checks this test without leak
/// checking.
#[test]
#[ignore = "needs a CUDA device"]
fn a_poisoned_stream_takes_no_copy_nor_fill_and_leaks_its_buffers() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_slice(&ctx, &[1u32; 64]).expect("x");
    let y = Managed::from_slice(&ctx, &[2u32; 64]).expect("y");
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        s.poisoner().poison();
        assert_eq!(s.copy(&x, &mut y), Err(Error::StreamPoisoned));
        assert_eq!(s.fill(&mut y, 3u32), Err(Error::StreamPoisoned));
        assert_eq!(s.fill_zero(&mut y), Err(Error::StreamPoisoned));
        Ok(())
    })
    .expect("poisoned stream");
    common::assert_context_usable(&ctx);
}

/// Inside a capture, a fill and a copy are graph nodes: replayed in order, their destinations
/// marked written at every replay, so a mirror's host step sees each replay's result (the host
/// overwrites both between replays, and the next replay writes them again).
fn fill_and_copy_replayed<M: HostVisible>(ctx: &Context, alloc: Alloc<f32, M>) {
    let n = 4099;
    let x = alloc(ctx, &vec![0.0; n]).expect("x");
    let y = alloc(ctx, &vec![0.0; n]).expect("y");
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, y) = (x.attach(s)?, y.attach(s)?);
            let (mut graph, ()) = s.capture((x, y), |cap, (mut x, mut y)| {
                cap.fill(&mut x, 2.0f32)?;
                cap.copy(&x, &mut y)?;
                Ok(((x, y), ()))
            })?;
            for round in 0..4 {
                graph.launch(s)?;
                let seen = graph.host(s, |(x, y)| {
                    let ok = x.iter().chain(y.iter()).all(|v| *v == 2.0);
                    x.iter_mut().for_each(|v| *v = -1.0);
                    y.iter_mut().for_each(|v| *v = -1.0);
                    ok
                })?;
                assert!(
                    seen,
                    "{} round {round}: the replay's fill and copy",
                    M::NAME
                );
            }
            graph.launch(s)?;
            graph.sync()
        })
        .expect("capture, replays, host steps");
    assert!(x.iter().chain(y.iter()).all(|v| *v == 2.0), "{}", M::NAME);
}

#[test]
#[ignore = "needs a CUDA device"]
fn inside_a_capture_fills_and_copies_are_nodes_replayed_into_every_storage() {
    let _serial = serial();
    let ctx = gpu();
    fill_and_copy_replayed::<um::Mirror>(&ctx, Managed::from_slice_mirrored);
    if let Some(ctx) = device_for_captures() {
        fill_and_copy_replayed::<um::Unified>(&ctx, Managed::from_slice);
        fill_and_copy_replayed::<um::Coherent>(&ctx, Managed::from_slice_coherent);
    }
}

/// The streams of one capture share a brand, so which one owns a buffer is checked at run time
/// for copies and fills as for launches. Expected: with `x` handed to the second capture stream
/// and `y` on the first, a copy or fill on either stream naming a buffer of the other is
/// `StreamMismatch` (at the position of that buffer) before anything is recorded, and the capture
/// stays valid; once both are on one stream, the fill and the copy recorded there replay into
/// both mirrors.
#[test]
#[ignore = "needs a CUDA device"]
fn inside_a_capture_of_two_streams_copies_and_fills_take_only_buffers_of_their_stream() {
    let _serial = serial();
    let ctx = gpu();
    let n = 4099;
    let x = Managed::from_slice_mirrored(&ctx, &vec![1.0f32; n]).expect("x");
    let y = Managed::from_slice_mirrored(&ctx, &vec![0.0f32; n]).expect("y");
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, y) = (x.attach(s)?, y.attach(s)?);
            let (graph, ()) = s.capture_streams(2, (x, y), |caps, (x, mut y)| {
                let (a, b) = (&caps[0], &caps[1]);
                let mut x = x.hand_off(b)?;
                assert_eq!(
                    a.copy(&x, &mut y),
                    Err(Error::StreamMismatch { argument: 0 })
                );
                assert_eq!(
                    b.copy(&x, &mut y),
                    Err(Error::StreamMismatch { argument: 1 })
                );
                assert_eq!(
                    a.fill(&mut x, 5.0f32),
                    Err(Error::StreamMismatch { argument: 0 })
                );
                assert_eq!(
                    b.fill_zero(&mut y),
                    Err(Error::StreamMismatch { argument: 0 })
                );
                let mut y = y.hand_off(b)?;
                b.fill(&mut x, 2.0f32)?;
                b.copy(&x, &mut y)?;
                Ok(((x, y), ()))
            })?;
            graph.launch(s)?;
            graph.sync()
        })
        .expect("capture on two streams");
    assert!(x.iter().chain(y.iter()).all(|v| *v == 2.0));
}

/// A replayed copy reads its source as it is at each replay: what the host writes into the
/// source between replays (`Graph::host`) reaches the device before the next one, in every
/// storage (a mirror copies its host half over at the re-attach). Expected: after each replay,
/// the destination holds the values the host wrote into the source just before it.
fn a_copy_fed_by_the_host<M: HostVisible>(ctx: &Context, alloc: Alloc<f32, M>) {
    let n = 4099;
    let x = alloc(ctx, &vec![0.0; n]).expect("x");
    let y = alloc(ctx, &vec![-1.0; n]).expect("y");
    let value = |round: usize, i: usize| (round * n + i) as f32;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, y) = (x.attach(s)?, y.attach(s)?);
        let (mut graph, ()) = s.capture((x, y), |cap, (x, mut y)| {
            cap.copy(&x, &mut y)?;
            Ok(((x, y), ()))
        })?;
        for round in 1..=4 {
            graph.host(s, |(x, _)| {
                x.iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = value(round, i));
            })?;
            graph.launch(s)?;
            let wrong = graph.host(s, |(_, y)| {
                y.iter()
                    .enumerate()
                    .position(|(i, v)| *v != value(round, i))
            })?;
            assert_eq!(wrong, None, "{} round {round}: the source fed", M::NAME);
        }
        graph.sync().map(drop)
    })
    .expect("replays fed by the host");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_replayed_copy_reads_what_the_host_wrote_into_its_source_between_replays() {
    let _serial = serial();
    let ctx = gpu();
    a_copy_fed_by_the_host::<um::Mirror>(&ctx, Managed::from_slice_mirrored);
    if let Some(ctx) = device_for_captures() {
        a_copy_fed_by_the_host::<um::Unified>(&ctx, Managed::from_slice);
        a_copy_fed_by_the_host::<um::Coherent>(&ctx, Managed::from_slice_coherent);
    }
}

/// A copy's source dropped right after the copy was enqueued (still queued behind a spinning
/// kernel) is freed only once the stream has run the copy: its drop waits for its stream.
/// Expected: the stream is idle right after the drop, an allocation of the same size made then
/// (which may reuse the freed memory) and written does not reach the destination, and the
/// destination holds the source's values.
#[test]
#[ignore = "needs a CUDA device"]
fn a_source_dropped_right_after_its_copy_is_freed_only_once_the_copy_ran() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1 << 20;
    let want: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = Managed::from_slice_mirrored(&ctx, &want).expect("x");
    let y = Managed::from_slice_mirrored(&ctx, &vec![0.0f32; n]).expect("y");
    let busy = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("busy");
    let y = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y, mut busy) = (x.attach(s)?, y.attach(s)?, busy.attach(s)?);
            spin_then_add(s, &mut busy, 1.0, 50_000_000)?;
            s.copy(&x, &mut y)?;
            drop(x);
            assert!(s.is_idle()?, "the source's drop waited for the copy");
            let reuse = Managed::from_slice_mirrored(&ctx, &vec![-7.0f32; n])?;
            drop(reuse);
            let (y, _busy) = s.sync_all((y, busy))?;
            Ok(y)
        })
        .expect("copy, then drop the source");
    assert_eq!(&y[..], &want[..]);
}

/// A graph never replays a copy from a buffer it does not hold: a source dropped inside the
/// capture closure after a copy from it was recorded fails the capture. Expected:
/// `CaptureLostBuffer { lost: 1 }`, no graph, and the context usable afterwards (the dropped
/// buffer is freed once the capture has ended and its stream is done).
#[test]
#[ignore = "needs a CUDA device"]
fn a_source_dropped_inside_a_capture_after_a_copy_from_it_fails_the_capture() {
    let _serial = serial();
    let ctx = gpu();
    let bufs: Vec<_> = (0..2)
        .map(|i| Managed::from_slice_mirrored(&ctx, &[i as f32; 4099]).expect("alloc"))
        .collect();
    ctx.with_stream(StreamOptions::new(), |s| {
        let bufs = bufs
            .into_iter()
            .map(|b| b.attach(s))
            .collect::<um::Result<Vec<_>>>()?;
        let got = s.capture(bufs, |cap, mut bufs| {
            let mut y = bufs.pop().expect("two buffers");
            let x = bufs.pop().expect("two buffers");
            cap.copy(&x, &mut y)?;
            drop(x);
            Ok((vec![y], ()))
        });
        assert_eq!(got.map(drop), Err(Error::CaptureLostBuffer { lost: 1 }));
        Ok(())
    })
    .expect("the stream's scope");
    common::assert_context_usable(&ctx);
}
