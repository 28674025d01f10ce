// Rule: inside a capture a buffer is owned by the capture stream: no CPU access, as for any
// stream-owned buffer (nothing has run yet, and the graph will use it).
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn read_in_capture(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            println!("{}", x[0]);
            Ok(((x,), ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = read_in_capture;
}
