// Rule 2 for mirrored memory: the CPU may not write a stream-owned mirror: the copy `attach`
// enqueued may be reading the pinned half, and `sync` may overwrite it with the device half.
use um::{Context, Managed, StreamOptions};

fn write(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let mut data = data.attach(stream)?;
        data[0] = 5.0;
        data.sync().map(drop)
    })
}

fn main() {
    let _ = write;
}
