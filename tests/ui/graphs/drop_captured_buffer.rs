// Rule: no one can free a buffer a graph holds: it moved into the graph.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn drop_while_captured(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        drop(x);
        graph.launch(s)?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = drop_while_captured;
}
