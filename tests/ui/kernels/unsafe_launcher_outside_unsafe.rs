// Rule: a kernel that is not declared `UM_SAFE_KERNEL` gets an `unsafe fn` launcher: um cannot
// see whether its body stays in bounds and race-free (here: wherever `idx` points), so calling
// it is the caller's promise, written `unsafe { .. }` with a `// SAFETY:` reason.
// docs/kernels.md, "unsafe launchers".
use um_test_kernels::testing;
use um::{Context, LaunchConfig, Managed, StreamOptions};

fn no_unsafe(ctx: &Context) -> um::Result<()> {
    let x = Managed::<[f32]>::zeroed_slice(ctx, 4)?;
    let idx = Managed::from_slice(ctx, &[3u32, 2, 1, 0])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (mut x, idx) = (x.attach(s)?, idx.attach(s)?);
        testing::scatter(s, LaunchConfig::grid_1d(1, 4), &mut x, &idx, 1.0, 4)?;
        s.sync_all((x, idx)).map(drop)
    })
}

fn main() {
    let _ = no_unsafe;
}
