// Rule: no generation is recorded into a graph, nor writes a buffer a graph holds: inside a
// capture closure, a generator of the eager stream may run there, but a buffer of the capture's
// set is owned by the capture stream (brand `'c`, kind `Capture`), not by the generator's stream.
use um::{Context, Managed, StreamOptions};
use um_curand::{Rng, RngKind};

fn into_the_graph(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut rng = Rng::new(s, RngKind::Philox, 1)?;
        let x = x.attach(s)?;
        let (_graph, ()) = s.capture((x,), |_cap, (mut x,)| {
            rng.uniform(s, &mut x)?;
            Ok(((x,), ()))
        })?;
        Ok(())
    })
}

fn main() {
    let _ = into_the_graph;
}
