// Rule: a kernel may only take memory that is attached to its stream; host-owned memory is the
// CPU's, and no kernel may see it.
// Seed 001 / 002: memory allocated with cudaMemAttachHost, or synced back, is not the
// stream's; a kernel touching it races with the CPU.
use um::{Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn host_owned(ctx: &Context, kernel: &Kernel) -> um::Result<()> {
    let mut data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        unsafe { s.launch(kernel, LaunchConfig::grid_1d(1, 256), (&mut data, 1.0f32, 256u32)) }
    })
}

fn main() {
    let _ = host_owned;
}
