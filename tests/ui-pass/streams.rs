// Twin of tests/ui/streams: memory is attached to an owned or per-thread stream; the legacy
// default stream still runs kernels that take no attached memory.
use um::{Context, Kernel, LaunchConfig, Managed, StreamOptions};

fn streams(ctx: &Context, kernel: &Kernel) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let data = ctx.with_stream(StreamOptions::new().non_blocking().priority(-1), |s| {
        data.attach(s)?.sync()
    })?;
    let data = ctx.with_per_thread_stream(|pts| data.attach(pts)?.sync())?;
    ctx.with_legacy_stream(|legacy| unsafe {
        legacy.launch(kernel, LaunchConfig::grid_1d(1, 1), (0u64, 0i32))
    })?;
    drop(data);
    Ok(())
}

fn main() {
    let _ = streams;
}
