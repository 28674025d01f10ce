// Rule: a pinned word is read only as a type whose alignment it guarantees (16 bytes): a type
// aligned to 32 does not build even when it is empty and so fits in size, since the check
// promises nothing beyond 16. Expected: the alignment check's evaluation error, reached through
// `read` (evaluated when the call is built, as in `address_of_a_type_larger_than_the_word`).
use um::{Context, PinnedWord};

#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Wide;

// SAFETY: no bytes, no pointers.
unsafe impl um::DeviceCopy for Wide {}
// SAFETY: as above.
unsafe impl um::Zeroable for Wide {}
// SAFETY: as above.
unsafe impl um::AnyBitPattern for Wide {}

fn read(ctx: &Context) -> um::Result<()> {
    let word = PinnedWord::new(ctx)?;
    // SAFETY: no device work was handed the word.
    let _wide: Wide = unsafe { word.read::<Wide>() };
    Ok(())
}

fn main() {
    if let Ok(ctx) = Context::new(0) {
        let _ = read(&ctx);
    }
}
