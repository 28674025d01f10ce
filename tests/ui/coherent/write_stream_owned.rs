// Rule 100 (rule 2 for coherent memory): the CPU may not write a stream-owned coherent buffer:
// the write would race with the owning stream's kernels, which the device does not prevent.
use um::{Context, Managed, StreamOptions};

fn write(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_coherent(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let mut data = data.attach(stream)?;
        um_test_kernels::testing::add_scalar(stream, &mut data, 1.0)?;
        data[0] = 5.0;
        data.sync().map(drop)
    })
}

fn main() {
    let _ = write;
}
