// Rule: memory attached globally to the legacy stream (`attach_global`) is still owned by
// that scope's legacy stream: a kernel on another stream cannot take it, although the driver
// would let any stream's kernel touch globally attached memory.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn legacy_to_owned(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_legacy_stream(|legacy| {
        let mut data = data.attach_global(legacy)?;
        ctx.with_stream(StreamOptions::new(), |s| testing::add_scalar(s, &mut data, 1.0))?;
        data.sync().map(drop)
    })
}

fn main() {
    let _ = legacy_to_owned;
}
