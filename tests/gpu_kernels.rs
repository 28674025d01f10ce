//! Every typed launcher of um-kernels against a CPU reference, at odd sizes and at one element.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

mod common;

use common::gpu;
use um::kernels::{reference, run_task, streams, testing};
use um::{Context, Managed, StreamOptions};

/// Odd sizes and one element; the largest is smaller under the sanitizer.
fn sizes() -> [usize; 5] {
    [1, 3, 255, 257, common::workload(1_000_003, 10_007)]
}

fn input(ctx: &Context, n: usize, seed: usize) -> Managed<[f32]> {
    Managed::from_fn(ctx, n, |i| ((i * 7 + seed) % 1001) as f32 * 0.125).expect("alloc")
}

#[test]
#[ignore = "needs a CUDA device"]
fn transform_and_convert_match_the_cpu() {
    let ctx = gpu();
    for n in sizes() {
        let (x, d, o) = (input(&ctx, n, 1), input(&ctx, n, 2), input(&ctx, n, 3));
        let want_d: Vec<f32> = x.iter().zip(d.iter()).map(|(x, d)| 2.0 * x + d).collect();
        let want_o: Vec<f32> = want_d.iter().map(|d| 0.5 * d).collect();
        let (d, o) = ctx
            .with_stream(StreamOptions::new(), |s| {
                let (x, mut d, mut o) = (x.attach(s)?, d.attach(s)?, o.attach(s)?);
                run_task::transform(s, &x, &mut d)?;
                run_task::convert(s, &mut o, &d)?;
                let (d, o, _x) = s.sync_all((d, o, x))?;
                Ok((d, o))
            })
            .expect("launches");
        assert_eq!(&*d, &want_d[..], "transform, n = {n}");
        assert_eq!(&*o, &want_o[..], "convert, n = {n}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn seed_kernel_matches_the_cpu_with_any_grid() {
    let ctx = gpu();
    for n in sizes() {
        for config in [
            None,
            Some(um::Linear::new(1, 64).expect("1 x 64")),
            Some(um::Linear::new(3, 1).expect("3 x 1")),
            Some(um::Linear::new(1, 1024).expect("1 x 1024")),
        ] {
            let x = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("alloc");
            let x = ctx
                .with_stream(StreamOptions::new(), |s| {
                    let mut x = x.attach(s)?;
                    match config {
                        None => streams::kernel(s, &mut x)?,
                        Some(c) => streams::kernel_with(s, c, &mut x)?,
                    }
                    x.sync()
                })
                .expect("launch");
            assert_eq!(
                reference::first_seed_kernel_mismatch(&x),
                None,
                "n = {n}, {config:?}: (index, got, want)"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn add_scalar_and_axpy_match_the_cpu() {
    let ctx = gpu();
    for n in sizes() {
        let (x, y) = (input(&ctx, n, 4), input(&ctx, n, 5));
        let want: Vec<f32> = x
            .iter()
            .zip(y.iter())
            .map(|(x, y)| 3.0 * x + (y + 1.5))
            .collect();
        let y = ctx
            .with_stream(StreamOptions::new(), |s| {
                let (x, mut y) = (x.attach(s)?, y.attach(s)?);
                testing::add_scalar(s, &mut y, 1.5)?;
                testing::axpy(s, &x, &mut y, 3.0)?;
                s.sync_all((y, x)).map(|(y, _)| y)
            })
            .expect("launches");
        assert_eq!(&*y, &want[..], "n = {n}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn stamp_and_empty_run() {
    let ctx = gpu();
    let t = Managed::<[u64]>::zeroed_slice(&ctx, 2).expect("alloc");
    let t = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut t = t.attach(s)?;
            streams::stamp(s, &mut t, 0)?;
            streams::empty(s)?;
            streams::stamp(s, &mut t, 1)?;
            streams::stamp(s, &mut t, 7)?; // out of range: the kernel ignores it
            t.sync()
        })
        .expect("launches");
    assert!(t[0] > 0 && t[1] >= t[0], "timestamps {:?}", &*t);
}

#[test]
#[ignore = "needs a CUDA device"]
fn buffers_of_different_lengths_are_refused_before_launch() {
    let ctx = gpu();
    let (x, y) = (input(&ctx, 10, 0), input(&ctx, 11, 0));
    let err = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            testing::axpy(s, &x, &mut y, 1.0)
        })
        .expect_err("lengths differ");
    assert!(
        matches!(
            err,
            um::Error::LengthMismatch {
                kernel: "axpy",
                expected: 10,
                len: 11,
                ..
            }
        ),
        "{err}"
    );
    // Empty buffers never reach a launcher: the allocation is refused.
    assert!(matches!(
        Managed::<[f32]>::zeroed_slice(&ctx, 0),
        Err(um::Error::ZeroSized { .. })
    ));
}

#[test]
#[ignore = "needs a CUDA device"]
fn launchers_on_the_per_thread_and_legacy_streams() {
    let ctx = gpu();
    let x = input(&ctx, 1000, 9);
    let want: Vec<f32> = x.iter().map(|v| v + 2.0).collect();
    let x = ctx
        .with_per_thread_stream(|pts| {
            let mut x = x.attach(pts)?;
            testing::add_scalar(pts, &mut x, 1.0)?;
            x.sync()
        })
        .expect("per-thread");
    let x = ctx
        .with_legacy_stream(|legacy| {
            let mut x = x.attach_global(legacy)?;
            testing::add_scalar(legacy, &mut x, 1.0)?;
            streams::empty(legacy)?;
            x.sync()
        })
        .expect("legacy");
    assert_eq!(&*x, &want[..]);
}

#[test]
#[ignore = "needs a CUDA device"]
fn modules_and_kernels_load_once_per_context() {
    let ctx = gpu();
    let copy: &'static str = Box::leak(um::kernels::ptx::TESTING_PTX.to_owned().into_boxed_str());
    assert_ne!(copy.as_ptr(), um::kernels::ptx::TESTING_PTX.as_ptr());
    let (modules_before, kernels_before) = ctx.cache_stats();
    for _ in 0..3 {
        ctx.kernel(testing::PTX, "axpy").expect("kernel");
        ctx.kernel(copy, "axpy")
            .expect("same kernel through a copy of the text");
        ctx.load_ptx(copy).expect("same module");
    }
    let (modules, kernels) = ctx.cache_stats();
    assert!(
        modules - modules_before <= 1,
        "the same PTX was loaded {} times",
        modules - modules_before
    );
    assert!(
        kernels - kernels_before <= 1,
        "axpy was cached {} times",
        kernels - kernels_before
    );
}
