// Rule: a buffer's element type is the kernel's: `add_scalar(float *data, ...)` takes
// `Managed<[f32]>`, so a buffer of 8-byte doubles (or of 1-byte integers, which the kernel
// would index 4 bytes at a time, past the allocation) does not compile.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn wrong_type(ctx: &Context) -> um::Result<()> {
    let bytes = Managed::from_slice(ctx, &[0u8; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut bytes = bytes.attach(s)?;
        testing::add_scalar(s, &mut bytes, 1.0)?;
        bytes.sync().map(drop)
    })
}

fn main() {
    let _ = wrong_type;
}
