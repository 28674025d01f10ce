// Rule: device work may leave any bytes in a pinned word, so it is read only as a type for
// which any bytes are a value (`AnyBitPattern`): a `bool` (only 0 and 1 are valid) does not
// compile. Expected: E0277, `bool: AnyBitPattern` is not satisfied.
use um::{Context, PinnedWord};

fn read(ctx: &Context) -> um::Result<bool> {
    let word = PinnedWord::new(ctx)?;
    // SAFETY: no device work was handed the word.
    Ok(unsafe { word.read::<bool>() })
}

fn main() {
    let _ = read;
}
