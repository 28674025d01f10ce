// Return the sync future (not awaited) from the async scope: it carries the brand.
use um::{Context, Managed, StreamOptions};
async fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    let fut = ctx
        .with_stream_async(StreamOptions::new(), async |s| Ok(data.attach(s)?.sync_async()))
        .await?;
    let _host = fut.await?;
    Ok(())
}
fn main() { let _ = f; }
