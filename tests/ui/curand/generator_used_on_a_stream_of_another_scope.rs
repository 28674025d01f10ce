// Rule: a generator is used on its own stream only: on a stream of another scope (with a buffer
// of that stream), the brands differ and the call does not compile; between the streams of one
// set, whose brand is shared, it is `Error::WrongStream` at run time.
use um::{Context, Managed, StreamOptions};
use um_curand::{Rng, RngKind};

fn elsewhere(ctx: &Context) -> um::Result<()> {
    let y = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut rng = Rng::new(s, RngKind::Philox, 1)?;
        ctx.with_stream(StreamOptions::new(), |t| {
            let mut y = y.attach(t)?;
            rng.uniform(t, &mut y)?;
            y.sync().map(drop)
        })
    })
}

fn main() {
    let _ = elsewhere;
}
