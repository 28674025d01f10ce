// Rule: after `attach`, the host-owned value is gone; using it again is a use after move.
// Seed 000 / 001: CPU access returns only after the stream's work has completed (`sync`).
use um::{Context, Managed, StreamOptions};

fn after(ctx: &Context) -> um::Result<()> {
    let mut data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream)?;
        data[0] = 7;
        attached.sync().map(drop)
    })
}

fn main() {
    let _ = after;
}
