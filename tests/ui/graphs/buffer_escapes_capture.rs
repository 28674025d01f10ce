// Rule: a buffer of a capture leaves the closure only in the buffer set, which the graph then
// holds: it cannot be kept anywhere else (it carries the capture's brand).
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn escape(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let set = vec![x.attach(s)?, y.attach(s)?];
        let mut stash = None;
        let (graph, ()) = s.capture(set, |cap, mut set| {
            testing::add_scalar(cap, &mut set[0], 1.0)?;
            stash = set.pop();
            Ok((set, ()))
        })?;
        drop(stash);
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = escape;
}
