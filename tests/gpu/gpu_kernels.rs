//! Every typed launcher of um-kernels against a CPU reference, at odd sizes and at one element;
//! arguments checked at run time before a launch (lengths that differ, a value that looks like
//! a count); the module and function caches, which find each PTX text and kernel name as itself
//! (a loaded prefix of a module, a copy, a name inside a longer literal).
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use common::gpu;
use um::kernels::{run_task, streams};
use um::{Context, Error, LaunchConfig, Linear, Managed, StreamOptions};
use um_test_kernels::{reference, testing};

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
    let _serial = crate::common::serial();
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
fn streams_kernel_matches_the_cpu_with_any_grid() {
    let _serial = crate::common::serial();
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
                reference::first_streams_kernel_mismatch(&x),
                None,
                "n = {n}, {config:?}: (index, got, want)"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn add_scalar_and_axpy_match_the_cpu() {
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
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
    let _serial = crate::common::serial();
    let ctx = gpu();
    let copy: &'static str = Box::leak(um_test_kernels::testing::PTX.to_owned().into_boxed_str());
    assert_ne!(copy.as_ptr(), um_test_kernels::testing::PTX.as_ptr());
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

/// `load_ptx` takes a text made at run time: the module outlives the text, the same contents
/// load once (again from another copy, and through the `'static` text), and its kernel runs.
#[test]
#[ignore = "needs a CUDA device"]
fn a_module_loads_once_from_a_text_made_at_run_time_and_outlives_it() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let (modules_before, _) = ctx.cache_stats();
    let text = String::from(testing::PTX);
    let module = ctx.load_ptx(&text).expect("a text made at run time");
    drop(text);
    let again = String::from(testing::PTX);
    ctx.load_ptx(&again).expect("the same contents again");
    drop(again);
    ctx.kernel(testing::PTX, "add_scalar")
        .expect("the static text finds the same module");
    let (modules, _) = ctx.cache_stats();
    assert!(
        modules - modules_before <= 1,
        "one text was loaded {} times",
        modules - modules_before
    );
    let kernel = module.kernel("add_scalar").expect("kernel");
    let x = Managed::from_slice(&ctx, &[1.0f32; 300]).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            // SAFETY: add_scalar(float *data, float value, um::len32 n) with n = 300, the
            // buffer's length, under a grid that covers it.
            unsafe {
                s.launch(
                    &kernel,
                    LaunchConfig::grid_1d(2, 256),
                    (&mut x, 2.0f32, 300u32),
                )
            }?;
            x.sync()
        })
        .expect("launch");
    assert!(x.iter().all(|v| *v == 3.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn buffers_that_share_n_but_differ_in_length_are_refused_before_launch() {
    let _serial = crate::common::serial();
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

/// `fill` is declared by a prototype in `testing.cu` and defined in `testing_fill.cuh` with other
/// parameter names. A launcher that chose the count by name, with a prototype that named the
/// parameters otherwise than the definition, made `fill(s, &mut y16, 1 << 30)` pass `1 << 30` where
/// the kernel read its count: an out-of-bounds write of 4 GiB (seen: `CUDA_ERROR_ILLEGAL_ADDRESS`;
/// memcheck: `Invalid __global__ write`). The length is the position whose type is `um::len32`,
/// checked by the compiler: `1 << 30` is the value, and only `y`'s 16 elements are written.
#[test]
#[ignore = "needs a CUDA device"]
fn a_value_that_looks_like_a_count_never_drives_the_kernel_past_its_buffer() {
    let _serial = crate::common::serial();
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

#[test]
#[ignore = "needs a CUDA device"]
fn a_loaded_prefix_of_a_module_does_not_stand_for_it() {
    let _serial = crate::common::serial();
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

/// The caches with PTX that is not the generated static: a leaked copy, a prefix at the same
/// address, a name inside a longer literal.
#[test]
#[ignore = "needs a CUDA device"]
fn the_caches_find_each_text_and_name_as_itself() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let ptx: &'static str = testing::PTX;
    let copy: &'static str = String::leak(ptx.to_owned());
    ctx.load_ptx(copy).expect("a copy loads");
    let _ = ctx.load_ptx(&ptx[..ptx.len() / 2]);
    let name: &'static str = "add_scalar_and_more";
    let k = ctx.kernel(ptx, &name[..10]).expect("add_scalar");
    assert_eq!(k.name(), "add_scalar");
    let data = Managed::from_slice(&ctx, &[0.0f32; 64]).expect("alloc");
    let data = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            testing::add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("stream work");
    assert!(data.iter().all(|v| *v == 1.0));
}

/// `load_ptx` inside a capture closure: the load (and the kernel's lookup) is made with the
/// thread's capture mode relaxed, as a launcher's first use of a kernel is, so a module made at
/// run time may be loaded and launched inside the capture. Expected: on a fresh handle (nothing
/// loaded), a text loaded, a kernel of it found by `Module::kernel` and another by
/// `Context::kernel`, and one launched on the capture stream; the capture succeeds (in
/// thread-local mode a load invalidates it), two replays add twice, and the text loaded once.
#[test]
#[ignore = "needs a CUDA device"]
fn a_module_loaded_from_a_text_inside_a_capture_leaves_the_capture_valid() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    assert_eq!(ctx.cache_stats().0, 0, "a fresh handle has no module");
    let text = String::from(testing::PTX);
    let copy: &'static str = Box::leak(testing::PTX.to_owned().into_boxed_str());
    let x = Managed::from_slice_mirrored(&ctx, &[1.0f32; 300]).expect("alloc");
    let x = ctx
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, kernel) = s.capture((x,), |cap, (mut x,)| {
                let module = ctx.load_ptx(&text)?;
                let kernel = module.kernel("add_scalar")?;
                ctx.kernel(copy, "axpy")?;
                // SAFETY: add_scalar(float *data, float value, um::len32 n) with n = 300, the
                // buffer's length, under a grid that covers it; `kernel` is of this stream's
                // handle, which the graph holds.
                unsafe {
                    cap.launch(
                        &kernel,
                        LaunchConfig::grid_1d(2, 256),
                        (&mut x, 2.0f32, 300u32),
                    )
                }?;
                Ok(((x,), kernel))
            })?;
            graph.launch(s)?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            drop(kernel);
            Ok(x)
        })
        .expect("a capture that loads a module from a text");
    assert!(x.iter().all(|v| *v == 5.0), "two replays of the kernel");
    assert_eq!(ctx.cache_stats().0, 1, "the text loaded once");
}

/// A `Kernel` holds its module, and the module its handle: a kernel of a module loaded from a
/// run-time text on a handle dropped since (with the module and the text) still launches, on a
/// stream of another handle of the device. Expected: the kernel's writes, and a usable context
/// after the kernel (the last reference to that handle) is dropped.
#[test]
#[ignore = "needs a CUDA device"]
fn a_kernel_keeps_its_module_loaded_after_its_handle_module_and_text_are_dropped() {
    let _serial = crate::common::serial();
    let kernel = {
        let a = Context::new(0).expect("a handle");
        let text = String::from(testing::PTX);
        let module = a.load_ptx(&text).expect("load");
        module.kernel("add_scalar").expect("kernel")
    };
    let b = gpu();
    let x = Managed::from_slice(&b, &[1.0f32; 300]).expect("alloc");
    let x = b
        .with_stream(StreamOptions::new(), |s| {
            let mut x = x.attach(s)?;
            // SAFETY: add_scalar(float *data, float value, um::len32 n) with n = 300, the
            // buffer's length, under a grid that covers it; the kernel's module stays loaded
            // while `kernel` lives, past the wait below.
            unsafe {
                s.launch(
                    &kernel,
                    LaunchConfig::grid_1d(2, 256),
                    (&mut x, 2.0f32, 300u32),
                )
            }?;
            x.sync()
        })
        .expect("launch through another handle");
    assert!(x.iter().all(|v| *v == 3.0));
    drop(kernel);
    common::assert_context_usable(&b);
}

/// A text that does not load is not cached: neither a broken text nor one with a NUL byte is
/// found later, and loading them again tries again. Expected: `InteriorNul` for the NUL (before
/// the driver sees it), a driver error for the broken text and for one that is no PTX at all,
/// each time; no module counted for them; the good text loads once afterwards, its kernel found;
/// the context usable.
#[test]
#[ignore = "needs a CUDA device"]
fn a_text_that_does_not_load_is_not_cached() {
    let _serial = crate::common::serial();
    let ctx = gpu();
    let (before, _) = ctx.cache_stats();
    let broken = format!("{}\n}}\n", testing::PTX);
    let not_ptx = String::from("this is not a PTX module");
    let with_nul = format!("{}\0", testing::PTX);
    for _ in 0..2 {
        for bad in [&broken, &not_ptx] {
            let err = ctx.load_ptx(bad).map(drop).expect_err("does not load");
            assert!(matches!(err, Error::Driver { .. }), "{err}");
        }
        let err = ctx.load_ptx(&with_nul).map(drop).expect_err("a NUL byte");
        assert!(matches!(err, Error::InteriorNul { .. }), "{err}");
        assert_eq!(ctx.cache_stats().0, before, "nothing cached");
    }
    let module = ctx.load_ptx(testing::PTX).expect("the text itself");
    ctx.load_ptx(testing::PTX).expect("again");
    module.kernel("add_scalar").expect("kernel");
    assert_eq!(ctx.cache_stats().0, before + 1, "loaded once");
    common::assert_context_usable(&ctx);
}
