//! No launch a safe launcher accepts makes two threads share an index. A racing configuration
//! (`grid: (1, 64, 1)` on `add_scalar`) is a `LaunchConfig`, which safe launchers do not take
//! (`tests/ui/launch/three_dimensional_config_to_safe_launcher`); here every kind of `Linear`
//! launch, down to one thread and up to 2^31 - 1024 threads, gives exact results (also on a
//! one-element buffer, and `Linear::for_len` of any length), a grid whose indices would wrap is
//! an `Err` before anything is launched, and so is a block larger than the kernel's
//! `__launch_bounds__`.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use common::{gpu, workload};
use um::kernels::streams;
use um::{Error, LaunchConfig, Linear, Managed, StreamOptions};
use um_test_kernels::{reference, testing};

/// The largest grid a `Linear` allows with full blocks: 2^21 - 1 blocks of 1024 threads.
fn largest() -> Linear {
    Linear::new((Linear::MAX_THREADS / 1024) as u32, 1024).expect("largest grid")
}

#[test]
#[ignore = "needs a CUDA device"]
fn every_linear_launch_of_add_scalar_is_exact() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    // 32 zeros, as in the issue; then a length that no block size divides.
    for n in [32usize, 1_000_003] {
        let mut geometries = vec![
            Linear::new(64, 1).expect("the issue's 64 threads, in one dimension"),
            Linear::new(1, 1).expect("one thread"),
            Linear::new(1, 32).expect("a warp"),
            Linear::new(1, 1024).expect("one full block"),
            Linear::new(1000, 7).expect("odd blocks"),
            Linear::new(3, 1000).expect("odd threads"),
        ];
        if std::env::var_os("UM_SANITIZE").is_none() {
            geometries.push(largest());
        }
        let data = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("alloc");
        let data = ctx
            .with_stream(StreamOptions::new(), |s| {
                let mut data = data.attach(s)?;
                // Four rounds, as the four runs: a lost update shows as a missing 1.0.
                for _ in 0..4 {
                    for &g in &geometries {
                        testing::add_scalar_with(s, g, &mut data, 1.0)?;
                    }
                }
                data.sync()
            })
            .expect("launches");
        let want = (4 * geometries.len()) as f32;
        let wrong: Vec<(usize, f32)> = data
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != want)
            .map(|(i, v)| (i, *v))
            .take(5)
            .collect();
        assert!(
            wrong.is_empty(),
            "n = {n}: want {want} everywhere, got {wrong:?}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_grid_whose_index_would_wrap_the_count_type_is_refused_before_launch() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let grid = largest(); // 2^31 - 1024 threads
    // `kernel` counts with `int n`: the last index plus the grid's threads must stay below
    // 2^31, which allows at most 1024 elements for this grid.
    let fits = Managed::<[f32]>::zeroed_slice(&ctx, 1024).expect("alloc");
    let wraps = Managed::<[f32]>::zeroed_slice(&ctx, 1025).expect("alloc");
    let (fits, wraps, refused) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut fits, mut wraps) = (fits.attach(s)?, wraps.attach(s)?);
            let refused = streams::kernel_with(s, grid, &mut wraps);
            if std::env::var_os("UM_SANITIZE").is_none() {
                streams::kernel_with(s, grid, &mut fits)?;
            } else {
                streams::kernel(s, &mut fits)?;
            }
            let (fits, wraps) = s.sync_all((fits, wraps))?;
            Ok((fits, wraps, refused))
        })
        .expect("stream work");
    match refused {
        Err(Error::IndexOverflow {
            kernel: "kernel",
            param: "n",
            len: 1025,
            threads,
            max,
        }) => assert_eq!((threads, max), (grid.total_threads(), i32::MAX as u64)),
        other => panic!("expected IndexOverflow, got {other:?}"),
    }
    assert!(wraps.iter().all(|v| *v == 0.0), "the refused launch ran");
    assert_eq!(reference::first_streams_kernel_mismatch(&fits), None);
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_unsafe_launcher_runs_a_kernel_um_cannot_vouch_for() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = 4099u32;
    // A permutation: every index written by exactly one thread, all in bounds.
    let perm: Vec<u32> = (0..n).map(|i| (i * 17) % n).collect();
    let x = Managed::<[f32]>::zeroed_slice(&ctx, n as usize).expect("alloc");
    let idx = Managed::from_slice(&ctx, &perm).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut x, idx) = (x.attach(s)?, idx.attach(s)?);
            // SAFETY: `idx` is a permutation of 0..n (17 and 4099 are coprime), `x` has n
            // elements, and the kernel's threads above n do nothing: every write is in bounds
            // and no element is written twice.
            unsafe {
                testing::scatter(
                    s,
                    LaunchConfig::grid_1d(n.div_ceil(128), 128),
                    &mut x,
                    &idx,
                    7.0,
                    n,
                )?
            };
            let (x, _idx) = s.sync_all((x, idx))?;
            Ok(x)
        })
        .expect("launch");
    assert!(x.iter().all(|v| *v == 7.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_one_element_buffer_under_a_huge_grid_is_written_once() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    // 2^31 - 1024 threads (64 Ki under the sanitizer), one element: only thread 0 touches it.
    let grid = if std::env::var_os("UM_SANITIZE").is_some() {
        Linear::new(64, 1024).expect("grid")
    } else {
        Linear::new((Linear::MAX_THREADS / 1024) as u32, 1024).expect("grid")
    };
    let one = Managed::from_slice(&ctx, &[41.0f32]).expect("alloc");
    let one = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut one = one.attach(s)?;
            testing::add_scalar_with(s, grid, &mut one, 1.0)?;
            one.sync()
        })
        .expect("launch");
    assert_eq!(one[0], 42.0);
}

#[test]
#[ignore = "needs a CUDA device"]
fn for_len_of_any_length_is_a_valid_launch_and_covers_the_buffer() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let n = workload(1 << 22, 1 << 12);
    let a = Managed::from_fn(&ctx, n, |_| 0.0f32).expect("alloc");
    let a = ctx
        .with_stream(StreamOptions::new(), |s| {
            for len in [0, 1, 255, 256, 257, usize::MAX / 2, usize::MAX] {
                let l = Linear::for_len(s, len);
                assert!(
                    l.blocks() >= 1 && l.threads_per_block() >= 1,
                    "{len}: {l:?}"
                );
                assert!(l.total_threads() <= Linear::MAX_THREADS, "{len}: {l:?}");
                assert_eq!(Linear::new(l.blocks(), l.threads_per_block()), Ok(l));
            }
            let mut a = a.attach(s)?;
            // The launch for the longest length there is, on a short buffer: exact.
            testing::add_scalar_with(s, Linear::for_len(s, usize::MAX), &mut a, 1.0)?;
            // And the launch for one element, on the whole buffer: the grid-stride loop
            // covers the rest.
            testing::add_scalar_with(s, Linear::for_len(s, 1), &mut a, 1.0)?;
            a.sync()
        })
        .expect("launches");
    assert!(a.iter().all(|v| *v == 2.0));
}

/// A kernel compiled with `__launch_bounds__(64)`: a launch of larger blocks is refused before
/// the driver sees it, naming the kernel and its limit; one within the limit runs.
#[test]
#[ignore = "needs a CUDA device"]
fn a_block_larger_than_the_kernels_launch_bounds_is_refused() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let data = Managed::from_fn(&ctx, 1000, |_| 1.0f32).expect("alloc");
    let (refused, data) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut data = data.attach(s)?;
            let refused = testing::bounded_add_with(s, Linear::new(4, 128)?, &mut data, 5.0);
            testing::bounded_add_with(s, Linear::new(4, 64)?, &mut data, 1.0)?;
            Ok((refused, data.sync()?))
        })
        .expect("stream work");
    assert_eq!(
        refused,
        Err(Error::BlockTooLarge {
            kernel: "bounded_add".to_owned(),
            threads: 128,
            max: 64
        })
    );
    assert!(
        data.iter().all(|v| *v == 2.0),
        "only the launch of 64-thread blocks ran"
    );
    // The raw kernel says its limit too.
    let k = ctx.kernel(testing::PTX, "bounded_add").expect("kernel");
    assert_eq!(k.max_threads_per_block(), 64);
}
