// Take a stream out of a `with_streams` set (to destroy it early, or keep it).
use um::{Context, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    ctx.with_streams(2, StreamOptions::new(), |ss| {
        let s = ss[0];
        drop(s);
        Ok(())
    })
}
fn main() { let _ = f; }
