// Rule 255: source and destination hold one element type, so equal lengths are equal byte
// counts: a copy of 4 `u16`s into 4 `u64`s (or the reverse) would read or write past a buffer.
// Expected: E0308, `Managed<[u64], ..>` where `Managed<[u16], ..>` is expected.
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let x = Managed::from_slice(&ctx, &[1u16; 4])?;
    let y = Managed::from_slice(&ctx, &[0u64; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        s.copy(&x, &mut y)?;
        s.sync_all((x, y)).map(drop)
    })
}
