// Rule 242: a buffer born on the per-thread default stream is freed, at its drop, on
// `CU_STREAM_PER_THREAD`, which names another stream on every thread: dropped on another thread,
// its free would be ordered after none of the kernels that use it. It cannot leave its thread
// (`StreamOwned<'s, PerThread>` is not `Send`).
use um::{Context, MemPool};

fn scratch(ctx: &Context, pool: &MemPool) -> um::Result<()> {
    ctx.with_per_thread_stream(|p| {
        let x = p.alloc_zeroed::<f32>(pool, 1024)?;
        std::thread::scope(|t| {
            t.spawn(move || drop(x));
        });
        Ok(())
    })
}

fn main() {
    let _ = scratch;
}
