// Rule: a graph holds memory of its stream, so it cannot outlive the stream's scope.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn escape(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let graph = ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        Ok(graph)
    })?;
    drop(graph);
    Ok(())
}

fn main() {
    let _ = escape;
}
