// Rule: memory attached to the per-thread default stream stays on its thread.
// Seed 004: with per-thread default streams "each host thread" has "its own default stream";
// the handle CU_STREAM_PER_THREAD names a different stream on every thread, so another thread
// could neither sync it nor launch on the right stream.
use um::{Context, Managed};

fn send(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_per_thread_stream(|pts| {
        let attached = data.attach(pts)?;
        std::thread::scope(|s| {
            s.spawn(move || drop(attached));
        });
        Ok(())
    })
}

fn main() {
    let _ = send;
}
