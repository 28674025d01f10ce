//! Red-team attacks on the safe launchers at run time: each gives exact results or a clear
//! `Err` before anything runs. (Compile-time attacks: `tests/ui/`; um-build's reading:
//! `crates/um-build/tests/redteam*.rs`.)
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use common::{gpu, workload};
use um::kernels::testing;
use um::{Error, Linear, Managed, StreamOptions};

#[test]
#[ignore = "needs a CUDA device"]
fn a_loaded_prefix_of_a_module_does_not_stand_for_it() {
    let ctx = gpu();
    // testing.cu's PTX up to its second kernel: a valid module holding add_scalar alone, at
    // the same address as the whole text. Before the caches compared lengths, it was then
    // found for every launcher of testing.cu, and axpy was "not found".
    let ptx: &'static str = testing::PTX;
    let second = ptx
        .match_indices(".entry")
        .nth(1)
        .map(|(at, _)| ptx[..at].rfind('\n').map_or(at, |nl| nl + 1))
        .expect("testing.cu has several kernels");
    let prefix: &'static str = &ptx[..second];
    assert_eq!(prefix.as_ptr(), ptx.as_ptr());
    ctx.load_ptx(prefix)
        .expect("the prefix is a module of add_scalar alone");
    let x = Managed::from_fn(&ctx, 1000, |i| i as f32).expect("alloc");
    let y = Managed::from_fn(&ctx, 1000, |_| 1.0f32).expect("alloc");
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            testing::axpy(s, &x, &mut y, 2.0)?;
            testing::add_scalar(s, &mut y, 0.5)?;
            s.sync_all((x, y))
        })
        .expect("axpy and add_scalar from the whole module");
    for (i, (xv, yv)) in x.iter().zip(y.iter()).enumerate() {
        assert_eq!(*yv, 2.0 * *xv + 1.5, "element {i}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn buffers_that_share_n_but_differ_in_length_are_refused_before_launch() {
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, 100, |_| 1.0f32).expect("alloc");
    let y = Managed::from_fn(&ctx, 101, |_| 5.0f32).expect("alloc");
    let (got, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            let got = testing::axpy(s, &x, &mut y, 2.0);
            let got_with = testing::axpy_with(s, Linear::new(1, 1)?, &x, &mut y, 2.0);
            assert_eq!(got, got_with);
            let (_x, y) = s.sync_all((x, y))?;
            Ok((got, y))
        })
        .expect("stream work");
    assert_eq!(
        got,
        Err(Error::LengthMismatch {
            kernel: "axpy",
            first: "x",
            expected: 100,
            buffer: "y",
            len: 101
        })
    );
    assert!(y.iter().all(|v| *v == 5.0), "a refused launch ran");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_one_element_buffer_under_a_huge_grid_is_written_once() {
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

#[test]
#[ignore = "needs a CUDA device"]
fn a_read_only_buffer_of_another_stream_of_the_set_is_refused() {
    let ctx = gpu();
    let x = Managed::from_fn(&ctx, 64, |_| 1.0f32).expect("alloc");
    let y = Managed::from_fn(&ctx, 64, |_| 3.0f32).expect("alloc");
    let (err, x, y) = ctx
        .with_stream_set(2, StreamOptions::new(), |s| {
            // x belongs to s[0]; the launch is on s[1], which owns y. Streams of a set share a
            // brand, so this compiles; a kernel of s[1] reading x while s[0] may write it
            // would race, so it is refused at run time, and nothing runs.
            let (x, mut y) = (x.attach(&s[0])?, y.attach(&s[1])?);
            let err = testing::axpy(&s[1], &x, &mut y, 2.0).expect_err("x is s[0]'s");
            let x = s[0].sync_all((x,))?.0;
            let y = s[1].sync_all((y,))?.0;
            Ok((err, x, y))
        })
        .expect("streams");
    assert_eq!(err, Error::StreamMismatch { argument: 0 });
    assert!(x.iter().all(|v| *v == 1.0));
    assert!(y.iter().all(|v| *v == 3.0), "a refused launch ran");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_panic_or_a_drop_after_a_launch_frees_nothing_the_kernel_still_uses() {
    let ctx = gpu();
    let n = workload(1 << 24, 1 << 12);
    // A panic in the closure while add_scalar may still run on `a`: unwinding drops `a` (which
    // must wait for its stream before freeing) and then the stream.
    let a = Managed::from_fn(&ctx, n, |_| 0.0f32).expect("alloc");
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let mut a = a.attach(s)?;
            for _ in 0..8 {
                testing::add_scalar(s, &mut a, 1.0)?;
            }
            panic!("a panic with kernels in flight");
            #[allow(unreachable_code)]
            a.sync().map(drop)
        })
    }));
    assert!(unwound.is_err(), "the closure panicked");
    // A drop mid-way: `b` is dropped with its kernels queued; `c` is used after.
    let b = Managed::from_fn(&ctx, n, |_| 0.0f32).expect("alloc");
    let c = Managed::from_fn(&ctx, n, |i| i as f32).expect("alloc");
    let c = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut b, mut c) = (b.attach(s)?, c.attach(s)?);
            for _ in 0..8 {
                testing::add_scalar(s, &mut b, 1.0)?;
            }
            drop(b);
            testing::add_scalar(s, &mut c, 0.5)?;
            c.sync()
        })
        .expect("the context still works after the panic");
    for (i, v) in c.iter().enumerate() {
        assert_eq!(*v, i as f32 + 0.5, "element {i}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn default_streams_run_the_safe_launchers_exactly() {
    let ctx = gpu();
    let n = workload(1 << 20, 1 << 10);
    // The legacy stream, with memory attached globally (the only attach it allows).
    let a = Managed::from_fn(&ctx, n, |i| i as f32).expect("alloc");
    let a = ctx
        .with_legacy_stream(|l| {
            let mut a = a.attach_global(l)?;
            testing::add_scalar(l, &mut a, 1.0)?;
            testing::add_scalar_with(l, Linear::new(3, 7)?, &mut a, 1.0)?;
            a.sync()
        })
        .expect("legacy");
    for (i, v) in a.iter().enumerate() {
        assert_eq!(*v, i as f32 + 2.0, "legacy element {i}");
    }
    // Each of four threads on its own per-thread default stream, its own buffer.
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let ctx = ctx.clone();
                scope.spawn(move || {
                    let b = Managed::from_fn(&ctx, n, |i| (i + t) as f32).expect("alloc");
                    let b = ctx
                        .with_per_thread_stream(|p| {
                            let mut b = b.attach(p)?;
                            for _ in 0..4 {
                                testing::add_scalar(p, &mut b, 1.0)?;
                            }
                            b.sync()
                        })
                        .expect("per-thread stream");
                    for (i, v) in b.iter().enumerate() {
                        assert_eq!(*v, (i + t) as f32 + 4.0, "thread {t} element {i}");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread");
        }
    });
}

/// Issue 18, hole 4: `fill` is declared by a prototype in `testing.cu` and defined in
/// `testing_fill.cuh` with other parameter names. Before, the launcher chose the count by name,
/// and a prototype that named the parameters otherwise than the definition made
/// `fill(s, &mut y16, 1 << 30)` pass `1 << 30` where the kernel read its count: an
/// out-of-bounds write of 4 GiB (seen: `CUDA_ERROR_ILLEGAL_ADDRESS`; memcheck: `Invalid
/// __global__ write`). Now the length is the position whose type is `um::len32`, checked by
/// the compiler: `1 << 30` is the value, and only `y`'s 16 elements are written.
#[test]
#[ignore = "needs a CUDA device"]
fn a_value_that_looks_like_a_count_never_drives_the_kernel_past_its_buffer() {
    let ctx = gpu();
    let y = Managed::from_fn(&ctx, 16, |_| 0.0f32).expect("alloc");
    let guard = Managed::from_fn(&ctx, 1 << 16, |_| -1.0f32).expect("alloc");
    let (y, guard) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (mut y, guard) = (y.attach(s)?, guard.attach(s)?);
            testing::fill(s, &mut y, 1 << 30)?;
            testing::fill_with(s, Linear::new(4096, 1024)?, &mut y, 1 << 30)?;
            s.sync_all((y, guard))
        })
        .expect("fill writes its buffer only");
    assert!(y.iter().all(|v| *v == (1u32 << 30) as f32), "{:?}", &y[..4]);
    assert!(guard.iter().all(|v| *v == -1.0), "nothing else was written");
}

/// A kernel compiled with `__launch_bounds__(64)`: a launch of larger blocks is refused before
/// the driver sees it, naming the kernel and its limit; one within the limit runs.
#[test]
#[ignore = "needs a CUDA device"]
fn a_block_larger_than_the_kernels_launch_bounds_is_refused() {
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

/// Issue 18's red team, suspect 4: typed launchers keep no reference to the `Context` handle
/// whose module they launch, and a handle unloads its modules when its last clone goes. Here
/// memory of handle `h2` runs a kernel of handle `h1`'s module on an `h1` stream, is handed to an
/// `h2` stream, and `h1` is dropped while the kernel still runs. A handle's drop now waits for
/// the context's work before it unloads a module, so the kernel finishes its work and the
/// result is exact (and the sanitizer pass sees no error).
#[test]
#[ignore = "needs a CUDA device"]
fn dropping_a_handle_whose_kernel_still_runs_unloads_nothing_under_it() {
    let h2 = gpu();
    let n = 4096;
    let data = Managed::from_fn(&h2, n, |_| 1.0f32).expect("alloc");
    let spin_ns = if std::env::var_os("UM_SANITIZE").is_some() {
        10_000_000
    } else {
        300_000_000
    };
    let data = h2
        .with_stream(StreamOptions::new(), |outer| {
            let h1 = gpu();
            assert!(h1.same_as(&h2));
            let d = h1.with_stream(StreamOptions::new(), |inner| {
                let mut d = data.attach(inner)?;
                testing::spin_then_add(inner, &mut d, 1.0, spin_ns)?;
                d.hand_off(outer)
            })?;
            drop(h1);
            d.sync()
        })
        .expect("the kernel of a dropped handle completes");
    assert!(data.iter().all(|v| *v == 2.0), "{}", data[0]);
}
