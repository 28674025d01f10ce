// Hand the per-thread stream itself to another thread and attach there.
use um::{Context, Managed};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    ctx.with_per_thread_stream(|p| {
        std::thread::scope(|t| {
            t.spawn(|| data.attach(p)?.sync().map(drop)).join().unwrap()
        })
    })
}
fn main() { let _ = f; }
