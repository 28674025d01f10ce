// Let a safe kernel write bytes into a Rust type with invalid bit patterns (bool).
use um::{Context, Managed, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[false; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut d = data.attach(s)?;
        um_test_kernels::testing::add_scalar(s, &mut d, 1.0)?;
        d.sync().map(drop)
    })
}
fn main() { let _ = f; }
