// Rule 18 with both storages: `sync_all` takes buffers of its own stream only, whatever their
// storage.
use um::{Context, Managed, StreamOptions};

fn mixed(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let y = Managed::from_slice_mirrored(ctx, &[4u32, 5, 6])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let (x, y) = (x.attach(a)?, y.attach(b)?);
            a.sync_all((x, y)).map(drop)
        })
    })
}

fn main() {
    let _ = mixed;
}
