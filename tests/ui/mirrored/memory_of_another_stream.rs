// Rule 6 for mirrored memory: a mirror attached to stream `a` goes to kernels on `a` only: its
// host-to-device copy was enqueued on `a`, so a kernel on `b` could run before it.
use um::{Context, Managed, StreamOptions};

fn other_stream(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut data = data.attach(a)?;
            um_test_kernels::testing::add_scalar(b, &mut data, 1.0)?;
            data.sync().map(drop)
        })
    })
}

fn main() {
    let _ = other_stream;
}
