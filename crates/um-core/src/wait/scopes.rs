//! Async stream scopes: `Context::with_stream_async` and its siblings, the async twins of
//! `with_stream`, `with_stream_set` and `with_per_thread_stream`.
//!
//! The brand works for async closures as for `FnOnce`: `impl for<'s> AsyncFnOnce(&Stream<'s,
//! _>) -> Result<R>` keeps stream-owned memory, and sync futures of it, inside the scope across
//! any number of `.await`s. A scope's future dropped before it completes drops the closure's
//! future under the mark of `crate::reclaim::defer`, so that memory still attached in it goes to
//! the reaper instead of blocking the executor thread in its drop.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use crate::driver::context::Context;
use crate::driver::stream::{Created, PerThread, Stream, StreamOptions};
use crate::error::Result;
use crate::reclaim::defer::DroppingScope;

impl Context {
    /// Creates a stream, runs the async closure `f` with it, and destroys it once the future
    /// `f` returned has completed: the async twin of [`Context::with_stream`].
    ///
    /// The brand `'s` is generic in `f` exactly as in `with_stream`, so memory attached to the
    /// stream cannot leave `f`, across any number of `.await`s; nor can a future of such memory
    /// ([`Managed::sync_async`](crate::Managed::sync_async)). Wait for the stream with
    /// `sync_async` / `sync_all_async`, never with `sync`, on an executor thread.
    ///
    /// Dropping the returned future before it completes drops `f`'s future first, then the
    /// stream (whose destruction lets queued work finish). Nothing in that drop waits for the
    /// GPU: memory `f` still held attached, or inside a sync future, goes to `um`'s reaper
    /// behind a callback on its stream, and is freed once the stream has run past it. Nothing
    /// is freed while the GPU may use it.
    ///
    /// ```no_run
    /// # async fn f(ctx: &um_core::Context) -> um_core::Result<()> {
    /// use um_core::{Managed, StreamOptions};
    /// let data = Managed::from_slice(ctx, &[1.0f32, 2.0, 3.0])?;
    /// let data = ctx
    ///     .with_stream_async(StreamOptions::new(), async |stream| {
    ///         let data = data.attach(stream)?;
    ///         // ... launch kernels on `stream` ...
    ///         data.sync_async().await // no thread waits for the GPU
    ///     })
    ///     .await?;
    /// assert_eq!(data[0], 1.0);
    /// # Ok(()) }
    /// ```
    pub async fn with_stream_async<R>(
        &self,
        options: StreamOptions,
        f: impl for<'s> AsyncFnOnce(&Stream<'s, Created>) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let stream = self.new_created_stream(options)?;
        let result = defer_on_drop(f(&stream)).await;
        drop(stream);
        result
    }

    /// `n` streams for an async closure: the async twin of [`Context::with_stream_set`], with its
    /// shared brand and run-time ownership checks.
    pub async fn with_stream_set_async<R>(
        &self,
        n: usize,
        options: StreamOptions,
        f: impl for<'s> AsyncFnOnce(&[Stream<'s, Created>]) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            streams.push(self.new_created_stream(options)?);
        }
        let result = defer_on_drop(f(&streams)).await;
        drop(streams);
        result
    }

    /// The calling thread's default stream for an async closure: the async twin of
    /// [`Context::with_per_thread_stream`].
    ///
    /// The same handle names another stream on every thread, so the future is neither `Send`
    /// nor `Sync`: an executor cannot move it to another thread between two polls (use
    /// `spawn_local`, `block_on`, or a created stream with [`Context::with_stream_async`]).
    pub async fn with_per_thread_stream_async<R>(
        &self,
        f: impl for<'s> AsyncFnOnce(&Stream<'s, PerThread>) -> Result<R>,
    ) -> Result<R> {
        self.bind()?;
        let stream = self.per_thread_stream()?;
        defer_on_drop(f(&stream)).await
    }
}

/// The future of an async scope's closure. Dropped unfinished, it drops that future with the
/// deferred frees of `crate::reclaim::defer` in force, so that buffers still attached in it do
/// not block the thread.
struct DeferOnDrop<F> {
    inner: std::mem::ManuallyDrop<F>,
}

impl<F: Future> Future for DeferOnDrop<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        // SAFETY: structural pinning of `inner`: it is never moved out, and it is dropped in
        // place (in `drop`), as `Pin` requires.
        unsafe { self.map_unchecked_mut(|s| &mut *s.inner) }.poll(cx)
    }
}

impl<F> Drop for DeferOnDrop<F> {
    fn drop(&mut self) {
        // The mark holds until `_entered` drops, also if a drop in the closure's future panics.
        let _entered = DroppingScope::enter();
        // SAFETY: dropped in place exactly once, here; `inner` is never used again.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.inner) };
    }
}

fn defer_on_drop<F: Future>(inner: F) -> DeferOnDrop<F> {
    DeferOnDrop {
        inner: std::mem::ManuallyDrop::new(inner),
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context as TaskContext, Waker};

    use super::defer_on_drop;
    use crate::reclaim::defer::dropping_scope;

    #[test]
    fn an_unfinished_scope_future_is_dropped_with_deferred_frees() {
        struct Probe(Arc<AtomicUsize>);
        impl Drop for Probe {
            fn drop(&mut self) {
                if dropping_scope() {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let seen = Arc::new(AtomicUsize::new(0));
        let probe = Probe(Arc::clone(&seen));
        let inner = async move {
            let _probe = probe;
            std::future::pending::<()>().await;
        };
        let mut scope = Box::pin(defer_on_drop(inner));
        let mut cx = TaskContext::from_waker(Waker::noop());
        assert!(scope.as_mut().poll(&mut cx).is_pending());
        assert!(!dropping_scope(), "not while polling");
        drop(scope);
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "deferral in force during the drop"
        );
        assert!(!dropping_scope(), "and over after it");
    }
}
