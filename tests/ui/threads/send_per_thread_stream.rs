// Rule: the per-thread default stream handle may not be used from another thread.
// Seed 004: "it gives each host thread its own default stream"; used on another thread the
// same handle names that thread's stream instead.
use um::Context;

fn share(ctx: &Context) -> um::Result<()> {
    ctx.with_per_thread_stream(|pts| {
        std::thread::scope(|s| {
            s.spawn(|| pts.wait_idle());
        });
        Ok(())
    })
}

fn main() {
    let _ = share;
}
