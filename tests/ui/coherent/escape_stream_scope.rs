// Rule 104 (rule 12 for coherent memory): a stream-owned coherent buffer cannot leave its
// stream's closure. Its `sync`, drop and `hand_off` wait for (or record an event on) that
// stream, which is destroyed when the closure ends.
use um::{Context, Managed, StreamOptions};

fn escape(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_coherent(ctx, &[1u32, 2, 3])?;
    let escaped = ctx.with_stream(StreamOptions::new(), |stream| data.attach(stream))?;
    drop(escaped);
    Ok(())
}

fn main() {
    let _ = escape;
}
