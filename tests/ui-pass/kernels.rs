// Twins of tests/ui/kernels: buffers are attached to the launcher's stream; the written one is
// `&mut`. The legacy stream takes memory attached globally.
use um::kernels::streams;
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn launchers(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?;
    let (x, y) = ctx.with_stream(StreamOptions::new(), |s| {
        let (x, mut y) = (x.attach(s)?, y.attach(s)?);
        testing::axpy(s, &x, &mut y, 2.0)?;
        s.sync_all((x, y))
    })?;
    ctx.with_legacy_stream(|legacy| {
        let mut y = y.attach_global(legacy)?;
        streams::kernel(legacy, &mut y)?;
        streams::empty(legacy)?;
        drop(x);
        y.sync().map(drop)
    })
}

fn main() {
    let _ = launchers;
}

// Twins of `unsafe_launcher_outside_unsafe`, `three_dimensional_config_to_safe_launcher` and
// `forge_linear_geometry`: the unsafe launcher inside `unsafe` with its reason, the safe one
// with a `Linear` from its checked constructor.
fn geometry_and_unsafe(ctx: &Context) -> um::Result<()> {
    let x = Managed::<[f32]>::zeroed_slice(ctx, 4)?;
    let idx = Managed::from_slice(ctx, &[3u32, 2, 1, 0])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (mut x, idx) = (x.attach(s)?, idx.attach(s)?);
        testing::add_scalar_with(s, um::Linear::new(64, 1)?, &mut x, 1.0)?;
        // SAFETY: `idx` is a permutation of 0..4, the length of `x`, and the launch has 4
        // threads: each writes its own element.
        unsafe { testing::scatter(s, um::LaunchConfig::grid_1d(1, 4), &mut x, &idx, 1.0, 4)? };
        s.sync_all((x, idx)).map(drop)
    })
}

#[allow(dead_code)]
fn uses() {
    let _ = geometry_and_unsafe;
}
