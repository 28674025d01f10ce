// Rule: a generated launcher takes a buffer the kernel writes as `&mut`, so the same buffer
// cannot also be its read-only input: `axpy(x, y)` with x = y would read what other threads
// of the same launch are writing.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn aliased(ctx: &Context) -> um::Result<()> {
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut y = y.attach(s)?;
        testing::axpy(s, &y, &mut y, 2.0)?;
        y.sync().map(drop)
    })
}

fn main() {
    let _ = aliased;
}
