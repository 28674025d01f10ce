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

/// A stored matrix's arithmetic, shared by both checks ([`stored`] and [`fits`]).
struct Extent {
    /// The extent along which elements are contiguous (rows column-major, cols row-major).
    inner: usize,
    /// The other extent.
    outer: usize,
    /// The least leading dimension: `max(1, inner)`.
    min: usize,
    /// The leading dimension given, or `min`.
    ld: usize,
}

impl Extent {
    #[inline(always)]
    fn of(layout: Layout, rows: usize, cols: usize, ld: Option<usize>) -> Self {
        let (inner, outer) = match layout {
            Layout::ColMajor => (rows, cols),
            Layout::RowMajor => (cols, rows),
        };
        let min = inner.max(1);
        Extent {
            inner,
            outer,
            min,
            ld: ld.unwrap_or(min),
        }
    }

    /// How many elements the matrix spans: `ld * (outer - 1) + inner`, none for an empty
    /// matrix. Only once `ld`, `inner` and `outer` are known to fit an `int` (the callers
    /// check), so that the product fits a u64.
    #[inline(always)]
    fn span(&self) -> u64 {
        if self.inner == 0 || self.outer == 0 {
            0
        } else {
            self.ld as u64 * (self.outer as u64 - 1) + self.inner as u64
        }
    }
}

/// One stored matrix: its leading dimension as an `int`, and how many elements it spans
/// (`ld * (outer - 1) + inner`; none for an empty matrix).
fn stored(
    matrix: &'static str,
    what: &'static str,
    layout: Layout,
    rows: usize,
    cols: usize,
    ld: Option<usize>,
) -> Result<(c_int, usize, u64), ShapeError> {
    let e = Extent::of(layout, rows, cols, ld);
    let ld_int = int(what, e.ld)?;
    if e.ld < e.min {
        return Err(ShapeError::LeadingDimension {
            what,
            matrix,
            ld: e.ld,
            rows,
            cols,
            layout: layout.name(),
            min: e.min,
        });
    }
    Ok((ld_int, e.ld, e.span()))
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
    let (ld_int, ld, needed) = stored(matrix, what, layout, rows, cols, ld)?;
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

/// [`matrix`]'s checks where they pass, with no error to build: the leading dimension as an
/// `int`, or `None` where `matrix` refuses (`rows` and `cols` fit an `int`: the caller checked).
#[inline(always)]
fn fits(layout: Layout, rows: usize, cols: usize, ld: Option<usize>, len: usize) -> Option<c_int> {
    let e = Extent::of(layout, rows, cols, ld);
    let ld_int = c_int::try_from(e.ld).ok()?;
    if e.ld < e.min {
        return None;
    }
    ((len as u64) >= e.span()).then_some(ld_int)
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

    /// The call cuBLAS gets, or why these shapes do not fit buffers of these lengths. The
    /// checks of every call: [`fits`](Gemm::fits) passes the shapes it accepts, with no error to
    /// build, and [`refusal`](Gemm::refusal) (out of line) says what is wrong with the others.
    #[inline]
    pub(crate) fn resolve(
        &self,
        a_len: usize,
        b_len: usize,
        c_len: usize,
    ) -> Result<GemmCall, ShapeError> {
        match self.fits(a_len, b_len, c_len) {
            Some(call) => Ok(call),
            None => self.refusal(a_len, b_len, c_len),
        }
    }

    /// The operands' shapes as stored: `(rows, cols)` of A and of B.
    #[inline]
    fn stored_shapes(&self) -> ((usize, usize), (usize, usize)) {
        let a = match self.transa {
            Op::N => (self.m, self.k),
            Op::T => (self.k, self.m),
        };
        let b = match self.transb {
            Op::N => (self.k, self.n),
            Op::T => (self.n, self.k),
        };
        (a, b)
    }

    /// [`resolve`](Gemm::resolve)'s checks where they all pass, as plain arithmetic: `None`
    /// wherever [`refusal`](Gemm::refusal) would find something wrong (a unit test compares
    /// the two over shapes, leading dimensions and lengths on every side of each bound).
    #[inline]
    fn fits(&self, a_len: usize, b_len: usize, c_len: usize) -> Option<GemmCall> {
        let m = c_int::try_from(self.m).ok()?;
        let n = c_int::try_from(self.n).ok()?;
        let k = c_int::try_from(self.k).ok()?;
        let ((ra, ca), (rb, cb)) = self.stored_shapes();
        let l = self.layout;
        let lda = fits(l, ra, ca, self.lda, a_len)?;
        let ldb = fits(l, rb, cb, self.ldb, b_len)?;
        let ldc = fits(l, self.m, self.n, self.ldc, c_len)?;
        Some(self.call([m, n, k], [lda, ldb, ldc]))
    }

    /// The checks one by one, each refusal with what it found: where [`fits`](Gemm::fits)
    /// passes nothing, this says why.
    #[cold]
    #[inline(never)]
    fn refusal(&self, a_len: usize, b_len: usize, c_len: usize) -> Result<GemmCall, ShapeError> {
        let (m, n, k) = (int("m", self.m)?, int("n", self.n)?, int("k", self.k)?);
        let ((ra, ca), (rb, cb)) = self.stored_shapes();
        let l = self.layout;
        let lda = matrix("a", "lda", l, ra, ca, self.lda, a_len)?;
        let ldb = matrix("b", "ldb", l, rb, cb, self.ldb, b_len)?;
        let ldc = matrix("c", "ldc", l, self.m, self.n, self.ldc, c_len)?;
        Ok(self.call([m, n, k], [lda, ldb, ldc]))
    }

    /// The call, from checked dimensions and leading dimensions (in the caller's terms).
    #[inline]
    fn call(&self, [m, n, k]: [c_int; 3], [lda, ldb, ldc]: [c_int; 3]) -> GemmCall {
        match self.layout {
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
        }
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

/// The vectors of a level-1 call: `n` elements of `x` at `x[i * incx]` and, for the calls with
/// two, of `y` at `y[i * incy]`, `i < n`. Increments are at least 1 (default 1). Built with
/// [`Level1::new`].
///
/// The calls of [`Blas`](crate::Blas) check it against the buffers' lengths before cuBLAS runs
/// ([`check`](Level1::check) is the same check, without a GPU): `n` and the increments fit an
/// `int`, no increment is 0, and each buffer holds `(n - 1) * inc + 1` elements (none for
/// `n = 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level1 {
    n: usize,
    incx: usize,
    incy: usize,
}

/// A level-1 call as cuBLAS takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Level1Call {
    pub(crate) n: c_int,
    pub(crate) incx: c_int,
    pub(crate) incy: c_int,
}

impl Level1 {
    /// `n` elements of each vector, increments 1.
    pub fn new(n: usize) -> Self {
        Level1 {
            n,
            incx: 1,
            incy: 1,
        }
    }

    /// The distance between two elements of `x`, in elements (at least 1).
    pub fn incx(mut self, incx: usize) -> Self {
        self.incx = incx;
        self
    }

    /// The distance between two elements of `y`, in elements (at least 1).
    pub fn incy(mut self, incy: usize) -> Self {
        self.incy = incy;
        self
    }

    /// The number of elements of each vector.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Checks `x` (of `x_len` elements) and, where the call has it, `y`, as the calls of
    /// [`Blas`](crate::Blas) do before cuBLAS runs.
    pub fn check(&self, x_len: usize, y_len: Option<usize>) -> Result<(), ShapeError> {
        match y_len {
            Some(y_len) => self.resolve_xy(x_len, y_len).map(|_| ()),
            None => self.resolve_x(x_len).map(|_| ()),
        }
    }

    pub(crate) fn resolve_x(&self, x_len: usize) -> Result<Level1Call, ShapeError> {
        let n = int("n", self.n)?;
        let incx = strided("x", "incx", self.n, self.incx, x_len)?;
        Ok(Level1Call { n, incx, incy: 1 })
    }

    pub(crate) fn resolve_xy(&self, x_len: usize, y_len: usize) -> Result<Level1Call, ShapeError> {
        let call = self.resolve_x(x_len)?;
        let incy = strided("y", "incy", self.n, self.incy, y_len)?;
        Ok(Level1Call { incy, ..call })
    }
}

/// Checks one strided vector of `n` elements against its buffer; its increment as an `int`.
fn strided(
    buffer: &'static str,
    what: &'static str,
    n: usize,
    inc: usize,
    len: usize,
) -> Result<c_int, ShapeError> {
    let inc_int = int(what, inc)?;
    if inc == 0 {
        return Err(ShapeError::ZeroIncrement { what });
    }
    // n and inc fit an int: the product fits a u64.
    let needed = if n == 0 {
        0
    } else {
        (n as u64 - 1) * inc as u64 + 1
    };
    if (len as u64) < needed {
        return Err(ShapeError::BufferTooShort {
            buffer,
            len,
            needed,
            what: format!("{n} elements with {what} = {inc}"),
        });
    }
    Ok(inc_int)
}

/// `batch` GEMMs of one shape on matrices laid out at fixed strides in three buffers
/// (`cublasSgemmStridedBatched`, `cublasDgemmStridedBatched`): the `i`-th computes
/// `C_i = alpha op(A_i) op(B_i) + beta C_i` with `A_i` starting at element `i * stride_a` of `a`,
/// and so on. Built with [`Gemm::strided_batched`]; each stride defaults to its matrix's extent
/// (`ld * (outer - 1) + inner`: the matrices packed one after the other).
///
/// Checked before cuBLAS runs ([`check`](StridedBatched::check)): everything [`Gemm::check`]
/// checks of one matrix, `batch` fits an `int` and each stride cuBLAS's `long long`, each buffer
/// holds `stride * (batch - 1) + extent` elements (computed without overflow), and, since the
/// GEMMs of a batch may run at once, the outputs do not overlap: `stride_c` is at least C's
/// extent when `batch > 1` (inputs may: a stride of 0 uses one A for every GEMM).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StridedBatched<T> {
    gemm: Gemm<T>,
    batch: usize,
    stride_a: Option<usize>,
    stride_b: Option<usize>,
    stride_c: Option<usize>,
}

/// A strided batched GEMM as cuBLAS takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StridedBatchedCall {
    pub(crate) gemm: GemmCall,
    /// cuBLAS's A, B (swapped with the caller's for row-major, as in `gemm`) and C.
    pub(crate) strides: [i64; 3],
    pub(crate) batch: c_int,
}

impl<T: Element> Gemm<T> {
    /// `batch` of these GEMMs at fixed strides ([`StridedBatched`]).
    pub fn strided_batched(self, batch: usize) -> StridedBatched<T> {
        StridedBatched {
            gemm: self,
            batch,
            stride_a: None,
            stride_b: None,
            stride_c: None,
        }
    }
}

impl<T: Element> StridedBatched<T> {
    /// The distance between the starts of two consecutive A matrices, in elements.
    pub fn stride_a(mut self, stride: usize) -> Self {
        self.stride_a = Some(stride);
        self
    }

    /// The distance between the starts of two consecutive B matrices, in elements.
    pub fn stride_b(mut self, stride: usize) -> Self {
        self.stride_b = Some(stride);
        self
    }

    /// The distance between the starts of two consecutive C matrices, in elements (at least
    /// C's extent when `batch > 1`).
    pub fn stride_c(mut self, stride: usize) -> Self {
        self.stride_c = Some(stride);
        self
    }

    pub(crate) fn scalars(&self) -> (T, T) {
        self.gemm.scalars()
    }

    /// Checks the batch against buffers of these lengths, as
    /// [`Blas::gemm_strided_batched`](crate::Blas::gemm_strided_batched) does before cuBLAS
    /// runs.
    pub fn check(&self, a_len: usize, b_len: usize, c_len: usize) -> Result<(), ShapeError> {
        self.resolve(a_len, b_len, c_len).map(|_| ())
    }

    pub(crate) fn resolve(
        &self,
        a_len: usize,
        b_len: usize,
        c_len: usize,
    ) -> Result<StridedBatchedCall, ShapeError> {
        // One GEMM's shapes and leading dimensions (its own checks, lengths aside).
        let gemm = self.gemm.resolve(usize::MAX, usize::MAX, usize::MAX)?;
        let batch = int("batch", self.batch)?;
        let [ea, eb, ec] = self.gemm.extents()?;
        let stride_a = self.stride_a.unwrap_or(ea as usize);
        let stride_b = self.stride_b.unwrap_or(eb as usize);
        let stride_c = self.stride_c.unwrap_or(ec as usize);
        if self.batch > 1 && (stride_c as u64) < ec {
            return Err(ShapeError::OutputsOverlap {
                stride: stride_c,
                extent: ec,
            });
        }
        let batched = |buffer, what, stride: usize, extent: u64, len: usize| {
            let stride_int = i64::try_from(stride).map_err(|_| ShapeError::TooLarge {
                what,
                value: stride,
            })?;
            let needed = if self.batch == 0 || extent == 0 {
                Some(0)
            } else {
                (stride as u64)
                    .checked_mul(self.batch as u64 - 1)
                    .and_then(|v| v.checked_add(extent))
            };
            match needed {
                Some(needed) if (len as u64) >= needed => Ok(stride_int),
                Some(needed) => Err(ShapeError::BufferTooShort {
                    buffer,
                    len,
                    needed,
                    what: format!("{} matrices {stride} apart, each of {extent}", self.batch),
                }),
                None => Err(ShapeError::TooLarge {
                    what,
                    value: stride,
                }),
            }
        };
        let sa = batched("a", "stride_a", stride_a, ea, a_len)?;
        let sb = batched("b", "stride_b", stride_b, eb, b_len)?;
        let sc = batched("c", "stride_c", stride_c, ec, c_len)?;
        let strides = if gemm.swap {
            [sb, sa, sc]
        } else {
            [sa, sb, sc]
        };
        Ok(StridedBatchedCall {
            gemm,
            strides,
            batch,
        })
    }
}

impl<T: Element> Gemm<T> {
    /// The elements A, B and C span, as stored.
    fn extents(&self) -> Result<[u64; 3], ShapeError> {
        let ((ra, ca), (rb, cb)) = self.stored_shapes();
        let l = self.layout;
        let (_, _, a) = stored("a", "lda", l, ra, ca, self.lda)?;
        let (_, _, b) = stored("b", "ldb", l, rb, cb, self.ldb)?;
        let (_, _, c) = stored("c", "ldc", l, self.m, self.n, self.ldc)?;
        Ok([a, b, c])
    }
}

#[cfg(test)]
mod against_cublas;

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: usize = i32::MAX as usize + 1;

    /// Every GEMM of these dimensions, leading dimensions, transposes and layouts, with each
    /// buffer's length in turn taken from `lens` (the other two unbounded): the check of every
    /// call ([`Gemm::fits`]) passes a shape exactly where the check that explains its refusals
    /// ([`Gemm::refusal`]) accepts it, and gives cuBLAS the same call.
    fn fast_and_full_checks_agree(dims: &[usize], lds: &[Option<usize>], lens: &[usize]) {
        let mut checked = 0usize;
        for layout in [Layout::ColMajor, Layout::RowMajor] {
            for (ta, tb) in [
                (Op::N, Op::N),
                (Op::N, Op::T),
                (Op::T, Op::N),
                (Op::T, Op::T),
            ] {
                for (&m, &n, &k) in dims.iter().flat_map(|m| {
                    dims.iter()
                        .flat_map(move |n| dims.iter().map(move |k| (m, n, k)))
                }) {
                    for (&lda, &ldb, &ldc) in lds.iter().flat_map(|a| {
                        lds.iter()
                            .flat_map(move |b| lds.iter().map(move |c| (a, b, c)))
                    }) {
                        let mut g = Gemm::<f32>::new(m, n, k).transa(ta).transb(tb);
                        g.layout = layout;
                        (g.lda, g.ldb, g.ldc) = (lda, ldb, ldc);
                        for &len in lens {
                            let max = usize::MAX;
                            for (a, b, c) in [(len, max, max), (max, len, max), (max, max, len)] {
                                let full = g.refusal(a, b, c);
                                assert_eq!(g.fits(a, b, c), full.clone().ok(), "{g:?} {a} {b} {c}");
                                assert_eq!(g.resolve(a, b, c), full);
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 0);
    }

    #[test]
    fn the_check_of_every_call_passes_exactly_the_shapes_the_full_check_accepts() {
        // Small shapes: leading dimensions below, at and above each bound (0 among them), and
        // lengths on both sides of each extent.
        fast_and_full_checks_agree(
            &[0, 1, 2, 3],
            &[None, Some(0), Some(1), Some(2), Some(3), Some(4)],
            &[0, 1, 2, 3, 4, 5, 6, 8, 9, 12],
        );
        // At the edge of an int: dimensions and leading dimensions that fit and the first that
        // does not, with extents beyond a u32.
        let top = BIG - 1;
        fast_and_full_checks_agree(
            &[0, 3, top, BIG],
            &[None, Some(3), Some(top), Some(BIG)],
            &[0, 3, top, BIG, usize::MAX / 2],
        );
    }

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
    fn gemm_ex_lengths_are_counted_in_elements_of_each_buffer() {
        // `Blas::gemm_ex` checks its `Gemm<f32>` against the half buffers' lengths in halves
        // and C's in f32s: the same numbers as any GEMM. Row-major 7x13x5 with A transposed
        // (stored 5x7, lda >= 7) and lda = 9: A spans 9 * 4 + 7 = 43 halves.
        let g = Gemm::<f32>::row_major(7, 13, 5)
            .transa(Op::T)
            .lda(9)
            .alpha(0.5);
        assert_eq!(
            g.resolve(43, 65, 91).map(|c| (c.swap, c.ldb, c.lda, c.ldc)),
            Ok((true, 9, 13, 13))
        );
        assert!(matches!(
            g.check(42, 65, 91),
            Err(ShapeError::BufferTooShort {
                buffer: "a",
                needed: 43,
                ..
            })
        ));
        assert!(matches!(
            g.check(43, 65, 90),
            Err(ShapeError::BufferTooShort {
                buffer: "c",
                needed: 91,
                ..
            })
        ));
        assert_eq!(g.scalars(), (0.5, 0.0));
    }

    #[test]
    fn longer_buffers_are_fine() {
        assert!(Gemm::<f32>::new(2, 2, 2).check(100, 100, 100).is_ok());
        assert!(Gemv::<f32>::new(2, 2).check(100, 100, 100).is_ok());
    }

    #[test]
    fn level1_checks_lengths_and_increments() {
        // 7 elements at increment 3 span 19.
        let v = Level1::new(7).incx(3);
        assert_eq!(
            v.resolve_xy(19, 7),
            Ok(Level1Call {
                n: 7,
                incx: 3,
                incy: 1
            })
        );
        assert_eq!(
            v.check(18, Some(7)),
            Err(ShapeError::BufferTooShort {
                buffer: "x",
                len: 18,
                needed: 19,
                what: "7 elements with incx = 3".into()
            })
        );
        assert!(matches!(
            v.incy(3).check(19, Some(18)),
            Err(ShapeError::BufferTooShort {
                buffer: "y",
                needed: 19,
                ..
            })
        ));
        // One element needs one, whatever the increment; none need none.
        assert!(Level1::new(1).incx(1000).check(1, None).is_ok());
        assert!(Level1::new(0).check(1, Some(1)).is_ok());
        // An increment of 0 is refused, even for n = 0 or 1.
        for n in [0, 1, 5] {
            assert_eq!(
                Level1::new(n).incx(0).check(100, None),
                Err(ShapeError::ZeroIncrement { what: "incx" })
            );
            assert_eq!(
                Level1::new(n).incy(0).check(100, Some(100)),
                Err(ShapeError::ZeroIncrement { what: "incy" })
            );
        }
        // The one-vector calls ignore incy.
        assert!(Level1::new(3).incy(0).check(3, None).is_ok());
    }

    #[test]
    fn level1_numbers_beyond_an_int_are_refused_and_extents_do_not_overflow() {
        assert_eq!(
            Level1::new(BIG).check(usize::MAX, None),
            Err(ShapeError::TooLarge {
                what: "n",
                value: BIG
            })
        );
        assert_eq!(
            Level1::new(2).incx(BIG).check(usize::MAX, None),
            Err(ShapeError::TooLarge {
                what: "incx",
                value: BIG
            })
        );
        // The largest int both ways: (2^31 - 2) * (2^31 - 1) + 1 elements, computed in u64.
        let max = i32::MAX as usize;
        assert!(matches!(
            Level1::new(max).incx(max).check(usize::MAX >> 8, None),
            Err(ShapeError::BufferTooShort { needed, .. })
                if needed == (max as u64 - 1) * max as u64 + 1
        ));
    }

    #[test]
    fn strided_batches_check_every_matrix_of_the_batch() {
        // 3 GEMMs of 7x13x5, packed: A 35 each, B 65, C 91.
        let g = Gemm::<f32>::new(7, 13, 5).strided_batched(3);
        let call = g.resolve(105, 195, 273);
        assert_eq!(call.map(|c| (c.strides, c.batch)), Ok(([35, 65, 91], 3)));
        assert!(matches!(
            g.check(104, 195, 273),
            Err(ShapeError::BufferTooShort {
                buffer: "a",
                needed: 105,
                ..
            })
        ));
        assert!(matches!(
            g.check(105, 195, 272),
            Err(ShapeError::BufferTooShort {
                buffer: "c",
                needed: 273,
                ..
            })
        ));
        // A stride of 0 shares one A; a longer stride needs stride * (batch - 1) + extent.
        assert!(g.stride_a(0).check(35, 195, 273).is_ok());
        assert!(g.stride_b(100).check(105, 265, 273).is_ok());
        assert!(g.stride_b(100).check(105, 264, 273).is_err());
        // Outputs may not overlap, but one GEMM may have any stride_c.
        assert_eq!(
            g.stride_c(90).check(105, 195, 1000),
            Err(ShapeError::OutputsOverlap {
                stride: 90,
                extent: 91
            })
        );
        let one = Gemm::<f32>::new(7, 13, 5).strided_batched(1).stride_c(0);
        assert!(one.check(35, 65, 91).is_ok());
        // A batch of none touches nothing.
        assert!(
            Gemm::<f32>::new(7, 13, 5)
                .strided_batched(0)
                .check(1, 1, 1)
                .is_ok()
        );
        // One GEMM's own checks still apply.
        assert!(matches!(
            Gemm::<f32>::new(7, 13, 5)
                .lda(4)
                .strided_batched(3)
                .check(1000, 1000, 1000),
            Err(ShapeError::LeadingDimension { what: "lda", .. })
        ));
    }

    #[test]
    fn strided_batches_refuse_overflowing_strides_and_batches() {
        let g = Gemm::<f64>::new(2, 2, 2);
        assert_eq!(
            g.strided_batched(BIG)
                .check(usize::MAX, usize::MAX, usize::MAX),
            Err(ShapeError::TooLarge {
                what: "batch",
                value: BIG
            })
        );
        // stride * (batch - 1) overflows a u64.
        let huge = usize::MAX / 2;
        assert_eq!(
            g.strided_batched(4)
                .stride_a(huge)
                .check(usize::MAX, usize::MAX, usize::MAX),
            Err(ShapeError::TooLarge {
                what: "stride_a",
                value: huge
            })
        );
        // Beyond cuBLAS's long long.
        let beyond = i64::MAX as usize + 1;
        assert!(matches!(
            g.strided_batched(1)
                .stride_b(beyond)
                .check(usize::MAX, usize::MAX, usize::MAX),
            Err(ShapeError::TooLarge {
                what: "stride_b",
                ..
            })
        ));
    }

    #[test]
    fn row_major_strided_batches_swap_the_strides_with_the_operands() {
        let g = Gemm::<f32>::row_major(7, 13, 5)
            .strided_batched(2)
            .stride_a(40)
            .stride_b(70);
        let call = g.resolve(75, 135, 182);
        assert_eq!(
            call.map(|c| (c.gemm.swap, c.strides)),
            Ok((true, [70, 40, 91]))
        );
    }
}
