// Rule: while a graph exists it holds its buffers: no CPU code can read them. The buffer moved
// into the capture; the binding is gone.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn read_while_captured(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        graph.launch(s)?;
        println!("{}", x[0]);
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = read_while_captured;
}
