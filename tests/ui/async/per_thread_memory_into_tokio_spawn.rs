// Rule: the per-thread default stream names another stream on every thread, so its memory
// must not hop threads across an await. tokio's multi-threaded runtime may resume a task on
// any worker: a task holding per-thread-stream memory across an await is not `Send`.
use um::{Context, Managed};

fn spawn(ctx: Context) {
    tokio::spawn(async move {
        let data = Managed::from_slice(&ctx, &[1u32, 2, 3])?;
        ctx.with_per_thread_stream_async(async |pts| {
            let data = data.attach(pts)?;
            tokio::task::yield_now().await; // may resume on another worker thread
            data.sync_async().await.map(drop)
        })
        .await
    });
}

fn main() {
    let _ = spawn;
}
