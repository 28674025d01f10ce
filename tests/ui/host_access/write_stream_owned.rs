// Rule: the CPU may not write memory attached to a stream.
// Seed 001 / seed 002 ("the Unified Memory system will allow CPU access to this memory region
// so long as all operations in hStream have completed").
use um::{Context, Managed, StreamOptions};

fn write(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let mut data = data.attach(stream)?;
        data[0] = 5.0;
        Ok(())
    })
}

fn main() {
    let _ = write;
}
