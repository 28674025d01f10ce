// Escape the brand by erasing the type: Box<dyn Any> needs 'static, the brand is not.
use um::{Context, Managed, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    let b: Box<dyn std::any::Any> = ctx.with_stream(StreamOptions::new(), |s| {
        Ok(Box::new(data.attach(s)?) as Box<dyn std::any::Any>)
    })?;
    drop(b);
    Ok(())
}
fn main() { let _ = f; }
