// Rule 194: Two threads recording and waiting on one `StreamOrder` at once (the `recorded` Cell). Expected:
// E0277, `Cell<bool>` cannot be shared between threads (`StreamOrder: !Sync`).
use um::{Context, StreamOrder};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let order = StreamOrder::new(&ctx)?;
    std::thread::scope(|scope| {
        scope.spawn(|| ctx.with_per_thread_stream(|s| order.record(s)));
        ctx.with_per_thread_stream(|s| order.enqueue_wait(s))
    })
}
