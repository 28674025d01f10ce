// Poll a per-thread sync future on another thread.
use um::{Context, Managed};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    ctx.with_per_thread_stream(|p| {
        let fut = data.attach(p)?.sync_async();
        std::thread::scope(|t| t.spawn(move || pollster::block_on(fut).map(drop)).join().unwrap())
    })
}
fn main() { let _ = f; }
