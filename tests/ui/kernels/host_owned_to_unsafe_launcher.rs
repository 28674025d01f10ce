// Rule: an `unsafe` launcher still checks its buffers' types: host-owned memory is refused
// even inside `unsafe`, because the CPU may be using it (seed 001).
use um_test_kernels::testing;
use um::{Context, LaunchConfig, Managed, StreamOptions};

fn host_owned(ctx: &Context) -> um::Result<()> {
    let mut x = Managed::<[f32]>::zeroed_slice(ctx, 4)?;
    let idx = Managed::from_slice(ctx, &[3u32, 2, 1, 0])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let idx = idx.attach(s)?;
        // SAFETY: (would be) idx is a permutation of 0..4.
        unsafe { testing::scatter(s, LaunchConfig::grid_1d(1, 4), &mut x, &idx, 1.0, 4)? };
        idx.sync().map(drop)
    })
}

fn main() {
    let _ = host_owned;
}
