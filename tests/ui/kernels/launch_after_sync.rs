// Rule: `sync` gives the memory back to the CPU by value, so the stream-owned handle is gone:
// no kernel can be launched on memory the CPU may be using.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn after_sync(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut data = data.attach(s)?;
        let host = data.sync()?;
        testing::add_scalar(s, &mut data, 1.0)?;
        drop(host);
        Ok(())
    })
}

fn main() {
    let _ = after_sync;
}
