// Rule 230 for memory born on a stream: back on the host after `sync`, it has no host side to
// read in place (no `Deref`, `Index` or `iter`); its contents come back by a copy that waits.
use um::{Context, MemPool, StreamOptions};

fn read(ctx: &Context, pool: &MemPool) -> um::Result<f32> {
    let x = ctx.with_stream(StreamOptions::new(), |s| s.alloc_zeroed::<f32>(pool, 4)?.sync())?;
    Ok(x[0] + x.iter().sum::<f32>())
}

fn main() {
    let _ = read;
}
