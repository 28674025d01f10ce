// Rule 105 (rule 15 for coherent memory): a coherent buffer attached to the per-thread default
// stream stays on its thread: its `sync` waits for the calling thread's per-thread stream.
use um::{Context, Managed};

fn send(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_coherent(ctx, &[1u32, 2, 3])?;
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
