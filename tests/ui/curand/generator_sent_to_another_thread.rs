// Rule: a cuRAND generator is of one thread: it is not thread-safe, and one of the per-thread
// default stream is bound to its thread's stream. `Rng` is neither `Send` nor `Sync`.
use um::{Context, StreamOptions};
use um_curand::{Rng, RngKind};

fn send(ctx: &Context) -> um::Result<()> {
    ctx.with_stream(StreamOptions::new(), |s| {
        let rng = Rng::new(s, RngKind::Philox, 1)?;
        std::thread::scope(|scope| {
            scope.spawn(move || drop(rng));
        });
        Ok(())
    })
}

fn main() {
    let _ = send;
}
