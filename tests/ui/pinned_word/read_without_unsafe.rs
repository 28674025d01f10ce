// Rule: reading a pinned word is `unsafe`: only the caller knows that the device work handed
// its address has completed. Expected: E0133.
use um::{Context, PinnedWord};

fn read(ctx: &Context) -> um::Result<f64> {
    let word = PinnedWord::new(ctx)?;
    Ok(word.read::<f64>())
}

fn main() {
    let _ = read;
}
