// Rule 37 for mirrored memory: a buffer the kernel writes is taken as `&mut`, which is also
// what tells `sync` to copy the device half back; `&` does not do for it.
use um::{Context, Managed, StreamOptions};

fn shared(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let data = data.attach(stream)?;
        um_test_kernels::testing::add_scalar(stream, &data, 1.0)?;
        data.sync().map(drop)
    })
}

fn main() {
    let _ = shared;
}
