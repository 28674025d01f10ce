// Twins of tests/ui/sync: the memory `sync` returns is used; one wait serves several buffers of
// one stream.
#![deny(unused_must_use)]
use um::{Context, Managed, StreamOptions};

fn sync(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let y = Managed::from_slice(ctx, &[4u32, 5, 6])?;
    let (x, y) = ctx.with_stream(StreamOptions::new(), |a| {
        let (x, y) = (x.attach(a)?, y.attach(a)?);
        a.sync_all((x, y))
    })?;
    let v = ctx.with_stream(StreamOptions::new(), |a| {
        let v = vec![x.attach(a)?, y.attach(a)?];
        a.sync_all(v)
    })?;
    println!("{}", v[0][0] + v[1][0]);
    Ok(())
}

fn main() {
    let _ = sync;
}
