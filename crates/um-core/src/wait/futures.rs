//! `sync` as a future: [`SyncFuture`] (of [`Managed::sync_async`]) and [`SyncAllFuture`] (of
//! [`Stream::sync_all_async`]).
//!
//! Making the future enqueues, on the owning stream, what `sync` enqueues before its wait (the
//! storage's release to the host, `crate::state`), then a completion
//! (`crate::reclaim::completion`: a stream callback that wakes the task). Polled after the
//! callback ran, the future checks the stream's status (`cuStreamQuery` returns a sticky error)
//! and only then retypes the buffers to the host. No thread blocks and nothing polls.
//!
//! On a thread that captures (a future awaited inside a capture closure) the query is not made:
//! the driver would refuse it there, which would invalidate the capture, and the future would
//! take the refusal for an error of the stream and leak the buffers. The callback's success is
//! enough to hand them to the CPU: the driver calls it once every operation enqueued before it
//! has completed, and passes it the error if the stream met one. A query refused elsewhere
//! because of a capture (another library's, in global mode) leaves the callback's word standing
//! too.
//!
//! # Cancellation
//!
//! Dropping a future before its stream reached the point must neither free the buffers (a
//! kernel may still use them) nor wait for the stream (the drop runs on an executor thread).
//! The drop gives the buffers up as orphans and leaves them to the completion; the callback,
//! when it runs, passes them to the reaper (`crate::reclaim::reaper`), which frees them. If the
//! stream met an error, the memory is leaked, as a failed `sync` leaks it.
//!
//! What a future shares with its callback is the completion's handoff: `poll` is its
//! `poll_status`, the drop its `leave`. The loom models of `reclaim/completion.rs` check it over
//! every interleaving (no lost wakeup, the last task woken, the buffers settled once).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use crate::driver;
use crate::driver::context::Context;
use crate::driver::stream::{Created, Eager, RawStream, Stream, StreamKind};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::Managed;
use crate::memory::marker::{HostOwned, StreamOwned};
use crate::memory::release::{Passed, Released};
use crate::memory::state::{SyncGroup, release_to_host};
use crate::memory::storage::{Storage, Unified};
use crate::reclaim::completion::Completion;
use crate::reclaim::defer::capturing;
use crate::sealed::PRIVATE;

impl<'s, T: ?Sized, K: Eager, M: Storage> Managed<T, StreamOwned<'s, K>, M> {
    /// `sync` as a future: enqueues what `sync` enqueues before its wait, then a host callback
    /// (`cuStreamAddCallback`), and resolves to the host-owned memory once the stream has run
    /// up to that point. No thread blocks while the GPU works.
    ///
    /// The future checks the stream's status before it hands the memory to the CPU: a fault of
    /// an earlier kernel comes back as `Err` (and the memory is leaked, as with `sync`).
    /// Dropping the future unfinished never waits: the memory is freed once the stream is done
    /// (see [`SyncFuture`]).
    pub fn sync_async(self) -> SyncFuture<'s, T, K, M> {
        let released = self
            .owner_context()
            .bind()
            .and_then(|()| release_to_host(&self));
        SyncFuture::new(self, released.map(Released))
    }
}

impl<'s, K: Eager> Stream<'s, K> {
    /// `sync_all` as a future: one host callback for the whole group, resolving to the
    /// buffers in the host state (see [`Managed::sync_async`]).
    pub fn sync_all_async<G: SyncGroup<'s, K>>(&self, group: G) -> SyncAllFuture<'s, K, G> {
        let released = group.release_group(self, PRIVATE);
        SyncAllFuture::new(group, self.context(), self.raw(), released)
    }
}

enum Waiting {
    /// The callback is enqueued; the buffers return to the host associated as `after` says.
    Enqueued {
        completion: Arc<Completion>,
        after: Vec<Released>,
        ctx: Context,
        stream: RawStream,
    },
    /// Enqueueing failed; the error is returned at the first poll.
    Failed(Error),
    /// The output has been returned.
    Done,
}

/// The future of [`Stream::sync_all_async`]: resolves to the buffers of `G` in the host state
/// once the stream has reached the point where the future was made.
///
/// Dropping it unfinished hands the buffers to `um`'s reaper, which frees them once the stream
/// has passed that point; the drop itself never waits.
///
/// # Panics
/// When polled again after it returned `Ready` (the `Future` contract leaves that open).
#[must_use = "futures do nothing unless awaited; dropping this one frees the buffers once the stream is done"]
pub struct SyncAllFuture<'s, K: StreamKind, G: SyncGroup<'s, K>> {
    group: Option<G>,
    waiting: Waiting,
    _stream: PhantomData<StreamOwned<'s, K>>,
}

// No field is structurally pinned: the future moves its buffers out by value.
impl<'s, K: StreamKind, G: SyncGroup<'s, K>> Unpin for SyncAllFuture<'s, K, G> {}

impl<'s, K: StreamKind, G: SyncGroup<'s, K>> SyncAllFuture<'s, K, G> {
    /// `released` is the outcome of enqueueing the releases to the host; on success the
    /// callback is enqueued after them.
    pub(crate) fn new(
        group: G,
        ctx: &Context,
        stream: RawStream,
        released: Result<Vec<Released>>,
    ) -> Self {
        let waiting =
            match released.and_then(|after| Ok((after, Completion::enqueue(ctx, stream)?))) {
                Ok((after, completion)) => Waiting::Enqueued {
                    completion,
                    after,
                    ctx: ctx.clone(),
                    stream,
                },
                Err(e) => Waiting::Failed(e),
            };
        SyncAllFuture {
            group: Some(group),
            waiting,
            _stream: PhantomData,
        }
    }
}

impl<'s, K: StreamKind, G: SyncGroup<'s, K>> Future for SyncAllFuture<'s, K, G> {
    type Output = Result<G::Host>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let status = match &this.waiting {
            Waiting::Enqueued { completion, .. } => match completion.poll_status(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(status) => status,
            },
            Waiting::Failed(_) | Waiting::Done => 0,
        };
        let (group, waiting) = (
            this.group.take(),
            std::mem::replace(&mut this.waiting, Waiting::Done),
        );
        let Some(group) = group else {
            panic!("a sync future was polled after it completed");
        };
        match waiting {
            Waiting::Failed(e) => {
                // Like a failed `sync`: the buffers' drop waits for the stream, and leaks them
                // if that fails.
                drop(group);
                Poll::Ready(Err(e))
            }
            Waiting::Enqueued {
                completion,
                after,
                ctx,
                stream,
            } => {
                // The stream's status: the callback's, and then the stream's own, which
                // carries a sticky error of the context. "Not ready" only means later work.
                let checked = if status == sys::SUCCESS {
                    confirmed(capturing(), || {
                        ctx.bind()
                            .and_then(|()| driver::stream_query(stream.handle))
                    })
                    .and_then(|()| {
                        // SAFETY: the future carries the stream's brand 's, so the stream
                        // is alive. Poisoned (it, or a stream a buffer was handed off
                        // from): work was aborted and may still touch the memory, whatever
                        // the stream reports.
                        if unsafe { stream.is_poisoned() } || group.poisoned_group(PRIVATE) {
                            Err(Error::StreamPoisoned)
                        } else {
                            Ok(())
                        }
                    })
                } else {
                    Err(driver::driver_error(completion.source(), status))
                };
                match checked {
                    Ok(()) => Poll::Ready(Ok(group.host_group(Passed::new(after), PRIVATE))),
                    Err(e) => {
                        // The GPU may still hold the memory: leak it, never free it.
                        drop(group.orphan_group(PRIVATE));
                        Poll::Ready(Err(e))
                    }
                }
            }
            Waiting::Done => panic!("a sync future was polled after it completed"),
        }
    }
}

/// Whether a stream whose callback reported success may be taken to have passed the point: the
/// stream's own status (`query`: a sticky error of the context) where it may be asked, that is
/// not on a thread that captures (`capturing`: the driver would refuse the query and invalidate
/// the capture); a query refused because of a capture says nothing about the stream, and leaves
/// the callback's word standing. An error of the stream itself is the `Err`.
fn confirmed(capturing: bool, query: impl FnOnce() -> Result<bool>) -> Result<()> {
    if capturing {
        return Ok(());
    }
    match query() {
        Ok(_) => Ok(()),
        Err(e) if driver::is_capture_refusal(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

impl<'s, K: StreamKind, G: SyncGroup<'s, K>> Drop for SyncAllFuture<'s, K, G> {
    fn drop(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        match &self.waiting {
            Waiting::Enqueued { completion, .. } => {
                // The callback hands the buffers to the reaper; if it has run already, they go
                // there now. Either way no CUDA call here (`cuMemFree` may wait for the device).
                completion.leave(group.orphan_group(PRIVATE));
            }
            // Nothing was enqueued: the buffers' own drop waits for the stream, as for `sync`.
            Waiting::Failed(_) | Waiting::Done => drop(group),
        }
    }
}

impl<'s, K: StreamKind, G: SyncGroup<'s, K>> fmt::Debug for SyncAllFuture<'s, K, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.waiting {
            Waiting::Enqueued { completion, .. } => {
                if completion.is_reported() {
                    "ready"
                } else {
                    "waiting"
                }
            }
            Waiting::Failed(_) => "failed",
            Waiting::Done => "done",
        };
        f.debug_struct("SyncAllFuture")
            .field("stream_kind", &K::NAME)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// The future of [`Managed::sync_async`]: resolves to the buffer in the host state once its
/// stream has reached the point where the future was made. Cancellation as for
/// [`SyncAllFuture`].
#[must_use = "futures do nothing unless awaited; dropping this one frees the buffer once the stream is done"]
pub struct SyncFuture<'s, T: ?Sized, K: StreamKind = Created, M: Storage = Unified> {
    inner: SyncAllFuture<'s, K, (Managed<T, StreamOwned<'s, K>, M>,)>,
}

impl<'s, T: ?Sized, K: StreamKind, M: Storage> SyncFuture<'s, T, K, M> {
    pub(crate) fn new(
        memory: Managed<T, StreamOwned<'s, K>, M>,
        released: Result<Released>,
    ) -> Self {
        // The owner's context: the callback (or event) goes on the owning stream.
        let (ctx, stream) = (memory.owner_context().clone(), memory.stream());
        SyncFuture {
            inner: SyncAllFuture::new((memory,), &ctx, stream, released.map(|r| vec![r])),
        }
    }
}

impl<'s, T: ?Sized, K: StreamKind, M: Storage> Future for SyncFuture<'s, T, K, M> {
    type Output = Result<Managed<T, HostOwned, M>>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.get_mut().inner)
            .poll(cx)
            .map(|r| r.map(|(m,)| m))
    }
}

impl<T: ?Sized, K: StreamKind, M: Storage> fmt::Debug for SyncFuture<'_, T, K, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::confirmed;
    use crate::error::Error;

    fn driver(code: i32) -> Error {
        Error::Driver {
            call: "cuStreamQuery",
            code,
            name: String::new(),
            description: String::new(),
        }
    }

    /// Inside a capture closure the future hands the buffers to the CPU on the callback's word:
    /// it makes no query there (which the driver would refuse, invalidating the capture, and
    /// which the future then took for an error of the stream, leaking the buffers).
    #[test]
    fn on_a_capturing_thread_the_callback_is_trusted_without_a_query() {
        let mut asked = false;
        assert_eq!(
            confirmed(true, || {
                asked = true;
                Err(driver(900))
            }),
            Ok(())
        );
        assert!(!asked, "no query on a capturing thread");
    }

    /// Elsewhere the query is made: a sticky error of the stream is the future's `Err` (and the
    /// buffers are leaked), "not ready" only means later work, and a refusal because of a
    /// capture (another library's) says nothing about the stream.
    #[test]
    fn elsewhere_a_sticky_error_counts_and_a_capture_refusal_does_not() {
        assert_eq!(confirmed(false, || Ok(true)), Ok(()));
        assert_eq!(confirmed(false, || Ok(false)), Ok(()));
        assert_eq!(confirmed(false, || Err(driver(700))), Err(driver(700)));
        assert_eq!(
            confirmed(false, || Err(Error::StreamPoisoned)),
            Err(Error::StreamPoisoned)
        );
        for code in [900, 901, 906] {
            assert_eq!(confirmed(false, || Err(driver(code))), Ok(()), "{code}");
        }
    }
}
