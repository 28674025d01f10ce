// Rule: the CPU may not read memory attached to a stream: the stream's kernels may be using it.
// Seed 001: "the Unified Memory system allows CPU access to this memory region so long as all
// operations in stream have completed". Stream-owned memory has no Deref, no Index, no slice.
use um::{Context, Managed, StreamOptions};

fn read(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32, 2.0, 3.0])?;
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
