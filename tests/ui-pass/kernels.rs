// Twins of tests/ui/kernels: buffers are attached to the launcher's stream; the written one is
// `&mut`. The legacy stream takes memory attached globally.
use um::kernels::{streams, testing};
use um::{Context, Managed, StreamOptions};

fn launchers(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?;
    let (x, y) = ctx.with_stream(StreamOptions::new(), |s| {
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        testing::axpy(s, &x, &mut y, 2.0)?;
        s.sync_all((x, y))
    })?;
    ctx.with_legacy_stream(|legacy| {
        let mut y = y.attach_global(legacy)?;
        streams::kernel(legacy, &mut y)?;
        streams::empty(legacy)?;
        drop(x);
        y.sync().map(drop)
    })
}

fn main() {
    let _ = launchers;
}
