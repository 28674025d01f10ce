// Rule 102 (rule 61 for coherent memory): after `hand_off` from stream A to stream B only B's
// kernels may use a coherent buffer. The handoff moved no driver association (the memory stays
// global); it recorded A's event for B to wait on. A kernel on A after it would race with B's,
// so the buffer carries B's brand and a launch on A does not type-check.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn old_stream(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_coherent(ctx, &[1.0f32; 256])?;
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
