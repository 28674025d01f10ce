// Rule 254: a fill writes on the device, so only a buffer its stream owns: a host-owned buffer
// is the CPU's and must be attached first. Expected: E0308, `HostOwned` where `StreamOwned` is
// expected.
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let mut x = Managed::from_slice(&ctx, &[0u32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        s.fill(&mut x, 7u32)?;
        Ok(())
    })?;
    println!("{}", x[0]);
    Ok(())
}
