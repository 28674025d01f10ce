// Rule: the host cannot wait for a capture stream: its work is recorded, not run (the driver
// refuses cuStreamSynchronize there and invalidates the capture). A type error.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn sync_in_capture(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            let x = x.sync()?;
            Ok(((x,), ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = sync_in_capture;
}
