// Rule: a pinned word holds 16 bytes, so device work may be handed its address only as a
// pointer to a type that fits: `as_device_ptr::<[f64; 3]>` (24 bytes) does not build, because
// device work writing a `[f64; 3]` there would write past the allocation. Expected: the size
// check's evaluation error. The check is evaluated when the call is built (monomorphized):
// `cargo check` alone, or a function that is never called, does not report it.
use um::{Context, PinnedWord};

fn address(ctx: &Context) -> um::Result<*mut [f64; 3]> {
    let word = PinnedWord::new(ctx)?;
    Ok(word.as_device_ptr::<[f64; 3]>())
}

fn main() {
    if let Ok(ctx) = Context::new(0) {
        let _ = address(&ctx);
    }
}
