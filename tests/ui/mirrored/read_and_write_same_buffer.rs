// Rule 9 for mirrored memory: a written kernel argument may not alias another one.
use um::{Context, Managed, StreamOptions};

fn alias(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let mut data = data.attach(stream)?;
        um_test_kernels::testing::axpy(stream, &data, &mut data, 2.0)?;
        data.sync().map(drop)
    })
}

fn main() {
    let _ = alias;
}
