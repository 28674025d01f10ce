// Rule: a cuRAND generator cannot belong to a graph's capture stream: a recorded generation
// would use the generator's device state at every replay, and the graph does not hold the
// generator. Generators belong to eager streams only.
use um::{Context, Managed, StreamOptions};
use um_curand::{Rng, RngKind};

fn record(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (_graph, ()) = s.capture((x,), |cap, (mut x,)| {
            let mut rng = Rng::new(cap, RngKind::Philox, 1)?;
            rng.uniform(cap, &mut x)?;
            Ok(((x,), ()))
        })?;
        Ok(())
    })
}

fn main() {
    let _ = record;
}
