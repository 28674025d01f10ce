// All-zero NonZeroU32 / Option<&T>-like invalid values through `zeroed`.
use std::num::NonZeroU32;
use um::{Context, Managed};
fn f(ctx: &Context) -> um::Result<()> {
    let m = Managed::<[NonZeroU32]>::zeroed_slice(ctx, 4)?;
    println!("{}", m[0]);
    Ok(())
}
fn main() { let _ = f; }
