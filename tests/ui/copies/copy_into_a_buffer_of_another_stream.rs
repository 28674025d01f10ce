// Rule 254: a copy writes only a buffer of the stream it is enqueued on: a buffer owned by a
// stream of another scope has another brand, and does not compile (between the streams of one
// set, the brand is shared and the call returns `Error::StreamMismatch` instead).
use um::{Context, Managed, StreamOptions};

fn copy(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let y = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut y = y.attach(s)?;
        ctx.with_stream(StreamOptions::new(), |t| {
            let x = x.attach(t)?;
            t.copy(&x, &mut y)?;
            x.sync().map(drop)
        })?;
        y.sync().map(drop)
    })
}

fn main() {
    let _ = copy;
}
