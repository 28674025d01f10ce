// Rule: memory attached to one stream may only be used by kernels launched into that stream.
// Seed 002: "Accessing memory on the device from streams that are not associated with it will
// produce undefined results. No error checking is performed". Here the brands of the two
// streams differ, so the launch does not type-check.
use um::{Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn other_stream(ctx: &Context, kernel: &Kernel) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut data = data.attach(a)?;
            unsafe { b.launch(kernel, LaunchConfig::grid_1d(1, 256), (&mut data, 1.0f32, 256u32)) }?;
            data.sync().map(drop)
        })
    })
}

fn main() {
    let _ = other_stream;
}
