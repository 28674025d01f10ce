// Sync per-thread memory on another thread, where CU_STREAM_PER_THREAD names another stream.
use um::{Context, Managed};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    ctx.with_per_thread_stream(|p| {
        let d = data.attach(p)?;
        std::thread::scope(|t| {
            t.spawn(move || d.sync().map(drop)).join().unwrap()
        })
    })
}
fn main() { let _ = f; }
