// A safe typed launcher on the inner stream with a buffer of the outer stream.
use um::{Context, Managed, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        let mut d = data.attach(a)?;
        ctx.with_stream(StreamOptions::new(), |b| um_test_kernels::testing::add_scalar(b, &mut d, 1.0))?;
        d.sync().map(drop)
    })
}
fn main() { let _ = f; }
