// Rule: no host wait of any kind on a capture stream: `Stream::wait_idle` and `is_idle` need
// an eager stream.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn wait_idle_in_capture(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            cap.wait_idle()?;
            Ok(((x,), ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = wait_idle_in_capture;
}
