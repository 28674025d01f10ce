// Rule: no CPU borrow of the memory may live on once it is attached to a stream.
// Seed 000: after `cudaStreamAttachMemAsync(stream, data)` only the stream's kernels use
// `data` until the stream is synchronized. `attach` consumes the host-owned value, so a slice
// borrowed from it must end first.
use um::{Context, Managed, StreamOptions};

fn borrowed(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let view: &[u32] = &data;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream)?;
        println!("{}", view[0]);
        attached.sync().map(drop)
    })
}

fn main() {
    let _ = borrowed;
}
