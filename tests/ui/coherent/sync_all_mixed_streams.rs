// Rule 105 (rule 18 with every storage): `sync_all` takes buffers of its own stream only: a
// coherent buffer of stream `b` is not given back by a wait for stream `a`.
use um::{Context, Managed, StreamOptions};

fn mixed(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice_mirrored(ctx, &[1u32, 2, 3])?;
    let y = Managed::from_slice_coherent(ctx, &[4u32, 5, 6])?;
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
