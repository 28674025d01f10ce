//! The shape checks against a model of cuBLAS written from its documentation alone
//! (column-major; `op(A)` m×k, `op(B)` k×n, `C` m×n; element (i, j) of a stored matrix at
//! `i + j * ld`): every call `resolve` accepts is run through it, and must pass cuBLAS's
//! argument checks, index only within buffers of the lengths it accepted, and compute the
//! caller's product.

use super::*;

const BIG: usize = i32::MAX as usize + 1;

/// Every triple of these values.
fn triples<T: Copy>(xs: &[T]) -> Vec<[T; 3]> {
    let mut out = Vec::new();
    for &a in xs {
        for &b in xs {
            for &c in xs {
                out.push([a, b, c]);
            }
        }
    }
    out
}

const OPS: [(Op, Op); 4] = [
    (Op::N, Op::N),
    (Op::N, Op::T),
    (Op::T, Op::N),
    (Op::T, Op::T),
];
const LAYOUTS: [Layout; 2] = [Layout::ColMajor, Layout::RowMajor];

/// The GEMM of these numbers, built through the public builder only.
fn built(
    layout: Layout,
    [m, n, k]: [usize; 3],
    (ta, tb): (Op, Op),
    [lda, ldb, ldc]: [Option<usize>; 3],
) -> Gemm<f64> {
    let mut g = match layout {
        Layout::ColMajor => Gemm::<f64>::new(m, n, k),
        Layout::RowMajor => Gemm::<f64>::row_major(m, n, k),
    }
    .transa(ta)
    .transb(tb)
    .alpha(2.0)
    .beta(3.0);
    if let Some(ld) = lda {
        g = g.lda(ld);
    }
    if let Some(ld) = ldb {
        g = g.ldb(ld);
    }
    if let Some(ld) = ldc {
        g = g.ldc(ld);
    }
    g
}

/// The least leading dimensions cuBLAS's argument check allows for its A, B and C
/// (`CUBLAS_STATUS_INVALID_VALUE` below them).
fn cublas_min_lds(c: &GemmCall) -> [c_int; 3] {
    let rows_a = if c.transa == sys::OP_N { c.m } else { c.k };
    let rows_b = if c.transb == sys::OP_N { c.k } else { c.n };
    [rows_a.max(1), rows_b.max(1), c.m.max(1)]
}

fn cublas_gemm_rejects(c: &GemmCall) -> bool {
    let [a, b, cc] = cublas_min_lds(c);
    let op = |t| t == sys::OP_N || t == sys::OP_T;
    !op(c.transa)
        || !op(c.transb)
        || c.m < 0
        || c.n < 0
        || c.k < 0
        || c.lda < a
        || c.ldb < b
        || c.ldc < cc
}

/// How many elements of cuBLAS's A, B and C the call touches (highest index + 1), in i128
/// so that nothing here overflows.
fn cublas_gemm_spans(c: &GemmCall) -> [i128; 3] {
    let (m, n, k) = (c.m as i128, c.n as i128, c.k as i128);
    if m == 0 || n == 0 {
        return [0; 3];
    }
    let span = |rows: i128, cols: i128, ld: c_int| {
        if rows == 0 || cols == 0 {
            0
        } else {
            (rows - 1) + (cols - 1) * ld as i128 + 1
        }
    };
    let (ra, ca) = if c.transa == sys::OP_N {
        (m, k)
    } else {
        (k, m)
    };
    let (rb, cb) = if c.transb == sys::OP_N {
        (k, n)
    } else {
        (n, k)
    };
    [span(ra, ca, c.lda), span(rb, cb, c.ldb), span(m, n, c.ldc)]
}

/// The spans of the caller's a, b and c (cuBLAS's A and B are b and a when swapped).
fn caller_spans(c: &GemmCall) -> [i128; 3] {
    let [first, second, out] = cublas_gemm_spans(c);
    if c.swap {
        [second, first, out]
    } else {
        [first, second, out]
    }
}

/// cuBLAS's GEMM on slices, element by element (an index outside a slice panics), the
/// matrices starting at these offsets.
#[allow(clippy::too_many_arguments)]
fn cublas_gemm(
    c: &GemmCall,
    (alpha, beta): (f64, f64),
    (a, oa): (&[f64], usize),
    (b, ob): (&[f64], usize),
    (out, oc): (&mut [f64], usize),
    written: &mut dyn FnMut(usize),
) {
    assert!(!cublas_gemm_rejects(c), "cuBLAS refuses {c:?}");
    let (m, n, k) = (c.m as usize, c.n as usize, c.k as usize);
    let (lda, ldb, ldc) = (c.lda as usize, c.ldb as usize, c.ldc as usize);
    if m == 0 || n == 0 {
        return;
    }
    for j in 0..n {
        for i in 0..m {
            let mut s = 0.0;
            for p in 0..k {
                let x = if c.transa == sys::OP_N {
                    a[oa + i + p * lda]
                } else {
                    a[oa + p + i * lda]
                };
                let y = if c.transb == sys::OP_N {
                    b[ob + p + j * ldb]
                } else {
                    b[ob + j + p * ldb]
                };
                s += x * y;
            }
            let at = oc + i + j * ldc;
            out[at] = alpha * s + if beta == 0.0 { 0.0 } else { beta * out[at] };
            written(at);
        }
    }
}

/// Where element (i, j) of a matrix lies, in the caller's layout.
fn at(layout: Layout, ld: usize, i: usize, j: usize) -> usize {
    match layout {
        Layout::ColMajor => i + j * ld,
        Layout::RowMajor => i * ld + j,
    }
}

/// The caller's product, from the caller's own description of its matrices: `C(i, j)` for
/// the GEMM `g` with these leading dimensions, A, B and C starting at these offsets.
fn expected(
    g: &Gemm<f64>,
    [lda, ldb, ldc]: [usize; 3],
    (a, oa): (&[f64], usize),
    (b, ob): (&[f64], usize),
    (c0, oc): (&[f64], usize),
    (i, j): (usize, usize),
) -> f64 {
    let l = g.layout;
    let mut s = 0.0;
    for p in 0..g.k {
        let x = match g.transa {
            Op::N => a[oa + at(l, lda, i, p)],
            Op::T => a[oa + at(l, lda, p, i)],
        };
        let y = match g.transb {
            Op::N => b[ob + at(l, ldb, p, j)],
            Op::T => b[ob + at(l, ldb, j, p)],
        };
        s += x * y;
    }
    g.alpha * s + g.beta * c0[oc + at(l, ldc, i, j)]
}

/// The least length of one buffer `accepts` takes (the others unbounded), searched up to
/// `limit`.
fn least_len(limit: usize, accepts: impl Fn(usize) -> bool) -> usize {
    (0..=limit)
        .find(|&len| accepts(len))
        .expect("no length up to the limit accepted")
}

fn filled(len: usize, seed: f64) -> Vec<f64> {
    (0..len).map(|i| seed + i as f64).collect()
}

#[test]
fn every_accepted_gemm_indexes_within_its_buffers_and_computes_the_callers_product() {
    let mx = usize::MAX;
    let lds = [None, Some(0), Some(1), Some(2), Some(3), Some(4), Some(5)];
    let mut run = 0usize;
    for layout in LAYOUTS {
        for ops in OPS {
            for dims in triples(&[0usize, 1, 2, 3]) {
                for ld in triples(&lds) {
                    let g = built(layout, dims, ops, ld);
                    let Ok(unbounded) = g.resolve(mx, mx, mx) else {
                        continue;
                    };
                    // The tightest lengths it accepts, and cuBLAS run on buffers of exactly
                    // those lengths.
                    let la = least_len(64, |l| g.resolve(l, mx, mx).is_ok());
                    let lb = least_len(64, |l| g.resolve(mx, l, mx).is_ok());
                    let lc = least_len(64, |l| g.resolve(mx, mx, l).is_ok());
                    let call = g.resolve(la, lb, lc).expect("each least length together");
                    assert_eq!(call, unbounded);
                    let (a, b, c0) = (filled(la, 1.0), filled(lb, 100.0), filled(lc, 1000.0));
                    let mut c = c0.clone();
                    let mut hit = vec![false; lc];
                    let (first, second) = if call.swap { (&b, &a) } else { (&a, &b) };
                    cublas_gemm(
                        &call,
                        g.scalars(),
                        (first, 0),
                        (second, 0),
                        (&mut c, 0),
                        &mut |i| hit[i] = true,
                    );
                    // Every element of the caller's C holds the caller's product, and
                    // nothing else of c was written.
                    let ldv = |given: Option<usize>, which: usize| {
                        let cl = [call.lda, call.ldb, call.ldc];
                        let swapped = match (call.swap, which) {
                            (true, 0) => 1,
                            (true, 1) => 0,
                            (_, w) => w,
                        };
                        given.unwrap_or(cl[swapped] as usize)
                    };
                    let lds_used = [ldv(ld[0], 0), ldv(ld[1], 1), ldv(ld[2], 2)];
                    let mut logical = vec![false; lc];
                    for i in 0..g.m {
                        for j in 0..g.n {
                            let e = at(layout, lds_used[2], i, j);
                            logical[e] = true;
                            let want = expected(&g, lds_used, (&a, 0), (&b, 0), (&c0, 0), (i, j));
                            assert_eq!(c[e], want, "{g:?} C({i}, {j})");
                        }
                    }
                    assert_eq!(hit, logical, "{g:?} wrote outside C's elements");
                    run += 1;
                }
            }
        }
    }
    assert!(run > 10_000, "{run}");
}

#[test]
fn accepted_gemms_near_the_int_limits_pass_cublas_numbers_unchanged_and_index_within_their_buffers()
{
    let mx = usize::MAX;
    let top = BIG - 1;
    let dims = [0, 1, 2, top, BIG, mx];
    let lds = [
        None,
        Some(0),
        Some(1),
        Some(2),
        Some(top),
        Some(BIG),
        Some(mx),
    ];
    for layout in LAYOUTS {
        for ops in OPS {
            for d in triples(&dims) {
                for ld in triples(&lds) {
                    let g = built(layout, d, ops, ld);
                    let r = g.resolve(mx, mx, mx);
                    assert_eq!(g.fits(mx, mx, mx), r.clone().ok(), "{g:?}");
                    // cuBLAS's numbers, from the caller's: row-major swaps m and n, A and B.
                    let [m, n, k] = d;
                    let fit = |v: usize| c_int::try_from(v).ok();
                    let (Some(m), Some(n), Some(k)) = (fit(m), fit(n), fit(k)) else {
                        assert!(
                            matches!(r, Err(ShapeError::TooLarge { .. })),
                            "{g:?}: {r:?}"
                        );
                        continue;
                    };
                    let ops_raw = (ops.0.raw(), ops.1.raw());
                    let (want, lds_cublas) = match layout {
                        Layout::ColMajor => (
                            (ops_raw.0, ops_raw.1, m, n, k, false),
                            [ld[0], ld[1], ld[2]],
                        ),
                        Layout::RowMajor => {
                            ((ops_raw.1, ops_raw.0, n, m, k, true), [ld[1], ld[0], ld[2]])
                        }
                    };
                    // What cuBLAS would accept, the given leading dimensions unchanged.
                    let probe = GemmCall {
                        transa: want.0,
                        transb: want.1,
                        m: want.2,
                        n: want.3,
                        k: want.4,
                        lda: 0,
                        ldb: 0,
                        ldc: 0,
                        swap: want.5,
                    };
                    let mins = cublas_min_lds(&probe);
                    let valid = lds_cublas.iter().zip(mins).all(|(ld, min)| {
                        ld.is_none_or(|ld| ld >= min as usize && fit(ld).is_some())
                    });
                    let call = match r {
                        Ok(call) => call,
                        Err(e) => {
                            assert!(!valid, "{g:?} refused: {e:?}");
                            continue;
                        }
                    };
                    assert!(valid, "{g:?} accepted as {call:?}");
                    assert_eq!(
                        (call.transa, call.transb, call.m, call.n, call.k, call.swap),
                        want,
                        "{g:?}"
                    );
                    let got = [call.lda, call.ldb, call.ldc];
                    for w in 0..3 {
                        // A given leading dimension is passed as given; a default is the
                        // least cuBLAS allows.
                        let expect = lds_cublas[w].map_or(mins[w], |ld| ld as c_int);
                        assert_eq!(got[w], expect, "{g:?}");
                    }
                    assert!(!cublas_gemm_rejects(&call));
                    // One element short of what cuBLAS touches is refused, by both checks.
                    let spans = caller_spans(&call);
                    for (w, &span) in spans.iter().enumerate() {
                        assert!(span <= mx as i128);
                        if span == 0 {
                            continue;
                        }
                        for len in [span as usize - 1, span as usize] {
                            let mut lens = [mx; 3];
                            lens[w] = len;
                            let [a, b, c] = lens;
                            let full = g.refusal(a, b, c);
                            assert_eq!(g.fits(a, b, c), full.clone().ok(), "{g:?} {lens:?}");
                            assert_eq!(g.resolve(a, b, c), full);
                            if len < span as usize {
                                assert!(
                                    matches!(full, Err(ShapeError::BufferTooShort { .. })),
                                    "{g:?} {lens:?}: {full:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_row_major_transposed_a_is_checked_against_its_stored_rows() {
    // Row-major, A transposed: A is stored k×m = 5×7 row by row, so lda >= 7 and A spans
    // lda * 4 + 7; cuBLAS gets it as its B, op T, ldb = lda.
    let g = Gemm::<f32>::row_major(7, 13, 5).transa(Op::T);
    assert_eq!(
        g.resolve(35, 65, 91).map(|c| (c.transb, c.ldb)),
        Ok((sys::OP_T, 7))
    );
    assert!(matches!(
        g.lda(6).check(1000, 65, 91),
        Err(ShapeError::LeadingDimension {
            what: "lda",
            min: 7,
            ..
        })
    ));
    assert!(g.lda(10).check(47, 65, 91).is_ok());
    assert!(g.lda(10).check(46, 65, 91).is_err());
    // B transposed, row-major: stored n×k = 13×5, ldb >= 5, spans ldb * 12 + 5.
    let g = Gemm::<f32>::row_major(7, 13, 5).transb(Op::T);
    assert_eq!(
        g.resolve(35, 65, 91).map(|c| (c.transa, c.lda)),
        Ok((sys::OP_T, 5))
    );
    assert!(g.ldb(4).check(35, 1000, 91).is_err());
    assert!(g.ldb(6).check(35, 77, 91).is_ok());
    assert!(g.ldb(6).check(35, 76, 91).is_err());
}

#[test]
fn a_zero_leading_dimension_is_refused_for_every_operand_layout_and_transpose() {
    for layout in LAYOUTS {
        for ops in OPS {
            for dims in [[0, 0, 0], [2, 3, 4], [0, 3, 4], [2, 0, 4], [2, 3, 0]] {
                for w in 0..3 {
                    let mut ld = [None; 3];
                    ld[w] = Some(0);
                    let g = built(layout, dims, ops, ld);
                    let mx = usize::MAX;
                    assert!(
                        matches!(
                            g.resolve(mx, mx, mx),
                            Err(ShapeError::LeadingDimension {
                                ld: 0,
                                min: 1..,
                                ..
                            })
                        ),
                        "{g:?}"
                    );
                    assert_eq!(g.fits(mx, mx, mx), None);
                }
            }
        }
    }
}

#[test]
fn leading_dimensions_and_dimensions_of_usize_max_are_refused_without_overflow() {
    let mx = usize::MAX;
    for layout in LAYOUTS {
        let g = built(layout, [mx, mx, mx], (Op::N, Op::N), [None; 3]);
        assert_eq!(
            g.check(mx, mx, mx),
            Err(ShapeError::TooLarge {
                what: "m",
                value: mx
            })
        );
        for w in 0..3 {
            let mut ld = [None; 3];
            ld[w] = Some(mx);
            let g = built(layout, [3, 3, 3], (Op::T, Op::T), ld);
            assert!(matches!(
                g.check(mx, mx, mx),
                Err(ShapeError::TooLarge { value, .. }) if value == mx
            ));
            assert_eq!(g.fits(mx, mx, mx), None);
        }
    }
}

#[test]
fn the_largest_int_shapes_need_their_exact_extent_computed_without_overflow() {
    // m = n = k = ld = 2^31 - 1: each matrix spans (2^31 - 1) * (2^31 - 2) + 2^31 - 1
    // = (2^31 - 1)^2 elements, well within a u64 and a 64-bit usize.
    let max = i32::MAX as usize;
    let span = max * max;
    for layout in LAYOUTS {
        for ops in OPS {
            let g = built(layout, [max; 3], ops, [Some(max); 3]);
            assert!(g.resolve(span, span, span).is_ok(), "{g:?}");
            for w in 0..3 {
                let mut lens = [span; 3];
                lens[w] -= 1;
                let [a, b, c] = lens;
                assert!(
                    matches!(g.resolve(a, b, c), Err(ShapeError::BufferTooShort { needed, .. }) if needed == span as u64),
                    "{g:?} {lens:?}"
                );
                assert_eq!(g.fits(a, b, c), None);
            }
        }
    }
}

#[test]
fn with_k_zero_a_and_b_need_nothing_but_all_of_c_is_checked() {
    // cuBLAS still scales C (beta C) when k = 0.
    for layout in LAYOUTS {
        for ops in OPS {
            let g = built(layout, [4, 5, 0], ops, [None; 3]);
            assert!(g.check(1, 1, 20).is_ok(), "{g:?}");
            assert!(
                matches!(
                    g.check(1, 1, 19),
                    Err(ShapeError::BufferTooShort { buffer: "c", .. })
                ),
                "{g:?}"
            );
        }
    }
}

#[test]
fn strided_batches_index_within_their_buffers_write_disjoint_outputs_and_compute_each_product() {
    let mx = usize::MAX;
    let lds = [None, Some(3)];
    let mut run = 0usize;
    for layout in LAYOUTS {
        for ops in OPS {
            for dims in triples(&[0usize, 1, 2]) {
                for ld in triples(&lds) {
                    let g = built(layout, dims, ops, ld);
                    for batch in 0..4 {
                        for sa in [None, Some(0), Some(5)] {
                            for sb in [None, Some(0), Some(5)] {
                                for sc in [None, Some(0), Some(3), Some(9)] {
                                    let mut s = g.strided_batched(batch);
                                    if let Some(v) = sa {
                                        s = s.stride_a(v);
                                    }
                                    if let Some(v) = sb {
                                        s = s.stride_b(v);
                                    }
                                    if let Some(v) = sc {
                                        s = s.stride_c(v);
                                    }
                                    if s.resolve(mx, mx, mx).is_err() {
                                        continue;
                                    }
                                    strided_batch_runs_within_its_buffers(&s, ld);
                                    run += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(run > 10_000, "{run}");
}

/// Runs the model of cuBLAS on every GEMM of the batch, on buffers of the least lengths
/// `resolve` accepts: each index within its buffer, no C element written by two GEMMs, and
/// each C the caller's product.
fn strided_batch_runs_within_its_buffers(s: &StridedBatched<f64>, ld: [Option<usize>; 3]) {
    let mx = usize::MAX;
    let la = least_len(200, |l| s.resolve(l, mx, mx).is_ok());
    let lb = least_len(200, |l| s.resolve(mx, l, mx).is_ok());
    let lc = least_len(200, |l| s.resolve(mx, mx, l).is_ok());
    let call = s.resolve(la, lb, lc).expect("each least length together");
    let g = &s.gemm;
    let (a, b, c0) = (filled(la, 1.0), filled(lb, 100.0), filled(lc, 1000.0));
    let mut c = c0.clone();
    let mut owner: Vec<Option<usize>> = vec![None; lc];
    let [s0, s1, s2] = call.strides.map(|v| usize::try_from(v).unwrap());
    let (first, second) = if call.gemm.swap { (&b, &a) } else { (&a, &b) };
    for i in 0..call.batch as usize {
        let mut written = |at: usize| {
            assert!(
                owner[at].is_none_or(|o| o == i),
                "{s:?}: C element {at} written by GEMMs {:?} and {i}",
                owner[at]
            );
            owner[at] = Some(i);
        };
        cublas_gemm(
            &call.gemm,
            g.scalars(),
            (first, i * s0),
            (second, i * s1),
            (&mut c, i * s2),
            &mut written,
        );
    }
    // The caller's strides and leading dimensions, from the call.
    let (sa, sb) = if call.gemm.swap { (s1, s0) } else { (s0, s1) };
    let (la_, lb_) = if call.gemm.swap {
        (call.gemm.ldb, call.gemm.lda)
    } else {
        (call.gemm.lda, call.gemm.ldb)
    };
    let lds_used = [
        ld[0].unwrap_or(la_ as usize),
        ld[1].unwrap_or(lb_ as usize),
        ld[2].unwrap_or(call.gemm.ldc as usize),
    ];
    for bi in 0..call.batch as usize {
        for i in 0..g.m {
            for j in 0..g.n {
                let e = bi * s2 + at(g.layout, lds_used[2], i, j);
                let want = expected(
                    g,
                    lds_used,
                    (&a, bi * sa),
                    (&b, bi * sb),
                    (&c0, bi * s2),
                    (i, j),
                );
                assert_eq!(c[e], want, "{s:?} GEMM {bi} C({i}, {j})");
            }
        }
    }
}

#[test]
fn strided_batches_near_the_limits_refuse_every_length_short_of_the_last_matrix() {
    let mx = usize::MAX;
    let top = BIG - 1;
    let long = i64::MAX as usize;
    let strides = [
        None,
        Some(0),
        Some(1),
        Some(top),
        Some(long),
        Some(long + 1),
        Some(mx),
    ];
    for layout in LAYOUTS {
        for ops in OPS {
            for dims in [
                [0, 1, 1],
                [1, 1, 0],
                [2, 3, 4],
                [top, 1, 1],
                [top, top, top],
            ] {
                let g = built(layout, dims, ops, [None; 3]);
                for batch in [0, 1, 2, 3, top, BIG, mx] {
                    for sa in strides {
                        for sc in strides {
                            let mut s = g.strided_batched(batch).stride_b(7);
                            if let Some(v) = sa {
                                s = s.stride_a(v);
                            }
                            if let Some(v) = sc {
                                s = s.stride_c(v);
                            }
                            let Ok(call) = s.resolve(mx, mx, mx) else {
                                continue;
                            };
                            assert_eq!(call.batch as usize, batch);
                            let spans = caller_spans(&call.gemm);
                            let st = if call.gemm.swap {
                                [call.strides[1], call.strides[0], call.strides[2]]
                            } else {
                                call.strides
                            };
                            // A given stride is passed as given.
                            assert_eq!(st[0] as usize, sa.unwrap_or(st[0] as usize));
                            assert_eq!(st[1], 7);
                            assert_eq!(st[2] as usize, sc.unwrap_or(st[2] as usize));
                            // The C matrices overlap nowhere.
                            if batch > 1 && spans[2] > 0 {
                                assert!(st[2] as i128 >= spans[2], "{s:?}");
                            }
                            for w in 0..3 {
                                let needed = if batch == 0 || spans[w] == 0 {
                                    0
                                } else {
                                    st[w] as i128 * (batch as i128 - 1) + spans[w]
                                };
                                assert!(needed <= mx as i128, "{s:?}: {needed}");
                                if needed == 0 {
                                    continue;
                                }
                                let mut lens = [mx; 3];
                                lens[w] = needed as usize - 1;
                                let [a, b, c] = lens;
                                assert!(
                                    matches!(
                                        s.resolve(a, b, c),
                                        Err(ShapeError::BufferTooShort { .. })
                                    ),
                                    "{s:?} {lens:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_batch_whose_last_matrix_would_end_past_u64_is_refused() {
    // 3 GEMMs of 2x2x2 with A 2^63 - 1 apart: the last A starts at 2^64 - 2 and ends
    // past 2^64 (stride * (batch - 1) fits a u64, adding the extent does not).
    let long = i64::MAX as usize;
    let s = Gemm::<f32>::new(2, 2, 2).strided_batched(3).stride_a(long);
    assert_eq!(
        s.check(usize::MAX, usize::MAX, usize::MAX),
        Err(ShapeError::TooLarge {
            what: "stride_a",
            value: long
        })
    );
    // Two of them end at 2^63 + 3: within a u64, longer than any buffer one short of it.
    let s = Gemm::<f32>::new(2, 2, 2).strided_batched(2).stride_a(long);
    assert!(s.check(long + 4, 8, 8).is_ok());
    assert!(s.check(long + 3, 8, 8).is_err());
}

#[test]
fn strided_outputs_one_element_short_of_apart_are_refused_even_with_gaps_in_c() {
    // C 2x3 with ldc = 5 spans 5 * 2 + 2 = 12; stride_c = 11 overlaps the last column.
    let g = Gemm::<f32>::new(2, 3, 1).ldc(5);
    assert_eq!(
        g.strided_batched(2).stride_c(11).check(100, 100, 100),
        Err(ShapeError::OutputsOverlap {
            stride: 11,
            extent: 12
        })
    );
    assert!(
        g.strided_batched(2)
            .stride_c(12)
            .check(100, 100, 24)
            .is_ok()
    );
    assert!(
        g.strided_batched(2)
            .stride_c(12)
            .check(100, 100, 23)
            .is_err()
    );
    // Row-major C 2x3 with ldc = 5 spans 5 + 3 = 8.
    let g = Gemm::<f32>::row_major(2, 3, 1).ldc(5);
    assert!(
        g.strided_batched(2)
            .stride_c(7)
            .check(100, 100, 100)
            .is_err()
    );
    assert!(g.strided_batched(2).stride_c(8).check(100, 100, 16).is_ok());
}

/// cuBLAS's GEMV on slices: `y = alpha op(A) x + beta y`, A m×n column-major.
fn cublas_gemv(c: &GemvCall, (alpha, beta): (f64, f64), a: &[f64], x: &[f64], y: &mut [f64]) {
    assert!(
        c.m >= 0 && c.n >= 0 && c.lda >= c.m.max(1),
        "cuBLAS refuses {c:?}"
    );
    let (m, n, lda) = (c.m as usize, c.n as usize, c.lda as usize);
    let (rows, inner) = if c.trans == sys::OP_N { (m, n) } else { (n, m) };
    if m == 0 || n == 0 {
        // Assume the worst: y scaled even so.
        for v in y.iter_mut().take(rows) {
            *v *= beta;
        }
        return;
    }
    for r in 0..rows {
        let mut s = 0.0;
        for p in 0..inner {
            let e = if c.trans == sys::OP_N {
                a[r + p * lda]
            } else {
                a[p + r * lda]
            };
            s += e * x[p];
        }
        y[r] = alpha * s + if beta == 0.0 { 0.0 } else { beta * y[r] };
    }
}

#[test]
fn every_accepted_gemv_indexes_within_its_buffers_and_computes_the_callers_product() {
    let mx = usize::MAX;
    let mut run = 0;
    for layout in LAYOUTS {
        for trans in [Op::N, Op::T] {
            for (m, n) in (0..4).flat_map(|m| (0..4).map(move |n| (m, n))) {
                for lda in [None, Some(0), Some(1), Some(2), Some(3), Some(4), Some(5)] {
                    let mut g = match layout {
                        Layout::ColMajor => Gemv::<f64>::new(m, n),
                        Layout::RowMajor => Gemv::<f64>::row_major(m, n),
                    }
                    .trans(trans)
                    .alpha(2.0)
                    .beta(3.0);
                    if let Some(ld) = lda {
                        g = g.lda(ld);
                    }
                    if g.resolve(mx, mx, mx).is_err() {
                        continue;
                    }
                    let la = least_len(64, |l| g.resolve(l, mx, mx).is_ok());
                    let lx = least_len(64, |l| g.resolve(mx, l, mx).is_ok());
                    let ly = least_len(64, |l| g.resolve(mx, mx, l).is_ok());
                    let call = g.resolve(la, lx, ly).unwrap();
                    let (a, x, y0) = (filled(la, 1.0), filled(lx, 10.0), filled(ly, 100.0));
                    let mut y = y0.clone();
                    cublas_gemv(&call, g.scalars(), &a, &x, &mut y);
                    let ld = lda.unwrap_or(call.lda as usize);
                    let (rows, inner) = match trans {
                        Op::N => (m, n),
                        Op::T => (n, m),
                    };
                    assert_eq!(ly, rows, "{g:?}");
                    for r in 0..rows {
                        let mut s = 0.0;
                        for p in 0..inner {
                            let e = match trans {
                                Op::N => a[at(layout, ld, r, p)],
                                Op::T => a[at(layout, ld, p, r)],
                            };
                            s += e * x[p];
                        }
                        assert_eq!(y[r], 2.0 * s + 3.0 * y0[r], "{g:?} y[{r}]");
                    }
                    run += 1;
                }
            }
        }
    }
    assert!(run > 100);
}

#[test]
fn gemv_near_the_int_limits_refuses_lengths_short_of_what_cublas_touches() {
    let mx = usize::MAX;
    let top = BIG - 1;
    for layout in LAYOUTS {
        for trans in [Op::N, Op::T] {
            for (m, n) in [(top, top), (top, 1), (1, top), (0, top), (BIG, 1), (1, mx)] {
                for lda in [None, Some(0), Some(top), Some(BIG), Some(mx)] {
                    let mut g = match layout {
                        Layout::ColMajor => Gemv::<f32>::new(m, n),
                        Layout::RowMajor => Gemv::<f32>::row_major(m, n),
                    }
                    .trans(trans);
                    if let Some(ld) = lda {
                        g = g.lda(ld);
                    }
                    let Ok(c) = g.resolve(mx, mx, mx) else {
                        assert!(m > top || n > top || lda.is_some_and(|l| l == 0 || l > top));
                        continue;
                    };
                    assert!(c.lda >= c.m.max(1));
                    assert_eq!(
                        (c.m as usize, c.n as usize),
                        match layout {
                            Layout::ColMajor => (m, n),
                            Layout::RowMajor => (n, m),
                        }
                    );
                    let (cm, cn, ld) = (c.m as i128, c.n as i128, c.lda as i128);
                    let a_span = if cm == 0 || cn == 0 {
                        0
                    } else {
                        (cn - 1) * ld + cm
                    };
                    let (xs, ys) = if c.trans == sys::OP_N {
                        (cn, cm)
                    } else {
                        (cm, cn)
                    };
                    for (w, span) in [a_span, xs, ys].into_iter().enumerate() {
                        if span == 0 {
                            continue;
                        }
                        let mut lens = [mx; 3];
                        lens[w] = span as usize - 1;
                        let [a, x, y] = lens;
                        assert!(g.resolve(a, x, y).is_err(), "{g:?} {lens:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn a_stride_over_an_empty_matrix_needs_no_elements_but_must_fit_a_long_long() {
    // k = 0: A and B are empty (cuBLAS only scales C), so their strides address nothing.
    let long = i64::MAX as usize;
    let s = Gemm::<f32>::new(2, 2, 0).strided_batched(3).stride_a(long);
    assert!(s.check(1, 1, 12).is_ok());
    assert!(matches!(
        s.check(1, 1, 11),
        Err(ShapeError::BufferTooShort { buffer: "c", .. })
    ));
    assert!(matches!(
        Gemm::<f32>::new(2, 2, 0)
            .strided_batched(3)
            .stride_a(long + 1)
            .check(1, 1, 12),
        Err(ShapeError::TooLarge {
            what: "stride_a",
            ..
        })
    ));
}
