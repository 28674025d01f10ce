// Rule 7 with both storages: one launch runs on one stream, so a unified buffer of one stream
// and a mirrored buffer of another cannot meet in it.
use um::{Context, Managed, StreamOptions};

fn mixed(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice_mirrored(ctx, &[2.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let (x, mut y) = (x.attach(a)?, y.attach(b)?);
            um_test_kernels::testing::axpy(a, &x, &mut y, 2.0)?;
            b.sync_all((y,)).map(drop)?;
            a.sync_all((x,)).map(drop)
        })
    })
}

fn main() {
    let _ = mixed;
}
