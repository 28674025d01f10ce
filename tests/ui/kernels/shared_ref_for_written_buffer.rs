// Rule: a buffer the kernel writes (a non-const pointer in its declaration) is passed as
// `&mut`, so no other reference to it can be alive during the launch.
// crates/um-test-kernels/kernels/testing.cu: `axpy(const float *x, float *y, float a, unsigned int n)` writes y.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn shared(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, y) = (x.attach(s)?, y.attach(s)?);
        testing::axpy(s, &x, &y, 2.0)?;
        s.sync_all((x, y)).map(drop)
    })
}

fn main() {
    let _ = shared;
}
