// Rule: a generator writes only buffers of its own stream: a buffer owned by a stream of
// another scope has another brand, and does not compile (between the streams of one set, the
// brand is shared and the call returns `Error::StreamMismatch` instead).
use um::{Context, Managed, StreamOptions};
use um_curand::{Rng, RngKind};

fn fill(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        ctx.with_stream(StreamOptions::new(), |t| {
            let mut rng = Rng::new(t, RngKind::Philox, 1)?;
            rng.uniform(t, &mut x)?;
            Ok(())
        })?;
        x.sync().map(drop)
    })
}

fn main() {
    let _ = fill;
}
