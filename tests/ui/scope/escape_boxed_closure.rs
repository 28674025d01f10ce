// Escape the brand inside a boxed closure whose lifetime is the caller's.
use um::{Context, Managed, StreamOptions};
fn f<'a>(ctx: &'a Context) -> um::Result<Box<dyn FnOnce() + 'a>> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let d = data.attach(s)?;
        Ok(Box::new(move || drop(d)) as Box<dyn FnOnce() + 'a>)
    })
}
fn main() { let _ = f; }
