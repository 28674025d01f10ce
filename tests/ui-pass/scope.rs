// Twins of tests/ui/scope: memory leaves a stream's scope host-owned, after `sync`; the stream
// is destroyed by its scope, after the buffers attached to it.
use um::{Context, Managed, StreamOptions};

fn scope(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let back = ctx.with_stream(StreamOptions::new(), |stream| data.attach(stream)?.sync())?;
    println!("{}", back[0]);
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = back.attach(stream)?;
        drop(attached); // waits for the stream, then frees
        Ok(())
    })
}

fn main() {
    let _ = scope;
}
