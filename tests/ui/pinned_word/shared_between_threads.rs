// Rule: a pinned word is `Send` but not `Sync`: one thread at a time reads and writes it, so
// two threads cannot hold `&PinnedWord` at once (a read on one racing a write on the other).
// Expected: E0277, `Cell<()>` cannot be shared between threads (`PinnedWord: !Sync`).
use um::{Context, PinnedWord};

fn share(ctx: &Context) -> um::Result<()> {
    let word = PinnedWord::new(ctx)?;
    std::thread::scope(|t| {
        t.spawn(|| word.context().clone());
    });
    Ok(())
}

fn main() {
    let _ = share;
}
