// Rule: a stream cannot be destroyed while memory is attached to it.
// Seed 002: destroying the stream silently reverts the association; seed 000 destroys it only
// after the last synchronization. In `um` the stream belongs to its scope: user code gets a
// shared reference and cannot destroy it; the scope ends only after every attached buffer is
// gone.
use um::{Context, Managed, StreamOptions};

fn destroy(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream)?;
        drop(*stream);
        attached.sync().map(drop)
    })
}

fn main() {
    let _ = destroy;
}
