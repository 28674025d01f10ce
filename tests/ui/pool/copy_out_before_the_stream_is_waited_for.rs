// Rule 241: memory born on a stream is that stream's from the start, and its allocation and
// zero fill are only enqueued there: no copy reads it, and none writes it, before `sync` has
// waited for them (the copies exist in the host state alone).
use um::{Context, MemPool, StreamOptions};

fn read(ctx: &Context, pool: &MemPool) -> um::Result<Vec<f32>> {
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = s.alloc_zeroed::<f32>(pool, 4)?;
        x.copy_from_host(&[1.0; 4])?;
        x.to_vec()
    })
}

fn main() {
    let _ = read;
}
