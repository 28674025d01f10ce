// Rule: cuRAND makes uniform and normal numbers of f32 and f64 only (`Element` is sealed);
// random integers are `Rng::bits`, into `u32`s.
use um::{Context, Managed, StreamOptions};
use um_curand::{Rng, RngKind};

fn fill(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[0i32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut rng = Rng::new(s, RngKind::Philox, 1)?;
        let mut x = x.attach(s)?;
        rng.uniform(s, &mut x)?;
        x.sync().map(drop)
    })
}

fn main() {
    let _ = fill;
}
