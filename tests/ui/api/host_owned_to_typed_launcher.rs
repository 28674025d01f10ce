// A common mistake: passing host-owned buffers to a typed launcher (rule
// 8: a kernel may not see memory the CPU owns). Kept as a type mismatch (E0308): the launcher's
// parameters are the concrete `&Managed<[f32], StreamOwned<'s, K>, M>` / `&mut ...`, so the
// message shows `HostOwned` where `StreamOwned` is expected. A trait-shaped parameter with its
// own message was tried and not adopted (docs/design.md). The fix:
// `let x = x.attach(stream)?;` for each buffer.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn launch(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let mut y = Managed::from_slice(ctx, &[2.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| testing::axpy(s, &x, &mut y, 2.0))
}

fn main() {
    let _ = launch;
}
