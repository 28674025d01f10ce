//! The capture scope: `Stream::capture` and `Stream::capture_streams`.
//!
//! What the driver does, and so what the scope relies on (each checked by a test of
//! `tests/gpu/gpu_graphs.rs`, and first seen on an H100 and an H200 with driver 580 by C++ probes):
//!
//! * in thread-local mode, the capturing thread's potentially unsafe calls (allocations, frees,
//!   waits on any stream, `cuStreamQuery`, `cuStreamAttachMemAsync`, `cuMemPrefetchAsync`, a
//!   module load) are refused with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (a module load is
//!   accepted but invalidates the capture) and invalidate it; a refused free frees nothing; with
//!   the mode relaxed for the call, a module load leaves the capture active; other threads are
//!   not restricted (launches, waits, frees), except a `cuCtxSynchronize`, which fails there and
//!   invalidates the capture;
//! * after a captured kernel launch, the stream's capture dependencies are that one kernel node;
//! * a stream that waits for an event recorded on a capturing stream joins the capture (a fork);
//!   every joined stream must be joined back before `cuStreamEndCapture`, which otherwise fails
//!   (`CUDA_ERROR_STREAM_CAPTURE_UNJOINED`) and returns no graph; a capturing stream that waits
//!   for an event recorded outside the capture invalidates it (`..._ISOLATION`);
//! * launches on other (eager) streams, the legacy one included, run as usual while a
//!   non-blocking stream captures.
//!
//! The scope therefore captures on non-blocking streams of its own (the legacy stream stays
//! usable), makes their events before it begins, forks every extra stream from the first at the
//! start and joins them all back at the end, loads modules with the thread's mode relaxed
//! (`Stream::function`), keeps the buffers dropped during the capture (`Managed`'s drop,
//! `reclaim::defer::bury`) to free them once the capture has ended, and marks the device as
//! capturing (`Context::capture_guard`), so that a `Context` handle dropped meanwhile on any
//! thread leaves its modules loaded until the capture has ended: unloading them needs a
//! `cuCtxSynchronize` first, which would invalidate the capture (seen on an H100, driver 580,
//! when tests of one process dropped their handles beside another test's capture).

use crate::driver;
use crate::driver::context::{CaptureGuard, Context};
use crate::driver::stream::{Capture, Eager, RawStream, Stream};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::graph::exec::{Graph, destroy_graph};
use crate::memory::state::CaptureSet;
use crate::reclaim::defer::{captures_recordable, close_capture, defer_free_or_keep, open_capture};
use crate::sealed::PRIVATE;

impl<'s, K: Eager> Stream<'s, K> {
    /// Records the launches that `f` makes on `buffers` into a graph, to be replayed on this
    /// stream ([`Graph::launch`]) as many times as wanted.
    ///
    /// `buffers` (a tuple of up to six stream-owned buffers of this stream, or a `Vec` of them)
    /// move onto a stream of the capture's own, with a brand `'c` that nothing else has: `f`
    /// gets that stream and the buffers, launches on them (typed launchers, `Stream::launch`,
    /// and the typed launchers' `_node` forms, whose scalars change between replays), and
    /// returns them, with any result `R` (the nodes, say). Nothing runs: the launches are
    /// recorded. The graph then holds the buffers: no CPU code, no other stream and no drop can
    /// reach them while it exists.
    ///
    /// What a capture cannot do is refused by types where they can say so: no `sync`, no wait
    /// and no `attach` on a capture stream, no `hand_off` to or from an eager stream. The rest is
    /// refused by the driver, which invalidates the capture, and comes back as an `Err`: an
    /// allocation, a free, or a wait on any stream on this thread while `f` runs. A buffer of the
    /// set dropped in `f` is freed once its stream is done with it, and the capture is an
    /// [`Error::CaptureLostBuffer`].
    ///
    /// Refused before the capture begins: a buffer of another stream of a stream set
    /// ([`Error::StreamMismatch`]), and unified memory on a device without concurrent managed
    /// access ([`Error::GraphNeedsConcurrentManagedAccess`]), and a capture begun inside the
    /// closure of [`Context::with_idle_unless_capturing`](crate::Context::with_idle_unless_capturing)
    /// ([`Error::CaptureRefusedHere`]; also inside such a closure of another device while
    /// closures of this one are open, inside a driver callback, or on um's event thread).
    /// While other threads run such closures on the device, the capture waits for those in
    /// progress (and those they nest) to return before it begins; no other one begins
    /// meanwhile. On any `Err`, the buffers are
    /// dropped (freed once this stream is done with them).
    ///
    /// While `f` runs, other threads' calls that would wait for the whole device are refused
    /// or kept (an idle section returns `Ok(None)`; a `um_cublas::Blas` dropped is destroyed
    /// once the capture has ended, by the thread that ends it) until the capture has ended: so **`f` must not wait without a bound for another thread's such
    /// call**, nor for a thread that retries one until it succeeds. It would wait for ever.
    /// A `Blas` moving to another stream waits for nothing (its order is
    /// kept on the device) and goes through, unless a record of its order failed before
    /// (`CaptureInProgress` then).
    ///
    /// Calls of other libraries on eager streams inside `f` that may load a module (cuBLAS's
    /// first use of a kernel) belong inside [`relaxed_while_capturing`](crate::relaxed_while_capturing),
    /// as `um-cublas` does for its own: a module load in thread-local mode fails the capture.
    /// A capture begun inside `relaxed_while_capturing` (nested in another capture's closure)
    /// is expected to run its own closure relaxed as well, so that allocations, frees and
    /// waits on eager streams go through there instead of failing it; `um`'s own bookkeeping
    /// does not rely on either (not yet seen on a GPU:
    /// `gpu_graphs::a_capture_begun_inside_relaxed_mode_is_relaxed` prints which).
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// # use um_core::{Context, Managed, StreamOptions};
    /// # let ctx = Context::new(0)?;
    /// # let kernel = ctx.kernel("", "add")?;
    /// let x = Managed::from_slice(&ctx, &[1.0f32; 256])?;
    /// let x = ctx.with_stream(StreamOptions::new(), |s| {
    ///     let x = x.attach(s)?;
    ///     let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
    ///         // SAFETY: `add(float *x, unsigned n)` stays below n.
    ///         unsafe { cap.launch(&kernel, um_core::LaunchConfig::grid_1d(1, 256), (&mut x, 256u32))? };
    ///         Ok(((x,), ()))
    ///     })?;
    ///     for _ in 0..1000 {
    ///         graph.launch(s)?; // one cuGraphLaunch each
    ///     }
    ///     let (x,) = graph.sync()?; // waits for the replays: host-owned again
    ///     Ok(x)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn capture<B, R>(
        &self,
        buffers: B,
        f: impl for<'c> FnOnce(&Stream<'c, Capture>, B::Captured<'c>) -> Result<(B::Captured<'c>, R)>,
    ) -> Result<(Graph<'s, K, B>, R)>
    where
        B: CaptureSet<'s, K>,
    {
        let count = buffers.count(PRIVATE);
        let scope = Scope::begin(self, 1, &buffers)?;
        let captured = buffers.enter(scope.streams[0].raw(), PRIVATE);
        let out = f(&scope.streams[0], captured);
        scope.finish(self, out, count)
    }

    /// [`Stream::capture`] with `n` capture streams (at least one), for work that forks and
    /// joins: `f` gets the streams (the first is the capture's origin) and the buffers, owned by
    /// the first. [`hand_off`](crate::Managed::hand_off) between capture streams is a fork (an
    /// event recorded on one and waited for on the other, captured as an edge), as it is between
    /// eager streams; the streams share a brand, so which one owns a buffer is checked at launch
    /// ([`Error::StreamMismatch`]). The scope forks every stream from the first when it begins
    /// and joins them all back to it before the capture ends: a replay ends only once every
    /// branch is done.
    pub fn capture_streams<B, R>(
        &self,
        n: usize,
        buffers: B,
        f: impl for<'c> FnOnce(&[Stream<'c, Capture>], B::Captured<'c>) -> Result<(B::Captured<'c>, R)>,
    ) -> Result<(Graph<'s, K, B>, R)>
    where
        B: CaptureSet<'s, K>,
    {
        let count = buffers.count(PRIVATE);
        let scope = Scope::begin(self, n.max(1), &buffers)?;
        let captured = buffers.enter(scope.streams[0].raw(), PRIVATE);
        let out = f(&scope.streams, captured);
        scope.finish(self, out, count)
    }
}

/// A capture in progress, on streams of brand `'c`. Its drop (on an early return or a panic in
/// the closure) ends the capture, discards its graph, frees the buffers dropped meanwhile once
/// their stream is done, and destroys the streams.
struct Scope<'c> {
    streams: Vec<Stream<'c, Capture>>,
    ids: Vec<u64>,
    /// The capture has begun and not ended.
    active: bool,
    /// The eager stream whose buffers the capture records: what a buried buffer waits for.
    owner: RawStream,
    ctx: Context,
    /// Held from before the capture begins until it has ended: no module of a dropped handle of
    /// the device is unloaded meanwhile (the wait before would invalidate this capture).
    guard: Option<CaptureGuard>,
}

impl<'c> Scope<'c> {
    fn begin<'s, K: Eager, B: CaptureSet<'s, K>>(
        stream: &Stream<'s, K>,
        n: usize,
        buffers: &B,
    ) -> Result<Scope<'c>> {
        // Not inside an idle section of this device (the capture would wait for it), a driver
        // callback or um's event thread.
        crate::driver::context::may_begin_capture(stream.context())?;
        // Nor in a thread-local destructor once the thread's record of its capture scopes, or
        // that of the work kept for the end of its captures, is gone: what the closure drops
        // (a buffer of the set, a host-owned buffer, a stream, a communicator) could not be
        // kept for the capture's end. Both records are there when it begins, so both are there
        // when it ends (`driver::context::kept_work_recordable`).
        if !captures_recordable() {
            return Err(Error::CaptureRefusedHere);
        }
        let owner = stream.raw();
        if let Some(argument) = buffers
            .owners(PRIVATE)
            .iter()
            .position(|id| *id != owner.id)
        {
            return Err(Error::StreamMismatch { argument });
        }
        buffers.check_capture(PRIVATE)?;
        // Work on a poisoned stream was aborted and may still touch its buffers (rule 164).
        stream.check_not_poisoned()?;
        let ctx = stream.context().clone();
        ctx.bind()?;
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            // On an error, the streams made so far are destroyed by their drop.
            streams.push(ctx.new_capture_stream()?);
        }
        let ids: Vec<u64> = streams.iter().map(|s| s.raw().id).collect();
        let guard = Some(ctx.capture_guard()?);
        // The guard may have waited for other threads' idle sections, during which the stream
        // may have been poisoned: check again (rule 188).
        stream.check_not_poisoned()?;
        let mut scope = Scope {
            streams,
            ids,
            active: false,
            owner,
            ctx,
            guard,
        };
        let origin = scope.streams[0].raw().handle;
        // SAFETY: a live, non-capturing stream this crate just made in the current context.
        unsafe { driver::stream_begin_capture(origin) }?;
        scope.active = true;
        open_capture(&scope.ids);
        // Fork: every other stream waits for the origin's (empty) start, and so joins the capture.
        for s in &scope.streams[1..] {
            let event = scope.streams[0].event()?;
            // SAFETY: both streams are live streams of the event's context (the scope's own).
            unsafe { event.order(origin, &scope.ctx, s.raw().handle) }?;
        }
        Ok(scope)
    }

    /// Joins every stream back to the origin and ends the capture: the graph, or the error that
    /// invalidated the capture.
    fn end(&mut self) -> Result<sys::CUgraph> {
        // The closure may have left another context current (a buffer of another device
        // dropped last, say): the capture's calls are made in its own.
        // Should that fail, the calls below fail too, and report it.
        let _ = self.ctx.bind();
        let origin = self.streams[0].raw().handle;
        let joined = self.streams[1..].iter().try_for_each(|s| {
            let event = s.event()?;
            // SAFETY: both streams are live capture streams of the event's context.
            unsafe { event.order(s.raw().handle, &self.ctx, origin) }
        });
        self.active = false;
        // SAFETY: the capture was begun on `origin` by this thread (`begin`), and not ended.
        let graph = unsafe { driver::stream_end_capture(origin) };
        self.guard = None;
        match (joined, graph) {
            (Ok(()), graph) => graph,
            (Err(e), Ok(graph)) => {
                // SAFETY: the graph was just returned to us; nothing uses it.
                unsafe { destroy_graph(&self.ctx, graph) };
                Err(e)
            }
            (Err(e), Err(_)) => Err(e),
        }
    }

    /// The buffers dropped during the capture, freed once the owner stream is done with them
    /// (a callback on it, then the reaper; or, should the callback not be enqueued, after a
    /// wait for the device once no capture of `um` is in progress on it nor on this thread),
    /// and leaked if the owner stream is poisoned by then; how many there were.
    fn free_buried(&mut self) -> usize {
        let buried = close_capture(&self.ids);
        let lost = buried.len();
        // SAFETY: `owner` is the eager stream this scope borrows (`Stream::capture`'s `self`),
        // alive for the whole scope.
        let poison = unsafe { self.owner.poison_flag() };
        for orphan in buried {
            defer_free_or_keep(&self.ctx, self.owner, orphan.watching(poison.clone()));
        }
        lost
    }

    /// Ends the capture and makes the graph, with the buffers `out` brought back.
    fn finish<'s, K: Eager, B: CaptureSet<'s, K>, R>(
        mut self,
        stream: &Stream<'s, K>,
        out: Result<(B::Captured<'c>, R)>,
        count: usize,
    ) -> Result<(Graph<'s, K, B>, R)> {
        let graph = self.end();
        let lost = self.free_buried();
        let (captured, r) = match (out, graph) {
            (Err(e), graph) => {
                if let Ok(graph) = graph {
                    // SAFETY: ours, unused.
                    unsafe { destroy_graph(&self.ctx, graph) };
                }
                return Err(e);
            }
            (Ok(out), Err(e)) => {
                // Back on the owner, and dropped as its buffers (each drop waits for it).
                drop(B::leave(out.0, self.owner, 0, PRIVATE));
                return Err(e);
            }
            (Ok(out), Ok(graph)) => {
                if lost > 0 {
                    drop(B::leave(out.0, self.owner, 0, PRIVATE));
                    // SAFETY: ours, unused.
                    unsafe { destroy_graph(&self.ctx, graph) };
                    return Err(Error::CaptureLostBuffer { lost });
                }
                match B::leave(out.0, self.owner, count, PRIVATE) {
                    Ok(buffers) => ((buffers, graph), out.1),
                    Err(e) => {
                        // SAFETY: ours, unused.
                        unsafe { destroy_graph(&self.ctx, graph) };
                        return Err(e);
                    }
                }
            }
        };
        let (buffers, graph) = captured;
        Graph::new(stream, buffers, graph, self.ids.clone()).map(|g| (g, r))
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        if self.active && self.ctx.bind().is_ok() {
            // An early return or a panic in the closure: end the capture (joining what can be
            // joined, so that the streams leave the capture) and discard the graph.
            if let Ok(graph) = self.end() {
                // SAFETY: ours, unused.
                unsafe { destroy_graph(&self.ctx, graph) };
            }
        }
        self.free_buried();
        // The streams are destroyed by their own drop, after this.
    }
}
