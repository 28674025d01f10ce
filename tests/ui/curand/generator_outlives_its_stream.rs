// Rule: a generator cannot outlive its stream's scope: its brand `'s` cannot appear in the
// result of the stream's closure, so it is dropped (unbound and destroyed) while its stream
// still lives, and a later call can never reach a destroyed stream's handle.
use um::{Context, StreamOptions};
use um_curand::{Rng, RngKind};

fn escape(ctx: &Context) -> um::Result<()> {
    let rng = ctx.with_stream(StreamOptions::new(), |s| {
        Ok(Rng::new(s, RngKind::Philox, 1)?)
    })?;
    drop(rng);
    Ok(())
}

fn main() {
    let _ = escape;
}
