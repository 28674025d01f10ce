// Rule: memory attached to a stream cannot outlive the stream.
// Seed 002: "If hStream is destroyed while data is associated with it, the association is
// removed and the association reverts to the default visibility" (silently). In `um` a stream
// lives for its closure, and memory carrying its brand cannot leave the closure.
use um::{Context, Managed, StreamOptions};

fn escape(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let escaped = ctx.with_stream(StreamOptions::new(), |stream| data.attach(stream))?;
    drop(escaped);
    Ok(())
}

fn main() {
    let _ = escape;
}
