// Inside the capture closure the eager stream is still in reach, but a
// buffer of the capture (brand `'c`) cannot be launched on it (brand `'s`): that launch would
// run now, on memory the graph will own.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn eager(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice_mirrored(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |_cap, (mut x,)| {
            testing::add_scalar(s, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = eager;
}
