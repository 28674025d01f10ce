// Rule: a generated launcher takes only buffers owned by the stream it launches on: memory
// attached to stream `a` cannot go to a kernel on stream `b` (seed 001: "only kernels launched
// into that stream will touch that data").
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn other_stream(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut data = data.attach(a)?;
            testing::add_scalar(b, &mut data, 1.0)?;
            data.sync().map(drop)
        })
    })
}

fn main() {
    let _ = other_stream;
}
