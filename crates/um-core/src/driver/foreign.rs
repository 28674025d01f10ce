//! Streams made by another library (a cudarc stream, a PyTorch stream, cuBLAS's): `um`'s brands
//! and transitions on a `CUstream` it did not create, for the length of one closure
//! (`Context::with_foreign_stream`, [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md)).

use std::ffi::c_void;
use std::marker::PhantomData;

use crate::driver;
use crate::driver::context::Context;
use crate::driver::context::next_stream_id;
use crate::driver::stream::{Attachable, Eager, Stream, StreamKind, Transfer};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::sealed::Sealed;

/// A stream that another library created and owns: `um` attaches memory to it, launches on it
/// and waits for it like a [`Created`](crate::Created) stream, but never destroys it. Made only by
/// [`Context::with_foreign_stream`].
#[derive(Debug)]
pub struct Foreign {
    _private: PhantomData<()>,
}

impl Sealed for Foreign {}
impl StreamKind for Foreign {
    const CREATED: bool = false;
    const NAME: &'static str = "foreign";
}
impl Eager for Foreign {}
impl Attachable for Foreign {}

impl Context {
    /// Runs `f` with `handle`, a stream another library made in this context, as a branded
    /// `um` stream: memory attached to it carries its brand, launches and library calls on it
    /// take that memory, and `sync` waits for it, as on a stream of
    /// [`with_stream`](Context::with_stream). `um` never destroys it.
    ///
    /// Refused with [`Error::InvalidForeignStream`] before `f` runs: a null handle (the legacy
    /// stream: use [`with_legacy_stream`](Context::with_legacy_stream)), the special handles
    /// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` (use
    /// [`with_per_thread_stream`](Context::with_per_thread_stream)), and a stream of another
    /// context (asked of the driver, `cuStreamGetCtx`).
    ///
    /// # Safety
    /// * `handle` is a stream (`CUstream`) that is not destroyed before `f` returns: the library
    ///   that made it keeps it alive for the whole call.
    /// * While `f` runs, work that other code enqueues on the stream touches no memory that
    ///   `um` owns, except through pointers `um` gave it
    ///   ([`Managed::as_device_ptr`](crate::Managed::as_device_ptr)), under their own contract.
    /// * The stream takes no part in a stream capture (a CUDA graph) while `f` runs: nobody
    ///   begins one on it, and nobody makes it join one, as an event wait on an event recorded
    ///   in a capturing stream does (PyTorch's `wait_stream` from a capture stream). A stream
    ///   that is already capturing when the call begins is refused:
    ///   [`Error::InvalidForeignStream`].
    ///
    /// Work the other library enqueued before or during `f` is ordered with `um`'s as the
    /// stream orders it; `sync` in `f` waits for all of it.
    pub unsafe fn with_foreign_stream<R>(
        &self,
        handle: *mut c_void,
        f: impl for<'s> FnOnce(&Stream<'s, Foreign>) -> Result<R>,
    ) -> Result<R> {
        let handle: sys::CUstream = handle.cast();
        if handle.is_null()
            || handle == sys::STREAM_LEGACY_HANDLE
            || handle == sys::STREAM_PER_THREAD
        {
            return Err(Error::InvalidForeignStream {
                reason: "a special handle (NULL, CU_STREAM_LEGACY or CU_STREAM_PER_THREAD), not a stream of its own",
            });
        }
        self.bind()?;
        // SAFETY: `handle` is a live stream (the caller's guarantee).
        let owner = unsafe { driver::stream_context(handle) }?;
        if !self.is(owner) {
            return Err(Error::InvalidForeignStream {
                reason: "a stream of another context",
            });
        }
        // A stream another library is capturing (PyTorch's `torch.cuda.graph`, say) would record
        // `um`'s launches and library calls into a graph that holds none of their buffers,
        // modules or workspaces.
        // SAFETY: `handle` is a live stream of this context (checked above).
        if unsafe { driver::stream_is_capturing(handle) }? {
            return Err(Error::InvalidForeignStream {
                reason: "a stream that is being captured into a graph",
            });
        }
        // A fresh id: `RawStream`'s identity invariant holds (equal ids, one stream), and two
        // scopes on one handle only cost a redundant event or attach.
        let stream: Stream<'_, Foreign> =
            Stream::from_raw(self, handle, next_stream_id(), Transfer::OnDemand);
        f(&stream)
    }
}
