//! What a GEMM or GEMV computes, and the checks of its shapes against the buffers' lengths.
//! Pure functions: no GPU, no library.

use std::ffi::c_int;

use crate::element::Element;
use crate::error::ShapeError;
use crate::sys;

/// How an operand enters the product: as stored, or transposed (`CUBLAS_OP_N`, `CUBLAS_OP_T`;
/// for real types the conjugate transpose is the transpose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Op {
    /// As stored.
    #[default]
    N,
    /// Transposed.
    T,
}

impl Op {
    fn raw(self) -> c_int {
        match self {
            Op::N => sys::OP_N,
            Op::T => sys::OP_T,
        }
    }

    fn flip(self) -> Op {
        match self {
            Op::N => Op::T,
            Op::T => Op::N,
        }
    }
}

/// How a matrix lies in its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Column by column (cuBLAS's, Fortran's): element `(i, j)` at `i + j * ld`, `ld >= rows`.
    #[default]
    ColMajor,
    /// Row by row (C's, `ndarray`'s default): element `(i, j)` at `i * ld + j`, `ld >= cols`.
    /// `um-cublas` computes it through the identity `C^T = B^T A^T`: a row-major matrix is the
    /// column-major storage of its transpose, so the row-major product `C = A B` is the
    /// column-major product `C^T = B^T A^T` of the same buffers, with the operands swapped and
    /// no copy.
    RowMajor,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::ColMajor => "column-major",
            Layout::RowMajor => "row-major",
        }
    }
}

/// A GEMM, `C = alpha op(A) op(B) + beta C`, with `op(A)` m×k, `op(B)` k×n and `C` m×n, in
/// one [`Layout`] for all three. Built with [`Gemm::new`] (column-major) or
/// [`Gemm::row_major`]; defaults: no transposes, `alpha = 1`, `beta = 0`, and each leading
/// dimension the tightest its matrix allows (`max(1, rows)` column-major, `max(1, cols)`
/// row-major, of the matrix as stored).
///
/// [`Blas::gemm`](crate::Blas::gemm) checks it against the buffers' lengths before cuBLAS runs
/// ([`check`](Gemm::check) is the same check, without a GPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm<T> {
    layout: Layout,
    m: usize,
    n: usize,
    k: usize,
    transa: Op,
    transb: Op,
    alpha: T,
    beta: T,
    lda: Option<usize>,
    ldb: Option<usize>,
    ldc: Option<usize>,
}

/// A GEMV, `y = alpha op(A) x + beta y`, with `A` m×n as stored (so `x` has n elements and `y`
/// m for [`Op::N`], the other way round for [`Op::T`]), unit strides. Built with
/// [`Gemv::new`] or [`Gemv::row_major`]; defaults as for [`Gemm`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemv<T> {
    layout: Layout,
    m: usize,
    n: usize,
    trans: Op,
    alpha: T,
    beta: T,
    lda: Option<usize>,
}

/// A GEMM as cuBLAS takes it: column-major, checked, every number an `int`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmCall {
    pub(crate) transa: c_int,
    pub(crate) transb: c_int,
    pub(crate) m: c_int,
    pub(crate) n: c_int,
    pub(crate) k: c_int,
    pub(crate) lda: c_int,
    pub(crate) ldb: c_int,
    pub(crate) ldc: c_int,
    /// Row-major: cuBLAS's `A` is the caller's `b`, and its `B` the caller's `a`.
    pub(crate) swap: bool,
}

/// A GEMV as cuBLAS takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemvCall {
    pub(crate) trans: c_int,
    pub(crate) m: c_int,
    pub(crate) n: c_int,
    pub(crate) lda: c_int,
}

fn int(what: &'static str, value: usize) -> Result<c_int, ShapeError> {
    c_int::try_from(value).map_err(|_| ShapeError::TooLarge { what, value })
}

/// Checks one stored matrix against its buffer; its leading dimension as an `int`.
#[allow(clippy::too_many_arguments)]
fn matrix(
    matrix: &'static str,
    what: &'static str,
    layout: Layout,
    rows: usize,
    cols: usize,
    ld: Option<usize>,
    len: usize,
) -> Result<c_int, ShapeError> {
    // The extent along which elements are contiguous, and the other.
    let (inner, outer) = match layout {
        Layout::ColMajor => (rows, cols),
        Layout::RowMajor => (cols, rows),
    };
    let min = inner.max(1);
    let ld = ld.unwrap_or(min);
    let ld_int = int(what, ld)?;
    if ld < min {
        return Err(ShapeError::LeadingDimension {
            what,
            matrix,
            ld,
            rows,
            cols,
            layout: layout.name(),
            min,
        });
    }
    // Every number fits an int (checked), so the product fits a u64.
    let needed = if inner == 0 || outer == 0 {
        0
    } else {
        ld as u64 * (outer as u64 - 1) + inner as u64
    };
    if (len as u64) < needed {
        return Err(ShapeError::BufferTooShort {
            buffer: matrix,
            len,
            needed,
            what: format!(
                "a {rows}x{cols} {} matrix with {what} = {ld}",
                layout.name()
            ),
        });
    }
    Ok(ld_int)
}

fn vector(buffer: &'static str, needed: usize, len: usize) -> Result<(), ShapeError> {
    if len < needed {
        return Err(ShapeError::BufferTooShort {
            buffer,
            len,
            needed: needed as u64,
            what: format!("a vector of {needed} elements"),
        });
    }
    Ok(())
}

impl<T: Element> Gemm<T> {
    /// `C (m×n) = op(A) (m×k) · op(B) (k×n)`, column-major (cuBLAS's own convention).
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Gemm {
            layout: Layout::ColMajor,
            m,
            n,
            k,
            transa: Op::N,
            transb: Op::N,
            alpha: T::ONE,
            beta: T::ZERO,
            lda: None,
            ldb: None,
            ldc: None,
        }
    }

    /// The same product with every matrix row-major: `C` is m rows of n (`ldc >= n`), `A` m
    /// rows of k, `B` k rows of n (each transposed as [`transa`](Gemm::transa) and
    /// [`transb`](Gemm::transb) say). Computed as `C^T = B^T A^T` in column-major terms, on
    /// the same buffers (see [`Layout::RowMajor`]).
    pub fn row_major(m: usize, n: usize, k: usize) -> Self {
        Gemm {
            layout: Layout::RowMajor,
            ..Gemm::new(m, n, k)
        }
    }

    /// `op(A)`: `A` as stored ([`Op::N`], A is m×k) or transposed ([`Op::T`], A is k×m).
    pub fn transa(mut self, op: Op) -> Self {
        self.transa = op;
        self
    }

    /// `op(B)`: `B` as stored ([`Op::N`], B is k×n) or transposed ([`Op::T`], B is n×k).
    pub fn transb(mut self, op: Op) -> Self {
        self.transb = op;
        self
    }

    /// `alpha` (default 1), read on the host at the call.
    pub fn alpha(mut self, alpha: T) -> Self {
        self.alpha = alpha;
        self
    }

    /// `beta` (default 0: `C` is not read, only written), read on the host at the call.
    pub fn beta(mut self, beta: T) -> Self {
        self.beta = beta;
        self
    }

    /// The leading dimension of `A`: the distance between the starts of two columns
    /// (column-major) or rows (row-major), in elements.
    pub fn lda(mut self, lda: usize) -> Self {
        self.lda = Some(lda);
        self
    }

    /// The leading dimension of `B`.
    pub fn ldb(mut self, ldb: usize) -> Self {
        self.ldb = Some(ldb);
        self
    }

    /// The leading dimension of `C`.
    pub fn ldc(mut self, ldc: usize) -> Self {
        self.ldc = Some(ldc);
        self
    }

    /// `alpha` and `beta`.
    pub(crate) fn scalars(&self) -> (T, T) {
        (self.alpha, self.beta)
    }

    /// Checks the shapes against buffers of these lengths, as [`Blas::gemm`](crate::Blas::gemm)
    /// does before cuBLAS runs: every number fits an `int`, every leading dimension is at
    /// least its matrix's column (row-major: row) and not zero, and every buffer holds
    /// `ld * (outer - 1) + inner` elements (none for an empty matrix).
    pub fn check(&self, a_len: usize, b_len: usize, c_len: usize) -> Result<(), ShapeError> {
        self.resolve(a_len, b_len, c_len).map(|_| ())
    }

    pub(crate) fn resolve(
        &self,
        a_len: usize,
        b_len: usize,
        c_len: usize,
    ) -> Result<GemmCall, ShapeError> {
        let (m, n, k) = (int("m", self.m)?, int("n", self.n)?, int("k", self.k)?);
        let (ra, ca) = match self.transa {
            Op::N => (self.m, self.k),
            Op::T => (self.k, self.m),
        };
        let (rb, cb) = match self.transb {
            Op::N => (self.k, self.n),
            Op::T => (self.n, self.k),
        };
        let l = self.layout;
        let lda = matrix("a", "lda", l, ra, ca, self.lda, a_len)?;
        let ldb = matrix("b", "ldb", l, rb, cb, self.ldb, b_len)?;
        let ldc = matrix("c", "ldc", l, self.m, self.n, self.ldc, c_len)?;
        Ok(match l {
            Layout::ColMajor => GemmCall {
                transa: self.transa.raw(),
                transb: self.transb.raw(),
                m,
                n,
                k,
                lda,
                ldb,
                ldc,
                swap: false,
            },
            // C^T (n×m) = op(B)^T (n×k) op(A)^T (k×m): each row-major buffer is the
            // column-major storage of its transpose, so the flags stay and the operands swap.
            Layout::RowMajor => GemmCall {
                transa: self.transb.raw(),
                transb: self.transa.raw(),
                m: n,
                n: m,
                k,
                lda: ldb,
                ldb: lda,
                ldc,
                swap: true,
            },
        })
    }
}

impl<T: Element> Gemv<T> {
    /// `y = op(A) x`, `A` m×n column-major.
    pub fn new(m: usize, n: usize) -> Self {
        Gemv {
            layout: Layout::ColMajor,
            m,
            n,
            trans: Op::N,
            alpha: T::ONE,
            beta: T::ZERO,
            lda: None,
        }
    }

    /// The same with `A` m rows of n, row-major (`lda >= n`): computed as the column-major GEMV
    /// of `A^T` with the transpose flag flipped.
    pub fn row_major(m: usize, n: usize) -> Self {
        Gemv {
            layout: Layout::RowMajor,
            ..Gemv::new(m, n)
        }
    }

    /// `op(A)`: [`Op::N`] (x has n elements, y m) or [`Op::T`] (x has m, y n).
    pub fn trans(mut self, op: Op) -> Self {
        self.trans = op;
        self
    }

    /// `alpha` (default 1).
    pub fn alpha(mut self, alpha: T) -> Self {
        self.alpha = alpha;
        self
    }

    /// `beta` (default 0: `y` is not read).
    pub fn beta(mut self, beta: T) -> Self {
        self.beta = beta;
        self
    }

    /// The leading dimension of `A`.
    pub fn lda(mut self, lda: usize) -> Self {
        self.lda = Some(lda);
        self
    }

    pub(crate) fn scalars(&self) -> (T, T) {
        (self.alpha, self.beta)
    }

    /// Checks the shapes against buffers of these lengths, as
    /// [`Blas::gemv`](crate::Blas::gemv) does before cuBLAS runs.
    pub fn check(&self, a_len: usize, x_len: usize, y_len: usize) -> Result<(), ShapeError> {
        self.resolve(a_len, x_len, y_len).map(|_| ())
    }

    pub(crate) fn resolve(
        &self,
        a_len: usize,
        x_len: usize,
        y_len: usize,
    ) -> Result<GemvCall, ShapeError> {
        let (m, n) = (int("m", self.m)?, int("n", self.n)?);
        let lda = matrix("a", "lda", self.layout, self.m, self.n, self.lda, a_len)?;
        let (x_needed, y_needed) = match self.trans {
            Op::N => (self.n, self.m),
            Op::T => (self.m, self.n),
        };
        vector("x", x_needed, x_len)?;
        vector("y", y_needed, y_len)?;
        Ok(match self.layout {
            Layout::ColMajor => GemvCall {
                trans: self.trans.raw(),
                m,
                n,
                lda,
            },
            // A row-major m×n is the column-major n×m storage of A^T: op(A) = op'(A^T) with
            // the flag flipped.
            Layout::RowMajor => GemvCall {
                trans: self.trans.flip().raw(),
                m: n,
                n: m,
                lda,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: usize = i32::MAX as usize + 1;

    #[test]
    fn tight_shapes_pass_and_say_what_cublas_gets() {
        let call = Gemm::<f32>::new(7, 13, 5).resolve(35, 65, 91);
        assert_eq!(
            call,
            Ok(GemmCall {
                transa: sys::OP_N,
                transb: sys::OP_N,
                m: 7,
                n: 13,
                k: 5,
                lda: 7,
                ldb: 5,
                ldc: 7,
                swap: false
            })
        );
        assert!(Gemm::<f64>::new(1, 1, 1).check(1, 1, 1).is_ok());
    }

    #[test]
    fn transposes_change_which_extent_is_the_column() {
        // A is k×m = 5×7 when transposed: lda defaults to 5, and A holds 35.
        let g = Gemm::<f32>::new(7, 13, 5).transa(Op::T).transb(Op::T);
        let call = g.resolve(35, 65, 91).map(|c| (c.lda, c.ldb));
        assert_eq!(call, Ok((5, 13)));
        // lda = 4 < 5 rows of the stored A.
        assert!(matches!(
            g.lda(4).check(100, 65, 91),
            Err(ShapeError::LeadingDimension {
                what: "lda",
                min: 5,
                ..
            })
        ));
    }

    #[test]
    fn a_buffer_shorter_than_ld_times_cols_minus_one_plus_rows_is_refused() {
        // A 7×5 with lda = 9 spans 9 * 4 + 7 = 43 elements.
        let g = Gemm::<f32>::new(7, 13, 5).lda(9);
        assert!(g.check(43, 65, 91).is_ok());
        assert_eq!(
            g.check(42, 65, 91),
            Err(ShapeError::BufferTooShort {
                buffer: "a",
                len: 42,
                needed: 43,
                what: "a 7x5 column-major matrix with lda = 9".into()
            })
        );
        // C too short by one.
        assert!(matches!(
            Gemm::<f64>::new(7, 13, 5).check(35, 65, 90),
            Err(ShapeError::BufferTooShort {
                buffer: "c",
                needed: 91,
                ..
            })
        ));
        // B: ldb = 6 > k, 6 * 12 + 5 = 77.
        assert!(matches!(
            Gemm::<f64>::new(7, 13, 5).ldb(6).check(35, 76, 91),
            Err(ShapeError::BufferTooShort {
                buffer: "b",
                needed: 77,
                ..
            })
        ));
    }

    #[test]
    fn numbers_beyond_an_int_are_refused() {
        for (g, what) in [
            (Gemm::<f32>::new(BIG, 1, 1), "m"),
            (Gemm::<f32>::new(1, BIG, 1), "n"),
            (Gemm::<f32>::new(1, 1, BIG), "k"),
            (Gemm::<f32>::new(1, 1, 1).lda(BIG), "lda"),
            (Gemm::<f32>::new(1, 1, 1).ldb(BIG), "ldb"),
            (Gemm::<f32>::new(1, 1, 1).ldc(BIG), "ldc"),
        ] {
            assert_eq!(
                g.check(usize::MAX, usize::MAX, usize::MAX),
                Err(ShapeError::TooLarge { what, value: BIG }),
                "{what}"
            );
        }
        assert!(matches!(
            Gemv::<f32>::new(BIG, 1).check(usize::MAX, usize::MAX, usize::MAX),
            Err(ShapeError::TooLarge { what: "m", .. })
        ));
        // The largest int passes the range check; the extent is then computed without
        // overflow (2^31 - 1 columns of ld 2^31 - 1).
        let max = i32::MAX as usize;
        assert!(matches!(
            Gemm::<f32>::new(max, max, max).check(1, 1, 1),
            Err(ShapeError::BufferTooShort { buffer: "a", .. })
        ));
    }

    #[test]
    fn a_zero_leading_dimension_is_refused_even_for_empty_matrices() {
        assert!(matches!(
            Gemm::<f32>::new(0, 3, 2).lda(0).check(1, 6, 1),
            Err(ShapeError::LeadingDimension { min: 1, .. })
        ));
        // Empty matrices need no elements; their buffers (never empty in um) are not read.
        assert!(Gemm::<f32>::new(0, 3, 2).check(1, 6, 1).is_ok());
        let call = Gemm::<f32>::new(3, 4, 0).resolve(1, 1, 12);
        assert_eq!(call.map(|c| (c.k, c.lda, c.ldb)), Ok((0, 3, 1)));
    }

    #[test]
    fn row_major_swaps_the_operands_and_checks_rows() {
        // Row-major C 7×13 = A 7×5 · B 5×13: cuBLAS computes C^T 13×7 = B^T A^T.
        let g = Gemm::<f32>::row_major(7, 13, 5);
        let call = g.resolve(35, 65, 91);
        assert_eq!(
            call,
            Ok(GemmCall {
                transa: sys::OP_N,
                transb: sys::OP_N,
                m: 13,
                n: 7,
                k: 5,
                lda: 13,
                ldb: 5,
                ldc: 13,
                swap: true
            })
        );
        // The transposes follow their operands.
        let call = g.transa(Op::T).resolve(35, 65, 91);
        assert_eq!(
            call.map(|c| (c.transa, c.transb, c.lda, c.ldb)),
            Ok((sys::OP_N, sys::OP_T, 13, 7))
        );
        // Row-major lda is at least the row length: A 7×5 needs lda >= 5.
        assert!(matches!(
            g.lda(4).check(100, 65, 91),
            Err(ShapeError::LeadingDimension {
                what: "lda",
                layout: "row-major",
                min: 5,
                ..
            })
        ));
        // A 7×5 row-major with lda = 8 spans 8 * 6 + 5 = 53.
        assert!(g.lda(8).check(53, 65, 91).is_ok());
        assert!(matches!(
            g.lda(8).check(52, 65, 91),
            Err(ShapeError::BufferTooShort { needed: 53, .. })
        ));
    }

    #[test]
    fn gemv_checks_the_matrix_and_both_vectors() {
        let g = Gemv::<f64>::new(7, 5);
        assert_eq!(
            g.resolve(35, 5, 7),
            Ok(GemvCall {
                trans: sys::OP_N,
                m: 7,
                n: 5,
                lda: 7
            })
        );
        assert!(matches!(
            g.check(35, 4, 7),
            Err(ShapeError::BufferTooShort {
                buffer: "x",
                needed: 5,
                ..
            })
        ));
        assert!(matches!(
            g.check(35, 5, 6),
            Err(ShapeError::BufferTooShort {
                buffer: "y",
                needed: 7,
                ..
            })
        ));
        // Transposed: x has m, y has n.
        assert!(g.trans(Op::T).check(35, 7, 5).is_ok());
        assert!(g.trans(Op::T).check(35, 5, 7).is_err());
        // lda > m: 9 * 4 + 7 = 43.
        assert!(g.lda(9).check(43, 5, 7).is_ok());
        assert!(g.lda(9).check(42, 5, 7).is_err());
        assert!(g.lda(6).check(100, 5, 7).is_err());
    }

    #[test]
    fn row_major_gemv_flips_the_transpose() {
        let g = Gemv::<f32>::row_major(7, 5);
        assert_eq!(
            g.resolve(35, 5, 7),
            Ok(GemvCall {
                trans: sys::OP_T,
                m: 5,
                n: 7,
                lda: 5
            })
        );
        assert_eq!(
            g.trans(Op::T).resolve(35, 7, 5).map(|c| c.trans),
            Ok(sys::OP_N)
        );
        assert!(g.lda(4).check(100, 5, 7).is_err());
    }

    #[test]
    fn longer_buffers_are_fine() {
        assert!(Gemm::<f32>::new(2, 2, 2).check(100, 100, 100).is_ok());
        assert!(Gemv::<f32>::new(2, 2).check(100, 100, 100).is_ok());
    }
}
