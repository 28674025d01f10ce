// Rule 105 (rule 8 for coherent memory): a host-owned coherent buffer is not a kernel
// argument. The driver would accept it (the memory is globally attached), and the kernel would
// then race with the CPU, which owns it.
use um::{Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn host_owned(ctx: &Context, kernel: &Kernel) -> um::Result<()> {
    let mut data = Managed::from_slice_coherent(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        unsafe { stream.launch(kernel, LaunchConfig::grid_1d(1, 256), (&mut data, 1.0f32, 256u32)) }?;
        um_test_kernels::testing::add_scalar(stream, &mut data, 1.0)
    })
}

fn main() {
    let _ = host_owned;
}
