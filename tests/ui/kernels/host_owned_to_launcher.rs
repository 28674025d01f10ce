// Rule: a typed launcher takes only memory owned by its stream; host-owned memory must be
// attached first.
// Seed 001: kernels touch memory associated with their stream; the CPU owns host-attached
// memory until it is attached.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn host_owned(ctx: &Context) -> um::Result<()> {
    let mut data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| testing::add_scalar(s, &mut data, 1.0))
}

fn main() {
    let _ = host_owned;
}
