// Rule 8 for mirrored memory: a host-owned mirror is not a kernel argument: its device half
// holds whatever the last copy left there, not what the host wrote since.
use um::{Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn host_owned(ctx: &Context, kernel: &Kernel) -> um::Result<()> {
    let mut data = Managed::from_slice_mirrored(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        unsafe { stream.launch(kernel, LaunchConfig::grid_1d(1, 256), (&mut data, 1.0f32, 256u32)) }?;
        um_test_kernels::testing::add_scalar(stream, &mut data, 1.0)
    })
}

fn main() {
    let _ = host_owned;
}
