// Rule: a kernel that writes a buffer takes it as `&mut`, so it cannot also be passed as an
// input of the same launch (the kernel's pointers would alias). Rust's borrow rules become the
// kernel's aliasing rules.
use um::{Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn aliased(ctx: &Context, axpy: &Kernel) -> um::Result<()> {
    let y = Managed::from_slice(ctx, &[2.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut y = y.attach(s)?;
        unsafe { s.launch(axpy, LaunchConfig::grid_1d(1, 256), (&y, &mut y, 2.0f32, 256u32)) }?;
        y.sync().map(drop)
    })
}

fn main() {
    let _ = aliased;
}
