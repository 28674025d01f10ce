//! cuBLAS on owned buffers (`crates/um-cublas`): GEMM (also of F16 and Bf16 inputs into f32), GEMV, strided batched GEMM and level 1
//! against a CPU reference at odd shapes, leading dimensions, increments and transposes, f32 and
//! f64, on every storage; shape errors refused before cuBLAS runs; the row-major path; a handle per thread. A handle beside
//! captures: its drop never fails a capture of um (leaked where it cannot wait), its moves
//! between streams are ordered on the device after all earlier work of the old stream (also
//! between threads' per-thread streams) with no host wait, so they go through during a capture,
//! and its creation and first calls inside a capture closure, or on another thread beside
//! captures, do not fail them. Tests that need cuBLAS's first use in a process run in a child
//! process (this binary, `UM_CUBLAS_CHILD` set).
//!
//! Every test needs a GPU and cuBLAS (the toolkit's `libcublas.so.13`, found as
//! `docs/interop.md` says). The missing-library error needs neither: it is tested in
//! `crates/um-cublas/tests/loader.rs`, which runs everywhere.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Contents, capture_once, device_for_captures, gpu, serial, watchdog};
use um::{Context, ContextOptions, HostOwned, Managed, StreamOptions, relaxed_while_capturing};
use um_cublas::{
    Bf16, Blas, Element, Error, F16, Gemm, Gemv, HalfElement, Layout, Level1, Op, ShapeError,
};
use um_test_kernels::testing::{self, add_scalar, spin_then_add};

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

/// The leading dimensions and buffer lengths of A, B and C of a case: (lda, ldb, ldc) and
/// (A's, B's, C's), each with a tail of spare elements.
fn gemm_extents(g: GemmCase) -> ((usize, usize, usize), (usize, usize, usize)) {
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
    ((lda, ldb, ldc), (la, lb, lc))
}

/// C's whole buffer after the case, computed in f64 from the buffers' values: the matrix
/// `alpha op(A) op(B) + beta C`, the padding and the tail as they were.
fn gemm_reference(
    g: GemmCase,
    (lda, ldb, ldc): (usize, usize, usize),
    a: &[f64],
    b: &[f64],
    c0: &[f64],
) -> Vec<f64> {
    let mut want = c0.to_vec();
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
                sum += a[ai] * b[bi];
            }
            let ci = index(g.layout, ldc, i, j);
            want[ci] = g.alpha * sum + g.beta * want[ci];
        }
    }
    want
}

/// The case's description, scalars left at their defaults.
fn gemm_description<T: Element>(g: GemmCase, (lda, ldb, ldc): (usize, usize, usize)) -> Gemm<T> {
    match g.layout {
        Layout::ColMajor => Gemm::<T>::new(g.m, g.n, g.k),
        Layout::RowMajor => Gemm::<T>::row_major(g.m, g.n, g.k),
    }
    .transa(g.ta)
    .transb(g.tb)
    .lda(lda)
    .ldb(ldb)
    .ldc(ldc)
}

/// Runs one GEMM case in storage `M` and checks every element of C's buffer: the matrix
/// against the CPU, the padding and the tail untouched.
fn check_gemm<T: Num, M: Contents>(ctx: &Context, blas: &Blas, alloc: Alloc<T, M>, g: GemmCase) {
    let ((lda, ldb, ldc), (la, lb, lc)) = gemm_extents(g);
    let a: Vec<T> = (0..la).map(|i| T::of(value(i, 1))).collect();
    let b: Vec<T> = (0..lb).map(|i| T::of(value(i, 2))).collect();
    let c0: Vec<T> = (0..lc).map(|i| T::of(SENTINEL + value(i, 3))).collect();
    let f64s = |v: &[T]| -> Vec<f64> { v.iter().map(|x| (*x).into()).collect() };
    let want = gemm_reference(g, (lda, ldb, ldc), &f64s(&a), &f64s(&b), &f64s(&c0));
    let desc = gemm_description::<T>(g, (lda, ldb, ldc))
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
    for (i, (g_, w)) in M::contents(&got).iter().zip(&want).enumerate() {
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
        check_gemm::<T, _>(ctx, blas, Managed::from_slice_device, case);
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

/// Runs one GEMM case with A and B of the half type `H` and C of f32 (`gemm_ex`), in storage
/// `M`, and checks every element of C's buffer as `check_gemm` does. The inputs are small
/// integers, exact in F16 and Bf16 alike, and every sum of products is exact in f32, so the
/// tolerance only covers the order of f32 accumulation.
fn check_gemm_ex<H: HalfElement, M: Contents>(
    ctx: &Context,
    blas: &Blas,
    (alloc_h, alloc_c): (Alloc<H, M>, Alloc<f32, M>),
    g: GemmCase,
) {
    let ((lda, ldb, ldc), (la, lb, lc)) = gemm_extents(g);
    let a: Vec<H> = (0..la).map(|i| H::from_f32(value(i, 1) as f32)).collect();
    let b: Vec<H> = (0..lb).map(|i| H::from_f32(value(i, 2) as f32)).collect();
    let c0: Vec<f32> = (0..lc).map(|i| (SENTINEL + value(i, 3)) as f32).collect();
    let halves = |v: &[H]| -> Vec<f64> { v.iter().map(|x| f64::from(x.to_f32())).collect() };
    // The conversion is exact for these values: what the device reads is what the CPU meant.
    assert_eq!(halves(&a), (0..la).map(|i| value(i, 1)).collect::<Vec<_>>());
    let c0_64: Vec<f64> = c0.iter().map(|&x| f64::from(x)).collect();
    let want = gemm_reference(g, (lda, ldb, ldc), &halves(&a), &halves(&b), &c0_64);
    let desc = gemm_description::<f32>(g, (lda, ldb, ldc))
        .alpha(g.alpha as f32)
        .beta(g.beta as f32);
    let (da, db, dc) = (
        alloc_h(ctx, &a).expect("alloc a"),
        alloc_h(ctx, &b).expect("alloc b"),
        alloc_c(ctx, &c0).expect("alloc c"),
    );
    let (_, _, got) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (da, db, mut dc) = (da.attach(s)?, db.attach(s)?, dc.attach(s)?);
            blas.gemm_ex(s, &desc, &da, &db, &mut dc)?;
            s.sync_all((da, db, dc))
        })
        .expect("gemm_ex");
    let got = M::contents(&got);
    assert_eq!(got.len(), want.len());
    for (i, (g_, w)) in got.iter().zip(&want).enumerate() {
        let g_ = f64::from(*g_);
        let scale = 1.0 + w.abs() + (g.k as f64) * 25.0 * g.alpha.abs();
        assert!(
            (g_ - w).abs() <= f32::TOL * scale,
            "{} {} {:?}: element {i} of C is {g_}, expected {w}",
            std::any::type_name::<H>(),
            M::NAME,
            g
        );
    }
}

fn gemm_ex_cases<H: HalfElement>(ctx: &Context, blas: &Blas) {
    let mut cases = gemm_cases();
    // The large shape also row-major with both transposes.
    cases.push(GemmCase {
        layout: Layout::RowMajor,
        ta: Op::T,
        tb: Op::T,
        m: 65,
        n: 33,
        k: 129,
        pad: (1, 2, 3),
        alpha: -1.0,
        beta: 0.5,
    });
    for case in cases {
        check_gemm_ex::<H, _>(ctx, blas, (Managed::from_slice, Managed::from_slice), case);
        check_gemm_ex::<H, _>(
            ctx,
            blas,
            (Managed::from_slice_mirrored, Managed::from_slice_mirrored),
            case,
        );
        check_gemm_ex::<H, _>(
            ctx,
            blas,
            (Managed::from_slice_device, Managed::from_slice_device),
            case,
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn gemm_ex_of_half_inputs_matches_the_cpu_in_f32() {
    let _serial = serial(); // a capture of another test refuses a Blas move
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    gemm_ex_cases::<F16>(&ctx, &blas);
    gemm_ex_cases::<Bf16>(&ctx, &blas);
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

fn check_gemv<T: Num, M: Contents>(ctx: &Context, blas: &Blas, alloc: Alloc<T, M>, g: GemvCase) {
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
    for (i, (g_, w)) in M::contents(&got).iter().zip(&want).enumerate() {
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
        check_gemv::<T, _>(ctx, blas, Managed::from_slice_device, case);
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
    let before = um_core::mirror_copies_on_this_thread();
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
    let copies = um_core::mirror_copies_on_this_thread().since(before);
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

/// While a graph capture of um is in progress, a `Blas` is not destroyed
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
    let ctx = Context::new_with_options(0, ContextOptions::new())
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
                um_test_kernels::testing::add_scalar(cap, &mut x, 1.0)?;
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

// ---------------------------------------------------------------------------------------------
// A handle dropped beside captures.

/// Handles destroyed beside the captures (fewer under a sanitizer, where each call is slow).
fn handles() -> usize {
    if std::env::var_os("UM_SANITIZE").is_some() {
        10
    } else {
        100
    }
}

/// Captures of one launch back to back until `stop` (at most 4000); the number that failed.
fn capture_loop(ctx: &Context, stop: &std::sync::atomic::AtomicBool) -> usize {
    let mut failures = 0;
    for i in 0..4000 {
        if let Err(e) = capture_once(ctx) {
            failures += 1;
            eprintln!("capture {i}: {e}");
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
    }
    failures
}

/// `Blas` handles dropped on one thread while another makes captures back to back: a drop
/// destroys its handle inside `Context::with_idle_unless_capturing`, before any capture can begin
/// (cuBLAS's destroy waits for the whole device, which would fail a capture that began meanwhile),
/// or keeps it while a capture is in progress and destroys it once the captures have ended. No
/// capture fails, and memcheck sees no handle leaked.
#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_dropped_beside_captures_never_fails_one_and_is_destroyed_after_them() {
    let _serial = serial(); // captures change the answer of an idle section
    use std::sync::atomic::{AtomicBool, Ordering};
    use um_cublas::{Blas, Gemm};
    // The device as it is: captures of unified memory need concurrent managed access (rule 183).
    let ctx = Context::new_with_options(0, um::ContextOptions::new()).expect("device 0");
    if !ctx.info().concurrent_managed_access {
        eprintln!("skipped: the device lacks concurrent managed access");
        return;
    }
    let n = 64;
    let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n]).expect("alloc");
    let c = Managed::from_slice(&ctx, &vec![0.0f32; n * n]).expect("alloc");
    let start = std::sync::Barrier::new(2);
    let stop = AtomicBool::new(false);
    let failures = std::thread::scope(|t| {
        t.spawn(|| {
            ctx.with_stream(StreamOptions::new(), |s| {
                let (a, mut c) = (a.attach(s)?, c.attach(s)?);
                // Made and used before the captures start: only the destroys overlap them.
                let blases: Vec<Blas> = (0..handles())
                    .map(|_| {
                        let b = Blas::new(&ctx).expect("cuBLAS");
                        b.gemm(s, &Gemm::new(n, n, n), &a, &a, &mut c)
                            .expect("gemm");
                        b
                    })
                    .collect();
                s.wait_idle()?;
                start.wait();
                for b in blases {
                    // Destroyed under the device's capture lock, or kept while a capture is in
                    // progress and destroyed after it: never a device-wide wait a capture meets.
                    drop(b);
                }
                stop.store(true, Ordering::Relaxed);
                let (_a, c) = s.sync_all((a, c))?;
                assert!(c.iter().all(|v| *v == n as f32), "the gemms' result");
                Ok(())
            })
            .expect("eager side");
        });
        start.wait();
        capture_loop(&ctx, &stop)
    });
    assert_eq!(
        failures, 0,
        "a Blas drop on another thread failed um captures"
    );
}

// ---------------------------------------------------------------------------------------------
// Moves between streams, ordered on the device.

/// How long the spin kernels hold their stream: 3 s, 10 s under a sanitizer (whose slowdown of
/// the host's calls must stay well under it: the tests below tell "the host waited for the
/// spin" from "it did not" by half of it).
fn spin_ns() -> u64 {
    if common::under_sanitizer() {
        10_000_000_000
    } else {
        3_000_000_000
    }
}

/// The record a `Blas` move waits for is made after the handle's last call on the old stream, so it
/// covers every earlier piece of work there, not only cuBLAS's; the new stream then waits for all
/// of it, and so does everything later on the new stream (um's own kernels included) and its `sync`
/// (`docs/interop.md` said otherwise of a stuck collective; corrected).
///
/// Two rounds, each with a spin on the old stream before the handle's last call there. Cold: a
/// fresh handle, whose first calls are cuBLAS's first use of the kernel and of each stream. Warm:
/// the same handle after both streams and the kernel were used once. In both, the new stream's work
/// ends a spin after the spin began (the order); the step times are printed. In the warm round the
/// moving call also returns long before the spin ends: the move waits on the device, not on the
/// host. (On 2x H200 the first version of this test saw the new stream's `sync` take 65 us: the
/// host had waited for the spin before it, somewhere in the cold calls.)
#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_move_orders_the_new_stream_after_all_earlier_work_of_the_old_stream() {
    let _serial = serial();
    let _dog = watchdog("a Blas move after a spin on the old stream");
    let ctx = gpu();
    let spin = Duration::from_nanos(spin_ns());
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let m = |v: f32| Managed::from_slice(&ctx, &[v; 4]).expect("alloc");
    let (busy, a, c, a2, c2, y) = (m(0.0), m(1.0), m(0.0), m(1.0), m(0.0), m(0.0));
    ctx.with_stream_set(2, StreamOptions::new().non_blocking(), |s| {
        let (mut busy, a, mut c) = (busy.attach(&s[0])?, a.attach(&s[0])?, c.attach(&s[0])?);
        let (a2, mut c2, mut y) = (a2.attach(&s[1])?, c2.attach(&s[1])?, y.attach(&s[1])?);
        let g = Gemm::new(2, 2, 2);
        for round in ["cold", "warm"] {
            let t = Instant::now();
            let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
            // Unrelated work on s[0] first (a stand-in for a stuck collective), then a GEMM.
            spin_then_add(&s[0], &mut busy, 1.0, spin_ns())?;
            let spun = ms(t);
            blas.gemm(&s[0], &g, &a, &a, &mut c)?;
            let old = ms(t);
            let before_move = Instant::now();
            blas.gemm(&s[1], &g, &a2, &a2, &mut c2)?; // the move
            let move_host = before_move.elapsed();
            let moved = ms(t);
            add_scalar(&s[1], &mut y, 1.0)?; // um's own kernel on the new stream
            s[1].wait_idle()?;
            let new_done = t.elapsed();
            s[0].wait_idle()?;
            eprintln!(
                "{round}: ms from the spin's launch to: launched {spun:.1}, GEMM on the old \
                 stream {old:.1}, the move {moved:.1} ({:.1} on the host), the new stream \
                 idle {:.1}, the old stream idle {:.1}",
                move_host.as_secs_f64() * 1e3,
                new_done.as_secs_f64() * 1e3,
                ms(t)
            );
            assert!(
                new_done >= spin - Duration::from_millis(200),
                "{round}: the new stream did not wait for the old stream's unrelated work \
                 ({new_done:?})"
            );
            if round == "warm" {
                assert!(
                    move_host < spin / 2,
                    "warm: the move waited on the host ({move_host:?})"
                );
            }
            // The next round moves back to s[0] first, then to s[1] again.
            blas.gemm(&s[0], &g, &a, &a, &mut c)?;
            s[0].wait_idle()?;
        }
        s[1].sync_all((a2, c2, y))?;
        let (busy, _, _) = s[0].sync_all((busy, a, c))?;
        assert_eq!(busy[0], 2.0, "both spins ran");
        Ok(())
    })
    .expect("stream work");
}

/// Sleeps for the nanoseconds its argument carries: enqueued on a stream (`cuLaunchHostFunc`), it
/// holds the stream that long without a buffer of um's (it makes no CUDA call).
unsafe extern "C" fn sleep_on_the_stream(ns: *mut std::ffi::c_void) {
    std::thread::sleep(Duration::from_nanos(ns as usize as u64));
}

/// The handle's last calls ran on a created stream whose scope then ended with work still
/// queued there: the calls' buffers handed off to an outer stream (whose hand-offs record the
/// stream's event after the calls), then a 3 s host function enqueued after them, so nothing
/// waited at the scope's end. No call records anything after itself on a created stream, so the
/// move finds the stream ended and waits for the record made at its end, which covers the host
/// function; a record from before it (the hand-offs') would not. Expected: the next stream's
/// GEMM and its `sync` come after the 3 s, and the results are right.
#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_move_after_the_old_stream_ended_waits_for_its_last_call() {
    use cust::sys as cs;
    let _serial = serial();
    let _dog = watchdog("a Blas move after its old stream ended");
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let m = |v: f32| Managed::from_slice(&ctx, &[v; 4]).expect("alloc");
    let (a, c, a2, c2) = (m(1.0), m(0.0), m(1.0), m(0.0));
    let opts = StreamOptions::new().non_blocking();
    let (waited, c2, c) = ctx
        .with_stream(opts, |outer| {
            let t = Instant::now();
            let (a, c) = ctx.with_stream(opts, |inner| {
                let (a, mut c) = (a.attach(inner)?, c.attach(inner)?);
                blas.gemm(inner, &Gemm::new(2, 2, 2), &a, &a, &mut c)?;
                blas.gemm(inner, &Gemm::new(2, 2, 2).beta(1.0), &a, &a, &mut c)?;
                let handed = (a.hand_off(outer)?, c.hand_off(outer)?);
                // SAFETY: a live stream of the current context (the hand-offs made it
                // current); the function makes no CUDA call and reads only its argument.
                let status = unsafe {
                    cs::cuLaunchHostFunc(
                        inner.as_raw().cast(),
                        Some(sleep_on_the_stream),
                        spin_ns() as usize as *mut std::ffi::c_void,
                    )
                };
                assert_eq!(status, cs::cudaError_enum::CUDA_SUCCESS, "cuLaunchHostFunc");
                Ok(handed)
            })?;
            let inner = t.elapsed();
            if inner >= Duration::from_nanos(spin_ns() / 2) {
                assert!(
                    common::under_sanitizer(),
                    "the inner scope waited ({inner:?})"
                );
                eprintln!("inconclusive under the tool: the inner scope waited {inner:?}");
            }
            let c2 = ctx.with_stream(opts, |next| {
                let (a2, mut c2) = (a2.attach(next)?, c2.attach(next)?);
                blas.gemm(next, &Gemm::new(2, 2, 2), &a2, &a2, &mut c2)?; // the move
                let (_, c2) = next.sync_all((a2, c2))?;
                Ok(c2)
            })?;
            let waited = t.elapsed();
            let (_, c) = outer.sync_all((a, c))?;
            Ok((waited, c2, c))
        })
        .expect("streams");
    assert!(c.iter().all(|v| *v == 4.0), "{:?}", &c[..]);
    assert!(c2.iter().all(|v| *v == 2.0), "{:?}", &c2[..]);
    assert!(
        waited >= Duration::from_nanos(spin_ns()) - Duration::from_millis(200),
        "the move did not wait for the ended stream's last work ({waited:?})"
    );
}

/// A `Blas` whose last call ran on thread X's per-thread stream, behind a 3 s spin there, sent to
/// thread Y and used on Y's per-thread stream: the handle is bound by the special handle
/// `CU_STREAM_PER_THREAD` both times, so only the ids (per thread) tell the move. Expected: Y's
/// GEMM is ordered after X's (Y's sync waits for the spin) and right.
#[test]
#[ignore = "needs a CUDA device"]
fn blas_sent_between_threads_on_per_thread_streams_is_ordered() {
    let _serial = serial();
    let _dog = watchdog("a Blas sent between per-thread streams");
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let ctx_ref = &ctx;
    let blas = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let ctx = ctx_ref;
                let busy = Managed::<[f32]>::zeroed_slice(ctx, 1).expect("alloc");
                let a = Managed::from_slice(ctx, &[1.0f32; 4]).expect("alloc");
                let c = Managed::from_slice(ctx, &[0.0f32; 4]).expect("alloc");
                // X: a spin, then a GEMM, on X's per-thread stream; X's buffers stay on X
                // (PerThread is !Send) and are synced there. The GEMM on Y below must come
                // after X's (it does here trivially, X synced); the point is that the bind on
                // Y is seen as a move (another id for the same special handle) and that the
                // result is right. A 3 s wait on Y would show the order where X does not sync:
                // that variant needs a buffer X can leave in flight (a hand_off, as
                // gpu_interop's stream_order_outlives_the_stream_it_recorded does).
                ctx.with_per_thread_stream(|s| {
                    let (mut busy, a, mut c) = (busy.attach(s)?, a.attach(s)?, c.attach(s)?);
                    spin_then_add(s, &mut busy, 1.0, spin_ns() / 10)?;
                    blas.gemm(s, &Gemm::new(2, 2, 2), &a, &a, &mut c)?;
                    let (_, _, c) = s.sync_all((busy, a, c))?;
                    assert!(c.iter().all(|v| *v == 2.0));
                    Ok(())
                })
                .expect("thread X");
                blas
            })
            .join()
            .expect("X")
    });
    // Y: this thread's per-thread stream; the handle moves here (another id).
    let (a, c) = (
        Managed::from_slice(&ctx, &[1.0f32; 4]).expect("alloc"),
        Managed::from_slice(&ctx, &[0.0f32; 4]).expect("alloc"),
    );
    let c = ctx
        .with_per_thread_stream(|s| {
            let (a, mut c) = (a.attach(s)?, c.attach(s)?);
            blas.gemm(s, &Gemm::new(2, 2, 2), &a, &a, &mut c)?;
            let (_, c) = s.sync_all((a, c))?;
            Ok(c)
        })
        .expect("thread Y");
    assert!(c.iter().all(|v| *v == 2.0), "{:?}", &c[..]);
}

/// A capture closure that waits, without a bound, for another thread's `Blas` move: the move is
/// ordered on the device (`StreamOrder`), without a host wait, so it goes through during the
/// capture (it was once refused until the capture had ended), and the closure sees it.
#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_closure_that_waits_for_a_blas_move_on_another_thread_sees_it_go_through() {
    let _serial = serial();
    let done = watchdog("a capture closure waiting for a Blas move");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let n = 64;
    let refused = AtomicU64::new(0);
    let (began_tx, began_rx) = mpsc::channel::<()>();
    let (moved_tx, moved_rx) = mpsc::channel::<()>();
    let (ctx, refused) = (&ctx, &refused);
    let (seen_in_capture, capture) = std::thread::scope(|t| {
        let worker = t.spawn(move || {
            let blas = Blas::new(ctx).expect("cuBLAS");
            ctx.with_stream_set(2, StreamOptions::new(), |s| {
                let buf = |v: f32, i: usize| {
                    Managed::from_slice(ctx, &vec![v; n * n]).and_then(|m| m.attach(&s[i]))
                };
                let (a0, mut c0) = (buf(1.0, 0)?, buf(0.0, 0)?);
                let (a1, mut c1) = (buf(1.0, 1)?, buf(0.0, 1)?);
                let g = Gemm::new(n, n, n);
                blas.gemm(&s[0], &g, &a0, &a0, &mut c0)?; // bound to stream 0
                began_rx.recv().expect("the capture has begun");
                // "Retry until it succeeds": no retry is needed any more.
                loop {
                    match blas.gemm(&s[1], &g, &a1, &a1, &mut c1) {
                        Ok(()) => break,
                        Err(um_cublas::Error::CaptureInProgress) => {
                            refused.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_micros(100));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                moved_tx.send(()).ok();
                s[0].sync_all((a0, c0))?;
                let (_, c1) = s[1].sync_all((a1, c1))?;
                // Ordered after the GEMM on stream 0, and right.
                assert!(c1.iter().all(|v| *v == n as f32), "the moved GEMM's result");
                Ok(())
            })
            .expect("the worker");
        });
        let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
        let mut seen = None;
        let capture = ctx.with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                began_tx.send(()).expect("signal");
                // A program may wait here without a bound: the move needs no host wait.
                seen = Some(moved_rx.recv_timeout(Duration::from_secs(30)).is_ok());
                Ok(((x,), ()))
            })?;
            graph.launch(s)?;
            graph.sync().map(drop)
        });
        worker.join().expect("the worker");
        (seen, capture)
    });
    println!(
        "the worker's move was refused {} times during the capture",
        refused.load(Ordering::SeqCst)
    );
    assert!(capture.is_ok(), "the capture: {capture:?}");
    assert_eq!(
        seen_in_capture,
        Some(true),
        "the move did not go through while the capture was in progress"
    );
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "a move was refused during the capture"
    );
    done.send(()).ok();
}

// ---------------------------------------------------------------------------------------------
// cuBLAS inside a capture closure and beside captures.

const CHILD: &str = "UM_CUBLAS_CHILD";

/// Runs `test` alone in a child process (this binary, [`CHILD`] set); the child must pass, and
/// print `flushes` lines "flushed at thread exit".
fn in_child(test: &str, flushes: usize) {
    let (status, text) = common::child_output(test, CHILD);
    assert!(
        status.success() && text.contains("1 passed"),
        "the child failed ({status})"
    );
    assert_eq!(
        text.matches("flushed at thread exit").count(),
        flushes,
        "the thread-locals' flushes"
    );
}

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// A first GEMM on the capturing thread, on the eager stream the handle is bound to, inside a
/// capture closure: cuBLAS loads the GEMM's kernel lazily, a module load that fails the capture
/// in thread-local mode, so `Blas` calls cuBLAS with the thread's mode relaxed inside a capture
/// closure (`relaxed_while_capturing`). In a child process: the first GEMM of the process.
#[test]
#[ignore = "needs a CUDA device"]
fn a_first_gemm_on_the_eager_stream_inside_a_capture_closure_does_not_fail_the_capture() {
    let _serial = crate::common::serial();
    if !is_child() {
        return in_child(
            "a_first_gemm_on_the_eager_stream_inside_a_capture_closure_does_not_fail_the_capture",
            0,
        );
    }
    let done = watchdog("a GEMM inside a capture closure");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let n = 96;
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n]).expect("alloc");
    let v = Managed::from_slice(&ctx, &vec![1.0f32; n]).expect("alloc");
    let y = Managed::from_slice(&ctx, &vec![0.0f32; n]).expect("alloc");
    let c = Managed::from_slice(&ctx, &vec![0.0f32; n * n]).expect("alloc");
    let (captured, c) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, a, v, mut y, mut c) = (
                x.attach(s)?,
                a.attach(s)?,
                v.attach(s)?,
                y.attach(s)?,
                c.attach(s)?,
            );
            // Binds the handle to `s` with a GEMV: the GEMM kernel stays cold.
            blas.gemv(s, &Gemv::new(n, n), &a, &v, &mut y)?;
            let captured = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                // On the capturing thread, on the eager stream it is bound to: no move, so
                // `enter` checks nothing about captures.
                blas.gemm(s, &Gemm::new(n, n, n).transa(Op::T), &a, &a, &mut c)?;
                testing::add_scalar(cap, &mut x, 1.0)?;
                Ok(((x,), ()))
            });
            let captured = match captured {
                Ok((graph, ())) => {
                    graph.launch(s)?;
                    let (x,) = graph.sync()?;
                    Ok(x.iter().all(|e| *e == 2.0))
                }
                Err(e) => Err(e),
            };
            let (_, _, c) = s.sync_all((a, y, c))?;
            Ok((captured, c))
        })
        .expect("the stream");
    println!("capture with a first GEMM inside: {captured:?}");
    assert!(c.iter().all(|e| *e == n as f32), "the eager GEMM's result");
    assert_eq!(
        captured,
        Ok(true),
        "a correct capture failed because of a cuBLAS call on the capturing thread"
    );
    done.send(()).ok();
}

/// `Blas::new` and first uses of cuBLAS's kernels (other types, transposes, shapes), each on a
/// stream of its own so that each moves the handle, on another thread while captures are open:
/// no capture fails (rule 187). In a child process: cuBLAS's first use in the process.
#[test]
#[ignore = "needs a CUDA device"]
fn blas_made_and_used_for_the_first_time_beside_captures_fails_none() {
    let _serial = crate::common::serial();
    if !is_child() {
        return in_child(
            "blas_made_and_used_for_the_first_time_beside_captures_fails_none",
            0,
        );
    }
    let done = watchdog("cuBLAS first use beside captures");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let stop = AtomicBool::new(false);
    let failed = AtomicU64::new(0);
    let (began_tx, began_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let rounds = 8;
    let (ctx, stop, failed) = (&ctx, &stop, &failed);
    std::thread::scope(|t| {
        // Captures back to back; each holds its capture open until the other thread has made
        // its cuBLAS calls of this round (at most 2 s).
        t.spawn(move || {
            for _ in 0..rounds {
                let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("alloc");
                let r = ctx.with_stream(StreamOptions::new(), |s| {
                    let x = x.attach(s)?;
                    let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                        testing::add_scalar(cap, &mut x, 1.0)?;
                        began_tx.send(()).expect("signal");
                        let _ = ready_rx.recv_timeout(Duration::from_secs(2));
                        testing::add_scalar(cap, &mut x, 1.0)?;
                        Ok(((x,), ()))
                    })?;
                    graph.launch(s)?;
                    let (x,) = graph.sync()?;
                    assert!(x.iter().all(|e| *e == 2.0));
                    Ok(())
                });
                if let Err(e) = r {
                    println!("capture failed: {e}");
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
            stop.store(true, Ordering::SeqCst);
        });
        // Round 0: `Blas::new` while a capture is open. Later rounds: a kernel cuBLAS has not
        // used yet in this process (another type, transpose or shape), each on a stream of its
        // own, so each round moves the handle (ordered on the device, no wait) while the
        // other thread's capture is open.
        t.spawn(move || {
            let mut blas = None;
            for round in 0..rounds {
                if began_rx.recv_timeout(Duration::from_secs(30)).is_err() {
                    break;
                }
                if blas.is_none() {
                    blas = Some(Blas::new(ctx).expect("cuBLAS beside a capture"));
                }
                let b = blas.as_ref().expect("made");
                let n = 33 + 64 * round;
                ctx.with_stream(StreamOptions::new(), |s| {
                    if round % 2 == 0 {
                        let a = Managed::from_slice(ctx, &vec![1.0f32; n * n])?.attach(s)?;
                        let mut c = Managed::from_slice(ctx, &vec![0.0f32; n * n])?.attach(s)?;
                        let op = if round % 4 == 0 { Op::N } else { Op::T };
                        b.gemm(s, &Gemm::new(n, n, n).transa(op), &a, &a, &mut c)?;
                        s.sync_all((a, c)).map(drop)
                    } else {
                        let a = Managed::from_slice(ctx, &vec![1.0f64; n * n])?.attach(s)?;
                        let mut c = Managed::from_slice(ctx, &vec![0.0f64; n * n])?.attach(s)?;
                        b.gemm(s, &Gemm::new(n, n, n), &a, &a, &mut c)?;
                        s.sync_all((a, c)).map(drop)
                    }
                })
                .expect("the eager GEMM beside the capture");
                ready_tx.send(()).ok();
            }
            // Dropped once the captures are over (a drop during one would leak it, rule 146).
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(blas);
        });
    });
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "cuBLAS's creation or first use on another thread failed captures of um (rule 187)"
    );
    done.send(()).ok();
}

/// `Blas`'s doc: "Inside a capture closure, a `Blas` on an eager stream works as anywhere
/// else". `Blas::new` inside a capture closure (`cublasCreate_v2` and cuBLAS's lazy setup may
/// allocate, which the driver refuses on the capturing thread in thread-local mode) creates the
/// handle with the mode relaxed, so it works there, as it does inside `relaxed_while_capturing`
/// (the user's workaround, the second round); the handle dropped in the closure is destroyed
/// once the capture has ended (rule 197).
#[test]
#[ignore = "needs a CUDA device"]
fn blas_made_inside_a_capture_closure_works_and_is_destroyed_after_the_capture_when_dropped_there()
{
    let _serial = serial();
    let _dog = watchdog("a Blas made inside a capture closure");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    for relaxed in [false, true] {
        let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
        let (a, c) = (
            Managed::from_slice(&ctx, &[1.0f32; 4]).expect("alloc"),
            Managed::from_slice(&ctx, &[0.0f32; 4]).expect("alloc"),
        );
        let mut made = None;
        let r = ctx.with_stream(StreamOptions::new(), |s| {
            let (x, a, mut c) = (x.attach(s)?, a.attach(s)?, c.attach(s)?);
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                let blas = if relaxed {
                    relaxed_while_capturing(|| Blas::new(&ctx))?
                } else {
                    Blas::new(&ctx)
                };
                made = Some(blas.and_then(|b| b.gemm(s, &Gemm::new(2, 2, 2), &a, &a, &mut c)));
                Ok(((x,), ())) // the Blas is dropped here: destroyed after the capture
            })?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            let (_, c) = s.sync_all((a, c))?;
            Ok((x[0], c[0]))
        });
        eprintln!("relaxed = {relaxed}: Blas::new + gemm: {made:?}; capture: {r:?}");
        assert!(
            matches!(made, Some(Ok(()))),
            "relaxed = {relaxed}: {made:?}"
        );
        assert_eq!(r.ok(), Some((1.0, 2.0)), "relaxed = {relaxed}");
    }
}

// ---------------------------------------------------------------------------------------------
// Level 1, strided batches, and the raw handle.

/// The lengths and increments the level-1 tests run: one element, an odd few, and a million
/// and three; increments 1 and 3 (the elements between are never read or written).
const LEVEL1: [(usize, usize); 6] = [
    (1, 1),
    (1, 3),
    (7, 1),
    (7, 3),
    (1_000_003, 1),
    (1_000_003, 3),
];

/// A buffer of `(n - 1) * inc + 1` elements and 2 more, filled by `value(_, salt)`.
fn strided_data<T: Num>(n: usize, inc: usize, salt: usize) -> Vec<T> {
    (0..(n - 1) * inc + 3)
        .map(|i| T::of(value(i, salt)))
        .collect()
}

/// Within `tol` of `want`, relative to `scale` (the sum of the magnitudes of the terms).
fn close(got: f64, want: f64, scale: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol * (1.0 + scale),
        "{what}: got {got}, expected {want}"
    );
}

/// The relative tolerance of a sum of a million terms: f32 sums in f32.
fn sum_tol<T: Num>() -> f64 {
    if T::TOL > 1e-9 { 1e-4 } else { 1e-12 }
}

fn check_reductions<T: Num>(ctx: &Context, blas: &Blas, n: usize, inc: usize) {
    let x: Vec<T> = strided_data(n, inc, 5);
    let y: Vec<T> = strided_data(n, 1, 6);
    let xs = |i: usize| -> f64 { x[i * inc].into() };
    let ys = |i: usize| -> f64 { y[i].into() };
    let dot: f64 = (0..n).map(|i| xs(i) * ys(i)).sum();
    let dot_scale: f64 = (0..n).map(|i| (xs(i) * ys(i)).abs()).sum();
    let asum: f64 = (0..n).map(|i| xs(i).abs()).sum();
    let nrm2 = (0..n).map(|i| xs(i) * xs(i)).sum::<f64>().sqrt();
    let iamax = (0..n)
        .fold((0, -1.0), |(k, m), i| {
            if xs(i).abs() > m {
                (i, xs(i).abs())
            } else {
                (k, m)
            }
        })
        .0;
    let what = format!("{} n = {n}, inc = {inc}", std::any::type_name::<T>());
    let v = Level1::new(n).incx(inc);
    let (dx, dy) = (
        Managed::from_slice(ctx, &x).expect("x"),
        Managed::from_slice(ctx, &y).expect("y"),
    );
    let index = Managed::from_slice(ctx, &[-7i32]).expect("index");
    let (host, device, index) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (dx, dy) = (dx.attach(s)?, dy.attach(s)?);
            let host = (
                blas.dot(s, &v, &dx, &dy)?,
                blas.nrm2(s, &v, &dx)?,
                blas.asum(s, &v, &dx)?,
                blas.iamax(s, &v, &dx)?,
            );
            // Into device buffers, one element each, read after the sync.
            let mut r: Vec<_> = Vec::new();
            let (mut r0, mut r1, mut r2) = (
                Managed::from_slice(ctx, &[T::of(SENTINEL)])?.attach(s)?,
                Managed::from_slice(ctx, &[T::of(SENTINEL)])?.attach(s)?,
                Managed::from_slice(ctx, &[T::of(SENTINEL)])?.attach(s)?,
            );
            let mut index = index.attach(s)?;
            blas.dot_into(s, &v, &dx, &dy, &mut r0)?;
            blas.nrm2_into(s, &v, &dx, &mut r1)?;
            blas.asum_into(s, &v, &dx, &mut r2)?;
            blas.iamax_into(s, &v, &dx, &mut index)?;
            // The handle is back in host pointer mode: a host-result call after them works.
            let again = blas.dot(s, &v, &dx, &dy)?;
            let (_, _, r0, r1, r2, index) = s.sync_all((dx, dy, r0, r1, r2, index))?;
            for b in [r0, r1, r2] {
                r.push(b[0].into());
            }
            r.push(again.into());
            Ok((host, r, index[0]))
        })
        .expect("level-1 reductions");
    close(
        host.0.into(),
        dot,
        dot_scale,
        sum_tol::<T>(),
        &format!("dot, {what}"),
    );
    close(
        host.1.into(),
        nrm2,
        nrm2,
        sum_tol::<T>(),
        &format!("nrm2, {what}"),
    );
    close(
        host.2.into(),
        asum,
        asum,
        sum_tol::<T>(),
        &format!("asum, {what}"),
    );
    assert_eq!(host.3, Some(iamax), "iamax, {what}");
    close(
        device[0],
        dot,
        dot_scale,
        sum_tol::<T>(),
        &format!("dot_into, {what}"),
    );
    close(
        device[1],
        nrm2,
        nrm2,
        sum_tol::<T>(),
        &format!("nrm2_into, {what}"),
    );
    close(
        device[2],
        asum,
        asum,
        sum_tol::<T>(),
        &format!("asum_into, {what}"),
    );
    close(
        device[3],
        dot,
        dot_scale,
        sum_tol::<T>(),
        &format!("dot after *_into, {what}"),
    );
    assert_eq!(index, iamax as i32 + 1, "iamax_into (1-based), {what}");
}

/// dot, nrm2, asum and iamax against the CPU at n = 1, 7 and 1000003 with increments 1 and 3,
/// f32 and f64: returned to the host, and written into one-element buffers of the stream
/// (device pointer mode for that call only) read after the sync; a host-result call after them
/// shows the handle back in host pointer mode.
#[test]
#[ignore = "needs a CUDA device"]
fn level1_reductions_match_the_cpu_to_the_host_and_into_device_buffers() {
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    for (n, inc) in LEVEL1 {
        check_reductions::<f32>(&ctx, &blas, n, inc);
        check_reductions::<f64>(&ctx, &blas, n, inc);
    }
}

/// The four reductions to the host on `s`, after a kernel that spins for about 20 ms before it
/// adds 1 to every element of `x` (all ones): each result must be of `x` after that kernel, each
/// call must make exactly one host wait of um's, and `n = 0` after them gives 0 and `None`.
fn host_results_on<'s, K: um_cublas::BlasStream + um::Attachable>(
    ctx: &Context,
    blas: &Blas,
    s: &um::Stream<'s, K>,
    n: usize,
) -> um_cublas::Result<()> {
    let x = Managed::from_fn(ctx, n, |_| 1.0f32)?.attach(s)?;
    host_results_of(blas, s, x, n)
}

/// [`host_results_on`] with `x` (`n` ones) already owned by `s`: also for the legacy stream,
/// where memory is attached globally.
fn host_results_of<'s, K: um_cublas::BlasStream>(
    blas: &Blas,
    s: &um::Stream<'s, K>,
    mut x: Managed<[f32], um::StreamOwned<'s, K>>,
    n: usize,
) -> um_cublas::Result<()> {
    spin_then_add(s, &mut x, 1.0, 20_000_000)?;
    let v = Level1::new(n);
    let waits = um_core::host_waits_on_this_thread();
    let dot = blas.dot(s, &v, &x, &x)?;
    assert_eq!(
        um_core::host_waits_on_this_thread(),
        waits + 1,
        "one wait for dot"
    );
    assert_eq!(dot, 4.0 * n as f32, "dot of x after the slow kernel");
    assert_eq!(blas.asum(s, &v, &x)?, 2.0 * n as f32, "asum");
    // cuBLAS scales as it sums: its norm may differ from the square root of 4n in the last bit.
    let (nrm2, want) = (blas.nrm2(s, &v, &x)?, (4.0 * n as f32).sqrt());
    assert!(
        (nrm2 - want).abs() <= 4.0 * f32::EPSILON * want,
        "nrm2: {nrm2}, expected {want}"
    );
    assert_eq!(blas.iamax(s, &v, &x)?, Some(0), "iamax");
    assert_eq!(
        um_core::host_waits_on_this_thread(),
        waits + 4,
        "one wait each"
    );
    let none = Level1::new(0);
    assert_eq!(blas.dot(s, &none, &x, &x)?, 0.0, "dot of n = 0");
    assert_eq!(blas.nrm2(s, &none, &x)?, 0.0, "nrm2 of n = 0");
    assert_eq!(blas.asum(s, &none, &x)?, 0.0, "asum of n = 0");
    assert_eq!(blas.iamax(s, &none, &x)?, None, "iamax of n = 0");
    drop(x.sync()?);
    Ok(())
}

/// A reduction returned to the host (`dot`, `nrm2`, `asum`, `iamax`) is written by cuBLAS into
/// the handle's pinned word and read after one wait of um's for the call's stream: the result
/// covers a slow kernel queued before the call (a read before that wait would see the zeroed
/// word), on a created stream, the per-thread stream, then a created stream again (one word
/// serves them in turn), at n = 1 and 4099; the word is zeroed before each call, so `n = 0`
/// after a non-zero result gives 0 and `None`.
#[test]
#[ignore = "needs a CUDA device"]
fn host_results_are_read_after_one_wait_for_their_stream_on_each_stream_kind() {
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    for n in [1, 4099] {
        ctx.with_stream(StreamOptions::new(), |s| {
            host_results_on(&ctx, &blas, s, n).map_err(um::Error::from)
        })
        .expect("a created stream");
        ctx.with_per_thread_stream(|s| host_results_on(&ctx, &blas, s, n).map_err(um::Error::from))
            .expect("the per-thread stream");
        ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
            host_results_on(&ctx, &blas, s, n).map_err(um::Error::from)
        })
        .expect("a created stream again");
    }
}

/// The host results of [`host_results_on`] on the streams the first test leaves out: the legacy
/// stream, the second stream of a stream set after calls on its first (the handle moves, its word
/// with it), and a created stream on another thread after the `Blas` (and so its word) was moved
/// there. Each result is of its own call after the slow kernel, never of the call before it.
#[test]
#[ignore = "needs a CUDA device"]
fn host_results_on_the_legacy_stream_a_stream_sets_streams_and_another_thread_are_each_of_their_own_call()
 {
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    for n in [1, 4099] {
        ctx.with_legacy_stream(|s| {
            let x = Managed::from_fn(&ctx, n, |_| 1.0f32)?.attach_global(s)?;
            host_results_of(&blas, s, x, n).map_err(um::Error::from)
        })
        .expect("the legacy stream");
        ctx.with_stream_set(2, StreamOptions::new(), |set| {
            host_results_on(&ctx, &blas, &set[0], n).map_err(um::Error::from)?;
            host_results_on(&ctx, &blas, &set[1], n).map_err(um::Error::from)
        })
        .expect("a stream set");
    }
    let ctx2 = ctx.clone();
    std::thread::spawn(move || {
        ctx2.with_stream(StreamOptions::new(), |s| {
            host_results_on(&ctx2, &blas, s, 77).map_err(um::Error::from)
        })
        .expect("a created stream on another thread");
        drop(blas);
    })
    .join()
    .expect("the other thread");
}

/// A host result's word is left as it was by calls refused before cuBLAS, and zeroed before
/// every call it is handed to: after a right `dot`, a `dot` refused for its shape, a `dot` on a
/// poisoned stream (`StreamPoisoned`) and, where there is a second device, an `nrm2` on a stream
/// of its context (`ContextMismatch`), the next `dot` (of other values) is its own result, not
/// the earlier one; and an `asum` of n = 0 then gives 0, not that result. The poisoned stream's
/// buffer is leaked, as every poisoned stream's is (hence `leaks_` in the name: the sanitizer
/// run checks this test for leaks apart).
#[test]
#[ignore = "needs a CUDA device"]
fn a_host_result_after_refused_calls_is_its_own_never_an_earlier_one_and_a_poisoned_stream_leaks_its_buffer()
 {
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let x = Managed::from_fn(&ctx, 8, |i| i as f64).expect("x");
    let y = Managed::from_fn(&ctx, 8, |_| 2.0f64).expect("y");
    let other = (um::device_count().unwrap_or(1) > 1).then(|| Context::new(1).expect("device 1"));
    let (x, y) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, y) = (x.attach(s)?, y.attach(s)?);
            let v = Level1::new(8);
            assert_eq!(blas.dot(s, &v, &x, &x)?, 140.0, "0^2 + ... + 7^2");
            let e = blas.dot(s, &Level1::new(9), &x, &x).expect_err("n > len");
            assert!(matches!(e, Error::Shape(_)), "{e}");
            ctx.with_stream(StreamOptions::new(), |p| {
                let z = Managed::from_fn(&ctx, 8, |_| 1.0f64)?.attach(p)?;
                p.poisoner().poison();
                let e = blas.dot(p, &v, &z, &z).expect_err("a poisoned stream");
                assert!(
                    matches!(e, Error::Um(um::Error::StreamPoisoned)),
                    "refused before cuBLAS: {e}"
                );
                Ok(())
            })?;
            if let Some(other) = &other {
                other.with_stream(StreamOptions::new(), |o| {
                    let w = Managed::from_fn(other, 8, |_| 3.0f64)?.attach(o)?;
                    let e = blas.nrm2(o, &v, &w).expect_err("another context");
                    assert!(matches!(e, Error::ContextMismatch), "{e}");
                    drop(w.sync()?);
                    Ok(())
                })?;
            }
            assert_eq!(
                blas.dot(s, &v, &x, &y)?,
                56.0,
                "2 (0 + ... + 7), not the earlier 140"
            );
            assert_eq!(blas.asum(s, &Level1::new(0), &x)?, 0.0, "n = 0 after 56");
            assert_eq!(blas.iamax(s, &Level1::new(0), &x)?, None, "n = 0");
            s.sync_all((x, y))
        })
        .expect("the calls");
    assert_eq!((x[7], y[7]), (7.0, 2.0), "the inputs unchanged");
}

/// A `Blas`'s first host result, made while another thread's capture is open (its closure waits
/// for this call): the handle's word is allocated then (`cuMemAllocHost` beside a thread-local
/// capture), the result is right, and the capture stays valid (its graph replays both kernels).
#[test]
#[ignore = "needs a CUDA device"]
fn a_first_host_result_beside_another_threads_capture_is_right_and_leaves_the_capture_valid() {
    let _serial = serial();
    let _dog = watchdog("a first host result beside a capture");
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let x = Managed::from_fn(&ctx, 1000, |_| 1.0f32).expect("x");
    let (dot, replayed) = common::beside_an_open_capture(&ctx, || {
        ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
            let x = x.attach(s)?;
            let dot = blas
                .dot(s, &Level1::new(1000), &x, &x)
                .map_err(um::Error::from)?;
            drop(x.sync()?);
            Ok(dot)
        })
    });
    assert_eq!(dot.expect("the first host result"), 1000.0);
    assert!(
        replayed.expect("the capture and its replay"),
        "the graph replayed both kernels"
    );
}

/// A stream poisoned while a host result waits for it (a communicator aborted by another thread,
/// say: its collective's buffers may still be written by the other ranks) gives the CPU nothing
/// computed from that stream's memory, as `sync` gives none of its buffers (rules 164 and 188:
/// `Graph::sync` checks the mark again after its wait): the `dot` is `StreamPoisoned`, as the
/// `sync` of its input after it is. The input and the handle's word are leaked with the
/// poisoned stream's memory (hence `leaks_` in the name).
#[test]
#[ignore = "needs a CUDA device"]
fn a_host_result_of_a_stream_poisoned_during_its_wait_is_refused_as_a_sync_is_and_leaks_the_word_and_buffer()
 {
    let _serial = serial();
    let _dog = watchdog("a host result of a stream poisoned during its wait");
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let x = Managed::from_fn(&ctx, 1000, |_| 1.0f32).expect("x");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        let poisoner = s.poisoner();
        spin_then_add(s, &mut x, 1.0, 300_000_000)?;
        let poisoning = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            poisoner.poison();
        });
        let dot = blas.dot(s, &Level1::new(1000), &x, &x);
        poisoning.join().expect("the poisoning thread");
        assert!(s.is_poisoned(), "poisoned during the dot's wait");
        let synced = x.sync().map(drop);
        assert!(
            matches!(synced, Err(um::Error::StreamPoisoned)),
            "the input is not given to the CPU: {synced:?}"
        );
        assert!(
            matches!(dot, Err(Error::Um(um::Error::StreamPoisoned))),
            "nor a result computed from it: {dot:?}"
        );
        Ok(())
    })
    .expect("the stream's scope");
}

fn check_updates<T: Num, M: Contents>(
    ctx: &Context,
    blas: &Blas,
    alloc: Alloc<T, M>,
    n: usize,
    inc: usize,
) {
    // x at `inc`, y at 1 for axpy and copy; both at `inc` for swap and scal.
    let x: Vec<T> = strided_data(n, inc, 7);
    let y: Vec<T> = strided_data(n, 1, 8);
    let z: Vec<T> = strided_data(n, inc, 9);
    let alpha = -2.5;
    let f = |v: &[T], i: usize| -> f64 { v[i].into() };
    let mut want_axpy: Vec<f64> = (0..y.len()).map(|i| f(&y, i)).collect();
    let mut want_copy = want_axpy.clone();
    let mut want_scal: Vec<f64> = (0..x.len()).map(|i| f(&x, i)).collect();
    let mut want_sx = want_scal.clone();
    let mut want_sz: Vec<f64> = (0..z.len()).map(|i| f(&z, i)).collect();
    for i in 0..n {
        want_axpy[i] += alpha * f(&x, i * inc);
        want_copy[i] = f(&x, i * inc);
        want_scal[i * inc] *= alpha;
        want_sx[i * inc] = f(&z, i * inc);
        want_sz[i * inc] = f(&x, i * inc);
    }
    let what = format!(
        "{} {} n = {n}, inc = {inc}",
        std::any::type_name::<T>(),
        M::NAME
    );
    let buf = |v: &[T]| alloc(ctx, v).expect("alloc");
    let (dx, dy, dc, ds, dsx, dsz) = (buf(&x), buf(&y), buf(&y), buf(&x), buf(&x), buf(&z));
    let got = ctx
        .with_stream(StreamOptions::new(), |s| {
            let dx = dx.attach(s)?;
            let (mut dy, mut dc, mut ds) = (dy.attach(s)?, dc.attach(s)?, ds.attach(s)?);
            let (mut dsx, mut dsz) = (dsx.attach(s)?, dsz.attach(s)?);
            let v = Level1::new(n).incx(inc);
            blas.axpy(s, &v, T::of(alpha), &dx, &mut dy)?;
            blas.copy(s, &v, &dx, &mut dc)?;
            blas.scal(s, &v, T::of(alpha), &mut ds)?;
            blas.swap(s, &v.incy(inc), &mut dsx, &mut dsz)?;
            s.sync_all((dx, dy, dc, ds, dsx, dsz))
        })
        .expect("level-1 updates");
    let (_, gy, gc, gs, gsx, gsz) = got;
    for (name, got, want) in [
        ("axpy", &M::contents(&gy), &want_axpy),
        ("copy", &M::contents(&gc), &want_copy),
        ("scal", &M::contents(&gs), &want_scal),
        ("swap x", &M::contents(&gsx), &want_sx),
        ("swap y", &M::contents(&gsz), &want_sz),
    ] {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
            let g: f64 = (*g).into();
            assert!(
                (g - w).abs() <= T::TOL * (1.0 + w.abs()),
                "{name}, {what}: element {i} is {g}, expected {w}"
            );
        }
    }
}

/// axpy, copy, scal and swap against the CPU at n = 1, 7 and 1000003 with increments 1 and 3,
/// f32 and f64, on unified, mirrored and device memory: every element of every buffer checked, so an
/// element between the strides, or past the last, that a call wrote shows.
#[test]
#[ignore = "needs a CUDA device"]
fn level1_updates_match_the_cpu_and_leave_the_elements_between_strides_alone() {
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    for (n, inc) in LEVEL1 {
        check_updates::<f32, _>(&ctx, &blas, Managed::from_slice, n, inc);
        check_updates::<f64, _>(&ctx, &blas, Managed::from_slice_mirrored, n, inc);
        check_updates::<f32, _>(&ctx, &blas, Managed::from_slice_device, n, inc);
    }
}

fn check_batched<T: Num>(ctx: &Context, blas: &Blas, layout: Layout, shared_a: bool) {
    let (m, n, k, batch) = (7, 13, 5, 3);
    let (lda, ea) = extent(layout, m, k, 1, 0);
    let (ldb, eb) = extent(layout, k, n, 0, 0);
    let (ldc, ec) = extent(layout, m, n, 2, 0);
    // Strides longer than the extents (a gap between matrices), or 0 for one shared A.
    let (sa, sb, sc) = (if shared_a { 0 } else { ea + 3 }, eb + 1, ec + 5);
    let la = sa * (batch - 1) + ea + 2;
    let lb = sb * (batch - 1) + eb + 2;
    let lc = sc * (batch - 1) + ec + 2;
    let a: Vec<T> = (0..la).map(|i| T::of(value(i, 1))).collect();
    let b: Vec<T> = (0..lb).map(|i| T::of(value(i, 2))).collect();
    let c0: Vec<T> = (0..lc).map(|i| T::of(SENTINEL + value(i, 3))).collect();
    let (alpha, beta) = (2.0, -1.0);
    let f = |v: &[T], i: usize| -> f64 { v[i].into() };
    let mut want: Vec<f64> = (0..lc).map(|i| f(&c0, i)).collect();
    for q in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let sum: f64 = (0..k)
                    .map(|p| {
                        f(&a, q * sa + index(layout, lda, i, p))
                            * f(&b, q * sb + index(layout, ldb, p, j))
                    })
                    .sum();
                let ci = q * sc + index(layout, ldc, i, j);
                want[ci] = alpha * sum + beta * want[ci];
            }
        }
    }
    let g = match layout {
        Layout::ColMajor => Gemm::<T>::new(m, n, k),
        Layout::RowMajor => Gemm::<T>::row_major(m, n, k),
    }
    .lda(lda)
    .ldb(ldb)
    .ldc(ldc)
    .alpha(T::of(alpha))
    .beta(T::of(beta))
    .strided_batched(batch)
    .stride_a(sa)
    .stride_b(sb)
    .stride_c(sc);
    let (da, db, dc) = (
        Managed::from_slice(ctx, &a).expect("a"),
        Managed::from_slice(ctx, &b).expect("b"),
        Managed::from_slice(ctx, &c0).expect("c"),
    );
    let (_, _, got) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (da, db, mut dc) = (da.attach(s)?, db.attach(s)?, dc.attach(s)?);
            blas.gemm_strided_batched(s, &g, &da, &db, &mut dc)?;
            s.sync_all((da, db, dc))
        })
        .expect("strided batched gemm");
    for (i, (g_, w)) in got.iter().zip(&want).enumerate() {
        let g_: f64 = (*g_).into();
        assert!(
            (g_ - w).abs() <= T::TOL * (1.0 + w.abs() + 25.0 * k as f64 * alpha),
            "{layout:?} shared A {shared_a}: element {i} of C is {g_}, expected {w}"
        );
    }
}

/// Three 7x13x5 GEMMs at strides longer than the matrices (gaps between them, padded leading
/// dimensions), column- and row-major, f32 and f64, and with one A shared (stride 0): every
/// element of C's buffer against the CPU, the gaps and the tail untouched.
#[test]
#[ignore = "needs a CUDA device"]
fn strided_batched_gemm_matches_the_cpu_and_leaves_the_gaps_alone() {
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    for layout in [Layout::ColMajor, Layout::RowMajor] {
        for shared_a in [false, true] {
            check_batched::<f32>(&ctx, &blas, layout, shared_a);
            check_batched::<f64>(&ctx, &blas, layout, shared_a);
        }
    }
}

/// Lengths, increments and strides that do not fit are refused before cuBLAS runs, with nothing
/// written (the outputs keep their sentinels); a host result inside a capture closure is
/// `InsideCapture` and leaves the capture valid.
#[test]
#[ignore = "needs a CUDA device"]
fn level1_and_batch_refusals_write_nothing() {
    let _serial = serial();
    let Some(ctx) = device_for_captures() else {
        return;
    };
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let buf = |n: usize| Managed::from_slice(&ctx, &vec![SENTINEL as f32; n]).expect("alloc");
    let (x, y, a, c, r, z) = (buf(7), buf(19), buf(35), buf(90), buf(1), buf(4));
    let shape = |e: Error| match e {
        Error::Shape(s) => s,
        other => panic!("not a shape error: {other}"),
    };
    let (y, c, r, captured) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, a, z) = (x.attach(s)?, a.attach(s)?, z.attach(s)?);
            let (mut y, mut c, mut r) = (y.attach(s)?, c.attach(s)?, r.attach(s)?);
            // 7 elements at increment 3 need 19; x has 7.
            let v = Level1::new(7).incx(3);
            let e = blas.axpy(s, &v, 1.0, &x, &mut y).expect_err("x too short");
            assert!(matches!(
                shape(e),
                ShapeError::BufferTooShort {
                    buffer: "x",
                    needed: 19,
                    ..
                }
            ));
            let e = blas
                .copy(s, &Level1::new(7).incy(3), &x, &mut r)
                .expect_err("y too short");
            assert!(matches!(
                shape(e),
                ShapeError::BufferTooShort { buffer: "y", .. }
            ));
            let e = blas
                .scal(s, &Level1::new(7).incx(0), 2.0, &mut y)
                .expect_err("inc 0");
            assert_eq!(shape(e), ShapeError::ZeroIncrement { what: "incx" });
            let e = blas
                .dot_into(s, &Level1::new(8), &x, &x, &mut r)
                .expect_err("n > len");
            assert!(matches!(
                shape(e),
                ShapeError::BufferTooShort { buffer: "x", .. }
            ));
            let e = blas.nrm2(s, &Level1::new(8), &x).expect_err("n > len");
            assert!(matches!(shape(e), ShapeError::BufferTooShort { .. }));
            // Two 7x13x5 GEMMs need 182 elements of C; c has 90; overlapping outputs.
            let g = Gemm::<f32>::new(7, 13, 5).strided_batched(2);
            let e = blas
                .gemm_strided_batched(s, &g, &a, &a, &mut c)
                .expect_err("c");
            assert!(matches!(shape(e), ShapeError::BufferTooShort { .. }));
            let g = Gemm::<f32>::new(1, 1, 1).strided_batched(2).stride_c(0);
            let e = blas
                .gemm_strided_batched(s, &g, &z, &z, &mut c)
                .expect_err("overlap");
            assert_eq!(
                shape(e),
                ShapeError::OutputsOverlap {
                    stride: 0,
                    extent: 1
                }
            );
            // A host result on the capturing thread: refused before any call.
            let captured = s.capture((z,), |cap, (mut z,)| {
                testing::add_scalar(cap, &mut z, 1.0)?;
                match blas.dot(s, &Level1::new(7), &x, &x) {
                    Err(Error::Um(um::Error::InsideCapture { .. })) => {}
                    other => panic!("a host result inside a capture: {other:?}"),
                }
                Ok(((z,), ()))
            });
            let captured = match captured {
                Ok((graph, ())) => {
                    graph.launch(s)?;
                    let (z,) = graph.sync()?;
                    Ok(z.iter().all(|e| *e == SENTINEL as f32 + 1.0))
                }
                Err(e) => Err(e),
            };
            let (_, _, y, c, r) = s.sync_all((x, a, y, c, r))?;
            Ok((y, c, r, captured))
        })
        .expect("the stream");
    assert_eq!(captured, Ok(true), "the capture");
    for (name, b) in [("y", &y[..]), ("c", &c[..]), ("r", &r[..])] {
        assert!(
            b.iter().all(|v| *v == SENTINEL as f32),
            "{name} was written"
        );
    }
}

/// A routine um-cublas does not wrap (`cublasSgeam`, the transpose of a 2x3 matrix), found with
/// `Cublas::symbol` and called with `Blas::raw_handle_on` on a created stream and on the
/// per-thread stream: the results are right, and a GEMM through `Blas` on another stream
/// afterwards (a move after the raw call: recorded on the created stream, a wait for the
/// context after the per-thread one) runs and is right. A name the library lacks is
/// `NoSymbol`.
#[test]
#[ignore = "needs a CUDA device"]
fn a_routine_through_the_raw_handle_runs_on_its_stream_in_order() {
    use std::ffi::{c_int, c_void};
    type Sgeam = unsafe extern "C" fn(
        *mut c_void,
        c_int,
        c_int,
        c_int,
        c_int,
        *const f32,
        *const f32,
        c_int,
        *const f32,
        *const f32,
        c_int,
        *mut f32,
        c_int,
    ) -> i32;
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    assert!(matches!(
        blas.library().symbol(c"cublasNoSuchRoutine"),
        Err(Error::NoSymbol { .. })
    ));
    let address = blas.library().symbol(c"cublasSgeam").expect("cublasSgeam");
    // SAFETY: cublasSgeam has this prototype (cublas_api.h).
    let geam: Sgeam = unsafe { std::mem::transmute::<*const c_void, Sgeam>(address) };
    let a = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("a");
    let t = Managed::<[f32]>::zeroed_slice(&ctx, 6).expect("t");
    let (one, c) = (
        Managed::from_slice(&ctx, &[1.0f32]).expect("one"),
        Managed::from_slice(&ctx, &[0.0f32]).expect("c"),
    );
    let (t, c) = ctx
        .with_stream_set(2, StreamOptions::new().non_blocking(), |s| {
            let (a, mut t) = (a.attach(&s[0])?, t.attach(&s[0])?);
            let (alpha, beta) = (1.0f32, 0.0f32);
            let (pa, pt) = (
                a.as_device_ptr().as_ptr(),
                t.as_device_ptr_mut().as_mut_ptr(),
            );
            // SAFETY: the handle is used here only, on s[0], left bound and in host pointer
            // mode; A (2x3, lda 2) and T (3x2, ldc 3) lie within buffers s[0] owns, and T
            // overlaps neither input (B is A, unread with beta = 0).
            let status = unsafe {
                let h = blas.raw_handle_on(&s[0])?;
                geam(h, 1, 1, 3, 2, &alpha, pa, 2, &beta, pa, 2, pt, 3)
            };
            assert_eq!(status, 0, "cublasSgeam");
            // A move to s[1]: ordered after the raw call.
            let (one, mut c) = (one.attach(&s[1])?, c.attach(&s[1])?);
            blas.gemm(&s[1], &Gemm::new(1, 1, 1), &one, &one, &mut c)?;
            let (_, t) = s[0].sync_all((a, t))?;
            let (_, c) = s[1].sync_all((one, c))?;
            Ok((t, c))
        })
        .expect("streams");
    assert_eq!(&t[..], &[1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    assert_eq!(c[0], 1.0);
    // On the per-thread stream, which a move cannot record: the raw call, then a move to a
    // created stream (ordered by a wait for the context), then back with a call of `Blas`.
    let a = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("a");
    let t = Managed::<[f32]>::zeroed_slice(&ctx, 6).expect("t");
    let t = ctx
        .with_per_thread_stream(|p| {
            let (a, mut t) = (a.attach(p)?, t.attach(p)?);
            let (alpha, beta) = (1.0f32, 0.0f32);
            let (pa, pt) = (
                a.as_device_ptr().as_ptr(),
                t.as_device_ptr_mut().as_mut_ptr(),
            );
            // SAFETY: as above, on the per-thread stream `p`.
            let status = unsafe {
                let h = blas.raw_handle_on(p)?;
                geam(h, 1, 1, 3, 2, &alpha, pa, 2, &beta, pa, 2, pt, 3)
            };
            assert_eq!(status, 0, "cublasSgeam on the per-thread stream");
            let (one, c) = (
                Managed::from_slice(&ctx, &[3.0f32])?,
                Managed::from_slice(&ctx, &[0.0f32])?,
            );
            let c = ctx.with_stream(StreamOptions::new(), |s| {
                let (one, mut c) = (one.attach(s)?, c.attach(s)?);
                blas.gemm(s, &Gemm::new(1, 1, 1), &one, &one, &mut c)?;
                let (_, c) = s.sync_all((one, c))?;
                Ok(c)
            })?;
            assert_eq!(
                c[0], 9.0,
                "the move after a raw call on the per-thread stream"
            );
            let (_, t) = p.sync_all((a, t))?;
            Ok(t)
        })
        .expect("the per-thread stream");
    assert_eq!(&t[..], &[1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
}

/// Device pointer mode is for one call: after a device-result call that ran, one refused
/// before cuBLAS (a vector too short for its increment, one too short for its length), and an
/// `iamax_into`,
/// the host-scalar calls (`axpy`, `scal`) and a host result still read the host. A leaked
/// device mode would read `alpha` (a host local) as a device address: garbage or a fault.
/// Expected: every refusal is `Error::Shape`, `y = 2 x + y` then `y *= 3` exact, the host dot
/// right, the device results right.
#[test]
#[ignore = "needs a CUDA device"]
fn host_scalar_calls_after_device_results_and_their_refusals_read_the_host() {
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let n = 7;
    let m = |v: &[f32]| Managed::from_slice(&ctx, v).expect("alloc");
    let (x, y, r) = (m(&[1.0; 7]), m(&[1.0; 7]), m(&[SENTINEL as f32]));
    let idx = Managed::from_slice(&ctx, &[-7i32]).expect("alloc");
    let (host_dot, y, r, idx) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (x, mut y, mut r) = (x.attach(s)?, y.attach(s)?, r.attach(s)?);
            let mut idx = idx.attach(s)?;
            let v = Level1::new(n);
            blas.dot_into(s, &v, &x, &y, &mut r)?;
            let got = blas.nrm2_into(s, &Level1::new(4).incx(3), &x, &mut r);
            assert!(matches!(got, Err(Error::Shape(_))), "{got:?}");
            let got = blas.asum_into(s, &Level1::new(n + 1), &x, &mut r);
            assert!(matches!(got, Err(Error::Shape(_))), "{got:?}");
            blas.iamax_into(s, &v, &x, &mut idx)?;
            blas.axpy(s, &v, 2.0, &x, &mut y)?;
            blas.scal(s, &v, 3.0, &mut y)?;
            let host_dot = blas.dot(s, &v, &x, &x)?;
            let _ = x.sync()?;
            Ok((host_dot, y.sync()?, r.sync()?, idx.sync()?))
        })
        .expect("level-1 calls");
    assert_eq!(host_dot, 7.0);
    assert!(y.iter().all(|v| *v == 9.0), "{:?}", &y[..]);
    assert_eq!(r[0], 7.0, "the device dot");
    assert_eq!(idx[0], 1, "iamax_into is 1-based");
}

/// Set when `mark_on_the_stream` has run, after its sleep.
static MARKED: AtomicBool = AtomicBool::new(false);

/// Sleeps 500 ms, then sets `MARKED`: enqueued on a stream (`cuLaunchHostFunc`), it makes no
/// CUDA call.
unsafe extern "C" fn mark_on_the_stream(_: *mut std::ffi::c_void) {
    std::thread::sleep(Duration::from_millis(500));
    MARKED.store(true, Ordering::SeqCst);
}

/// A `Blas` sent to another thread as its old stream's scope ends: thread X makes the handle's
/// last call on a created stream, queues a host function behind it there (no buffer of um's
/// waits for it: the call's buffers are handed to an outer stream first), sends the handle and
/// ends the stream's scope at once, while thread Y moves the handle to a stream of its own.
/// The stream's end (its record under the lock) and Y's move (its record or, once the stream
/// ended, the end's record) race, in every round; whichever comes first, Y's stream must wait
/// for the host function. Expected, in every round: when Y's `sync` returns, the host function
/// has run (no timing: the flag it sets), and both products are right.
#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_sent_away_as_its_stream_ends_orders_its_next_call_after_that_stream() {
    use cust::sys as cs;
    let _serial = serial();
    let _dog = watchdog("a Blas sent away as its stream ends");
    let ctx = gpu();
    let opts = StreamOptions::new().non_blocking();
    let mut blas = Blas::new(&ctx).expect("cuBLAS");
    for round in 0..4 {
        MARKED.store(false, Ordering::SeqCst);
        let m = |v: f32| Managed::from_slice(&ctx, &[v; 4]).expect("alloc");
        let (a, c, a2, c2) = (m(1.0), m(0.0), m(1.0), m(0.0));
        let (send, receive) = mpsc::channel::<Blas>();
        let (back, returned) = mpsc::channel::<Blas>();
        let ctx_ref = &ctx;
        let (c, c2) = std::thread::scope(|scope| {
            let y = scope.spawn(move || {
                let blas = receive.recv().expect("the handle");
                let c2 = ctx_ref
                    .with_stream(opts, |next| {
                        let (a2, mut c2) = (a2.attach(next)?, c2.attach(next)?);
                        blas.gemm(next, &Gemm::new(2, 2, 2), &a2, &a2, &mut c2)?; // the move
                        let (_, c2) = next.sync_all((a2, c2))?;
                        Ok(c2)
                    })
                    .expect("the next stream");
                assert!(
                    MARKED.load(Ordering::SeqCst),
                    "round {round}: the next stream ran before the old stream's last work"
                );
                back.send(blas).expect("send back");
                c2
            });
            let c = ctx
                .with_stream(opts, |outer| {
                    let handed = ctx.with_stream(opts, |inner| {
                        let (a, mut c) = (a.attach(inner)?, c.attach(inner)?);
                        blas.gemm(inner, &Gemm::new(2, 2, 2), &a, &a, &mut c)?;
                        let handed = (a.hand_off(outer)?, c.hand_off(outer)?);
                        // SAFETY: a live stream of the current context (the hand-offs made it
                        // current); the function makes no CUDA call.
                        let status = unsafe {
                            cs::cuLaunchHostFunc(
                                inner.as_raw().cast(),
                                Some(mark_on_the_stream),
                                std::ptr::null_mut(),
                            )
                        };
                        assert_eq!(status, cs::cudaError_enum::CUDA_SUCCESS, "cuLaunchHostFunc");
                        // Sent as the scope ends: Y's move races the stream's end.
                        send.send(blas).expect("send the handle");
                        Ok(handed)
                    });
                    let (a, c) = handed?;
                    let (_, c) = outer.sync_all((a, c))?;
                    Ok(c)
                })
                .expect("the old stream");
            (c, y.join().expect("thread Y"))
        });
        blas = returned.recv().expect("the handle back");
        assert!(c.iter().all(|v| *v == 2.0), "{:?}", &c[..]);
        assert!(c2.iter().all(|v| *v == 2.0), "{:?}", &c2[..]);
    }
}

/// A stream poisoned (what an aborted library call does) takes no cuBLAS work, as it takes no
/// launch of um's: another agent may still touch the memory it owns. Every kind of call is
/// refused before the bind: a GEMM, a level-1 update, a device result, a host result and the
/// raw handle; the handle then still serves another stream. Expected: `StreamPoisoned` five
/// times, and the GEMM on the other stream right. The poisoned stream's buffers leak by design.
#[test]
#[ignore = "needs a CUDA device"]
fn a_poisoned_stream_takes_no_cublas_call_and_leaks_its_buffers() {
    let _serial = serial();
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let m = |v: f32| Managed::from_slice(&ctx, &[v; 4]).expect("alloc");
    let (a, c, r, a2, c2) = (m(1.0), m(0.0), m(0.0), m(1.0), m(0.0));
    let c2 = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (a, mut c, mut r) = (a.attach(s)?, c.attach(s)?, r.attach(s)?);
            blas.gemm(s, &Gemm::new(2, 2, 2), &a, &a, &mut c)?;
            s.poisoner().poison();
            let poisoned = |got: Result<(), Error>| {
                assert_eq!(got, Err(Error::Um(um::Error::StreamPoisoned)));
            };
            let v = Level1::new(4);
            poisoned(blas.gemm(s, &Gemm::new(2, 2, 2), &a, &a, &mut c));
            poisoned(blas.axpy(s, &v, 2.0, &a, &mut c));
            poisoned(blas.dot_into(s, &v, &a, &a, &mut r));
            poisoned(blas.nrm2(s, &v, &a).map(drop));
            // SAFETY: the handle is refused, never returned: nothing is called with it.
            poisoned(unsafe { blas.raw_handle_on(s) }.map(drop));
            ctx.with_stream(StreamOptions::new(), |t| {
                let (a2, mut c2) = (a2.attach(t)?, c2.attach(t)?);
                blas.gemm(t, &Gemm::new(2, 2, 2), &a2, &a2, &mut c2)?;
                let (_, c2) = t.sync_all((a2, c2))?;
                Ok(c2)
            })
        })
        .expect("streams");
    assert!(c2.iter().all(|v| *v == 2.0), "{:?}", &c2[..]);
}

/// Set when `mark_the_foreign_stream` has run, after its sleep.
static MARKED_FOREIGN: AtomicBool = AtomicBool::new(false);

/// Sleeps 500 ms, then sets `MARKED_FOREIGN`: enqueued on a stream (`cuLaunchHostFunc`), it
/// makes no CUDA call.
unsafe extern "C" fn mark_the_foreign_stream(_: *mut std::ffi::c_void) {
    std::thread::sleep(Duration::from_millis(500));
    MARKED_FOREIGN.store(true, Ordering::SeqCst);
}

/// A foreign stream can record nothing at a move (its owner may destroy it once its scope has
/// ended), so a call there records after itself. Here a host function holds the foreign stream,
/// the handle's GEMM comes behind it, the buffers are handed to an outer stream, the scope ends
/// and the owner destroys the stream (`cuStreamDestroy` while the work is queued); then the
/// handle moves to a created stream. Expected: when that stream's `sync` returns, the host
/// function has run (the flag it sets, no timing), and both products are right.
#[test]
#[ignore = "needs a CUDA device"]
fn a_blas_leaving_a_foreign_stream_its_owner_destroyed_waits_for_its_last_call_there() {
    use cust::sys as cs;
    let _serial = serial();
    let _dog = watchdog("a Blas leaving a destroyed foreign stream");
    let ctx = gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    MARKED_FOREIGN.store(false, Ordering::SeqCst);
    let m = |v: f32| Managed::from_slice(&ctx, &[v; 4]).expect("alloc");
    let (a, c, a2, c2) = (m(1.0), m(0.0), m(1.0), m(0.0));
    let opts = StreamOptions::new().non_blocking();
    let (c, c2) = ctx
        .with_stream(opts, |outer| {
            ctx.make_current()?;
            let mut raw: cs::CUstream = std::ptr::null_mut();
            // SAFETY: the context is current; `raw` receives the new stream.
            let status = unsafe {
                cs::cuStreamCreate(
                    &mut raw,
                    cs::CUstream_flags_enum::CU_STREAM_NON_BLOCKING as u32,
                )
            };
            assert_eq!(status, cs::cudaError_enum::CUDA_SUCCESS, "cuStreamCreate");
            // SAFETY: `raw` lives until the closure has returned (destroyed below), nothing
            // else enqueues on it, and it captures nothing.
            let handed = unsafe {
                ctx.with_foreign_stream(raw.cast(), |f| {
                    // SAFETY: a live stream of the current context; the function makes no
                    // CUDA call.
                    let status = cs::cuLaunchHostFunc(
                        f.as_raw().cast(),
                        Some(mark_the_foreign_stream),
                        std::ptr::null_mut(),
                    );
                    assert_eq!(status, cs::cudaError_enum::CUDA_SUCCESS, "cuLaunchHostFunc");
                    let (a, mut c) = (a.attach(f)?, c.attach(f)?);
                    blas.gemm(f, &Gemm::new(2, 2, 2), &a, &a, &mut c)?;
                    Ok((a.hand_off(outer)?, c.hand_off(outer)?))
                })
            }?;
            ctx.make_current()?;
            // SAFETY: the foreign scope has ended; the stream's queued work still completes.
            let status = unsafe { cs::cuStreamDestroy_v2(raw) };
            assert_eq!(status, cs::cudaError_enum::CUDA_SUCCESS, "cuStreamDestroy");
            let c2 = ctx.with_stream(opts, |next| {
                let (a2, mut c2) = (a2.attach(next)?, c2.attach(next)?);
                blas.gemm(next, &Gemm::new(2, 2, 2), &a2, &a2, &mut c2)?; // the move
                let (_, c2) = next.sync_all((a2, c2))?;
                Ok(c2)
            })?;
            assert!(
                MARKED_FOREIGN.load(Ordering::SeqCst),
                "the next stream ran before the handle's last call on the foreign stream"
            );
            let (a, c) = handed;
            let (_, c) = outer.sync_all((a, c))?;
            Ok((c, c2))
        })
        .expect("streams");
    assert!(c.iter().all(|v| *v == 2.0), "{:?}", &c[..]);
    assert!(c2.iter().all(|v| *v == 2.0), "{:?}", &c2[..]);
}
