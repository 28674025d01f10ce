// Take a stream out of a stream set (to destroy it early, or keep it).
use um::{Context, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    ctx.with_stream_set(2, StreamOptions::new(), |ss| {
        let s = ss[0];
        drop(s);
        Ok(())
    })
}
fn main() { let _ = f; }
