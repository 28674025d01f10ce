// Rule: a generator of the per-thread default stream is bound to `CU_STREAM_PER_THREAD`, which
// names another stream on every thread: it stays on the thread that made it (neither the
// generator nor the stream is `Send`).
use um::Context;
use um_curand::{Rng, RngKind};

fn send(ctx: &Context) -> um::Result<()> {
    ctx.with_per_thread_stream(|s| {
        let rng = Rng::new(s, RngKind::Philox, 1)?;
        std::thread::scope(|t| {
            t.spawn(move || drop(rng));
        });
        Ok(())
    })
}

fn main() {
    let _ = send;
}
