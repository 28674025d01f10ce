// Rule: no conversion makes a `Linear` out of a 3-D `LaunchConfig`: the only way from the
// unchecked launch type to the safe one would be one that forgets the y and z extents (or
// the dynamic shared memory) it was written for.
use um_test_kernels::testing;
use um::{Context, LaunchConfig, Managed, StreamOptions};

fn converted(ctx: &Context) -> um::Result<()> {
    let a = Managed::<[f32]>::zeroed_slice(ctx, 32)?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut a = a.attach(s)?;
        let racing = LaunchConfig { grid: (1, 64, 1), block: (1, 1, 1), shared_mem_bytes: 0 };
        testing::add_scalar_with(s, racing.into(), &mut a, 1.0)?;
        a.sync().map(drop)
    })
}

fn main() {
    let _ = converted;
}
