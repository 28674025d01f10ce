//! Events: the device-side ordering that hands memory from one stream to another without a
//! host wait (`Managed::hand_off`, in [`crate::state`]).
//!
//! Crate-private on purpose. An event orders two streams, but it does not move ownership: a
//! public event type would let a program make stream B wait for stream A and then believe that
//! memory of A may be used on B, which the brands forbid. The only thing `um` does with events
//! is the one transition that retypes the memory at the same time.
//!
//! One event per stream, made the first time memory leaves that stream and reused for the life
//! of the stream. Reuse is correct: `cuStreamWaitEvent` waits for the work the event captured at
//! its most recent `cuEventRecord` *at the time of the wait call*, and later records do not
//! change a wait already enqueued. Two threads handing memory off the same stream at once may
//! interleave their records and waits; a wait may then see the other thread's later record, but
//! that record was made on the same stream after the first one, so it captures at least the same
//! work: the order is still right, at worst a little later.

use std::sync::{Arc, OnceLock};

use crate::driver;
use crate::driver::context::{Context, keep_for_capture_end, thread_is_capturing};
use crate::driver::poison::PoisonFlag;
use crate::driver::sys;
use crate::error::Result;

/// An owned CUDA event of one context, destroyed on drop: for ordering only
/// (`CU_EVENT_DISABLE_TIMING`), or, made by [`Event::new_timed`], recording a time
/// ([`crate::driver::timing`]).
pub(crate) struct Event {
    raw: sys::CUevent,
    /// The context the event belongs to: kept alive, and made current to destroy the event.
    ctx: Context,
}

// SAFETY: an event handle is an opaque token that the driver accepts from any thread; `Event`
// has no interior state besides it.
unsafe impl Send for Event {}
// SAFETY: as above; every use of `&Event` is a thread-safe driver call.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event in `ctx`. Nothing is allocated if the driver refuses.
    pub(crate) fn new(ctx: &Context) -> Result<Event> {
        ctx.bind()?;
        let raw = driver::event_create()?;
        Ok(Event {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// Creates an event in `ctx` that records the time the device reaches it, for
    /// [`crate::driver::timing`]: a waiting thread sleeps on it.
    pub(crate) fn new_timed(ctx: &Context) -> Result<Event> {
        ctx.bind()?;
        let raw = driver::event_create_timed()?;
        Ok(Event {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// The driver's handle, alive while `self` is.
    pub(crate) fn raw(&self) -> sys::CUevent {
        self.raw
    }

    /// The context the event belongs to.
    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    /// Records the work queued on `from` (a stream of this event's context), then makes `to`
    /// (a stream of `to_ctx`, which may be another context) wait for it. Neither call waits on
    /// the host.
    ///
    /// # Safety
    /// `from` is a live stream (or special handle) of this event's context, and `to` a live
    /// stream (or special handle) of `to_ctx`.
    pub(crate) unsafe fn order(
        &self,
        from: sys::CUstream,
        to_ctx: &Context,
        to: sys::CUstream,
    ) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the event is alive (we own it), `from` belongs to its context (the caller's
        // guarantee), and that context is current.
        unsafe { driver::event_record(self.raw, from) }?;
        if !self.ctx.same_as(to_ctx) {
            to_ctx.bind()?;
        }
        // SAFETY: the event is alive; `to` is a live stream (the caller's guarantee); the event
        // may be of another context than `to`.
        unsafe { driver::stream_wait_event(to, self.raw) }
    }
}

impl Event {
    /// Records the work queued on `from` so far, with the event's context current.
    ///
    /// # Safety
    /// `from` is a live stream (or special handle) of this event's context.
    pub(crate) unsafe fn record(&self, from: sys::CUstream) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the event is alive (we own it); `from` is of its context (the caller's
        // guarantee), which is current.
        unsafe { driver::event_record(self.raw, from) }
    }

    /// Makes the work queued on `to` from now on wait for the work recorded last.
    ///
    /// # Safety
    /// `to` is a live stream (or special handle) of this event's context.
    pub(crate) unsafe fn wait_on(&self, to: sys::CUstream) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the event is alive; `to` is a live stream of the current context (the
        // caller's guarantee).
        unsafe { driver::stream_wait_event(to, self.raw) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if thread_is_capturing() {
            // On a thread that captures, um destroys nothing: the event is destroyed on this
            // thread once its captures have ended (a destroy needs no order: work that recorded
            // the event or waits for it still completes).
            let (ctx, raw) = (self.ctx.clone(), self.raw);
            keep_for_capture_end(Box::new(move || destroy_event(&ctx, raw)));
            return;
        }
        destroy_event(&self.ctx, self.raw);
    }
}

/// Destroys the event `raw` of `ctx`, made by `event_create` and destroyed once, here. Without
/// the context the event cannot be destroyed safely: leaked. That includes um's stream callback
/// (a waker dropping a `StreamOrder`), where `bind` refuses, since no CUDA call is allowed there
/// (rule 189).
fn destroy_event(ctx: &Context, raw: sys::CUevent) {
    if ctx.bind().is_ok() {
        // SAFETY: created by `event_create`, destroyed only here, context current. Work that
        // recorded it or waits for it still completes (the driver releases the event
        // afterwards).
        let _ = unsafe { driver::event_destroy(raw) };
    }
}

/// The event a stream records when memory is handed off it: made on first use, then reused
/// for the stream's life. Every [`Stream`](crate::Stream) owns one (behind an `Arc`, so that
/// memory can find it from the stream's raw handle while the brand keeps the stream alive).
pub(crate) struct StreamEvent {
    /// The stream's context: the event is made in it (`cuEventRecord` needs the event and the
    /// stream in one context).
    ctx: Context,
    event: OnceLock<Event>,
    /// Whether work on the stream was abandoned half-done (`driver/poison.rs`). Shared with the
    /// memory the stream gives up to the reaper, which must not free it once the mark is set.
    poison: Arc<PoisonFlag>,
    /// For a created stream: whether a [`StreamOrder`](crate::StreamOrder) asked for a record
    /// of the stream's last work, and whether the stream has ended (see
    /// [`StreamEvent::record_now_or_at_end`]).
    end: std::sync::Mutex<EndRecord>,
}

/// What a created stream's end records (`StreamEvent::end`).
#[derive(Default)]
struct EndRecord {
    /// A [`StreamOrder`](crate::StreamOrder) follows work on the stream without recording it
    /// after each call: the stream's end records the stream's event first.
    wanted: bool,
    /// The stream's scope has ended: its handle is destroyed, or about to be, and never used
    /// again here.
    ended: bool,
    /// The end's record was made (the event then covers every piece of work of the stream).
    recorded_at_end: bool,
}

impl StreamEvent {
    pub(crate) fn new(ctx: Context) -> StreamEvent {
        StreamEvent {
            ctx,
            event: OnceLock::new(),
            poison: Arc::default(),
            end: std::sync::Mutex::default(),
        }
    }

    fn end_state(&self) -> std::sync::MutexGuard<'_, EndRecord> {
        self.end
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the stream's end for a record of its last work (and makes the event now, so that
    /// the end needs no `cuEventCreate`).
    pub(crate) fn want_end_record(&self) -> Result<()> {
        self.get()?;
        self.end_state().wanted = true;
        Ok(())
    }

    /// Makes the stream's event cover every piece of work queued on the stream so far: records
    /// it on `handle` now while the stream lives, else relies on the record its end made.
    /// `true` where the event now covers that work, `false` where the record failed (or the
    /// end's did, or none was wanted): the caller must order the work by other means.
    ///
    /// # Safety
    /// `handle` is the handle of the created stream this belongs to, and [`StreamEvent::end`]
    /// is called (with it) before that stream is destroyed.
    pub(crate) unsafe fn record_now_or_at_end(&self, handle: sys::CUstream) -> bool {
        let end = self.end_state();
        if end.ended {
            return end.recorded_at_end;
        }
        let Some(event) = self.event.get() else {
            return false;
        };
        // SAFETY: the stream has not ended, and cannot while the lock is held (`end` takes it
        // before the stream is destroyed), so `handle` is live; it is of the event's context.
        unsafe { event.record(handle) }.is_ok()
    }

    /// The created stream's end, before its handle is destroyed: records the event on it if a
    /// [`StreamOrder`](crate::StreamOrder) asked, and marks the stream ended, under the lock
    /// [`StreamEvent::record_now_or_at_end`] takes.
    ///
    /// # Safety
    /// `handle` is the stream's, live (not destroyed yet), and never used here again.
    pub(crate) unsafe fn end(&self, handle: sys::CUstream) {
        let mut end = self.end_state();
        if let (true, Some(event)) = (end.wanted, self.event.get()) {
            // SAFETY: `handle` is live and of the event's context (the caller's guarantee).
            end.recorded_at_end = unsafe { event.record(handle) }.is_ok();
        }
        end.ended = true;
    }

    /// The stream's poison mark.
    #[inline]
    pub(crate) fn poison(&self) -> &Arc<PoisonFlag> {
        &self.poison
    }

    /// Whether the stream is poisoned.
    #[inline]
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poison.is_set()
    }

    /// The context of the stream.
    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    /// The stream's event, made now if this is its first use. If two threads make it at once,
    /// one event is kept and the other destroyed.
    pub(crate) fn get(&self) -> Result<&Event> {
        if let Some(event) = self.event.get() {
            return Ok(event);
        }
        let fresh = Event::new(&self.ctx)?;
        // If another thread set it first, the closure is not called and `fresh` is dropped
        // (destroyed) with it.
        Ok(self.event.get_or_init(|| fresh))
    }
}
