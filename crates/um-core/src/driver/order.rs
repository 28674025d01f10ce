//! `StreamOrder`: the device-side order between the work a library handle enqueues on one
//! stream and the work it enqueues next on another (`cuEventRecord`, then `cuStreamWaitEvent`),
//! for a handle whose state serves one stream at a time (a cuBLAS handle's workspace). It moves
//! no memory and proves nothing to `um`'s types: a buffer of one stream stays unusable on
//! another whatever the order between them (`driver/event.rs` says why `um`'s own events stay
//! private).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::driver::context::Context;
use crate::driver::event::{Event, StreamEvent};
use crate::driver::stream::{Eager, Stream};
use crate::driver::sys;
use crate::error::{Error, Result};

/// A point in the work of an eager stream that the work queued later on another eager stream
/// can be made to wait for, on the device, without a host wait.
///
/// For a library handle that keeps state of its own on the device and is bound to one stream
/// at a time (a cuBLAS handle and its workspace): [`record`](StreamOrder::record) after each
/// call that enqueued work, [`enqueue_wait`](StreamOrder::enqueue_wait) on the next stream before the first
/// call there. Work queued on that stream after the wait begins only once the work recorded
/// last has completed, even where the first stream has been destroyed meanwhile.
///
/// Or, cheaper, [`follow`](StreamOrder::follow) before each call and
/// [`after_work`](StreamOrder::after_work) after it: the order then records the last work on a
/// stream only when the handle leaves it (on a created or the legacy stream: no driver call
/// while the handle stays on one stream), or at the created stream's end, whichever comes
/// first.
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
    /// The stream [`follow`](StreamOrder::follow) went to last, and how its work is found.
    /// Only the owner uses it (`StreamOrder` is not `Sync`); a `Mutex` rather than a
    /// `RefCell` only so that the one thing that makes the order `!Sync` stays `recorded`.
    on: Mutex<On>,
}

/// Where the work a [`StreamOrder`] follows is, and how a move finds its end.
enum On {
    /// Nowhere yet: a move waits for nothing.
    Nowhere,
    /// A created stream (its id): its last work is recorded on the stream's own event, by the
    /// move while the stream lives (its handle is live until [`StreamEvent::end`], which takes
    /// the same lock), else by the stream's end (asked for by `want_end_record`).
    Created {
        id: u64,
        handle: StreamHandle,
        events: Arc<StreamEvent>,
    },
    /// The legacy stream (its id): alive as long as the context, recorded by the move.
    Legacy { id: u64 },
    /// A per-thread or foreign stream (its id): recorded after each call
    /// ([`after_work`](StreamOrder::after_work)), because a move cannot record on it (another
    /// thread's per-thread stream has no handle here; a foreign stream may be destroyed by its
    /// owner once its scope ended).
    Eager { id: u64 },
}

/// A created stream's driver handle, kept beside its `StreamEvent` (used only under the lock
/// `StreamEvent::record_now_or_at_end` takes).
struct StreamHandle(sys::CUstream);

// SAFETY: a stream handle is an opaque token the driver accepts from any thread; it is used only
// while the stream is known to live (`StreamEvent::record_now_or_at_end`).
unsafe impl Send for StreamHandle {}

impl On {
    fn id(&self) -> u64 {
        match self {
            On::Nowhere => 0,
            On::Created { id, .. } | On::Legacy { id } | On::Eager { id } => *id,
        }
    }
}

// SAFETY: `Event` is `Send`, and so is `On` (an `Arc` of a `StreamEvent`, which is `Send` and
// `Sync`, and a `StreamHandle`); the `Cell` is only used by the owner, and `StreamOrder` is not
// `Sync` (the `Cell`), so no two threads use it at once.
unsafe impl Send for StreamOrder {}

impl StreamOrder {
    /// An order of `ctx` with nothing recorded yet (one `cuEventCreate`, timing disabled).
    pub fn new(ctx: &Context) -> Result<StreamOrder> {
        Ok(StreamOrder {
            event: Event::new(ctx)?,
            ctx: ctx.clone(),
            recorded: std::cell::Cell::new(false),
            on: Mutex::new(On::Nowhere),
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
    /// recorded last (`cuStreamWaitEvent`). The calling thread does not wait: the wait is
    /// enqueued, like a kernel, unlike [`Context::wait_idle`] and [`Stream::wait_idle`], which
    /// block the host.
    pub fn enqueue_wait<K: Eager>(&self, stream: &Stream<'_, K>) -> Result<()> {
        if !stream.context().same_as(&self.ctx) {
            return Err(Error::ContextMismatch);
        }
        if !self.recorded.get() {
            return Ok(());
        }
        // SAFETY: `stream` is borrowed, so alive, and of the event's context (checked above).
        unsafe { self.event.wait_on(stream.raw().handle) }
    }

    /// The old name of [`enqueue_wait`](StreamOrder::enqueue_wait): a device-side wait, which
    /// read like the host-blocking `wait_idle` beside it.
    #[deprecated(
        since = "0.1.0",
        note = "renamed `enqueue_wait`: the wait is enqueued on the stream; the host does not block"
    )]
    pub fn wait<K: Eager>(&self, stream: &Stream<'_, K>) -> Result<()> {
        self.enqueue_wait(stream)
    }
}

impl StreamOrder {
    fn on(&self) -> MutexGuard<'_, On> {
        self.on.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows the owner's work onto `stream`: where its last work was on another stream, makes
    /// the work queued on `stream` from now on wait, on the device, for every piece of work
    /// queued on that stream before now (before its end, if it has ended); then notes `stream`
    /// as the one the next move waits for. The calling thread does not wait. On the stream
    /// followed last: nothing, and no driver call.
    ///
    /// What a move records: on a created stream, the stream's own event, now if the stream
    /// lives, else the record its end made (a created stream followed here records its last
    /// work when its scope ends, one `cuEventRecord`); on the legacy stream, this order's event,
    /// now; on a per-thread or foreign stream, nothing: call
    /// [`after_work`](StreamOrder::after_work) after each piece of work there.
    ///
    /// `Ok(false)` where the old stream's last work could not be recorded (`cuEventRecord`
    /// failed, now or at its end): nothing was enqueued, and the order still follows the old
    /// stream; order `stream` by other means (a wait for the whole context) and call
    /// [`restart`](StreamOrder::restart). [`Error::ContextMismatch`] for a stream of another
    /// context.
    pub fn follow<K: Eager>(&self, stream: &Stream<'_, K>) -> Result<bool> {
        if !stream.context().same_as(&self.ctx) {
            return Err(Error::ContextMismatch);
        }
        let ordered = match &*self.on() {
            on if on.id() == stream.id() => return Ok(true),
            On::Nowhere => true,
            On::Created { handle, events, .. } => {
                // SAFETY: `handle` is the stream `events` belongs to, a created stream, whose
                // drop calls `StreamEvent::end` before it destroys the handle.
                if unsafe { events.record_now_or_at_end(handle.0) } {
                    // Made by `want_end_record` before the stream was noted.
                    let event = events.get()?;
                    // SAFETY: `stream` is borrowed, so alive, and of the event's context
                    // (checked above; the event is of the old stream's, the same).
                    unsafe { event.wait_on(stream.raw().handle) }?;
                    true
                } else {
                    false
                }
            }
            On::Legacy { .. } => {
                // SAFETY: the legacy stream (null) lives as long as the context, which this
                // order holds; the event is of that context.
                if unsafe { self.event.record(std::ptr::null_mut()) }.is_ok() {
                    self.recorded.set(true);
                    self.enqueue_wait(stream)?;
                    true
                } else {
                    false
                }
            }
            On::Eager { .. } => {
                self.enqueue_wait(stream)?;
                true
            }
        };
        if ordered {
            self.restart(stream)?;
        }
        Ok(ordered)
    }

    /// Follows `stream` from now on, without ordering it after the stream followed before:
    /// for a caller that ordered it by other means after [`follow`](StreamOrder::follow)
    /// returned `Ok(false)` (a wait for the whole context). Makes the created stream's event
    /// (the first time), whose failure is the `Err`; the order then still follows the old
    /// stream.
    pub fn restart<K: Eager>(&self, stream: &Stream<'_, K>) -> Result<()> {
        if !stream.context().same_as(&self.ctx) {
            return Err(Error::ContextMismatch);
        }
        let id = stream.id();
        let handle = stream.raw().handle;
        let on = if K::CREATED {
            let events = stream.shared_events();
            events.want_end_record()?;
            On::Created {
                id,
                handle: StreamHandle(handle),
                events: Arc::clone(events),
            }
        } else if handle.is_null() {
            On::Legacy { id }
        } else {
            On::Eager { id }
        };
        *self.on() = on;
        Ok(())
    }

    /// After a piece of work on `stream`, the stream [`follow`](StreamOrder::follow)ed last:
    /// records it where a move could not (a per-thread or foreign stream: one
    /// `cuEventRecord`); nothing, and no driver call, on a created or the legacy stream.
    pub fn after_work<K: Eager>(&self, stream: &Stream<'_, K>) -> Result<()> {
        if K::CREATED || stream.raw().handle.is_null() {
            return Ok(());
        }
        self.record(stream)
    }
}

impl std::fmt::Debug for StreamOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamOrder")
            .field("recorded", &self.recorded.get())
            .finish_non_exhaustive()
    }
}
