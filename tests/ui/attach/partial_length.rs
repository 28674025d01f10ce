// Rule: only a whole allocation can be attached.
// Seed 002: "For managed allocations, length must be either zero or the entire allocation's
// size ... it is not possible to change stream association for a portion of a managed
// allocation." (Seen on the GPU machine: a partial length is refused.) `attach` takes no length.
use um::{Context, Managed, StreamOptions};

fn partial(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[0u8; 4096])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream, 0..1024)?;
        attached.sync().map(drop)
    })
}

fn main() {
    let _ = partial;
}
