//! Streams, each with a brand `'s` that no other stream shares.
//!
//! A stream exists only inside a closure that is generic over its brand
//! (`for<'s> FnOnce(&Stream<'s, _>)`), the idea of ghost-cell's `GhostToken::new`. Inside the
//! closure `'s` is a lifetime the compiler knows nothing about, so it cannot be unified with the
//! brand of any other stream, cannot appear in the closure's result, and cannot outlive the
//! stream. Memory attached to the stream carries the brand (`Managed<T, StreamOwned<'s>>`);
//! that is how the compiler knows which stream a buffer belongs to and that it never outlives
//! its stream.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::driver;
use crate::driver::context::{Context, keep_for_capture_end, next_stream_id, thread_is_capturing};
use crate::driver::event::{Event, StreamEvent};
use crate::driver::poison::{PoisonFlag, Poisoner};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::sealed::Sealed;

/// An invariant lifetime: `Brand<'a>` and `Brand<'b>` are the same type only when `'a == 'b`.
pub(crate) type Brand<'s> = PhantomData<fn(&'s ()) -> &'s ()>;

/// The kinds of stream: [`Created`], [`PerThread`] and [`Legacy`]. Sealed.
pub trait StreamKind: Sealed + 'static {
    /// Whether `um` created the stream and destroys it at the end of its scope.
    #[doc(hidden)]
    const CREATED: bool;
    /// What the kind is called in messages.
    #[doc(hidden)]
    const NAME: &'static str;
    /// Whether the stream records work into a graph instead of running it ([`Capture`]).
    #[doc(hidden)]
    const CAPTURING: bool = false;
}

/// The stream kinds whose work runs as it is enqueued: every kind but [`Capture`]. Sealed.
///
/// Only work that runs can be waited for: `sync`, `sync_all`, `sync_async`,
/// [`Stream::wait_idle`] and [`Stream::is_idle`] need an eager stream, and `hand_off` moves
/// memory between eager streams only (inside a capture, `hand_off` between capture streams is a
/// fork of the graph instead).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an eager stream kind: the host cannot wait for its work, which is not run as it is enqueued",
    label = "not an eager stream (a capture stream records its work into a graph)",
    note = "inside a capture, launches are recorded; nothing runs until the graph is launched, so there is nothing to wait for (the driver refuses the wait and invalidates the capture)",
    note = "return the buffers from the capture closure; replay with `graph.launch(stream)` and get them back with `graph.sync()`"
)]
pub trait Eager: StreamKind {}

/// The stream kinds memory may be attached to: [`Created`], [`PerThread`] and
/// [`Foreign`](crate::Foreign). Sealed.
///
/// [`Legacy`] is not one: attaching memory singly to the NULL stream is illegal (the driver
/// returns `CUDA_ERROR_INVALID_VALUE`), because it is a virtual, global stream and not a
/// specific one. Nor is [`Capture`]: an attach cannot be captured.
#[diagnostic::on_unimplemented(
    message = "memory cannot be attached to the {Self} stream",
    label = "this stream accepts kernel launches but no attached memory",
    note = "the legacy (NULL) default stream: the driver rejects CU_MEM_ATTACH_SINGLE on it, because it is a virtual global stream, not a specific one; for kernels on it, use `attach_global` (CU_MEM_ATTACH_GLOBAL, the association the NULL stream accepts)",
    note = "a capture stream: cuStreamAttachMemAsync cannot be captured (the driver refuses it and invalidates the capture); buffers enter a capture as its buffer set (`stream.capture(buffers, ..)`), attached to the eager stream first",
    note = "attach to a stream of your own (`Context::with_stream`) or to the per-thread default stream (`Context::with_per_thread_stream`)"
)]
pub trait Attachable: Eager {}

/// A stream `um` created (`cuStreamCreateWithPriority`) and destroys when its scope ends.
#[derive(Debug)]
pub struct Created {
    _private: (),
}

/// The calling thread's default stream (`CU_STREAM_PER_THREAD`).
///
/// The same handle names a different stream on every thread, so a `Stream<'s, PerThread>` and
/// memory attached to it must stay on the thread that made them: this type is neither `Send`
/// nor `Sync`.
#[derive(Debug)]
pub struct PerThread {
    _not_send_not_sync: PhantomData<*const PerThreadStreamIsThreadLocal>,
}

/// Never made: named only so that the compiler's refusal to move per-thread work to another
/// thread says why. A raw pointer is neither `Send` nor `Sync`, and the compiler names the
/// innermost type that lacks the trait, so the error reads "`*const
/// PerThreadStreamIsThreadLocal` cannot be sent between threads safely" rather than "`*const
/// ()` ..." (`tests/ui/threads/send_per_thread_memory`).
#[derive(Debug)]
pub enum PerThreadStreamIsThreadLocal {}

/// The legacy default stream (the NULL stream). Kernels may run on it, with its implicit
/// synchronization with every blocking stream. Memory cannot be attached to it singly; it can
/// be attached globally with [`Managed::attach_global`](crate::Managed::attach_global).
#[derive(Debug)]
pub struct Legacy {
    _private: (),
}

/// A stream that records work into a graph (`cuStreamBeginCapture`): the stream of a capture
/// scope ([`Stream::capture`](crate::Stream::capture)), made and destroyed by the scope. Launches
/// on it are recorded, not run; the host cannot wait for it ([`Eager`] is not implemented), and
/// no memory can be attached to it ([`Attachable`] is not either): buffers enter a capture only
/// as the scope's buffer set.
///
/// Neither `Send` nor `Sync`: a capture in thread-local mode must end on the thread that began
/// it, and the buffers of a capture must be dropped (if they are) on that thread.
#[derive(Debug)]
pub struct Capture {
    _not_send_not_sync: PhantomData<*const CaptureStaysOnItsThread>,
}

/// Never made: the name the compiler gives when capture work is moved to another thread, as
/// [`PerThreadStreamIsThreadLocal`] does for the per-thread stream ("`*const
/// CaptureStaysOnItsThread` cannot be sent between threads safely").
#[derive(Debug)]
pub enum CaptureStaysOnItsThread {}

impl Sealed for Created {}
impl Sealed for PerThread {}
impl Sealed for Legacy {}
impl Sealed for Capture {}
impl StreamKind for Created {
    const CREATED: bool = true;
    const NAME: &'static str = "created";
}
impl StreamKind for PerThread {
    const CREATED: bool = false;
    const NAME: &'static str = "per-thread";
}
impl StreamKind for Legacy {
    const CREATED: bool = false;
    const NAME: &'static str = "legacy";
}
impl StreamKind for Capture {
    const CREATED: bool = true;
    const NAME: &'static str = "capture";
    const CAPTURING: bool = true;
}
impl Eager for Created {}
impl Eager for PerThread {}
impl Eager for Legacy {}
impl Attachable for Created {}
impl Attachable for PerThread {}

/// A driver stream handle and the identity `um` gives it.
///
/// **The identity invariant:** two `RawStream`s with equal ids name the same driver stream of
/// the same context. Every comparison of streams in `um` (the same-stream shortcut of
/// `hand_off` and `attach`, the owner checks of launches and `sync_all`) compares ids and
/// nothing else, so this one invariant is what makes them sound. The converse need not hold:
/// two ids may name one stream (two `Context` handles of one device see the same per-thread
/// and legacy streams under different ids), which costs at most a redundant event or attach.
///
/// * A created stream's id is drawn once, when `um` creates it, and never reused (the driver
///   reuses handles once a stream is destroyed; ids never are).
/// * The per-thread default stream (`CU_STREAM_PER_THREAD`) names a different stream on every
///   thread *and in every context*: its id is drawn per (thread, [`Context`] handle), see
///   [`per_thread_stream_id`].
/// * The legacy default stream (NULL) names one stream per context: its id is drawn per
///   `Context` handle, when the handle is made.
///
/// Managed memory remembers the id of the stream it is associated with, which is how a
/// re-attach to the same stream skips the driver call.
///
/// Public only because the storages' hidden contract (`storage::parts::HasParts`) names it; it
/// lives in a private module, and its fields are the crate's.
#[allow(unreachable_pub)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStream {
    pub(crate) handle: sys::CUstream,
    pub(crate) id: u64,
    /// The stream's transfer policy.
    pub(crate) transfer: Transfer,
    /// The stream's event and context (see [`RawStream::events`]); null for `NONE`.
    events: *const StreamEvent,
}

impl RawStream {
    /// No stream: the association of freshly allocated memory (host).
    pub(crate) const NONE: RawStream = RawStream {
        handle: std::ptr::null_mut(),
        id: 0,
        transfer: Transfer::OnDemand,
        events: std::ptr::null(),
    };
    /// The event (and context) of the stream this handle came from; `None` for `NONE`.
    ///
    /// # Safety
    /// The [`Stream`] this handle was taken from is alive for `'x`. Memory in state
    /// `StreamOwned<'s, _>` guarantees it for its owning stream: the brand `'s` cannot outlive
    /// the stream's closure, and the `Stream` (which owns the `Arc`) lives until that closure
    /// returns.
    pub(crate) unsafe fn events<'x>(&self) -> Option<&'x StreamEvent> {
        // SAFETY: non-null pointers come from `Arc::as_ptr` of the stream's `Arc`, alive for
        // 'x (the caller's guarantee); `StreamEvent` is only ever shared (`&`).
        unsafe { self.events.as_ref() }
    }

    /// Whether the stream is poisoned (`driver/poison.rs`); `false` for `NONE`.
    ///
    /// # Safety
    /// As for [`RawStream::events`]: the stream this handle came from is alive.
    pub(crate) unsafe fn is_poisoned(&self) -> bool {
        // SAFETY: the caller's guarantee.
        unsafe { self.events() }.is_some_and(StreamEvent::is_poisoned)
    }

    /// The stream's poison mark, to keep with memory it gives up; `None` for `NONE`.
    ///
    /// # Safety
    /// As for [`RawStream::events`].
    pub(crate) unsafe fn poison_flag(&self) -> Option<Arc<PoisonFlag>> {
        // SAFETY: the caller's guarantee.
        unsafe { self.events() }.map(|e| Arc::clone(e.poison()))
    }
}

// SAFETY: a stream handle is an opaque token the driver accepts from any thread.
unsafe impl Send for RawStream {}
// SAFETY: as above; RawStream is an immutable Copy value.
unsafe impl Sync for RawStream {}

thread_local! {
    /// The per-thread stream ids this thread has drawn, by context id.
    static PER_THREAD_IDS: std::cell::RefCell<Vec<(u64, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The id of the calling thread's default stream in the context whose (never reused) id is
/// `context`: drawn on first use, the same for every later call on this thread with this
/// context, and different from every id of every other thread and context.
///
/// `CU_STREAM_PER_THREAD` is one handle, but it names another stream on every thread and in
/// every context. An id per thread alone made the per-thread streams of two devices look like
/// one stream, and `hand_off` between them skipped its event.
///
/// `Err(ThreadExiting)` in a thread-local destructor that runs after `PER_THREAD_IDS` was
/// destroyed. An id drawn afresh there would give the stream a second
/// id, which identity allows (a redundant event, [`docs/safety.md`](https://github.com/um-rs/um/blob/main/docs/safety.md) I2), but the error is the
/// simpler answer; the caller can use a stream of its own.
pub(crate) fn per_thread_stream_id(context: u64) -> Result<u64> {
    PER_THREAD_IDS
        .try_with(|ids| {
            let mut ids = ids.borrow_mut();
            if let Some((_, id)) = ids.iter().find(|(c, _)| *c == context) {
                return *id;
            }
            let id = next_stream_id();
            ids.push((context, id));
            id
        })
        .map_err(|_| Error::ThreadExiting {
            what: "the per-thread default stream",
        })
}

/// A CUDA stream of kind `K` with brand `'s`.
///
/// A stream exists only inside the closure of [`Context::with_stream`] (or
/// `with_per_thread_stream`, `with_legacy_stream`), which is generic over the brand: inside it
/// `'s` cannot be unified with another stream's brand, cannot appear in the closure's result,
/// and cannot outlive the stream. Memory attached to the stream carries the brand
/// (`Managed<T, StreamOwned<'s>>`), so the compiler knows which stream owns a buffer and that
/// the buffer never outlives it.
pub struct Stream<'s, K: StreamKind = Created> {
    ctx: Context,
    raw: RawStream,
    /// The event recorded when memory is handed off this stream. Owned here, read through
    /// `raw.events` (which memory carries).
    events: Arc<StreamEvent>,
    _brand: Brand<'s>,
    _kind: PhantomData<K>,
}

impl<K: StreamKind> Drop for Stream<'_, K> {
    fn drop(&mut self) {
        if !K::CREATED {
            return;
        }
        let (ctx, handle) = (self.ctx.clone(), self.raw.handle);
        let events = Arc::clone(&self.events);
        // Every buffer attached to this stream carries its brand and so was dropped or synced
        // before this point. Destroying is asynchronous: queued work still finishes (callbacks
        // enqueued by those drops included).
        let destroy = move || {
            if ctx.bind().is_ok() {
                // SAFETY: the handle is live until the destroy below, and not used here after
                // it. A `StreamOrder` that follows work on this stream gets the record of its
                // last work here, or made it itself before (`StreamEvent::end`).
                unsafe { events.end(handle) };
                // SAFETY: the handle was created by `with_stream` (or a capture scope) and is
                // destroyed only here; nothing names it any more (its brand has ended).
                let _ = unsafe { driver::stream_destroy(handle) };
            }
        };
        if thread_is_capturing() {
            // On a thread that captures, um destroys nothing: once its captures have ended.
            keep_for_capture_end(Box::new(destroy));
        } else {
            destroy();
        }
    }
}

impl<'s, K: StreamKind> Stream<'s, K> {
    /// A stream of `ctx` with the given handle, id and policy, and its (not yet made) event.
    pub(crate) fn from_raw(
        ctx: &Context,
        handle: sys::CUstream,
        id: u64,
        transfer: Transfer,
    ) -> Self {
        let events = Arc::new(StreamEvent::new(ctx.clone()));
        Stream {
            ctx: ctx.clone(),
            raw: RawStream {
                handle,
                id,
                transfer,
                events: Arc::as_ptr(&events),
            },
            events,
            _brand: PhantomData,
            _kind: PhantomData,
        }
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The driver's handle of this stream (`CUstream`), for a library call that `um` does not
    /// make itself (cuBLAS, NCCL, a cudarc kernel): see [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md).
    ///
    /// Getting the handle is safe; every use of it is a foreign call, and so `unsafe`. What such
    /// a call may do: enqueue work on this stream that touches only memory it owns or memory
    /// `um` owns *on this stream* (through [`Managed::as_device_ptr`](crate::Managed::as_device_ptr)
    /// and [`as_device_ptr_mut`](crate::Managed::as_device_ptr_mut)), while the stream's scope runs.
    /// What it must never do: destroy the stream, synchronize it into a state `um` did not
    /// expect (waiting is harmless), capture it into a graph, or use the handle after the
    /// scope's closure returned (a created stream is destroyed then). The special handles of the
    /// per-thread and legacy streams are returned as they are (`CU_STREAM_PER_THREAD`, NULL).
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.raw.handle.cast()
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.raw
    }

    /// The stream's event, poison mark and end record, shared.
    pub(crate) fn shared_events(&self) -> &Arc<StreamEvent> {
        &self.events
    }

    /// The identity `um` gives this stream: no other stream of this process has, or will
    /// have, the same id while this process runs (the identity invariant of `RawStream`: equal
    /// ids, one driver stream; ids are never reused, although driver handles are). A library
    /// that binds a handle of its own to a stream may cache the id of the stream it bound last
    /// and skip binding it again (`um-cublas` does), and one that takes the streams of a set
    /// ([`Context::with_stream_set`], [`Context::with_stream_set_across`]), whose brand is
    /// shared, can tell them apart.
    pub fn id(&self) -> u64 {
        self.raw.id
    }

    /// A handle that poisons this stream, for a library that enqueues work here and may have to
    /// abandon it half-done (see [`Poisoner`]). Once poisoned, every buffer the stream owns is
    /// leaked rather than freed or given to the CPU, and further work on the stream is refused
    /// with [`Error::StreamPoisoned`].
    pub fn poisoner(&self) -> Poisoner {
        Poisoner::new(self.events.poison())
    }

    /// Whether `poisoner` is a handle of this stream (from [`Stream::poisoner`]): compares
    /// without making a handle.
    pub fn is_poisoned_by(&self, poisoner: &Poisoner) -> bool {
        poisoner.is_of(self.events.poison())
    }

    /// Whether the stream is poisoned (see [`Stream::poisoner`]).
    pub fn is_poisoned(&self) -> bool {
        self.events.is_poisoned()
    }

    /// `Err(StreamPoisoned)` once the stream is poisoned: no new work goes on it.
    pub(crate) fn check_not_poisoned(&self) -> Result<()> {
        if self.is_poisoned() {
            Err(Error::StreamPoisoned)
        } else {
            Ok(())
        }
    }

    /// The stream's event (made now on first use): what a handoff off this stream records.
    pub(crate) fn event(&self) -> Result<&Event> {
        self.events.get()
    }
}

impl<K: Eager> Stream<'_, K> {
    /// Whether all work queued on the stream has completed (`cuStreamQuery`), without waiting.
    /// Like [`Stream::wait_idle`], it only asks: no buffer changes state.
    pub fn is_idle(&self) -> Result<bool> {
        self.ctx.bind()?;
        driver::stream_query(self.raw.handle)
    }

    /// Waits until all work queued on the stream has completed (`cuStreamSynchronize`): the
    /// blocking twin of [`Stream::is_idle`]. This changes no buffer's state: the `sync` methods
    /// move buffers back to the host, `wait_idle` and `is_idle` only wait or ask. To get CPU
    /// access back, `sync` the buffers themselves (one wait for several with
    /// [`Stream::sync_all`]).
    pub fn wait_idle(&self) -> Result<()> {
        self.ctx.bind()?;
        driver::stream_synchronize(self.raw.handle)
    }
}

impl<K: StreamKind> std::fmt::Debug for Stream<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("kind", &K::NAME)
            .field("id", &self.raw.id)
            .finish()
    }
}

/// What `um` moves between host and device at the ownership transitions of memory attached
/// to a stream. The types know who touches the memory next: the stream after `attach`, the CPU
/// after `sync`. Policies act on unified memory; mirrored memory
/// ([`Mirror`](crate::Mirror)) always copies what changed, whatever the policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transfer {
    /// Nothing: pages migrate on demand, when the GPU or the CPU first touches them.
    #[default]
    OnDemand,
    /// `attach` enqueues a prefetch of the whole allocation to the device on the stream, and
    /// `sync` enqueues a prefetch to the host before it waits (`cuMemPrefetchAsync`). Only on
    /// devices with concurrent managed access; elsewhere it acts as `OnDemand`.
    Prefetch,
    /// The memory stays in host memory, and the GPU reads and writes it there over the bus:
    /// `attach` advises the driver once (`CU_MEM_ADVISE_SET_PREFERRED_LOCATION` = host,
    /// `CU_MEM_ADVISE_SET_ACCESSED_BY` = the device), so neither side migrates pages. Suits
    /// data the CPU processes in full between kernels that stream through it once. Attaching
    /// the memory to a stream of another policy removes the advice. Only on devices with
    /// concurrent managed access; elsewhere it acts as `OnDemand`.
    HostResident,
}

/// How to create a stream of kind [`Created`] (`Context::with_stream`, `with_stream_set`, ...).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOptions {
    non_blocking: bool,
    priority: Option<i32>,
    transfer: Transfer,
}

impl StreamOptions {
    /// A blocking stream of default priority: it synchronizes with the legacy default stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// A stream that does not synchronize with the legacy default stream
    /// (`CU_STREAM_NON_BLOCKING`).
    pub fn non_blocking(mut self) -> Self {
        self.non_blocking = true;
        self
    }

    /// The transfer policy of memory attached to the stream (default [`Transfer::OnDemand`]).
    pub fn transfer(mut self, transfer: Transfer) -> Self {
        self.transfer = transfer;
        self
    }

    /// The stream's priority; lower numbers are higher priorities. The driver clamps values
    /// outside `Context::stream_priority_range`.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }
}

impl Context {
    /// Creates a stream, runs `f` with it, and destroys it.
    ///
    /// The stream's brand `'s` exists only inside `f`: memory attached to it cannot be
    /// returned from `f` or kept anywhere that outlives it.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// use um_core::{Context, Managed, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let data = Managed::from_slice(&ctx, &[1u32, 2, 3])?;
    /// let data = ctx.with_stream(StreamOptions::new(), |stream| {
    ///     let data = data.attach(stream)?;
    ///     // ... launch kernels on `stream` with `&data` / `&mut data` ...
    ///     data.sync()
    /// })?;
    /// assert_eq!(data.len(), 3);
    /// # Ok(()) }
    /// ```
    pub fn with_stream<R>(
        &self,
        options: StreamOptions,
        f: impl for<'s> FnOnce(&Stream<'s, Created>) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let stream = self.new_created_stream(options)?;
        f(&stream)
    }

    /// Creates a stream set of `n` streams, runs `f` with them, and destroys them: for a number
    /// of streams known only at run time (the eight streams of NVIDIA's CUDA 7 streams post, say).
    ///
    /// The streams of one set share a brand `'s`: memory attached to any of them still cannot
    /// leave `f` or reach a stream outside the set, but the compiler cannot tell the set's
    /// streams apart. Which one owns a buffer is checked at run time instead: a launch or
    /// `sync_all` with a buffer of another stream of the set returns
    /// [`Error::StreamMismatch`](crate::Error::StreamMismatch). Use [`Context::with_stream`],
    /// with its unique brand, where the number of streams is fixed.
    pub fn with_stream_set<R>(
        &self,
        n: usize,
        options: StreamOptions,
        f: impl for<'s> FnOnce(&[Stream<'s, Created>]) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            // On an error, the streams made so far are destroyed by their drop.
            streams.push(self.new_created_stream(options)?);
        }
        f(&streams)
    }

    /// Creates a stream set of one stream on each of `contexts` (one per device, in order), runs
    /// `f` with them, and destroys them: for one thread that drives several GPUs (a group of
    /// NCCL calls, say), with a number of devices known only at run time.
    ///
    /// As in [`Context::with_stream_set`], the streams share a brand: memory attached to any of
    /// them stays inside `f`, and which stream owns a buffer is checked at run time (a launch or
    /// `sync_all` on another stream of the set is [`Error::StreamMismatch`]). `attach` still
    /// refuses memory of another context than the stream's ([`Error::ContextMismatch`]).
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// use um_core::{Context, Managed, StreamOptions};
    /// let devices = [Context::new(0)?, Context::new(1)?];
    /// let bufs = devices
    ///     .iter()
    ///     .map(|ctx| Managed::from_slice(ctx, &[1.0f32; 4]))
    ///     .collect::<um_core::Result<Vec<_>>>()?;
    /// let bufs = Context::with_stream_set_across(&devices, StreamOptions::new(), |streams| {
    ///     let mut back = Vec::new();
    ///     for (buf, s) in bufs.into_iter().zip(streams) {
    ///         back.push(buf.attach(s)?.sync()?); // each buffer on its own device's stream
    ///     }
    ///     Ok(back)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn with_stream_set_across<R>(
        contexts: &[Context],
        options: StreamOptions,
        f: impl for<'s> FnOnce(&[Stream<'s, Created>]) -> Result<R>,
    ) -> Result<R> {
        let mut streams = Vec::with_capacity(contexts.len());
        for ctx in contexts {
            ctx.bind()?;
            // On an error, the streams made so far are destroyed by their drop (each binds its
            // own context first).
            streams.push(ctx.new_created_stream(options)?);
        }
        f(&streams)
    }

    pub(crate) fn new_created_stream<'s>(
        &self,
        options: StreamOptions,
    ) -> Result<Stream<'s, Created>> {
        let flags = if options.non_blocking {
            sys::STREAM_NON_BLOCKING
        } else {
            sys::STREAM_DEFAULT
        };
        let handle = driver::stream_create(flags, options.priority.unwrap_or(0))?;
        Ok(Stream::from_raw(
            self,
            handle,
            next_stream_id(),
            options.transfer,
        ))
    }

    /// A fresh non-blocking stream for a capture scope, with a fresh id and its event made. Non-
    /// blocking, so that the legacy stream stays usable while it captures (a capturing blocking
    /// stream makes every use of the legacy stream an error).
    pub(crate) fn new_capture_stream<'c>(&self) -> Result<Stream<'c, Capture>> {
        let handle = driver::stream_create(sys::STREAM_NON_BLOCKING, 0)?;
        let stream = Stream::from_raw(self, handle, next_stream_id(), Transfer::OnDemand);
        stream.event()?;
        Ok(stream)
    }

    /// Runs `f` with the calling thread's default stream (`CU_STREAM_PER_THREAD`).
    ///
    /// It behaves as a regular stream: it does not synchronize with other streams, and every
    /// thread has its own. The stream, and memory attached to it, stay on this thread.
    ///
    /// In a `thread_local!` value's destructor, once um's record of this thread's streams is
    /// gone, it is [`Error::ThreadExiting`] (rule 191): use a stream of its own there.
    pub fn with_per_thread_stream<R>(
        &self,
        f: impl for<'s> FnOnce(&Stream<'s, PerThread>) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        f(&self.per_thread_stream()?)
    }

    /// The handle of the calling thread's default stream, with its id for this thread and
    /// this context handle.
    pub(crate) fn per_thread_stream<'s>(&self) -> Result<Stream<'s, PerThread>> {
        Ok(Stream::from_raw(
            self,
            sys::STREAM_PER_THREAD,
            per_thread_stream_id(self.id())?,
            Transfer::OnDemand,
        ))
    }

    /// Runs `f` with the legacy default stream (the NULL stream).
    ///
    /// Work on it waits for, and is waited for by, all work on blocking streams. Memory cannot
    /// be attached to it (see [`Attachable`]).
    pub fn with_legacy_stream<R>(
        &self,
        f: impl for<'s> FnOnce(&Stream<'s, Legacy>) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let stream = Stream::from_raw(
            self,
            sys::STREAM_LEGACY,
            self.legacy_stream_id(),
            Transfer::OnDemand,
        );
        f(&stream)
    }

    /// The device's stream priorities as `(least, greatest)`; greatest is numerically lowest.
    pub fn stream_priority_range(&self) -> Result<(i32, i32)> {
        self.bind()?;
        driver::stream_priority_range()
    }
}

#[cfg(test)]
mod tests {
    use super::per_thread_stream_id;
    use crate::driver::context::next_stream_id;

    #[test]
    fn per_thread_stream_ids_differ_by_context_and_by_thread() {
        let (a, b) = (next_stream_id(), next_stream_id());
        let a_here = per_thread_stream_id(a).unwrap_or(0);
        assert_ne!(a_here, 0, "an id while the thread runs");
        assert_eq!(
            per_thread_stream_id(a).unwrap_or(0),
            a_here,
            "stable on one thread"
        );
        let b_here = per_thread_stream_id(b).unwrap_or(0);
        assert_ne!(a_here, b_here, "two contexts: two streams");
        let (a_there, b_there) = std::thread::spawn(move || {
            (
                per_thread_stream_id(a).unwrap_or(0),
                per_thread_stream_id(b).unwrap_or(0),
            )
        })
        .join()
        .unwrap_or_default();
        for there in [a_there, b_there] {
            assert!(
                there != 0 && there != a_here && there != b_here,
                "another thread: new ids"
            );
        }
        assert_ne!(a_there, b_there);
    }

    /// A `thread_local!` value whose `Drop` asks for the per-thread
    /// stream after `PER_THREAD_IDS` was destroyed got a panic in a TLS destructor (an abort).
    /// One value set up before the thread's first per-thread id and one after, so that one of
    /// them is dropped after `PER_THREAD_IDS` whatever order the platform runs the
    /// destructors in: each gets an id or `Err(ThreadExiting)`, never a panic.
    #[test]
    fn the_per_thread_stream_id_asked_in_a_thread_local_destructor_is_an_id_or_an_error() {
        use crate::error::Error;
        use std::sync::Mutex;
        static SEEN: Mutex<Vec<Result<u64, Error>>> = Mutex::new(Vec::new());
        struct AsksAtExit(u64);
        impl Drop for AsksAtExit {
            fn drop(&mut self) {
                let r = per_thread_stream_id(self.0);
                SEEN.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(r);
            }
        }
        thread_local! {
            static BEFORE: std::cell::RefCell<Option<AsksAtExit>> = const { std::cell::RefCell::new(None) };
            static AFTER: std::cell::RefCell<Option<AsksAtExit>> = const { std::cell::RefCell::new(None) };
        }
        let context = next_stream_id();
        let joined = std::thread::spawn(move || {
            BEFORE.with(|b| *b.borrow_mut() = Some(AsksAtExit(context)));
            let here = per_thread_stream_id(context);
            AFTER.with(|a| *a.borrow_mut() = Some(AsksAtExit(context)));
            here
        })
        .join();
        let here = joined.unwrap_or(Ok(0)).unwrap_or(0);
        assert_ne!(here, 0, "the thread got an id, and exited without a panic");
        let seen = std::mem::take(
            &mut *SEEN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        assert_eq!(seen.len(), 2, "both destructors ran: {seen:?}");
        assert!(
            seen.iter()
                .all(|r| *r == Ok(here) || matches!(r, Err(Error::ThreadExiting { .. }))),
            "{seen:?}"
        );
        assert!(
            seen.iter().any(|r| r.is_err()),
            "one destructor ran after the ids were gone: {seen:?}"
        );
    }
}
