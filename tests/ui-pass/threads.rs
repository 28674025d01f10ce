// Twins of tests/ui/threads: host-owned memory and created streams move between threads; memory
// synced back from the per-thread stream is host-owned and may move too; a created stream's
// buffer goes to a scoped thread, which ends before the stream's scope does.
use um::{Context, Managed, StreamOptions};

fn threads(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let data = ctx.with_per_thread_stream(|pts| data.attach(pts)?.sync())?;
    let data = std::thread::scope(|s| s.spawn(move || data).join()).expect("thread");
    // A host-owned buffer has no brand: even `std::thread::spawn`, whose thread may outlive
    // every scope, takes it (the twin of ui/threads/stream_owned_buffer_to_a_spawned_thread).
    let data = std::thread::spawn(move || data).join().expect("thread");
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream)?;
        std::thread::scope(|s| s.spawn(move || attached.sync().map(drop)).join())
            .expect("thread")?;
        std::thread::scope(|s| s.spawn(|| stream.wait_idle()).join()).expect("thread")
    })
}

fn main() {
    let _ = threads;
}
