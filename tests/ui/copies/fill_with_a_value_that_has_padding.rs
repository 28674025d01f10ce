// Rule 256: a fill repeats the bytes of the value, read on the host, so the value has no padding
// (`NoUninit`): the padding bytes of a `#[repr(C)] { u8, u32 }` are uninitialised, and reading
// them is undefined. Expected: E0277, `Tagged: NoUninit` (through `Pod`) is not satisfied.
use um::{Context, Managed, StreamOptions};

#[derive(Clone, Copy)]
#[repr(C)]
struct Tagged {
    tag: u8,
    value: u32,
}

// SAFETY: plain data without pointers; any bytes a kernel writes are a `Tagged`.
unsafe impl um::DeviceCopy for Tagged {}

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let x = Managed::from_slice(&ctx, &[Tagged { tag: 0, value: 0 }; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        s.fill(&mut x, Tagged { tag: 1, value: 7 })?;
        x.sync().map(drop)
    })
}
