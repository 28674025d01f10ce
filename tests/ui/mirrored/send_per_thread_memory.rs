// Rule 15 for mirrored memory: a mirror attached to the per-thread default stream stays on its
// thread (its copies are enqueued on that thread's stream).
use um::{Context, Managed};

fn send(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1u32, 2, 3])?;
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
