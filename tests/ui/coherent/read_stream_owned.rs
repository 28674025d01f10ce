// Rule 100 (rule 1 for coherent memory): the CPU may not read a stream-owned coherent buffer.
// The device lets the CPU and a kernel touch globally attached memory at the same time, so
// nothing in the driver stops a read racing with the owning stream's kernels: the state does.
use um::{CoherentManaged, Context, Managed, StreamOptions};

fn read(ctx: &Context) -> um::Result<()> {
    let data: CoherentManaged<[f32]> = Managed::from_slice_coherent(ctx, &[1.0f32, 2.0, 3.0])?;
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
