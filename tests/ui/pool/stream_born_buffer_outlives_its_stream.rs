// Rule 242: a buffer born on a stream from a pool is that stream's from the start
// (`StreamOwned<'s>`): it cannot leave the stream's closure, where its free would have no
// stream to be ordered on. `sync` gives it back to the host first, and a host-owned one may
// outlive the stream.
use um::{Context, MemPool, StreamOptions};

fn escape(ctx: &Context, pool: &MemPool) -> um::Result<()> {
    let escaped = ctx.with_stream(StreamOptions::new(), |s| s.alloc_zeroed::<f32>(pool, 1024))?;
    drop(escaped);
    Ok(())
}

fn main() {
    let _ = escape;
}
