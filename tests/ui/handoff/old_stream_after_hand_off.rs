// Rule: after a handoff from stream A to stream B, only kernels on B may use the memory.
// Seed 002: "Accessing memory on the device from streams that are not associated with it will
// produce undefined results." `hand_off` retypes the memory to B's brand, so a launch on A
// that names it does not type-check.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn old_stream(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut data = data.attach(a)?;
            testing::add_scalar(a, &mut data, 1.0)?;
            let mut data = data.hand_off(b)?;
            testing::add_scalar(a, &mut data, 1.0)?; // A no longer owns it
            data.sync().map(drop)
        })
    })
}

fn main() {
    let _ = old_stream;
}
