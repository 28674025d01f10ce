// Rule: a generator is used by one thread: it is not `Sync`, so a scoped thread cannot even
// borrow it (cuRAND's generators are not thread-safe; a generation through `&self` from two
// threads would race on its host-side state).
use um::{Context, StreamOptions};
use um_curand::{Rng, RngKind};

fn share(ctx: &Context) -> um::Result<()> {
    ctx.with_stream(StreamOptions::new(), |s| {
        let rng = Rng::new(s, RngKind::Philox, 1)?;
        std::thread::scope(|t| {
            t.spawn(|| format!("{:?}", rng.context()));
        });
        Ok(())
    })
}

fn main() {
    let _ = share;
}
