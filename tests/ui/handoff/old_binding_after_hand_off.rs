// Rule: the handoff consumes the memory: the binding that named it on stream A cannot be used
// afterwards, neither for a launch on A nor for a second handoff.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn old_binding(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut on_a = data.attach(a)?;
            let on_b = on_a.hand_off(b)?;
            testing::add_scalar(a, &mut on_a, 1.0)?;
            on_b.sync().map(drop)
        })
    })
}

fn main() {
    let _ = old_binding;
}
