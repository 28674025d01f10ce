//! [`Graph`]: an instantiated graph and the buffers it holds; its replay, its scalar updates,
//! the host access between replays, and the wait that gives the buffers back.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use crate::driver;
use crate::driver::context::{Context, keep_for_capture_end, thread_is_capturing};
use crate::driver::stream::{Attachable, Brand, Eager, RawStream, Stream, StreamKind};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::graph::node::{Node, Scalars};
use crate::memory::state::{CaptureSet, HostViews};
use crate::sealed::PRIVATE;

/// A captured graph, instantiated, holding the buffers its nodes use: replayed on the stream
/// branded `'s` that owns them, as often as wanted. Made by
/// [`Stream::capture`](crate::Stream::capture).
///
/// While it exists the buffers are its own: no CPU code can touch them (they are not
/// reachable), no other stream can use them (they carry `'s`, and only this graph names them),
/// no one can free them (it owns them). They come back only through a wait on `'s`:
/// [`Graph::sync`], or [`Graph::host`] between replays; [`Graph::into_buffers`] gives them back
/// still owned by `'s`, after every replay in stream order.
///
/// `Send` when its buffers are; never `Sync` (the driver's graph objects are not internally
/// synchronized). Dropping it with replays in flight is safe: its buffers' drop waits for
/// `'s` before freeing them, and the driver frees the executable graph once its launches end.
pub struct Graph<'s, K: StreamKind, B: CaptureSet<'s, K>> {
    buffers: Option<B>,
    /// Which buffers a captured launch may write: marked again at every replay, so that a
    /// mirror's next wait copies them back.
    written: Vec<bool>,
    exec: sys::CUgraphExec,
    graph: sys::CUgraph,
    ctx: Context,
    /// The stream the buffers belong to (and the graph replays on).
    owner: RawStream,
    /// The ids of the capture's streams: a node recorded on one of them is this graph's.
    captured_on: Vec<u64>,
    _brand: Brand<'s>,
    _kind: PhantomData<K>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: the handles are driver tokens usable from any thread (one at a time: `Graph` is not
// `Sync`, and every method that touches them takes `self`); the buffers move with it when they
// may, and `K: Send` keeps the per-thread stream's graphs on their thread.
unsafe impl<'s, K: StreamKind + Send, B: CaptureSet<'s, K> + Send> Send for Graph<'s, K, B> {}

impl<'s, K: Eager, B: CaptureSet<'s, K>> Graph<'s, K, B> {
    /// Instantiates `graph` (captured on the streams `captured_on`) holding `buffers`, owned by
    /// `stream`. On failure the graph is destroyed and the buffers dropped (each waits for
    /// `stream`).
    pub(crate) fn new(
        stream: &Stream<'s, K>,
        buffers: B,
        graph: sys::CUgraph,
        captured_on: Vec<u64>,
    ) -> Result<Self> {
        let ctx = stream.context().clone();
        let exec = ctx.bind().and_then(|()| {
            // SAFETY: a live graph of this context, just captured.
            unsafe { driver::graph_instantiate(graph) }
        });
        let exec = match exec {
            Ok(exec) => exec,
            Err(e) => {
                // SAFETY: ours, unused, destroyed once.
                unsafe { destroy_graph(&ctx, graph) };
                return Err(e);
            }
        };
        Ok(Graph {
            written: buffers.written(PRIVATE),
            buffers: Some(buffers),
            exec,
            graph,
            ctx,
            owner: stream.raw(),
            captured_on,
            _brand: PhantomData,
            _kind: PhantomData,
            _not_sync: PhantomData,
        })
    }

    /// Enqueues one replay on `stream` (`cuGraphLaunch`), which must be the stream the buffers
    /// belong to (its brand says so; between the streams of a stream set, the id:
    /// [`Error::StreamMismatch`]). The replay runs after the work queued on `stream` before it
    /// and before the work queued after it; it does not wait on the host.
    pub fn launch(&self, stream: &Stream<'s, K>) -> Result<()> {
        let Some(buffers) = &self.buffers else {
            return Err(Error::GraphEmptied);
        };
        let target = stream.raw();
        if target.id != self.owner.id {
            return Err(Error::StreamMismatch { argument: 0 });
        }
        // Work on a poisoned stream was aborted and may still touch the buffers (rule 164).
        stream.check_not_poisoned()?;
        self.ctx.bind()?;
        buffers.mark_written(&self.written, PRIVATE);
        // SAFETY: the graph is live and of this context; `stream` is the stream that owns every
        // buffer its nodes use (the id above), alive for 's; the buffers are held by `self`, so
        // nothing else touches or frees them until a wait on this stream has passed this replay.
        unsafe { driver::graph_launch(self.exec, target.handle) }
    }

    /// Uploads the graph to the device on `stream` (`cuGraphUpload`), so that the first
    /// [`launch`](Graph::launch) pays no setup. Optional.
    pub fn upload(&self, stream: &Stream<'s, K>) -> Result<()> {
        if stream.raw().id != self.owner.id {
            return Err(Error::StreamMismatch { argument: 0 });
        }
        stream.check_not_poisoned()?;
        self.ctx.bind()?;
        // SAFETY: as in `launch`; an upload runs no node.
        unsafe { driver::graph_upload(self.exec, stream.raw().handle) }
    }

    /// Sets the scalars of a captured kernel (`cuGraphExecKernelNodeSetParams`) for the replays
    /// enqueued from now on; replays already enqueued keep theirs. `node` is what the kernel's
    /// `_node` launcher returned in this graph's capture ([`Error::NodeOfAnotherGraph`]
    /// otherwise); its buffers, lengths and geometry stay those of the capture.
    pub fn set<U: Scalars>(&mut self, node: &Node<U>, scalars: U) -> Result<()> {
        if !self.captured_on.contains(&node.captured_on()) {
            return Err(Error::NodeOfAnotherGraph);
        }
        self.ctx.bind()?;
        node.with_scalars(scalars, |params| {
            // SAFETY: the graph is live and was instantiated from the graph holding the node
            // (recorded on one of its capture streams, whose ids are never reused); `params`
            // is the node's own function, geometry and values, with the node's scalar
            // positions replaced by values of their types (`Node`'s invariant), so every
            // buffer is still one this graph holds.
            unsafe { driver::graph_exec_set_kernel_params(self.exec, node.handle(), params) }
        })
    }

    /// Waits for `stream` (which must be the stream the buffers belong to), then runs `f` with
    /// the buffers on the host, as `&mut T` each, then hands them back to the stream: for the
    /// CPU's step between two replays. The same transitions as `sync` and `attach`: each
    /// storage's release, one wait, then each storage's attach (for a mirror, the copy to the
    /// device if `f` took it as `&mut`, which it always does; for unified memory on the same
    /// stream, no driver call).
    ///
    /// `f` sees the contents, never the buffers: the graph keeps holding the very allocations
    /// its nodes use. If the wait or an attach fails, or `f` panics, the buffers are dropped and
    /// every later [`launch`](Graph::launch) is [`Error::GraphEmptied`].
    ///
    /// Every buffer of the set must have a host side ([`HostViews`]): a graph holding device
    /// memory ([`Device`](crate::Device)) gives its buffers back by [`sync`](Graph::sync)
    /// instead.
    pub fn host<R>(&mut self, stream: &Stream<'s, K>, f: impl FnOnce(B::View<'_>) -> R) -> Result<R>
    where
        K: Attachable,
        B: HostViews<'s, K>,
    {
        if stream.raw().id != self.owner.id {
            return Err(Error::StreamMismatch { argument: 0 });
        }
        let buffers = self.buffers.take().ok_or(Error::GraphEmptied)?;
        let mut host = buffers.to_host(self.owner, PRIVATE)?;
        let r = f(B::views(&mut host, PRIVATE));
        self.buffers = Some(B::reattach(host, stream, PRIVATE)?);
        Ok(r)
    }

    /// Waits for the graph's stream, then gives the buffers back to the CPU: each storage's
    /// release, one `cuStreamSynchronize`, the retype (what `sync_all` does). The graph is
    /// destroyed. If the wait fails, the buffers are dropped (leaked where the stream may still
    /// use them) and the error returned.
    #[must_use = "`sync` returns the buffers: drop the Result and they are freed"]
    pub fn sync(mut self) -> Result<B::Host> {
        let buffers = self.buffers.take().ok_or(Error::GraphEmptied)?;
        buffers.to_host(self.owner, PRIVATE)
    }

    /// The buffers, still owned by the graph's stream, without a wait: every later use of them
    /// is stream-ordered after the replays enqueued so far. The graph is destroyed (a replay in
    /// flight still completes; the driver frees the graph afterwards).
    #[must_use = "`into_buffers` returns the buffers: drop them and they are freed"]
    pub fn into_buffers(mut self) -> Result<B> {
        self.buffers.take().ok_or(Error::GraphEmptied)
    }
}

impl<'s, K: StreamKind, B: CaptureSet<'s, K>> Drop for Graph<'s, K, B> {
    fn drop(&mut self) {
        // The buffers first: each one's drop waits for the graph's stream (so no replay still
        // uses it when it is freed), or leaks it if the wait fails; on a capturing thread it
        // waits for nothing and frees them behind a callback on that stream, after the replays.
        drop(self.buffers.take());
        let (ctx, exec, graph) = (self.ctx.clone(), self.exec, self.graph);
        let destroy = move || {
            if ctx.bind().is_ok() {
                // SAFETY: made by `new`, destroyed once, here, with the context current. A
                // launch still in flight is not cut short: the driver frees the executable
                // graph once it completes.
                let _ = unsafe { driver::graph_exec_destroy(exec) };
                // SAFETY: made by the capture, destroyed once, here; the executable graph does
                // not depend on it.
                let _ = unsafe { driver::graph_destroy(graph) };
            }
        };
        if thread_is_capturing() {
            // On a thread that captures (the graph moved into another capture's closure), um
            // destroys nothing: once its captures have ended.
            keep_for_capture_end(Box::new(destroy));
        } else {
            destroy();
        }
    }
}

/// Destroys a captured graph that no executable graph was made from (or that one no longer
/// needs): now, or on a thread that captures (nested capture scopes) once its captures have
/// ended. Leaked if the context cannot be made current.
///
/// # Safety
/// `graph` came from `cuStreamEndCapture` in `ctx`, is destroyed once, and nothing uses it.
pub(crate) unsafe fn destroy_graph(ctx: &Context, graph: sys::CUgraph) {
    let ctx = ctx.clone();
    let destroy = move || {
        if ctx.bind().is_ok() {
            // SAFETY: the caller's guarantee; the context is current.
            let _ = unsafe { driver::graph_destroy(graph) };
        }
    };
    if thread_is_capturing() {
        keep_for_capture_end(Box::new(destroy));
    } else {
        destroy();
    }
}

impl<'s, K: StreamKind, B: CaptureSet<'s, K>> fmt::Debug for Graph<'s, K, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("stream_kind", &K::NAME)
            .field("stream_id", &self.owner.id)
            .field("buffers", &self.written.len())
            .field("holds_buffers", &self.buffers.is_some())
            .finish_non_exhaustive()
    }
}
