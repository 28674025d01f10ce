// Return an unpolled future that borrows the stream from a synchronous scope, and poll it
// after the stream is destroyed.
use um::{Context, Managed, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    let fut = ctx.with_stream(StreamOptions::new(), |s| {
        Ok(async move {
            let d = data.attach(s)?;
            d.sync_async().await
        })
    })?;
    let _ = pollster::block_on(fut);
    Ok(())
}
fn main() { let _ = f; }
