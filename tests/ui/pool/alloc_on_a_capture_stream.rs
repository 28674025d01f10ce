// Rule 243: a graph does not allocate: a capture stream has no `alloc_zeroed` (it is not an
// eager stream kind). Buffers born before the capture enter it as its buffer set.
use um::{Context, MemPool, StreamOptions};

fn capture(ctx: &Context, pool: &MemPool) -> um::Result<()> {
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = s.alloc_zeroed::<f32>(pool, 1024)?;
        let (graph, ()) = s.capture((x,), |cap, set| {
            let scratch = cap.alloc_zeroed::<f32>(pool, 1024)?;
            drop(scratch);
            Ok((set, ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = capture;
}
