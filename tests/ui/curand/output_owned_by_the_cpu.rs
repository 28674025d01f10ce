// Rule: a generator writes only memory its stream owns: a host-owned buffer (the CPU's) is not
// an output; attach it to the generator's stream first.
use um::{Context, Managed, StreamOptions};
use um_curand::{Rng, RngKind};

fn fill(ctx: &Context) -> um::Result<()> {
    let mut x = Managed::<[f32]>::zeroed_slice(ctx, 4)?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut rng = Rng::new(s, RngKind::Philox, 1)?;
        rng.uniform(s, &mut x)?;
        Ok(())
    })
}

fn main() {
    let _ = fill;
}
