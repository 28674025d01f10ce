// Rule: a safe launcher takes only a one-dimensional launch (`Linear`). Under a grid or block
// with a y or z extent, several threads of a kernel that indexes with
// `blockIdx.x * blockDim.x + threadIdx.x` share an index and race on it: a
// `grid: (1, 64, 1)` on `add_scalar` returns wrong sums (seen on an H200). That configuration is a
// `LaunchConfig`, which only `unsafe` launches take.
use um_test_kernels::testing;
use um::{Context, LaunchConfig, Managed, StreamOptions};

fn racing_grid(ctx: &Context) -> um::Result<()> {
    let a = Managed::<[f32]>::zeroed_slice(ctx, 32)?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut a = a.attach(s)?;
        let racing = LaunchConfig { grid: (1, 64, 1), block: (1, 1, 1), shared_mem_bytes: 0 };
        testing::add_scalar_with(s, racing, &mut a, 1.0)?;
        a.sync().map(drop)
    })
}

fn main() {
    let _ = racing_grid;
}
