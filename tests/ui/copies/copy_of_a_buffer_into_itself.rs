// Rule 254: a buffer a copy writes is no buffer it reads: the source is borrowed shared and the
// destination exclusively, so one buffer cannot be both (the driver's `cuMemcpyAsync` of
// overlapping ranges is undefined). Expected: E0502, `x` borrowed as mutable while borrowed as
// immutable.
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let x = Managed::from_slice(&ctx, &[1.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        s.copy(&x, &mut x)?;
        x.sync().map(drop)
    })
}
