// Rule: `sync` hands the memory back; ignoring its Result throws the memory away (and hides a
// failed wait). The lint is denied here, as it should be in user crates.
// Seed 000: `cudaStreamSynchronize(stream)` before `host_process(data)`.
#![deny(unused_must_use)]
use um::{Context, Managed, StreamOptions};

fn ignore(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream)?;
        attached.sync();
        Ok(())
    })
}

fn main() {
    let _ = ignore;
}
