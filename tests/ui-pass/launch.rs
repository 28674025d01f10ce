// Twins of tests/ui/launch: every buffer of a launch is attached to the launch stream; a
// written buffer is passed as `&mut`, read ones as `&`.
use um::{Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn launch(ctx: &Context, axpy: &Kernel) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?;
    let (x, y) = ctx.with_stream(StreamOptions::new(), |a| {
        let (x, mut y) = (x.attach(a)?, y.attach(a)?);
        unsafe { a.launch(axpy, LaunchConfig::grid_1d(1, 256), (&x, &mut y, 2.0f32, 256u32)) }?;
        a.sync_all((x, y))
    })?;
    // The same memory may then move to another stream.
    ctx.with_stream(StreamOptions::new(), |b| {
        let (x, mut y) = (x.attach(b)?, y.attach(b)?);
        unsafe { b.launch(axpy, LaunchConfig::grid_1d(1, 256), (&x, &mut y, 2.0f32, 256u32)) }?;
        b.sync_all((x, y)).map(drop)
    })
}

fn main() {
    let _ = launch;
}
