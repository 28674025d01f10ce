//! A cuSPARSE handle that belongs to one stream, with its workspace, and the products on
//! `um`'s buffers.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;

use um_core::{Context, Managed, Mirror, Storage, Stream, StreamOwned};

use crate::stream::SparseStream;

use crate::csr::Csr;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::library::Cusparse;
use crate::result::{self, Descr};
use crate::sys;

/// Invariant in `'s`, as a stream's brand is.
type Brand<'s> = fn(&'s ()) -> &'s ();

/// `A` as stored, or its transpose, in [`Sparse::spmv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Op {
    /// `A`.
    #[default]
    N,
    /// `A^T`.
    T,
}

/// A cuSPARSE handle (`cusparseHandle_t`) that belongs to one stream for its whole life, with a
/// workspace owned by that stream.
///
/// **Why one stream.** Each product may need a workspace (`cusparseSpMV_bufferSize`), which the
/// handle keeps and grows: a buffer owned by its stream, so the stream's order keeps one call's
/// use of it before the next one's, and its drop frees it only after the stream's work. The
/// handle is bound to that stream (`cusparseSetStream`) once; every call checks that its stream
/// is that one ([`Error::WrongStream`]) and that the operands are owned by it
/// ([`Error::StreamMismatch`] between the streams of a set). Neither `Send` nor `Sync`.
///
/// The stream kind is a [`SparseStream`] (a stream um created, a per-thread or a foreign stream):
/// the operands are attached to it, and a graph's capture stream is not one, so no product is
/// recorded into a graph (a replay would use the workspace, which the graph does not hold).
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use um_core::{Context, Managed, StreamOptions};
/// use um_cusparse::{Csr, Op, Sparse};
///
/// let ctx = Context::new(0)?;
/// // [[2, 0], [1, 3]]
/// let a = Csr::new(&ctx, 2, 2, &[0, 1, 3], &[0, 0, 1], &[2.0f64, 1.0, 3.0])?;
/// let x = Managed::from_slice(&ctx, &[1.0f64, 1.0])?;
/// let y = Managed::<[f64]>::zeroed_slice(&ctx, 2)?;
/// let y = ctx.with_stream(um_core::StreamOptions::new(), |s| {
///     let mut sparse = Sparse::new(s)?;
///     let (a, x, mut y) = (a.attach(s)?, x.attach(s)?, y.attach(s)?);
///     sparse.spmv(s, Op::N, 1.0, &a, &x, 0.0, &mut y)?; // y = A x
///     y.sync()
/// })?;
/// assert_eq!(&y[..], &[2.0, 4.0]);
/// # Ok(()) }
/// ```
pub struct Sparse<'s, K: SparseStream> {
    library: &'static Cusparse,
    handle: sys::Handle,
    ctx: Context,
    /// The [`Stream::id`] of the stream the handle belongs to.
    stream: u64,
    /// The workspace, owned by that stream; grown when a call needs more. Device memory (the
    /// device half of a mirror, never synced): a workspace in managed memory associated with
    /// the stream made each call of a CG loop slower (`docs/performance.md`, section 11).
    workspace: Option<Managed<[u8], StreamOwned<'s, K>, Mirror>>,
    /// The descriptors of the last few operand sets, with their workspace size: a product on
    /// the same operands (a solver's loop) makes no descriptor and asks no size again.
    plans: Plans<Plan>,
    _brand: PhantomData<(Brand<'s>, K)>,
}

impl<'s, K: SparseStream> Sparse<'s, K> {
    /// A handle belonging to `stream`, with the process's cuSPARSE ([`Cusparse::load`]).
    pub fn new(stream: &Stream<'s, K>) -> Result<Self> {
        Self::with_library(stream, Cusparse::load()?)
    }

    /// [`new`](Sparse::new) with the given library.
    pub fn with_library(stream: &Stream<'s, K>, library: &'static Cusparse) -> Result<Self> {
        um_core::refuse_inside_stream_callback("making a cuSPARSE handle")?;
        let ctx = stream.context().clone();
        ctx.make_current()?;
        let api = library.api();
        // Relaxed inside a capture closure: the handle's creation allocates.
        let handle = um_core::relaxed_while_capturing(|| result::create(api))??;
        let sparse = Sparse {
            library,
            handle,
            ctx,
            stream: stream.id(),
            workspace: None,
            plans: Plans::new(),
            _brand: PhantomData,
        };
        let raw = stream.as_raw();
        // SAFETY: a live handle of this context (current, above) and a live stream of it; the
        // handle is unbound again before it is destroyed (drop).
        unsafe { result::set_stream(api, handle, raw) }?;
        Ok(sparse)
    }

    /// The context the handle belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The library the handle was made by.
    pub fn library(&self) -> &'static Cusparse {
        self.library
    }

    /// The raw `cusparseHandle_t`, for calls `um-cusparse` does not wrap (through
    /// [`Cusparse::api`]). Holding it is safe; every call with it is `unsafe`, and such a call
    /// must keep what this type keeps: only on this handle's thread, with its context current,
    /// never rebinding it to another stream, touching only memory its stream owns, never
    /// destroying it, and leaving it in host pointer mode (`cusparseSetPointerMode`: the
    /// products pass `alpha` and `beta` as host addresses, which device mode would read as
    /// device ones).
    pub fn as_raw(&self) -> sys::Handle {
        self.handle
    }

    /// `y = alpha op(A) x + beta y` (`cusparseSpMV`, `CUSPARSE_SPMV_ALG_DEFAULT`) on `stream`,
    /// which must be the handle's own. `x` has `op(A)`'s column count and `y` its row count
    /// ([`Error::Shape`] otherwise, before cuSPARSE runs); `y` is borrowed `&mut`, so it is
    /// neither `x` nor a part of `A`. The call is asynchronous: `sync` `y` to read it.
    #[allow(clippy::too_many_arguments)] // the BLAS argument list
    pub fn spmv<T: Element, MA: Storage, MX: Storage, MY: Storage>(
        &mut self,
        stream: &Stream<'s, K>,
        op: Op,
        alpha: T,
        a: &Csr<T, StreamOwned<'s, K>, MA>,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        beta: T,
        y: &mut Managed<[T], StreamOwned<'s, K>, MY>,
    ) -> Result<()> {
        self.check(stream)?;
        let (rows, cols) =
            spmv_shape(op, (a.rows(), a.cols()), x.len(), y.len()).map_err(Error::Shape)?;
        owned(a.is_owned_by(stream), "a")?;
        owned(stream.owns(x), "x")?;
        owned(stream.owns(y), "y")?;
        let dt = T::DATA_TYPE;
        let api = *self.library.api();
        let (ptrs, xp) = (a.device_parts(), x.as_device_ptr().as_ptr());
        let mut y = y.as_device_ptr_mut();
        let yp = y.as_mut_ptr();
        let shape = (to_i64(a.rows()), to_i64(a.cols()), to_i64(a.nnz()));
        let op = match op {
            Op::N => sys::OP_N,
            Op::T => sys::OP_T,
        };
        let scalars: (*const c_void, *const c_void) =
            ((&raw const alpha).cast(), (&raw const beta).cast());
        let handle = self.handle;
        let parts = [ptrs.0 as usize, ptrs.1 as usize, ptrs.2 as usize];
        let key = Key::spmv(
            op,
            dt,
            (shape, parts),
            (xp as usize, to_i64(cols)),
            (yp as usize, to_i64(rows)),
        );
        let scalar_bits = (alpha.bits(), beta.bits());
        um_core::relaxed_while_capturing(|| {
            let make = |descrs: &mut Descrs| -> Result<()> {
                // SAFETY: the three parts of `a`, owned by `stream` and alive for this borrow,
                // hold a structure `Csr::new` proved (rows + 1 offsets, nnz in-range indices,
                // nnz values of `T`); `x` and `y` hold `cols` and `rows` elements of `T`
                // (checked above). A kept descriptor is used only by a call whose operands are
                // at these addresses with these sizes (`key`).
                descrs.keep(Descr::SpMat, unsafe {
                    result::create_csr(&api, shape, ptrs.0, ptrs.1, ptrs.2.cast(), dt)
                }?);
                // SAFETY: as above.
                descrs.keep(Descr::DnVec, unsafe {
                    result::create_dn_vec(&api, to_i64(cols), xp.cast_mut().cast(), dt)
                }?);
                // SAFETY: as above.
                descrs.keep(Descr::DnVec, unsafe {
                    result::create_dn_vec(&api, to_i64(rows), yp.cast(), dt)
                }?);
                Ok(())
            };
            // SAFETY: a live handle bound to `stream` since it was made (`check`), its context
            // current; descriptors of this call's operands (`plan`); host scalars of `T` that
            // live across the call.
            let size = |d| unsafe { result::spmv_buffer_size(&api, handle, op, scalars, d, dt) };
            let (descrs, size) = self.plan(key, scalar_bits, make, size)?;
            let buffer = self.workspace(stream, size)?;
            // SAFETY: a live handle bound to `stream` since it was made (`check`), its context
            // current; descriptors of exactly this call's operands (made above, or kept from a
            // call whose key, every field a descriptor holds, equals this one's: the same
            // addresses, sizes and type; cuSPARSE keeps in a descriptor only what it was made
            // with, as no preprocessing is ever asked), so they describe `a`, `x` and `y` as
            // checked above; host scalars of `T` that live across the call; a workspace of at
            // least `size` bytes (the size this operand set needs) owned by `stream`: only
            // this stream's work uses it, in order, and it is freed after that work.
            unsafe { result::spmv(&api, handle, op, scalars, descrs, dt, buffer) }
        })?
    }

    /// `C = alpha A B + beta C` (`cusparseSpMM`, `CUSPARSE_SPMM_ALG_DEFAULT`) on the handle's
    /// stream, `B` and `C` dense, column-major and tightly packed: `B` is `A.cols()`×`n`, `C`
    /// is `A.rows()`×`n` ([`Error::Shape`] if a buffer is shorter, or `n` is 0).
    #[allow(clippy::too_many_arguments)] // the BLAS argument list
    pub fn spmm<T: Element, MA: Storage, MB: Storage, MC: Storage>(
        &mut self,
        stream: &Stream<'s, K>,
        alpha: T,
        a: &Csr<T, StreamOwned<'s, K>, MA>,
        b: &Managed<[T], StreamOwned<'s, K>, MB>,
        n: usize,
        beta: T,
        c: &mut Managed<[T], StreamOwned<'s, K>, MC>,
    ) -> Result<()> {
        self.check(stream)?;
        let (m, k) = (a.rows(), a.cols());
        spmm_shape((m, k), n, b.len(), c.len()).map_err(Error::Shape)?;
        owned(a.is_owned_by(stream), "a")?;
        owned(stream.owns(b), "b")?;
        owned(stream.owns(c), "c")?;
        let dt = T::DATA_TYPE;
        let api = *self.library.api();
        let (ptrs, bp) = (a.device_parts(), b.as_device_ptr().as_ptr());
        let mut c = c.as_device_ptr_mut();
        let cp = c.as_mut_ptr();
        let shape = (to_i64(m), to_i64(k), to_i64(a.nnz()));
        let scalars: (*const c_void, *const c_void) =
            ((&raw const alpha).cast(), (&raw const beta).cast());
        let handle = self.handle;
        let parts = [ptrs.0 as usize, ptrs.1 as usize, ptrs.2 as usize];
        let scalar_bits = (alpha.bits(), beta.bits());
        // In blocks of whole columns ([`column_blocks`]): cuSPARSE's SpMM left `C` at `beta C`
        // (zeros), from the first column on, for `n` = 2^28 - 1 and 2^30 + 1 columns (1x H200,
        // CUDA 13.0). The columns of a block are independent of the others', so the blocks in
        // stream order are the whole product.
        for (j0, nb) in column_blocks(m.max(k), n, std::mem::size_of::<T>()) {
            // Device addresses, never dereferenced here: `j0 + nb <= n`, so both stay inside `b`
            // (`k * n` elements) and `c` (`m * n`), checked above.
            let (bj, cj) = (bp.wrapping_add(j0 * k), cp.wrapping_add(j0 * m));
            let key = Key::spmm(dt, (shape, parts), bj as usize, cj as usize, to_i64(nb));
            um_core::relaxed_while_capturing(|| {
                let make = |descrs: &mut Descrs| -> Result<()> {
                    // SAFETY: as in `spmv`: `a`'s proved parts; `b` from `bj` holds `k * nb` and
                    // `c` from `cj` `m * nb` elements of `T` (checked above), both owned by
                    // `stream`.
                    descrs.keep(Descr::SpMat, unsafe {
                        result::create_csr(&api, shape, ptrs.0, ptrs.1, ptrs.2.cast(), dt)
                    }?);
                    // SAFETY: as above; leading dimension `k`, tightly packed.
                    descrs.keep(Descr::DnMat, unsafe {
                        result::create_dn_mat(
                            &api,
                            (to_i64(k), to_i64(nb), to_i64(k)),
                            bj.cast_mut().cast(),
                            dt,
                        )
                    }?);
                    // SAFETY: as above; leading dimension `m`.
                    descrs.keep(Descr::DnMat, unsafe {
                        result::create_dn_mat(
                            &api,
                            (to_i64(m), to_i64(nb), to_i64(m)),
                            cj.cast(),
                            dt,
                        )
                    }?);
                    Ok(())
                };
                // SAFETY: as in `spmv`.
                let size = |d| unsafe { result::spmm_buffer_size(&api, handle, scalars, d, dt) };
                let (descrs, size) = self.plan(key, scalar_bits, make, size)?;
                let buffer = self.workspace(stream, size)?;
                // SAFETY: as in `spmv`: descriptors of exactly this block's operands (`key`).
                unsafe { result::spmm(&api, handle, scalars, descrs, dt, buffer) }
            })??;
        }
        Ok(())
    }

    /// The descriptors of `key`'s operands and the workspace their product needs with scalars
    /// of `scalar_bits`: those kept from an earlier call of the same key, else made now by
    /// `make` and kept; the size asked of cuSPARSE (`size`) once per key and scalars.
    fn plan(
        &mut self,
        key: Key,
        scalar_bits: (u64, u64),
        make: impl FnOnce(&mut Descrs) -> Result<()>,
        size: impl Fn(Three) -> Result<usize>,
    ) -> Result<(Three, usize)> {
        if let Some(plan) = self.plans.find_mut(&key) {
            if plan.scalars != scalar_bits {
                plan.size = size(plan.descrs())?;
                plan.scalars = scalar_bits;
            }
            return Ok((plan.descrs(), plan.size));
        }
        // Destroyed again on an error (`Descrs`'s drop), kept otherwise.
        let mut descrs = Descrs::new(*self.library.api());
        make(&mut descrs)?;
        let plan = Plan {
            descrs,
            scalars: scalar_bits,
            size: 0,
        };
        let bytes = size(plan.descrs())?;
        let plan = self.plans.keep(
            key,
            Plan {
                size: bytes,
                ..plan
            },
        );
        Ok((plan.descrs(), plan.size))
    }

    /// Refuses a call inside um's stream callback or on another stream than the handle's; makes
    /// the context current.
    fn check(&self, stream: &Stream<'s, K>) -> Result<()> {
        um_core::refuse_inside_stream_callback("a cuSPARSE call")?;
        if stream.id() != self.stream {
            return Err(Error::WrongStream);
        }
        // A poisoned stream's work was aborted half-done, as um's launches refuse it.
        if stream.is_poisoned() {
            return Err(Error::Um(um_core::Error::StreamPoisoned));
        }
        Ok(self.ctx.make_current()?)
    }

    /// A workspace of at least `size` bytes owned by `stream` (the handle's), grown as needed:
    /// the old one is dropped as the stream's (freed after the stream's work). Null for 0.
    fn workspace(&mut self, stream: &Stream<'s, K>, size: usize) -> Result<*mut c_void> {
        if size == 0 {
            return Ok(std::ptr::null_mut());
        }
        if self.workspace.as_ref().is_none_or(|w| w.len() < size) {
            // The new one first: if it cannot be made, the old one stays.
            let fresh = Managed::<[u8], _, Mirror>::zeroed_slice_mirrored(&self.ctx, size)?
                .attach(stream)?;
            self.workspace = Some(fresh);
        }
        match self.workspace.as_mut() {
            Some(w) => Ok(w.as_device_ptr_mut().as_mut_ptr().cast()),
            None => Ok(std::ptr::null_mut()),
        }
    }
}

/// `op(A)`'s `(rows, cols)` for SpMV with `A` of `shape`, where `x` has `cols` elements and `y`
/// `rows`; why not otherwise.
pub(crate) fn spmv_shape(
    op: Op,
    (a_rows, a_cols): (usize, usize),
    x_len: usize,
    y_len: usize,
) -> std::result::Result<(usize, usize), String> {
    let (rows, cols) = match op {
        Op::N => (a_rows, a_cols),
        Op::T => (a_cols, a_rows),
    };
    if x_len != cols || y_len != rows {
        return Err(format!(
            "op(A) is {rows}x{cols}: x must have {cols} elements (has {x_len}), y {rows} (has {y_len})"
        ));
    }
    Ok((rows, cols))
}

/// Checks SpMM's dense operands for `A` of `(m, k)` and `n` columns: `n` in `1..=i32::MAX`, `b`
/// holds `k * n` and `c` `m * n` elements (column-major, tightly packed); why not otherwise.
pub(crate) fn spmm_shape(
    (m, k): (usize, usize),
    n: usize,
    b_len: usize,
    c_len: usize,
) -> std::result::Result<(), String> {
    let need = |rows: usize| {
        rows.checked_mul(n)
            .filter(|_| n > 0 && n <= i32::MAX as usize)
    };
    match (need(k), need(m)) {
        (Some(nb), Some(nc)) if b_len >= nb && c_len >= nc => Ok(()),
        _ => Err(format!(
            "A is {m}x{k} and n = {n}: b must hold {k}x{n} and c {m}x{n} column-major elements (have {b_len} and {c_len}), n at least 1"
        )),
    }
}

/// The most columns of `C` one SpMM call is given: cuSPARSE's CSR SpMM kernel launches a grid
/// of `ceil(n / 16)` blocks in `y`, whose limit is 65,535, and a larger grid fails to launch
/// with no error returned, leaving `C` as `beta C` (the cuSPARSE of CUDA 13.0; CuPy works around
/// the same limit).
pub(crate) const MAX_SPMM_COLUMNS: usize = 65_535 * 16;

/// SpMM's column blocks for dense operands of `rows` rows (the larger of `B`'s and `C`'s) and
/// `n` columns of `size`-byte elements: `(first column, columns)`, in order, covering `0..n`;
/// each block at most [`MAX_SPMM_COLUMNS`] columns and under 2^31 bytes where a single column
/// is (at least one column per block).
pub(crate) fn column_blocks(
    rows: usize,
    n: usize,
    size: usize,
) -> impl Iterator<Item = (usize, usize)> {
    let per =
        (i32::MAX as usize / rows.max(1).saturating_mul(size.max(1))).clamp(1, MAX_SPMM_COLUMNS);
    (0..n).step_by(per).map(move |j0| (j0, per.min(n - j0)))
}

/// `Error::StreamMismatch` unless `owned`.
fn owned(owned: bool, buffer: &'static str) -> Result<()> {
    if owned {
        Ok(())
    } else {
        Err(Error::StreamMismatch { buffer })
    }
}

/// A length as cuSPARSE's `int64_t`: every length here is a buffer's, far below `i64::MAX`.
fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The descriptors of one operand set, destroyed when dropped (also when a call fails halfway
/// through making them).
struct Descrs {
    api: sys::Api,
    made: Vec<(Descr, *mut c_void)>,
}

impl Descrs {
    fn new(api: sys::Api) -> Self {
        Descrs {
            api,
            made: Vec::with_capacity(3),
        }
    }

    /// Keeps `descr` for the destroy, and gives it back.
    fn keep(&mut self, kind: Descr, descr: *mut c_void) -> *mut c_void {
        self.made.push((kind, descr));
        descr
    }
}

impl Drop for Descrs {
    fn drop(&mut self) {
        for (kind, descr) in self.made.drain(..) {
            // SAFETY: each was made by the function of its kind and is used by no call any
            // more: the calls that used it have returned (a descriptor is host memory; the
            // enqueued work does not read it), and it leaves the handle's plans with this drop.
            unsafe { result::destroy_descr(&self.api, kind, descr) };
        }
    }
}

/// [`Key::product`] of an SpMM (an SpMV's is its operation, `OP_N` or `OP_T`).
const SPMM: c_int = -1;

/// How many operand sets a handle keeps described: a solver's loop uses one or two (SpMV of one
/// matrix on one or two vector pairs), so a few cover it with room to spare.
const PLANS: usize = 4;

/// Everything a product's descriptors are made of: the product (SpMV's operation, or SpMM), the
/// value type, `A`'s rows, columns, entries and the device addresses of its three arrays, and
/// the two dense operands' addresses with their `(rows, cols, ld)` (a vector of `n`:
/// `(n, 1, n)`). Descriptors made for equal keys are equal (cuSPARSE keeps in a descriptor only
/// what it is made with, here: nothing is preprocessed into one), so a kept descriptor serves a
/// later call of an equal key as a fresh one would: the same addresses, sizes and type. The
/// contents at those addresses may have changed (rewritten values, or another buffer at the
/// same address): a descriptor holds no contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    product: c_int,
    data_type: c_int,
    a: [i64; 3],
    a_parts: [usize; 3],
    b: (usize, [i64; 3]),
    c: (usize, [i64; 3]),
}

/// `A`'s `(rows, cols, nnz)` and the addresses of its offsets, indices and values.
type MatrixKey = ((i64, i64, i64), [usize; 3]);

impl Key {
    /// The key of an SpMV of operation `op` (`OP_N`, `OP_T`) with `x` and `y` given as
    /// `(address, length)`.
    pub(crate) fn spmv(
        op: c_int,
        data_type: c_int,
        ((rows, cols, nnz), a_parts): MatrixKey,
        (x, x_len): (usize, i64),
        (y, y_len): (usize, i64),
    ) -> Key {
        Key {
            product: op,
            data_type,
            a: [rows, cols, nnz],
            a_parts,
            b: (x, [x_len, 1, x_len]),
            c: (y, [y_len, 1, y_len]),
        }
    }

    /// The key of an SpMM of `A` (`m`×`k`) with `B` (`k`×`n`, at `b`) into `C` (`m`×`n`, at
    /// `c`), both column-major and tightly packed.
    pub(crate) fn spmm(
        data_type: c_int,
        ((m, k, nnz), a_parts): MatrixKey,
        b: usize,
        c: usize,
        n: i64,
    ) -> Key {
        Key {
            product: SPMM,
            data_type,
            a: [m, k, nnz],
            a_parts,
            b: (b, [k, n, k]),
            c: (c, [m, n, m]),
        }
    }
}

/// The three descriptors of a product: `(A, x or B, y or C)`.
type Three = (*mut c_void, *mut c_void, *mut c_void);

/// The descriptors of one key (`A`, then the two dense operands) and the workspace its product
/// needs with the scalars of `scalars` (`cusparseSpMV_bufferSize` or `cusparseSpMM_bufferSize`,
/// asked again when a call's `alpha` or `beta` differs from the last one's).
struct Plan {
    descrs: Descrs,
    /// The bits of the `alpha` and `beta` that `size` was asked with.
    scalars: (u64, u64),
    size: usize,
}

impl Plan {
    /// `(A, x or B, y or C)`.
    fn descrs(&self) -> Three {
        let d = |i: usize| {
            self.descrs
                .made
                .get(i)
                .map_or(std::ptr::null_mut(), |d| d.1)
        };
        (d(0), d(1), d(2))
    }
}

/// Up to [`PLANS`] values by [`Key`], the oldest dropped to make room for a new one.
pub(crate) struct Plans<P> {
    /// Oldest first.
    kept: Vec<(Key, P)>,
}

impl<P> Plans<P> {
    pub(crate) fn new() -> Self {
        Plans {
            kept: Vec::with_capacity(PLANS),
        }
    }

    /// The value kept for `key`, to update.
    pub(crate) fn find_mut(&mut self, key: &Key) -> Option<&mut P> {
        self.kept.iter_mut().find(|(k, _)| k == key).map(|(_, p)| p)
    }

    /// Keeps `value` for `key` (which has none), dropping the oldest value when [`PLANS`] are
    /// kept already; gives it back.
    pub(crate) fn keep(&mut self, key: Key, value: P) -> &P {
        if self.kept.len() >= PLANS {
            drop(self.kept.remove(0));
        }
        self.kept.push((key, value));
        let last = self.kept.len() - 1;
        &self.kept[last].1
    }
}

impl<K: SparseStream> Drop for Sparse<'_, K> {
    fn drop(&mut self) {
        // The workspace goes first, as its stream's buffer (freed after the stream's work, or
        // kept past a capture by um-core).
        drop(self.workspace.take());
        if self.ctx.make_current().is_err() {
            return;
        }
        // As `um-cublas`'s handles: destroyed after a device wait, inside an idle section, or
        // once the captures of um in its way have ended.
        let api = *self.library.api();
        // Unbound here, while its stream is certainly alive (the brand keeps every `Sparse`
        // inside its stream's scope), not only in a destroy kept past a capture, when the
        // stream may be gone and its handle reused. Relaxed on a capturing thread.
        let raw = self.handle;
        let _ = um_core::relaxed_while_capturing(|| {
            // SAFETY: a live handle, its context current (above), used by this thread only;
            // null is the legacy stream, always valid, and the stream it replaces is alive.
            unsafe { result::set_stream(&api, raw, std::ptr::null_mut()) }
        });
        let handle = Raw(self.handle);
        let destroy = move || {
            let handle = handle;
            // SAFETY: the handle is live and destroyed only here, once; unbound again (to null,
            // the legacy stream) in case the unbind above was not made. Every call has
            // completed (the wait before this closure runs), and the context is current.
            let _ = unsafe { result::set_stream(&api, handle.0, std::ptr::null_mut()) };
            // SAFETY: as above.
            let _ = unsafe { result::destroy(&api, handle.0) };
        };
        let _ = self.ctx.with_idle_after_captures(destroy);
    }
}

/// The handle, moved into the destroy that drop may leave to another thread.
struct Raw(sys::Handle);

// SAFETY: a cuSPARSE handle may be used from any thread, one at a time; the only use of this
// one is its destroy, once, by whichever thread runs it.
unsafe impl Send for Raw {}

impl<K: SparseStream> std::fmt::Debug for Sparse<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sparse")
            .field("device", &self.ctx.info().ordinal)
            .field("stream", &self.stream)
            .field("library", &self.library.path())
            .field("version", &self.library.version())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Key, MAX_SPMM_COLUMNS, MatrixKey, Op, PLANS, Plans, column_blocks, spmm_shape, spmv_shape,
    };
    use crate::sys;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A kept value that counts its drops.
    struct Counted(Rc<Cell<usize>>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    const A: MatrixKey = ((3, 5, 7), [0x1000, 0x2000, 0x3000]);

    fn spmv_key(x: usize, y: usize) -> Key {
        Key::spmv(sys::OP_N, sys::R_64F, A, (x, 5), (y, 3))
    }

    #[test]
    fn a_key_differs_when_any_field_of_a_descriptor_differs() {
        let base = spmv_key(0x4000, 0x5000);
        assert_eq!(
            base,
            spmv_key(0x4000, 0x5000),
            "the same operands, the same key"
        );
        let (shape, parts) = A;
        let changed = [
            Key::spmv(sys::OP_T, sys::R_64F, A, (0x4000, 5), (0x5000, 3)),
            Key::spmv(sys::OP_N, sys::R_32F, A, (0x4000, 5), (0x5000, 3)),
            Key::spmv(
                sys::OP_N,
                sys::R_64F,
                ((4, 5, 7), parts),
                (0x4000, 5),
                (0x5000, 3),
            ),
            Key::spmv(
                sys::OP_N,
                sys::R_64F,
                ((3, 6, 7), parts),
                (0x4000, 5),
                (0x5000, 3),
            ),
            Key::spmv(
                sys::OP_N,
                sys::R_64F,
                ((3, 5, 8), parts),
                (0x4000, 5),
                (0x5000, 3),
            ),
            Key::spmv(
                sys::OP_N,
                sys::R_64F,
                (shape, [0x1100, 0x2000, 0x3000]),
                (0x4000, 5),
                (0x5000, 3),
            ),
            Key::spmv(
                sys::OP_N,
                sys::R_64F,
                (shape, [0x1000, 0x2100, 0x3000]),
                (0x4000, 5),
                (0x5000, 3),
            ),
            Key::spmv(
                sys::OP_N,
                sys::R_64F,
                (shape, [0x1000, 0x2000, 0x3100]),
                (0x4000, 5),
                (0x5000, 3),
            ),
            spmv_key(0x4100, 0x5000),
            spmv_key(0x4000, 0x5100),
            Key::spmv(sys::OP_N, sys::R_64F, A, (0x4000, 6), (0x5000, 3)),
            Key::spmv(sys::OP_N, sys::R_64F, A, (0x4000, 5), (0x5000, 4)),
            // x and y exchanged: other descriptors (the output is the other buffer).
            spmv_key(0x5000, 0x4000),
            // An SpMM of one column on the same buffers is another product.
            Key::spmm(sys::R_64F, A, 0x4000, 0x5000, 1),
        ];
        for (i, key) in changed.iter().enumerate() {
            assert_ne!(base, *key, "change {i}");
        }
        assert_ne!(
            Key::spmm(sys::R_64F, A, 0x4000, 0x5000, 2),
            Key::spmm(sys::R_64F, A, 0x4000, 0x5000, 3),
            "SpMM's column count"
        );
    }

    #[test]
    fn a_kept_plan_is_found_by_its_key_alone_and_the_oldest_is_dropped_first() {
        let drops = Rc::new(Cell::new(0));
        let mut plans = Plans::new();
        let keys: Vec<Key> = (0..=PLANS)
            .map(|i| spmv_key(0x10_000 * (i + 1), 0x5000))
            .collect();
        assert!(plans.find_mut(&keys[0]).is_none());
        for key in &keys[..PLANS] {
            plans.keep(*key, Counted(drops.clone()));
        }
        assert_eq!(drops.get(), 0, "nothing dropped while there is room");
        for key in &keys[..PLANS] {
            assert!(plans.find_mut(key).is_some());
        }
        assert!(plans.find_mut(&keys[PLANS]).is_none());
        // One more: the oldest goes (its descriptors destroyed), the others stay.
        plans.keep(keys[PLANS], Counted(drops.clone()));
        assert_eq!(drops.get(), 1);
        assert!(plans.find_mut(&keys[0]).is_none());
        for key in &keys[1..] {
            assert!(plans.find_mut(key).is_some());
        }
        // Dropping the handle's plans drops every one left, once.
        drop(plans);
        assert_eq!(drops.get(), PLANS + 1);
    }

    #[test]
    fn a_transposed_spmv_takes_x_of_the_rows_and_y_of_the_columns() {
        // A is 3x5.
        assert_eq!(spmv_shape(Op::N, (3, 5), 5, 3), Ok((3, 5)));
        assert_eq!(spmv_shape(Op::T, (3, 5), 3, 5), Ok((5, 3)));
        for (op, x, y) in [
            (Op::N, 3, 5),
            (Op::N, 5, 5),
            (Op::N, 4, 3),
            (Op::T, 5, 3),
            (Op::T, 3, 3),
            (Op::T, 3, 6),
            (Op::T, 2, 5),
        ] {
            assert!(spmv_shape(op, (3, 5), x, y).is_err(), "{op:?} x {x} y {y}");
        }
    }

    #[test]
    fn spmm_refuses_no_columns_short_buffers_and_overflowing_products() {
        // A is 3x5: B 5 x n, C 3 x n.
        assert_eq!(spmm_shape((3, 5), 2, 10, 6), Ok(()));
        assert_eq!(
            spmm_shape((3, 5), 2, 11, 7),
            Ok(()),
            "longer buffers are fine"
        );
        for (n, b, c) in [(0, 10, 6), (2, 9, 6), (2, 10, 5), (3, 10, 6)] {
            assert!(spmm_shape((3, 5), n, b, c).is_err(), "n {n} b {b} c {c}");
        }
        let big = i32::MAX as usize;
        assert!(
            spmm_shape((3, 5), big + 1, usize::MAX, usize::MAX).is_err(),
            "n past an int"
        );
        // k * n overflows usize: refused, not wrapped to a small product.
        assert!(spmm_shape((1, usize::MAX / 2), 4, usize::MAX, usize::MAX).is_err());
    }

    #[test]
    fn column_blocks_cover_every_column_once_each_within_the_kernels_grid_and_under_two_to_the_31_bytes()
     {
        // The GPU test's shape: 2 rows, 2^30 + 1 columns of f32: blocks of the grid's limit.
        let n = (1usize << 30) + 1;
        let blocks: Vec<_> = column_blocks(2, n, 4).collect();
        assert_eq!(blocks.len(), n.div_ceil(MAX_SPMM_COLUMNS));
        assert_eq!(blocks[0], (0, 65_535 * 16));
        assert_eq!(blocks[1], (65_535 * 16, 65_535 * 16));
        let last = (blocks.len() - 1) * MAX_SPMM_COLUMNS;
        assert_eq!(blocks[blocks.len() - 1], (last, n - last));
        // Tall operands: the 2^31-byte bound is the smaller.
        assert_eq!(
            column_blocks(1 << 20, 3000, 4).next(),
            Some((0, i32::MAX as usize / (4 << 20)))
        );
        for (rows, n, size) in [
            (1, 7, 4),
            (3, 1, 8),
            (97, 1000, 8),
            (1 << 20, 3000, 4),
            (i32::MAX as usize, 3, 8),
            (1, 5 * MAX_SPMM_COLUMNS + 3, 8),
        ] {
            let blocks: Vec<_> = column_blocks(rows, n, size).collect();
            let mut next = 0;
            for &(j0, nb) in &blocks {
                assert_eq!(j0, next, "in order, no gap");
                assert!(nb >= 1);
                assert!(
                    nb == 1 || rows * nb * size <= i32::MAX as usize,
                    "{rows}x{nb}x{size}"
                );
                assert!(nb <= MAX_SPMM_COLUMNS);
                next = j0 + nb;
            }
            assert_eq!(next, n, "every column");
        }
        // A small product is one block: the call it always was.
        assert_eq!(column_blocks(97, 61, 8).collect::<Vec<_>>(), [(0, 61)]);
    }
}
