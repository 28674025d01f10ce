// Rule: a host access between replays shows the contents for the closure only: the view cannot
// leave it, because the buffer goes back to the stream when it returns.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn keep_view(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (mut graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        let view = graph.host(s, |(x,)| x)?;
        graph.launch(s)?;
        view[0] = 2.0;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = keep_view;
}
