//! Timing the device's work: a [`TimeMark`] is an event with timing enabled, recorded on an eager
//! stream ([`Stream::mark_time`]); two marks make a [`TimeSpan`] ([`TimeMark::until`]); and the
//! time between them is read only once both points have completed, through a host wait
//! ([`TimeSpan::wait`], which gives an [`Elapsed`]) or a query that waits for nothing
//! ([`TimeSpan::try_elapsed`]). A `TimeSpan` has no method that returns a time without one of
//! them: the driver's answer for a point not reached yet is an error, never a time.
//!
//! What the types and checks hold:
//!
//! * only eager streams take a mark: on a capture stream the record would be a node of the graph,
//!   and the time between two replays' nodes means nothing (`mark_time` needs `K: Eager`);
//! * on a thread that captures, every call here is [`Error::InsideCapture`] before any driver
//!   call, so the capture is never failed by a mark or a wait (the driver refuses waits there,
//!   and the refusal invalidates the capture);
//! * both marks of a span belong to one context (`cuEventElapsedTime` needs it), and the end is
//!   marked after the start on the host; between two streams, the device order is the
//!   program's (a `hand_off`, a [`StreamOrder`](crate::StreamOrder)), and a span whose end the
//!   device reached first is an `Err` when read, never a negative or wrapped time;
//! * an unread span, and every mark, frees its events without waiting (`cuEventDestroy` of a
//!   pending event is legal: the driver releases it once the device has passed it); dropped on a
//!   capturing thread, once its captures have ended (rule 197).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::driver;
use crate::driver::context::refuse_inside_capture;
use crate::driver::event::Event;
use crate::driver::stream::{Eager, Stream, StreamKind};
use crate::error::{Error, Result};

/// The host order of marks, process-wide: a mark made later has a larger number.
static NEXT_MARK: AtomicU64 = AtomicU64::new(1);

/// A point in the work of an eager stream, whose time the device records when it reaches it
/// (`cuEventRecord` of an event with timing enabled). Made by [`Stream::mark_time`]; two of them
/// make a [`TimeSpan`].
///
/// Cheap to clone (the event is shared): one mark may end a span and start the next. `Send`
/// and `Sync`: a mark names a point of one stream's work, not the stream, and may be read on any
/// thread (a mark of the per-thread stream included).
#[derive(Clone)]
pub struct TimeMark {
    event: Arc<Event>,
    /// Where the mark comes in the host's order of marks ([`NEXT_MARK`]).
    order: u64,
}

/// The time from one [`TimeMark`] to a later one, not read yet. Reading needs both points
/// completed: [`wait`](TimeSpan::wait) waits for them on the host, and
/// [`try_elapsed`](TimeSpan::try_elapsed) asks without waiting. Dropping an unread span frees
/// its events without waiting.
#[must_use = "a time span is read with `wait` or `try_elapsed`"]
pub struct TimeSpan {
    start: Arc<Event>,
    end: Arc<Event>,
}

/// The time the device took from the start of a [`TimeSpan`] to its end, read once both had
/// completed ([`TimeSpan::wait`]). The driver measures it in milliseconds, to about half a
/// microsecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Elapsed {
    duration: Duration,
}

impl<K: StreamKind> Stream<'_, K> {
    /// Marks the point the work queued on this stream so far ends at: the device records the
    /// time it reaches it. Enqueues an event record and waits for nothing.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// # use um_core::{Context, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let span = ctx.with_stream(StreamOptions::new(), |stream| {
    ///     let start = stream.mark_time()?;
    ///     // ... launches, copies on `stream` ...
    ///     let end = stream.mark_time()?;
    ///     start.until(&end)
    /// })?;
    /// let elapsed = span.wait()?; // waits on the host for both marks
    /// println!("{:?}", elapsed.duration());
    /// # Ok(()) }
    /// ```
    ///
    /// Only on an eager stream (a capture stream has none: the record would be a node of the
    /// graph). Refused: on a thread that captures ([`Error::InsideCapture`], before any driver
    /// call), on a poisoned stream ([`Error::StreamPoisoned`]).
    pub fn mark_time(&self) -> Result<TimeMark>
    where
        K: Eager,
    {
        refuse_inside_capture("marking a time")?;
        self.check_not_poisoned()?;
        let event = Event::new_timed(self.context())?;
        // SAFETY: the stream is alive (borrowed) and of the event's context; `record` makes
        // that context current first (the per-thread handle names a stream of the current one).
        unsafe { event.record(self.raw().handle) }?;
        Ok(TimeMark {
            event: Arc::new(event),
            order: NEXT_MARK.fetch_add(1, Ordering::Relaxed),
        })
    }
}

impl TimeMark {
    /// The span from this mark to `end`, to be read once both points have completed. Refused
    /// ([`Error::TimeSpan`]): marks of two contexts (two handles of one device are one context),
    /// and an `end` marked before this one. `end` may be of another stream: the program orders
    /// the two streams (a span whose end the device reaches first is an `Err` when read). The
    /// same mark as `end` is a span of no time.
    pub fn until(&self, end: &TimeMark) -> Result<TimeSpan> {
        if !self.event.context().same_as(end.event.context()) {
            return Err(Error::TimeSpan {
                reason: "its marks belong to two contexts",
            });
        }
        if end.order < self.order {
            return Err(Error::TimeSpan {
                reason: "its end was marked before its start",
            });
        }
        Ok(TimeSpan {
            start: Arc::clone(&self.event),
            end: Arc::clone(&end.event),
        })
    }
}

impl TimeSpan {
    /// Waits on the host until the device has reached both marks (`cuEventSynchronize`; the
    /// thread sleeps), then reads the time between them. An error of the work before a mark (a
    /// kernel fault) is the `Err`. On a thread that captures: [`Error::InsideCapture`], before
    /// any driver call.
    pub fn wait(self) -> Result<Elapsed> {
        refuse_inside_capture("waiting for a time span")?;
        self.start.context().bind()?;
        for event in [&self.start, &self.end] {
            // SAFETY: the event is alive (held by `self`); its context is current.
            unsafe { driver::event_synchronize(event.raw()) }?;
        }
        // SAFETY: both events are alive, timed (`Event::new_timed`), recorded (`mark_time`) and
        // of the current context (`until` checked that they share it).
        let ms = unsafe { driver::event_elapsed_ms(self.start.raw(), self.end.raw()) }?;
        duration_of(ms).map(|duration| Elapsed { duration })
    }

    /// The time between the marks if the device has reached both, `None` if not yet: asks
    /// (`cuEventQuery`) and waits for nothing. An error of the work before a mark is the `Err`.
    /// On a thread that captures: [`Error::InsideCapture`], before any driver call.
    pub fn try_elapsed(&self) -> Result<Option<Duration>> {
        refuse_inside_capture("reading a time span")?;
        self.start.context().bind()?;
        for event in [&self.start, &self.end] {
            // SAFETY: the event is alive (held by `self`); its context is current.
            if !unsafe { driver::event_query(event.raw()) }? {
                return Ok(None);
            }
        }
        // SAFETY: as in `wait`; both events have completed.
        let ms = unsafe { driver::event_elapsed_ms(self.start.raw(), self.end.raw()) }?;
        duration_of(ms).map(Some)
    }
}

impl Elapsed {
    /// The time, as a [`Duration`].
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The time in seconds.
    pub fn as_secs_f64(&self) -> f64 {
        self.duration.as_secs_f64()
    }
}

impl From<Elapsed> for Duration {
    fn from(elapsed: Elapsed) -> Duration {
        elapsed.duration
    }
}

impl std::fmt::Debug for TimeMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeMark")
            .field("order", &self.order)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for TimeSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeSpan").finish_non_exhaustive()
    }
}

/// The driver's milliseconds as a `Duration`: a negative time (the end completed first, on a
/// stream not ordered after the start's) or one that is not a finite number is an `Err`.
fn duration_of(ms: f32) -> Result<Duration> {
    let reversed = Error::TimeSpan {
        reason: "its end completed before its start on the device: order the two streams \
                 (hand_off, StreamOrder) or mark both on one",
    };
    if ms < 0.0 {
        return Err(reversed);
    }
    Duration::try_from_secs_f64(f64::from(ms) / 1000.0).map_err(|_| Error::TimeSpan {
        reason: "the driver reported a time that is not a finite number",
    })
}

#[cfg(test)]
mod tests {
    use super::duration_of;
    use crate::error::Error;
    use std::time::Duration;

    #[test]
    fn the_drivers_milliseconds_become_a_duration_and_a_negative_time_an_error() {
        assert_eq!(duration_of(0.0), Ok(Duration::ZERO));
        assert_eq!(duration_of(-0.0), Ok(Duration::ZERO));
        assert_eq!(duration_of(1500.0), Ok(Duration::from_millis(1500)));
        let half_us = duration_of(0.0005).map(|d| d.as_nanos()).unwrap_or(0);
        assert!((499..=501).contains(&half_us), "{half_us} ns");
        for bad in [-0.001, -3.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert!(
                matches!(duration_of(bad), Err(Error::TimeSpan { .. })),
                "{bad} ms"
            );
        }
    }
}
