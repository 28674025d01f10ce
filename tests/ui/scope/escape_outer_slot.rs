// Escape the brand through a captured slot of the enclosing function.
use um::{Context, Managed, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    let mut slot = None;
    ctx.with_stream(StreamOptions::new(), |s| {
        slot = Some(data.attach(s)?);
        Ok(())
    })?;
    drop(slot);
    Ok(())
}
fn main() { let _ = f; }
