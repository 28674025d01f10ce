// Rule: a captured buffer moves only between the capture's own streams (a fork of the graph);
// handing it to an eager stream would make that stream join the capture.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn hand_off_out(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        ctx.with_stream(StreamOptions::new(), |other| {
            let x = x.attach(s)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                let x = x.hand_off(other)?;
                Ok(((x,), ()))
            })?;
            graph.sync().map(drop)
        })
    })
}

fn main() {
    let _ = hand_off_out;
}
