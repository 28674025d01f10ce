// Rule 1 for mirrored memory: the CPU may not read a stream-owned mirror. While the stream owns
// it, `attach`'s host-to-device copy may still be reading the pinned half, and after a kernel
// wrote the device half the pinned half is stale until `sync` copies it back.
use um::{Context, Managed, StreamOptions};

fn read(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let data = data.attach(stream)?;
        let first: f32 = data[0];
        let all: &[f32] = &*data;
        println!("{first} {}", all.len());
        Ok(())
    })
}

fn main() {
    let _ = read;
}
