// Rule 256: `fill_zero` writes zero bytes, so only into a type whose all-zero value is valid
// (`Zeroable`): an all-zero `NonZeroU32` is undefined behaviour the moment it is read.
// Expected: E0277, `Id: Zeroable` is not satisfied.
use std::num::NonZeroU32;
use um::{Context, Managed, StreamOptions};

#[derive(Clone, Copy)]
#[repr(transparent)]
struct Id(NonZeroU32);

// SAFETY: plain data without pointers; kernels only copy ids they were given.
unsafe impl um::DeviceCopy for Id {}

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let one = Id(NonZeroU32::MIN);
    let x = Managed::from_slice(&ctx, &[one; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        s.fill_zero(&mut x)?;
        x.sync().map(drop)
    })
}
