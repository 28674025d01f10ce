//! The cuBLAS handle of one context, and the calls on `um`'s buffers.
//!
//! What one call costs on the host, on the common path (the handle bound to the call's stream
//! already, no capture open on the thread), besides cuBLAS's own routine:
//!
//! * thread-local reads only: not inside um's stream callback, no capture of um open on this
//!   thread (so no `cuThreadExchangeStreamCaptureMode`), the stream's id against the bound one;
//! * `cuCtxGetCurrent` (`Context::make_current`; `cuCtxSetCurrent` only where another context
//!   is current: another library, or another device's handle, may have changed it);
//! * on a created or the legacy stream nothing more: the handle's order
//!   (`StreamOrder::follow`) records the handle's last work on a stream when the handle
//!   leaves it (`cuEventRecord` there, `cuStreamWaitEvent` on the new stream), or `um`
//!   records it when the created stream's scope ends (one `cuEventRecord` per stream, before
//!   its `cuStreamDestroy`). On a per-thread or foreign stream, one `cuEventRecord` after
//!   each call (a move cannot record there: another thread's per-thread stream has no handle
//!   here, and a foreign stream may be gone once its scope ended).
//!
//! A reduction returned to the host adds one `cuStreamSynchronize` of the call's stream and
//! two `cublasSetPointerMode_v2` (device mode for the call, host mode after it). A move costs
//! `cuEventRecord` and `cuStreamWaitEvent` (a created stream already ended: the wait only),
//! `cublasSetStream_v2`, and, on the first call on a created stream, one `cuEventCreate` (the
//! stream's own event).

use std::cell::Cell;
use std::ffi::c_int;
use std::mem::ManuallyDrop;

use um_core::{
    AnyBitPattern, Context, DeviceCopy, Managed, NoUninit, PinnedWord, Storage, Stream, StreamKind,
    StreamOrder, StreamOwned,
};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::half::HalfElement;
use crate::library::Cublas;
use crate::result;
use crate::result::Reduce;
use crate::shape::{Gemm, Gemv, Level1, StridedBatched};
use crate::stream::BlasStream;
use crate::sys;

/// A cuBLAS handle (`cublasHandle_t`) of one [`Context`], created with `alpha` and `beta` read
/// from the host (`CUBLAS_POINTER_MODE_HOST`), destroyed on drop.
///
/// **Threads.** `Blas` is `Send` but not `Sync`: it may move to another thread, but no two
/// threads can use it at once, because its calls take `&self` and `&Blas` cannot cross a thread
/// boundary. A cuBLAS handle carries the stream it is bound to (`cublasSetStream_v2`) and its
/// workspace; two threads sharing one could interleave "bind to my stream" and "enqueue", and
/// one thread's GEMM would then run on the other's stream, on memory that stream does not own.
/// cuBLAS's documentation advises one handle per thread for that reason. So: one `Blas` per
/// thread (each for its own context and streams), as `examples/unified_memory_streams.rs` does.
/// The compiler refuses sharing one (`tests/ui/cublas/blas_shared_between_threads`).
///
/// **Streams.** Each call takes the stream it is enqueued on and buffers owned by that stream:
/// `&` for what cuBLAS reads, `&mut` for what it writes. It binds the handle to that stream
/// first (skipped when the handle is already bound to it: a stream's
/// [`id`](Stream::id) is never reused), so the handle serves every stream of its context, one
/// call after another. A handle that moves from one stream to another orders the new stream
/// after its own last call on the old one, on the device ([`StreamOrder::follow`]: an event
/// recorded on the old stream at the move, or at that stream's end if it ended first, waited
/// for by the new stream before the first call there): its workspace may still serve the old
/// stream's calls, and cuBLAS does not promise a workspace per stream. The calling thread does
/// not wait, so a move neither waits for the device nor disturbs a graph capture on another
/// thread. The cost is order: the new stream waits for everything queued on the old one before
/// the move (a long kernel, or a collective, included, also one queued after the handle's last
/// call there), and the two streams' cuBLAS calls run one after the other. For streams that
/// should run at once, make one `Blas` per stream. While the handle stays on one created or
/// legacy stream, a call makes no driver call but `cuCtxGetCurrent` and cuBLAS's own.
///
/// **Inside a capture closure**, a `Blas` on an eager stream works as anywhere else: its calls
/// run with the thread's capture mode relaxed ([`um_core::relaxed_while_capturing`]), because
/// cuBLAS loads its kernels lazily and a module load in thread-local mode would fail the
/// capture.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use um_core::{Context, Managed, StreamOptions};
/// use um_cublas::{Blas, Gemm};
///
/// let ctx = Context::new(0)?;
/// let blas = Blas::new(&ctx)?;
/// let a = Managed::from_fn(&ctx, 4 * 3, |i| i as f32)?; // 4x3, column-major
/// let b = Managed::from_fn(&ctx, 3 * 2, |i| i as f32)?; // 3x2
/// let c = Managed::<[f32]>::zeroed_slice(&ctx, 4 * 2)?; // 4x2
/// let c = ctx.with_stream(StreamOptions::new(), |s| {
///     let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
///     blas.gemm(s, &Gemm::new(4, 2, 3), &a, &b, &mut c)?; // c = a b, on s
///     c.sync()
/// })?;
/// println!("{:?}", &c[..]);
/// # Ok(()) }
/// ```
pub struct Blas {
    library: &'static Cublas,
    handle: sys::Handle,
    ctx: Context,
    /// The [`Stream::id`] of the stream the handle is bound to; 0 (no stream has it) for none;
    /// [`UNKNOWN_STREAM`] after a bind that failed; [`UNORDERED`] after a record that failed.
    /// A `Cell`: this is also what makes `Blas` `!Sync`.
    bound: Cell<u64>,
    /// The order of the handle's work across streams ([`StreamOrder::follow`] at each bind,
    /// [`StreamOrder::after_work`] after each call): the next stream waits for the work on the
    /// old one. Leaked with the handle where drop cannot destroy the handle.
    order: ManuallyDrop<StreamOrder>,
    /// Set where restoring host pointer mode after a device-result call failed: the next call
    /// sets host mode again first (and fails while it cannot), so no host scalar is ever read as
    /// a device address.
    mode_unknown: Cell<bool>,
    /// Set by [`Blas::raw_handle_on`] on a per-thread or foreign stream, whose work a move
    /// cannot record: until a call of `Blas` there records after itself, a move waits for the
    /// whole context.
    raw_pending: Cell<bool>,
    /// Where the reductions returned to the host (`dot`, `nrm2`, `asum`, `iamax`) have cuBLAS
    /// write their result, in device pointer mode ([`Blas::to_host`]); made at the first such
    /// call. Taken out for the call and put back only once the call's stream has been waited
    /// for, so no kernel can still write it here (a word whose wait failed is leaked instead).
    word: Cell<Option<PinnedWord>>,
}

// SAFETY: a cuBLAS handle may be used from any thread, one thread at a time (cuBLAS's "Thread
// Safety"); `Blas` is `!Sync` (the `Cell`, the raw pointer), so only its owner's thread uses it,
// and every use makes the handle's context current on that thread first. Nothing in it is tied
// to the thread that created it: the per-thread default stream is bound by its handle
// (`CU_STREAM_PER_THREAD`), which cuBLAS resolves on the calling thread, and its id differs
// per thread, so moving a `Blas` makes the next call bind again.
unsafe impl Send for Blas {}

impl Blas {
    /// A handle for `ctx`, with the process's cuBLAS ([`Cublas::load`]: `UM_CUBLAS_LIB`, then
    /// `libcublas.so.13`, ...). Fails with [`Error::NotFound`] where cuBLAS cannot be loaded,
    /// naming what was tried and what to install, and with [`Error::Status`] where
    /// `cublasCreate_v2` fails (no GPU, say).
    pub fn new(ctx: &Context) -> Result<Blas> {
        // `load` refuses inside um's stream callback, before the library's initialisers and
        // query run.
        Blas::with_library(ctx, Cublas::load()?)
    }

    /// A handle for `ctx` in the given library.
    pub fn with_library(ctx: &Context, library: &'static Cublas) -> Result<Blas> {
        let order = StreamOrder::new(ctx)?;
        ctx.make_current()?;
        let api = library.api();
        // Relaxed inside a capture closure: `cublasCreate_v2` allocates its workspace, which
        // the driver refuses on a capturing thread in thread-local mode, failing the capture.
        // The context is current, so the handle is made for it.
        let handle = um_core::relaxed_while_capturing(|| result::create(api))??;
        // From here on, drop destroys the handle.
        let blas = Blas {
            library,
            handle,
            ctx: ctx.clone(),
            bound: Cell::new(0),
            order: ManuallyDrop::new(order),
            mode_unknown: Cell::new(false),
            raw_pending: Cell::new(false),
            word: Cell::new(None),
        };
        um_core::relaxed_while_capturing(|| {
            // SAFETY: a live handle; host pointer mode is what every call below relies on (its
            // scalars are host locals).
            unsafe { result::set_pointer_mode_host(api, handle) }
        })??;
        Ok(blas)
    }

    /// The context the handle belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The library the handle was made by.
    pub fn library(&self) -> &'static Cublas {
        self.library
    }

    /// `C = alpha op(A) op(B) + beta C` on `stream` (`cublasSgemm_v2` for `f32`,
    /// `cublasDgemm_v2` for `f64`), with the shapes, transposes, scalars, layout and leading
    /// dimensions of `gemm`.
    ///
    /// `a`, `b` and `c` are owned by `stream` (the brand `'s`; a buffer of another stream of
    /// the same stream set is [`Error::StreamMismatch`]), of any storage: unified,
    /// coherent or mirrored (a mirror's device half; `c` is marked written, so its `sync`
    /// copies it back). `c` cannot be `a` or `b`: it is borrowed `&mut`, they `&`.
    ///
    /// Refused before cuBLAS runs, with nothing enqueued and nothing written:
    /// [`Error::Shape`] when a number does not fit cuBLAS's `int`, a leading dimension is less
    /// than its matrix's column (row-major: row) or zero, or a buffer is shorter than its matrix
    /// ([`Gemm::check`]); [`Error::ContextMismatch`] for a stream of another context;
    /// [`Error::StreamMismatch`]; `StreamPoisoned` (as [`Error::Um`]) on a poisoned stream, as
    /// for every call. What cuBLAS reports is [`Error::Status`]. The call is
    /// asynchronous: `sync` the buffers to see the result.
    ///
    /// The stream must be a [`BlasStream`]: not a graph's capture stream. A captured cuBLAS call would
    /// use the handle's workspace at every replay, which the graph does not hold (the handle may
    /// be dropped, or serve another stream, while the graph lives).
    pub fn gemm<'s, T: Element, K: BlasStream, MA: Storage, MB: Storage, MC: Storage>(
        &self,
        stream: &Stream<'s, K>,
        gemm: &Gemm<T>,
        a: &Managed<[T], StreamOwned<'s, K>, MA>,
        b: &Managed<[T], StreamOwned<'s, K>, MB>,
        c: &mut Managed<[T], StreamOwned<'s, K>, MC>,
    ) -> Result<()> {
        let call = gemm.resolve(a.len(), b.len(), c.len())?;
        owned_by(stream, a, "a")?;
        owned_by(stream, b, "b")?;
        owned_by(stream, c, "c")?;
        let (alpha, beta) = gemm.scalars();
        let (a, b) = (a.as_device_ptr(), b.as_device_ptr());
        // Marks a mirror written: from here on its `sync` copies back (conservative if the
        // call then fails).
        let mut c = c.as_device_ptr_mut();
        // Row-major: cuBLAS's A is the caller's b (C^T = B^T A^T).
        let (first, second) = if call.swap {
            (b.as_ptr(), a.as_ptr())
        } else {
            (a.as_ptr(), b.as_ptr())
        };
        let api = self.library.api();
        // SAFETY: (`run` makes the call after `enter`) the handle is live, made for this
        // stream's context (checked in `enter`, which made it current) and bound to this
        // stream, ordered after the handle's earlier calls on any other stream (`enter`), in
        // host pointer mode (`with_library`). Each pointer is the device address of a buffer
        // owned by `stream` (brand and id), so only work on this stream touches it, and it
        // stays allocated until that work is done (a stream-owned buffer's drop waits for its
        // stream). `resolve` checked every extent cuBLAS touches against the buffers' lengths:
        // A and B are read within `ld * (cols - 1) + rows` elements, C read and written within
        // its own. C is a different allocation from A and B (`&mut` against `&`), so nothing
        // cuBLAS reads is written by the call.
        self.run(stream, || unsafe {
            result::gemm(
                api,
                self.handle,
                &call,
                (alpha, beta),
                first,
                second,
                c.as_mut_ptr(),
            )
        })
    }

    /// `C = alpha op(A) op(B) + beta C` on `stream` with `A` and `B` of a half-precision type
    /// ([`F16`](crate::F16) or [`Bf16`](crate::Bf16)) and `C` of `f32`, the products summed in
    /// `f32` (`cublasGemmEx`, `CUBLAS_COMPUTE_32F`, `CUBLAS_GEMM_DEFAULT`). `gemm` is a
    /// [`Gemm<f32>`](Gemm): its `alpha` and `beta` are `f32`, and its shapes, transposes, layout
    /// and leading dimensions (in elements of each matrix's own type) are checked as for
    /// [`gemm`](Blas::gemm), whose rules this call follows in every other way too.
    pub fn gemm_ex<'s, H, K, MA, MB, MC>(
        &self,
        stream: &Stream<'s, K>,
        gemm: &Gemm<f32>,
        a: &Managed<[H], StreamOwned<'s, K>, MA>,
        b: &Managed<[H], StreamOwned<'s, K>, MB>,
        c: &mut Managed<[f32], StreamOwned<'s, K>, MC>,
    ) -> Result<()>
    where
        H: HalfElement,
        K: BlasStream,
        MA: Storage,
        MB: Storage,
        MC: Storage,
    {
        let call = gemm.resolve(a.len(), b.len(), c.len())?;
        owned_by(stream, a, "a")?;
        owned_by(stream, b, "b")?;
        owned_by(stream, c, "c")?;
        let (alpha, beta) = gemm.scalars();
        let (a, b) = (a.as_device_ptr(), b.as_device_ptr());
        let mut c = c.as_device_ptr_mut();
        let (first, second) = if call.swap {
            (b.as_ptr(), a.as_ptr())
        } else {
            (a.as_ptr(), b.as_ptr())
        };
        let api = self.library.api();
        // SAFETY: as in `gemm`: a live handle of this context bound to this stream in host
        // pointer mode, ordered after its earlier calls on other streams (`enter`); every buffer
        // owned by the stream; `resolve` checked every extent, in elements, against each
        // buffer's length in elements of its own type (`H` for A and B, `f32` for C), which is
        // what cuBLAS indexes by the data types `result::gemm_ex` passes; C a different
        // allocation from A and B (`&mut` against `&`).
        self.run(stream, || unsafe {
            result::gemm_ex(
                api,
                self.handle,
                &call,
                (alpha, beta),
                first,
                second,
                c.as_mut_ptr(),
            )
        })
    }

    /// `y = alpha op(A) x + beta y` on `stream` (`cublasSgemv_v2` for `f32`, `cublasDgemv_v2`
    /// for `f64`), unit strides. The same rules as [`gemm`](Blas::gemm): every buffer owned by
    /// `stream`, any storage, `y` written (`&mut`), the shapes checked first ([`Gemv::check`]).
    pub fn gemv<'s, T: Element, K: BlasStream, MA: Storage, MX: Storage, MY: Storage>(
        &self,
        stream: &Stream<'s, K>,
        gemv: &Gemv<T>,
        a: &Managed<[T], StreamOwned<'s, K>, MA>,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        y: &mut Managed<[T], StreamOwned<'s, K>, MY>,
    ) -> Result<()> {
        let call = gemv.resolve(a.len(), x.len(), y.len())?;
        owned_by(stream, a, "a")?;
        owned_by(stream, x, "x")?;
        owned_by(stream, y, "y")?;
        let (alpha, beta) = gemv.scalars();
        let (a, x) = (a.as_device_ptr(), x.as_device_ptr());
        let mut y = y.as_device_ptr_mut();
        let api = self.library.api();
        // SAFETY: as in `gemm`: a live handle of this context bound to this stream in host
        // pointer mode, ordered after the handle's earlier calls on any other stream (`enter`),
        // buffers owned by the stream, every extent checked by `resolve` (A within
        // `ld * (cols - 1) + rows`, x and y within their lengths at stride 1), and y a different
        // allocation from A and x.
        self.run(stream, || unsafe {
            result::gemv(
                api,
                self.handle,
                &call,
                (alpha, beta),
                a.as_ptr(),
                x.as_ptr(),
                y.as_mut_ptr(),
            )
        })
    }

    /// The raw `cublasHandle_t`, bound to `stream`, for a cuBLAS routine `um-cublas` does not
    /// wrap (find it with [`Cublas::symbol`]). The handle is made ready as for a call of
    /// `Blas`: its context current on this thread, bound to `stream`, in host pointer mode, and
    /// ordered after the handle's work on any other stream; later calls of `Blas` on other
    /// streams are ordered after the work the caller enqueues with it on `stream` (on a
    /// per-thread or foreign stream, where only a call records, by a wait for the whole context
    /// unless a call of `Blas` on `stream` comes first).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::ffi::{c_int, c_void};
    /// use um_core::{Context, Managed, StreamOptions};
    /// use um_cublas::Blas;
    ///
    /// // cublasSgeam: C = alpha op(A) + beta op(B), here the transpose of a 2x3 A.
    /// type Sgeam = unsafe extern "C" fn(
    ///     *mut c_void, c_int, c_int, c_int, c_int, *const f32, *const f32, c_int,
    ///     *const f32, *const f32, c_int, *mut f32, c_int,
    /// ) -> i32;
    /// let ctx = Context::new(0)?;
    /// let blas = Blas::new(&ctx)?;
    /// // SAFETY: cublasSgeam has this prototype (cublas_api.h).
    /// let geam: Sgeam = unsafe { std::mem::transmute(blas.library().symbol(c"cublasSgeam")?) };
    /// let a = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?; // 2x3
    /// let c = Managed::<[f32]>::zeroed_slice(&ctx, 6)?; // 3x2
    /// let c = ctx.with_stream(StreamOptions::new(), |s| {
    ///     let (a, mut c) = (a.attach(s)?, c.attach(s)?);
    ///     let (alpha, beta) = (1.0f32, 0.0f32);
    ///     let (pa, pc) = (a.as_device_ptr().as_ptr(), c.as_device_ptr_mut().as_mut_ptr());
    ///     // SAFETY: the handle is used here only, on `s`, left bound and in host pointer
    ///     // mode; A (2x3, lda 2) and C (3x2, ldc 3) lie within buffers `s` owns, and C
    ///     // overlaps neither input (B is A, unused with beta = 0).
    ///     let status = unsafe {
    ///         let h = blas.raw_handle_on(s)?;
    ///         geam(h, 1, 1, 3, 2, &alpha, pa, 2, &beta, pa, 2, pc, 3)
    ///     };
    ///     assert_eq!(status, 0);
    ///     c.sync()
    /// })?;
    /// assert_eq!(&c[..], &[1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// Until the next use of this `Blas` (any call, or its drop), the caller:
    /// * calls cuBLAS with the handle on this thread only, with this `Blas`'s context current,
    ///   and enqueues work with it on `stream` only: it does not rebind it
    ///   (`cublasSetStream_v2`), destroy it, or capture its calls into a graph;
    /// * leaves the handle as it found it: host pointer mode, cuBLAS's default workspace, and
    ///   no other setting um-cublas relies on (a setting it changes, it sets back before that
    ///   next use);
    /// * passes only device memory that work on `stream` may touch: buffers `stream` owns
    ///   (through `as_device_ptr`, `as_device_ptr_mut` for what the routine writes, within
    ///   their lengths, an output overlapping no input unless the routine allows it) or memory
    ///   of its own that stays allocated until `stream` has run the work, as
    ///   [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md) says;
    /// * never uses the handle after that next use, nor after `stream`'s scope has ended.
    pub unsafe fn raw_handle_on<K: BlasStream>(
        &self,
        stream: &Stream<'_, K>,
    ) -> Result<sys::Handle> {
        self.run(stream, || Ok(()))?;
        if !(K::CREATED || stream.as_raw().is_null()) {
            // A move cannot record a per-thread or foreign stream: until a call of `Blas` there
            // records after the caller's work, a move waits for the whole context.
            self.raw_pending.set(true);
        }
        Ok(self.handle)
    }

    /// `batch` GEMMs of one shape at fixed strides on `stream` (`cublasSgemmStridedBatched`
    /// for `f32`, `cublasDgemmStridedBatched` for `f64`): the `i`-th on the matrices starting
    /// `i * stride` elements into `a`, `b` and `c` ([`StridedBatched`], from
    /// [`Gemm::strided_batched`]). The rules of [`gemm`](Blas::gemm), and every stride, the
    /// batch and each buffer's length checked first ([`StridedBatched::check`]: the last
    /// matrix ends within its buffer, the outputs do not overlap).
    pub fn gemm_strided_batched<'s, T, K, MA, MB, MC>(
        &self,
        stream: &Stream<'s, K>,
        batched: &StridedBatched<T>,
        a: &Managed<[T], StreamOwned<'s, K>, MA>,
        b: &Managed<[T], StreamOwned<'s, K>, MB>,
        c: &mut Managed<[T], StreamOwned<'s, K>, MC>,
    ) -> Result<()>
    where
        T: Element,
        K: BlasStream,
        MA: Storage,
        MB: Storage,
        MC: Storage,
    {
        let call = batched.resolve(a.len(), b.len(), c.len())?;
        owned_by(stream, a, "a")?;
        owned_by(stream, b, "b")?;
        owned_by(stream, c, "c")?;
        let (alpha, beta) = batched.scalars();
        let (a, b) = (a.as_device_ptr(), b.as_device_ptr());
        let mut c = c.as_device_ptr_mut();
        let (first, second) = if call.gemm.swap {
            (b.as_ptr(), a.as_ptr())
        } else {
            (a.as_ptr(), b.as_ptr())
        };
        let api = self.library.api();
        // SAFETY: as in `gemm`, for each GEMM of the batch: `resolve` checked that the last
        // matrix of each buffer (`stride * (batch - 1) + extent`) ends within it, and that the C
        // matrices overlap one another nowhere (`stride_c >= extent` when `batch > 1`); C is a
        // different allocation from A and B (`&mut` against `&`).
        self.run(stream, || unsafe {
            result::gemm_strided_batched(
                api,
                self.handle,
                &call,
                (alpha, beta),
                first,
                second,
                c.as_mut_ptr(),
            )
        })
    }

    /// The dot product of `x` and `y` (`cublasSdot_v2`, `cublasDdot_v2`) over `v.n()`
    /// elements at their increments, returned to the host.
    ///
    /// **Blocking**: the result is on the host once the stream has run the call, so this waits
    /// for everything queued on `stream` before it. cuBLAS writes the result straight into a
    /// page-locked word of the handle (device pointer mode), and `um` reads it after one wait for
    /// the stream (`cuStreamSynchronize`): host pointer mode would copy it from the device after
    /// the call, a copy's latency more each time. Not on a thread that captures (inside a
    /// capture closure, where the wait would fail the capture): there it is
    /// `um_core::Error::InsideCapture` (as [`Error::Um`]) before any call. To keep the result
    /// on the device, without a wait, use [`dot_into`](Blas::dot_into).
    ///
    /// `x` and `y` are owned by `stream` and may be the same buffer (both are read).
    /// [`Error::Shape`] before cuBLAS runs where a length, an increment or a buffer does not fit
    /// ([`Level1::check`]).
    pub fn dot<'s, T: Element, K: BlasStream, MX: Storage, MY: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        y: &Managed<[T], StreamOwned<'s, K>, MY>,
    ) -> Result<T> {
        um_core::refuse_inside_capture("a cuBLAS result returned to the host")?;
        let call = v.resolve_xy(x.len(), y.len())?;
        owned_by(stream, x, "x")?;
        owned_by(stream, y, "y")?;
        let (x, y) = (x.as_device_ptr(), y.as_device_ptr());
        let api = self.library.api();
        // SAFETY: as in `gemm` (a live, bound, ordered handle; buffers owned by the stream);
        // `resolve_xy` checked that `x` and `y` hold `(n - 1) * inc + 1` elements; `out` is the
        // address of a page-locked word of this context, which `to_host` keeps until the stream
        // has run the call, and the call runs in device pointer mode (`to_host`).
        self.to_host(stream, |out| unsafe {
            result::dot(api, self.handle, &call, x.as_ptr(), y.as_ptr(), out)
        })
    }

    /// The dot product of `x` and `y`, written on the device into `result[0]`, a buffer of
    /// the same stream: no host wait (`CUBLAS_POINTER_MODE_DEVICE` for this call, host mode
    /// again after it). `sync` `result` to read it. The rules of [`dot`](Blas::dot); `result`
    /// must hold at least one element.
    pub fn dot_into<'s, T, K, MX, MY, MR>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        y: &Managed<[T], StreamOwned<'s, K>, MY>,
        result: &mut Managed<[T], StreamOwned<'s, K>, MR>,
    ) -> Result<()>
    where
        T: Element,
        K: BlasStream,
        MX: Storage,
        MY: Storage,
        MR: Storage,
    {
        let call = v.resolve_xy(x.len(), y.len())?;
        one_element(result.len())?;
        owned_by(stream, x, "x")?;
        owned_by(stream, y, "y")?;
        owned_by(stream, result, "result")?;
        let (x, y) = (x.as_device_ptr(), y.as_device_ptr());
        let mut r = result.as_device_ptr_mut();
        let api = self.library.api();
        self.run(stream, || {
            // SAFETY: as in `dot`; `r` is the device address of a buffer of at least one element
            // owned by the stream, a different allocation from `x` and `y` (`&mut` against `&`),
            // written by the stream's work; the call runs in device pointer mode (`device_result`).
            self.device_result(|| unsafe {
                result::dot(
                    api,
                    self.handle,
                    &call,
                    x.as_ptr(),
                    y.as_ptr(),
                    r.as_mut_ptr(),
                )
            })
        })
    }

    /// The Euclidean norm of `x` (`cublasSnrm2_v2`, `cublasDnrm2_v2`) over `v.n()` elements
    /// at `incx`, returned to the host: blocking, refused inside a capture, as
    /// [`dot`](Blas::dot).
    pub fn nrm2<'s, T: Element, K: BlasStream, MX: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
    ) -> Result<T> {
        self.reduce_to_host(stream, Reduce::Nrm2, v, x)
    }

    /// The Euclidean norm of `x`, written on the device into `result[0]`: no host wait, as
    /// [`dot_into`](Blas::dot_into).
    pub fn nrm2_into<'s, T: Element, K: BlasStream, MX: Storage, MR: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        result: &mut Managed<[T], StreamOwned<'s, K>, MR>,
    ) -> Result<()> {
        self.reduce_on_device(stream, Reduce::Nrm2, v, x, result)
    }

    /// The sum of the magnitudes of `x`'s elements (`cublasSasum_v2`, `cublasDasum_v2`),
    /// returned to the host: blocking, refused inside a capture, as [`dot`](Blas::dot).
    pub fn asum<'s, T: Element, K: BlasStream, MX: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
    ) -> Result<T> {
        self.reduce_to_host(stream, Reduce::Asum, v, x)
    }

    /// The sum of the magnitudes of `x`'s elements, written on the device into `result[0]`:
    /// no host wait, as [`dot_into`](Blas::dot_into).
    pub fn asum_into<'s, T: Element, K: BlasStream, MX: Storage, MR: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        result: &mut Managed<[T], StreamOwned<'s, K>, MR>,
    ) -> Result<()> {
        self.reduce_on_device(stream, Reduce::Asum, v, x, result)
    }

    /// The position of the first element of largest magnitude of `x` (`cublasIsamax_v2`,
    /// `cublasIdamax_v2`), returned to the host: `Some(i)` for the element `x[i * incx]`
    /// (0-based), `None` for `n = 0`. Blocking, refused inside a capture, as [`dot`](Blas::dot).
    pub fn iamax<'s, T: Element, K: BlasStream, MX: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
    ) -> Result<Option<usize>> {
        um_core::refuse_inside_capture("a cuBLAS result returned to the host")?;
        let call = v.resolve_x(x.len())?;
        owned_by(stream, x, "x")?;
        let x = x.as_device_ptr();
        let api = self.library.api();
        // SAFETY: as in `dot`, for `x` alone; `out` holds an `int`.
        let out: c_int = self.to_host(stream, |out| unsafe {
            result::iamax(api, self.handle, &call, x.as_ptr(), out)
        })?;
        // cuBLAS's index is 1-based; 0 only for n = 0.
        Ok(usize::try_from(out).ok().and_then(|i| i.checked_sub(1)))
    }

    /// The position of the first element of largest magnitude of `x`, written on the device
    /// into `result[0]` as cuBLAS gives it: 1-based (`x[(result[0] - 1) * incx]`), 0 for
    /// `n = 0`. No host wait, as [`dot_into`](Blas::dot_into).
    pub fn iamax_into<'s, T: Element, K: BlasStream, MX: Storage, MR: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        result: &mut Managed<[i32], StreamOwned<'s, K>, MR>,
    ) -> Result<()> {
        let call = v.resolve_x(x.len())?;
        one_element(result.len())?;
        owned_by(stream, x, "x")?;
        owned_by(stream, result, "result")?;
        let x = x.as_device_ptr();
        let mut r = result.as_device_ptr_mut();
        let api = self.library.api();
        self.run(stream, || {
            // SAFETY: as in `dot_into`, for `x` alone; `r` holds at least one `int` (`i32`).
            self.device_result(|| unsafe {
                result::iamax(api, self.handle, &call, x.as_ptr(), r.as_mut_ptr())
            })
        })
    }

    /// `y = alpha x + y` (`cublasSaxpy_v2`, `cublasDaxpy_v2`) over `v.n()` elements at their
    /// increments, `alpha` read on the host at the call; asynchronous. `y` is written (`&mut`),
    /// so it cannot be `x`.
    pub fn axpy<'s, T: Element, K: BlasStream, MX: Storage, MY: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        alpha: T,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        y: &mut Managed<[T], StreamOwned<'s, K>, MY>,
    ) -> Result<()> {
        let call = v.resolve_xy(x.len(), y.len())?;
        owned_by(stream, x, "x")?;
        owned_by(stream, y, "y")?;
        let x = x.as_device_ptr();
        let mut y = y.as_device_ptr_mut();
        let api = self.library.api();
        // SAFETY: as in `dot`; `y` is written, a different allocation from `x` (`&mut` against
        // `&`), checked to hold its strided extent.
        self.run(stream, || unsafe {
            result::axpy(api, self.handle, &call, alpha, x.as_ptr(), y.as_mut_ptr())
        })
    }

    /// `x = alpha x` (`cublasSscal_v2`, `cublasDscal_v2`) over `v.n()` elements at `incx`,
    /// `alpha` read on the host at the call; asynchronous.
    pub fn scal<'s, T: Element, K: BlasStream, MX: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        alpha: T,
        x: &mut Managed<[T], StreamOwned<'s, K>, MX>,
    ) -> Result<()> {
        let call = v.resolve_x(x.len())?;
        owned_by(stream, x, "x")?;
        let mut x = x.as_device_ptr_mut();
        let api = self.library.api();
        // SAFETY: as in `dot`, for `x` alone, written within its checked extent.
        self.run(stream, || unsafe {
            result::scal(api, self.handle, &call, alpha, x.as_mut_ptr())
        })
    }

    /// `y = x` (`cublasScopy_v2`, `cublasDcopy_v2`) over `v.n()` elements at their
    /// increments; asynchronous.
    pub fn copy<'s, T: Element, K: BlasStream, MX: Storage, MY: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        y: &mut Managed<[T], StreamOwned<'s, K>, MY>,
    ) -> Result<()> {
        let call = v.resolve_xy(x.len(), y.len())?;
        owned_by(stream, x, "x")?;
        owned_by(stream, y, "y")?;
        let x = x.as_device_ptr();
        let mut y = y.as_device_ptr_mut();
        let api = self.library.api();
        // SAFETY: as in `axpy`.
        self.run(stream, || unsafe {
            result::copy(api, self.handle, &call, x.as_ptr(), y.as_mut_ptr())
        })
    }

    /// `x` and `y` exchanged (`cublasSswap_v2`, `cublasDswap_v2`) over `v.n()` elements at
    /// their increments; asynchronous. Both are `&mut`, so they are two buffers.
    pub fn swap<'s, T: Element, K: BlasStream, MX: Storage, MY: Storage>(
        &self,
        stream: &Stream<'s, K>,
        v: &Level1,
        x: &mut Managed<[T], StreamOwned<'s, K>, MX>,
        y: &mut Managed<[T], StreamOwned<'s, K>, MY>,
    ) -> Result<()> {
        let call = v.resolve_xy(x.len(), y.len())?;
        owned_by(stream, x, "x")?;
        owned_by(stream, y, "y")?;
        let mut x = x.as_device_ptr_mut();
        let mut y = y.as_device_ptr_mut();
        let api = self.library.api();
        // SAFETY: as in `dot`; both written within their checked extents, two allocations
        // (two `&mut`).
        self.run(stream, || unsafe {
            result::swap(api, self.handle, &call, x.as_mut_ptr(), y.as_mut_ptr())
        })
    }

    /// `nrm2` and `asum` to the host.
    fn reduce_to_host<'s, T: Element, K: BlasStream, MX: Storage>(
        &self,
        stream: &Stream<'s, K>,
        which: Reduce,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
    ) -> Result<T> {
        um_core::refuse_inside_capture("a cuBLAS result returned to the host")?;
        let call = v.resolve_x(x.len())?;
        owned_by(stream, x, "x")?;
        let x = x.as_device_ptr();
        let api = self.library.api();
        // SAFETY: as in `dot`, for `x` alone.
        self.to_host(stream, |out| unsafe {
            result::reduce(api, self.handle, which, &call, x.as_ptr(), out)
        })
    }

    /// A reduction's result on the host: `routine` (a call with this handle that writes one
    /// `R` at the address it is given, in device pointer mode) runs on `stream` with the
    /// handle's page-locked word as its result, then the stream is waited for and the word read.
    /// The word is zeroed first, so a call that writes nothing (`n = 0`) gives 0. A call never
    /// handed the word (refused before cuBLAS) leaves it as it was; where the call failed after
    /// it was handed, the stream is still waited for (a failed call may have enqueued part of
    /// its work) and the call's error returned; where that wait fails, the word is leaked, never
    /// read, reused or freed, since the work may still write it. A stream poisoned by the end
    /// of the wait gives `StreamPoisoned`, as its buffers' `sync` does, and its word is leaked.
    fn to_host<K: BlasStream, R: DeviceCopy + AnyBitPattern + NoUninit>(
        &self,
        stream: &Stream<'_, K>,
        routine: impl FnOnce(*mut R) -> Result<()>,
    ) -> Result<R> {
        let word = match self.word.take() {
            Some(word) => word,
            None => PinnedWord::new(&self.ctx)?,
        };
        // SAFETY: no device work writes the word: each call handed it waited for its stream
        // before the word was put back (a word whose wait failed was leaked).
        unsafe { word.write(R::zeroed()) };
        let mut handed = false;
        let called = self.run(stream, || {
            handed = true;
            self.device_result(|| routine(word.as_device_ptr::<R>()))
        });
        if !handed {
            // `run` refused before the call (it calls `routine` otherwise): nothing has the word.
            self.word.set(Some(word));
            return called.map(|()| R::zeroed());
        }
        if let Err(waited) = stream.wait_idle() {
            word.leak();
            return Err(called.err().unwrap_or(waited.into()));
        }
        // Poisoned during the wait (a communicator aborted by another thread): the stream's
        // memory may still be written by other agents, so nothing computed from it reaches the
        // CPU, as `sync` gives none of its buffers back. The word goes with the stream's memory.
        if stream.is_poisoned() {
            word.leak();
            return Err(called
                .err()
                .unwrap_or(um_core::Error::StreamPoisoned.into()));
        }
        // SAFETY: the stream has run everything queued on it, the call's work included, and
        // nothing else was handed the word.
        let out = unsafe { word.read::<R>() };
        self.word.set(Some(word));
        called.map(|()| out)
    }

    /// `nrm2` and `asum` into a device buffer.
    fn reduce_on_device<'s, T: Element, K: BlasStream, MX: Storage, MR: Storage>(
        &self,
        stream: &Stream<'s, K>,
        which: Reduce,
        v: &Level1,
        x: &Managed<[T], StreamOwned<'s, K>, MX>,
        result: &mut Managed<[T], StreamOwned<'s, K>, MR>,
    ) -> Result<()> {
        let call = v.resolve_x(x.len())?;
        one_element(result.len())?;
        owned_by(stream, x, "x")?;
        owned_by(stream, result, "result")?;
        let x = x.as_device_ptr();
        let mut r = result.as_device_ptr_mut();
        let api = self.library.api();
        self.run(stream, || {
            // SAFETY: as in `dot_into`, for `x` alone.
            self.device_result(|| unsafe {
                result::reduce(api, self.handle, which, &call, x.as_ptr(), r.as_mut_ptr())
            })
        })
    }

    /// Runs `routine` (a call that takes its result as a device pointer) with the handle in
    /// device pointer mode, and sets host mode again after it, whatever its status. Where that
    /// fails, the handle is marked (`mode_unknown`) and the next call sets host mode first.
    /// Called inside `run`, with the context current.
    fn device_result(&self, routine: impl FnOnce() -> Result<()>) -> Result<()> {
        let api = self.library.api();
        // Marked first: if anything below fails or unwinds, host mode is set again before the
        // next call.
        self.mode_unknown.set(true);
        // SAFETY: a live handle, its context current; the only call made in device mode is
        // `routine`, whose result pointer is a device address (the caller's `unsafe`).
        unsafe { result::set_pointer_mode_device(api, self.handle) }?;
        let called = routine();
        // SAFETY: a live handle, its context current.
        if unsafe { result::set_pointer_mode_host(api, self.handle) }.is_ok() {
            self.mode_unknown.set(false);
        }
        called
    }

    /// Binds the handle to `stream` ([`enter`](Blas::enter)), makes the call `routine`, and
    /// tells the handle's order about it, all with the thread's capture mode relaxed inside a
    /// capture closure ([`um_core::relaxed_while_capturing`]: cuBLAS's first use of a kernel
    /// loads its module). `routine` must be a call with this handle (the caller's `unsafe`).
    fn run<K: BlasStream>(
        &self,
        stream: &Stream<'_, K>,
        routine: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        // Inside um's stream callback: `InsideDriverCallback`, also where the whole-context
        // path would have said `CaptureInProgress`.
        um_core::refuse_inside_stream_callback("a cuBLAS call")?;
        // A poisoned stream's work was aborted half-done: another agent may still touch the
        // memory it owns, so no work joins it, as um's launches refuse it (before any bind).
        if stream.is_poisoned() {
            return Err(um_core::Error::StreamPoisoned.into());
        }
        um_core::relaxed_while_capturing(|| {
            self.enter(stream)?;
            if self.mode_unknown.get() {
                // SAFETY: a live handle, its context current (`enter`).
                unsafe { result::set_pointer_mode_host(self.library.api(), self.handle) }?;
                self.mode_unknown.set(false);
            }
            // Until the order knows of the call, a later move cannot order itself after it,
            // and must wait for the whole context instead (`UNORDERED`): so also if anything
            // between here and `after_work` unwound (nothing can today).
            self.bound.set(UNORDERED);
            let called = routine();
            // Whatever the status: a failed call may have enqueued part of its work. On a
            // created or the legacy stream no driver call: the move records (`enter`); on a
            // per-thread or foreign stream, one `cuEventRecord`.
            if self.order.after_work(stream).is_ok() {
                self.bound.set(stream.id());
                // The record (or the move's, on a created or the legacy stream) covers the raw
                // calls made before this one.
                self.raw_pending.set(false);
            }
            called
        })?
    }

    /// Checks the stream's context, makes it current, and binds the handle to the stream
    /// unless it already is, ordered after the handle's last work on any other stream.
    fn enter<K: BlasStream>(&self, stream: &Stream<'_, K>) -> Result<()> {
        if !stream.context().same_as(&self.ctx) {
            return Err(Error::ContextMismatch);
        }
        let id = stream.id();
        if self.bound.get() == id {
            // The common path: `cuCtxGetCurrent` (and `cuCtxSetCurrent` only where another
            // context is current), nothing else.
            return Ok(self.ctx.make_current()?);
        }
        let api = self.library.api();
        let (handle, raw) = (self.handle, stream.as_raw());
        // The bind, made below after `make_current` or inside the idle section (which makes
        // the context current before its closure).
        let bind = || {
            // SAFETY: a live handle, and a live stream of its context (borrowed for this
            // call), with the context current (see above). The handle stays bound to the stream
            // after the call, possibly past the stream's life; that is harmless because every
            // call binds again first (ids are never reused, so a cached id never names a
            // destroyed stream's successor), and drop unbinds before it destroys the handle.
            unsafe { result::set_stream(api, handle, raw) }
        };
        // A move (or a first bind, or a bind after one that failed): the handle's workspace
        // may still serve its calls on the stream it was bound to, and cuBLAS does not promise
        // that its default workspace pool is per stream. So the new stream waits, on the
        // device, for all the work queued on that stream before now (`StreamOrder::follow`:
        // recorded now while that stream lives, else at its end, which `um` records for a
        // created stream the order follows; after each call on a per-thread or foreign one),
        // even if that stream is gone now: every cuBLAS call enqueued here after the wait runs
        // after every earlier one of the handle. The calling thread does not wait, so no
        // capture can be disturbed, and none needs to wait for this move. A first bind waits
        // for nothing; it must also go through while another thread captures (one `Blas` per
        // stream, made beside captures), so um relies here on `cublasSetStream_v2` neither
        // waiting for the device nor freeing memory in use (docs/interop.md, "What the types
        // cannot see").
        let ordered = self.bound.get() != UNORDERED
            && !self.raw_pending.get()
            && self.order.follow(stream)?;
        let bound = if ordered {
            // The order follows `stream` from here on, while the handle is still bound to the
            // old one: until the bind below succeeds, no call may take the fast path on the
            // old stream (its work would be after the record the order holds), so the next
            // call follows again, whatever its stream.
            self.bound.set(UNKNOWN_STREAM);
            self.ctx.make_current()?;
            bind()
        } else {
            // The handle's last work could not be recorded: its workspace may still be in use
            // on a stream that may be gone (its handle reused), so the barrier is the whole
            // context, as before `StreamOrder`. Not while a capture of um is in progress on the
            // device or this thread, or waits to begin: the wait would fail it (refused there,
            // before any CUDA call). The bind is made inside the section, so that no capture
            // can begin between the wait and it.
            match self.ctx.with_idle_unless_capturing(bind)? {
                Some(bound) => bound,
                None => return Err(Error::CaptureInProgress),
            }
        };
        // Until the bind is known to have succeeded, the handle's stream is unknown: a failed
        // bind may have switched it (or its workspace) anyway, so the next call orders itself
        // and binds again, whatever its stream.
        self.bound.set(UNKNOWN_STREAM);
        bound?;
        if !ordered {
            // Ordered by the wait for the context: the order follows this stream from now on.
            // If it cannot (the stream's event could not be made), the next call waits for the
            // context again.
            if let Err(e) = self.order.restart(stream) {
                self.bound.set(UNORDERED);
                return Err(e.into());
            }
            self.raw_pending.set(false);
        }
        self.bound.set(id);
        Ok(())
    }
}

/// [`Blas::bound`] after a bind that failed: no stream's id (ids count up from 1 and are never
/// reused), and not 0 (never bound, which skips the order).
const UNKNOWN_STREAM: u64 = u64::MAX;

/// [`Blas::bound`] after a call the order may not know of (its record failed): no stream's id
/// either; the next call waits for the whole context before it binds.
const UNORDERED: u64 = u64::MAX - 1;

/// A device result needs one element.
fn one_element(len: usize) -> Result<()> {
    if len == 0 {
        return Err(crate::ShapeError::BufferTooShort {
            buffer: "result",
            len,
            needed: 1,
            what: "one result".to_owned(),
        }
        .into());
    }
    Ok(())
}

/// [`Error::StreamMismatch`] unless `stream` owns `buffer` (the brand already guarantees it,
/// except between the streams of one stream set).
fn owned_by<'s, T, K: StreamKind, M: Storage>(
    stream: &Stream<'s, K>,
    buffer: &Managed<[T], StreamOwned<'s, K>, M>,
    name: &'static str,
) -> Result<()> {
    if stream.owns(buffer) {
        Ok(())
    } else {
        Err(Error::StreamMismatch { buffer: name })
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // A handle destroyed with another context current could release the wrong resources:
        // if the context cannot be made current (inside um's stream callback, say), leak it.
        if self.ctx.make_current().is_err() {
            return;
        }
        // Our calls may still run and use the handle's workspace. `cublasDestroy_v2` waits for
        // the device itself, but that wait fails while a capture is in progress on the context
        // (another thread) or on this thread, and cuBLAS does not say what it frees then. So
        // wait first, through um, which never does so while a capture of um is in progress or
        // waits to begin, and destroy inside its idle section, before any capture of um can
        // begin (the destroy's own wait then cannot fail one either).
        // Where a capture stands in the way, the destroy is not given up (that leaked the
        // handle and its workspace): um keeps it, and the thread that ends the last such
        // capture makes it, after the same wait. After the wait no kernel of this handle can
        // still run: it is being dropped, so nothing enqueues more.
        let api = self.library.api();
        let handle = Handle(self.handle);
        // SAFETY: `order` is taken only here, once, and never used after (this is drop).
        let order = unsafe { ManuallyDrop::take(&mut self.order) };
        let destroy = move || {
            let handle = handle;
            // SAFETY: the handle is live and destroyed only here. It is first unbound from the
            // last stream, which may be gone. Every call made with it has completed (the wait
            // before this closure runs), so no kernel of ours still uses its workspace when
            // `cublasDestroy_v2` frees it; the device's context is current (the wait made it).
            // Errors are ignored: drop never panics.
            let _ = unsafe { result::destroy(api, handle.0) };
            // The order's event goes with the handle.
            drop(order);
        };
        // `Err` (the wait failed): the closure is dropped unrun, and the handle leaked with it.
        let _ = self.ctx.with_idle_after_captures(destroy);
    }
}

/// The handle, moved into the destroy that `Blas`'s drop may leave to another thread.
struct Handle(sys::Handle);

// SAFETY: a cuBLAS handle may be used from any thread, one thread at a time (cuBLAS's "Thread
// Safety"); the only use of this one is its destroy, once, by whichever thread runs it.
unsafe impl Send for Handle {}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blas")
            .field("device", &self.ctx.info().ordinal)
            .field("library", &self.library.path())
            .field("version", &self.library.version())
            .finish()
    }
}
