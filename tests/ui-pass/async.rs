// Twins of tests/ui/async: results leave the async scope host-owned; a created stream's scope is
// `Send` and goes into `tokio::spawn`; a per-thread scope runs where it cannot hop threads
// (`block_on` on this thread); a sync future is awaited inside its own scope.
use um::{Context, Managed, StreamOptions};

async fn results(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let data = ctx
        .with_stream_async(StreamOptions::new(), async |stream| {
            let data = data.attach(stream)?;
            std::future::ready(()).await;
            data.sync_async().await
        })
        .await?;
    assert_eq!(data[0], 1);
    Ok(())
}

fn spawn(ctx: Context) -> tokio::task::JoinHandle<um::Result<u32>> {
    tokio::spawn(async move {
        let data = Managed::from_slice(&ctx, &[1u32, 2, 3])?;
        let (a, b) = ctx
            .with_stream_async(StreamOptions::new(), async |s| {
                let (a, b) = (data.attach(s)?, Managed::from_slice(&ctx, &[4u32])?.attach(s)?);
                tokio::task::yield_now().await; // may resume on another worker: fine
                s.sync_all_async((a, b)).await
            })
            .await?;
        Ok(a[0] + b[0])
    })
}

fn per_thread(ctx: &Context) -> um::Result<u32> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let data = pollster::block_on(ctx.with_per_thread_stream_async(async |pts| {
        let data = data.attach(pts)?;
        data.sync_async().await
    }))?;
    // Host-owned again: it may move anywhere.
    std::thread::scope(|s| s.spawn(move || data[0]).join()).map_err(|_| um::Error::ContextMismatch)
}

async fn same_scope(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream_set_async(2, StreamOptions::new(), async |ss| {
        let fut = data.attach(&ss[0])?.sync_async();
        let other = Managed::from_slice(ctx, &[4u32])?.attach(&ss[1])?;
        fut.await?;
        ss[1].sync_all_async(vec![other]).await.map(drop)
    })
    .await
}

fn main() {
    let _ = (results, spawn, per_thread, same_scope);
}
