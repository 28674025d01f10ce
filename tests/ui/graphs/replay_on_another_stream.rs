// Rule: a graph replays only on the stream that owns its buffers: a stream of another brand
// does not type-check.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn replay_elsewhere(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let x = x.attach(a)?;
            let (graph, ()) = a.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                Ok(((x,), ()))
            })?;
            graph.launch(b)?;
            graph.sync().map(drop)
        })
    })
}

fn main() {
    let _ = replay_elsewhere;
}
