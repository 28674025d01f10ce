//! `StreamOrder`: the device-side order between the work a library handle enqueues on one
//! stream and the work it enqueues next on another (`cuEventRecord`, then `cuStreamWaitEvent`),
//! for a handle whose state serves one stream at a time (a cuBLAS handle's workspace). It moves
//! no memory and proves nothing to `um`'s types: a buffer of one stream stays unusable on
//! another whatever the order between them (`driver/event.rs` says why `um`'s own events stay
//! private).

use crate::driver::context::Context;
use crate::driver::event::Event;
use crate::driver::stream::{Eager, Stream};
use crate::error::{Error, Result};

/// A point in the work of an eager stream that the work queued later on another eager stream
/// can be made to wait for, on the device, without a host wait.
///
/// For a library handle that keeps state of its own on the device and is bound to one stream
/// at a time (a cuBLAS handle and its workspace): [`record`](StreamOrder::record) after each
/// call that enqueued work, [`wait`](StreamOrder::wait) on the next stream before the first
/// call there. Work queued on that stream after the wait begins only once the work recorded
/// last has completed, even where the first stream has been destroyed meanwhile.
///
/// Only eager streams: an order recorded inside a graph capture cannot be waited for outside
/// it, and one recorded outside cannot be waited for inside it (the driver would fail the
/// capture); the types say so. Both streams belong to the order's context
/// ([`Error::ContextMismatch`] otherwise).
///
/// `Send`, not `Sync`: one owner records and waits. Before any record, a wait waits for
/// nothing.
pub struct StreamOrder {
    event: Event,
    ctx: Context,
    /// Whether anything was recorded: a wait on an event never recorded completes at once,
    /// which is what an order without a record means, so this only saves a call.
    recorded: std::cell::Cell<bool>,
}

// SAFETY: `Event` is `Send`; the `Cell` is only used by the owner, and `StreamOrder` is not
// `Sync` (the `Cell`), so no two threads use it at once.
unsafe impl Send for StreamOrder {}

impl StreamOrder {
    /// An order of `ctx` with nothing recorded yet (one `cuEventCreate`, timing disabled).
    pub fn new(ctx: &Context) -> Result<StreamOrder> {
        Ok(StreamOrder {
            event: Event::new(ctx)?,
            ctx: ctx.clone(),
            recorded: std::cell::Cell::new(false),
        })
    }

    /// The context the order belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Records the work queued on `stream` so far (`cuEventRecord`); replaces the record before
    /// it. The calling thread does not wait.
    pub fn record<K: Eager>(&self, stream: &Stream<'_, K>) -> Result<()> {
        if !stream.context().same_as(&self.ctx) {
            return Err(Error::ContextMismatch);
        }
        // SAFETY: `stream` is borrowed, so alive (a foreign stream is alive for its scope, the
        // guarantee of `with_foreign_stream`), and of the event's context (checked above).
        unsafe { self.event.record(stream.raw().handle) }?;
        self.recorded.set(true);
        Ok(())
    }

    /// Makes the work queued on `stream` from now on wait, on the device, for the work
    /// recorded last (`cuStreamWaitEvent`). The calling thread does not wait.
    pub fn wait<K: Eager>(&self, stream: &Stream<'_, K>) -> Result<()> {
        if !stream.context().same_as(&self.ctx) {
            return Err(Error::ContextMismatch);
        }
        if !self.recorded.get() {
            return Ok(());
        }
        // SAFETY: `stream` is borrowed, so alive, and of the event's context (checked above).
        unsafe { self.event.wait_on(stream.raw().handle) }
    }
}

impl std::fmt::Debug for StreamOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamOrder")
            .field("recorded", &self.recorded.get())
            .finish_non_exhaustive()
    }
}
