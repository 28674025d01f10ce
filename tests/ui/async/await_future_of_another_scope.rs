// Rule: a sync future waits for its own stream only, inside that stream's scope.
// A future of memory attached in one scope carries that scope's brand: it cannot be kept
// past the scope and awaited in another (where its stream would already be destroyed).
use um::{Context, Managed, StreamOptions};

async fn other_scope(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let mut pending = None;
    ctx.with_stream_async(StreamOptions::new(), async |a| {
        pending = Some(data.attach(a)?.sync_async());
        Ok(())
    })
    .await?;
    ctx.with_stream_async(StreamOptions::new(), async |_b| {
        if let Some(fut) = pending {
            fut.await?;
        }
        Ok(())
    })
    .await
}

fn main() {
    let _ = other_scope;
}
