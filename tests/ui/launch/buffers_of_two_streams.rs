// Rule: one launch runs on one stream, so every buffer it takes must belong to that stream.
// Seed 001: "the program makes a guarantee that only kernels launched into that stream will
// touch that data". Buffers of streams `a` and `b` carry different brands.
use um::{Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn mixed(ctx: &Context, axpy: &Kernel) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let x = x.attach(a)?;
            let mut y = y.attach(b)?;
            unsafe { a.launch(axpy, LaunchConfig::grid_1d(1, 256), (&x, &mut y, 2.0f32, 256u32)) }?;
            drop((x, y));
            Ok(())
        })
    })
}

fn main() {
    let _ = mixed;
}
