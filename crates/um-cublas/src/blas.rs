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
//! Before, every call recorded an event after itself (`cuEventRecord` plus a second
//! `cuCtxGetCurrent`), on every stream. A move costs `cuEventRecord` and `cuStreamWaitEvent`
//! (a created stream already ended: the wait only), `cublasSetStream_v2`, and, on the first
//! call on a created stream, one `cuEventCreate` (the stream's own event).

use std::cell::Cell;
use std::mem::ManuallyDrop;

use um_core::{Context, Managed, Storage, Stream, StreamKind, StreamOrder, StreamOwned};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::library::Cublas;
use crate::result;
use crate::shape::{Gemm, Gemv};
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
    /// [`Error::StreamMismatch`]. What cuBLAS reports is [`Error::Status`]. The call is
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
        um_core::relaxed_while_capturing(|| {
            self.enter(stream)?;
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
        let ordered = self.bound.get() != UNORDERED && self.order.follow(stream)?;
        let bound = if ordered {
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
