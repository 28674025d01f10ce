// Rule: attaching memory singly to the NULL (legacy default) stream is illegal (seed 002), and a
// handoff ends in a single attach to the receiving stream, so it cannot hand memory to the
// legacy stream either.
use um::{Context, Managed, StreamOptions};

fn to_legacy(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_legacy_stream(|legacy| {
            let data = data.attach(a)?.hand_off(legacy)?;
            data.sync().map(drop)
        })
    })
}

fn main() {
    let _ = to_legacy;
}
