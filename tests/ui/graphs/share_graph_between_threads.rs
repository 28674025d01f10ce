// Rule: the driver's graph objects are not internally synchronized, so a `Graph` is not `Sync`:
// two threads cannot replay it at once.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn share(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        std::thread::scope(|t| {
            t.spawn(|| graph.launch(s));
            graph.launch(s)
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = share;
}
