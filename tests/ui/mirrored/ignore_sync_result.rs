// Rule 17 for mirrored memory: ignoring `sync`'s Result throws the buffer away, with the copy
// back to the host it may have enqueued.
#![deny(unused_must_use)]
use um::{Context, Managed, StreamOptions};

fn ignore(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream)?;
        attached.sync();
        Ok(())
    })
}

fn main() {
    let _ = ignore;
}
