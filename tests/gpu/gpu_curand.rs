//! cuRAND on owned buffers (`crates/um-curand`): a generator belongs to one stream and writes
//! only buffers that stream owns. Uniform numbers land in (0, 1] and normal numbers have the
//! mean and deviation asked for, in f32 and f64, at odd lengths, on every storage (device memory included); one seed
//! gives one sequence; what cuRAND cannot do (an odd length of normal numbers, a deviation that
//! is negative or not finite) and calls on another stream of a set are refused before cuRAND
//! runs, the buffer untouched; a generator dropped inside a capture closure is destroyed once
//! the capture has ended, and nothing it held is lost. A generator is refused while a capture
//! of `um` is in progress or waits (but made inside the hold a waiting capture waits for), and
//! 16 holds deep.
//!
//! Every test needs a GPU and cuRAND (the toolkit's `libcurand.so.10`, found as
//! `docs/interop.md` says). The missing-library error needs neither: it is tested in
//! `crates/um-curand/src/library.rs`, which runs everywhere.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use common::{Contents, device_for_captures, gpu, serial};
use um::{Context, HostOwned, Managed, StreamOptions};
use um_curand::{Element, Error, Rng, RngKind};
use um_test_kernels::testing::add_scalar;

/// The test's element types, with conversions to and from f64.
trait Num: Element + Into<f64> {
    fn of(v: f64) -> Self;
}
impl Num for f32 {
    fn of(v: f64) -> Self {
        v as f32
    }
}
impl Num for f64 {
    fn of(v: f64) -> Self {
        v
    }
}

/// What fills a buffer before a call: a value no uniform or normal draw of the tests yields
/// (uniform numbers are in (0, 1]; the refused calls must leave it).
const SENTINEL: f64 = -7.25;

/// How one storage allocates a host-owned buffer from a slice.
type Alloc<T, M> = fn(&Context, &[T]) -> um::Result<Managed<[T], HostOwned, M>>;

/// `n` uniform numbers from a fresh generator of `kind` and `seed`, on a stream of its own,
/// into a buffer of storage `M` filled with [`SENTINEL`] first.
fn uniform<T: Num, M: Contents>(
    ctx: &Context,
    alloc: Alloc<T, M>,
    n: usize,
    kind: RngKind,
    seed: u64,
) -> Vec<f64> {
    let x = alloc(ctx, &vec![T::of(SENTINEL); n]).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut rng = Rng::new(s, kind, seed)?;
            let mut x = x.attach(s)?;
            rng.uniform(s, &mut x)?;
            x.sync()
        })
        .expect("uniform numbers");
    M::contents(&x).into_iter().map(Into::into).collect()
}

/// `n` normal numbers of `mean` and `stddev`, as [`uniform`].
fn normal<T: Num, M: Contents>(
    ctx: &Context,
    alloc: Alloc<T, M>,
    n: usize,
    (mean, stddev): (f64, f64),
    seed: u64,
) -> Vec<f64> {
    let x = alloc(ctx, &vec![T::of(SENTINEL); n]).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut rng = Rng::new(s, RngKind::Philox, seed)?;
            let mut x = x.attach(s)?;
            rng.normal(s, &mut x, T::of(mean), T::of(stddev))?;
            x.sync()
        })
        .expect("normal numbers");
    M::contents(&x).into_iter().map(Into::into).collect()
}

/// The sample mean and standard deviation.
fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Every element drawn from (0, 1]; for long buffers, a mean within 10 standard errors of 1/2.
fn check_uniform(what: &str, v: &[f64]) {
    for (i, x) in v.iter().enumerate() {
        assert!(
            *x > 0.0 && *x <= 1.0,
            "{what}: element {i} is {x}, not in (0, 1]"
        );
    }
    if v.len() >= 1000 {
        let (mean, _) = moments(v);
        let se = (1.0 / 12.0f64).sqrt() / (v.len() as f64).sqrt();
        assert!(
            (mean - 0.5).abs() < 10.0 * se,
            "{what}: mean {mean} of {} uniform numbers",
            v.len()
        );
    }
}

fn every_storage_uniform<T: Num>(ctx: &Context) {
    for n in [1, 7, 1_000_003] {
        for kind in [RngKind::Philox, RngKind::Xorwow, RngKind::Mrg32k3a] {
            let what = format!("{} {kind:?} n = {n}", std::any::type_name::<T>());
            check_uniform(
                &format!("{what} unified"),
                &uniform::<T, _>(ctx, Managed::from_slice, n, kind, 11),
            );
            check_uniform(
                &format!("{what} mirrored"),
                &uniform::<T, _>(ctx, Managed::from_slice_mirrored, n, kind, 11),
            );
            check_uniform(
                &format!("{what} device"),
                &uniform::<T, _>(ctx, Managed::from_slice_device, n, kind, 11),
            );
            if ctx.info().concurrent_managed_access {
                check_uniform(
                    &format!("{what} coherent"),
                    &uniform::<T, _>(ctx, Managed::from_slice_coherent, n, kind, 11),
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn uniform_numbers_fill_every_element_in_zero_to_one_at_odd_lengths_on_every_storage_f32() {
    let _serial = serial();
    every_storage_uniform::<f32>(&gpu());
}

#[test]
#[ignore = "needs a CUDA device"]
fn uniform_numbers_fill_every_element_in_zero_to_one_at_odd_lengths_on_every_storage_f64() {
    let _serial = serial();
    every_storage_uniform::<f64>(&gpu());
}

fn check_normal<T: Num>(ctx: &Context) {
    let (mean, stddev) = (3.0, 2.0);
    let n = 2_000_000;
    for (label, v) in [
        (
            "unified",
            normal::<T, _>(ctx, Managed::from_slice, n, (mean, stddev), 5),
        ),
        (
            "mirrored",
            normal::<T, _>(ctx, Managed::from_slice_mirrored, n, (mean, stddev), 5),
        ),
        (
            "device",
            normal::<T, _>(ctx, Managed::from_slice_device, n, (mean, stddev), 5),
        ),
    ] {
        assert!(
            v.iter().all(|x| x.is_finite()),
            "{label}: a value not finite"
        );
        let (m, d) = moments(&v);
        // Standard errors: of the mean 2/sqrt(n) = 0.0014, of the deviation about
        // 2/sqrt(2n) = 0.001; the bounds are 7 to 10 of them.
        assert!(
            (m - mean).abs() < 0.01,
            "{label}: sample mean {m}, asked {mean}"
        );
        assert!(
            (d - stddev).abs() < 0.01,
            "{label}: sample deviation {d}, asked {stddev}"
        );
    }
    // The shortest length cuRAND takes: a pair, both written.
    let v = normal::<T, _>(ctx, Managed::from_slice, 2, (0.0, 1.0), 5);
    assert!(v.iter().all(|x| *x != SENTINEL && x.is_finite()), "{v:?}");
}

#[test]
#[ignore = "needs a CUDA device"]
fn normal_numbers_have_the_mean_and_deviation_asked_for_f32() {
    let _serial = serial();
    check_normal::<f32>(&gpu());
}

#[test]
#[ignore = "needs a CUDA device"]
fn normal_numbers_have_the_mean_and_deviation_asked_for_f64() {
    let _serial = serial();
    check_normal::<f64>(&gpu());
}

#[test]
#[ignore = "needs a CUDA device"]
fn one_seed_gives_one_sequence_and_another_seed_or_kind_another() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1001;
    let a = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Philox, 99);
    let b = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Philox, 99);
    assert_eq!(a, b, "one kind and seed, two generators: two sequences");
    let c = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Philox, 100);
    assert_ne!(a, c, "two seeds gave one sequence");
    let d = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Xorwow, 99);
    assert_ne!(a, d, "two kinds gave one sequence");
    // A generator goes on where it stopped: two calls into one buffer give two draws.
    let x = Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    let y = Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut rng = Rng::new(s, RngKind::Philox, 99)?;
            let (mut x, mut y) = (x.attach(s)?, y.attach(s)?);
            rng.uniform(s, &mut x)?;
            rng.uniform(s, &mut y)?;
            s.sync_all((x, y))
        })
        .expect("two draws");
    let x: Vec<f64> = x.iter().map(|&v| v.into()).collect();
    assert_eq!(x, a, "the first draw of a seed is the sequence's start");
    assert!(
        y.iter().zip(x.iter()).any(|(p, q)| f64::from(*p) != *q),
        "the second draw repeated the first"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn random_bits_fill_every_element_with_half_of_the_bits_set() {
    let _serial = serial();
    let ctx = gpu();
    let n = 100_003;
    let x = Managed::from_slice(&ctx, &vec![0u32; n]).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut rng = Rng::new(s, RngKind::Philox, 3)?;
            let mut x = x.attach(s)?;
            rng.bits(s, &mut x)?;
            x.sync()
        })
        .expect("bits");
    let ones: u64 = x.iter().map(|v| u64::from(v.count_ones())).sum();
    let share = ones as f64 / (32.0 * n as f64);
    // 3.2 million bits: a standard error of 0.0003.
    assert!((share - 0.5).abs() < 0.005, "{share} of the bits set");
    let zeros = x.iter().filter(|v| **v == 0).count();
    assert!(zeros < 5, "{zeros} elements left 0");
}

#[test]
#[ignore = "needs a CUDA device"]
fn what_curand_cannot_do_is_refused_before_it_runs_and_the_buffer_is_untouched() {
    let _serial = serial();
    let ctx = gpu();
    let odd = Managed::from_slice(&ctx, &[SENTINEL; 7]).expect("alloc");
    let even = Managed::from_slice(&ctx, &[SENTINEL as f32; 8]).expect("alloc");
    let (odd, even) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut rng = Rng::new(s, RngKind::Philox, 1)?;
            let (mut odd, mut even) = (odd.attach(s)?, even.attach(s)?);
            assert_eq!(
                rng.normal(s, &mut odd, 0.0, 1.0),
                Err(Error::OddLength { len: 7 })
            );
            for (mean, stddev) in [
                (0.0, -1.0),
                (f32::NAN, 1.0),
                (0.0, f32::INFINITY),
                (f32::NEG_INFINITY, 1.0),
            ] {
                let got = rng.normal(s, &mut even, mean, stddev);
                assert!(
                    matches!(got, Err(Error::Distribution { .. })),
                    "mean {mean}, deviation {stddev}: {got:?}"
                );
            }
            s.sync_all((odd, even))
        })
        .expect("refusals");
    assert!(odd.iter().all(|v| *v == SENTINEL), "{:?}", &odd[..]);
    assert!(
        even.iter().all(|v| f64::from(*v) == SENTINEL),
        "{:?}",
        &even[..]
    );
    // A deviation of 0 is a distribution: every value is the mean.
    let v = normal::<f64, _>(&ctx, Managed::from_slice, 4, (1.5, 0.0), 1);
    assert_eq!(v, vec![1.5; 4]);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_generator_writes_only_on_its_own_stream_and_into_its_buffers() {
    let _serial = serial();
    let ctx = gpu();
    let x = Managed::from_slice(&ctx, &[SENTINEL as f32; 16]).expect("alloc");
    let y = Managed::from_slice(&ctx, &[SENTINEL as f32; 16]).expect("alloc");
    let (x, y) = ctx
        .with_stream_set(2, StreamOptions::new(), |s| {
            let mut rng = Rng::new(&s[0], RngKind::Philox, 1)?;
            let (mut x, mut y) = (x.attach(&s[0])?, y.attach(&s[1])?);
            // Another stream of the set: refused, whatever the buffer.
            assert_eq!(rng.uniform(&s[1], &mut y), Err(Error::WrongStream));
            // Its own stream, a buffer of the other: refused.
            assert_eq!(rng.uniform(&s[0], &mut y), Err(Error::StreamMismatch));
            rng.uniform(&s[0], &mut x)?;
            Ok((x.sync()?, y.sync()?))
        })
        .expect("streams");
    assert!(y.iter().all(|v| f64::from(*v) == SENTINEL), "{:?}", &y[..]);
    check_uniform(
        "its own buffer",
        &x.iter().map(|&v| v.into()).collect::<Vec<_>>(),
    );
}

/// Free device memory, in bytes.
fn free_memory(ctx: &Context) -> usize {
    ctx.mem_info().map_or(0, |(free, _)| free)
}

/// After a capture: the reaper drained, the device idle.
fn settle(ctx: &Context) {
    um::reap_pending();
    ctx.wait_idle().expect("the context still works");
    um::reap_pending();
}

/// Makes `count` generators of one stream, each used once (its state set up), drops them inside
/// a capture closure, and replays the graph: the free memory before they were made, while they
/// lived, and after.
fn generators_dropped_in_a_capture(ctx: &Context, count: usize) -> (usize, usize, usize) {
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
    let y = Managed::from_slice(ctx, &[0.0f32; 2]).expect("alloc");
    settle(ctx);
    let before = free_memory(ctx);
    let mut living = 0;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        let mut rngs = Vec::new();
        for i in 0..count {
            let mut rng = Rng::new(s, RngKind::Xorwow, i as u64)?;
            rng.uniform(s, &mut y)?;
            rngs.push(rng);
        }
        drop(y.sync()?);
        living = free_memory(ctx);
        let (graph, ()) = s.capture((x,), move |cap, (mut x,)| {
            add_scalar(cap, &mut x, 1.0)?;
            drop(rngs); // each destroy waits for the device: kept until the capture has ended
            Ok(((x,), ()))
        })?;
        graph.launch(s)?;
        let (x,) = graph.sync()?;
        assert!(x.iter().all(|v| *v == 1.0), "the graph replayed wrong");
        Ok(())
    })
    .expect("generators dropped inside a capture");
    settle(ctx);
    let mut after = free_memory(ctx);
    let t = std::time::Instant::now();
    while after < before && t.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        after = free_memory(ctx);
    }
    (before, living, after)
}

#[test]
#[ignore = "needs a CUDA device"]
fn generators_dropped_inside_a_capture_closure_are_destroyed_after_it_and_nothing_is_lost() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    // Once unmeasured: what cuRAND and the driver set up once per process is not a leak.
    let _ = generators_dropped_in_a_capture(&ctx, 4);
    const MIB: usize = 1 << 20;
    let (before, living, after) = generators_dropped_in_a_capture(&ctx, 128);
    println!(
        "free: {:.1} MiB before, {:.1} MiB with 128 generators, {:.1} MiB after",
        before as f64 / MIB as f64,
        living as f64 / MIB as f64,
        after as f64 / MIB as f64
    );
    // The generators must hold enough for their loss to show; else this test sees nothing.
    assert!(
        living + 16 * MIB <= before,
        "128 XORWOW generators hold less than 16 MiB: this check cannot see their destroy"
    );
    assert!(
        after + 8 * MIB >= before,
        "{} MiB lost by generators dropped inside a capture closure",
        (before - after) / MIB
    );
}

/// Free memory once what a capture kept is made and the device is idle, given up to 2 s for the
/// reaper.
fn free_after(ctx: &Context, before: usize) -> usize {
    settle(ctx);
    let mut after = free_memory(ctx);
    let t = std::time::Instant::now();
    while after < before && t.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        after = free_memory(ctx);
    }
    after
}

/// `MiB` lost between `before` and `after`, if more than 8 (what a per-process set-up may take).
fn lost_mib(before: usize, after: usize) -> Option<usize> {
    const MIB: usize = 1 << 20;
    (after + 8 * MIB < before).then(|| (before - after) / MIB)
}

/// A generator made before a capture draws inside its closure (on the eager stream) and after
/// it: its calls are not recorded, so the graph replays only its own kernel, and the draw inside
/// the closure is the start of its seed's sequence. One made inside the closure is refused with
/// `Error::CaptureInProgress` (cuRAND's set-up synchronizes with the legacy default stream,
/// which would fail the capture: the driver reported `CURAND_STATUS_LAUNCH_FAILURE` for it), and
/// the capture stays valid.
#[test]
#[ignore = "needs a CUDA device"]
fn a_generator_made_before_a_capture_draws_in_its_closure_and_one_made_inside_is_refused() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let n = 1001;
    let want = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Philox, 5);
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    let y = Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    let z = Managed::from_slice(&ctx, &vec![SENTINEL; n]).expect("alloc");
    let (x, y, z, refused) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y, mut z) = (x.attach(s)?, y.attach(s)?, z.attach(s)?);
            let mut rngs = Vec::new();
            for kind in [RngKind::Philox, RngKind::Xorwow, RngKind::Mrg32k3a] {
                rngs.push(Rng::new(s, kind, 5)?);
            }
            let (graph, (mut rngs, refused)) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                let refused: Vec<_> = [RngKind::Philox, RngKind::Xorwow]
                    .into_iter()
                    .map(|kind| Rng::new(s, kind, 6).err())
                    .collect();
                rngs[0].uniform(s, &mut y)?;
                Ok(((x,), (rngs, refused)))
            })?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            for rng in &mut rngs {
                rng.uniform(s, &mut z)?;
            }
            drop(rngs);
            Ok((x, y.sync()?, z.sync()?, refused))
        })
        .expect("generators made before a capture, used in its closure");
    for r in &refused {
        assert!(
            matches!(r, Some(Error::CaptureInProgress)),
            "a generator made inside a capture closure: {r:?}"
        );
    }
    assert!(x.iter().all(|v| *v == 1.0), "the graph replayed wrong");
    let y: Vec<f64> = y.iter().map(|&v| v.into()).collect();
    assert_eq!(
        y, want,
        "the draw inside the closure is not the seed's sequence"
    );
    check_uniform("after the capture", &z.iter().copied().collect::<Vec<_>>());
    common::assert_context_usable(&ctx);
}

/// Generators of every kind made before another thread's capture of `um` begins on the same
/// device, then used and dropped while it is open: their draws (lazily loaded kernels, with the
/// mode relaxed) do not invalidate that capture (um captures in thread-local mode), their
/// destroys are kept while it is open and made after it, and nothing is lost. A generator asked
/// for while the capture is open is refused (`Error::CaptureInProgress`): its set-up would
/// synchronize with the legacy default stream and fail the capture.
#[test]
#[ignore = "needs a CUDA device"]
fn generators_made_used_and_dropped_beside_another_threads_capture_leave_it_valid() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    // Once unmeasured: what cuRAND and the driver set up once per process is not a leak.
    let _ = uniform::<f32, _>(&ctx, Managed::from_slice, 16, RngKind::Xorwow, 1);
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    settle(&ctx);
    let before = free_memory(&ctx);
    let (in_capture, capturing) = std::sync::mpsc::channel::<()>();
    let (done, beside_done) = std::sync::mpsc::channel::<()>();
    let (go, made) = std::sync::mpsc::channel::<()>();
    let (x, living, drawn) = std::thread::scope(|t| {
        let capturer = t.spawn(|| {
            // The generators beside are made before this capture begins.
            let made = made;
            made.recv().expect("the generators were made");
            ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (graph, ()) = s.capture((x,), move |cap, (mut x,)| {
                    add_scalar(cap, &mut x, 1.0)?;
                    let _ = in_capture.send(());
                    let _ = beside_done.recv();
                    add_scalar(cap, &mut x, 1.0)?;
                    Ok(((x,), ()))
                })?;
                graph.launch(s)?;
                let (x,) = graph.sync()?;
                Ok(x)
            })
        });
        let beside = ctx.with_stream(StreamOptions::new(), |s| {
            // Moved in: if this closure returns early, the capturing thread is not left waiting.
            let go = go;
            let y = Managed::from_slice(&ctx, &[SENTINEL as f32; 1000])?;
            let mut y = y.attach(s)?;
            let mut rngs = Vec::new();
            for i in 0..128 {
                rngs.push(Rng::new(s, RngKind::Xorwow, i)?);
            }
            for kind in [RngKind::Philox, RngKind::Mrg32k3a] {
                rngs.push(Rng::new(s, kind, 3)?);
            }
            let _ = go.send(());
            capturing.recv().expect("the capture began");
            let refused = Rng::new(s, RngKind::Philox, 4).err();
            assert!(
                matches!(refused, Some(Error::CaptureInProgress)),
                "a generator made while another thread captures: {refused:?}"
            );
            for rng in &mut rngs {
                rng.uniform(s, &mut y)?;
            }
            for rng in rngs.iter_mut().rev().take(2) {
                rng.normal(s, &mut y, 0.5, 0.0)?;
                rng.uniform(s, &mut y)?;
            }
            let y = y.sync()?;
            let living = free_memory(&ctx);
            drop(rngs); // kept: the other thread's capture is open on the device
            Ok((living, y))
        });
        let _ = done.send(());
        let x = capturer
            .join()
            .expect("the capturing thread")
            .expect("the capture beside the generators stayed valid");
        let (living, y) = beside.expect("generators beside a capture");
        (x, living, y)
    });
    assert!(x.iter().all(|v| *v == 2.0), "the graph replayed wrong");
    check_uniform(
        "beside a capture",
        &drawn.iter().map(|&v| v.into()).collect::<Vec<_>>(),
    );
    let after = free_after(&ctx, before);
    const MIB: usize = 1 << 20;
    assert!(
        living + 16 * MIB <= before,
        "130 generators hold less than 16 MiB: this check cannot see their destroy"
    );
    if let Some(lost) = lost_mib(before, after) {
        panic!("{lost} MiB lost by generators dropped beside a capture");
    }
}

/// A generator of the legacy default stream (into a buffer attached globally) and one of the
/// per-thread default stream draw the same sequence for one kind and seed, into every element.
/// Expected to pass: both special handles are what cuRAND's `curandSetStream` takes (NULL,
/// `cudaStreamPerThread`), and the generator is unbound to NULL before its destroy.
#[test]
#[ignore = "needs a CUDA device"]
fn generators_of_the_legacy_and_per_thread_streams_fill_their_buffers() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1001;
    let a = Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    let b = Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    let a = ctx
        .with_legacy_stream(|s| {
            let mut rng = Rng::new(s, RngKind::Mrg32k3a, 7)?;
            let mut a = a.attach_global(s)?;
            rng.uniform(s, &mut a)?;
            a.sync()
        })
        .expect("legacy stream");
    let b = ctx
        .with_per_thread_stream(|s| {
            let mut rng = Rng::new(s, RngKind::Mrg32k3a, 7)?;
            let mut b = b.attach(s)?;
            rng.uniform(s, &mut b)?;
            b.sync()
        })
        .expect("per-thread stream");
    let a: Vec<f64> = a.iter().map(|&v| v.into()).collect();
    let b: Vec<f64> = b.iter().map(|&v| v.into()).collect();
    check_uniform("legacy", &a);
    assert_eq!(
        a, b,
        "one kind and seed, two default streams: two sequences"
    );
}

/// A generator on a stream another library made (cudarc's), as a foreign stream: it draws its
/// seed's sequence, is destroyed inside the foreign scope (its brand ends there), and the
/// stream is still cudarc's after. Expected to pass.
#[test]
#[ignore = "needs a CUDA device"]
fn a_generator_on_a_foreign_stream_draws_its_sequence_and_leaves_the_stream_alive() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1001;
    let want = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Philox, 99);
    let cudarc = cudarc::driver::CudaContext::new(0).expect("cudarc context");
    let stream = cudarc.new_stream().expect("cudarc stream");
    let x = Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    // SAFETY: cudarc keeps `stream` alive until the end of this test and enqueues nothing on it
    // while the closure runs; it captures nothing.
    let x = unsafe {
        ctx.with_foreign_stream(stream.cu_stream().cast(), |s| {
            let mut rng = Rng::new(s, RngKind::Philox, 99)?;
            let mut x = x.attach(s)?;
            rng.uniform(s, &mut x)?;
            x.sync()
        })
    }
    .expect("a generator on a foreign stream");
    let x: Vec<f64> = x.iter().map(|&v| v.into()).collect();
    assert_eq!(x, want, "a foreign stream drew another sequence");
    stream.synchronize().expect("cudarc's stream lives on");
}

/// A stream made and ended inside a capture closure gets no generator
/// (`Error::CaptureInProgress`: cuRAND's set-up would fail the capture), the stream's destroy
/// is kept for the end of the capture, the graph replays right, nothing is lost and the context
/// stays usable.
#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_made_inside_a_capture_closure_gets_no_generator_and_the_capture_stays_valid() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let _ = uniform::<f32, _>(&ctx, Managed::from_slice, 16, RngKind::Xorwow, 1);
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    settle(&ctx);
    let before = free_memory(&ctx);
    let (x, refused) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, refused) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                let refused = ctx.with_stream(StreamOptions::new(), |t| {
                    Ok((0..8)
                        .map(|i| Rng::new(t, RngKind::Xorwow, i).err())
                        .collect::<Vec<_>>())
                })?;
                Ok(((x,), refused))
            })?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            Ok((x, refused))
        })
        .expect("a stream made inside a capture closure");
    for r in &refused {
        assert!(
            matches!(r, Some(Error::CaptureInProgress)),
            "a generator of a stream made inside a capture closure: {r:?}"
        );
    }
    assert!(x.iter().all(|v| *v == 1.0), "the graph replayed wrong");
    let after = free_after(&ctx, before);
    if let Some(lost) = lost_mib(before, after) {
        panic!("{lost} MiB lost by a stream ended in a capture closure");
    }
    common::assert_context_usable(&ctx);
}

/// Generators alive when a capture closure panics: dropped while it unwinds, on the capturing
/// thread, their destroys are kept and made once the capture has ended; nothing is lost and
/// the context stays usable.
#[test]
#[ignore = "needs a CUDA device"]
fn generators_alive_when_a_capture_closure_panics_are_destroyed_once_it_has_unwound() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let _ = uniform::<f32, _>(&ctx, Managed::from_slice, 16, RngKind::Xorwow, 1);
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    let y = Managed::from_slice(&ctx, &[0.0f32; 2]).expect("alloc");
    settle(&ctx);
    let before = free_memory(&ctx);
    let panicked = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            let mut rngs = Vec::new();
            for i in 0..64 {
                rngs.push(Rng::new(s, RngKind::Xorwow, i)?);
            }
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _: um::Result<(um::Graph<'_, um::Created, _>, ())> =
                    s.capture((x,), |cap, (mut x,)| {
                        add_scalar(cap, &mut x, 1.0)?;
                        for rng in &mut rngs {
                            rng.uniform(s, &mut y)?;
                        }
                        let _alive = rngs;
                        panic!("a capture closure that panics with generators alive (on purpose)");
                    });
            }));
            drop(y.sync()?);
            Ok(caught.is_err())
        })
        .expect("the stream scope");
    assert!(panicked, "the closure's panic did not come through");
    let after = free_after(&ctx, before);
    if let Some(lost) = lost_mib(before, after) {
        panic!("{lost} MiB lost by generators dropped while a capture closure unwound");
    }
    common::assert_context_usable(&ctx);
}

/// A length past 2^32 elements is drawn to the last element, by a uniform and by a normal
/// generation: cuRAND takes `size_t` lengths, and a length it cut to 32 bits (or to a signed
/// `int`) would leave the tail unwritten, or write before the buffer. Expected to pass; where
/// it fails, the generations must be split into pieces cuRAND takes whole.
#[test]
#[ignore = "needs a CUDA device"]
fn lengths_past_two_to_the_32_are_drawn_to_the_last_element() {
    let _serial = serial();
    let ctx = gpu();
    let n: usize = (1 << 32) + 2;
    let bytes = n * std::mem::size_of::<f32>();
    if common::under_sanitizer() || free_memory(&ctx) < 2 * bytes {
        eprintln!(
            "skipped: needs {} GiB of free device memory",
            (2 * bytes) >> 30
        );
        return;
    }
    let x = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut rng = Rng::new(s, RngKind::Philox, 1)?;
            let mut x = x.attach(s)?;
            rng.uniform(s, &mut x)?;
            x.sync()
        })
        .expect("uniform numbers past 2^32");
    // Zero is not a uniform draw: every element checked at both ends and every 2^20 between.
    let probe = |x: &[f32], ok: &dyn Fn(f32) -> bool, what: &str| {
        let ends = (0..4096).chain(n - 4096..n);
        for i in ends.chain((0..n).step_by(1 << 20)) {
            assert!(ok(x[i]), "{what}: element {i} of {n} is {}", x[i]);
        }
    };
    probe(&x[..], &|v| v > 0.0 && v <= 1.0, "uniform");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut rng = Rng::new(s, RngKind::Philox, 1)?;
            let mut x = x.attach(s)?;
            // A deviation of 0: every element is the mean, which no uniform draw is.
            rng.normal(s, &mut x, 10.0, 0.0)?;
            x.sync()
        })
        .expect("normal numbers past 2^32");
    probe(&x[..], &|v| v == 10.0, "normal");
}

/// `n` uniform numbers of a generator of `seed` made now on a stream of its own (the caller's
/// hold or section around it, if any), into a unified buffer.
fn uniform_here(ctx: &Context, n: usize, seed: u64) -> Result<Vec<f64>, Error> {
    let y = Managed::from_slice(ctx, &vec![SENTINEL as f32; n])?;
    let y = ctx.with_stream(StreamOptions::new(), |s| {
        let y = y.attach(s)?;
        let drawn = Rng::new(s, RngKind::Philox, seed).and_then(|mut rng| {
            let mut y = y;
            rng.uniform(s, &mut y)?;
            Ok(y)
        });
        // The generator is dropped above: destroyed now, after a device wait, inside the hold.
        Ok(drawn.map(|y| y.sync()))
    })?;
    Ok(y??.iter().map(|&v| v.into()).collect())
}

/// While another thread's capture of `um` waits to begin on the device (held off by this
/// thread's `Context::with_captures_held_off`), a generator asked for on a third thread, in no
/// section of the device, is refused with `Error::CaptureInProgress` (its set-up would begin
/// a hold, which a waiting capture holds off); one asked for inside the hold is made (a nested
/// hold), draws its seed's sequence and is destroyed there, all before the capture begins,
/// which then ends valid. Expected to pass.
#[test]
#[ignore = "needs a CUDA device"]
fn a_generator_is_refused_while_a_capture_waits_but_made_inside_the_hold_it_waits_for() {
    let _serial = serial();
    let done = common::watchdog("generators beside a capture that waits for a hold");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let n = 1001;
    let want = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Philox, 5);
    let began = std::sync::atomic::AtomicBool::new(false);
    let (go, told) = std::sync::mpsc::channel::<()>();
    let (ctx, began) = (&ctx, &began);
    let (inside, captured) = std::thread::scope(|t| {
        let capturer = t.spawn(move || common::capture_when_told(ctx, &told, began));
        let inside = ctx.with_captures_held_off(|| {
            go.send(()).expect("the capturing thread listens");
            let waits = common::until_a_capture_waits(ctx);
            let beside = t
                .spawn(move || uniform_here(ctx, n, 5).err())
                .join()
                .expect("the third thread");
            let here = uniform_here(ctx, n, 5);
            let began = began.load(std::sync::atomic::Ordering::SeqCst);
            (waits, beside, here, began)
        });
        (inside, capturer.join().expect("the capturing thread"))
    });
    let (waits, beside, here, began_inside) = inside
        .expect("the hold")
        .expect("granted: no capture was in progress");
    assert!(
        waits,
        "the other thread's capture never waited for the hold"
    );
    assert!(
        matches!(beside, Some(Error::CaptureInProgress)),
        "a generator beside a capture that waits to begin: {beside:?}"
    );
    assert_eq!(here.expect("a generator inside the hold"), want);
    assert!(!began_inside, "the capture began inside the hold");
    assert_eq!(captured, Ok(true), "the capture after the hold");
    common::assert_context_usable(ctx);
    done.send(()).ok();
}

/// Runs `bottom` inside `n` nested holds of `ctx` (`Context::with_captures_held_off`); panics if
/// one of them is refused.
fn in_holds<R>(ctx: &Context, n: usize, bottom: &mut dyn FnMut() -> R) -> R {
    if n == 0 {
        return bottom();
    }
    ctx.with_captures_held_off(|| in_holds(ctx, n - 1, bottom))
        .expect("the hold")
        .unwrap_or_else(|| panic!("hold {n} from the bottom was refused"))
}

/// Sixteen holds deep on one thread no further hold can mark the thread, so a generator's
/// set-up is refused there with `Error::CaptureInProgress` (its message names that depth too),
/// with nothing made; fifteen deep it is made, draws its seed's sequence and is destroyed.
/// Expected to pass.
#[test]
#[ignore = "needs a CUDA device"]
fn a_generator_is_refused_sixteen_holds_deep_and_made_fifteen_deep() {
    let _serial = serial();
    let ctx = gpu();
    let n = 1001;
    let want = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Philox, 5);
    let deep = in_holds(&ctx, 16, &mut || uniform_here(&ctx, n, 5));
    assert!(
        matches!(&deep, Err(Error::CaptureInProgress)),
        "16 holds deep: {deep:?}"
    );
    let message = deep.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("16"),
        "the message names the depth: {message}"
    );
    let fifteen = in_holds(&ctx, 15, &mut || uniform_here(&ctx, n, 5));
    assert_eq!(fifteen.expect("15 holds deep"), want);
    common::assert_context_usable(&ctx);
}

/// Generators of the legacy and of the per-thread default stream, made before a capture, draw
/// inside its closure (the legacy stream's generation synchronizes with every blocking stream,
/// and the capture's streams are non-blocking; the calls are made with the mode relaxed) and
/// are dropped there (their destroys kept until the capture has ended): the capture stays
/// valid and replays only its own kernels, and each draw is its seed's sequence. Expected to
/// pass.
#[test]
#[ignore = "needs a CUDA device"]
fn generators_of_the_legacy_and_per_thread_streams_draw_inside_a_capture_closure() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let n = 1001;
    let want = uniform::<f32, _>(&ctx, Managed::from_slice, n, RngKind::Mrg32k3a, 9);
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    let a = Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    let b = Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    let (x, a, b, drawn) = ctx
        .with_legacy_stream(|l| {
            ctx.with_per_thread_stream(|p| {
                let (mut on_legacy, mut on_thread) = (
                    Rng::new(l, RngKind::Mrg32k3a, 9)?,
                    Rng::new(p, RngKind::Mrg32k3a, 9)?,
                );
                let (mut a, mut b) = (a.attach_global(l)?, b.attach(p)?);
                let (x, drawn) = ctx.with_stream(StreamOptions::new(), |s| {
                    let x = x.attach(s)?;
                    let (graph, drawn) = s.capture((x,), |cap, (mut x,)| {
                        add_scalar(cap, &mut x, 1.0)?;
                        let drawn = (on_legacy.uniform(l, &mut a), on_thread.uniform(p, &mut b));
                        drop((on_legacy, on_thread)); // destroyed once the capture has ended
                        add_scalar(cap, &mut x, 1.0)?;
                        Ok(((x,), drawn))
                    })?;
                    graph.launch(s)?;
                    let (x,) = graph.sync()?;
                    Ok((x, drawn))
                })?;
                Ok((x, a.sync()?, b.sync()?, drawn))
            })
        })
        .expect("generators of the default streams inside a capture closure");
    assert_eq!(drawn, (Ok(()), Ok(())), "the draws inside the closure");
    assert!(x.iter().all(|v| *v == 2.0), "the graph replayed wrong");
    let a: Vec<f64> = a.iter().map(|&v| v.into()).collect();
    let b: Vec<f64> = b.iter().map(|&v| v.into()).collect();
    assert_eq!(a, want, "the legacy stream's draw");
    assert_eq!(b, want, "the per-thread stream's draw");
    common::assert_context_usable(&ctx);
}
