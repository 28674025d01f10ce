// Rule: no other launch can use a buffer a graph holds: it moved into the graph, so an eager
// launch beside the replays cannot name it.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn launch_while_captured(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        graph.launch(s)?;
        testing::add_scalar(s, &mut x, 1.0)?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = launch_while_captured;
}
