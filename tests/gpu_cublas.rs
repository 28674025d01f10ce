//! cuBLAS on owned buffers (issue 23, `crates/um-cublas`): GEMM and GEMV against a CPU
//! reference at odd shapes, leading dimensions and transposes, f32 and f64, on every storage;
//! shape errors refused before cuBLAS runs; the row-major path; a handle per thread.
//!
//! Every test needs a GPU and cuBLAS (the toolkit's `libcublas.so.13`, found as
//! `docs/interop.md` says). The missing-library error needs neither: it is tested in
//! `crates/um-cublas/tests/loader.rs`, which runs everywhere.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

mod common;

use common::{gpu, serial};
use um::{Context, ContextOptions, HostOwned, Managed, Storage, StreamOptions};
use um_cublas::{Blas, Element, Error, Gemm, Gemv, Layout, Op, ShapeError};

/// The test's element types, with conversions to f64 (the reference computes in f64) and a
/// tolerance relative to the magnitude of the terms.
trait Num: Element + Into<f64> {
    fn of(v: f64) -> Self;
    const TOL: f64;
}
impl Num for f32 {
    fn of(v: f64) -> Self {
        v as f32
    }
    const TOL: f64 = 1e-5;
}
impl Num for f64 {
    fn of(v: f64) -> Self {
        v
    }
    const TOL: f64 = 1e-12;
}

/// Small integers (-5..=5): every product and sum of the tests is exact in f32 and TF32 alike,
/// so the tolerance only covers a different summation order.
fn value(i: usize, salt: usize) -> f64 {
    ((i * 7 + salt * 13 + 3) % 11) as f64 - 5.0
}

/// What fills the output before the call: a value no result can take (results are integers
/// times alpha, plus beta times this), so an element the call must not write shows if it did.
const SENTINEL: f64 = 0.375;

/// How one storage allocates a host-owned buffer from a slice.
type Alloc<T, M> = fn(&Context, &[T]) -> um::Result<Managed<[T], HostOwned, M>>;

/// Element `(i, j)` of a matrix stored in `layout` with leading dimension `ld`.
fn index(layout: Layout, ld: usize, i: usize, j: usize) -> usize {
    match layout {
        Layout::ColMajor => i + j * ld,
        Layout::RowMajor => i * ld + j,
    }
}

/// A matrix `rows`×`cols` as stored, with `pad` more than the tightest leading dimension, and
/// `tail` spare elements after it: (leading dimension, buffer length).
fn extent(layout: Layout, rows: usize, cols: usize, pad: usize, tail: usize) -> (usize, usize) {
    let (inner, outer) = match layout {
        Layout::ColMajor => (rows, cols),
        Layout::RowMajor => (cols, rows),
    };
    let ld = inner.max(1) + pad;
    let len = if inner == 0 || outer == 0 {
        0
    } else {
        ld * (outer - 1) + inner
    };
    (ld, (len + tail).max(1))
}

#[derive(Debug, Clone, Copy)]
struct GemmCase {
    layout: Layout,
    ta: Op,
    tb: Op,
    m: usize,
    n: usize,
    k: usize,
    /// Extra leading dimension of A, B, C.
    pad: (usize, usize, usize),
    alpha: f64,
    beta: f64,
}

fn gemm_cases() -> Vec<GemmCase> {
    let mut cases = Vec::new();
    let base = GemmCase {
        layout: Layout::ColMajor,
        ta: Op::N,
        tb: Op::N,
        m: 1,
        n: 1,
        k: 1,
        pad: (0, 0, 0),
        alpha: 1.0,
        beta: 0.0,
    };
    cases.push(base);
    for layout in [Layout::ColMajor, Layout::RowMajor] {
        for ta in [Op::N, Op::T] {
            for tb in [Op::N, Op::T] {
                cases.push(GemmCase {
                    layout,
                    ta,
                    tb,
                    m: 7,
                    n: 13,
                    k: 5,
                    ..base
                });
                cases.push(GemmCase {
                    layout,
                    ta,
                    tb,
                    m: 7,
                    n: 13,
                    k: 5,
                    pad: (3, 1, 2),
                    alpha: 0.5,
                    beta: -2.0,
                });
            }
        }
    }
    cases.push(GemmCase {
        m: 65,
        n: 33,
        k: 129,
        pad: (5, 0, 7),
        alpha: 2.0,
        beta: 1.0,
        ..base
    });
    cases
}

/// Runs one GEMM case in storage `M` and checks every element of C's buffer: the matrix
/// against the CPU, the padding and the tail untouched.
fn check_gemm<T: Num, M: Storage>(ctx: &Context, blas: &Blas, alloc: Alloc<T, M>, g: GemmCase) {
    let (ra, ca) = if g.ta == Op::N {
        (g.m, g.k)
    } else {
        (g.k, g.m)
    };
    let (rb, cb) = if g.tb == Op::N {
        (g.k, g.n)
    } else {
        (g.n, g.k)
    };
    let (lda, la) = extent(g.layout, ra, ca, g.pad.0, 2);
    let (ldb, lb) = extent(g.layout, rb, cb, g.pad.1, 3);
    let (ldc, lc) = extent(g.layout, g.m, g.n, g.pad.2, 4);
    let a: Vec<T> = (0..la).map(|i| T::of(value(i, 1))).collect();
    let b: Vec<T> = (0..lb).map(|i| T::of(value(i, 2))).collect();
    let c0: Vec<T> = (0..lc).map(|i| T::of(SENTINEL + value(i, 3))).collect();
    // The reference, in f64, on the same storage.
    let f = |v: &[T], i: usize| -> f64 { v[i].into() };
    let mut want: Vec<f64> = c0.iter().map(|v| (*v).into()).collect();
    for i in 0..g.m {
        for j in 0..g.n {
            let mut sum = 0.0;
            for p in 0..g.k {
                let ai = if g.ta == Op::N {
                    index(g.layout, lda, i, p)
                } else {
                    index(g.layout, lda, p, i)
                };
                let bi = if g.tb == Op::N {
                    index(g.layout, ldb, p, j)
                } else {
                    index(g.layout, ldb, j, p)
                };
                sum += f(&a, ai) * f(&b, bi);
            }
            let ci = index(g.layout, ldc, i, j);
            want[ci] = g.alpha * sum + g.beta * want[ci];
        }
    }
    let desc = match g.layout {
        Layout::ColMajor => Gemm::<T>::new(g.m, g.n, g.k),
        Layout::RowMajor => Gemm::<T>::row_major(g.m, g.n, g.k),
    }
    .transa(g.ta)
    .transb(g.tb)
    .lda(lda)
    .ldb(ldb)
    .ldc(ldc)
    .alpha(T::of(g.alpha))
    .beta(T::of(g.beta));
    let (da, db, dc) = (
        alloc(ctx, &a).expect("alloc a"),
        alloc(ctx, &b).expect("alloc b"),
        alloc(ctx, &c0).expect("alloc c"),
    );
    let (_, _, got) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (da, db, mut dc) = (da.attach(s)?, db.attach(s)?, dc.attach(s)?);
            blas.gemm(s, &desc, &da, &db, &mut dc)?;
            s.sync_all((da, db, dc))
        })
        .expect("gemm");
    for (i, (g_, w)) in got.iter().zip(&want).enumerate() {
        let g_: f64 = (*g_).into();
        let scale = 1.0 + w.abs() + (g.k as f64) * 25.0 * g.alpha.abs();
        assert!(
            (g_ - w).abs() <= T::TOL * scale,
            "{} {:?}: element {i} of C is {g_}, expected {w}",
            M::NAME,
            g
        );
    }
}

fn every_storage_gemm<T: Num>(ctx: &Context, blas: &Blas) {
    for case in gemm_cases() {
        check_gemm::<T, _>(ctx, blas, Managed::from_slice, case);
        check_gemm::<T, _>(ctx, blas, Managed::from_slice_mirrored, case);
        if ctx.info().concurrent_managed_access {
            check_gemm::<T, _>(ctx, blas, Managed::from_slice_coherent, case);
        } else {
            println!("no concurrent managed access: coherent memory not tested");
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn gemm_matches_the_cpu_at_odd_shapes_on_every_storage_f32() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    every_storage_gemm::<f32>(&ctx, &blas);
}

#[test]
#[ignore = "needs a CUDA device"]
fn gemm_matches_the_cpu_at_odd_shapes_on_every_storage_f64() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    every_storage_gemm::<f64>(&ctx, &blas);
}

#[derive(Debug, Clone, Copy)]
struct GemvCase {
    layout: Layout,
    trans: Op,
    m: usize,
    n: usize,
    pad: usize,
    alpha: f64,
    beta: f64,
}

fn check_gemv<T: Num, M: Storage>(ctx: &Context, blas: &Blas, alloc: Alloc<T, M>, g: GemvCase) {
    let (lda, la) = extent(g.layout, g.m, g.n, g.pad, 1);
    let (xn, yn) = if g.trans == Op::N {
        (g.n, g.m)
    } else {
        (g.m, g.n)
    };
    let a: Vec<T> = (0..la).map(|i| T::of(value(i, 4))).collect();
    let x: Vec<T> = (0..xn + 1).map(|i| T::of(value(i, 5))).collect();
    let y0: Vec<T> = (0..yn + 2).map(|i| T::of(SENTINEL + value(i, 6))).collect();
    let mut want: Vec<f64> = y0.iter().map(|v| (*v).into()).collect();
    for (r, w) in want.iter_mut().enumerate().take(yn) {
        let mut sum = 0.0;
        for (p, xp) in x.iter().enumerate().take(xn) {
            let ai = if g.trans == Op::N {
                index(g.layout, lda, r, p)
            } else {
                index(g.layout, lda, p, r)
            };
            let (av, xv): (f64, f64) = (a[ai].into(), (*xp).into());
            sum += av * xv;
        }
        *w = g.alpha * sum + g.beta * *w;
    }
    let desc = match g.layout {
        Layout::ColMajor => Gemv::<T>::new(g.m, g.n),
        Layout::RowMajor => Gemv::<T>::row_major(g.m, g.n),
    }
    .trans(g.trans)
    .lda(lda)
    .alpha(T::of(g.alpha))
    .beta(T::of(g.beta));
    let (da, dx, dy) = (
        alloc(ctx, &a).expect("alloc a"),
        alloc(ctx, &x).expect("alloc x"),
        alloc(ctx, &y0).expect("alloc y"),
    );
    let (_, _, got) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (da, dx, mut dy) = (da.attach(s)?, dx.attach(s)?, dy.attach(s)?);
            blas.gemv(s, &desc, &da, &dx, &mut dy)?;
            s.sync_all((da, dx, dy))
        })
        .expect("gemv");
    for (i, (g_, w)) in got.iter().zip(&want).enumerate() {
        let g_: f64 = (*g_).into();
        let scale = 1.0 + w.abs() + (xn as f64) * 25.0 * g.alpha.abs();
        assert!(
            (g_ - w).abs() <= T::TOL * scale,
            "{} {:?}: element {i} of y is {g_}, expected {w}",
            M::NAME,
            g
        );
    }
}

fn every_storage_gemv<T: Num>(ctx: &Context, blas: &Blas) {
    let mut cases = vec![GemvCase {
        layout: Layout::ColMajor,
        trans: Op::N,
        m: 1,
        n: 1,
        pad: 0,
        alpha: 1.0,
        beta: 0.0,
    }];
    for layout in [Layout::ColMajor, Layout::RowMajor] {
        for trans in [Op::N, Op::T] {
            for (pad, alpha, beta) in [(0, 1.0, 0.0), (4, -1.5, 0.5)] {
                cases.push(GemvCase {
                    layout,
                    trans,
                    m: 13,
                    n: 7,
                    pad,
                    alpha,
                    beta,
                });
            }
        }
    }
    for case in cases {
        check_gemv::<T, _>(ctx, blas, Managed::from_slice, case);
        check_gemv::<T, _>(ctx, blas, Managed::from_slice_mirrored, case);
        if ctx.info().concurrent_managed_access {
            check_gemv::<T, _>(ctx, blas, Managed::from_slice_coherent, case);
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn gemv_matches_the_cpu_on_every_storage_f32_and_f64() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    every_storage_gemv::<f32>(&ctx, &blas);
    every_storage_gemv::<f64>(&ctx, &blas);
}

#[test]
#[ignore = "needs a CUDA device"]
fn row_major_gemm_is_the_textbook_product() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    // [1 2 3; 4 5 6] (2x3) times [1 0; 0 1; 1 1] (3x2), row by row: [4 5; 10 11].
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let a = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("alloc");
    let b = Managed::from_slice(&ctx, &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0]).expect("alloc");
    let c = Managed::<[f32]>::zeroed_slice(&ctx, 4).expect("alloc");
    let x = Managed::from_slice(&ctx, &[1.0f32, 1.0, 1.0]).expect("alloc");
    let y = Managed::<[f32]>::zeroed_slice(&ctx, 2).expect("alloc");
    let (_, _, c, _, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
            let (x, mut y) = (x.attach(s)?, y.attach(s)?);
            blas.gemm(s, &Gemm::row_major(2, 2, 3), &a, &b, &mut c)?;
            blas.gemv(s, &Gemv::row_major(2, 3), &a, &x, &mut y)?;
            s.sync_all((a, b, c, x, y))
        })
        .expect("row-major");
    assert_eq!(&c[..], &[4.0, 5.0, 10.0, 11.0]);
    assert_eq!(&y[..], &[6.0, 15.0]);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_shape_mismatch_is_refused_before_cublas_runs() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let a = Managed::from_slice_mirrored(&ctx, &[1.0f64; 34]).expect("alloc"); // 7x5 needs 35
    let b = Managed::from_slice_mirrored(&ctx, &[1.0f64; 65]).expect("alloc");
    let c = Managed::from_slice_mirrored(&ctx, &[SENTINEL; 91]).expect("alloc");
    let x = Managed::from_slice_mirrored(&ctx, &[1.0f64; 4]).expect("alloc");
    let before = um::mirror_copies_on_this_thread();
    let (_, _, c, _) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
            let x = x.attach(s)?;
            let got = blas.gemm(s, &Gemm::new(7, 13, 5), &a, &b, &mut c);
            assert!(
                matches!(
                    got,
                    Err(Error::Shape(ShapeError::BufferTooShort {
                        buffer: "a",
                        len: 34,
                        needed: 35,
                        ..
                    }))
                ),
                "{got:?}"
            );
            let got = blas.gemm(s, &Gemm::new(7, 13, 5).ldc(6), &b, &b, &mut c);
            assert!(
                matches!(
                    got,
                    Err(Error::Shape(ShapeError::LeadingDimension {
                        what: "ldc",
                        ..
                    }))
                ),
                "{got:?}"
            );
            let got = blas.gemm(s, &Gemm::new(1 << 31, 1, 1), &a, &b, &mut c);
            assert!(
                matches!(
                    got,
                    Err(Error::Shape(ShapeError::TooLarge { what: "m", .. }))
                ),
                "{got:?}"
            );
            // GEMV: x has 4, the 13x5 matrix (b, 65 elements) needs 5.
            let got = blas.gemv(s, &Gemv::new(13, 5), &b, &x, &mut c);
            assert!(
                matches!(
                    got,
                    Err(Error::Shape(ShapeError::BufferTooShort { buffer: "x", .. }))
                ),
                "{got:?}"
            );
            // Through `?` in the closure it is um's error, with the message.
            let through: um::Error = blas
                .gemm(s, &Gemm::new(7, 13, 5), &a, &b, &mut c)
                .expect_err("refused")
                .into();
            assert!(matches!(
                through,
                um::Error::Library {
                    library: "um-cublas",
                    ..
                }
            ));
            s.sync_all((a, b, c, x))
        })
        .expect("stream");
    // Nothing was written, and `c` was never marked written: its sync copied nothing back.
    assert!(c.iter().all(|v| *v == SENTINEL));
    let copies = um::mirror_copies_on_this_thread().since(before);
    assert_eq!(copies.to_host, 0, "{copies:?}");
    assert_eq!(copies.to_host_skipped, 4, "{copies:?}");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_buffer_of_another_stream_of_a_set_is_refused() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let a = Managed::from_slice(&ctx, &[1.0f32; 4]).expect("alloc");
    let b = Managed::from_slice(&ctx, &[1.0f32; 4]).expect("alloc");
    let c = Managed::from_slice(&ctx, &[SENTINEL as f32; 4]).expect("alloc");
    let (a, b, c) = ctx
        .with_stream_set(2, StreamOptions::new(), |s| {
            let (a, b, mut c) = (a.attach(&s[0])?, b.attach(&s[0])?, c.attach(&s[1])?);
            let got = blas.gemm(&s[0], &Gemm::new(2, 2, 2), &a, &b, &mut c);
            assert_eq!(got, Err(Error::StreamMismatch { buffer: "c" }));
            let got = blas.gemm(&s[1], &Gemm::new(2, 2, 2), &a, &b, &mut c);
            assert_eq!(got, Err(Error::StreamMismatch { buffer: "a" }));
            Ok((s[0].sync_all((a, b))?, c.sync()?))
        })
        .map(|((a, b), c)| (a, b, c))
        .expect("streams");
    assert!(c.iter().all(|v| *v == SENTINEL as f32));
    drop((a, b));
}

#[test]
#[ignore = "needs a CUDA device"]
fn one_handle_serves_every_stream_kind_in_turn() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    // Created, per-thread, then created again: the handle is bound to each before its call.
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let n = 96;
    let run = |data: Managed<[f64]>| -> Managed<[f64]> {
        // data <- A data, A = 2 I (so data doubles).
        let a = Managed::from_fn(&ctx, n * n, |i| if i % (n + 1) == 0 { 2.0 } else { 0.0 })
            .expect("alloc");
        let y = Managed::<[f64]>::zeroed_slice(&ctx, n).expect("alloc");
        let (_, _, y) = ctx
            .with_stream(StreamOptions::new().non_blocking(), |s| {
                let (a, x, mut y) = (a.attach(s)?, data.attach(s)?, y.attach(s)?);
                blas.gemv(s, &Gemv::new(n, n), &a, &x, &mut y)?;
                s.sync_all((a, x, y))
            })
            .expect("created stream");
        y
    };
    let data = Managed::from_fn(&ctx, n, |i| i as f64).expect("alloc");
    let data = run(data);
    let a =
        Managed::from_fn(&ctx, n * n, |i| if i % (n + 1) == 0 { 3.0 } else { 0.0 }).expect("alloc");
    let y = Managed::<[f64]>::zeroed_slice(&ctx, n).expect("alloc");
    let (_, _, data) = ctx
        .with_per_thread_stream(|s| {
            let (a, x, mut y) = (a.attach(s)?, data.attach(s)?, y.attach(s)?);
            blas.gemv(s, &Gemv::new(n, n), &a, &x, &mut y)?;
            s.sync_all((a, x, y))
        })
        .expect("per-thread stream");
    let data = run(data);
    for (i, v) in data.iter().enumerate() {
        assert_eq!(*v, 12.0 * i as f64);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn threads_each_with_a_handle_and_a_stream_compute_at_once() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    let ctx = gpu();
    let n = 256;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let ctx = ctx.clone();
                // Made here, moved into the thread: `Blas` is Send.
                let blas = Blas::new(&ctx).expect("cuBLAS");
                scope.spawn(move || {
                    let a = Managed::from_fn(&ctx, n * n, |i| value(i, t) as f32).expect("alloc");
                    let b =
                        Managed::from_fn(&ctx, n * n, |i| value(i, t + 9) as f32).expect("alloc");
                    let c = Managed::<[f32]>::zeroed_slice(&ctx, n * n).expect("alloc");
                    let (a, b, c) = ctx
                        .with_stream(StreamOptions::new(), |s| {
                            let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
                            for _ in 0..10 {
                                blas.gemm(s, &Gemm::new(n, n, n), &a, &b, &mut c)?;
                            }
                            s.sync_all((a, b, c))
                        })
                        .expect("gemm");
                    for (i, j) in [(0, 0), (n - 1, n - 1), (17, 201)] {
                        let want: f32 = (0..n).map(|p| a[i + p * n] * b[p + j * n]).sum();
                        assert_eq!(c[i + j * n], want, "thread {t}, ({i}, {j})");
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
    });
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_the_handle_with_work_in_flight_keeps_the_result() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    let ctx = gpu();
    let n = 1024;
    let a = Managed::from_fn(&ctx, n * n, |i| value(i, 1) as f32).expect("alloc");
    let c = Managed::<[f32]>::zeroed_slice(&ctx, n * n).expect("alloc");
    let (a, c) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (a, mut c) = (a.attach(s)?, c.attach(s)?);
            let blas = Blas::new(&ctx).expect("cuBLAS");
            for _ in 0..20 {
                blas.gemm(s, &Gemm::new(n, n, n), &a, &a, &mut c)?;
            }
            drop(blas); // cublasDestroy_v2 waits for the device first
            s.sync_all((a, c))
        })
        .expect("gemm");
    let want: f32 = (0..n).map(|p| a[3 + p * n] * a[p + 5 * n]).sum();
    assert_eq!(c[3 + 5 * n], want);
}

/// Red team 4, finding 1: while a graph capture of um is in progress, a `Blas` is not destroyed
/// (cuBLAS's own device-wide wait would fail there): dropped, its destroy is kept and made once
/// the capture has ended (`Context::with_idle_after_captures`; it was leaked before). It moves
/// to another eager stream inside the capture closure: the move is ordered on the device after
/// its GEMM on the first stream (`StreamOrder`), with no host wait that would fail the capture
/// (before, the move was refused with `Error::CaptureInProgress`). The capture is not disturbed
/// by either, and both GEMMs complete with the right result.
#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_dropped_during_a_capture_moves_in_order_is_destroyed_after_it_and_leaves_it_valid() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    // Device 0 as it is, whatever the environment emulates: unified memory enters graphs only
    // with concurrent managed access (rule 183's refusal has its own test in gpu_graphs).
    let ctx = Context::with_options(0, ContextOptions::new())
        .unwrap_or_else(|e| panic!("this test needs a CUDA device: {e}"));
    assert!(
        ctx.info().concurrent_managed_access,
        "this test needs a device with concurrent managed access"
    );
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let a = Managed::from_slice(&ctx, &[1.0f32; 4]).expect("alloc");
    let b = Managed::from_slice(&ctx, &[2.0f32; 4]).expect("alloc");
    let c = Managed::from_slice(&ctx, &[0.0f32; 4]).expect("alloc");
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    let (c, c2, x) = ctx
        .with_stream_set(2, StreamOptions::new(), |s| {
            let (a, b, mut c) = (a.attach(&s[0])?, b.attach(&s[0])?, c.attach(&s[0])?);
            blas.gemm(&s[0], &Gemm::new(2, 2, 2), &a, &b, &mut c)?; // bound to s[0]
            let (a2, b2, mut c2) = (
                Managed::from_slice(&ctx, &[1.0f32; 4])?.attach(&s[1])?,
                Managed::from_slice(&ctx, &[1.0f32; 4])?.attach(&s[1])?,
                Managed::from_slice(&ctx, &[0.0f32; 4])?.attach(&s[1])?,
            );
            let x = x.attach(&s[1])?;
            let mut moved = None;
            let (graph, ()) = s[1].capture((x,), |cap, (mut x,)| {
                um::kernels::testing::add_scalar(cap, &mut x, 1.0)?;
                moved = Some(blas.gemm(&s[1], &Gemm::new(2, 2, 2), &a2, &b2, &mut c2));
                drop(blas); // destroyed once the capture has ended, not here
                Ok(((x,), ()))
            })?;
            assert_eq!(moved, Some(Ok(())));
            graph.launch(&s[1])?;
            let (x,) = graph.sync()?;
            let (_, _, c2) = s[1].sync_all((a2, b2, c2))?;
            let (_, _, c) = s[0].sync_all((a, b, c))?;
            Ok((c, c2, x))
        })
        .expect("the capture and the GEMM before it");
    assert!(c.iter().all(|v| *v == 4.0), "{:?}", &c[..]);
    assert!(
        c2.iter().all(|v| *v == 2.0),
        "the moved GEMM: {:?}",
        &c2[..]
    );
    assert!(x.iter().all(|v| *v == 1.0));
}
