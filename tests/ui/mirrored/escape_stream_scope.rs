// Rule 12 for mirrored memory: a stream-owned mirror cannot leave its stream's closure (its
// copies are enqueued on that stream, which is destroyed when the closure ends).
use um::{Context, Managed, StreamOptions};

fn escape(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1u32, 2, 3])?;
    let escaped = ctx.with_stream(StreamOptions::new(), |stream| data.attach(stream))?;
    drop(escaped);
    Ok(())
}

fn main() {
    let _ = escape;
}
