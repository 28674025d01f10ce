// Twins of tests/ui/threads: host-owned memory and created streams move between threads; memory
// synced back from the per-thread stream is host-owned and may move too.
use um::{Context, Managed, StreamOptions};

fn threads(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let data = ctx.with_per_thread_stream(|pts| data.attach(pts)?.sync())?;
    let data = std::thread::scope(|s| s.spawn(move || data).join()).expect("thread");
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
